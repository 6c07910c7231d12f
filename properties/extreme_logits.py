"""Property 2: extreme logits neither overflow nor lose more accuracy than float32 logits cost.

Scenarios (`Case.kind`), each built from the problem's seeded normal inputs:
- logits-1e5: q and k scaled by 158, so logits reach about +-1e5; with float16 inputs |q.k|
  (= |S| sqrt(head_dim)) goes far beyond float16's maximum 65504.
- all-equal-133120: q = k = v = 133120 (bfloat16): all logits equal (about 7e10), o = 133120.
- below-5e4: every odd row's logits are all below -5e4 (shifted through the first feature);
  even rows are ordinary.
- dominant-last-key: the last key (in a partial tile) scores 1e4 above the others in every row.
- ties: the even keys all equal key 0 and the odd keys its negation, so each row's maximum is
  shared by half the keys (ties across tiles and split-K slices).
- lse-below-88.7: float32, all logits near -200, so lse < -88.7 (exp(lse) underflows float32),
  with partial tail tiles; gradients are checked too.
Each is run with the variant under test, so with defer_norm on and off.

Tolerance. The pass rule's scale, the error of the same-dtype PyTorch composition, is not
meaningful for o and lse here: with float16 inputs its scores overflow to inf (its error is
then measured nowhere) and with bfloat16 logits of 1e5 it is off by up to 256, which would
allow anything. So o and lse are judged against the float64 oracle element by element with

    allowed_o[i, d] = floor_o + eps(dtype)/2 * sum_j P_ij |v_jd| + sum_j P_ij tau_ij |v_jd - o_id|
    allowed_lse[i]  = floor_lse + sum_j P_ij tau_ij
    tau_ij          = (head_dim + 4) * eps(float32) * scale * sum_d |q_id k_jd|

- floor: the pass rule's floor, (eps(dtype)/2 + 4 eps(float32)) * max(1, max|oracle|): the
  output's own rounding and the float32 arithmetic after the scores.
- eps(dtype)/2 * sum_j P_ij |v_jd|: P is rounded to the input dtype before P @ V, as in every
  flash kernel.
- tau: how far a float32 logit may be from the exact one. Kernels compute scores in float32 (a
  logit of 1e5 is only known to ~1e5 * eps(float32) = 0.01), and a dot product of head_dim
  terms may be off by head_dim * eps(float32) * sum_d |q_d k_d| (the classic bound, which holds
  for round-toward-zero accumulation as tensor cores may do); 4 more ulps cover the product
  with softmax_scale * log2(e), the subtraction of the row maximum and exp2. To first order a
  logit error dS moves o_i by sum_j P_ij dS_ij (v_j - o_i) and lse_i by sum_j P_ij dS_ij: the
  bound is tight where one key dominates (v_j = o_i) and wide only where P is spread over keys
  with different values and large logits.
Gradients (lse-below-88.7, float32 inputs, whose same-dtype baseline computes scores in float32
like the kernels, so the pass rule stays meaningful) get the pass rule's allowed error plus the
first-order effect of the backward pass recomputing the scores (another dot product order) and
subtracting the stored lse: P_ij carries a relative error up to tau_ij + tau_L_i, with
tau_L_i = sum_j P_ij tau_ij + eps(float32) |lse_i|; and dP_ij = dO_i . v_j and Delta_i =
dO_i . o_i are float32 sums of head_dim_v terms, off by up to rho_ij = (head_dim_v + 4)
eps(float32) (|dO_i| . |v_j| + |dO_i| . |o_i|) (the classic bound again), which matters where
dP - Delta cancels (one visible key: dP = Delta exactly, and dS is all rounding; the H200's
float32 FA1 backward at head_dim_v 225 was 10x the composition's error there, 1.06x the bound
without rho). In the input dtype (u = eps(dtype)/2, the unit roundoff) every flash kernel
rounds P before P V, so Delta = dO_i . o_i (o from those products) is off from
sum_j P_ij dP_ij by up to pi_i = u sum_j P_ij |dP_ij|; and it rounds dS before dS K and
dS^T Q, and P before P^T dO.
Where keys nearly repeat, dq = scale sum_j dS_ij k_j cancels (sum_j dS_ij = 0 exactly) and
these roundings are all of dq's error: the fuzzer's bfloat16 near-duplicate-keys example of
tests/regressions/ was 1.6x the bound without them, identically in the Triton kernels and the
Hopper chassis, while the same-dtype composition, rounding other values, happened to be
close. So with G = P ((tau + tau_L) |dP - Delta| + rho + pi):
dq += scale (G + u |dS|) |k|, dk += scale (G + u |dS|)^T |q| (summed over each GQA group),
dv += (P (tau + tau_L + u))^T |dO|.
Every output must be non-finite exactly where the oracle is (-inf lse for rows without keys).
"""
from __future__ import annotations

