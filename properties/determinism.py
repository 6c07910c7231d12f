"""Property 6: repeated calls on the same inputs give the same results.

- bitwise: o, lse, dK and dV of every repeat equal the first run's bit for bit; so does dQ
  when it is written without atomics (our kernels with seq_parallel off: one program owns
  each dQ row).
- dq_spread (dQ summed with float32 atomic adds, in an order the hardware picks):
  max over repeats of |dQ_r - dQ_1| <= DQ_SPREAD_LIMIT * allowed(dQ), the pass rule's allowed dQ
  error for the problem. The ratio reported is spread / (DQ_SPREAD_LIMIT * allowed) and the
  spread itself, also relative to max|dQ|, is recorded. On the CPU interpreter atomics run in
  order, so the spread there is 0; the GPU run measures it.
"""
from __future__ import annotations

import functools

from fa2check.core.checks import Reference
from fa2check.core.problems import Problem

from .base import Case, Check, PropertyResult, allowed_errors, bitwise, call, dq_may_vary
from .full_shapes import LONG_QUERIES_FP32_D40, WIDE_BF16_D256, like

NAME = "determinism"
REPEATS = 3
# Largest run-to-run dQ spread accepted under atomics, as a fraction of the pass rule's allowed
# dQ error for the same problem.
DQ_SPREAD_LIMIT = 0.25

CASES = {
    "quick": (
        Case("repeat", Problem(1, 4, 2, 70, 45, 16, "bfloat16", True, seed=11)),
        Case("repeat", Problem(1, 2, 2, 33, 64, 32, "float32", False, seed=600)),
    ),
    "full": (
        # float32, so that no rounding to a narrower dtype hides the atomics' different orders
        Case("repeat", like(LONG_QUERIES_FP32_D40, 601, heads_q=8)),
        Case("repeat", like(WIDE_BF16_D256, 602)),
    ),
}


@functools.lru_cache(maxsize=2)
def _reference(case: Case, device: str) -> Reference:
    return Reference(case.problem, device, backward=case.backward)


def run(impl, variant, case: Case, device: str, repeats: int = REPEATS) -> PropertyResult:
    ref = _reference(case, device)
    runs = [call(impl, variant, ref) for _ in range(repeats)]
    return PropertyResult.judge(NAME, case, compare_runs(impl, variant, ref, runs))


def compare_runs(impl, variant, ref: Reference, runs) -> list[Check]:
    """bitwise_run2, ... against the first run, and dq_spread where dQ may vary."""
    atomic = dq_may_vary(impl, variant, ref.problem, ref.q.device.type)
    exact = ("o", "lse", "dk", "dv") + (() if atomic else ("dq",))
    checks = [bitwise(f"bitwise_run{i}", runs[0], other, outputs=exact)
              for i, other in enumerate(runs[1:], start=2)]
    if atomic and ref.backward:
        checks.append(dq_spread(runs, allowed_errors(ref, runs[0])["dq"]))
    return checks


def dq_spread(runs, allowed_dq: float) -> Check:
    first = runs[0].dq.double()
    spread = max(float((r.dq.double() - first).abs().max()) for r in runs[1:])
    limit = DQ_SPREAD_LIMIT * allowed_dq
    scale = float(first.abs().max())
    return Check("dq_spread", spread <= limit, spread / limit,
                 {"spread": spread, "limit": limit, "allowed_dq": allowed_dq,
                  "spread_relative_to_max_dq": spread / scale if scale else 0.0,
                  "repeats": len(runs)})
