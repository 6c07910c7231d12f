"""Property 4: GQA/MQA reads the right kv head and reduces dK/dV over each head group.

Query head h reads kv head h // g (g = heads_q / heads_kv). With K', V' the kv heads repeated
per query head (the oracle's `expand_kv`, written independently of the kernels):
- oracle: the GQA call against the float64 oracle (o, lse, dq, dk, dv; the pass rule).
- mha_equivalence: the GQA call's o and lse equal the same implementation's MHA call on K', V'
  (max difference within the pass rule's allowed error; whether they are bitwise equal is
  recorded).
- group_sum: dK (dV) of the GQA call equals the sum over each group of the MHA call's dK' (dV'):
  |dK - sum_g dK'_g| <= allowed(dK) + g * allowed(dK'), the two calls' pass-rule errors added
  (each call may be off the oracle by its allowed error, and the group sums of the oracle's dK'
  are the oracle's dK).
- every_head_written: both calls run with NaN-filled allocations (see
  properties.base.nan_filled_allocations), so a dK/dV head that is never written stays NaN.
Group sizes 1 (MHA), 2, 3 (6/2), 5 (10/2) and MQA.
"""
from __future__ import annotations

import functools
from dataclasses import replace

import torch

from fa2check.core.checks import Reference
from fa2check.core.oracle import expand_kv
from fa2check.core.problems import Problem

from .base import (Call, Case, Check, PropertyResult, allowed_errors, call, nan_filled_allocations,
                   pass_rule, within)
from .full_shapes import (GQA_BF16_D64, LONG_KEYS_FP16_D128, LONG_QUERIES_FP32_D40, NARROW_FP16_D16,
                          like)

NAME = "gqa_reduction"

CASES = {
    "quick": (
        Case("group-1", Problem(1, 2, 2, 33, 45, 16, "float16", True, seed=400)),
        Case("group-2", Problem(2, 4, 2, 45, 33, 16, "bfloat16", False, seed=401)),
        Case("group-3", Problem(1, 6, 2, 33, 45, 16, "float32", True, seed=402)),
        Case("group-5", Problem(1, 10, 2, 21, 37, 16, "float16", False, seed=403)),
        Case("mqa", Problem(1, 4, 1, 37, 21, 16, "bfloat16", True, seed=404)),
        Case("group-2-own-dv", Problem(1, 4, 2, 33, 45, 40, "bfloat16", True, seed=405,
                                       head_dim_v=24)),
    ),
    "full": (
        Case("group-1", like(LONG_KEYS_FP16_D128, 400, seqlen_k=4096)),
        Case("group-2", like(GQA_BF16_D64, 401, heads_q=4, heads_kv=2)),
        Case("group-3", like(LONG_KEYS_FP16_D128, 402, heads_q=6, heads_kv=2, seqlen_k=4096)),
        Case("group-5", like(NARROW_FP16_D16, 403)),
        Case("mqa", like(LONG_QUERIES_FP32_D40, 404, seqlen_q=4096)),
        # DeepSeek's MLA widths: q and k 192, v 128 (a compile class of its own)
        Case("group-2-192/128", replace(GQA_BF16_D64, seed=405, heads_q=4, heads_kv=2,
                                        head_dim=192, head_dim_v=128)),
    ),
}


@functools.lru_cache(maxsize=2)
def _references(case: Case, device: str) -> tuple[Reference, Reference]:
    """The GQA problem and its MHA twin on repeated K/V (same q, dO and dlse)."""
    gqa = Reference(case.problem, device, backward=case.backward)
    return gqa, mha_twin(gqa, device)


def mha_twin(gqa: Reference, device: str) -> Reference:
    """The MHA problem on the GQA reference's K/V repeated per query head (same q, dO and, by
    the same seed, dlse)."""
    p = gqa.problem
    inputs = (gqa.q, expand_kv(gqa.k, p.heads_q), expand_kv(gqa.v, p.heads_q), gqa.do)
    return Reference(replace(p, heads_kv=p.heads_q), device, backward=gqa.backward, inputs=inputs)


def calls(case: Case) -> tuple[Call, ...]:
    """The GQA call and its MHA twin's (a group of 1 is a kernel specialisation of its own)."""
    p = case.problem
    return Call(p, case.backward), Call(replace(p, heads_kv=p.heads_q), case.backward)


def run(impl, variant, case: Case, device: str) -> PropertyResult:
    gqa_ref, mha_ref = _references(case, device)
    with nan_filled_allocations():
        gqa = call(impl, variant, gqa_ref)
        mha = call(impl, variant, mha_ref)
    checks = [pass_rule("oracle", gqa_ref, gqa)] + twin_checks(gqa_ref, mha_ref, gqa, mha)
    return PropertyResult.judge(NAME, case, checks)


def twin_checks(gqa_ref: Reference, mha_ref: Reference, gqa, mha) -> list[Check]:
    """mha_equivalence, and with the backward group_sum and every_head_written, from the GQA
    call's outputs and its MHA twin's (both run with NaN-filled allocations)."""
    allowed = allowed_errors(gqa_ref, gqa)
    checks = [within("mha_equivalence", gqa, mha, allowed, outputs=("o", "lse"))]
    if gqa_ref.backward:
        p = gqa_ref.problem
        checks += [_group_sum(p, gqa, mha, allowed, allowed_errors(mha_ref, mha)),
                   _every_head_written(p, gqa, mha)]
    return checks


def _group_sum(p: Problem, gqa, mha, allowed_gqa, allowed_mha) -> Check:
    group = p.heads_q // p.heads_kv
    numbers, worst = {}, 0.0
    for name in ("dk", "dv"):
        expanded = getattr(mha, name).double()  # (B, Hq, Sk, D or Dv)
        summed = expanded.reshape(p.batch, p.heads_kv, group, p.seqlen_k, -1).sum(2)
        diff = (getattr(gqa, name).double() - summed).abs()
        error = float(diff.max()) if not diff.isnan().any() else float("inf")
        bound = allowed_gqa[name] + group * allowed_mha[name]
        numbers[name] = {"max_abs_diff": error, "allowed": bound, "ratio": error / bound}
        worst = max(worst, error / bound)
    return Check("group_sum", worst <= 1.0, worst, numbers)


def _every_head_written(p: Problem, gqa, mha) -> Check:
    numbers = {}
    for call_name, out in (("gqa", gqa), ("mha", mha)):
        for name in ("dk", "dv"):
            t = getattr(out, name)
            bad_heads = [h for h in range(t.shape[1]) if not bool(torch.isfinite(t[:, h]).all())]
            numbers[f"{call_name}_{name}_heads_not_finite"] = bad_heads
    return Check("every_head_written", not any(numbers.values()), None, numbers)
