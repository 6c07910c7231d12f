"""SageAttention 1.0.6's `sageattn` (package sageattention, pure Triton: q and k quantised to
INT8 per block, P V in float16), as fa2check verifies it: called as it is, in its NHD layout
(batch, seqlen, heads, head_dim), with no lse (it returns none). What its docstring says it
cannot run raises NotImplementedError (n/a): head_dim other than 64, 96, 128, v's own head
dim, causal with seqlen_q != seqlen_k, and any backward (it is inference only). It asserts a
CUDA device. Being INT8, it is not expected to meet the pass rule: a worked example of a
kernel that trades accuracy for speed.

    pip install sageattention==1.0.6
    PYTHONPATH=docs/examples python -m fa2check.verify --impl sage_attention:attention \\
        --layout bshd --forward-only
"""
import torch
from sageattention import sageattn


def attention(q, k, v, causal=False, softmax_scale=None):
    if q.shape[-1] not in (64, 96, 128) or v.shape[-1] != q.shape[-1]:
        raise NotImplementedError(f"sageattn takes head_dim 64, 96 or 128 for q, k and v, got "
                                  f"{q.shape[-1]} and {v.shape[-1]}")
    if causal and q.shape[1] != k.shape[1]:
        raise NotImplementedError("sageattn's causal mask needs seqlen_q == seqlen_k")
    if torch.is_grad_enabled() and any(t.requires_grad for t in (q, k, v)):
        raise NotImplementedError("sageattn has no backward (inference only)")
    return sageattn(q, k, v, tensor_layout="NHD", is_causal=causal, sm_scale=softmax_scale)
