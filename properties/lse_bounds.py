"""Property 1: the logsumexp L that an implementation returns is the natural-log logsumexp.

For each query row that sees n >= 1 keys, with S its float64 scores (masked keys excluded):

    max_j S_j  <=  L  <=  max_j S_j + log n          (the sum of n terms lies in [e^max, n e^max])

so P = exp(S - L) lies in [0, 1] and each row of P sums to 1 (it sums to exp(lse - L), so an
error e in L shows as a row sum of e^e). Rows that see no key must have L = -inf.
L is also compared with the float64 oracle on every row and with mpmath (50 digits) on sampled
rows. A log2 logsumexp (L / ln 2) breaks the bounds for most rows and misses the references.

An implementation that returns no lse (fa2check.core.calling) is n/a here.

Tolerance: every check allows the pass rule's allowed lse error `a` (c * error of the
same-dtype PyTorch lse + floor, see fa2check.core.passrule): the bounds may be missed by a, and the
row sums may be off by expm1(a).
"""
from __future__ import annotations

import functools
import math

import torch

from fa2check.core.checks import Reference
from fa2check.core.implementations import Unsupported
from fa2check.core.oracle import mp_reference_rows
from fa2check.core.problems import Problem
from fa2check.core.shared_memo import shared

from .base import (Case, Check, PropertyResult, call, from_output_checks, scores, seeded_rows,
                   visible_counts)
from .full_shapes import (GQA_BF16_D64, LONG_KEYS_FP16_D128, LONG_QUERIES_FP32_D40, NARROW_FP16_D16,
                          WIDE_BF16_D256, like)

NAME = "lse_bounds"
MP_BUDGET = 200_000  # mpmath products per case (about 1.5 s); rows are sampled within it

CASES = {
    "quick": (
        Case("normal", Problem(1, 2, 1, 37, 53, 16, "float16", False, seed=100), backward=False),
        Case("normal", Problem(1, 4, 2, 70, 45, 16, "bfloat16", True, seed=101), backward=False),
        Case("peaked", Problem(2, 2, 2, 33, 64, 32, "float32", True, seed=102), backward=False),
        Case("normal", Problem(1, 2, 2, 40, 70, 64, "bfloat16", False, seed=103), backward=False),
    ),
    "full": tuple(Case(kind, like(base, seed), backward=False) for kind, base, seed in (
        ("normal", GQA_BF16_D64, 100),
        ("normal", LONG_KEYS_FP16_D128, 101),
        ("normal", LONG_QUERIES_FP32_D40, 102),
        ("peaked", WIDE_BF16_D256, 103),
        ("peaked", NARROW_FP16_D16, 104),
    )),
}


@functools.lru_cache(maxsize=2)
def _prepared(case: Case, device: str):
    """Reference, float64 scores and mpmath lse of sampled rows: shared by every variant."""
    inputs = _inputs(case, device)
    ref = Reference(case.problem, device, backward=False, inputs=inputs)
    s = scores(ref.q, ref.k, case.problem.causal)
    return ref, s, _shared_mp_rows(case, device, inputs)


def prepare(case: Case, device: str):
    """What the verify runner computes once for every column's process: the mpmath rows."""
    _shared_mp_rows(case, device, _inputs(case, device))


def _inputs(case: Case, device: str):
    # "peaked": inputs scaled by 3 give logits of order 10, so one key dominates most rows and
    # L sits near the lower bound
    return case.problem.inputs(device, scale=3.0 if case.kind == "peaked" else 1.0)


def _shared_mp_rows(case: Case, device: str, inputs):
    return shared(f"{NAME} mpmath rows {case!r} {device}", lambda: _mp_rows(case, *inputs[:3]))


def _mp_rows(case: Case, q, k, v) -> list[tuple[int, int, int, float]]:
    """(batch, head, row, mpmath lse) for rows sampled within MP_BUDGET products."""
    p = case.problem
    seen = visible_counts(p)
    candidates = [int(torch.nonzero(seen).min()) if bool(seen.any()) else 0, p.seqlen_q - 1]
    candidates += seeded_rows(p, 3, salt=1)
    picked, cost = [], 0
    for row in dict.fromkeys(candidates):
        row_cost = max(1, int(seen[row])) * p.head_dim
        if cost + row_cost <= MP_BUDGET or not picked:
            picked.append(row)
            cost += row_cost
    out = []
    for batch, head in {(0, 0), (p.batch - 1, p.heads_q - 1)}:
        v1 = v[..., :1]  # lse does not depend on V: one column keeps mpmath's work small
        rows = mp_reference_rows(q.cpu(), k.cpu(), v1.cpu(), picked, batch=batch,
                                 head=head, causal=p.causal)
        out += [(batch, head, row, float(lse)) for row, (_, lse) in zip(picked, rows)]
    return out


