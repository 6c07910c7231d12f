"""extreme_logits' element-wise bound on the gradients (properties/extreme_logits.py) counts the
float32 rounding of FA2's dP = dO V^T and Delta = rowsum(dO * O): with one visible key P = 1, the
exact dS is dlse alone and everything else is that rounding (D07: the H200's float32 backward
failed without it), while a backward that forgets Delta still fails."""
import torch

from fa2check.core.checks import Reference
from fa2check.core.problems import Problem
from properties import extreme_logits
from properties.base import Case
from properties.strategies import make_inputs


def _one_key_dq(ref, forget_delta=False):
    """dQ as FA2's backward computes it in float32 with one key (P = 1, O = V_0)."""
    q, k, v, do = ref.q, ref.k, ref.v, ref.do
    group = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(group, 1), v.repeat_interleave(group, 1)
    o = v.expand(-1, -1, q.shape[2], -1)
    dp = do @ v.transpose(-1, -2)  # (B, H, Sq, 1)
    delta = (do * o).sum(-1, keepdim=True) - ref.dlse[..., None]
    ds = dp if forget_delta else dp - delta
    return q.shape[-1] ** -0.5 * ds @ k


def test_one_key_float32_dq_is_within_the_bound_and_a_missing_delta_is_not():
    problem = Problem(1, 6, 2, 31, 1, 64, "float32", False, seed=3082, head_dim_v=256)
    ref = Reference(problem, "cpu", inputs=make_inputs(problem, "heavy-tailed"))
    allowed = extreme_logits.allowance(Case("heavy-tailed", problem), ref)["dq"]
    exact = ref.oracle.dq.double()
    error = (_one_key_dq(ref).double() - exact).abs()
    assert float(error.max()) > 0  # rounding the bound must cover: dP - Delta cancels
    assert bool((error <= allowed).all())
    wrong = (_one_key_dq(ref, forget_delta=True).double() - exact).abs()
    assert bool((wrong > allowed).any())
