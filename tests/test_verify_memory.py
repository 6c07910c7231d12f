"""fa2check.verify's GPU memory budget (fa2check.verify.gpu_budget), on the CPU: the estimate
covers the peak a property really reaches, tasks whose estimates together exceed the budget do
not run at once (and a budget that is ignored is caught), a task larger than the budget still
runs, an out-of-memory error names the budget."""
import multiprocessing
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from fa2check.core.implementations import Column
from fa2check.core.problems import Problem
from fa2check.verify import gpu_budget, runner
from fa2check.verify.runner import Task, run_task
from kernels import Variant
from properties import PROPERTIES

ROOT = Path(__file__).resolve().parents[1]
GIB = gpu_budget.GIB

# ----------------------------------------------------------------------------- the estimate

# Run one property on the CPU in a fresh process with a stand-in implementation whose memory
# is linear in the sizes (so what is measured is the property's own: oracle, baseline, bounds)
# and print the peak of the bytes its tensors hold at once, from the profiler's allocation
# events: the same on every machine, unlike resident pages (torch's CPU code, numpy, mpmath),
# which one CI machine counted 0.5 GB higher than ours.
MEASURE = """
import sys
import torch
from torch.profiler import ProfilerActivity, profile
torch.set_num_threads(1)
from kernels import Variant
from properties import PROPERTIES
from properties.base import Case
from fa2check.core.problems import Problem

def linear(q, k, v, *, causal, softmax_scale, variant, return_lse):
    return q[..., :v.shape[-1]] * 1.0 + 0 * k.sum() + 0 * v.sum(), q.float().sum(-1)

name, kind, backward, s = sys.argv[1], sys.argv[2], sys.argv[3] == "1", int(sys.argv[4])
case = Case(kind, Problem(1, 8, 2, s, s, 16, "float16", causal=False, seed=1), backward)
with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
    PROPERTIES[name].run(linear, Variant(), case, "cpu")
events = sorted((e.start_ns(), e.nbytes()) for e in prof.profiler.kineto_results.events()
                if e.name() == "[memory]")
held = peak = 0
for _, nbytes in events:  # + allocated, - freed
    held += nbytes
    peak = max(peak, held)
print(peak)
"""


def linear_only(property_name, problem, backward, ours=True):
    """A planted bug: an estimate that forgets the oracle's (B, H, Sq, Sk) scores (and the
    fixed allowance, which alone exceeds lse_bounds' peak at this size)."""
    p = problem
    return p.batch * p.heads_q * p.seqlen_q * (p.head_dim + p.head_dim_v) * 2 * 8


@pytest.mark.parametrize("estimate", [gpu_budget.task_bytes, linear_only],
                         ids=["task_bytes", "planted-linear-only"])
@pytest.mark.parametrize("name,kind,backward", [("variant_equivalence", "flips", True),
                                                ("lse_bounds", "normal", False)])
def test_the_estimate_covers_the_measured_peak(estimate, name, kind, backward):
    seqlen = 1024
    out = subprocess.run([sys.executable, "-c", MEASURE, name, kind, str(int(backward)),
                          str(seqlen)], cwd=ROOT, capture_output=True, text=True, timeout=120,
                         env={"PYTHONPATH": str(ROOT), "TRITON_INTERPRET": "1",
                              "PATH": "/usr/bin:/bin"})
    assert out.returncode == 0, out.stderr[-2000:]
    measured = int(out.stdout.split()[-1])
    problem = Problem(1, 8, 2, seqlen, seqlen, 16, "float16", causal=False, seed=1)
    covered = estimate(name, problem, backward) >= measured
    assert covered == (estimate is gpu_budget.task_bytes), (name, measured)


def test_the_estimate_grows_with_the_scores_the_backward_and_another_implementation():
    small = Problem(1, 10, 2, 1024, 1024, 16, "float16", causal=False)
    big = Problem(1, 10, 2, 4096, 4096, 16, "float16", causal=False)
    for name in PROPERTIES:
        assert gpu_budget.task_bytes(name, big, True) > 4 * gpu_budget.task_bytes(name, small, True)
        assert gpu_budget.task_bytes(name, big, True) > gpu_budget.task_bytes(name, big, False)
        assert (gpu_budget.task_bytes(name, big, True, ours=False)
                > gpu_budget.task_bytes(name, big, True))
    # the H200 run's OOM case: 1.25 GiB a float64 copy of its scores, ~8 of them live
    case = PROPERTIES["variant_equivalence"].CASES["full"][1]
    assert case.problem.seqlen_q == 4096
    assert 8 * GIB < gpu_budget.task_bytes("variant_equivalence", case.problem, True) < 16 * GIB


