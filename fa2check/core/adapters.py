"""torch SDPA's backends behind flash_attention's signature, so `python -m fa2check.verify
--impl sdpa` judges the attention users already call by the same properties as our kernels.

    impl(q, k, v, *, causal=False, softmax_scale=None, variant=None, return_lse=False, config=None)

- Each adapter forces one backend (fa2check.core.sdpa_backends.forced): a backend that cannot run a
  problem raises instead of falling back to another, and the adapter turns that into
  `Unsupported` (reported as such, neither pass nor fail).
- Causal: SDPA's `is_causal` is top-left aligned. With seqlen_q == seqlen_k that equals our
  bottom-right rule and is passed as is; otherwise the adapter passes an explicit boolean mask
  of the bottom-right rule, which the flash backend cannot take (Unsupported).
- GQA: the flash and math backends get K/V as they are with `enable_gqa=True`; the efficient and
  cuDNN backends get K/V repeated per query head (their GQA support varies by version), whose
  gradients autograd sums over each group.
- lse: SDPA does not return one. The adapter's lse is a separate float32 logsumexp of the
  scores (float32 q @ k^T, same mask), differentiable through that float32 composition, not the
  backend's own statistics. The lse-related properties therefore judge this composition, and
  the gradient of a loss that uses lse gets that term from it.
- `variant` and `config` are accepted and ignored.
"""
from __future__ import annotations

import warnings

import torch
import torch.nn.functional as F

from .implementations import Unsupported
from .oracle import default_scale, expand_kv, visible_mask
from .sdpa_backends import forced

NATIVE_GQA = {"sdpa-flash": True, "sdpa-math": True, "sdpa-efficient": False, "sdpa-cudnn": False}
NO_KERNEL = ("No available kernel", "No viable backend")  # torch's words when a backend refuses


def _adapter(backend: str):
    def impl(q, k, v, *, causal=False, softmax_scale=None, variant=None, return_lse=False,
             config=None):
        scale = default_scale(q.shape[-1]) if softmax_scale is None else softmax_scale
        seqlen_q, seqlen_k = q.shape[2], k.shape[2]
        mask = None
        if causal and seqlen_q != seqlen_k:
            if backend == "sdpa-flash":
                raise Unsupported("the flash backend takes no mask and its is_causal is top-left "
                                  f"aligned (seqlen_q {seqlen_q} != seqlen_k {seqlen_k})")
            mask = visible_mask(seqlen_q, seqlen_k, True, q.device)
        kwargs = {}
        if q.shape[1] != k.shape[1]:
            if NATIVE_GQA[backend]:
                kwargs["enable_gqa"] = True
            else:
                k, v = expand_kv(k, q.shape[1]), expand_kv(v, q.shape[1])
        with warnings.catch_warnings(record=True) as reasons:  # torch says why a backend refuses
            warnings.simplefilter("always")
            try:
                with forced(backend):
                    o = F.scaled_dot_product_attention(
                        q, k, v, attn_mask=mask, is_causal=causal and mask is None, scale=scale,
                        **kwargs)
            except RuntimeError as error:
                if any(words in str(error) for words in NO_KERNEL):
                    why = "; ".join(_reasons(reasons, backend))
                    raise Unsupported(f"{backend}: {why or str(error).splitlines()[0]}") from error
                raise
        if not return_lse:
            return o
        return o, _float32_lse(q, k, causal, scale)

    impl.__name__ = backend.replace("-", "_")
    impl.__doc__ = f"torch SDPA forced to its {backend[5:]} backend (see fa2check.adapters)."
    return impl


def _reasons(caught, backend: str) -> list[str]:
    """torch's warnings minus the boilerplate about the backends this adapter switched off."""
    reasons = []
    for w in caught:
        text = str(w.message).split(" (Triggered")[0].strip()
        if text.endswith("because:") or "has been runtime disabled" in text:
            continue
        reasons.append(text)
    return list(dict.fromkeys(reasons))


def _float32_lse(q, k, causal, scale):
    s = (q.float() @ expand_kv(k, q.shape[1]).float().transpose(-1, -2)) * scale
    s = s.masked_fill(~visible_mask(q.shape[2], k.shape[2], causal, q.device), float("-inf"))
    return torch.logsumexp(s, dim=-1)


sdpa_flash = _adapter("sdpa-flash")
sdpa_cudnn = _adapter("sdpa-cudnn")
sdpa_efficient = _adapter("sdpa-efficient")
sdpa_math = _adapter("sdpa-math")
ADAPTERS = {"sdpa_flash": sdpa_flash, "sdpa_cudnn": sdpa_cudnn, "sdpa_efficient": sdpa_efficient,
            "sdpa_math": sdpa_math}


def gluon(q, k, v, *, causal=False, softmax_scale=None, variant=None, return_lse=False,
          config=None):
    """Our kernels with the Gluon forward (kernels.gluon_forward): what it cannot run (float32,
    head_dim 256, no GPU) is Unsupported, as for the SDPA backends."""
    from kernels import Variant, flash_attention
    from kernels.gluon_forward import unsupported

    if not q.is_cuda:
        raise Unsupported("the gluon backend runs on CUDA only (the interpreter cannot run Gluon)")
    if why := unsupported(q.dtype, q.shape[-1], v.shape[-1]):
        raise Unsupported(why)
    return flash_attention(q, k, v, causal=causal, softmax_scale=softmax_scale,
                           variant=variant or Variant(), return_lse=return_lse, config=config,
                           backend="gluon")


def hopper(q, k, v, *, causal=False, softmax_scale=None, variant=None, return_lse=False,
           config=None):
    """Our kernels with the Hopper chassis's forward (kernels.hopper_forward): what it cannot
    run (no sm_90 GPU, float32, head_dim other than 64 and 128, strides TMA cannot read, tiles
    over the shared memory) is Unsupported."""
    from kernels import Variant, flash_attention
    from kernels.hopper_forward import check_hopper_call
    from kernels.interface import call_config

    variant = variant or Variant()
    if not q.is_cuda or torch.cuda.get_device_capability(q.device)[0] != 9:
        raise Unsupported("the hopper backend runs on sm_90 GPUs only")
    try:
        check_hopper_call(q, k, v, variant,
                          config or call_config(q, k, v, causal, variant, "hopper"), causal)
    except ValueError as e:
        raise Unsupported(str(e)) from None
    return flash_attention(q, k, v, causal=causal, softmax_scale=softmax_scale, variant=variant,
                           return_lse=return_lse, config=config, backend="hopper")


