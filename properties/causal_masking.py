"""Property 3: causal masking is bottom-right aligned and nothing a row cannot see reaches it.

Query i sees key j iff j <= i + (seqlen_k - seqlen_q). Checks, for seqlen_q <, = and > seqlen_k:
- oracle: o, lse, dq, dk, dv against the float64 oracle with this alignment (the pass rule).
- rows_without_keys: rows that see no key (seqlen_q > seqlen_k) have o = 0, lse = -inf and
  dq = 0 exactly.
- invisible_* (metamorphic): pick a first hidden key c inside a tile (c odd); rows i with
  i + (seqlen_k - seqlen_q) < c cannot see keys >= c, so overwriting K and V there must leave
  those rows' o and lse bitwise unchanged: invisible_random (other random values),
  invisible_1e10 (K and V = 1e10; in float16 that rounds to inf), invisible_nan_keys (K = NaN:
  a mask applied by adding a bias instead of selecting -inf lets NaN through), invisible_nan
  (K and V = NaN) and invisible_inf_values (V = +inf in the even columns, K kept: the rows
  that see key c get +inf there, not NaN, so a kernel that looks for leaked NaN in a row that
  sees c misses the rows that do not).
  A tiled kernel computes P @ V over a whole K/V tile; in a tile that crosses the diagonal a
  hidden key's P is 0, and 0 * NaN (or 0 * inf) is NaN, so invisible_nan, invisible_inf_values
  (and invisible_1e10 in float16) fail unless the kernel keeps non-finite V of hidden keys out of
  the product.
- visible_non_finite, on invisible_inf_values' call (no call of its own): every row that sees
  key c, where V's even columns are +inf from c on, must get a non-finite o in every even
  column (+inf, or NaN as the kernels give it: docs/decisions.md D53) and a finite o in every
  odd column. A kernel that zeroes hidden non-finite V for its product (D53) and does not put
  it back for the rows that see it (or skips one too many: D102 puts it back only where a row
  sees it) hands those rows finite numbers their input did not have; one that puts NaN into a
  whole row (or a whole tile) hands them NaN where their column's V is finite.
"""
from __future__ import annotations

import functools

import torch

from fa2check.core.checks import Reference
from fa2check.core.problems import Problem

from .base import Call, Case, Check, PropertyResult, bitwise, call, pass_rule, visible_counts
from .full_shapes import GQA_BF16_D64, LONG_KEYS_FP16_D128, LONG_QUERIES_FP32_D40, like

NAME = "causal_masking"
# check name -> (value written into hidden K, into hidden V); None: other random values
FILLS = {
    "invisible_random": (None, None),
    "invisible_1e10": (1e10, 1e10),
    "invisible_nan_keys": (float("nan"), "keep"),
    "invisible_nan": (float("nan"), float("nan")),
    "invisible_inf_values": ("keep", "inf in even columns"),
}
VISIBLE_FROM = "invisible_inf_values"  # the altered call visible_non_finite reads

CASES = {
    "quick": (
        Case("q<k", Problem(1, 4, 2, 37, 53, 16, "float16", True, seed=300)),
        Case("q=k", Problem(1, 2, 1, 45, 45, 16, "bfloat16", True, seed=301)),
        Case("q>k", Problem(1, 4, 4, 53, 37, 16, "float32", True, seed=302)),
        Case("q>>k", Problem(2, 2, 2, 70, 5, 16, "float16", True, seed=303)),
        Case("q<k", Problem(1, 2, 1, 20, 33, 64, "bfloat16", True, seed=304)),
    ),
    "full": (
        Case("q<k", like(LONG_KEYS_FP16_D128, 300)),
        Case("q=k", like(GQA_BF16_D64, 301)),
        Case("q>k", like(LONG_QUERIES_FP32_D40, 302)),
    ),
}


