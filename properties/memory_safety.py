"""Property 7: an implementation reads exactly the tensors' logical extent, through their strides.

q, k, v and dO are given as views into larger buffers filled with NaN, so the memory just
outside each view (the row before the first and after the last position, the next head and
batch, the padding after each row's head_dim, or the elements between strided ones) is NaN:
- oracle: o, lse, dq, dk, dv against the float64 oracle (the pass rule; NaN never passes), so
  no NaN from outside the views reaches an output.
- same_as_contiguous: the same call on contiguous copies gives the same o, lse, dq, dk and dv:
  within one unit in the last place of each output's largest oracle value,
  eps(dtype) * max(1, max|oracle|) (for dQ summed with atomics, at least the determinism
  property's dQ spread bound). Whether they are bitwise equal is recorded; it is not required,
  because the code Triton compiles for another stride pattern may order a dot product's terms
  differently (seen on the H200: with q, k, v, dO strided along head_dim, about 20 of 2M dK and
  dQ elements one bfloat16 ulp apart, o, lse and dV bitwise equal). Reading the wrong memory
  is off by far more.
- inputs_untouched: after both calls, forward and backward, q, k, v and dO are bitwise what
  they were, and so is every buffer the views lie in (its NaN padding included): a kernel may
  neither change its inputs (SageAttention 1.0.6 subtracts k's mean from k in place) nor
  write into the memory around them. A changed input is put back, so that later columns get the case's
  own inputs.

Layouts (`Case.kind`):
- padded: (B, H, S, D) views into a (B+1, H+1, S+2, D+16) buffer, starting one row in.
- bshd-strided: (B, S, H, D) storage seen as (B, H, S, D), every second element of a 2D-wide
  row (stride 2 along head_dim), one row in, one spare head.
- padded-bshd-strided: both at once.
"""
from __future__ import annotations

import functools

import torch

from fa2check.core.checks import Reference
from fa2check.core.memory_layouts import nan_view
from fa2check.core.problems import Problem

from .base import (OUTPUTS, Call, Case, Check, PropertyResult, allowed_errors, call, dq_may_vary,
                   pass_rule, within)
from .determinism import DQ_SPREAD_LIMIT
from .full_shapes import GQA_BF16_D64, like

NAME = "memory_safety"

CASES = {
    "quick": (
        Case("padded", Problem(1, 4, 2, 37, 45, 16, "float16", True, seed=700)),
        Case("bshd-strided", Problem(2, 2, 1, 45, 33, 16, "bfloat16", False, seed=701)),
        Case("padded-bshd-strided", Problem(1, 4, 1, 33, 40, 64, "float32", True, seed=702)),
    ),
    "full": (
        Case("padded", like(GQA_BF16_D64, 700)),
        Case("padded-bshd-strided", like(GQA_BF16_D64, 701)),
    ),
}


@functools.lru_cache(maxsize=2)
def _references(case: Case, device: str) -> tuple[Reference, Reference]:
    """The problem on contiguous inputs, and on NaN-surrounded views of the same values."""
    contiguous = Reference(case.problem, device, backward=case.backward)
    views = tuple(nan_view(t, case.kind) for t in (contiguous.q, contiguous.k, contiguous.v,
                                                   contiguous.do))
    return contiguous, Reference(case.problem, device, backward=case.backward, inputs=views)


def calls(case: Case) -> tuple[Call, ...]:
    """The call on the views (strides of their own) and on contiguous copies."""
    return Call(case.problem, case.backward, case.kind), Call(case.problem, case.backward)


def run(impl, variant, case: Case, device: str) -> PropertyResult:
    contiguous_ref, view_ref = _references(case, device)
    inputs = input_buffers(view_ref, " (view)") | input_buffers(contiguous_ref, " (contiguous)")
    before = {name: buffer.clone() for name, buffer in inputs.items()}
    try:
        on_views = call(impl, variant, view_ref)
        on_copies = call(impl, variant, contiguous_ref)
    finally:
        unchanged = untouched(inputs, before)
    tolerance = _one_ulp(view_ref)
    if dq_may_vary(impl, variant, case.problem, device) and case.backward:
        spread = DQ_SPREAD_LIMIT * allowed_errors(view_ref, on_views)["dq"]
        tolerance["dq"] = max(tolerance["dq"], spread)
    return PropertyResult.judge(NAME, case, [
        pass_rule("oracle", view_ref, on_views),
        within("same_as_contiguous", on_views, on_copies, tolerance),
        unchanged,
    ])


def input_buffers(ref, suffix: str = "") -> dict[str, torch.Tensor]:
    """{name: the memory each of the reference's q, k, v and dO lies in}: a view's buffer
    (nan_view's, padding included), else the tensor itself."""
    return {name + suffix: t if t._base is None else t._base
            for name, t in (("q", ref.q), ("k", ref.k), ("v", ref.v), ("do", ref.do))}


def untouched(inputs: dict, before: dict) -> Check:
    """The inputs_untouched check (input_buffers against their clones taken before the calls):
    the elements of each buffer whose bits changed (compared as integers, so that NaN padding
    compares too); changed buffers are restored."""

    changed = {}
    for name, buffer in inputs.items():
        bits = {2: torch.int16, 4: torch.int32, 8: torch.int64}[buffer.element_size()]
        n = int((buffer.view(bits) != before[name].view(bits)).sum())
        if n:
            changed[name] = n
            buffer.copy_(before[name])
    return Check("inputs_untouched", not changed, None, {"changed_elements": changed})


def _one_ulp(ref) -> dict[str, float]:
    """eps(dtype) * max(1, max|oracle|) for each output the reference has."""
    out = {}
    for name in OUTPUTS:
        oracle = getattr(ref.oracle, name)
        if oracle is None:
            continue
        oracle = oracle.detach().double()
        finite = oracle[torch.isfinite(oracle)]
        scale = float(finite.abs().max()) if finite.numel() else 0.0
        dtype = torch.float32 if name == "lse" else ref.problem.torch_dtype
        out[name] = torch.finfo(dtype).eps * max(1.0, scale)
    return out
