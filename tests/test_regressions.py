"""Replay the regression corpus (tests/regressions/*.json): every counterexample that
`python -m fa2check.fuzz` has found, in our kernels or in any other implementation, must pass
through our kernels (fa2check/fuzz/corpus.py says what replay means). An entry marked "known_open"
is a bug of ours accepted as open: its replay is a strict xfail where it reproduces
("known_open_devices"). On a GPU the corpus is replayed through our other backends too."""
import os

import pytest

from fa2check.fuzz import corpus
from fa2check.fuzz.fuzzer import CHECKS
from fa2check.core.implementations import GLUON, HOPPER, OURS, Column, Unsupported
from properties.strategies import Example

ENTRIES = corpus.load()


def mark_known_open(entry, device, request):
    """A bug accepted as open is a strict xfail where it reproduces (its `known_open_devices`,
    default every device) and a non-strict one elsewhere (a float32 cancellation may depend on
    the order of a sum)."""
    if entry.get("known_open"):
        strict = device in entry.get("known_open_devices", [device])
        request.applymarker(pytest.mark.xfail(strict=strict, reason=entry["known_open"]))


@pytest.mark.parametrize("path,entry", ENTRIES, ids=[os.path.basename(p) for p, _ in ENTRIES])
def test_replay_against_our_kernels(path, entry, device, request):
    mark_known_open(entry, device, request)
    report = corpus.replay(entry, device)
    example = Example.from_dict(entry["example"])
    assert report.passed, (f"{os.path.basename(path)} (found in {entry['impl']}): {report.message}"
                           f"\n  {corpus.command(OURS, example, corpus.replay_checks(entry))}")


BACKENDS = {"gluon": GLUON, "hopper": HOPPER}  # our other backends (the GPU runs them)


@pytest.mark.gpu
@pytest.mark.parametrize("backend", sorted(BACKENDS))
@pytest.mark.parametrize("path,entry", ENTRIES, ids=[os.path.basename(p) for p, _ in ENTRIES])
def test_replay_against_every_backend(path, entry, backend, device, request):
    """The corpus through the Gluon forward and the Hopper chassis too (forward and, where it
    takes the call, backward), each variant of the entry; an example outside a backend's domain
    (dtype, head_dim) is skipped with the backend's own words."""
    mark_known_open(entry, device, request)
    impl = Column(BACKENDS[backend], "", backend).load()
    try:
        report = corpus.replay(entry, device, impl)
    except Unsupported as why:
        pytest.skip(f"{backend}: {why}")
    example = Example.from_dict(entry["example"])
    assert report.passed, (f"{os.path.basename(path)} on {backend}: {report.message}\n  "
                           f"{corpus.command(BACKENDS[backend], example, corpus.replay_checks(entry))}")


@pytest.mark.parametrize("path,entry", ENTRIES, ids=[os.path.basename(p) for p, _ in ENTRIES])
def test_entry_is_complete(path, entry):
    example = Example.from_dict(entry["example"])
    assert entry["example"]["id"] == str(example) == str(Example.parse(str(example)))
    assert ":" in entry["impl"] and entry["failed"] and entry["message"]
    assert set(entry["checks"]) <= set(CHECKS) and entry["found"]["date"]
    assert os.path.basename(path) == corpus.file_name(entry["impl"], example)
