"""Run properties x cases x columns (implementation, variant), serially or in worker processes.

A task is one property on one case for one column; its record (a dict) carries the property's
checks and numbers. Tasks are grouped so that work that shares something runs in one process:
- on the GPU, by (column, dtype, head_dim, causal): Triton compiles a kernel per variant and
  shape class, and a split-K forward takes 10-45 s to compile, so each group compiles its own
  kernels once and the groups compile in parallel, one worker process per CPU core.
- on the CPU interpreter, by case: the oracle of a case is computed once for every column.
On the GPU with several workers, compile jobs (fa2check.verify.precompile: every kernel the
cases declare, each once, costliest first) and groups share one pool (`Schedule`): a worker
takes a job while any is left, then a group whose compile jobs have finished (it finds its
kernels in Triton's on-disk cache), so the cases run beside the last compiles (D57, D70, D72).
Properties marked RUNS_LAST (variant_equivalence: it calls the other variants too) wait for
every compile job.
The workers share the GPU's memory through one budget (fa2check.verify.gpu_budget): a task
starts when its estimated peak fits beside the other workers' running tasks and caches.
"""
from __future__ import annotations

import contextlib
import multiprocessing
import os
import queue as queue_module
import tempfile
import time
import traceback
import warnings
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from dataclasses import dataclass, replace
from functools import partial
from typing import Callable

import torch

from properties import PROPERTIES
from properties.base import PropertyResult, calls

from ..core import compiling, shared_memo
from ..core.environment import select_device
from ..core.explain import explain_failures
from ..core.hints import fix_for
from ..core.implementations import Column, builtin, takes_variant
from . import gpu_budget, precompile


@dataclass(frozen=True)
class Task:
    column: Column
    property: str
    case: object  # properties.base.Case


def plan(tier: str, columns: list[Column], property_names=None, case_ids=None, seed: int = 0,
         forward_only: bool = False) -> list[Task]:
    names = property_names or list(PROPERTIES)
    for name in names:
        if name not in PROPERTIES:
            raise ValueError(f"unknown property {name!r}; expected one of {list(PROPERTIES)}")
    tasks, seen_ids = [], set()
    for name in names:
        for case in PROPERTIES[name].CASES[tier]:
            case = case.with_seed_offset(seed)
            if forward_only:
                case = replace(case, backward=False)
            seen_ids.add(case.id)
            if case_ids and case.id not in case_ids:
                continue
            tasks += [Task(column, name, case) for column in columns]
    missing = set(case_ids or ()) - seen_ids
    if missing:
        raise ValueError(f"no case {sorted(missing)} in the {tier} tier of {names} "
                         "(python -m fa2check.verify --list shows them)")
    return tasks


def _shed_caches() -> int:
    """Drop the properties' cached references and outputs (functools caches kept for the next
    column of the same case) and return what PyTorch still reserves in this process."""
    for module in PROPERTIES.values():
        for value in vars(module).values():
            if callable(getattr(value, "cache_clear", None)):
                value.cache_clear()
    torch.cuda.empty_cache()
    return gpu_budget.resident_bytes()


def task_bytes(task: Task) -> int:
    """The task's estimated peak GPU bytes (gpu_budget.task_bytes)."""
    return gpu_budget.task_bytes(task.property, task.case.problem, task.case.backward,
                                 task.column.ours)


