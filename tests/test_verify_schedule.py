"""fa2check.verify.runner's Schedule: on the GPU the compile jobs go first and the cases run
beside the last of them, a group starting once the jobs of its kernels have finished, and never
before (then its worker would compile them again)."""
import os

import pytest

from fa2check.core import compiling, shared_memo
from fa2check.core.implementations import columns, default_specs
from fa2check.verify import precompile
from fa2check.verify.runner import (Schedule, _execute_in_workers, _needs, execute, groups,
                                    jobs_before_cases, plan, shared_directory)
from properties import PROPERTIES
from properties.base import calls


def _drive(schedule, workers=2):
    """Run `schedule` with `workers` slots, finishing the oldest item first; returns the order
    in which items started and, for each group, the compile jobs finished before it started."""
    started, running, finished = [], [], set()
    while True:
        while len(running) < workers and (item := schedule.take()):
            started.append((item, frozenset(finished)))
            running.append(item)
        if not running:
            return started
        kind, what = running.pop(0)
        if kind == "job":
            finished.add(what)
            schedule.finished(what)


def _check(schedule, needs_of):
    started = _drive(schedule)
    for (kind, what), finished in started:
        if kind == "group":
            assert needs_of[what[0]] <= finished, f"group {what} started before its compiles"
    return [item for item, _ in started]


def test_groups_start_after_their_compiles_and_once_no_job_is_left():
    needs_of = {"a": {0}, "b": {2}, "c": set(), "d": {0, 1, 2}}
    order = _check(Schedule(3, [([name], needs) for name, needs in needs_of.items()]),
                   needs_of)
    assert [what for kind, what in order if kind == "job"] == [0, 1, 2]  # in their order
    assert order[:3] == [("job", 0), ("job", 1), ("job", 2)]  # every job before any group
    assert order[3] == ("group", ["c"])  # then the groups, as they became ready
    assert len(order) == 7


def test_the_check_catches_a_schedule_that_ignores_what_a_group_needs():
    class Eager(Schedule):  # a planted bug: every group is ready at once
        def _promote(self):
            self._ready += [group for group, _ in self._waiting]
            self._waiting = []

    needs_of = {"a": {1}}
    with pytest.raises(AssertionError, match="before its compiles"):
        _check(Eager(2, [(["a"], {1})]), needs_of)


def test_on_the_gpu_each_group_waits_for_the_jobs_of_its_own_tasks():
    tasks = plan("full", columns(default_specs("cuda"), None))
    before = jobs_before_cases(tasks)
    keys = [key for key, _ in before]
    assert len(keys) == len(set(keys))
    prepared = [key for key in keys if key[0] == "prepare"]
    assert {name for _, name, _ in prepared} == {"lse_bounds"}  # its mpmath rows, once a case
    assert len(prepared) == len(PROPERTIES["lse_bounds"].CASES["full"])
    assert keys[len(prepared):] == [compiling.compile_class(*job[0])
                                    for job in precompile.jobs(tasks)]
    needing = _needs(groups(tasks, "cuda"), before)
    assert sum(len(group) for group, _ in needing) == len(tasks)
    for group, needs in needing:
        if getattr(PROPERTIES[group[0].property], "RUNS_LAST", False):
            assert needs == set(range(len(before)))
            continue
        own = {compiling.compile_class(t.column, c) for t in group
               for c in calls(PROPERTIES[t.property], t.case) if t.column.ours}
        own |= {("prepare", t.property, t.case) for t in group if t.property == "lse_bounds"}
        assert {keys[i] for i in needs} == own


def test_a_shared_value_is_computed_once_for_the_run(tmp_path, monkeypatch):
    computed = []

    def compute():
        computed.append(1)
        return [1.5, "rows"]

    assert shared_memo.shared("k", compute) == [1.5, "rows"]  # no run directory: computed
    monkeypatch.setenv(shared_memo.ENV, str(tmp_path))
    assert shared_memo.shared("k", compute) == shared_memo.shared("k", compute) == [1.5, "rows"]
    assert shared_memo.shared("other", compute) == [1.5, "rows"]
    assert len(computed) == 3


def test_workers_run_the_jobs_before_the_cases_that_need_them():
    """The GPU's path through the pool, on the CPU: a prepare job and a compile job, then the
    cases (interpreter), the shared directory set for the workers only during the run."""
    tasks = plan("quick", columns(["ours"], ["fa2"]), ["lse_bounds"],
                 [PROPERTIES["lse_bounds"].CASES["quick"][0].id])
    before = jobs_before_cases(tasks)
    assert [key[0] for key, _ in before][:1] == ["prepare"] and len(before) == 2
    records, timeline = [], {"precompile": []}
    with shared_directory() as shared_dir:
        _execute_in_workers([job for _, job in before], _needs(groups(tasks, "cpu"), before),
                            "cpu", 2, records.append, timeline)
        assert len(os.listdir(shared_dir)) == 2  # the rows and their lock
    assert shared_memo.ENV not in os.environ
    assert [r["status"] for r in records] == ["pass"]
    assert len(timeline["precompile"]) == 1 and timeline["precompile_s"] > 0


def test_an_interrupted_run_keeps_its_timeline():
    """A run stopped by a signal (KeyboardInterrupt) still says how long it ran: the report
    and its --json are written from the timeline (an H200 run lost its report to this)."""
    tasks = plan("quick", columns(["ours"], ["fa2"]), ["lse_bounds"])
    timeline = {}

    def interrupt(record):
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        execute(tasks, "cpu", 1, interrupt, timeline)
    assert timeline["cases_s"] > 0 and timeline["precompile"] == []


def _finish(seconds, workers=16):
    """The last compile job's end with `seconds` handed out in order to the first free worker."""
    free = [0.0] * workers
    for s in seconds:
        free[free.index(min(free))] += s
    return max(free)


def test_the_compile_order_starts_the_slow_compiles_first_on_the_h200s_timeline():
    # the compile jobs of a full-tier run on the H200 with their measured seconds, put in the
    # order precompile.jobs gives them: the last should end about when longest-first's does
    # (D75: the previous cost model, blind to float32, ends at 129 s against 106 on this run's
    # seconds, and ended at 161 against 134 on 6f0b2da's)
    import types

    from fa2check.core.environment import ROOT
    from fa2check.core.implementations import HOPPER, OURS, Column
    from fa2check.core.results import read_json

    report = read_json(os.path.join(ROOT, "ablations", "results",
                                    "20261203-h200-verify-full-35193e7.json"))
    timeline = report["timeline"]["precompile"]
    impl = {"triton": OURS, "hopper": HOPPER}

    def job(entry):
        column = Column(impl[entry["impls"][0]], entry["variant"], entry["variant"])
        problem = types.SimpleNamespace(head_dim=entry["head_dim"], dtype=entry["dtype"])
        return [(column, types.SimpleNamespace(problem=problem, backward=entry["backward"]))]

    planned = sorted(timeline, key=lambda entry: compiling.job_cost(job(entry)), reverse=True)
    longest_first = sorted(timeline, key=lambda entry: -entry["seconds"])
    ends = [_finish([entry["seconds"] for entry in order]) for order in (planned, longest_first)]
    assert ends[0] <= 1.05 * ends[1], ends
