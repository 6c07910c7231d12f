"""Run properties x cases x columns (implementation, variant), serially or in worker processes.

A task is one property on one case for one column; its record (a dict) carries the property's
checks and numbers. Tasks are grouped so that work that shares something runs in one process:
- on the GPU, by (column, dtype, head_dim, causal): Triton compiles a kernel per variant and
  shape class, and a split-K forward takes 10-45 s to compile, so each group compiles its own
  kernels once and the groups compile in parallel, one worker process per CPU core.
- on the CPU interpreter, by case: the oracle of a case is computed once for every column.
Properties marked RUNS_LAST (variant_equivalence: it calls the other variants too) run after
every other group has finished, when the kernels they need are in Triton's on-disk cache.
On the GPU with several workers, a precompile pass (fa2check.verify.precompile) first compiles
every kernel the cases declare, each once, spread over all workers, costliest first; the
groups then find their kernels in Triton's on-disk cache (decisions D57).
The workers share the GPU's memory through one budget (fa2check.verify.gpu_budget): a task
starts when its estimated peak fits beside the other workers' running tasks and caches.
"""
from __future__ import annotations

import multiprocessing
import os
import queue as queue_module
import time
import traceback
import warnings
from concurrent.futures import FIRST_EXCEPTION, ProcessPoolExecutor, wait
from dataclasses import dataclass, replace

import torch

from properties import PROPERTIES
from properties.base import PropertyResult

from ..core.environment import select_device
from ..core.explain import explain_failures
from ..core.implementations import Column, Unsupported, accepting_variant, takes_variant
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


def task_bytes(task: Task) -> int:
    """The task's estimated peak GPU bytes (gpu_budget.task_bytes)."""
    return gpu_budget.task_bytes(task.property, task.case.problem, task.case.backward,
                                 task.column.ours)


def run_task(task: Task, device: str, budget: gpu_budget.Budget | None = None) -> dict:
    """Run one task; an implementation that raises gives an 'error' record, not an abort. A
    failed case's message says, check by check, what was expected and what came out. With a
    `budget` (several workers on one GPU) the task waits until its estimate fits in it."""
    estimate = task_bytes(task) if device == "cuda" else 0
    waited = time.perf_counter()
    if budget is not None:
        budget.acquire(estimate)
    waited = time.perf_counter() - waited
    if device == "cuda":
        torch.cuda.reset_peak_memory_stats()
    started = time.time()
    variant = task.column.variant
    try:
        impl = task.column.load()
        if not takes_variant(impl):
            impl, variant = accepting_variant(impl), None
        with warnings.catch_warnings():
            # NaN and inf inputs are deliberate here; numpy's warnings about them (from the
            # interpreter) are noise: the checks judge the results
            warnings.filterwarnings("ignore", category=RuntimeWarning, module=r"triton\.")
            result = PROPERTIES[task.property].run(impl, task.column.load_variant(), task.case,
                                                   device)
        if result.status == "fail":
            result.message = explain_failures(result.checks)
        trace = None
    except Unsupported as error:
        result = PropertyResult(task.property, task.case, "unsupported", message=str(error))
        trace = None
    except Exception as error:  # noqa: BLE001 - any crash of the implementation is a failure
        message = f"{type(error).__name__}: {error}".splitlines()[0]
        if isinstance(error, torch.cuda.OutOfMemoryError):  # reported as it is, never retried
            message = (f"{message} [{budget.describe(estimate)}]" if budget is not None else
                       f"{message} [no GPU memory budget: one process; this task estimated "
                       f"at {gpu_budget.gib(estimate)}]")
        result = PropertyResult(task.property, task.case, "error", message=message)
        trace = traceback.format_exc()
    memory = {}
    if device == "cuda":
        # the estimate, the peak PyTorch reserved in this process during the task (its caches
        # from earlier tasks included) and the wait for the budget: to check the estimate
        memory = {"gpu_estimate_bytes": estimate,
                  "gpu_peak_bytes": torch.cuda.max_memory_reserved(),
                  "gpu_wait_s": round(waited, 3)}
        torch.cuda.empty_cache()  # many workers share the GPU: hand back what this task cached
    if budget is not None:
        budget.release(gpu_budget.resident_bytes() if device == "cuda" else 0)
    record = result.as_dict()
    # variant: what was passed to the implementation (None: it takes none)
    record.update(column=task.column.label, impl=task.column.impl, variant=variant,
                  seconds=round(time.time() - started, 3), **memory)
    for check in record["checks"]:
        if not check["passed"]:
            check["explanation"] = explain_failures([check])
    if trace:
        record["traceback"] = trace
    return record