def run_task(task: Task, device: str, budget: gpu_budget.Budget | None = None) -> dict:
    """Run one task; an implementation that raises gives an 'error' record, not an abort (with
    a `fix`, one line saying what to change, for a user's implementation), NotImplementedError
    (Unsupported among them) an 'unsupported' record with its words. A failed case's message
    says, check by check, what was expected and what came out. A record of an implementation
    that returned no lse says why in `lse_missing` (its lse checks are n/a). With a `budget`
    (several workers on one GPU) the task waits until its estimate fits in it."""
    estimate = task_bytes(task) if device == "cuda" else 0
    waited = time.perf_counter()
    if budget is not None:
        budget.acquire(estimate, shed=_shed_caches)
    waited = time.perf_counter() - waited
    if device == "cuda":
        torch.cuda.reset_peak_memory_stats()
    started = time.time()
    variant, impl, fix = task.column.variant, None, None
    try:
        impl = task.column.implementation()
        if not takes_variant(impl):
            variant = None
        with warnings.catch_warnings():
            # NaN and inf inputs are deliberate here; numpy's warnings about them (from the
            # interpreter) are noise: the checks judge the results
            warnings.filterwarnings("ignore", category=RuntimeWarning, module=r"triton\.")
            result = PROPERTIES[task.property].run(impl, task.column.load_variant(), task.case,
                                                   device)
        if result.status == "fail":
            result.message = explain_failures(result.checks)
        trace = None
    except NotImplementedError as error:  # fa2check.Unsupported too: the implementation's words
        result = PropertyResult(task.property, task.case, "unsupported",
                                message=str(error) or type(error).__name__)
        trace = None
    except Exception as error:  # noqa: BLE001 - any crash of the implementation is a failure
        message = f"{type(error).__name__}: {error}".splitlines()[0]
        if isinstance(error, torch.cuda.OutOfMemoryError):  # reported as it is, never retried
            message = (f"{message} [{budget.describe(estimate)}]" if budget is not None else
                       f"{message} [no GPU memory budget: one process; this task estimated "
                       f"at {gpu_budget.gib(estimate)}]")
        result = PropertyResult(task.property, task.case, "error", message=message)
        trace = traceback.format_exc()
        if not builtin(task.column.impl):
            fix = fix_for(error, task.column.impl, task.column.layout)
    memory = {}
    if device == "cuda":
        # the estimate, the peak PyTorch reserved in this process during the task (its caches
        # from earlier tasks included) and the wait for the budget: to check the estimate;
        # the whole GPU's used bytes at the task's end beside the bytes the budget had admitted
        # then: to check the budget's per-worker terms
        free, total = torch.cuda.mem_get_info()
        memory = {"gpu_estimate_bytes": estimate,
                  "gpu_peak_bytes": torch.cuda.max_memory_reserved(),
                  "gpu_wait_s": round(waited, 3), "gpu_used_bytes": total - free,
                  "gpu_admitted_bytes": budget.admitted if budget is not None else None}
        torch.cuda.empty_cache()  # many workers share the GPU: hand back what this task cached
    if budget is not None:
        budget.release(gpu_budget.resident_bytes() if device == "cuda" else 0)
    record = result.as_dict()
    # variant: what was passed to the implementation (None: it takes none)
    record.update(column=task.column.label, impl=task.column.impl, variant=variant,
                  layout=task.column.layout, seconds=round(time.time() - started, 3), **memory)
    if getattr(impl, "lse_missing", None):
        record["lse_missing"] = impl.lse_missing
    if fix:
        record["fix"] = fix
    for check in record["checks"]:
        if not check["passed"]:
            check["explanation"] = explain_failures([check])
    if trace:
        record["traceback"] = trace
    return record


def groups(tasks: list[Task], device: str) -> list[list[list[Task]]]:
    """Phases of groups of tasks (see the module docstring), costliest groups first: the
    RUNS_LAST properties' groups form the second phase."""
    phases = ({}, {})
    for task in tasks:
        p = task.case.problem
        key = ((task.column.label, p.dtype, p.head_dim, p.causal) if device == "cuda"
               else (task.property, task.case.id))
        last = getattr(PROPERTIES[task.property], "RUNS_LAST", False)
        phases[1 if last else 0].setdefault(key, []).append(task)
    return [sorted(phase.values(), key=_cost, reverse=True) for phase in phases if phase]


def _cost(group: list[Task]) -> float:
    """A rough order: the compile cost of the group's column and head dim, then size."""
    task = group[0]
    p = task.case.problem
    return (compiling.compile_cost(task.column, p.head_dim, p.dtype) + len(group)
            + p.seqlen_q * p.seqlen_k * 1e-7)


