"""The backward's preprocess (kernels/backward.py `bwd_preprocess`) zeroes dQ's float32
accumulator, which the backward kernels add into (the Triton backward's in-loop dQ, the chassis's
TMA reductions), so that no separate fill runs.

Shown to fail with the launcher passing ZERO_DQ=False: the accumulator keeps its NaN."""
import pytest
import torch

from conftest import ON_GPU
from kernels import Variant, default_config
from kernels.backward import bwd_preprocess


@pytest.mark.parametrize("head_dim", [40, 64])  # 40: a padded head dim, the column mask
def test_the_preprocess_zeroes_dq_accumulator_and_only_it(device, head_dim):
    batch, heads, seqlen = 2, 3, 37  # a partial last row block
    variant = Variant()
    config = default_config(head_dim, ON_GPU, variant, "bfloat16")
    q, o, do = (torch.randn(batch, heads, seqlen, head_dim, device=device, dtype=torch.bfloat16)
                for _ in range(3))
    lse = torch.randn(batch, heads, seqlen, device=device)
    # the accumulator between two guards: a store past its rows or columns shows up in them
    padded = torch.full((batch * heads * seqlen * head_dim + 2 * 64,), float("nan"),
                        device=device)
    dq_acc = padded[64:-64].view(batch, heads, seqlen, head_dim)
    delta, *_ = bwd_preprocess(q, q, q, o, (lse,), do, None, variant, config, dq_acc=dq_acc)
    assert torch.equal(dq_acc, torch.zeros_like(dq_acc))
    assert padded[:64].isnan().all() and padded[-64:].isnan().all()
    expected = (o.float() * do.float()).sum(-1)  # Delta = rowsum(dO * O)
    torch.testing.assert_close(delta[..., :seqlen], expected, rtol=1e-5, atol=1e-4)