import functools
import math

import torch

from fa2check.core.checks import Reference
from fa2check.core.oracle import expand_kv
from fa2check.core.passrule import rounding_floor
from fa2check.core.problems import Problem

from .base import Case, Check, PropertyResult, call, scores
from .full_shapes import (GQA_BF16_D64, LONG_KEYS_FP16_D128, LONG_QUERIES_FP32_D40, NARROW_FP16_D16,
                          WIDE_BF16_D256, like)

NAME = "extreme_logits"
EXTRA_ULPS = 4  # beyond the dot product's head_dim (see the docstring)
SPREAD_BUDGET = 2 ** 25  # float64 elements per chunk of (rows, keys, head_dim)
EPS32 = torch.finfo(torch.float32).eps

CASES = {
    "quick": (
        Case("logits-1e5", Problem(1, 2, 1, 37, 53, 16, "float16", False, seed=200),
             backward=False),
        Case("logits-1e5", Problem(1, 2, 2, 45, 33, 32, "bfloat16", True, seed=201),
             backward=False),
        Case("all-equal-133120", Problem(1, 2, 1, 40, 53, 16, "bfloat16", True, seed=202),
             backward=False),
        Case("below-5e4", Problem(1, 4, 2, 53, 37, 16, "float16", True, seed=203), backward=False),
        Case("dominant-last-key", Problem(1, 2, 1, 37, 45, 16, "bfloat16", False, seed=204),
             backward=False),
        Case("ties", Problem(1, 2, 2, 33, 70, 16, "float16", True, seed=205), backward=False),
        Case("lse-below-88.7", Problem(1, 4, 2, 37, 45, 16, "float32", False, seed=206)),
        Case("dominant-last-key", Problem(1, 2, 2, 21, 33, 128, "float16", False, seed=207),
             backward=False),
    ),
    "full": (
        Case("logits-1e5", like(LONG_KEYS_FP16_D128, 200), backward=False),
        Case("all-equal-133120", like(GQA_BF16_D64, 202, batch=1), backward=False),
        Case("below-5e4", like(LONG_QUERIES_FP32_D40, 203), backward=False),
        Case("dominant-last-key", like(WIDE_BF16_D256, 204), backward=False),
        Case("ties", like(NARROW_FP16_D16, 205, seqlen_q=2048, seqlen_k=2048), backward=False),
        Case("lse-below-88.7", like(LONG_QUERIES_FP32_D40, 206, seqlen_q=4096)),
    ),
}


def extreme_inputs(case: Case, device="cpu"):
    """q, k, v, dO of the scenario, in the problem's dtype."""
    p = case.problem
    q, k, v, do = (t.double() for t in p.inputs("cpu"))
    root_d = math.sqrt(p.head_dim)
    if case.kind == "logits-1e5":
        q, k = q * 158, k * 158  # std of a logit: 158^2 = 2.5e4
    elif case.kind == "all-equal-133120":
        q, k, v = (torch.full_like(t, 133120.0) for t in (q, k, v))
    elif case.kind == "below-5e4":
        a = math.sqrt(8e4 * root_d)  # feature 0 adds -a^2 / sqrt(d) = -8e4 to odd rows
        q[..., 0] = 0.0
        q[:, :, 1::2, 0] = -a
        k[..., 0] = a
    elif case.kind == "dominant-last-key":
        c = math.sqrt(1e4 * root_d)  # the last key scores c^2 / sqrt(d) = 1e4 more
        q[..., 0] = c
        k[..., 0] = 0.0
        k[:, :, -1, 0] = c
    elif case.kind == "ties":
        q = q * 4
        first = k[:, :, :1].clone()  # (a view of key 0 would overlap k[:, :, 0::2])
        k[:, :, 0::2] = first
        k[:, :, 1::2] = -first
    elif case.kind == "lse-below-88.7":
        c = math.sqrt(200 * root_d)  # every logit shifted by -200
        q[..., 0] = -c
        k[..., 0] = c
    else:
        raise ValueError(f"unknown extreme-logits scenario {case.kind!r}")
    return tuple(t.to(device=device, dtype=p.torch_dtype) for t in (q, k, v, do))


