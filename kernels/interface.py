"""`flash_attention`: argument checks, the autograd function, and the calls into the kernels."""
from __future__ import annotations

import functools
import math
import os
from dataclasses import replace

import torch

from .plan.config import default_config
from .plan.tiles import BACKENDS, MAX_HEAD_DIM, MIN_DOT_DIM, TileConfig, tma_fits
from .tma import tma_ready
from .variant import Variant

# any head_dim from 1 to MAX_HEAD_DIM; the tiles pad it to block_d(head_dim) and mask the rest
SUPPORTED_HEAD_DIMS = tuple(range(1, MAX_HEAD_DIM + 1))
TILE_HEAD_DIMS = (16, 32, 64, 128, 256)  # the head dimensions a tile can have (block_d)
SUPPORTED_DTYPES = (torch.float16, torch.bfloat16, torch.float32)
INT32_MAX = 2**31 - 1
MIN_REGISTERS, MAX_REGISTERS = 24, 255  # TileConfig.max_registers: ptxas's maxnreg range


def interpreting() -> bool:
    """True when Triton runs kernels through its CPU interpreter."""
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


if interpreting():
    from .interpreter_fixes import patch_bf16

    patch_bf16()


def call_config(q, k, v, causal, variant=Variant(), backend="triton") -> TileConfig:
    """The tiles flash_attention picks for this call when it is given no config."""
    on_gpu = q.is_cuda and not interpreting()
    # tiles sized for the wider of q's and v's head dims (the accumulator is v's)
    config = default_config(max(q.shape[-1], v.shape[-1]), on_gpu, variant, q.dtype, backend,
                            causal=bool(causal), seqlen_q=q.shape[2], seqlen_k=k.shape[2],
                            gpu=_gpu_name(q.device.index) if on_gpu else None)
    if config.tma and not _tma_possible(k, v, backend):  # a tuned tile's TMA needs aligned K/V
        config = replace(config, tma=False)
    return config


def flash_attention(q, k, v, *, causal=False, softmax_scale=None, variant: Variant | None = None,
                    return_lse=False, config: TileConfig | None = None,
                    backend: str | None = None):
    """softmax(q k^T * softmax_scale [+ causal mask]) v, differentiable in q, k and v.

    q and k (batch, heads_q or heads_kv, seqlen_q or seqlen_k, head_dim), v (batch, heads_kv,
    seqlen_k, head_dim_v): any head_dim and head_dim_v from 1 to 256 (the backends "gluon" and
    "hopper" take fewer, and head_dim_v == head_dim only), heads_q % heads_kv == 0 (query head
    h reads kv head h // (heads_q // heads_kv)). softmax_scale defaults to head_dim ** -0.5.
    causal is bottom-right aligned: query i sees key j iff j <= i + seqlen_k - seqlen_q; a row
    that sees no key gets output 0 and lse -inf.
    Returns o (batch, heads_q, seqlen_q, head_dim_v) in q's dtype, and with return_lse=True also lse: float32 (batch, heads_q,
    seqlen_q), natural log. `config` overrides the tile sizes (see kernels.plan.tiles).
    A call that names no backend, variant or config runs the fastest correct kernel measured
    on this GPU for its key (kernels.fastest: the committed table kernels/fastest.json; Triton's
    FA2 where the table has no faster one). Otherwise variant defaults to FA2 (`Variant()`) and
    backend to "triton" ("hopper" for a variant with Hopper-era switches).
    backend "gluon" computes the forward with the Gluon kernel, whose warp layouts are stated
    (kernels.gluon_forward; CUDA only, float16/bfloat16); the backward is the Triton one.
    backend "hopper" computes it on Hopper's wgmma/TMA/warp-specialised chassis, where split-K
    splits the keys across consumer warpgroups (kernels.hopper_forward; sm_90, float16/bfloat16,
    head_dim 64 or 128, every variant, and on FA2 the Hopper-era switches of
    `Variant.hopper()`); the backward runs on the same chassis (kernels.hopper_backward, the
    variant's FA2 flags) where it can (`kernels.hopper_backward.unsupported`), else the Triton
    one.
    """
    _check_inputs(q, k, v, causal, softmax_scale, Variant() if variant is None else variant)
    needs_grad = torch.is_grad_enabled() and (q.requires_grad or k.requires_grad or v.requires_grad)
    if backend is None and variant is None and config is None:
        backend, variant = _fastest(q, k, v, causal, needs_grad)
    else:
        variant = Variant() if variant is None else variant
        if backend is None:
            backend = "hopper" if variant.hopper_switches else "triton"
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}")
    if variant.hopper_switches and backend != "hopper":
        raise ValueError(f"{variant}: the Hopper-era switches "
                         f"({', '.join(variant.hopper_switches)}) exist on backend 'hopper' "
                         f"only, got backend {backend!r}")
    if backend in ("gluon", "hopper") and interpreting():
        raise ValueError(f"the {backend} backend needs a CUDA GPU: Triton's interpreter does not "
                         "run Gluon (its layouts can be compiled and read on the CPU: "
                         "python -m fa2check.layouts --backend gluon)")
    q, k, v = (_int32_addressable(t, name) for t, name in ((q, "q"), (k, "k"), (v, "v")))
    head_dim = q.shape[-1]
    if softmax_scale is None:
        softmax_scale = head_dim ** -0.5
    on_gpu = q.is_cuda and not interpreting()
    if config is None:
        config = call_config(q, k, v, causal, variant, backend)
    _check_config(config, variant, on_gpu)  # the Gluon launcher checks what it cannot run
    if config.tma:
        _check_tma(k, v, backend)
    args = (q, k, v, bool(causal), float(softmax_scale), variant, config, backend, return_lse)
    if needs_grad:
        o, lse = _FlashAttention.apply(*args)
    else:  # no autograd node: less host time a call, which short calls feel
        o, lse = _forward(*args)[:2]
    return (o, lse) if return_lse else o


