"""flash-linear-attention's softmax attention, `fla.ops.attn.parallel_attn` (package fla-core
0.6.0, Triton), as fa2check verifies it: called as it is, in its own (batch, seqlen, heads,
head_dim) layout, with no lse (it returns none). It is causal only and takes seqlen_q ==
seqlen_k only (its docstring: q, k, v of shape [B, T, H, K]); other cases raise
NotImplementedError, which fa2check reports as n/a.

    pip install fla-core==0.6.0 einops
    PYTHONPATH=docs/examples python -m fa2check.verify --impl fla_parallel_attn:attention \\
        --layout bshd
"""
from fla.ops.attn import parallel_attn


def attention(q, k, v, causal=False, softmax_scale=None):
    if not causal:
        raise NotImplementedError("parallel_attn is causal only")
    if q.shape[1] != k.shape[1]:
        raise NotImplementedError(f"parallel_attn takes seqlen_q == seqlen_k only, got "
                                  f"{q.shape[1]} and {k.shape[1]}")
    return parallel_attn(q, k, v, scale=softmax_scale)
