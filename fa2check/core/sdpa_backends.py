"""torch SDPA with one backend forced, for timing beside our kernels.

`torch.nn.attention.sdpa_kernel([backend])` allows exactly one backend, so a backend that cannot
run a problem raises instead of silently falling back to another. SDPA's `is_causal` is
top-left aligned; callers here use seqlen_q == seqlen_k, where it equals our bottom-right mask
(`sdpa` refuses causal calls with unequal lengths rather than pass the wrong mask).
"""
from __future__ import annotations

import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

BACKENDS = {  # our name -> torch.nn.attention.SDPBackend member
    "sdpa-flash": "FLASH_ATTENTION",
    "sdpa-cudnn": "CUDNN_ATTENTION",
    "sdpa-efficient": "EFFICIENT_ATTENTION",
    "sdpa-math": "MATH",
}


def forced(name: str):
    """A context manager under which SDPA may use only backend `name`."""
    return sdpa_kernel([getattr(SDPBackend, BACKENDS[name])])


def sdpa(q, k, v, causal: bool):
    """SDPA under whatever backend the caller forced; GQA through `enable_gqa`."""
    if causal and q.shape[2] != k.shape[2]:
        raise ValueError("SDPA's is_causal is top-left aligned; it matches bottom-right only "
                         f"when seqlen_q == seqlen_k, got {q.shape[2]} and {k.shape[2]}")
    gqa = q.shape[1] != k.shape[1]
    return F.scaled_dot_product_attention(q, k, v, is_causal=causal, **({"enable_gqa": True} if gqa else {}))