def _fastest(q, k, v, causal, needs_grad) -> tuple[str, Variant]:
    """The (backend, variant) a call that names none runs (kernels.fastest)."""
    from .fastest import DEFAULT, for_call

    if not q.is_cuda or interpreting():
        return DEFAULT
    return for_call(q, k, v, causal, needs_grad, _gpu_name(q.device.index))


@functools.lru_cache(maxsize=None)
def _gpu_name(index) -> str:
    """The name the table of tuned tiles is keyed by (kernels/plan/tuned_tiles.py)."""
    return torch.cuda.get_device_name(torch.cuda.current_device() if index is None else index)


def lse_from_m_l(m, l):
    """lse = m + log(l), and -inf for rows whose l is 0 (rows that see no key)."""
    return torch.where(l > 0, m + torch.log(l), torch.full_like(m, float("-inf")))


def _forward(q, k, v, causal, softmax_scale, variant, config, backend, return_lse,
             for_backward=False):
    """o, lse (None unless return_lse), the statistics the backward needs, and (for_backward)
    o's rounding residual for the backward's Delta (kernels/forward.py, D06, D91)."""
    if backend == "gluon":
        from .gluon_forward import gluon_attn_fwd

        o, stats, o_res = gluon_attn_fwd(q, k, v, causal, softmax_scale, variant, config,
                                         o_residual=for_backward)
    elif backend == "hopper":
        from .hopper_forward import hopper_attn_fwd

        o, stats, o_res = hopper_attn_fwd(q, k, v, causal, softmax_scale, variant, config,
                                          o_residual=for_backward)
    else:
        from .forward import attn_fwd

        o, stats, o_res = attn_fwd(q, k, v, causal, softmax_scale, variant, config,
                                   o_residual=for_backward)
    lse = None
    if return_lse:
        lse = stats[0] if variant.defer_norm else lse_from_m_l(*stats)
    return o, lse, stats, o_res


class _FlashAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, causal, softmax_scale, variant, config, backend, return_lse):
        o, lse, stats, o_res = _forward(q, k, v, causal, softmax_scale, variant, config,
                                        backend, return_lse, for_backward=True)
        ctx.save_for_backward(q, k, v, o, o_res, *stats)
        ctx.causal, ctx.softmax_scale, ctx.variant, ctx.config = causal, softmax_scale, variant, config
        ctx.backend = backend
        ctx.set_materialize_grads(False)
        return o, lse

    @staticmethod
    def backward(ctx, do, dlse):
        q, k, v, o, o_res, *stats = ctx.saved_tensors
        if do is None and dlse is None:
            return (None,) * 9
        if do is None:
            do = torch.zeros_like(o)
        dq, dk, dv = _backward(q, k, v, o, stats, do, dlse, ctx.causal, ctx.softmax_scale,
                               ctx.variant.backward, ctx.config, o_res, ctx.backend)
        return dq, dk, dv, None, None, None, None, None, None