def run(impl, variant, case: Case, device: str) -> PropertyResult:
    ref, s, mp_rows = _prepared(case, device)
    out = call(impl, variant, ref)
    if out.lse is None:
        raise Unsupported(f"{NAME} checks lse alone, and the implementation returns none"
                          + (f" ({impl.lse_missing})" if getattr(impl, "lse_missing", None)
                             else ""))
    lse_check = next(c for c in ref.judge(out) if c.output == "lse")
    allowed = lse_check.allowed
    lse = out.lse.detach().double().to(s.device)
    return PropertyResult.judge(NAME, case, [
        *row_checks(s, lse, allowed),
        from_output_checks("lse_oracle", [lse_check]),
        _mpmath(lse, mp_rows, allowed),
        _log_base(lse, ref.oracle.lse.double().to(s.device)),
    ])


def row_checks(s, lse, allowed: float) -> list[Check]:
    """The bounds and softmax_rows checks of lse (B, H, Sq) against float64 scores s
    (B, H, Sq, Sk), -inf where masked; `allowed` is the pass rule's allowed lse error."""
    return [_bounds(s, lse, allowed), _softmax_rows(s, lse, allowed)]


def _bounds(s, lse, allowed) -> Check:
    rowmax = s.amax(-1)
    n = torch.isfinite(s).sum(-1)
    sees = n > 0
    below = (rowmax - lse)[sees]  # > 0: L under the row max
    above = (lse - rowmax - torch.log(n.clamp(min=1).double()))[sees]  # > 0: over max + log n
    violation = max(float(below.max()) if below.numel() else 0.0,
                    float(above.max()) if above.numel() else 0.0, 0.0)
    if torch.isnan(lse[sees]).any():
        violation = math.inf
    no_key_ok = bool((lse[~sees] == float("-inf")).all())
    return Check("bounds", violation <= allowed and no_key_ok, violation / allowed,
                 {"max_violation": violation, "allowed": allowed,
                  "rows_without_keys": int((~sees).sum()), "those_rows_have_-inf": no_key_ok})


def _softmax_rows(s, lse, allowed) -> Check:
    sees = torch.isfinite(s).any(-1)
    p = torch.exp(s - torch.where(sees, lse, 0.0)[..., None])[sees]  # (rows, Sk)
    if p.numel() == 0:
        return Check("softmax_rows", True, 0.0, {"rows": 0})
    p_max = float(p.max())
    sum_error = float((p.sum(-1) - 1).abs().max())
    tolerance = math.expm1(allowed)
    error = max(p_max - 1.0, sum_error, 0.0)
    if math.isnan(p_max) or math.isnan(sum_error):
        error = math.inf
    return Check("softmax_rows", error <= tolerance, error / tolerance,
                 {"max_p": p_max, "max_row_sum_error": sum_error, "allowed": tolerance})


def _mpmath(lse, mp_rows, allowed) -> Check:
    worst, numbers = 0.0, []
    for batch, head, row, mp_lse in mp_rows:
        got = float(lse[batch, head, row])
        if mp_lse == float("-inf"):
            error = 0.0 if got == float("-inf") else math.inf
        else:
            error = abs(got - mp_lse) if math.isfinite(got) else math.inf
        worst = max(worst, error)
        numbers.append({"batch": batch, "head": head, "row": row, "mpmath": mp_lse, "impl": got,
                        "error": error})
    return Check("lse_mpmath", worst <= allowed, worst / allowed,
                 {"rows": numbers, "allowed": allowed})


def _log_base(lse, oracle_lse) -> Check:
    """Informational: is L closer to the natural-log or to the log2 logsumexp? Passes unless
    log2 fits better (the other checks already fail then, this names the cause)."""
    finite = torch.isfinite(oracle_lse) & (oracle_lse.abs() > 1.0)
    if not bool(finite.any()):
        return Check("natural_log", True, None, {"rows_compared": 0})
    natural = float((lse - oracle_lse)[finite].abs().median())
    log2 = float((lse - oracle_lse / math.log(2))[finite].abs().median())
    return Check("natural_log", not (log2 < natural), None,
                 {"median_error_natural": natural, "median_error_if_log2": log2})
