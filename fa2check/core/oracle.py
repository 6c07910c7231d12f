"""The references every implementation is judged against.

- `reference`: float64 attention, written independently of the kernels: the causal
  mask is built from the index rule, GQA by explicitly repeating K/V heads, softmax by torch.
  Differentiable, so float64 autograd gives the reference gradients.
- `mp_reference`: the same quantities for chosen rows with mpmath at about 50 significant
  digits, used to certify the float64 oracle (lse included) on small problems and extreme logits.
- `same_dtype_attention`: attention composed of plain PyTorch ops in the inputs' own dtype; its
  error against the oracle sets the scale of the pass rule (see fa2check.core.passrule).
"""
from __future__ import annotations

import mpmath
import torch

MP_DIGITS = 50


def visible_mask(seqlen_q: int, seqlen_k: int, causal: bool, device="cpu") -> torch.Tensor:
    """(Sq, Sk) bool: query i sees key j iff j <= i + (Sk - Sq) when causal (bottom-right)."""
    i = torch.arange(seqlen_q, device=device)[:, None]
    j = torch.arange(seqlen_k, device=device)[None, :]
    if not causal:
        return torch.ones(seqlen_q, seqlen_k, dtype=torch.bool, device=device)
    return j <= i + (seqlen_k - seqlen_q)


def expand_kv(t: torch.Tensor, heads_q: int) -> torch.Tensor:
    """(B, Hkv, S, D) -> (B, Hq, S, D): query head h reads kv head h // (Hq // Hkv)."""
    return t.repeat_interleave(heads_q // t.shape[1], dim=1)


def default_scale(head_dim: int) -> float:
    return head_dim ** -0.5


def reference(q, k, v, *, causal=False, softmax_scale=None):
    """float64 (o, lse) on the inputs' device; differentiable through q, k, v."""
    scale = default_scale(q.shape[-1]) if softmax_scale is None else softmax_scale
    q64, k64, v64 = (t.to(torch.float64) for t in (q, k, v))  # keeps the autograd graph
    k64, v64 = expand_kv(k64, q.shape[1]), expand_kv(v64, q.shape[1])
    s = (q64 @ k64.transpose(-1, -2)) * scale
    seen = visible_mask(q.shape[2], k.shape[2], causal, q.device)
    s = s.masked_fill(~seen, float("-inf"))
    lse = torch.logsumexp(s, dim=-1)  # -inf for a row that sees no key
    sees_any = seen.any(dim=-1)[:, None]  # (Sq, 1)
    p = torch.exp(s - torch.where(torch.isfinite(lse), lse, 0.0)[..., None])
    o = torch.where(sees_any, p @ v64, 0.0)
    return o, lse


def same_dtype_attention(q, k, v, *, causal=False, softmax_scale=None):
    """(o, lse) from PyTorch ops in the inputs' dtype: scores rounded to the dtype, softmax in
    float32, P rounded to the dtype before P @ V (the naive composition a user would write)."""
    scale = default_scale(q.shape[-1]) if softmax_scale is None else softmax_scale
    k, v = expand_kv(k, q.shape[1]), expand_kv(v, q.shape[1])
    s = (q @ k.transpose(-1, -2)) * scale  # (B, H, Sq, Sk) in the input dtype
    seen = visible_mask(q.shape[2], k.shape[2], causal, q.device)
    s = s.float().masked_fill(~seen, float("-inf"))
    lse = torch.logsumexp(s, dim=-1)
    p = torch.exp(s - torch.where(torch.isfinite(lse), lse, 0.0)[..., None]).to(q.dtype)
    o = torch.where(seen.any(dim=-1)[:, None], p @ v, 0.0)
    return o, lse


def mp_reference_rows(q, k, v, rows, *, batch=0, head=0, causal=False, softmax_scale=None):
    """mpmath (o, lse) for the given query rows of one (batch, head), as lists of mpf.

    The inputs' stored values are taken exactly (every float16/bfloat16/float32 value is a
    float64 value), so the only rounding is mpmath's own at MP_DIGITS digits. The product of two
    such values is exact in float64 too (at most 2 x 24 significant bits, far from float64's
    overflow and underflow), so q.k's products are formed in float64 and only their sum in
    mpmath: the same scores at a third of the time (verify's long-key lse case was most of
    its run time)."""
    scale = default_scale(q.shape[-1]) if softmax_scale is None else softmax_scale
    if torch.float64 in (q.dtype, k.dtype):  # a float64 product would round: mpmath's
        def products(a, b):
            return [mpmath.mpf(x) * mpmath.mpf(y) for x, y in zip(a, b)]
    else:
        def products(a, b):
            return [x * y for x, y in zip(a, b)]
    group = q.shape[1] // k.shape[1]
    qh = q[batch, head].double().tolist()
    kh = k[batch, head // group].double().tolist()
    vh = v[batch, head // group].double().tolist()
    seqlen_q, seqlen_k = q.shape[2], k.shape[2]
    out = []
    with mpmath.workdps(MP_DIGITS):
        mscale = mpmath.mpf(scale)
        for i in rows:
            keys = [j for j in range(seqlen_k) if not causal or j <= i + seqlen_k - seqlen_q]
            if not keys:
                out.append(([mpmath.mpf(0)] * len(qh[i]), mpmath.mpf("-inf")))
                continue
            s = [mpmath.fsum(products(qh[i], kh[j])) * mscale for j in keys]
            m = max(s)
            w = [mpmath.exp(x - m) for x in s]
            total = mpmath.fsum(w)
            o = [mpmath.fsum(wj * mpmath.mpf(vh[j][d]) for wj, j in zip(w, keys)) / total
                 for d in range(len(vh[0]))]
            out.append((o, m + mpmath.log(total)))
    return out