def test_the_budget_leaves_room_for_each_workers_context():
    assert gpu_budget.budget_bytes(100 * GIB, 16) == int(0.8 * 60 * GIB)
    assert gpu_budget.budget_bytes(40 * GIB, 16) == 0  # then tasks run one at a time


# ----------------------------------------------------------------------------- admission

class IgnoredBudget(gpu_budget.Budget):
    """A planted bug: admission that never waits."""

    def acquire(self, nbytes, shed=None):
        with self._cond:
            self._used.value += nbytes
            self.held += nbytes
            self._running.value += 1


def _worker(budget, sizes, current, peak, lock, hold_s, resident, shed):
    for size in sizes:
        budget.acquire(size, shed=shed)
        with lock:
            current.value += size
            peak.value = max(peak.value, current.value)
        time.sleep(hold_s)
        with lock:
            current.value -= size
        budget.release(resident)


def _run_workers(budget_class, total, per_worker, hold_s=0.05, resident=0, timeout=30,
                 shed=None):
    """Each list of sizes in `per_worker` runs in a process of its own; the peak of the sum
    of the sizes running at once."""
    context = multiprocessing.get_context("fork")
    budget = budget_class(context, total)
    current, peak = context.Value("q", 0), context.Value("q", 0)
    lock = context.Lock()
    processes = [context.Process(target=_worker, args=(budget, sizes, current, peak, lock,
                                                        hold_s, resident, shed))
                 for sizes in per_worker]
    for process in processes:
        process.start()
    for process in processes:
        process.join(timeout)
    alive = [process for process in processes if process.is_alive()]
    for process in alive:
        process.terminate()
    assert not alive, "a worker waited forever"
    assert all(process.exitcode == 0 for process in processes)
    return peak.value


@pytest.mark.parametrize("budget_class", [gpu_budget.Budget, IgnoredBudget],
                         ids=["budget", "planted-budget-ignored"])
def test_tasks_whose_sum_exceeds_the_budget_do_not_run_at_once(budget_class):
    peak = _run_workers(budget_class, total=10, per_worker=[[6, 3]] * 4)
    assert (peak <= 10) == (budget_class is gpu_budget.Budget), peak


def test_small_tasks_still_run_side_by_side():
    assert _run_workers(gpu_budget.Budget, total=10, per_worker=[[2]] * 4, hold_s=0.3) >= 4


def test_a_task_larger_than_the_budget_runs_alone_and_residents_block_nobody_forever():
    assert _run_workers(gpu_budget.Budget, total=10, per_worker=[[25], [25], [4]]) == 25
    # each worker keeps 6 of the 10 bytes after its task (cached references): the others'
    # tasks must still run, one at a time
    assert _run_workers(gpu_budget.Budget, total=10, per_worker=[[5, 5]] * 3, resident=6) <= 10


def _keep_nothing():
    return 0


def test_a_worker_that_would_wait_sheds_its_caches_first():
    # each worker keeps 6 of the 10 bytes after its first task (cached references): kept, the
    # 4-byte tasks run one at a time; shed, two run side by side
    kept = _run_workers(gpu_budget.Budget, 10, [[1, 4]] * 3, hold_s=0.3, resident=6)
    shed = _run_workers(gpu_budget.Budget, 10, [[1, 4]] * 3, hold_s=0.3, resident=6,
                        shed=_keep_nothing)
    assert kept == 4 and shed >= 8, (kept, shed)


def oom(q, k, v, *, causal, softmax_scale, variant, return_lse):
    raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 1.25 GiB.")


def test_an_out_of_memory_error_names_the_budget():
    context = multiprocessing.get_context("fork")
    budget = gpu_budget.Budget(context, 64 * GIB)
    case = PROPERTIES["variant_equivalence"].CASES["quick"][0]
    task = Task(Column("test_verify_memory:oom", str(Variant()), "oom"), "variant_equivalence",
                case)
    record = run_task(task, "cpu", budget)
    assert record["status"] == "error"
    assert "OutOfMemoryError" in record["message"]
    assert "GPU memory budget 64.0 GiB" in record["message"]
    assert budget.held == 0 and budget._running.value == 0  # released, not retried


def test_the_admitted_bytes_count_running_estimates_and_idle_caches():
    budget = gpu_budget.Budget(multiprocessing.get_context("fork"), 10)
    budget.acquire(4)
    assert budget.admitted == 4
    budget.release(1)  # done; 1 byte still cached
    assert budget.admitted == 1


def test_each_worker_task_goes_through_the_budget(monkeypatch):
    seen = []
    monkeypatch.setattr(runner, "run_task", lambda task, device, budget=None: seen.append(budget))
    monkeypatch.setattr(runner, "_results", type("Q", (), {"put": lambda self, r: None})())
    monkeypatch.setattr(runner, "_budget", "the budget")
    runner._run_group(["a", "b"], "cuda")
    assert seen == ["the budget", "the budget"]
