"""The forward's output residual (kernels/forward.py, o_residual): o + residual is the float32
output before rounding, which the backward's Delta = rowsum(dO * O) is taken from. The corpus
entries of tests/regressions/ that failed before it (bfloat16, heavy-tailed values) show the
gradients' side; this shows the residual itself, for every variant."""
import pytest
import torch

from fa2check.core.oracle import reference
from kernels import Variant, default_config
from kernels.forward import attn_fwd


@pytest.fixture(scope="module")
def uniform_attention(device):
    """q = 0: every score is 0, so P = 1 exactly (no bfloat16 rounding of P), and with 32 keys
    and no mask every running sum l is 16 or 32, so defer_norm off's P / l and its rescaling
    l_old / l_new are exact too: the kernel's float32 output is the mean of the V rows to
    float32's precision. Returns (q, k, v, the float64 output), the oracle computed once for
    every variant."""
    gen = torch.Generator().manual_seed(5)
    k, v = (torch.randn(1, 2, 32, 16, generator=gen).to(device, torch.bfloat16) for _ in range(2))
    q = torch.zeros(1, 2, 48, 16, device=device, dtype=torch.bfloat16)
    return q, k, v, reference(q, k, v, causal=False, softmax_scale=0.25)[0]


@pytest.mark.parametrize("variant", Variant.all(), ids=str)
def test_output_plus_residual_is_the_float32_output(variant, device, uniform_attention):
    q, k, v, exact = uniform_attention
    config = default_config(16, device == "cuda", variant, torch.bfloat16)
    o, _, o_res = attn_fwd(q, k, v, False, 0.25, variant, config, o_residual=True)
    rounded_error = (o.double() - exact).abs().max().item()
    error = (o.double() + o_res.double() - exact).abs().max().item()
    # o alone is off by bfloat16's rounding (2^-9 relative); o + residual by float32's sums and
    # the residual's own rounding (2^-18 relative), far below it
    assert rounded_error > 1e-4
    assert error < rounded_error / 50


def test_no_residual_without_a_backward_or_in_float32(device):
    q = torch.randn(1, 1, 16, 16).to(device)
    variant = Variant.all()[0]
    config = default_config(16, device == "cuda", variant, torch.float32)
    assert attn_fwd(q, q, q, False, 0.25, variant, config)[2] is None
    assert attn_fwd(q, q, q, False, 0.25, variant, config, o_residual=True)[2] is None
