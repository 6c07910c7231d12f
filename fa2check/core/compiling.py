"""What a call of one of our kernels compiles, and compiling it ahead: the precompile passes of
`make verify` (fa2check/verify/precompile.py) and of the GPU fuzzer (fa2check/fuzz/classes.py).

A call's compile class is what Triton specialises the kernels it launches on: integers equal to
1 or divisible by 16 (shapes and strides as laid out), 16-byte alignment, the layout, the mask,
dtype and head dims, the tiles the call gets and, for the Gluon and Hopper kernels, the GQA
group. A compile job is one call on zero-filled inputs of those shapes and layout: Triton's
on-disk cache then hands its kernels to whichever process runs the real calls.
"""
from __future__ import annotations

import functools
import time
from dataclasses import dataclass

import torch

from .checks import run_impl
from .implementations import GLUON, HOPPER, OURS, Column
from .memory_layouts import nan_view
from .problems import Problem


@dataclass(frozen=True)
class Call:
    """A call of the implementation, as far as what it compiles depends on it: the problem's
    shapes, dtype and mask, the layout of q, k, v and dO (a layout of
    memory_layouts.nan_view; None: contiguous) and whether the backward runs."""
    problem: Problem
    backward: bool
    layout: str | None = None


BACKENDS = {GLUON: "gluon", HOPPER: "hopper"}  # our other columns: the Triton backend


def _int_class(n: int) -> str:
    return "1" if n == 1 else "16" if n % 16 == 0 else "n"


def compile_class(column: Column, call: Call) -> tuple:
    """What decides the kernels a call of `column` compiles, less the implementation (see the
    module docstring): the classes of the shapes, strides and 16-byte alignment of q, k, v
    and dO as laid out (built on the meta device: no memory) and, for the Gluon and Hopper
    kernels, of the GQA group."""
    p = call.problem
    # our Triton kernels specialise nothing on the K/V head count or the GQA group (D70): MHA,
    # GQA and MQA calls share their kernels; the Gluon and Hopper kernels specialise the group
    grouped = column.impl != OURS
    layout = tuple((tuple(map(_int_class, _heads_kept(t.shape, n, grouped) + t.stride())),
                    t.storage_offset() * t.element_size() % 16 == 0)
                   for n, t in enumerate(inputs(call, "meta")))
    return (column.variant, p.dtype, p.head_dim, p.head_dim_v, p.causal, _backward(column, call),
            _int_class(p.heads_q // p.heads_kv) if grouped else None, layout,
            _tiles(column, p))


def _backward(column: Column, call: Call) -> bool | None:
    """Whether the call's backward is part of its class: not for our Triton kernels in float32,
    whose forward stores no residual of o for a backward, so that a forward alone compiles
    nothing the same call with its backward does not. Elsewhere the forward of a call that
    will be differentiated compiles the residual in (STORE_O_RES, D06, D91): another kernel
    (as a runtime flag it cost registers and spills, D94)."""
    float32 = column.impl == OURS and call.problem.dtype == "float32"
    return None if float32 else call.backward


def _heads_kept(shape, index: int, grouped: bool) -> tuple:
    """The shape of q, k, v or dO (index 0-3), less k's and v's head count unless `grouped`."""
    return tuple(shape) if grouped or index not in (1, 2) else (shape[0],) + tuple(shape[2:])


@functools.lru_cache(maxsize=None)
def _tiles(column: Column, p) -> object:
    """The tiles our kernels pick for this problem on this GPU (tuned by length band)."""
    if not column.ours or not torch.cuda.is_available():
        return None
    from kernels import default_config

    return default_config(max(p.head_dim, p.head_dim_v), True, column.load_variant(), p.dtype,
                          BACKENDS.get(column.impl, "triton"), causal=p.causal,
                          seqlen_q=p.seqlen_q, seqlen_k=p.seqlen_k)


def compile_cost(column: Column, head_dim: int, dtype: str) -> float:
    """A rough order of compile times: our Triton split-K kernels and our float32 Triton
    kernels slowest (on the H200, 20-75 s a job with the backward; D75), then wide heads."""
    triton = column.impl == OURS
    split_k = triton and "-splitq" in column.variant
    float32 = triton and dtype == "float32"
    return 100 * split_k + 100 * float32 + head_dim / 4


def job_cost(job: list[tuple[Column, Call]]) -> float:
    """A compile job's compile_cost, then its backward (one kernel more)."""
    column, call = job[0]
    p = call.problem
    return compile_cost(column, p.head_dim, p.dtype) + 10 * any(c.backward for _, c in job)


def costliest_first(jobs) -> list:
    """Compile jobs (lists of (column, call)), the slowest first, so that the longest compiles
    do not start last."""
    return sorted(jobs, key=job_cost, reverse=True)


def inputs(call: Call, device: str):
    """Zero-filled q, k, v and dO of the call's problem, laid out as the call's layout."""
    p = call.problem
    shapes = ((p.batch, p.heads_q, p.seqlen_q, p.head_dim),
              (p.batch, p.heads_kv, p.seqlen_k, p.head_dim),
              (p.batch, p.heads_kv, p.seqlen_k, p.head_dim_v),
              (p.batch, p.heads_q, p.seqlen_q, p.head_dim_v))
    tensors = [torch.zeros(s, device=device, dtype=p.torch_dtype) for s in shapes]
    return tuple(nan_view(t, call.layout) if call.layout else t for t in tensors)


def compile_job(job: list[tuple[Column, Call]], device: str) -> dict:
    """Run each call of the job once; whatever it raises, its case will report. Returns the
    job's compile class in words and its seconds, each call's too (the verify timeline)."""
    start, timed = time.perf_counter(), []
    for column, call in job:
        q, k, v, do = inputs(call, device)
        dlse = torch.zeros(q.shape[:3], device=device)
        call_start = time.perf_counter()
        try:
            run_impl(column.implementation(), q, k, v, do, dlse, call.backward,
                     causal=call.problem.causal, softmax_scale=None,
                     variant=column.load_variant(), return_lse=True)
        except Exception:  # noqa: BLE001 - unsupported shapes and crashes are the cases' to report
            pass
        if device == "cuda":
            torch.cuda.synchronize()
        timed.append((column, call, time.perf_counter() - call_start))
    if device == "cuda":
        torch.cuda.empty_cache()
    return summary(job, time.perf_counter() - start, [t for _, _, t in timed])


def summary(job: list[tuple[Column, Call]], seconds: float, call_seconds: list[float]) -> dict:
    """A compile job in words: what its calls share (variant, dtype, head dims, mask,
    backward) and each call's implementation, shapes, layout and seconds."""
    column, call = job[0]
    p = call.problem
    return {"seconds": round(seconds, 3), "variant": column.variant, "dtype": p.dtype,
            "head_dim": p.head_dim, "head_dim_v": p.head_dim_v, "causal": p.causal,
            "backward": call.backward,
            "impls": sorted({BACKENDS.get(c.impl, "triton") for c, _ in job}),
            "calls": [{"impl": BACKENDS.get(c.impl, "triton"), "problem": str(c_call.problem),
                       "layout": c_call.layout, "seconds": round(t, 3)}
                      for (c, c_call), t in zip(job, call_seconds)]}