class Schedule:
    """What a free worker takes next: a job while any is left, then a ready group; a group is
    ready once every job it needs has finished. Jobs go in their order (the compile jobs
    costliest first, so the longest compiles start early). Groups wait for the jobs (D72): a
    group's tasks may wait for GPU memory (gpu_budget), and a worker waiting there compiles
    nothing; groups go to workers that find no job left, so they run beside the last compiles."""

    def __init__(self, n_jobs: int, groups_needing: list[tuple[list[Task], set[int]]]):
        self._jobs = list(range(n_jobs))[::-1]  # pop() takes the first
        self._waiting = groups_needing
        self._ready: list[list[Task]] = []
        self._done: set[int] = set()
        self._promote()

    def _promote(self):
        ready = [group for group, needs in self._waiting if needs <= self._done]
        self._waiting = [(group, needs) for group, needs in self._waiting
                         if not needs <= self._done]
        self._ready += ready

    def take(self):
        """("group", tasks), ("job", job index) or None (nothing can start now)."""
        if self._jobs:
            return "job", self._jobs.pop()
        if self._ready:
            return "group", self._ready.pop(0)
        return None

    def finished(self, index: int):
        self._done.add(index)
        self._promote()


def jobs_before_cases(tasks: list[Task]) -> list[tuple[object, Callable]]:
    """(key, job) for the work each case shares with other processes, done once: a property's
    `prepare` of a case (what every column derives from the case alone, e.g. lse_bounds'
    mpmath rows), then the compile jobs (fa2check.verify.precompile), costliest first. A job
    is called with the device; a compile job returns its timeline entry."""
    prepares = dict.fromkeys(key for key in map(_prepare_key, tasks) if key)
    return ([(key, partial(_prepare, *key[1:])) for key in prepares]
            + [(compiling.compile_class(*job[0]), partial(compiling.compile_job, job))
               for job in precompile.jobs(tasks)])


def _prepare_key(task: Task):
    return (("prepare", task.property, task.case)
            if hasattr(PROPERTIES[task.property], "prepare") else None)


def _prepare(name: str, case, device: str) -> None:
    try:
        PROPERTIES[name].prepare(case, device)
    except Exception:  # noqa: BLE001 - the case's tasks prepare again and report what it raises
        pass
    if device == "cuda":
        torch.cuda.empty_cache()


def _needs(phases: list[list[list[Task]]], jobs) -> list[tuple[list[Task], set[int]]]:
    """Each group with the jobs (jobs_before_cases) it waits for: those of its own tasks; a
    RUNS_LAST group (the second phase) waits for all of them."""
    index = {key: i for i, (key, _) in enumerate(jobs)}
    out = []
    for group in (group for phase in phases for group in phase):
        if jobs and getattr(PROPERTIES[group[0].property], "RUNS_LAST", False):
            needs = set(range(len(jobs)))
        else:
            keys = {_prepare_key(task) for task in group} - {None}
            keys |= {compiling.compile_class(task.column, call) for task in group
                     if task.column.ours
                     for call in calls(PROPERTIES[task.property], task.case)}
            needs = {index[key] for key in keys} if jobs else set()
        out.append((group, needs))
    return out


def execute(tasks: list[Task], device: str, jobs: int, on_record, timeline=None) -> list[dict]:
    """Run every task; `on_record(record)` is called as each finishes (progress). `timeline`
    (a dict) gets the number of compile jobs, when the last finished (precompile_s, from the
    start) and each one's seconds and compile class (compiling.compile_job), when the last
    case finished (cases_s) and, on the GPU with workers, the memory budget."""
    records = []
    timeline = {} if timeline is None else timeline

    def collect(record):
        records.append(record)
        on_record(record)

    phases = groups(tasks, device)
    before = jobs_before_cases(tasks) if device == "cuda" else []
    timeline.update(precompile_jobs=sum(key[0] != "prepare" for key, _ in before),
                    precompile_s=0.0, precompile=[])
    jobs = min(jobs, max([len(before)] + [len(phase) for phase in phases]))
    start = time.perf_counter()
    try:
        if jobs <= 1:
            for phase in phases:
                for group in phase:
                    for task in group:
                        collect(run_task(task, device))
        else:
            with shared_directory():
                _execute_in_workers([job for _, job in before], _needs(phases, before),
                                    device, jobs, collect, timeline)
    finally:  # an interrupted run's timeline too
        timeline["cases_s"] = time.perf_counter() - start
        timeline["precompile"].sort(key=lambda job: -job["seconds"])
    return records


