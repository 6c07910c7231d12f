"""Tile configurations (`TileConfig`) and a head dim's tiles (`block_d`, `head_chunks`,
`tma_fits`). Chosen per call by the launcher, never by an autotuner inside a kernel, so a
flag's effect is never confounded with a different tile choice made behind its back."""
from __future__ import annotations

from dataclasses import dataclass, replace

MIN_DOT_DIM = 16  # smallest tl.dot operand dimension the GPU compiler accepts
MAX_HEAD_DIM = 256


def block_d(head_dim: int) -> int:
    """The tile's head dimension for a true head_dim: the next power of two, at least
    MIN_DOT_DIM (tl.arange and tl.dot need both). The kernels mask the padded columns."""
    return max(MIN_DOT_DIM, 1 << (head_dim - 1).bit_length())


def head_chunks(head_dim: int) -> tuple[int, int]:
    """The Triton forward's column chunks for a true head_dim (docs/decisions.md D60): (D0, D1),
    the head dim computed as D0 + D1 columns, two tl.dot over D0 and over D1 (D1 padded and
    masked as block_d pads). D0 is the largest power of two below head_dim and D1 =
    block_d(head_dim - D0) where that carries fewer columns than one padded tile, block_d
    (96 = 64 + 32, 192 = 128 + 64, 40 = 32 + 16 of 64); otherwise (block_d(head_dim), 0): a
    tile width, or padding as cheap (112 = 64 + 64 or 128: one tile, one dot)."""
    padded = block_d(head_dim)
    d0 = padded // 2
    if head_dim == padded or d0 < MIN_DOT_DIM:
        return padded, 0
    d1 = block_d(head_dim - d0)
    return (d0, d1) if d0 + d1 < padded else (padded, 0)


def tile_columns(head_dim: int) -> int:
    """The head-dim columns a forward tile carries: D0 + D1 of head_chunks (block_d where the
    head dim is padded into one tile)."""
    return sum(head_chunks(head_dim))


TMA_ALIGN = 16  # bytes: a tensor descriptor's global strides and the least width of its box
ELEMENT_BYTES = {"float16": 2, "bfloat16": 2, "float32": 4}


def tma_fits(*head_dims: int, dtype) -> bool:
    """Whether tensor descriptors can carry contiguous K and V of these head dims and dtype
    (torch dtype or its name) in the forward's column chunks (D62): a descriptor a chunk of
    head_chunks, its box the chunk's width (at least MIN_DOT_DIM columns, so at least 32
    bytes: TMA's box needs 16) and columns past the head dim arriving as zeros. What TMA
    cannot do is a row stride that is not a multiple of 16 bytes: a head dim whose row is not
    (bf16/fp16: head_dim % 8, float32: head_dim % 4) is refused. A call's own strides and
    alignment are checked on its tensors (kernels.tma.tma_ready)."""
    size = ELEMENT_BYTES[str(dtype).removeprefix("torch.")]
    return all(d * size % TMA_ALIGN == 0 and min(w for w in head_chunks(d) if w) * size
               >= TMA_ALIGN for d in head_dims)


@dataclass(frozen=True)
class TileConfig:
    block_m: int  # query rows per program step
    block_n: int  # keys per K/V tile
    num_warps: int = 4
    num_stages: int = 2
    key_slices: int = 4  # split-K only: slices a K/V tile is cut into (FA1 used 4 warps)
    input_precision: str = "ieee"  # for float32 operands; "tf32" only when asked for
    tma: bool = False  # forward: K/V tiles through tensor descriptors (kernels/forward.py)
    # causal forward: the main launch flags row blocks whose output holds a NaN, for the REPAIR
    # launch (off: REPAIR reads each row block's first output row instead; kernels/forward.py)
    nan_flags: bool = True
    # forward: ptxas's per-thread register cap (maxnreg), 0 for none. A CTA of W warps holds
    # W * 32 * registers (rounded up to 256 a warp) of an SM's 65536, so a cap can buy one more
    # resident CTA: 133 registers at 4 warps fit 3 CTAs an SM, 128 fit 4.
    max_registers: int = 0
    # forward, seq_parallel off: splits of each (batch, head)'s query row blocks, grid
    # (batch * heads, splits), split s owning row blocks s, s + splits, ... as in FA1; 0 is
    # FA1's launcher's heuristic, the FA1 of record; 1 is one program per (batch, head), a
    # reference grid (kernels/plan/fa1_launch.py, D90)
    fa1_splits: int = 0
    # the Hopper chassis's forward, seq_parallel with its producer warp: a persistent grid, one
    # program an SM walking row blocks, the next one's loads under this one's last tiles
    # and epilogue (kernels/hopper_forward.py, D98); other kernels and variants ignore it
    persistent: bool = False
    # backward, seq_parallel off: 0 is FA1's launcher's heuristic (one program per (batch, kv
    # head) or one per key column block), 1 always the former, more always the latter
    fa1_bwd_splits: int = 0
    # backward: one program per key/value column block of bwd_block_n keys
    bwd_block_m: int = 64
    bwd_block_n: int = 64
    bwd_num_warps: int = 4
    bwd_num_stages: int = 2
    bwd_dq_pass: bool = False  # dQ in a pass of its own, not in the dK/dV loop (kernels/backward.py)
    # backward split-K only: slices the keys of each dQ_i += dS_ij K_j product are cut into
    # (the keys of the dQ pass's step, bwd_block_m, or of the column block, bwd_block_n)
    bwd_key_slices: int = 4

    def dq_atomics(self, variant) -> bool:
        """Whether the backward may sum dQ with float32 atomic adds (so its bits may vary):
        with one program per key column block, which FA1's launcher also picks for long
        sequences unless fa1_bwd_splits is 1 (kernels/plan/fa1_launch.py)."""
        return (variant.seq_parallel or self.fa1_bwd_splits != 1) and not self.bwd_dq_pass

    def bwd_dq_keys(self) -> int:
        """Keys of one dQ_i += dS_ij K_j product of the backward: the dQ pass steps over
        bwd_block_m keys, dQ in the dK/dV loop takes the column block's bwd_block_n."""
        return self.bwd_block_m if self.bwd_dq_pass else self.bwd_block_n

    def for_variant(self, variant, on_gpu: bool) -> "TileConfig":
        """Fit key_slices to block_n and bwd_key_slices to the backward's dQ keys: each slice
        must be a valid dot operand on the GPU."""
        if variant.split_q:
            return self
        slices, bwd_slices = self.key_slices, self.bwd_key_slices
        if on_gpu:
            slices = max(1, min(slices, self.block_n // MIN_DOT_DIM))
            bwd_slices = max(1, min(bwd_slices, self.bwd_dq_keys() // MIN_DOT_DIM))
        return replace(self, key_slices=slices, bwd_key_slices=bwd_slices)


BACKENDS = ("triton", "gluon", "hopper")
