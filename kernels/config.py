"""Tile configurations. Chosen per call by the launcher, never by an autotuner inside a kernel,
so a flag's effect is never confounded with a different tile choice made behind its back."""
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
    # reference grid (kernels/fa1_launch.py, D90)
    fa1_splits: int = 0
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
        sequences unless fa1_bwd_splits is 1 (kernels/fa1_launch.py)."""
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


def default_config(head_dim: int, on_gpu: bool, variant=None, dtype=None,
                   backend: str = "triton", *, causal: bool | None = None,
                   seqlen_q: int | None = None, seqlen_k: int | None = None,
                   gpu: str | None = None) -> TileConfig:
    """The tiles of a call. On a GPU, given the variant, mask and lengths, the table of tuned
    tiles' entries for this GPU (`gpu`, default torch.cuda.get_device_name()), backend,
    variant, block_d(head_dim), mask, dtype and seqlen band (kernels/tuned_tiles.py) replace
    heuristic_config's fields; keys the table lacks, and the interpreter, keep those. A Hopper
    switch variant runs its FA2 variant's tiles on a deeper K/V ring where it fits
    (kernels.hopper_forward.switch_ring, D80)."""
    config = heuristic_config(head_dim, on_gpu, variant, dtype, backend, causal=causal)
    if on_gpu and variant is not None and None not in (causal, seqlen_q, seqlen_k):
        from .tuned_tiles import apply_table

        # a Hopper switch variant reads its FA2 variant's entries (D66)
        config = apply_table(config, backend, variant.fa2, head_dim, causal, dtype, seqlen_q,
                             seqlen_k, gpu)
    if backend == "hopper":
        from .hopper_forward import switch_ring

        config = switch_ring(config, variant, block_d(head_dim), causal)
    return config


def heuristic_config(head_dim: int, on_gpu: bool, variant=None, dtype=None,
                     backend: str = "triton", *, causal: bool | None = None) -> TileConfig:
    """A reasonable starting point; `fa2check.ablate` tunes every variant separately.
    dtype (torch dtype or its name): float32 tiles take twice the shared memory.
    backend "gluon": the forward tiles of the Gluon kernel (4 warps; the compile gate shows
    spills, 8 bytes, only for split-Q without seq_parallel at head_dim 32);
    the backward fields stay the Triton backward's, which the gluon backend's gradients and the
    hopper backend's outside kernels.hopper_backward use.
    The tiles follow the tile's head dimension, block_d(head_dim): registers and shared memory
    are those of the padded tile (head_dim 96 gets head_dim 128's tiles); the Triton forward's
    tiles at 129-192 columns in chunks (tile_columns, D60: 160, 192) get tiles of their own,
    with TMA (D62; flash_attention drops it where kernels.tma.tma_ready refuses K or V)."""
    columns = tile_columns(head_dim)
    head_dim = block_d(head_dim)
    if backend == "hopper":  # kernels/hopper_forward.py: 64 rows a consumer warpgroup
        from .hopper_forward import SHARED_LIMIT, shared_bytes

        split_q, seq_parallel = (True, True) if variant is None else (variant.split_q,
                                                                       variant.seq_parallel)
        # FA1's schedule: one K/V stage, its room given to the partial-state ring (D55)
        stages = 2 if seq_parallel else 1
        # the widest K/V tile whose buffers fit in shared memory (causal None counts the causal
        # buffers of D53: FA1's split-Q causal schedule at head_dim 128 takes 64); FA1's own
        # split-K tile is 256 keys (D67), which fits its one-stage schedule only
        widths = (256, 128, 64) if not (split_q or seq_parallel) else (128, 64)
        block_n = next((n for n in widths if shared_bytes(
            head_dim, n, stages, split_q, seq_parallel, causal=causal is not False)
            <= SHARED_LIMIT), 64)
        # the backward fields are the Triton backward's for this variant (its gradients where
        # kernels.hopper_backward does not take the call)
        return replace(heuristic_config(head_dim, on_gpu, variant, dtype), block_m=64,
                       block_n=block_n, num_warps=4, num_stages=stages, tma=False)
    if backend == "gluon":
        # the backward fields are the Triton backward's for this variant (its gradients)
        config = heuristic_config(head_dim, on_gpu, variant, dtype)
        if variant is not None and not variant.split_q:  # FA1: 16 rows, 16 keys per warp
            return replace(config, block_m=16, block_n=64, num_warps=4, num_stages=1)
        return replace(config, block_m=64, block_n=32, num_warps=4, num_stages=1)
    # backward: dQ in its own pass on the tiles the first tuned bf16 run chose for FA2
    # (docs/decisions.md D30); the ablation's wider space has found faster
    # ones since, but these are the tiles verify and the GPU tests ran
    if not on_gpu:
        # The interpreter's cost grows with the number of tile steps, not their size; small
        # tiles still exercise partial tiles and multi-tile loops at small sequence lengths.
        config = TileConfig(block_m=32, block_n=16, num_warps=4, num_stages=1,
                            bwd_block_m=16, bwd_block_n=32, bwd_num_stages=1, bwd_dq_pass=True)
    elif head_dim <= 64:
        config = TileConfig(block_m=128, block_n=64, num_warps=4, num_stages=3,
                            bwd_block_m=32, bwd_block_n=64, bwd_num_warps=4, bwd_num_stages=3,
                            bwd_dq_pass=True)
    elif head_dim <= 128:
        config = TileConfig(block_m=128, block_n=64, num_warps=8, num_stages=3,
                            bwd_block_m=64, bwd_block_n=128, bwd_num_warps=8, bwd_num_stages=2,
                            bwd_dq_pass=True)
    else:
        config = TileConfig(block_m=64, block_n=32, num_warps=4, num_stages=2,
                            bwd_block_m=32, bwd_block_n=32, bwd_num_warps=8, bwd_num_stages=1,
                            bwd_dq_pass=True)
        split_q_seq_parallel = variant is None or (variant.split_q and variant.seq_parallel)
        if (columns <= 192 and str(dtype).removeprefix("torch.") != "float32"
                and split_q_seq_parallel):
            # the forward's chunks (D60) carry 160 or 192 columns, not 256: head_dim 128's
            # forward tiles. sm_90 compile gate, bf16 and fp16, full and causal, 160, 192
            # and 192/128: split-Q with seq_parallel (both defer_norm) 173-250 registers and no
            # spills (the REPAIR launch: 96-200 bytes at 160 and 192), 164-197 KB of shared
            # memory; 128-key tiles need 240 KB at 192. Not for FA1's schedule (231-289 KB of
            # shared memory on these) or split-K (5-14 KB of spills), nor float32 (its REPAIR
            # launch needs 238-279 KB): those keep head_dim 256's.
            # TMA, a descriptor a column chunk (D62): bf16 and fp16, attn_fwd and
            # attn_fwd_grad, 144-219 registers (bf16 pointer loads: 186-250), no spills, 1 KB
            # more shared memory
            config = replace(config, block_m=128, block_n=64, num_warps=8, num_stages=3,
                             tma=True)
    if on_gpu and str(dtype).removeprefix("torch.") == "float32":
        if head_dim >= 128:
            # 3 stages of float32 K/V tiles need 213-230 KB of the 227 KB an sm_90 block may
            # use, and some launches go over (seqlen_k == 1 is compiled as a constant: 240 KB)
            config = replace(config, num_stages=2)
        # float32 backward: the tiles used before the dQ pass existed, dQ in the loop. With
        # the dQ pass on 32 x 32 tiles (fewer spills in the compile gate) the GPU test of a
        # 4096^2 causal float32 call, whose non-seq-parallel variants run 4 programs, did not
        # finish in 280 s (most likely those small tiles: 4x the serial steps); with these it had
        # passed inside a 265 s suite (docs/decisions.md D09).
        config = replace(config, bwd_dq_pass=False, bwd_block_m=64 if head_dim <= 128 else 32,
                         bwd_block_n=64 if head_dim <= 128 else 32,
                         bwd_num_warps=4 if head_dim <= 64 else 8,
                         bwd_num_stages=2 if head_dim <= 128 else 1)
    if variant is not None and not variant.seq_parallel and on_gpu and head_dim <= 128:
        # FA1's schedule (kernels/forward.py), which reads and writes each row block's acc at
        # every step. sm_90 compile gate, bf16, both defer_norm, full and causal: at d <= 64
        # these tiles take 235-247 registers and no spills (4 warps on 128 rows spill); at
        # d = 128 one stage takes 234-247 with the full mask and no spills, and causal spills
        # 196-224 bytes (every tile tried spilled some there).
        # FA1 itself stepped 16 rows at a time on mma.sync; a wgmma needs 64 rows a warpgroup,
        # and the tuning space holds both (fa2check/ablate/tuning.py).
        config = replace(config, block_m=128, block_n=64, num_warps=8,
                         num_stages=2 if head_dim <= 64 else 1)
    if (variant is not None and not variant.split_q and on_gpu and head_dim <= 128
            and str(dtype).removeprefix("torch.") != "float32"):
        # backward split-K (kernels/backward.py), FA1's partition: dQ in the dK/dV loop as FA1
        # computed it, 16 query rows a step, the dQ product's keys in slices of 16 (FA1's
        # backward: 8 warps over 128 keys). The dQ pass would hold (slices, bwd_block_n, D)
        # float32 partials: at d=128 on (64, 128) tiles 376 KB of shared memory and 20 KB of
        # spills. sm_90 compile gate, bf16 causal: d <= 64 (16, 128, 8 warps, 8 slices) 245
        # registers, no spills; d=128 128 keys spill 272 bytes, 64 keys 80, and (16, 32, 4
        # warps, 2 slices) takes 212 registers and none (docs/decisions.md D50).
        wide = head_dim <= 64
        config = replace(config, bwd_dq_pass=False, bwd_block_m=16,
                         bwd_block_n=128 if wide else 32, bwd_num_warps=8 if wide else 4,
                         bwd_num_stages=2, bwd_key_slices=8 if wide else 2)
    if variant is not None and not variant.split_q and on_gpu and head_dim >= 128:
        # split-K keeps one partial output per slice: (slices, BLOCK_M, D) float32 registers
        config = replace(config, block_m=64)
    return config.for_variant(variant, on_gpu) if variant is not None else config
