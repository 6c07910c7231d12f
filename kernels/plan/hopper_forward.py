"""The Hopper chassis forward's host planning (kernels/hopper_forward.py runs it): the shared
memory of its buffers against sm_90's limit, the K/V ring's stages, the K/V tile widths, the Q
and partial-state buffers of FA1's schedule, the consumer's registers, FA1's num_splits
grid on the chassis, and the persistent grid's programs and whether its static order balances
(D98). Plain Python: the tile choice (kernels/plan/config.py) reads it without
compiling anything."""
import dataclasses
import functools

from .fa1_launch import FA1_MAX_SPLITS, INTERPRETER_SMS, fa1_num_splits

ROWS_PER_WARPGROUP = 64  # a wgmma's M: 16 rows for each of 4 warps
SHARED_LIMIT = 232448 - 1024  # sm_90's 227 KB a block, less room for barriers and alignment
STAGES = {True: (2, 3), False: (1, 2, 3)}  # K/V stages by seq_parallel (FA1's schedule: D55)


def switch_ring(config, variant, head_dim: int, causal) -> "TileConfig":
    """config with the K/V ring one stage deeper for a Hopper switch variant, where that fits:
    the pipelined loop (_fold_tiles_pipelined) holds two slots while it computes, so on FA2's
    two stages the producer has no tile in flight (D80: d=128 8k full, pingpong 1.057x and
    overlap 1.032x on three stages, nothing on two). FA2's own loop holds one and keeps two,
    with or without its producer warp (warp_specialize)."""
    if variant is None or not (variant.pingpong or variant.overlap):
        return config
    deeper = config.num_stages + 1
    fits = deeper in STAGES[True] and shared_bytes(
        head_dim, config.block_n, deeper, True, True, causal=causal is not False) <= SHARED_LIMIT
    return dataclasses.replace(config, num_stages=deeper) if fits else config


