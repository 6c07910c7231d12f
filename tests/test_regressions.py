"""Replay the regression corpus (tests/regressions/*.json): every counterexample that
`python -m fa2check.fuzz` has found, in our kernels or in any other implementation, must pass
through our kernels (fa2check/fuzz/corpus.py says what replay means). An entry marked "known_open"
is a bug of ours accepted as open: its replay is a strict xfail."""
import os

import pytest

from fa2check.fuzz import corpus
from fa2check.fuzz.fuzzer import CHECKS
from fa2check.core.implementations import OURS
from properties.strategies import Example

ENTRIES = corpus.load()


@pytest.mark.parametrize("path,entry", ENTRIES, ids=[os.path.basename(p) for p, _ in ENTRIES])
def test_replay_against_our_kernels(path, entry, device, request):
    if entry.get("known_open"):
        request.applymarker(pytest.mark.xfail(strict=True, reason=entry["known_open"]))
    report = corpus.replay(entry, device)
    example = Example.from_dict(entry["example"])
    assert report.passed, (f"{os.path.basename(path)} (found in {entry['impl']}): {report.message}"
                           f"\n  {corpus.command(OURS, example, corpus.replay_checks(entry))}")


@pytest.mark.parametrize("path,entry", ENTRIES, ids=[os.path.basename(p) for p, _ in ENTRIES])
def test_entry_is_complete(path, entry):
    example = Example.from_dict(entry["example"])
    assert entry["example"]["id"] == str(example) == str(Example.parse(str(example)))
    assert ":" in entry["impl"] and entry["failed"] and entry["message"]
    assert set(entry["checks"]) <= set(CHECKS) and entry["found"]["date"]
    assert os.path.basename(path) == corpus.file_name(entry["impl"], example)
