"""FA1's launchers: how many programs FlashAttention-1's own host code gave its schedule, which
is the grid the ablation's FA1-style variants run by default (docs/decisions.md D90).

Read from flash-attention's CUDA code before the "FlashAttention-2 release" commit:

- forward (fmha_fwd_launch_template.h, `num_splits_heuristic_fwd`): grid (batch, heads,
  num_splits); each (batch, head)'s 16-row query steps are split over blockIdx.z so that the
  CTAs fill whole waves of the GPU (`fa1_num_splits`).
- backward (fmha_bwd_launch_template.h, `num_splits_heuristic_bwd`): either one CTA per
  (batch, head) walking every key column block (`fmha_bwd_dq_dk_dv_loop_kernel`), or one CTA
  per column block of each (batch, head) (`fmha_bwd_q_dk_dv_loop_seqparallel_kernel`), dQ
  summed in a float32 buffer by atomic adds; the heuristic weighs the two grids' wave
  efficiency (`fa1_bwd_column_parallel`). So at long sequences FA1's own backward was already
  parallel over the keys: FA2's section 3.2 changed its forward's grid, not its backward's.

A TileConfig chooses: fa1_splits / fa1_bwd_splits = 0 is FA1's heuristic (the default), 1 is one
program per (batch, head), the paper's prose ("parallel over batch and heads") kept as a
labelled reference grid (`python -m fa2check.ablate --fa1-grid batch-heads`).
"""
from __future__ import annotations

import math

# FA1's cap on its forward's splits (fmha_fwd_launch_template.h)
FA1_MAX_SPLITS = 30
# the interpreter has no SMs: FA1's heuristics then assume an H200's 132, one CTA each
INTERPRETER_SMS = 132


def wave_efficiency(ctas: int, slots: int) -> float:
    """waves / ceil(waves) for `ctas` CTAs on `slots` resident slots (SMs x CTAs an SM)."""
    waves = ctas / slots
    return waves / math.ceil(waves) if waves else 0.0


def fa1_num_splits(batch_heads: int, num_sms: int, ctas_per_sm: int, max_splits: int) -> int:
    """FA1's num_splits_heuristic_fwd (fmha_fwd_launch_template.h): the number of splits of
    each (batch, head)'s query row blocks, grid (batch, heads, splits). For n = 1..max_splits
    the wave efficiency of batch_heads * n CTAs on num_sms * ctas_per_sm slots is
    waves / ceil(waves), waves = batch_heads * n / (num_sms * ctas_per_sm); more splits mean
    more HBM traffic (every split re-reads the K/V tiles), so FA1 takes the smallest n within
    95% of the best efficiency. FA1 capped n at min(30, query steps) in intent; its code reads
    `(seqlen_q + M - 1 / M)`, which C parses as seqlen_q + M, so it allowed up to 30 splits
    even where fewer row blocks leave some empty; the caller here passes the intent."""
    slots = num_sms * ctas_per_sm
    efficiency = [wave_efficiency(batch_heads * n, slots) for n in range(1, max(1, max_splits) + 1)]
    best = max(efficiency)
    return next(n for n, e in enumerate(efficiency, 1) if e > 0.95 * best)


def fa1_bwd_column_parallel(batch_heads: int, sms_and_ctas, seqlen_k: int, block_n: int,
                            causal: bool) -> bool:
    """FA1's num_splits_heuristic_bwd (fmha_bwd_launch_template.h): whether the backward runs one
    program per key column block of block_n keys (True) rather than one per (batch, head).
    The column grid's wave efficiency is discounted by 1 + block_n / seqlen_k (zeroing and
    copying the float32 dQ buffer), by half that when causal; causal with at least 10 column
    blocks always goes parallel (it balances the triangle's load too). FA1 passed seqlen_k
    rounded up to whole blocks. `sms_and_ctas()`: the GPU's SMs and the kernel's CTAs an SM,
    asked only where the answer depends on them (the question may compile a kernel)."""
    blocks = -(-seqlen_k // block_n)
    if blocks == 1:  # nothing to split
        return False
    if causal and blocks >= 10:
        return True
    sms, ctas_per_sm = sms_and_ctas()
    slots = sms * ctas_per_sm
    discount = 1.0 + (0.5 if causal else 1.0) / blocks
    return wave_efficiency(batch_heads * blocks, slots) / discount > \
        wave_efficiency(batch_heads, slots)


def bwd_column_parallel(variant, fa1_bwd_splits: int, batch_heads: int, seqlen_k: int,
                        block_n: int, causal: bool, sms_and_ctas) -> bool:
    """Whether a backward runs one program per key column block: always with seq_parallel;
    FA1's schedule with fa1_bwd_splits 0 by FA1's heuristic, 1 never, more always (FA1: any
    count above 1 runs the column-parallel kernel)."""
    if variant.seq_parallel or fa1_bwd_splits > 1:
        return True
    return fa1_bwd_splits == 0 and fa1_bwd_column_parallel(batch_heads, sms_and_ctas, seqlen_k,
                                                           block_n, causal)


# the grids of FA1's schedule a run can ask for: (fa1_splits, fa1_bwd_splits)
FA1_GRIDS = {
    "fa1": (0, 0),  # FA1's launcher's heuristics: the FA1 of record
    "batch-heads": (1, 1),  # one program per (batch, head): a reference grid
}


def with_fa1_grid(config, grid: str):
    """config with the FA1 schedule's grids of `grid` (FA1_GRIDS)."""
    import dataclasses

    if grid not in FA1_GRIDS:
        raise ValueError(f"FA1 grid {grid!r}: expected one of {', '.join(FA1_GRIDS)}")
    splits, bwd_splits = FA1_GRIDS[grid]
    return dataclasses.replace(config, fa1_splits=splits, fa1_bwd_splits=bwd_splits)