def _backward(q, k, v, o, stats, do, dlse, causal, softmax_scale, variant, config, o_res,
              backend):
    """dq, dk, dv: backend "hopper" runs the Gluon backward on the Hopper chassis where it can
    (kernels.hopper_backward.unsupported says where not), every other call the Triton one."""
    if backend == "hopper":
        from .hopper_backward import hopper_attn_bwd, unsupported

        if unsupported(q, k, v) is None:
            return hopper_attn_bwd(q, k, v, o, stats, do, dlse, causal, softmax_scale, variant,
                                   config, o_res)
    from .backward import attn_bwd

    return attn_bwd(q, k, v, o, stats, do, dlse, causal, softmax_scale, variant.fa2, config,
                    o_res)


def _check_inputs(q, k, v, causal, softmax_scale, variant):
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
        if t.dim() != 4:
            raise ValueError(f"{name} must have 4 dimensions (batch, heads, seqlen, head_dim), "
                             f"got shape {tuple(t.shape)}")
        if t.dtype not in SUPPORTED_DTYPES:
            raise TypeError(f"{name} must be float16, bfloat16 or float32, got {t.dtype}")
        if not 1 <= t.shape[3] <= MAX_HEAD_DIM:
            raise ValueError(f"{name} has head_dim {t.shape[3]}; head_dim must be from 1 to "
                             f"{MAX_HEAD_DIM}")
        if min(t.shape) < 1:
            raise ValueError(f"{name} has an empty dimension: shape {tuple(t.shape)}")
    if not (q.dtype == k.dtype == v.dtype):
        raise TypeError(f"q, k and v must share one dtype, got {q.dtype}, {k.dtype}, {v.dtype}")
    if not (q.device == k.device == v.device):
        raise ValueError(f"q, k and v must be on one device, got {q.device}, {k.device}, {v.device}")
    if k.shape[:3] != v.shape[:3]:
        raise ValueError(f"k and v must have the same batch, heads and seqlen (head dims may "
                         f"differ), got shapes {tuple(k.shape)} and {tuple(v.shape)}")
    if k.shape[0] != q.shape[0]:
        raise ValueError(f"k has batch {k.shape[0]} but q has batch {q.shape[0]}")
    if k.shape[3] != q.shape[3]:
        raise ValueError(f"k has head_dim {k.shape[3]} but q has head_dim {q.shape[3]}")
    if q.shape[1] % k.shape[1] != 0:
        raise ValueError(f"heads_q ({q.shape[1]}) must be a multiple of heads_kv ({k.shape[1]})")
    if not isinstance(causal, bool):
        raise TypeError(f"causal must be a bool, got {type(causal).__name__}")
    if softmax_scale is not None:
        if isinstance(softmax_scale, bool) or not isinstance(softmax_scale, (int, float)):
            raise TypeError(f"softmax_scale must be a float or None, got {type(softmax_scale).__name__}")
        if not (math.isfinite(softmax_scale) and softmax_scale > 0):
            raise ValueError(f"softmax_scale must be finite and positive, got {softmax_scale}")
    if not isinstance(variant, Variant):
        raise TypeError(f"variant must be a kernels.Variant, got {type(variant).__name__}")
    # the device last: a bad call hears about its arguments first
    if not q.is_cuda and not interpreting():
        raise ValueError(f"q is on {q.device}: the kernels need a CUDA device, or Triton's "
                         "interpreter (set TRITON_INTERPRET=1 before importing triton)")


