"""torch's flex_attention (torch.nn.attention.flex_attention) behind flash_attention's
signature, so `python -m fa2check.verify --impl flex` judges it by the same properties as our
kernels and `python -m fa2check.ablate --backends ...,flex` times it beside SDPA's backends.

    impl(q, k, v, *, causal=False, softmax_scale=None, variant=None, return_lse=False, config=None)

- `flex` is what a user of flex_attention runs: `torch.compile(flex_attention, dynamic=False,
  fullgraph=True)`, one compiled graph per shape, dtype and mask (dynamo's guards pick it),
  never run uncompiled behind its name; `flex_eager` is the uncompiled function, which
  materialises the scores (the semantics, not the kernel).
- Causal is bottom-right aligned: a block mask of `q_idx + (Sk - Sq) >= kv_idx`, built once per
  (Sq, Sk, device) and reused. No mask: no block mask.
- GQA through `enable_gqa=True`; v may have a head dim of its own (o takes v's).
- lse: flex_attention's own (`AuxRequest(lse=True)`): float32, natural log.
- What flex_attention cannot run (torch raises NotImplementedError: on the CPU the compiled
  path is inference only and returns no lse, and neither path has a backward there) is
  `Unsupported` with torch's words; any other exception is the implementation's failure.
- `variant` and `config` are accepted and ignored.
"""
from __future__ import annotations

import functools
import re
import warnings

import torch

from .implementations import Unsupported
from .oracle import default_scale

RECOMPILE_LIMIT = 4096  # compiled graphs of one run (a verify worker sees a few hundred shapes)


def _flex_module():
    from torch.nn.attention import flex_attention as module

    return module


@functools.lru_cache(maxsize=None)
def causal_block_mask(seqlen_q: int, seqlen_k: int, device: str):
    """The bottom-right causal block mask of one shape: query i sees key j iff
    j <= i + (seqlen_k - seqlen_q). Built once per (seqlen_q, seqlen_k, device)."""
    offset = seqlen_k - seqlen_q

    def bottom_right(b, h, q_idx, kv_idx):
        return q_idx + offset >= kv_idx

    return _flex_module().create_block_mask(bottom_right, None, None, seqlen_q, seqlen_k,
                                            device=device)


@functools.lru_cache(maxsize=None)
def compiled_flex_attention():
    """`torch.compile(flex_attention, dynamic=False, fullgraph=True)`, made once; dynamo keeps
    one graph per shape, dtype and mask under it. fullgraph: without it, after one call that
    raised while dynamo traced it (a CPU input that requires grad), later calls ran flex_attention
    uncompiled, unseen: a compiled CPU call asking for lse, which inductor refuses, returned one
    (D63)."""
    return torch.compile(_flex_module().flex_attention, dynamic=False, fullgraph=True)


def flex_call(q, k, v, causal: bool, scale: float | None = None, return_lse: bool = False,
              compiled: bool = True):
    """o, or (o, lse) with return_lse, from flex_attention (compiled unless told otherwise)."""
    if q.dim() != 4 or k.dim() != 4 or v.dim() != 4:
        raise ValueError(f"q, k, v must be 4-D (B, H, S, D), got {q.dim()}, {k.dim()}, {v.dim()}")
    if q.shape[1] % k.shape[1]:
        raise ValueError(f"heads_q {q.shape[1]} is not a multiple of heads_kv {k.shape[1]}")
    module = _flex_module()
    scale = default_scale(q.shape[-1]) if scale is None else scale
    kwargs = {"scale": scale, "enable_gqa": q.shape[1] != k.shape[1]}
    if causal:
        kwargs["block_mask"] = causal_block_mask(q.shape[2], k.shape[2], str(q.device))
    if return_lse:
        kwargs["return_aux"] = module.AuxRequest(lse=True)
    try:
        if not compiled:
            with warnings.catch_warnings():  # "called without torch.compile()": meant here
                warnings.simplefilter("ignore", UserWarning)
                out = module.flex_attention(q, k, v, **kwargs)
        else:
            # a silent fallback to eager after dynamo's default 8 graphs would time and judge
            # the unfused path under flex's name: allow many graphs, and fail past them
            with torch._dynamo.config.patch(recompile_limit=RECOMPILE_LIMIT,
                                            accumulated_recompile_limit=RECOMPILE_LIMIT,
                                            fail_on_recompile_limit_hit=True):
                out = compiled_flex_attention()(q, k, v, **kwargs)
    except Exception as error:  # noqa: BLE001 - sorted: cannot run (Unsupported) or a failure
        if why := _not_implemented(error):
            raise Unsupported(f"flex_attention{'' if compiled else ' (eager)'}: {why}") from error
        raise
    if not return_lse:
        return out
    o, aux = out
    return o, aux.lse


_NOT_IMPLEMENTED = re.compile(r"NotImplementedError(?:: ([^\n]+)|\(['\"](.+?)['\"]\))")


def _not_implemented(error: BaseException) -> str | None:
    """torch's reason when `error` is, or wraps, a NotImplementedError; else None. Inductor
    puts it in its message ("NotImplementedError: why"), dynamo in a cause of its own
    ("raised exception NotImplementedError('why')")."""
    seen = error
    while seen is not None:
        if isinstance(seen, NotImplementedError):
            return str(seen).strip().splitlines()[0]
        if found := _NOT_IMPLEMENTED.search(str(seen)):
            return found.group(1) or found.group(2)
        seen = seen.__cause__ or seen.__context__
    return None


def flex(q, k, v, *, causal=False, softmax_scale=None, variant=None, return_lse=False,
         config=None):
    """torch's flex_attention under torch.compile (see fa2check.core.flex)."""
    return flex_call(q, k, v, causal, softmax_scale, return_lse, compiled=True)


def flex_eager(q, k, v, *, causal=False, softmax_scale=None, variant=None, return_lse=False,
               config=None):
    """torch's flex_attention without torch.compile: the unfused path (see fa2check.core.flex)."""
    return flex_call(q, k, v, causal, softmax_scale, return_lse, compiled=False)
