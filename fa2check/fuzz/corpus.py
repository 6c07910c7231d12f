"""Counterexamples and the regression corpus. Every counterexample `python -m fa2check.fuzz`
finds is saved as one JSON file in the directory its --out names (default: OUT_DIR, outside
the source tree, so that fuzzing never changes the project). The regression corpus,
tests/regressions/, holds the ones added to it on purpose (`python -m fa2check.fuzz
--add-to-corpus FILE`); `make test` replays them all (tests/test_regressions.py), so nothing
added there is lost.

An entry records the example (variant, problem with its seed, distribution, layout), the
implementation it failed (`impl`, MODULE:FUNC), the checks that were run and the ones that
failed, the message, and where and when it was found (date, device, git commit, command).

Replay means: run the example through OUR kernels (kernels:flash_attention, with the entry's
variant) and require every replayed check to pass, whichever implementation the entry failed.
A counterexample found in another implementation (a modified copy of a kernel, a planted test
double) is an input that once broke a FlashAttention kernel, so ours must handle it; one found
in ours fails `make test` until the kernels are fixed. The replayed checks are the ones that
failed plus every other check that was run. An entry may carry "known_open": "reason" for a bug
in our kernels that is accepted as open for now; its replay is then a strict xfail (it must
still fail, so the entry is noticed when the bug is fixed).
"""
from __future__ import annotations

import datetime
import hashlib
import json
import os
import shlex

from properties.strategies import Example

from ..core.environment import ROOT, git_commit, kernels_sha256
from ..core.implementations import OURS
from .fuzzer import DEFAULT_CHECKS, ExampleReport, check_example

CORPUS_DIR = os.path.join(ROOT, "tests", "regressions")


def out_dir() -> str:
    """Where the fuzzer saves counterexamples unless --out says otherwise: the user's data
    directory ($XDG_DATA_HOME, else ~/.local/share), fa2check/counterexamples."""
    data = os.environ.get("XDG_DATA_HOME") or os.path.join(os.path.expanduser("~"), ".local",
                                                           "share")
    return os.path.join(data, "fa2check", "counterexamples")


def entry(report: ExampleReport, impl: str, checks, device: str, command: str,
          layout: str = "bhsd") -> dict:
    return {
        "example": report.example.as_dict(),
        "impl": impl,
        **({"layout": layout} if layout != "bhsd" else {}),
        "failed": report.failed_checks,  # names of fa2check.fuzz.fuzzer.CHECKS ('runs': it raised)
        "checks": list(checks),
        "message": report.message,
        "numbers": {c.name: c.numbers for c in report.checks if not c.passed},
        "found": {
            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "device": device, "git_commit": git_commit(), "kernels_sha256": kernels_sha256(),
            "command": command,
        },
    }


def file_name(impl: str, example: Example) -> str:
    digest = hashlib.sha1(f"{impl} {example}".encode()).hexdigest()[:10]
    return f"{impl.replace(':', '.').replace('/', '.')}-{digest}.json"


def save(data: dict, directory: str) -> str:
    """Write the entry into `directory` (once: the same implementation and example keep their
    first file)."""
    os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, file_name(data["impl"], Example.from_dict(data["example"])))
    if not os.path.exists(path):
        with open(path, "w") as f:
            json.dump(data, f, indent=1, allow_nan=True, default=str)
            f.write("\n")
    return path


def add(path: str, directory: str = CORPUS_DIR) -> str:
    """Add a saved counterexample (a file the fuzzer wrote) to the regression corpus."""
    with open(path) as f:
        data = json.load(f)
    if not isinstance(data, dict) or not {"example", "impl", "failed", "checks"} <= set(data):
        raise ValueError(f"{path} is not a counterexample saved by python -m fa2check.fuzz")
    Example.from_dict(data["example"])  # it must parse
    return save(data, directory)


def load(directory: str = CORPUS_DIR) -> list[tuple[str, dict]]:
    if not os.path.isdir(directory):
        return []
    out = []
    for name in sorted(os.listdir(directory)):
        if name.endswith(".json"):
            path = os.path.join(directory, name)
            with open(path) as f:
                out.append((path, json.load(f)))
    return out


def examples(directory: str = CORPUS_DIR) -> list[Example]:
    """The corpus's examples (those of bugs accepted as open left out), each once."""
    return list(dict.fromkeys(Example.from_dict(data["example"]) for _, data in load(directory)
                              if not data.get("known_open")))


def replay_checks(data: dict) -> tuple[str, ...]:
    """What failed, and every other check that was run."""
    failed = [c for c in data["failed"] if c != "runs"]
    return tuple(dict.fromkeys(list(data["checks"]) + failed))


def replay(data: dict, device: str, impl=None) -> ExampleReport:
    """Run the entry's example through `impl` (default: our kernels) with replay_checks."""
    if impl is None:
        from kernels import flash_attention as impl
    return check_example(impl, Example.from_dict(data["example"]), device, replay_checks(data))


def command(impl: str, example: Example, checks=DEFAULT_CHECKS, layout: str = "bhsd") -> str:
    """The one-line command that reruns this example alone with these checks."""
    args = ["python", "-m", "fa2check.fuzz"]
    if impl != OURS:
        args.append(f"--impl={impl}")
    if layout != "bhsd":
        args.append(f"--layout={layout}")
    args.append(f"--replay={example}")
    args += [f"--check={c}" for c in checks if c not in DEFAULT_CHECKS]
    args += [f"--skip-check={c}" for c in DEFAULT_CHECKS if c not in checks]
    return " ".join(shlex.quote(a) for a in args)


def snippet(impl: str, example: Example, checks=DEFAULT_CHECKS, device: str = "cpu",
            layout: str = "bhsd") -> str:
    """A few lines of Python that rerun the example and keep its tensors at hand."""
    module, _, name = impl.partition(":")
    extra = "" if tuple(checks) == tuple(DEFAULT_CHECKS) else f", checks={tuple(checks)!r}"
    extra += "" if layout == "bhsd" else f", layout={layout!r}"
    return "\n".join([
        "from fa2check.core.environment import select_device",
        "device = select_device()  # before triton is imported",
        "from fa2check.fuzz.fuzzer import check_example",
        "from properties.strategies import Example",
        f"from {module} import {name} as impl",
        f"example = Example.parse({str(example)!r})",
        "q, k, v, do = example.inputs(device)  # the tensors, to look at",
        f"report = check_example(impl, example, device{extra})",
        "assert report.passed, report.message",
    ])
