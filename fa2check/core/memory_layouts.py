"""How q, k, v and dO can lie in memory: views into larger NaN-filled buffers, so that a read
outside a tensor's logical extent shows as NaN (properties/memory_safety.py judges them; the
fuzzer draws them; the precompile passes compile for them).

- padded: (B, H, S, D) views into a (B+1, H+1, S+2, D+16) buffer, starting one row in.
- bshd-strided: (B, S, H, D) storage seen as (B, H, S, D), every second element of a 2D-wide
  row (stride 2 along head_dim), one row in, one spare head.
- padded-bshd-strided: both at once.
"""
from __future__ import annotations

import torch


def nan_view(t: torch.Tensor, layout: str) -> torch.Tensor:
    """A view equal to `t` (B, H, S, D) into a larger NaN-filled buffer, laid out as `layout`."""
    b, h, s, d = t.shape

    def nans(*shape):
        return torch.full(shape, float("nan"), dtype=t.dtype, device=t.device)

    if layout == "padded":
        view = nans(b + 1, h + 1, s + 2, d + 16)[:b, :h, 1:s + 1, :d]
    elif layout == "bshd-strided":
        view = nans(b, s + 2, h + 1, 2 * d)[:, 1:s + 1, :h, 0::2].transpose(1, 2)
    elif layout == "padded-bshd-strided":
        view = nans(b + 1, s + 2, h + 1, 2 * d + 2)[:b, 1:s + 1, :h, 0:2 * d:2].transpose(1, 2)
    else:
        raise ValueError(f"unknown layout {layout!r}")
    view.copy_(t)
    return view