def _check_config(config: TileConfig, variant: Variant, on_gpu: bool):
    if not isinstance(config, TileConfig):
        raise TypeError(f"config must be a kernels.TileConfig or None, got {type(config).__name__}")
    for name in ("block_m", "block_n", "bwd_block_m", "bwd_block_n"):
        value = getattr(config, name)
        if value < 16 or value & (value - 1):
            raise ValueError(f"config.{name} must be a power of two >= 16, got {value}")
    if not variant.split_q:
        if config.key_slices < 1 or config.block_n % config.key_slices:
            raise ValueError(f"config.block_n ({config.block_n}) must be divisible by "
                             f"config.key_slices ({config.key_slices})")
        if on_gpu and config.block_n // config.key_slices < MIN_DOT_DIM:
            raise ValueError(f"config.key_slices ({config.key_slices}) leaves slices of "
                             f"{config.block_n // config.key_slices} keys; the GPU needs >= {MIN_DOT_DIM}")
        keys = config.bwd_dq_keys()
        where = "bwd_block_m (the dQ pass's keys)" if config.bwd_dq_pass else "bwd_block_n"
        if config.bwd_key_slices < 1 or keys % config.bwd_key_slices:
            raise ValueError(f"config.{where.split()[0]} ({keys}) must be divisible by "
                             f"config.bwd_key_slices ({config.bwd_key_slices})")
        if on_gpu and keys // config.bwd_key_slices < MIN_DOT_DIM:
            raise ValueError(f"config.bwd_key_slices ({config.bwd_key_slices}) leaves slices of "
                             f"{keys // config.bwd_key_slices} keys of {where}; the GPU needs "
                             f">= {MIN_DOT_DIM}")
    cap = config.max_registers
    if isinstance(cap, bool) or not isinstance(cap, int) or (
            cap and not MIN_REGISTERS <= cap <= MAX_REGISTERS):
        raise ValueError(f"config.max_registers must be 0 (no cap) or an int in "
                         f"[{MIN_REGISTERS}, {MAX_REGISTERS}], got {cap!r}")
    for name in ("fa1_splits", "fa1_bwd_splits"):
        splits = getattr(config, name)
        if isinstance(splits, bool) or not isinstance(splits, int) or splits < 0:
            raise ValueError(f"config.{name} must be an int >= 0 (0: FA1's heuristic), got "
                             f"{splits!r}")
    for name in ("tma", "nan_flags", "bwd_dq_pass"):
        if not isinstance(getattr(config, name), bool):
            raise TypeError(f"config.{name} must be a bool, got {type(getattr(config, name)).__name__}")
    if config.input_precision not in ("ieee", "tf32"):
        raise ValueError(f"config.input_precision must be 'ieee' or 'tf32', got {config.input_precision!r}")


def _tma_possible(k, v, backend) -> bool:
    """Whether _check_tma would take these K/V."""
    return (backend == "triton" and tma_fits(k.shape[-1], v.shape[-1], dtype=k.dtype)
            and tma_ready(k) and tma_ready(v))


def _check_tma(k, v, backend):
    """Tensor descriptors need 16-byte aligned data and strides and a unit head_dim stride;
    their boxes are the forward's column chunks (kernels.plan.tiles.tma_fits, D62), so a row of
    head_dim elements must be a multiple of 16 bytes."""
    if backend != "triton":
        raise ValueError(f"config.tma is a tile choice of the Triton forward, not of {backend!r}")
    for name, t in (("k", k), ("v", v)):
        head_dim = t.shape[-1]
        if not tma_fits(head_dim, dtype=t.dtype):
            raise ValueError(f"config.tma needs {name}'s rows a multiple of 16 bytes (a tensor "
                             f"descriptor's row stride), got head_dim {head_dim} of "
                             f"{str(t.dtype).removeprefix('torch.')}: "
                             f"{head_dim * t.element_size()} bytes; use tma=False")
    for name, t in (("k", k), ("v", v)):
        if not tma_ready(t):
            raise ValueError(f"config.tma needs {name} with head_dim stride 1 and 16-byte "
                             f"aligned data and strides, got strides {tuple(t.stride())}; use "
                             "tma=False")


def _int32_addressable(t, name):
    """Within one (batch, head) the kernels index with int32; copy a view whose rows span more."""
    span = (t.shape[2] - 1) * abs(t.stride(2)) + (t.shape[3] - 1) * abs(t.stride(3))
    if span <= INT32_MAX:
        return t
    t = t.contiguous()
    if (t.shape[2] * t.shape[3]) > INT32_MAX:
        raise ValueError(f"{name}: seqlen * head_dim = {t.shape[2] * t.shape[3]} exceeds int32 indexing")
    return t
