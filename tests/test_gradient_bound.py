"""extreme_logits' element-wise bound on the gradients (properties/extreme_logits.py) counts the
float32 rounding of FA2's dP = dO V^T and Delta = rowsum(dO * O): with one visible key P = 1, the
exact dS is dlse alone and everything else is that rounding (D07: the H200's float32 backward
failed without it), and the 16-bit dtype's roundings of P and dS that near-duplicate keys make
all of dq's error (D109), while a backward that forgets Delta still fails."""
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


def _flash_dq_in_dtype(ref, dtype, forget_delta=False):
    """dQ with a flash kernel's roundings in a 16-bit dtype, the rest exact (no mask): the
    forward rounds P (before the division by its row sum) ahead of P V, so Delta =
    rowsum(dO * O) inherits that rounding; the backward rounds dS before dS K."""
    q, k, v, do = (t.double() for t in (ref.q, ref.k, ref.v, ref.do))
    group = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(group, 1), v.repeat_interleave(group, 1)
    s = q @ k.transpose(-1, -2) * q.shape[-1] ** -0.5
    p_unnormalised = torch.exp(s - s.amax(-1, keepdim=True))
    l = p_unnormalised.sum(-1, keepdim=True)
    o = p_unnormalised.to(dtype).double() @ v / l
    delta = (do * o).sum(-1, keepdim=True) - ref.dlse.double()[..., None]
    dp = do @ v.transpose(-1, -2)
    ds = p_unnormalised / l * (dp if forget_delta else dp - delta)
    return q.shape[-1] ** -0.5 * ds.to(dtype).double() @ k


def test_near_duplicate_keys_bf16_dq_needs_the_dtype_roundings_and_fits_them():
    """Two nearly equal keys: dq = scale sum_j dS_j k_j cancels, and its error is the bfloat16
    roundings of P (through Delta) and dS (the corpus's near-duplicate-keys example was 1.6x
    the bound without them, in the Triton kernels and the chassis alike). That error exceeds
    the bound as if nothing were rounded to bfloat16 (the same terms at float32's eps), fits
    the bound, and a backward that forgets Delta does not."""
    problem = Problem(1, 2, 2, 64, 2, 64, "bfloat16", False, seed=5)
    ref = Reference(problem, "cpu", inputs=make_inputs(problem, "near-duplicate-keys"))
    allowed = extreme_logits.allowance(Case("near-duplicate-keys", problem), ref)["dq"]
    unrounded = Problem(**{**problem.as_dict(), "dtype": "float32"})
    without = extreme_logits.allowance(Case("near-duplicate-keys", unrounded), ref)["dq"]
    exact = ref.oracle.dq.double()
    error = (_flash_dq_in_dtype(ref, torch.bfloat16) - exact).abs()
    assert bool((error > without).any())
    assert bool((error <= allowed).all())
    wrong = (_flash_dq_in_dtype(ref, torch.bfloat16, forget_delta=True) - exact).abs()
    assert bool((wrong > allowed).any())