def groups(tasks: list[Task], device: str) -> list[list[list[Task]]]:
    """Phases of groups of tasks (see the module docstring), costliest groups first."""
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
    return (precompile.compile_cost(task.column, p.head_dim) + len(group)
            + p.seqlen_q * p.seqlen_k * 1e-7)


def execute(tasks: list[Task], device: str, jobs: int, on_record, timeline=None) -> list[dict]:
    """Run every task; `on_record(record)` is called as each finishes (progress). `timeline`
    (a dict) gets the precompile pass's job count and seconds, each compile job's seconds and
    compile class (precompile.compile_job), each phase's seconds and, on the GPU with
    workers, the memory budget."""
    records = []
    timeline = {} if timeline is None else timeline

    def collect(record):
        records.append(record)
        on_record(record)

    phases = groups(tasks, device)
    compiles = precompile.jobs(tasks) if device == "cuda" else []
    timeline.update(precompile_jobs=len(compiles), precompile_s=0.0, phases_s=[], precompile=[])
    jobs = min(jobs, max([len(compiles)] + [len(phase) for phase in phases]))
    if jobs <= 1:
        for phase in phases:
            start = time.perf_counter()
            for group in phase:
                for task in group:
                    collect(run_task(task, device))
            timeline["phases_s"].append(time.perf_counter() - start)
    else:
        _execute_in_workers(compiles, phases, device, jobs, collect, timeline)
    return records


def _execute_in_workers(compiles, phases, device, jobs, collect, timeline):
    """One pool for the compile jobs and all phases; a phase starts when the previous one has
    finished. On the GPU the cases share one memory budget, sized once the compile jobs have
    given every worker its CUDA context and kernels."""
    context = multiprocessing.get_context("spawn")  # CUDA and Triton need a fresh process
    results = context.Queue()
    threads = max(1, (os.cpu_count() or 1) // jobs)
    budget = gpu_budget.Budget(context) if device == "cuda" else None
    pool = ProcessPoolExecutor(jobs, mp_context=context, initializer=_init_worker,
                               initargs=(results, threads, budget))
    try:
        start = time.perf_counter()
        done, _ = wait([pool.submit(precompile.compile_job, job, device) for job in compiles],
                       return_when=FIRST_EXCEPTION)
        # a worker that died raises here (compile_job itself raises nothing)
        timeline["precompile"] = sorted((future.result() for future in done),
                                        key=lambda job: -job["seconds"])
        timeline["precompile_s"] = time.perf_counter() - start
        if budget is not None:
            free, total = pool.submit(_memory_info).result()
            budget.set_total(gpu_budget.budget_bytes(free, jobs))
            timeline["gpu_budget"] = {"free_bytes": free, "total_bytes": total,
                                      "budget_bytes": budget.total, "workers": jobs,
                                      "fraction": gpu_budget.FRACTION,
                                      "worker_growth_bytes": gpu_budget.WORKER_GROWTH}
        for phase in phases:
            start = time.perf_counter()
            futures = [pool.submit(_run_group, group, device) for group in phase]
            expected, received = sum(len(group) for group in phase), 0
            while received < expected:
                try:
                    collect(results.get(timeout=0.5))
                    received += 1
                except queue_module.Empty:
                    for future in futures:
                        if future.done() and future.exception() is not None:
                            raise future.exception()
            timeline["phases_s"].append(time.perf_counter() - start)
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