@contextlib.contextmanager
def shared_directory():
    """A directory for the run's shared values (fa2check.core.shared_memo), named in the
    environment that the worker processes inherit when they are spawned."""
    with tempfile.TemporaryDirectory(prefix="fa2check-verify-") as path:
        os.environ[shared_memo.ENV] = path
        try:
            yield path
        finally:
            del os.environ[shared_memo.ENV]


def _execute_in_workers(before, groups_needing, device, jobs, collect, timeline):
    """One pool for the jobs before the cases and the groups, as `Schedule` orders them. On
    the GPU the cases share one memory budget, sized at the start from the free memory less
    what each worker's CUDA context and kernels will hold (gpu_budget.budget_bytes)."""
    context = multiprocessing.get_context("spawn")  # CUDA and Triton need a fresh process
    results = context.Queue()
    threads = max(1, (os.cpu_count() or 1) // jobs)
    budget = gpu_budget.Budget(context) if device == "cuda" else None
    pool = ProcessPoolExecutor(jobs, mp_context=context, initializer=_init_worker,
                               initargs=(results, threads, budget))
    schedule = Schedule(len(before), groups_needing)
    expected, received, running = sum(len(group) for group, _ in groups_needing), 0, {}
    try:
        start = time.perf_counter()
        if budget is not None:
            free, total = pool.submit(_memory_info).result()
            budget.set_total(gpu_budget.budget_bytes(free, jobs))
            timeline["gpu_budget"] = {"free_bytes": free, "total_bytes": total,
                                      "budget_bytes": budget.total, "workers": jobs,
                                      "fraction": gpu_budget.FRACTION,
                                      "worker_base_bytes": gpu_budget.WORKER_BASE}
        while received < expected or running:
            while len(running) < jobs and (item := schedule.take()):
                kind, what = item
                future = (pool.submit(before[what], device) if kind == "job"
                          else pool.submit(_run_group, what, device))
                running[future] = item
            done, _ = wait(running, timeout=0.2, return_when=FIRST_COMPLETED)
            for future in done:
                kind, what = running.pop(future)
                result = future.result()  # a worker that died raises here (jobs raise nothing)
                if kind == "job":
                    if result is not None:  # a compile job's timeline entry
                        timeline["precompile"].append(result)
                        timeline["precompile_s"] = time.perf_counter() - start
                    schedule.finished(what)
            while True:  # the records that have arrived (a group's come before its end)
                try:
                    collect(results.get(timeout=0.05 if running else 0.5))
                    received += 1
                except queue_module.Empty:
                    break
    except BaseException:  # interrupted (or a worker died): stop the workers, keep the records
        for process in list(getattr(pool, "_processes", {}).values()):
            process.terminate()
        pool.shutdown(wait=False, cancel_futures=True)
        raise
    pool.shutdown()


_results = None
_budget = None


def _init_worker(results, threads, budget=None):
    global _results, _budget
    _results, _budget = results, budget

    select_device()  # TRITON_INTERPRET comes from the parent's environment

    torch.set_num_threads(threads)


def _memory_info() -> tuple[int, int]:
    """(free, total) bytes of the GPU, seen from a worker (the parent keeps no CUDA context)."""
    return torch.cuda.mem_get_info()


def _run_group(group: list[Task], device: str):
    for task in group:
        _results.put(run_task(task, device, _budget))