@functools.lru_cache(maxsize=2)
def _prepared(case: Case, device: str):
    inputs = extreme_inputs(case, device)
    ref = Reference(case.problem, device, backward=case.backward, inputs=inputs)
    s = scores(ref.q, ref.k, case.problem.causal)
    _check_scenario(case, s, ref)
    return ref, _bounds(case, ref, s)


def allowance(case: Case, ref: Reference):
    """The element-wise terms of the bound (see the docstring) for any inputs `ref` holds;
    `case.backward` says whether the gradient terms are needed. Used with `judge`, also by
    fa2check.fuzz for its extreme input distributions."""
    return _bounds(case, ref, scores(ref.q, ref.k, case.problem.causal))


def _check_scenario(case: Case, s, ref):
    """The inputs must really be what the scenario claims (after rounding to the dtype)."""
    if case.kind == "below-5e4":
        odd = s[:, :, 1::2]
        sees = torch.isfinite(odd).any(-1)
        if not bool((odd.amax(-1)[sees] < -5e4).all()):
            raise ValueError(f"{case.id}: an odd row has a logit above -5e4")
    if case.kind == "lse-below-88.7":
        lse = ref.oracle.lse[torch.isfinite(ref.oracle.lse)]
        if not bool((lse < -88.7).all()):
            raise ValueError(f"{case.id}: an lse is not below -88.7")
    if case.kind == "logits-1e5" and float(s[torch.isfinite(s)].abs().max()) < 5e4:
        raise ValueError(f"{case.id}: logits do not reach 5e4")


def _bounds(case: Case, ref: Reference, s):
    """Element-wise terms added to the floor of o and lse, and to the pass rule's allowed
    error of the gradients (see the docstring)."""
    p = case.problem
    scale = p.head_dim ** -0.5
    sees = torch.isfinite(s).any(-1, keepdim=True)
    prob = torch.where(sees, torch.softmax(torch.where(sees, s, 0.0), -1), 0.0)
    q, k, v = (t.double() for t in (ref.q, ref.k, ref.v))
    k, v = expand_kv(k, p.heads_q), expand_kv(v, p.heads_q)
    tau = (p.head_dim + EXTRA_ULPS) * EPS32 * scale * (q.abs() @ k.abs().transpose(-1, -2))
    w = prob * tau
    o = ref.oracle.o.double()
    u = torch.finfo(p.torch_dtype).eps / 2  # the input dtype's unit roundoff
    terms = {"o": u * (prob @ v.abs()) + _weighted_spread(w, v, o), "lse": w.sum(-1)}
    if case.backward:
        lse = ref.oracle.lse.double()
        tau_l = w.sum(-1) + EPS32 * torch.where(torch.isfinite(lse), lse.abs(), 0.0)
        rel = prob * (tau + tau_l[..., None])  # relative error bound of the recomputed P
        do = ref.do.double()
        delta = (do * o).sum(-1) - ref.dlse.double()
        rho = (p.head_dim_v + EXTRA_ULPS) * EPS32 * (
            do.abs() @ v.abs().transpose(-1, -2) + (do.abs() * o.abs()).sum(-1)[..., None])
        dp = do @ v.transpose(-1, -2)
        dp_centred = (dp - delta[..., None]).abs()  # |dP - Delta|
        pi = u * (prob * dp.abs()).sum(-1)  # Delta's share of P's rounding before P V
        g = rel * dp_centred + prob * (rho + pi[..., None])
        g = g + u * prob * dp_centred  # |dS| = P |dP - Delta|, rounded before dS K and dS^T Q
        group = p.heads_q // p.heads_kv
        per_kv_head = (p.batch, p.heads_kv, group, p.seqlen_k, -1)  # D for dk, Dv for dv
        terms["dq"] = scale * (g @ k.abs())
        terms["dk"] = (scale * (g.transpose(-1, -2) @ q.abs())).reshape(per_kv_head).sum(2)
        terms["dv"] = ((rel + u * prob).transpose(-1, -2) @ do.abs()).reshape(per_kv_head).sum(2)
    return terms