def first_hidden_key(problem: Problem) -> tuple[int, int]:
    """(c, rows): a first hidden key c, odd so that it falls inside a tile, that some rows see
    no key >= c; those are the first `rows` rows (i + diag < c, diag = seqlen_k - seqlen_q)."""
    diag = problem.seqlen_k - problem.seqlen_q
    lo, hi = max(1, diag + 1), problem.seqlen_k - 1  # c in [lo, hi]: row 0 cannot see key c
    if lo > hi:
        raise ValueError(f"{problem}: every row sees every key; nothing is hidden from any row")
    c = min((lo + 2 * (hi - lo) // 3) | 1, hi)
    return c, min(problem.seqlen_q, c - diag)


@functools.lru_cache(maxsize=2)
def _reference(case: Case, device: str) -> Reference:
    return Reference(case.problem, device, backward=case.backward)


def run(impl, variant, case: Case, device: str) -> PropertyResult:
    ref = _reference(case, device)
    out = call(impl, variant, ref)
    checks = [pass_rule("oracle", ref, out), rows_without_keys(case, out, device)]
    checks += hidden_key_checks(impl, variant, ref, out, (*FILLS, "visible_non_finite"))
    return PropertyResult.judge(NAME, case, checks)


def calls(case: Case) -> tuple[Call, ...]:
    """The case's call, and the forward-only calls on altered K and V."""
    return Call(case.problem, case.backward), Call(case.problem, False)


def hidden_key_checks(impl, variant, ref: Reference, out, names, view=None) -> list[Check]:
    """The checks in `names` (keys of FILLS, and visible_non_finite) that alter K and V from
    the first hidden key on: one forward call each of FILLS' that are asked for or read
    (VISIBLE_FROM's for visible_non_finite), its random values from the case's seed."""
    gen = torch.Generator().manual_seed(ref.problem.seed + 17)
    visible = "visible_non_finite" in names
    checks = []
    for name in FILLS:
        read = visible and name == VISIBLE_FROM
        if name in names or read:
            altered = altered_call(name, impl, variant, ref, gen, view)
            if name in names:
                checks.append(invisible(name, ref, out, altered))
            if read:
                checks.append(visible_non_finite(ref, altered))
    return checks


def altered_call(name: str, impl, variant, ref: Reference, gen, view=None):
    """The forward call of the metamorphic check `name` (a key of FILLS): K and V overwritten
    from the first hidden key on. `view` (optional) lays the altered K and V out like the
    originals (fa2check.fuzz's layouts)."""
    c, _ = first_hidden_key(ref.problem)
    k, v = ref.k.clone(), ref.v.clone()
    for t, fill in zip((k, v), FILLS[name]):
        if fill is None:
            t[:, :, c:] = (torch.randn(t[:, :, c:].shape, generator=gen) * 3).to(t)
        elif fill == "inf in even columns":  # the odd ones keep their values (isolation)
            t[:, :, c:, 0::2] = float("inf")
        elif fill != "keep":
            t[:, :, c:] = fill
    if view is not None:
        k, v = view(k), view(v)
    return call(impl, variant, ref, k=k, v=v, backward=False)


def invisible(name: str, ref: Reference, out, altered) -> Check:
    """The metamorphic check `name`: the forward o and lse of the rows that cannot see the first
    hidden key, bitwise those of the case's call `out`, in `name`'s altered call."""
    c, rows = first_hidden_key(ref.problem)
    check = bitwise(name, out, altered, rows=slice(0, rows))
    check.numbers.update(first_hidden_key=c, rows_compared=rows)
    return check


def visible_non_finite(ref: Reference, altered) -> Check:
    """The check visible_non_finite (the module docstring) on VISIBLE_FROM's altered call."""
    c, rows = first_hidden_key(ref.problem)
    o = altered.o[:, :, rows:].detach()
    numbers = {"key": c, "rows_that_see_it": o.shape[2],
               "finite_elements": int(torch.isfinite(o[..., 0::2]).sum()),
               "non_finite_elsewhere": int((~torch.isfinite(o[..., 1::2])).sum())}
    return Check("visible_non_finite",
                 numbers["finite_elements"] == numbers["non_finite_elsewhere"] == 0, None,
                 numbers)


def rows_without_keys(case: Case, out, device) -> Check:
    none = visible_counts(case.problem, device) == 0  # (Sq,)
    numbers = {"rows": int(none.sum())}
    if not bool(none.any()):
        return Check("rows_without_keys", True, None, numbers)
    o = out.o[:, :, none]
    lse = None if out.lse is None else out.lse[:, :, none]
    numbers["o_zero"] = bool((o == 0).all())
    if out.lse is not None:  # an implementation without lse: o and dq only
        numbers["lse_minus_inf"] = bool((lse == float("-inf")).all())
    if out.dq is not None:
        numbers["dq_zero"] = bool((out.dq[:, :, none] == 0).all())
    return Check("rows_without_keys", all(v for k, v in numbers.items() if k != "rows"), None,
                 numbers)
