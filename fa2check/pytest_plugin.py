"""fa2check inside a kernel author's own test suite (a pytest plugin, registered by the
`pytest11` entry point in pyproject.toml):

    def test_my_kernel(fa2check):                    # one subtest per (property, case)
        fa2check.verify("mypkg:attention", tier="quick", layout="bshd")

    pytest --fa2check-impl mypkg:attention [--fa2check-layout bshd] [--fa2check-tier quick]
                                                     # one test item per (property, case)

Each (property, case) passes, fails with what was expected and what came out and the command
that reproduces it alone, or is skipped as n/a with the implementation's own words (it raised
NotImplementedError or fa2check.Unsupported, or the property needs lse and it returns none).
Cases run one after another in the pytest process (verify's runner, fa2check.verify.runner).
It lives beside the layers (pyproject.toml's contract), a front end of verify's.

Importing this module imports nothing but pytest: it is loaded in every pytest run of an
environment that has fa2check, and Triton reads TRITON_INTERPRET when it is first imported
(fa2check.core.environment.select_device sets it on a machine without a GPU, at the first use).
"""
from __future__ import annotations

import pytest

DEFAULT_TIER = None  # the verify default: full with a GPU, quick without


def pytest_addoption(parser):
    group = parser.getgroup("fa2check", "fa2check: verify a FlashAttention implementation")
    group.addoption("--fa2check-impl", action="append", default=[], metavar="MODULE:FUNC",
                    help="verify this implementation: one test per (property, case)")
    group.addoption("--fa2check-tier", default=DEFAULT_TIER, choices=("quick", "full"),
                    help="default: full with a GPU, quick without")
    group.addoption("--fa2check-layout", default="bhsd", choices=("bhsd", "bshd"),
                    help="the layout the implementation takes (fa2check.core.calling)")
    group.addoption("--fa2check-property", action="append", default=None, metavar="NAME",
                    help="only this property (repeatable)")


class Verifier:
    """The `fa2check` fixture: `verify(impl, ...)` runs every (property, case) on `impl`."""

    def __init__(self, request):
        self._request = request

    def verify(self, impl: str, tier: str | None = None, layout: str = "bhsd",
               properties=None, variant: str | None = None, forward_only: bool = False):
        """Verify `impl` (MODULE:FUNC) on the tier's cases; each (property, case) a subtest
        where pytest has them (pytest >= 9), else one failure listing every failed case.
        Returns the records (verify's --json results)."""
        tasks, device, tier = plan(impl, tier, layout, properties, variant, forward_only)
        subtests = _subtests(self._request)
        records, failed = [], []
        for task in tasks:
            record = run(task, device, tier, forward_only)
            records.append(record)
            if subtests is None:
                if record["status"] in ("fail", "error"):
                    failed.append(words(record))
                continue
            with subtests.test(msg=test_name(task)):
                judge(record)
        if failed:
            pytest.fail(f"fa2check: {len(failed)} of {len(tasks)} cases failed\n\n"
                        + "\n\n".join(failed), pytrace=False)
        return records


@pytest.fixture
def fa2check(request) -> Verifier:
    """fa2check.verify("mypkg:attention", tier="quick") checks a FlashAttention implementation
    with every property of `python -m fa2check.verify`."""
    return Verifier(request)


def plan(impl, tier, layout, properties, variant, forward_only):
    """(tasks, device, tier) of verify's runner for one implementation."""
    from fa2check.core.environment import select_device

    device = select_device()  # TRITON_INTERPRET before triton is imported

    from fa2check.core.implementations import columns
    from fa2check.verify import runner

    tier = tier or ("full" if device == "cuda" else "quick")
    cols = columns([impl], [variant] if variant else None, layout)
    return runner.plan(tier, cols, properties, None, 0, forward_only), device, tier


def run(task, device, tier, forward_only=False) -> dict:
    from fa2check.verify import runner, verdicts

    record = runner.run_task(task, device)
    record["reproduce"] = verdicts.reproduce(record, tier, 0, forward_only)
    return record


def test_name(task) -> str:
    return f"{task.property}[{task.case.id}]" + (
        f"[{task.column.label}]" if task.column.variant and task.column.ours else "")


def words(record: dict) -> str:
    """A failed record as the failure message: what failed, the fix where there is one, and
    the command that reproduces it."""
    head = "raised " if record["status"] == "error" else ""
    fix = f"\nfix: {record['fix']}" if record.get("fix") else ""
    return (f"{record['property']} {record['case']['id']}: {head}{record['message']}{fix}\n"
            f"reproduce: {record['reproduce']}")


def judge(record: dict):
    """Pass, fail with `words`, or skip as n/a with the implementation's words."""
    if record["status"] == "unsupported":
        pytest.skip(f"n/a: {record['message']}")
    if record["status"] in ("fail", "error"):
        pytest.fail(words(record), pytrace=False)


def _subtests(request):
    try:
        return request.getfixturevalue("subtests")
    except pytest.FixtureLookupError:
        return None


class CaseItem(pytest.Item):
    """One (property, case) of `--fa2check-impl`."""

    def __init__(self, *, task, device, tier, **kwargs):
        super().__init__(**kwargs)
        self.task, self.device, self.tier = task, device, tier

    def runtest(self):
        judge(run(self.task, self.device, self.tier))

    def reportinfo(self):
        return "fa2check", None, f"fa2check {self.task.column.impl} {self.name}"


def pytest_collection_modifyitems(session, config, items):
    specs = config.getoption("fa2check_impl")
    for spec in specs:
        tasks, device, tier = plan(spec, config.getoption("fa2check_tier"),
                                   config.getoption("fa2check_layout"),
                                   config.getoption("fa2check_property"), None, False)
        items += [CaseItem.from_parent(session, name=f"{spec}::{test_name(task)}",
                                       nodeid=f"fa2check::{spec}::{test_name(task)}",
                                       task=task, device=device, tier=tier) for task in tasks]
