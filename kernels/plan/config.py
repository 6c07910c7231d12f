"""The tiles of a call: `heuristic_config`, a starting point per backend, variant, head dim and
dtype, and `default_config`, which on a GPU lays the table of tuned tiles over it
(kernels/plan/tuned_tiles.py) and gives a Hopper switch variant its deeper K/V ring."""
from __future__ import annotations

from dataclasses import replace

from .hopper_forward import SHARED_LIMIT, shared_bytes, switch_ring
from .tiles import TileConfig, block_d, tile_columns
from .tuned_tiles import apply_table


def default_config(head_dim: int, on_gpu: bool, variant=None, dtype=None,
                   backend: str = "triton", *, causal: bool | None = None,
                   seqlen_q: int | None = None, seqlen_k: int | None = None,
                   gpu: str | None = None) -> TileConfig:
    """The tiles of a call. On a GPU, given the variant, mask and lengths, the table of tuned
    tiles' entries for this GPU (`gpu`, default torch.cuda.get_device_name()), backend,
    variant, block_d(head_dim), mask, dtype and seqlen band (kernels/plan/tuned_tiles.py) replace
    heuristic_config's fields; keys the table lacks, and the interpreter, keep those. A Hopper
    switch variant runs its FA2 variant's tiles on a deeper K/V ring where it fits
    (kernels.plan.hopper_forward.switch_ring, D80)."""
    config = heuristic_config(head_dim, on_gpu, variant, dtype, backend, causal=causal)
    if on_gpu and variant is not None and None not in (causal, seqlen_q, seqlen_k):
        # a Hopper switch variant reads its FA2 variant's entries (D66)
        config = apply_table(config, backend, variant.fa2, head_dim, causal, dtype, seqlen_q,
                             seqlen_k, gpu)
    if backend == "hopper":
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
        # kernels.hopper_backward does not take the call); seq_parallel runs a persistent grid
        # (D98)
        return replace(heuristic_config(head_dim, on_gpu, variant, dtype), block_m=64,
                       block_n=block_n, num_warps=4, num_stages=stages, tma=False,
                       persistent=seq_parallel)
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