def _weighted_spread(w, v, o):
    """sum_j w_ij |v_jd - o_id| (B, H, Sq, D), a chunk of query rows at a time."""
    batch, heads, seqlen_q, seqlen_k = w.shape
    rows = max(1, SPREAD_BUDGET // (batch * heads * seqlen_k * v.shape[-1]))
    out = torch.empty_like(o)
    for start in range(0, seqlen_q, rows):
        part = slice(start, start + rows)
        spread = (v[:, :, None] - o[:, :, part, None]).abs()  # (B, H, rows, Sk, D)
        out[:, :, part] = torch.einsum("bhrk,bhrkd->bhrd", w[:, :, part], spread)
    return out


def run(impl, variant, case: Case, device: str) -> PropertyResult:
    ref, terms = _prepared(case, device)
    out = call(impl, variant, ref)
    if out.lse is None and case.backward:  # gradients of o alone: the oracle's and the bound's
        ref = ref.without_lse()
        terms = allowance(case, ref)
    return PropertyResult.judge(NAME, case, judge(case, ref, out, terms))


def judge(case: Case, ref: Reference, out, terms, forward: bool = True) -> list[Check]:
    """finite, o, lse (and dq, dk, dv with case.backward) of `out` against the oracle, with the
    allowance `terms` (see `allowance`); with forward=False only the gradients (the pass rule's
    allowed error plus the first-order effect of recomputing P from float32 logits). lse is
    judged where the implementation returned one; with none, `ref` and `terms` must be those
    of `ref.without_lse()` for the gradients."""
    rule = {c.output: c for c in ref.judge(out)}
    checks = [_finite(out, ref)] if forward else []
    for name in ("o", "lse") if forward else ():
        if getattr(out, name) is None:
            continue
        oracle = getattr(ref.oracle, name)
        dtype = torch.float32 if name == "lse" else case.problem.torch_dtype
        checks.append(_elementwise(name, getattr(out, name), oracle,
                                   rounding_floor(name, oracle, dtype) + terms[name], rule[name]))
    if case.backward:
        for name in ("dq", "dk", "dv"):
            checks.append(_elementwise(name, getattr(out, name), getattr(ref.oracle, name),
                                       rule[name].allowed + terms[name], rule[name]))
    return checks


def _finite(out, ref) -> Check:
    numbers, ok = {}, True
    for name in ("o", "lse"):
        if getattr(out, name) is None:
            continue
        impl, oracle = getattr(out, name).double(), getattr(ref.oracle, name).double()
        lost = int((torch.isfinite(oracle) & ~torch.isfinite(impl)).sum())
        extra = int((~torch.isfinite(oracle) & torch.isfinite(impl)).sum())
        same = bool(torch.equal(impl[~torch.isfinite(oracle)], oracle[~torch.isfinite(oracle)]))
        numbers[name] = {"nonfinite_where_oracle_finite": lost, "finite_where_oracle_not": extra,
                         "nonfinite_values_equal": same}
        ok = ok and lost == 0 and extra == 0 and same
    return Check("finite", ok, None, numbers)


def _elementwise(name, impl, oracle, allowed, rule) -> Check:
    """max over elements of |impl - oracle| / allowed, where the oracle is finite."""
    impl, oracle = impl.detach().double(), oracle.detach().double()
    finite = torch.isfinite(oracle)
    error = torch.where(finite, (impl - oracle).abs(), 0.0)
    ratio = float((error / allowed).max())
    if math.isnan(ratio) or not rule.nonfinite_match:
        ratio = math.inf
    return Check(name, ratio <= 1.0, ratio,
                 {"max_error": float(error.max()), "max_allowed": float(allowed.max()),
                  "min_allowed": float(allowed.min()), "pass_rule_allowed": rule.allowed,
                  "same_dtype_baseline_error": rule.baseline_error})
