"""Compile every kernel the planned cases will need before any case runs, each once.

On the GPU the verify run is compile-bound: a case that needs a kernel specialisation no earlier
case compiled waits for Triton (a split-K forward takes tens of seconds), and the cases of one
group run in one worker, so one group's compiles queue behind each other. A job here is one
call of an implementation (fa2check.core.compiling.Call) on zero-filled inputs of the call's shapes and
layout; Triton's on-disk cache then hands its kernels to whichever worker runs the cases.

Jobs are merged where they would compile the same kernels: the same variant and the same
compile class of the call (what Triton specialises on: integers equal to 1 or divisible by 16,
the layout, the mask, dtype and head dims, the tiles the call gets, whether the backward runs;
for our float32 Triton kernels not that, their forward storing no residual of o). In a job ours
run first (the Gluon forward shares the Triton backward), and calls with the backward before
those without (the forward alone is then a cache hit). A class too coarse only puts two
compiles in one job; too fine, two workers compile the same kernel. Costliest jobs first, so
that the longest compiles do not start last.
"""
from __future__ import annotations

from properties import PROPERTIES
from properties.base import calls

from ..core.compiling import Call, compile_class, costliest_first
from ..core.implementations import OURS, Column


def jobs(tasks) -> list[list[tuple[Column, Call]]]:
    """The distinct (column, call) pairs of `tasks` (runner.Task) for our implementations,
    merged by compile class, costliest first."""
    merged = {}
    for task in tasks:
        if not task.column.ours:
            continue
        for call in calls(PROPERTIES[task.property], task.case):
            merged.setdefault(compile_class(task.column, call), {})[(task.column, call)] = None
    ordered = (sorted(job, key=lambda pair: (pair[0].impl != OURS, not pair[1].backward))
               for job in merged.values())
    return costliest_first(ordered)