def shared_bytes(head_dim: int, block_n: int, stages: int, split_q: bool,
                 seq_parallel: bool = True, q_slots: int | None = None,
                 causal: bool = True, st_slots: int | None = None) -> int:
    """Shared memory of the chassis's buffers: Q (one or two warpgroups' rows; q_slots buffers,
    by default `q_buffers`'s), the K/V ring, split-K's exchange (partial outputs, 64 x D/2
    float32 a consumer, and the row statistics' buffers, 2 x 2 x 64 float32) and, in FA1's
    schedule, the state ring (st_slots buffers, by default `state_slots`'s, x 2 consumers x
    (64 x D or D/2 + 2 x 64) float32); causal: the first non-finite keys of masked tiles
    (x_bad, 4 x D int32; their minimum stays in each warp, so the compiler adds no scratch:
    D83). The sm_90 gate at d=64 and 128: the model falls short of the compiled kernels'
    shared memory by some hundred bytes, barriers and alignment."""
    rows = ROWS_PER_WARPGROUP
    if st_slots is None:
        st_slots = state_slots(head_dim, block_n, stages, split_q, seq_parallel, causal)
    if q_slots is None:
        q_slots = q_buffers(head_dim, block_n, stages, split_q, seq_parallel, causal)
    q = q_slots * (2 if split_q else 1) * rows * head_dim * 2
    ring = stages * 2 * block_n * head_dim * 2
    exchange = 0 if split_q else 2 * rows * (head_dim // 2) * 4 + 4 * rows * 4
    cols = head_dim if split_q else head_dim // 2
    state = 0 if seq_parallel else st_slots * 2 * (rows * cols + 2 * rows) * 4
    bad_keys = 4 * head_dim * 4 if causal else 0
    return q + ring + exchange + state + bad_keys


def state_slots(head_dim: int, block_n: int, stages: int, split_q: bool,
                seq_parallel: bool, causal: bool = True) -> int:
    """FA1's schedule's state buffers: 2 (the next step's state arrives while this one
    computes), or 1 where 2 do not fit beside one Q buffer (block_n 256 at head_dim 128: then
    a step's state is loaded once the step before has stored its own)."""
    if seq_parallel:
        return 2  # unused: seq_parallel allocates a placeholder
    two = shared_bytes(head_dim, block_n, stages, split_q, False, q_slots=1, causal=causal,
                       st_slots=2)
    return 2 if two <= SHARED_LIMIT else 1


def q_buffers(head_dim: int, block_n: int, stages: int, split_q: bool,
              seq_parallel: bool, causal: bool = True, persistent: bool = False) -> int:
    """Q buffers: 1 with seq_parallel (Q is loaded once); a persistent grid's program and FA1's
    schedule load Q again (a row block's, a step's) into 2 (the next one's Q arrives while this
    one computes), or 1 where 2 do not fit beside the K/V ring (a persistent program's
    three stages at head_dim 128: then the next row block's Q is loaded once this one's
    products are done) or `state_slots`'s state buffers (FA1's split-Q at head_dim 128: then
    the next Q is loaded once both consumers' S = Q K^T is done, under their softmax and
    P V)."""
    if seq_parallel and not persistent:
        return 1
    two = shared_bytes(head_dim, block_n, stages, split_q, seq_parallel, q_slots=2,
                       causal=causal)
    return 2 if two <= SHARED_LIMIT else 1


def persistent_programs(config, variant, batch_heads: int, seqlen_q: int, seqlen_k: int,
                        causal: bool, device) -> int:
    """Programs of a persistent forward grid (config.persistent, seq_parallel with the
    producer warp): one an SM (CTAS_PER_SM), no more than there are row blocks; 0 where the grid
    is not persistent, or (causal) where its static order would leave the programs' work
    unbalanced (`static_order_balanced`: then the hardware's own order does better, D98)."""
    if not (config.persistent and variant.seq_parallel and variant.warp_specialize):
        return 0
    rows = ROWS_PER_WARPGROUP * (2 if variant.split_q else 1)
    row_blocks = -(-seqlen_q // rows)
    programs = min(sm_count(device) * CTAS_PER_SM, row_blocks * batch_heads)
    if causal and not static_order_balanced(seqlen_q, seqlen_k, rows, config.block_n,
                                            batch_heads, programs):
        return 0
    return programs


def sm_count(device) -> int:
    """The device's SMs (the interpreter's stand-in count off the GPU), read once a device."""
    return _sm_count(device.type, device.index)


@functools.lru_cache(maxsize=None)
def _sm_count(device_type: str, index) -> int:
    import torch

    if device_type != "cuda":
        return INTERPRETER_SMS
    return torch.cuda.get_device_properties(index).multi_processor_count


BALANCE_SLACK = 1.05  # the static order's busiest program against the grid's
GREEDY_WAVES = 64  # up to this many waves the grid's own order is simulated; beyond, its bound


@functools.lru_cache(maxsize=4096)
def static_order_balanced(seqlen_q: int, seqlen_k: int, rows: int, block_n: int,
                          batch_heads: int, programs: int) -> bool:
    """Causal: whether the persistent grid's static order (kernels/hopper_forward.py's
    _work_item: waves of `programs` row blocks in launch order, odd waves reversed) gives its
    busiest program at most BALANCE_SLACK times the work of the grid's busiest SM, a row
    block's work counted as its K/V tiles plus one for its prologue and epilogue (a model).
    The grid: row blocks in launch order, each to the SM that frees first (up to
    GREEDY_WAVES waves; beyond, the least any order allows: max(work / programs, the longest
    row block)). Where a wave holds about one head's row blocks (16k at 16 heads: 128 of 132
    programs), a program keeps one place in the head's length order and gets 1.5 times the
    grid's busiest SM (measured: 0.72x the grid's time, D98)."""
    import heapq

    import numpy as np

    row_blocks = -(-seqlen_q // rows)
    block = row_blocks - 1 - np.arange(row_blocks)  # launch order: longest first
    visible = np.clip((block + 1) * rows + seqlen_k - seqlen_q, 0, seqlen_k)
    cost = -(-visible // block_n) + 1.0
    item = np.arange(row_blocks * batch_heads)
    wave, place = item // programs, item % programs
    program = np.where(wave % 2 == 1, programs - 1 - place, place)
    busiest = np.bincount(program, weights=cost[item % row_blocks], minlength=programs).max()
    if len(item) <= GREEDY_WAVES * programs:
        free = [0.0] * programs  # when each SM frees
        for c in np.tile(cost, batch_heads).tolist():
            heapq.heapreplace(free, free[0] + c)
        grid = max(free)
    else:
        grid = max(cost.sum() * batch_heads / programs, cost.max())
    return bool(busiest <= BALANCE_SLACK * grid)


def block_ns(variant) -> tuple[int, ...]:
    """K/V tile widths: 64 or 128; split-K also 256 (128 keys a consumer, FA1's own tile at
    head_dim 64 and 128 on the A100: fmha_fwd_hdim*.cu), which fits sm_90's shared memory in
    FA1's one-stage schedule only."""
    return (64, 128) if variant.split_q else (64, 128, 256)


def consumer_registers(split_q: bool, seq_parallel: bool = True) -> int:
    """setmaxnreg for the worker consumer warpgroup (the producer warp keeps 56; the default
    partition, the other consumer, gets what the launch's registers leave). FA1's schedule's
    split-K: 232, where 200 spilled at head_dim 128 (D58)."""
    return 232 if split_q or not seq_parallel else 200


# compile gate (D58): one CTA an SM in every variant; setmaxnreg shares out the SM's registers
CTAS_PER_SM = 1


def fa1_splits(config, batch_heads: int, row_blocks: int, device) -> int:
    """FA1's schedule's programs a (batch, head): config.fa1_splits, or with 0 FA1's
    num_splits heuristic (kernels.plan.fa1_launch.fa1_num_splits) for this GPU's SMs; at most one a
    row block."""
    splits = config.fa1_splits
    if not splits:
        splits = fa1_num_splits(batch_heads, sm_count(device), CTAS_PER_SM,
                                min(FA1_MAX_SPLITS, row_blocks))
    return min(splits, row_blocks)
