"""The forward pass on Hopper's own machinery (wgmma, TMA, mbarriers, warp specialisation), with
FA2's three changes as constexprs: the chassis on which each is measured against FA1's design
(docs/decisions.md D46-D48).

On Hopper a wgmma is issued by a whole warpgroup (4 warps), and its 4 warps lie along the
accumulator's rows (16 rows each, 64 in all). So the Hopper analogue of FA1's warp split of a
K/V tile's keys (FA1: `WARPS_N = 4`, the warps' row max, row sum and partial outputs meeting in
shared memory at every tile) is a split of the keys across consumer *warpgroups*. A program has
three partitions: one producer warp that issues TMA loads into a ring of STAGES shared-memory
slots guarded by mbarriers (ready/empty), and two consumer warpgroups that only compute.
Everything but the split is the same code: producer, ring, stages, masking, epilogue.

    SPLIT_Q (FA2, section 3.3): a program owns 128 query rows; consumer c owns rows
      64c .. 64c + 63 and runs every K/V tile against them:
          S = Q_c K_j^T (wgmma), m, l, P in registers, O_c = alpha O_c + P V_j (wgmma,
          accumulating in place). No byte crosses a warpgroup in the loop.
    split-K (FA1's partitioning on Hopper): a program owns 64 query rows, shared by both
      consumers; consumer c takes keys c*BN/2 .. c*BN/2 + BN/2 - 1 of every K/V tile, and owns
      the output columns c*D/2 .. c*D/2 + D/2 - 1 (the running output is split, never kept twice):
          S_c = Q K_jc^T                                   (64 x BN/2, wgmma)
          exchange 1: the row max of S_c through shared memory -> m_new = max(m_i, m_0, m_1)
          P_c = exp2((S_c - m_new) c), l_c = rowsum(P_c)
          PV_c = P_c V_jc as two wgmmas of 64 x D/2: the columns I own and the ones the other
                 consumer owns
          exchange 2: the other's columns of PV_c and l_c through shared memory
          O_mine = alpha O_mine + PV_c[mine] + PV_other[mine];  l = alpha l + l_0 + l_1
      Each exchange is a store to shared memory, an mbarrier arrive (the compiler puts a
      barrier of the warpgroup's 128 threads before it) and a wait on the other consumer's
      mbarrier: two rendezvous and 2 * 64 * (D/2) * 4 bytes written (and as many read) per
      tile per program, the cost FA2's split-Q removes. The tile's product cannot accumulate
      in place (it is a partial sum over half the keys), which is the other cost of split-K.

SEQ_PARALLEL (FA2, section 3.2): grid (row blocks, B * Hq), a row block's state in registers
for every K/V tile. Off, FA1's schedule (fmha_fprop_kernel_1xN.h): grid (splits, B * Hq), K/V
tiles in the outer loop and the row blocks that see each tile inside; Q_i is loaded again for every
tile (a two-slot ring; one slot for split-Q at head_dim 128), each row block's float32 output
(the consumer's columns) and each consumer's copy of m, l go to scratch buffers in HBM and back
between tiles (FA1's o_tmp), and the last tile a row block sees finalises it: about
10 N^2 D / BN bytes of HBM traffic a head. Both directions are TMA (D55): the producer
prefetches the next step's state into a two-slot state ring while the consumers compute, and
the consumers write it back through the slot it arrived in (then O, at the last tile); the
K/V ring may be one stage deep (a tile serves every row block). FA1's num_splits
(fmha_fwd_launch_template.h, TileConfig.fa1_splits): program s of grid axis 0 takes every
splits-th row block of its (batch, head) and walks the K/V tiles they see (D58); FA1's
heuristic (kernels/plan/fa1_launch.py) is the default and the FA1 of record, one split (one program
per (batch, head)) a reference grid (D90).

Persistent grid (TileConfig.persistent, on by default; seq_parallel with the producer warp,
D98): one program an SM walks row blocks in waves of `programs`, in the order the grid
above launches them (causal: odd waves reversed, so that long and short row blocks
alternate); the K/V ring, two Q buffers and the sanitising count run on from one row block to
the next, so the next row block's Q and first tiles load under this one's last tiles and
epilogue. Each row's arithmetic is the same: o and L are bitwise those of the grid.

DEFER_NORM, as in kernels/forward.py: O is rescaled by alpha only and divided by l once after
the loop, L = m c + log2 l (in natural log) stored; off, FA1's recurrence: O is kept normalised
at every tile (each tile's division done at the start of the next, so the product's output is
carried as it is, and l_i alpha O_i is its accumulator: wgmma accumulates in place; D97), and
m, l are stored.

Causal masking is bottom-right aligned (query i sees key j iff j <= i + Sk - Sq); only tiles
that cross a row's diagonal or the end of the keys are masked; masked scores are -inf; a row
that sees no key gets O = 0 and L = -inf. Causal row blocks are launched longest first. Q, K, V
are read through 4-D descriptors over (B, H, S, D), so rows past a head's end arrive as zeros.

Non-finite V at hidden keys (causal): a hidden key's P is 0, but 0 * NaN and 0 * inf are NaN
inside the P V wgmma, which reads V from shared memory. A causal tile that hides a key from
the program's first row is sanitised in place before either consumer's P V reads it (in FA2's
loop while the tile's S = Q K^T runs, D100; in FA1's schedule once a tile): consumer
c takes half of the tile's keys (split-Q: both read every key; split-K: its own), zeroes their
non-finite V in shared memory, puts each column's first non-finite key of its half into
x_bad, and the consumers meet once (an mbarrier each). After the fold, NaN goes back into the
columns where a row sees a non-finite V (as the Triton kernels' REPAIR does). Unmasked tiles
run as before; a row that sees no non-finite V gets the same bits with or without the
poisoned keys, since the same code computes it and adding a product 0 * 0 changes nothing
(docs/decisions.md D53). x_bad is double-buffered: one consumer may sanitise the next such
tile while the other still puts NaN back from this one's.

Domain (an ablation chassis, not a general backend): CUDA sm_90, float16/bfloat16, head_dim 64
or 128, unit stride along head_dim and 16-byte aligned strides; `check_hopper_call` states
the domain.
"""
import functools

import triton
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (
    fence_async_shared, mbarrier, tma, warpgroup_mma, warpgroup_mma_wait)

from .forward import LN2 as _LN2, LOG2E
from .launch_cache import CachedLaunch
from .plan.hopper_forward import ROWS_PER_WARPGROUP as _ROWS_PER_WARPGROUP
from .plan.hopper_forward import (SHARED_LIMIT, STAGES, block_ns, consumer_registers, fa1_splits,
                                  persistent_programs, q_buffers, shared_bytes, state_slots)
from .plan.outputs import empty_outputs
from .tma import tma_ready

LN2 = gl.constexpr(_LN2)
ROWS_PER_WARPGROUP = gl.constexpr(_ROWS_PER_WARPGROUP)  # a wgmma's M: 16 rows for each of 4 warps
SANITISE_KEYS = gl.constexpr(16)  # V rows a consumer's sanitising pass holds at a time
HOPPER_DTYPES = ("float16", "bfloat16")
HOPPER_HEAD_DIMS = (64, 128)


@gluon.constexpr_function
def mma_layout(n):
    """wgmma accumulator of one warpgroup: 64 rows (16 a warp), n columns."""
    return gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                     instr_shape=[16, n, 16])


@gluon.constexpr_function
def vector_rows_layout(cols):
    """One warpgroup's rows of 16-bit values, 8 a thread: the 16-byte stores that the wgmma
    layout's 2-column pairs (4-byte stores) are staged into (D113)."""
    return gl.BlockedLayout([1, 8], [256 // cols, cols // 8], [4, 1], [1, 0])


@gluon.jit
def _heads(bh, heads_q, group_size):
    """The batch, query head and kv head of (batch, head) index bh (grid axis 1, or a
    persistent program's work item)."""
    off_h = bh % heads_q
    return bh // heads_q, off_h, off_h // group_size


@gluon.jit
def _num_programs(AXIS: gl.constexpr = 0):
    """gl.num_programs(AXIS) (0 or 1), read in the partition (see _in_partition)."""
    if AXIS == 0:
        n = gl.inline_asm_elementwise("mov.u32 $0, %nctaid.x;", "=r,r", [gl.to_tensor(0)],
                                      dtype=gl.int32, is_pure=False, pack=1)
    else:
        n = gl.inline_asm_elementwise("mov.u32 $0, %nctaid.y;", "=r,r", [gl.to_tensor(0)],
                                      dtype=gl.int32, is_pure=False, pack=1)
    return n


@gluon.jit
def _work_item(wave, programs, causal: gl.constexpr):
    """A persistent program's work item in wave `wave` (waves of `programs` items, in the order
    of the grid of one program a row block: a head's row blocks together, causal longest
    first). Causal: odd waves are taken in reverse, so that a program that took one of a
    head's long row blocks takes a short one next (a row block's length repeats with the
    program number when the programs are a multiple of the row blocks: D98)."""
    p = gl.program_id(0)
    if causal:
        p += (wave % 2) * (programs - 1 - 2 * p)
    return wave * programs + p


@gluon.jit
def _row_block_span(block, seqlen_q, seqlen_k, causal: gl.constexpr,
                    ROWS: gl.constexpr, BLOCK_N: gl.constexpr):
    """seq_parallel: row block number `block` of a head (causal: counted from the last, so
    the longest go first) and its K/V tile count."""
    row_blocks = gl.cdiv(seqlen_q, ROWS)
    if causal:
        block = row_blocks - 1 - block
    return block * ROWS, _tiles_seen(block * ROWS, seqlen_q, seqlen_k, causal, ROWS, BLOCK_N)


@gluon.jit
def _tiles_seen(start_m, seqlen_q, seqlen_k, causal: gl.constexpr,
                ROWS: gl.constexpr, BLOCK_N: gl.constexpr):
    """How many K/V tiles rows start_m .. start_m + ROWS - 1 see (causal: up to the last
    row's diagonal, query i seeing key j iff j <= i + seqlen_k - seqlen_q)."""
    hi = seqlen_k
    if causal:
        hi = gl.minimum(gl.maximum(start_m + ROWS + seqlen_k - seqlen_q, 0), seqlen_k)
    return gl.cdiv(hi, BLOCK_N)


@gluon.jit
def _first_row_block(j, seqlen_q, seqlen_k, causal: gl.constexpr,
                     ROWS: gl.constexpr, BLOCK_N: gl.constexpr):
    """FA1's schedule: the first row block that sees a key of K/V tile j (row block i's last
    row i ROWS + ROWS - 1 sees key j BLOCK_N iff i >= (j BLOCK_N - diag) // ROWS)."""
    if causal:
        return gl.maximum(j * BLOCK_N - (seqlen_k - seqlen_q), 0) // ROWS
    return 0


@gluon.jit
def _fa1_split(row_blocks, causal: gl.constexpr):
    """FA1's schedule with num_splits (grid axis 0, FA1's blockIdx.z): this program takes the
    row blocks i with i % splits == r, every splits-th one. Causal: program 0 takes the last
    row block and every splits-th before it, so that the programs launched first see the most
    tiles (longest first); otherwise program s takes row blocks s, s + splits, ... as in FA1.
    Returns (r, splits, my last row block)."""
    splits = _num_programs()
    r = gl.program_id(0)
    if causal:
        r = (row_blocks - 1 - r) % splits
    return r, splits, row_blocks - 1 - (row_blocks - 1 - r) % splits


@gluon.jit
def _my_first_row_block(j, r, splits, seqlen_q, seqlen_k, causal: gl.constexpr,
                        ROWS: gl.constexpr, BLOCK_N: gl.constexpr):
    """FA1's schedule: the first of my row blocks (i % splits == r) that sees a key of K/V
    tile j; row_blocks or more if none does."""
    first = _first_row_block(j, seqlen_q, seqlen_k, causal, ROWS, BLOCK_N)
    return first + (r + splits - first % splits) % splits


@gluon.jit
def _full_tiles(start_m, diag, seqlen_k, BLOCK_N: gl.constexpr):
    """Causal: the K/V tiles before this index hide no key from row start_m (query i sees key
    j iff j <= i + diag, diag = seqlen_k - seqlen_q)."""
    return gl.minimum(gl.maximum(start_m + diag + 1, 0), seqlen_k) // BLOCK_N


@gluon.jit
def _sanitise_values(v_smem, slot, j, seqlen_k, x_bad, bar_v, n, V_PARTS: gl.constexpr,
                     CONSUMER: gl.constexpr, TEST_FIRST: gl.constexpr):
    """K/V tile j (ring slot `slot`) hides a key from the program's first row: zero the
    non-finite V of my half of its keys in shared memory, in place, and store each column's
    first non-finite key of that half (seqlen_k if none) in x_bad[n % 2, CONSUMER]; then meet
    the other consumer (`n`: how many tiles were sanitised before), so that neither's P V
    reads V before both halves are clean. TEST_FIRST (FA2's loop, D102; FA1's schedule, D105):
    my half is first tested as a whole (packed multiplies by 0 and one sum: NaN iff a value is
    inf or NaN), and zeroed and searched only where the test finds one; in FA3's pipelined
    loop the extra registers spilled at head_dim 128."""
    BLOCK_N: gl.constexpr = v_smem.type.shape[3]  # slots of (1, 1, BLOCK_N, V_COLS)
    V_COLS: gl.constexpr = v_smem.type.shape[4]
    HALF: gl.constexpr = BLOCK_N // 2
    # 16 keys a pass, each warp holding all 16 of its columns' keys: the first bad key's
    # minimum stays in the warp (shuffles), so it needs no shared scratch
    layout: gl.constexpr = gl.BlockedLayout([2, 8], [8, 4], [1, 4], [1, 0])
    for part in gl.static_range(V_PARTS):
        v_part = v_smem.index(slot * V_PARTS + part).reshape([BLOCK_N, V_COLS])
        total = float("nan")
        if TEST_FIRST:  # v * 0 is NaN where v is inf or NaN, else 0, and the sum keeps NaN
            probe = gl.zeros([SANITISE_KEYS, V_COLS], v_smem.dtype, layout)
            for key0 in gl.static_range(CONSUMER * HALF, CONSUMER * HALF + HALF, SANITISE_KEYS):
                probe = probe + v_part.slice(key0, SANITISE_KEYS).load(layout) * 0.0
            total = gl.sum(probe.to(gl.float32))
        first_bad = gl.full([V_COLS], seqlen_k, gl.int32, gl.SliceLayout(0, layout))
        if total != total:  # a non-finite value in my half: zero it, find each column's first
            for key0 in gl.static_range(CONSUMER * HALF, CONSUMER * HALF + HALF,
                                        SANITISE_KEYS):
                rows = v_part.slice(key0, SANITISE_KEYS)
                v = rows.load(layout)
                finite = gl.abs(v.to(gl.float32)) < float("inf")  # False for NaN too
                keys = j * BLOCK_N + key0 + gl.arange(0, SANITISE_KEYS,
                                                      layout=gl.SliceLayout(1, layout))
                first_bad = gl.minimum(first_bad,
                                       gl.min(gl.where(finite, seqlen_k, keys[:, None]), 0))
                rows.store(gl.where(finite, v, gl.zeros_like(v)))
        x_bad.index((n % 2) * 2 + CONSUMER).slice(part * V_COLS, V_COLS).store(first_bad)
    fence_async_shared()  # my stores before the wgmmas' (async proxy) reads
    _rendezvous(bar_v, n, CONSUMER)


@gluon.jit
def _sanitise_if_masked(v_smem, slot, j, start_m, seqlen_q, seqlen_k, x_bad, bar_v, n_before,
                        causal: gl.constexpr, V_PARTS: gl.constexpr, CONSUMER: gl.constexpr,
                        TEST_FIRST: gl.constexpr = False):
    """Causal: whether K/V tile j hides a key from row start_m and has therefore been
    sanitised, and how many tiles were sanitised before it (n_before, those of a persistent
    program's earlier row blocks, and those from the first that hides a key from row start_m:
    a row sees a prefix of the keys). seq_parallel: start_m is the row block's first row.
    FA1's schedule: 0, since tile j hides a key from the first row of
    the first row block that sees it iff it hides one from row 0 (with num_splits, a tile may
    then be sanitised where my row blocks see all of it: redundant, not wrong). Both consumers
    decide alike, so they meet alike."""
    sanitised = False
    n = 0
    if causal:
        BLOCK_N: gl.constexpr = v_smem.type.shape[3]
        full_tiles = _full_tiles(start_m, seqlen_k - seqlen_q, seqlen_k, BLOCK_N)
        sanitised = j >= full_tiles
        n = n_before + j - full_tiles
        if sanitised:
            _sanitise_values(v_smem, slot, j, seqlen_k, x_bad, bar_v, n, V_PARTS, CONSUMER,
                             TEST_FIRST)
    return sanitised, n


@gluon.jit
def _first_bad_key(x_bad, n):
    """The first key of a non-finite V that _sanitise_values zeroed (tile number n of those
    sanitised) over every column, seqlen_k if none: a row whose last key comes before it sees
    none, and `_nan_where_seen` can pass it by."""
    COLS: gl.constexpr = x_bad.type.shape[1]
    cols: gl.constexpr = gl.SliceLayout(0, gl.BlockedLayout([1, COLS // 32], [1, 32], [4, 1],
                                                            [1, 0]))  # replicated per warp
    pair = (n % 2) * 2
    first_bad = gl.minimum(x_bad.index(pair).load(cols), x_bad.index(pair + 1).load(cols))
    return gl.min(first_bad, 0)


@gluon.jit
def _seen_by_rows(x_bad, n, last_key):
    """Whether a non-finite V that _sanitise_values zeroed (tile number n of those sanitised),
    in any column, is at or before last_key (the last key my last row sees)."""
    return _first_bad_key(x_bad, n) <= last_key


@gluon.jit
def _nan_where_seen(acc, x_bad, n, row0, diag, SPLIT_Q: gl.constexpr, CONSUMER: gl.constexpr):
    """acc (my rows, my columns) with NaN where a row sees a non-finite V that
    _sanitise_values zeroed (tile number n of those sanitised): row i sees it in column d iff
    the first such key of column d, over both halves, is <= i + diag."""
    BM: gl.constexpr = ROWS_PER_WARPGROUP
    o_layout: gl.constexpr = acc.type.layout
    COLS: gl.constexpr = acc.type.shape[1]
    col0: gl.constexpr = 0 if SPLIT_Q else CONSUMER * COLS
    cols: gl.constexpr = gl.SliceLayout(0, o_layout)
    pair = (n % 2) * 2
    first_bad = gl.minimum(x_bad.index(pair).slice(col0, COLS).load(cols),
                           x_bad.index(pair + 1).slice(col0, COLS).load(cols))
    rows = row0 + gl.arange(0, BM, layout=gl.SliceLayout(1, o_layout))
    return gl.where(first_bad[None, :] <= rows[:, None] + diag, float("nan"), acc)


@gluon.jit
def _producer(q_desc, k_desc, v_desc, q_smem, k_smem, v_smem, q_ready, q_empty, kv_ready,
              kv_empty, x_max, x_sum, x_out, bar_max, bar_out, x_bad, bar_v, O, O_RES, LSE, M,
              L, o_tmp_desc, stats_desc,
              seqlen_q, seqlen_k, heads_q, group_size, batch_heads, qk_scale, stride_ob,
              stride_oh, stride_om, stride_lb, stride_lh, state,
              DEFER_NORM: gl.constexpr, SPLIT_Q: gl.constexpr, SEQ_PARALLEL: gl.constexpr,
              causal: gl.constexpr, CONSUMER: gl.constexpr, PERSISTENT: gl.constexpr):
    """One warp. seq_parallel: Q once, then K_j and V_j into the ring; PERSISTENT: so for each
    of the program's row blocks in turn, the next one's Q and first tiles loaded while the
    consumers finish this one (into the other Q buffer where there are two). FA1's schedule:
    for each K/V tile j my row blocks see, K_j and V_j into the ring, then for every row block
    i of mine (`_fa1_split`) that sees it Q_i into the Q ring (Q is read again for every K/V
    tile, as FA1 read it) and, from the second tile
    on, the row block's partial state (fp32 output, m, l) from HBM into the state ring, so
    that the consumers find step t + 1's state in shared memory while they compute step t.
    Under split-K V arrives in column halves, one a consumer."""
    if PERSISTENT or not SEQ_PARALLEL:
        seqlen_q, seqlen_k = _in_partition(seqlen_q), _in_partition(seqlen_k)
    BM: gl.constexpr = ROWS_PER_WARPGROUP
    Q_BOXES: gl.constexpr = 2 if SPLIT_Q else 1
    ROWS: gl.constexpr = Q_BOXES * BM
    BLOCK_N: gl.constexpr = k_desc.block_type.shape[2]
    if PERSISTENT:
        Q_BUFS: gl.constexpr = q_smem.type.shape[0] // Q_BOXES
        row_blocks = gl.cdiv(seqlen_q, ROWS)
        g = 0  # K/V tiles loaded so far: the ring's position
        it = 0  # row blocks so far: the Q ring's position
        n_items = row_blocks * batch_heads
        programs = _num_programs()
        for wave in range(gl.cdiv(n_items, programs)):
            w = _work_item(wave, programs, causal)
            if w < n_items:
                off_b, off_h, off_hkv = _heads(w // row_blocks, heads_q, group_size)
                start_m, n_tiles = _row_block_span(w % row_blocks, seqlen_q, seqlen_k, causal,
                                                   ROWS, BLOCK_N)
                _load_q(q_desc, q_smem, q_ready, q_empty, it, off_b, off_h, start_m, Q_BOXES,
                        Q_BUFS)
                for j in range(n_tiles):
                    _load_kv(k_desc, v_desc, k_smem, v_smem, kv_ready, kv_empty, g + j, j,
                             off_b, off_hkv)
                g += n_tiles
                it += 1
    else:
        off_b, off_h, off_hkv = _heads(gl.program_id(1), heads_q, group_size)
        if SEQ_PARALLEL:
            start_m, n_tiles = _row_block_span(gl.program_id(0), seqlen_q, seqlen_k, causal,
                                               ROWS, BLOCK_N)
            _load_q(q_desc, q_smem, q_ready, q_empty, 0, off_b, off_h, start_m, Q_BOXES, 2)
        else:
            Q_SLOTS: gl.constexpr = q_smem.type.shape[0] // Q_BOXES
            row_blocks = gl.cdiv(seqlen_q, ROWS)
            r, splits, last = _fa1_split(row_blocks, causal)
            n_tiles = _tiles_seen(last * ROWS, seqlen_q, seqlen_k, causal, ROWS, BLOCK_N)
        t = 0  # (row block, K/V tile) steps so far: the Q ring's position
        for j in range(n_tiles):
            _load_kv(k_desc, v_desc, k_smem, v_smem, kv_ready, kv_empty, j, j, off_b, off_hkv)
            if not SEQ_PARALLEL:
                first = _my_first_row_block(j, r, splits, seqlen_q, seqlen_k, causal, ROWS,
                                            BLOCK_N)
                for i in range(first, row_blocks, splits):
                    _load_q(q_desc, q_smem, q_ready, q_empty, t, off_b, off_h, i * ROWS,
                            Q_BOXES, Q_SLOTS)
                    # the step before (i, j) was (i, j - 1) iff tile j's only row block of mine
                    # is my last
                    _load_partial_state(o_tmp_desc, stats_desc, state, t, j, i, first == last,
                                        gl.program_id(1), ROWS, SPLIT_Q)
                    t += 1


@gluon.jit
def _load_kv(k_desc, v_desc, k_smem, v_smem, kv_ready, kv_empty, g, j, off_b, off_hkv):
    """K_j and V_j (split-K: V in column halves) as the ring's g-th tile (g = j but in a
    persistent program, whose earlier row blocks' tiles count too) into slot g % STAGES, once
    both consumers released what it held (mbarriers start with the phase before the first one
    complete)."""
    STAGES: gl.constexpr = k_smem.type.shape[0]
    V_PARTS: gl.constexpr = v_smem.type.shape[0] // STAGES
    BLOCK_N: gl.constexpr = k_desc.block_type.shape[2]
    V_COLS: gl.constexpr = v_desc.block_type.shape[3]
    slot = g % STAGES
    mbarrier.wait(kv_empty.index(slot), ((g // STAGES) & 1) ^ 1)
    ready = kv_ready.index(slot)
    mbarrier.expect(ready, k_desc.block_type.nbytes + V_PARTS * v_desc.block_type.nbytes)
    tma.async_copy_global_to_shared(k_desc, [off_b, off_hkv, j * BLOCK_N, 0], ready,
                                    k_smem.index(slot))
    for part in gl.static_range(V_PARTS):
        tma.async_copy_global_to_shared(v_desc, [off_b, off_hkv, j * BLOCK_N, part * V_COLS],
                                        ready, v_smem.index(slot * V_PARTS + part))


@gluon.jit
def _refill(loads, k_smem, v_smem, kv_ready, kv_empty, j, LOADS: gl.constexpr):
    """Without warp specialisation (WARP_SPECIALIZE off), the loading consumer (LOADS) issues
    K_j and V_j itself, where the producer warp would: into the slot just released, once the
    other consumer has released it too. `loads`: (k_desc, v_desc, off_b, off_hkv, n_tiles)."""
    if LOADS:
        k_desc, v_desc, off_b, off_hkv, n_tiles = loads
        if j < n_tiles:
            _load_kv(k_desc, v_desc, k_smem, v_smem, kv_ready, kv_empty, j, j, off_b, off_hkv)


@gluon.jit
def _load_partial_state(o_tmp_desc, stats_desc, state, t, j, i, after_itself, bh,
                        ROWS: gl.constexpr, SPLIT_Q: gl.constexpr):
    """FA1's schedule, step t = (row block i, K/V tile j): both consumers' partial state of
    row block i (fp32 output, m, l), as tile j - 1 left it in HBM (FA1's o_tmp), into state
    ring slot t % 2, buffer t % ST_SLOTS (with one buffer, the load of step t waits for
    step t - 1 to free it, so the state is not prefetched). Tile 0 has no state to load: the
    slot's ready barrier is only arrived on, so that every step completes one phase of it.

    Synchronisation: st_free[s] completes once per step on slot s, when both consumers have
    read the slot, written their new state through it and waited for those TMA stores to
    complete in global memory (tma.store_wait). So
      - waiting for step t - 2's completion frees the slot for this load (write after read),
        and covers every state stored at steps <= t - 2 (each consumer waits for its stores
        before it arrives, in step order);
      - the one state it does not cover is one stored at step t - 1: row block i's own when
        (i, j - 1) came right before (i, j) (`after_itself`: tile j's only row block is the
        last one, as at the end of a causal walk or with one row block). Then the load waits
        for step t - 1's completion too (read after write through HBM).
    Neither wait can see a later phase of its barrier: a consumer finishes step t (and so
    completes later phases) only after this load's ready barrier."""
    st_acc, st_stats, st_ready, st_free, o_desc, o_res_desc = state
    ST_SLOTS: gl.constexpr = st_acc.type.shape[0] // 2  # buffers (2, or 1: state_slots)
    s = t % 2
    # with one buffer step t - 1 must have freed it: r is the step whose barrier slot and
    # phase say which step's release to wait for, as in _load_q
    r = t + 2 - ST_SLOTS
    mbarrier.wait(st_free.index(r % 2), ((r // 2) & 1) ^ 1)
    ready = st_ready.index(s)
    b = t % ST_SLOTS
    if j == 0:  # a fresh state: nothing to load
        mbarrier.arrive(ready, count=1)
    else:
        if after_itself:
            mbarrier.wait(st_free.index(1 - s), ((t - 1) // 2) & 1)
        mbarrier.expect(ready, 2 * (o_tmp_desc.block_type.nbytes + stats_desc.block_type.nbytes))
        for c in gl.static_range(2):
            row, col = _partial_state(i, ROWS, o_tmp_desc.block_type.shape[2], c, SPLIT_Q)
            tma.async_copy_global_to_shared(o_tmp_desc, [bh, row, col], ready,
                                            st_acc.index(2 * b + c))
            tma.async_copy_global_to_shared(stats_desc, [bh, 2 * c, row], ready,
                                            st_stats.index(2 * b + c))


@gluon.jit
def _load_q(q_desc, q_smem, q_ready, q_empty, t, off_b, off_h, start_m, Q_BOXES: gl.constexpr,
            Q_SLOTS: gl.constexpr):
    """Rows start_m .. start_m + Q_BOXES * 64 - 1 into Q buffer t % Q_SLOTS (1 or 2), once both
    consumers released what it held (step t - Q_SLOTS). The ready/empty barriers always have
    two slots (step t uses slot t % 2); with one buffer, step t waits for the release of step
    t - 1 on the other slot: r = t + 2 - Q_SLOTS is the step whose slot and phase say that."""
    qs = t % 2
    r = t + 2 - Q_SLOTS
    mbarrier.wait(q_empty.index(r % 2), ((r // 2) & 1) ^ 1)
    mbarrier.expect(q_ready.index(qs), Q_BOXES * q_desc.block_type.nbytes)
    for c in gl.static_range(Q_BOXES):
        tma.async_copy_global_to_shared(
            q_desc, [off_b, off_h, start_m + c * ROWS_PER_WARPGROUP, 0], q_ready.index(qs),
            q_smem.index((t % Q_SLOTS) * Q_BOXES + c))


@gluon.jit
def _rendezvous(bars, phase, ME: gl.constexpr):
    """Arrive on my mbarrier (the compiler puts a barrier of my warpgroup's 128 threads before
    it, so my shared-memory stores are done) and wait on the other consumer's; `phase`: how
    many rendezvous on these barriers came before."""
    mbarrier.arrive(bars.index(ME), count=1)
    mbarrier.wait(bars.index(1 - ME), phase & 1)


@gluon.jit
def _masked_scores(s, j, row0, seqlen_q, seqlen_k, causal: gl.constexpr, BLOCK_N: gl.constexpr,
                   KEY0: gl.constexpr):
    """Raw scores S of my rows (from row0) against keys KEY0 .. KEY0 + KEYS - 1 of K/V tile j,
    with the keys a row does not see at -inf; only tiles that cross a row's diagonal or the
    end of the keys are masked."""
    BM: gl.constexpr = ROWS_PER_WARPGROUP
    KEYS: gl.constexpr = s.type.shape[1]
    s_layout: gl.constexpr = s.type.layout
    diag = seqlen_k - seqlen_q  # query i sees key j iff j <= i + diag
    if causal:  # tiles from full_tiles on hide a key from my first row
        full_tiles = _full_tiles(row0, diag, seqlen_k, BLOCK_N)
    else:
        full_tiles = seqlen_k // BLOCK_N
    if j >= full_tiles:
        keys = j * BLOCK_N + KEY0 + gl.arange(0, KEYS, layout=gl.SliceLayout(0, s_layout))
        if causal:  # row i sees keys j < i + diag + 1 (<= seqlen_k for stored rows)
            rows = row0 + gl.arange(0, BM, layout=gl.SliceLayout(1, s_layout))
            s = gl.where(keys[None, :] <= rows[:, None] + diag, s, float("-inf"))
        else:
            s = gl.where((keys < seqlen_k)[None, :], s, float("-inf"))
    return s


@gluon.jit
def _exp_scores(s, m_i, m_tile, qk_scale):
    """The online softmax's step for masked scores S whose row max is m_tile: the new max
    m_new, P = exp2((S - m_new) c) unnormalised in float32, its row sum, and alpha =
    exp2((m_i - m_new) c), which takes the running terms to the new max (a row with nothing
    visible yet, m_new = -inf, uses 0 as its max)."""
    m_new = gl.maximum(m_i, m_tile)
    m_use = gl.where(m_new == float("-inf"), 0.0, m_new)  # a row with nothing visible yet
    p = gl.exp2((s - m_use[:, None]) * qk_scale)
    l_tile = gl.sum(p, 1)
    alpha = gl.exp2((m_i - m_use) * qk_scale)
    return m_new, p, l_tile, alpha


@gluon.jit
def _running_scale(acc, l_i, alpha, orow_layout: gl.constexpr, DEFER_NORM: gl.constexpr):
    """acc and the factor it is taken by before a tile adds P V (kernels/forward.py's
    _fold_tile): alpha (FA2); FA1: acc / l_i first, the last tile's normalisation done one tile
    late, then l_i alpha (D97)."""
    if DEFER_NORM:
        keep = alpha
    else:
        inv_l = gl.convert_layout(1.0 / gl.where(l_i == 0.0, 1.0, l_i), orow_layout)
        acc = acc * inv_l[:, None]
        keep = l_i * alpha
    return acc, gl.convert_layout(keep, orow_layout)


@gluon.jit
def _fold_tile(m_i, l_i, acc, q, k_smem, v_smem, slot, j, t, row0, seqlen_q, seqlen_k,
               causal: gl.constexpr, qk_scale, q_empty, x_max, x_sum, x_out, bar_max, bar_out,
               x_bad, bar_v, sanitised, n_sanitised,
               DEFER_NORM: gl.constexpr, SPLIT_Q: gl.constexpr, SEQ_PARALLEL: gl.constexpr,
               CONSUMER: gl.constexpr):
    """Fold K/V tile j (ring slot `slot`) into my rows' (m_i, l_i, acc); t counts this
    consumer's tiles so far (the rendezvous' phase and, in FA1's schedule, the Q ring's).
    Causal: `sanitised` says whether _sanitise_values cleaned this tile's V, the
    n_sanitised-th so cleaned (x_bad's buffer). seq_parallel: the pass runs here, under
    S = Q K^T (D100): `sanitised` is unused and n_sanitised counts the tiles sanitised before
    this row block's. FA1's schedule: the pass ran once a K/V tile, before its row blocks; acc
    is my state ring buffer, read where it is used (`_running_output`)."""
    BM: gl.constexpr = ROWS_PER_WARPGROUP
    STAGES: gl.constexpr = k_smem.type.shape[0]
    V_PARTS: gl.constexpr = v_smem.type.shape[0] // STAGES
    BLOCK_N: gl.constexpr = k_smem.type.shape[3]
    HEAD_DIM: gl.constexpr = k_smem.type.shape[4]
    KEYS: gl.constexpr = BLOCK_N if SPLIT_Q else BLOCK_N // 2  # keys of a tile I take
    COLS: gl.constexpr = HEAD_DIM if SPLIT_Q else HEAD_DIM // 2  # output columns I own
    KEY0: gl.constexpr = 0 if SPLIT_Q else CONSUMER * KEYS  # my first key within a tile
    s_layout: gl.constexpr = mma_layout(KEYS)
    o_layout: gl.constexpr = mma_layout(COLS)
    p_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=o_layout, k_width=2)
    row_layout: gl.constexpr = gl.SliceLayout(1, s_layout)
    orow_layout: gl.constexpr = gl.SliceLayout(1, o_layout)
    dtype: gl.constexpr = k_smem.dtype
    diag = seqlen_k - seqlen_q  # query i sees key j iff j <= i + diag

    k_tile = k_smem.index(slot).reshape([BLOCK_N, HEAD_DIM]).slice(KEY0, KEYS, 0)
    s = warpgroup_mma(q, k_tile.permute((1, 0)), gl.zeros([BM, KEYS], gl.float32, s_layout),
                      use_acc=False, is_async=SEQ_PARALLEL and causal)  # raw scores
    if SEQ_PARALLEL and causal:  # V's sanitising pass reads and writes V only, under Q K^T
        start_m = row0 - CONSUMER * BM if SPLIT_Q else row0
        sanitised, n_sanitised = _sanitise_if_masked(
            v_smem, slot, j, start_m, seqlen_q, seqlen_k, x_bad, bar_v, n_sanitised, causal,
            V_PARTS, CONSUMER, TEST_FIRST=True)
        if sanitised:  # NaN goes back after the product only where a row of mine sees one
            sanitised = _seen_by_rows(x_bad, n_sanitised, row0 + BM - 1 + diag)
        s = warpgroup_mma_wait(num_outstanding=0, deps=(s,))
    if not SEQ_PARALLEL:
        mbarrier.arrive(q_empty.index(t % 2), count=1)  # Q_i is read again next K/V tile
    s = _masked_scores(s, j, row0, seqlen_q, seqlen_k, causal, BLOCK_N, KEY0)
    m_tile = gl.max(s, 1)
    if not SPLIT_Q:  # exchange 1: the tile's row max over both halves of its keys
        x_max.index(CONSUMER).store(m_tile)
        _rendezvous(bar_max, t, CONSUMER)
        m_tile = gl.maximum(m_tile, x_max.index(1 - CONSUMER).load(row_layout))
    m_new, p, l_tile, alpha = _exp_scores(s, m_i, m_tile, qk_scale)
    if not SEQ_PARALLEL:  # FA1's schedule: acc is the state slot, read only now (D58)
        acc = _running_output(acc, j, o_layout)
    if SPLIT_Q:
        l_new = alpha * l_i + l_tile
        acc, keep = _running_scale(acc, l_i, alpha, orow_layout, DEFER_NORM)
        v_tile = v_smem.index(slot).reshape([BLOCK_N, HEAD_DIM])
        acc = warpgroup_mma(gl.convert_layout(p.to(dtype), p_layout), v_tile,
                            acc * keep[:, None])
    else:
        o_zero = gl.zeros([BM, COLS], gl.float32, o_layout)
        p_op = gl.convert_layout(p.to(dtype), p_layout)
        v_mine = v_smem.index(slot * V_PARTS + CONSUMER).reshape([BLOCK_N, COLS])
        v_other = v_smem.index(slot * V_PARTS + 1 - CONSUMER).reshape([BLOCK_N, COLS])
        pv_other = warpgroup_mma(p_op, v_other.slice(KEY0, KEYS, 0), o_zero, use_acc=False,
                                 is_async=True)
        pv = warpgroup_mma(p_op, v_mine.slice(KEY0, KEYS, 0), o_zero, use_acc=False,
                           is_async=True)
        pv_other, pv = warpgroup_mma_wait(num_outstanding=0, deps=(pv_other, pv))
        # exchange 2: the other's columns of my partial output, and my partial row sum
        x_out.index(CONSUMER).store(pv_other)
        x_sum.index(CONSUMER).store(l_tile)
        _rendezvous(bar_out, t, CONSUMER)
        pv = pv + x_out.index(1 - CONSUMER).load(o_layout)
        l_tile = l_tile + x_sum.index(1 - CONSUMER).load(row_layout)
        l_new = alpha * l_i + l_tile
        acc, keep = _running_scale(acc, l_i, alpha, orow_layout, DEFER_NORM)
        acc = acc * keep[:, None] + pv
    if causal:
        if sanitised:  # after the update: the product and its accumulation are untouched
            acc = _nan_where_seen(acc, x_bad, n_sanitised, row0, diag, SPLIT_Q, CONSUMER)
    return m_new, l_new, acc


# PINGPONG's turns: hardware named barriers 8 and 9 (consumer 0's and consumer 1's turn) of
# both consumer warpgroups' 256 threads, as cuDNN's and FA3's kernels take them (D79). Triton's
# own barriers in this kernel use ids 0-3 (tests/test_hopper_switches.py checks the PTX).
@gluon.jit
def _asm(code: gl.constexpr):
    """`code` (PTX without operands) run by every thread, where the compiler may not move it."""
    gl.inline_asm_elementwise(code, "=r,r", [gl.to_tensor(0)], dtype=gl.int32, is_pure=False,
                              pack=1)


@gluon.jit
def _take_turn(PINGPONG: gl.constexpr, CONSUMER: gl.constexpr):
    """PINGPONG: wait until it is my turn at the tensor cores (see _fold_tiles_pipelined):
    `bar.sync` on my turn's barrier completes once the other consumer's 128 threads have
    arrived there, passing me the turn (or, for consumer 0's first turn, opening)."""
    if PINGPONG:
        if CONSUMER == 0:
            _asm("bar.sync 8, 256; mov.u32 $0, $1;")
        else:
            _asm("bar.sync 9, 256; mov.u32 $0, $1;")


@gluon.jit
def _pass_turn(PINGPONG: gl.constexpr, CONSUMER: gl.constexpr):
    """PINGPONG: my section's products are issued; the other consumer's may queue behind them
    (`bar.arrive` on its turn's barrier: my threads count in and go on)."""
    if PINGPONG:
        if CONSUMER == 0:
            _asm("bar.arrive 9, 256; mov.u32 $0, $1;")
        else:
            _asm("bar.arrive 8, 256; mov.u32 $0, $1;")


@gluon.jit
def _pipelined_section(j, m_i, l_i, acc, p, q, k_smem, v_smem, kv_ready, kv_empty, x_bad,
                       bar_v, start_m, row0, seqlen_q, seqlen_k, causal: gl.constexpr,
                       qk_scale, loads, g0, n_before, PINGPONG: gl.constexpr,
                       OVERLAP: gl.constexpr, FIRST: gl.constexpr, LOADS: gl.constexpr,
                       CONSUMER: gl.constexpr):
    """Section j < n_tiles of _fold_tiles_pipelined: issue S_j = Q K_j^T and (unless FIRST,
    j = 0) P_{j-1} V_{j-1} onto acc, then the softmax of tile j. Returns m_i, l_i, acc (with
    P_{j-1} V_{j-1} folded in and taken to tile j's max) and P_j as the next product's operand.
    g0, n_before: the ring's tiles and the sanitised tiles before this row block's (a
    persistent program's earlier row blocks; else 0)."""
    BM: gl.constexpr = ROWS_PER_WARPGROUP
    STAGES: gl.constexpr = k_smem.type.shape[0]
    BLOCK_N: gl.constexpr = k_smem.type.shape[3]
    HEAD_DIM: gl.constexpr = k_smem.type.shape[4]
    s_layout: gl.constexpr = mma_layout(BLOCK_N)
    o_layout: gl.constexpr = acc.type.layout
    p_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=o_layout, k_width=2)
    g = g0 + j  # the ring's position
    slot = g % STAGES
    prev = (g + STAGES - 1) % STAGES
    mbarrier.wait(kv_ready.index(slot), (g // STAGES) & 1)
    # V tested before the pass, NaN put back only where a row of mine sees one (D102), where
    # their registers fit: at head_dim 128 the test spilled (D114)
    TEST_FIRST: gl.constexpr = HEAD_DIM <= 64
    sanitised, n_sanitised = _sanitise_if_masked(v_smem, slot, j, start_m, seqlen_q, seqlen_k,
                                                 x_bad, bar_v, n_before, causal, 1, CONSUMER,
                                                 TEST_FIRST)
    if causal:
        diag = seqlen_k - seqlen_q
        if TEST_FIRST and sanitised:
            sanitised = _seen_by_rows(x_bad, n_sanitised, row0 + BM - 1 + diag)
        if sanitised:  # before P_{j-1} V_{j-1} and P_j V_j are added (see the caller)
            acc = _nan_where_seen(acc, x_bad, n_sanitised, row0, diag, True, CONSUMER)
    k_t = k_smem.index(slot).reshape([BLOCK_N, HEAD_DIM]).permute((1, 0))
    v_prev = v_smem.index(prev).reshape([BLOCK_N, HEAD_DIM])
    s_zero = gl.zeros([BM, BLOCK_N], gl.float32, s_layout)
    _take_turn(PINGPONG, CONSUMER)
    if FIRST:
        s = warpgroup_mma(q, k_t, s_zero, use_acc=False, is_async=True)
        _pass_turn(PINGPONG, CONSUMER)
        s = warpgroup_mma_wait(num_outstanding=0, deps=(s,))
    elif OVERLAP:  # S_j first: wgmma groups retire in order, so S_j is done before the product
        s = warpgroup_mma(q, k_t, s_zero, use_acc=False, is_async=True)
        acc = warpgroup_mma(p, v_prev, acc, is_async=True)
        _pass_turn(PINGPONG, CONSUMER)
        s = warpgroup_mma_wait(num_outstanding=1, deps=(s,))
    else:  # FA2's order: P_{j-1} V_{j-1}, then S_j, both done before the softmax
        acc = warpgroup_mma(p, v_prev, acc, is_async=True)
        s = warpgroup_mma(q, k_t, s_zero, use_acc=False, is_async=True)
        _pass_turn(PINGPONG, CONSUMER)
        acc, s = warpgroup_mma_wait(num_outstanding=0, deps=(acc, s))
        mbarrier.arrive(kv_empty.index(prev), count=1)  # K_{j-1}, V_{j-1}: read by my products
        _refill(loads, k_smem, v_smem, kv_ready, kv_empty, j - 1 + STAGES, LOADS)
    s = _masked_scores(s, j, row0, seqlen_q, seqlen_k, causal, BLOCK_N, 0)
    m_new, p_j, l_tile, alpha = _exp_scores(s, m_i, gl.max(s, 1), qk_scale)
    p_j = gl.convert_layout(p_j.to(k_smem.dtype), p_layout)  # half the registers of float32
    if OVERLAP and not FIRST:  # the softmax above ran under P_{j-1} V_{j-1}
        acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc,))
        mbarrier.arrive(kv_empty.index(prev), count=1)  # K_{j-1}, V_{j-1}: read by my products
        _refill(loads, k_smem, v_smem, kv_ready, kv_empty, j - 1 + STAGES, LOADS)
    acc = acc * gl.convert_layout(alpha, gl.SliceLayout(1, o_layout))[:, None]
    return m_new, alpha * l_i + l_tile, acc, p_j


@gluon.jit
def _fold_tiles_pipelined(q, k_smem, v_smem, kv_ready, kv_empty, x_bad, bar_v, n_tiles,
                          start_m, row0, seqlen_q, seqlen_k, causal: gl.constexpr, qk_scale,
                          loads, g0, n_before, PINGPONG: gl.constexpr, OVERLAP: gl.constexpr,
                          LOADS: gl.constexpr, CONSUMER: gl.constexpr):
    """FA2 (defer_norm, seq_parallel, split-Q) over the program's n_tiles K/V tiles with
    FlashAttention-3's schedules (docs/decisions.md D59); returns my rows' (m_i, l_i, acc).
    The products are issued asynchronously in n_tiles + 1 sections: section 0 issues S_0,
    section j (0 < j < n_tiles) P_{j-1} V_{j-1} and S_j, section n_tiles P_{n-1} V_{n-1}.
    - PINGPONG (FA3 section 3.1): a section is one turn at the tensor cores, the consumers'
      turns alternating through two named barriers (_take_turn, _pass_turn: consumer 1 opens
      with an arrival, and its last turn is passed to no one, so every barrier completes as
      often as it is waited on), so one consumer's softmax of tile j runs while the other's
      P_{j-1} V_{j-1} and S_j run. Off: the consumers issue whenever they are ready.
    - OVERLAP (FA3 section 3.2): section j issues S_j before P_{j-1} V_{j-1} and waits for S_j
      only, so the softmax of tile j runs under P_{j-1} V_{j-1}; the cost is a register tile:
      P_{j-1} stays live as the product's operand beside S_j and P_j. Off: both products are
      done before the softmax (FA2's order of operations).
    A slot of the K/V ring is released once my P V that reads it is done: tile j - 1's in
    section j (its K was read in section j - 1), so a consumer holds two slots in section j
    and 2 stages leave the producer no tile ahead there (switch_ring gives these variants a
    third where it fits, D80). V's sanitising (causal, D53) happens
    at the start of section j, before either consumer's P_j V_j (in section j + 1) reads V_j,
    and its NaN goes into acc right after, before P_{j-1} V_{j-1} and P_j V_j are added (NaN
    is sticky: the same output as FA2's loop, which puts it back after P_j V_j; at that
    point of this loop P_j is live as well, and d=128 causal spilled). Its x_bad buffer
    (n % 2) is read before my next rendezvous, as in FA2's loop. Both consumers have the same
    n_tiles, hence as many sections, turns and rendezvous."""
    BM: gl.constexpr = ROWS_PER_WARPGROUP
    STAGES: gl.constexpr = k_smem.type.shape[0]
    BLOCK_N: gl.constexpr = k_smem.type.shape[3]
    HEAD_DIM: gl.constexpr = k_smem.type.shape[4]
    m_i = gl.full([BM], float("-inf"), gl.float32, gl.SliceLayout(1, mma_layout(BLOCK_N)))
    l_i = gl.zeros([BM], gl.float32, gl.SliceLayout(1, mma_layout(BLOCK_N)))
    acc = gl.zeros([BM, HEAD_DIM], gl.float32, mma_layout(HEAD_DIM))
    if n_tiles > 0:
        if CONSUMER == 1:  # consumer 0 goes first
            _pass_turn(PINGPONG, CONSUMER)
        m_i, l_i, acc, p = _pipelined_section(
            0, m_i, l_i, acc, acc, q, k_smem, v_smem, kv_ready, kv_empty, x_bad, bar_v,
            start_m, row0, seqlen_q, seqlen_k, causal, qk_scale, loads, g0, n_before, PINGPONG,
            OVERLAP, True, LOADS, CONSUMER)
        for j in range(1, n_tiles):
            m_i, l_i, acc, p = _pipelined_section(
                j, m_i, l_i, acc, p, q, k_smem, v_smem, kv_ready, kv_empty, x_bad, bar_v,
                start_m, row0, seqlen_q, seqlen_k, causal, qk_scale, loads, g0, n_before,
                PINGPONG, OVERLAP, False, LOADS, CONSUMER)
        last = (g0 + n_tiles - 1) % STAGES  # section n_tiles: P_{n-1} V_{n-1}
        _take_turn(PINGPONG, CONSUMER)
        acc = warpgroup_mma(p, v_smem.index(last).reshape([BLOCK_N, HEAD_DIM]), acc,
                            is_async=True)
        if CONSUMER == 0:  # consumer 1's last turn is passed to no one: every arrival met
            _pass_turn(PINGPONG, CONSUMER)
        acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc,))
        mbarrier.arrive(kv_empty.index(last), count=1)
    return m_i, l_i, acc


@gluon.jit
def _running_output(acc_buf, j, o_layout: gl.constexpr):
    """FA1's schedule: my running output from its state ring buffer (loaded there by TMA), or
    zeros at K/V tile 0. Read where it is first used, after the scores and P, so that it is
    not live beside them (D58)."""
    BM: gl.constexpr = ROWS_PER_WARPGROUP
    COLS: gl.constexpr = o_layout.instr_shape[1]
    acc = gl.zeros([BM, COLS], gl.float32, o_layout)
    if j > 0:
        acc = acc_buf.reshape([BM, COLS]).load(o_layout)
    return acc


@gluon.jit
def _store_outputs(m_i, l_i, acc, O, O_RES, LSE, M, L, off_b, off_h, row0, seqlen_q, qk_scale,
                   stride_ob, stride_oh, stride_om, stride_lb, stride_lh,
                   DEFER_NORM: gl.constexpr, SPLIT_Q: gl.constexpr, CONSUMER: gl.constexpr,
                   STORE_O_RES: gl.constexpr, STAGED: gl.constexpr = False, staging=None):
    """My rows' O (my columns) and, from one consumer, their L (or m and l): the epilogue.
    STORE_O_RES: also O's rounding residual O - float(o) in o's dtype, at o's offsets (the
    backward's Delta from the float32 output, D06). STAGED: through `staging`, a free [BM,
    COLS] buffer of o's dtype (my Q box, read already), each tile passes to rows of 8 values a
    thread and leaves 16 bytes a store; else from the wgmma layout (2 values, 4 bytes)."""
    BM: gl.constexpr = ROWS_PER_WARPGROUP
    COLS: gl.constexpr = acc.type.shape[1]
    dtype: gl.constexpr = O.dtype.element_ty
    acc = _final_output(l_i, acc)
    o = acc.to(dtype)
    if STORE_O_RES:
        residual = (acc - o.to(gl.float32)).to(dtype)
    if not STAGED:
        layout: gl.constexpr = acc.type.layout
    else:
        layout: gl.constexpr = vector_rows_layout(COLS)
    o_rows = row0 + gl.arange(0, BM, layout=gl.SliceLayout(1, layout))
    cols = (0 if SPLIT_Q else CONSUMER * COLS) + gl.arange(0, COLS,
                                                          layout=gl.SliceLayout(0, layout))
    offs = (off_b.to(gl.int64) * stride_ob + off_h.to(gl.int64) * stride_oh
            + o_rows.to(gl.int64)[:, None] * stride_om + cols[None, :])
    mask = (o_rows < seqlen_q)[:, None]
    gl.store(O + offs, _through(o, staging, layout, STAGED), mask=mask)
    if STORE_O_RES:  # o's strides: the residual is allocated like o
        gl.store(O_RES + offs, _through(residual, staging, layout, STAGED), mask=mask)
    _store_statistics(m_i, l_i, LSE, M, L, off_b, off_h, row0, seqlen_q, qk_scale, stride_lb,
                      stride_lh, DEFER_NORM, SPLIT_Q, CONSUMER)


@gluon.jit
def _through(x, staging, layout: gl.constexpr, STAGED: gl.constexpr):
    """x in `layout`: as it is (not STAGED), or stored to staging and loaded back (every
    thread's stores before any load, every load before the buffer's next store)."""
    if STAGED:
        gl.thread_barrier()  # the buffer's last readers (my warpgroup) are done
        staging.store(x)
        gl.thread_barrier()
        y = staging.load(layout)
    else:
        y = x
    return y


@gluon.jit
def _final_output(l_i, acc):
    """O of my rows from the running output: divided by l (defer_norm: the one deferred
    division; off: the last tile's normalisation, D97)."""
    l_safe = gl.where(l_i > 0.0, l_i, 1.0)
    return acc / gl.convert_layout(l_safe, gl.SliceLayout(1, acc.type.layout))[:, None]


@gluon.jit
def _store_statistics(m_i, l_i, LSE, M, L, off_b, off_h, row0, seqlen_q, qk_scale, stride_lb,
                      stride_lh, DEFER_NORM: gl.constexpr, SPLIT_Q: gl.constexpr,
                      CONSUMER: gl.constexpr):
    """From one consumer (split-K: both hold the same statistics), my rows' L (or m and l)."""
    BM: gl.constexpr = ROWS_PER_WARPGROUP
    row_layout: gl.constexpr = m_i.type.layout
    if SPLIT_Q or CONSUMER == 0:
        sees_a_key = l_i > 0.0
        l_safe = gl.where(sees_a_key, l_i, 1.0)
        rows = row0 + gl.arange(0, BM, layout=row_layout)
        stat = off_b * stride_lb + off_h * stride_lh + rows
        if DEFER_NORM:
            lse = gl.where(sees_a_key, (m_i * qk_scale + gl.log2(l_safe)) * LN2, float("-inf"))
            gl.store(LSE + stat, lse, mask=rows < seqlen_q)
        else:
            gl.store(M + stat, m_i * qk_scale * LN2, mask=rows < seqlen_q)
            gl.store(L + stat, l_i, mask=rows < seqlen_q)


@gluon.jit
def _store_outputs_tma(m_i, l_i, acc, o_desc, o_res_desc, staging, LSE, M, L, off_b, off_h,
                       row0, seqlen_q, qk_scale, stride_lb, stride_lh, DEFER_NORM: gl.constexpr,
                       SPLIT_Q: gl.constexpr, CONSUMER: gl.constexpr,
                       STORE_O_RES: gl.constexpr):
    """FA1's schedule's epilogue: as _store_outputs, but O (and its residual) goes through
    `staging` (my half of the state ring's slot, read already) with a TMA store, which drops
    the rows past seqlen_q itself: no pointer tensor (64-bit a element) stays live in the loop.
    Complete on return (the slot may be loaded again after the arrive that follows)."""
    BM: gl.constexpr = ROWS_PER_WARPGROUP
    COLS: gl.constexpr = acc.type.shape[1]
    col0: gl.constexpr = 0 if SPLIT_Q else CONSUMER * COLS
    out = staging._reinterpret(o_desc.dtype, o_desc.block_type.shape, o_desc.layout)
    acc = _final_output(l_i, acc)
    o = acc.to(o_desc.dtype)
    out.reshape([BM, COLS]).store(o)
    fence_async_shared()  # my writes (generic proxy) before the TMA engine reads them
    gl.thread_barrier()  # every thread's writes and fence before the one thread's copy
    tma.async_copy_shared_to_global(o_desc, [off_b, off_h, row0, col0], out)
    if STORE_O_RES:  # the staging buffer again, once O is out of it
        tma.store_wait(0)
        gl.thread_barrier()
        out.reshape([BM, COLS]).store((acc - o.to(gl.float32)).to(o_desc.dtype))
        fence_async_shared()
        gl.thread_barrier()
        tma.async_copy_shared_to_global(o_res_desc, [off_b, off_h, row0, col0], out)
    _store_statistics(m_i, l_i, LSE, M, L, off_b, off_h, row0, seqlen_q, qk_scale, stride_lb,
                      stride_lh, DEFER_NORM, SPLIT_Q, CONSUMER)
    tma.store_wait(0)  # read out of the slot: the slot may be loaded again


@gluon.jit
def _partial_state(i, ROWS: gl.constexpr, COLS: gl.constexpr, CONSUMER: gl.constexpr,
                   SPLIT_Q: gl.constexpr):
    """FA1's schedule: where consumer CONSUMER's part of row block i's partial state lies in
    the scratch buffers: its first row in O_TMP (B*H, rows_tmp, D) and in STATS_TMP
    (B*H, 4, rows_tmp) (rows 2c, 2c + 1: my copy of m and l), and its first column in O_TMP
    (split-Q: my 64 of the block's rows, every column; split-K: the block's 64 rows, my D/2
    columns). rows_tmp is seqlen_q rounded up to whole row blocks."""
    if SPLIT_Q:
        return i * ROWS + CONSUMER * ROWS_PER_WARPGROUP, 0
    return i * ROWS, CONSUMER * COLS


@gluon.jit
def _stats_rows(stats_buf):
    """A [1, 2, 64] float32 box of STATS_TMP (m, l) as two rows to load or store a row vector
    (its TMA layout is unswizzled row-major, so the view only drops the NVMMA label)."""
    BM: gl.constexpr = ROWS_PER_WARPGROUP
    return stats_buf._reinterpret(gl.float32, [2, BM], gl.SwizzledSharedLayout(
        vec=1, per_phase=1, max_phase=1, order=[0]))


@gluon.jit
def _store_partial_state(m_i, l_i, acc, o_tmp_desc, stats_desc, state, b, i, bh,
                         ROWS: gl.constexpr, SPLIT_Q: gl.constexpr, CONSUMER: gl.constexpr):
    """My part of row block i's partial state through my half of state buffer b (the
    buffer its load arrived in, read already) to HBM with TMA stores, complete in global
    memory on return (the producer may load it for the next step)."""
    st_acc, st_stats, st_ready, st_free, o_desc, o_res_desc = state
    BM: gl.constexpr = ROWS_PER_WARPGROUP
    COLS: gl.constexpr = acc.type.shape[1]
    acc_buf = st_acc.index(2 * b + CONSUMER)
    stats_buf = st_stats.index(2 * b + CONSUMER)
    acc_buf.reshape([BM, COLS]).store(acc)
    stats = _stats_rows(stats_buf)
    stats.index(0).store(m_i)
    stats.index(1).store(l_i)
    # my threads' shared-memory writes (generic proxy) ordered before the TMA engine's reads
    # of them (async proxy); then a barrier of my 128 threads, so that every thread's writes
    # and fence are done before the one thread that issues the copies does
    fence_async_shared()
    gl.thread_barrier()
    row, col = _partial_state(i, ROWS, COLS, CONSUMER, SPLIT_Q)
    tma.async_copy_shared_to_global(o_tmp_desc, [bh, row, col], acc_buf)
    tma.async_copy_shared_to_global(stats_desc, [bh, 2 * CONSUMER, row], stats_buf)
    # complete (not only read out of shared memory): the arrive on st_free that follows tells
    # the producer both that the slot is free and that the state is in HBM
    _bulk_stores_complete()


@gluon.jit
def _bulk_stores_complete():
    """Wait until this thread's TMA stores are complete in global memory: PTX's
    `cp.async.bulk.wait_group 0`. (tma.store_wait emits the `.read` form, which only waits until
    the stores have read shared memory; the producer's load of the state needs the writes.)"""
    _asm("cp.async.bulk.wait_group 0; mov.u32 $0, $1;")


@gluon.jit
def _in_partition(x):
    """x, through an instruction the compiler may not move (a non-pure `mov`): what is computed
    from it stays in the partition that computes it. LLVM would otherwise hoist the partitions'
    loop-invariant arithmetic out of the loop in which the worker warps wait for their
    partition, to the kernel's entry, where it lives across every setmaxnreg and ptxas spills it
    (D58: FA1's schedule's spills)."""
    return gl.inline_asm_elementwise("mov.b32 $0, $1;", "=r,r", [x], dtype=gl.int32,
                                     is_pure=False, pack=1)


@gluon.jit
def _fa2_row_block(q_desc, k_desc, v_desc, q_smem, k_smem, v_smem, q_ready, q_empty, kv_ready,
                   kv_empty, x_max, x_sum, x_out, bar_max, bar_out, x_bad, bar_v, O, O_RES, LSE,
                   M, L, seqlen_q, seqlen_k, heads_q, group_size, qk_scale, stride_ob, stride_oh,
                   stride_om, stride_lb, stride_lh, block, bh, it, g0, n_before,
                   DEFER_NORM: gl.constexpr, SPLIT_Q: gl.constexpr, causal: gl.constexpr,
                   CONSUMER: gl.constexpr, PINGPONG: gl.constexpr, OVERLAP: gl.constexpr,
                   WARP_SPECIALIZE: gl.constexpr, STORE_O_RES: gl.constexpr,
                   PERSISTENT: gl.constexpr):
    """seq_parallel: my rows of row block `block` of (batch, head) bh, over every K/V tile
    they see, and their epilogue. it, g0, n_before: the row blocks, K/V tiles and sanitised
    tiles that came before in this program (a persistent one's; else 0): the Q ring's, the
    K/V ring's and x_bad's positions. Returns g0 and n_before past this row block's."""
    BM: gl.constexpr = ROWS_PER_WARPGROUP
    Q_BOXES: gl.constexpr = 2 if SPLIT_Q else 1
    ROWS: gl.constexpr = Q_BOXES * BM
    MY_BOX: gl.constexpr = CONSUMER if SPLIT_Q else 0
    Q_BUFS: gl.constexpr = q_smem.type.shape[0] // Q_BOXES
    STAGES: gl.constexpr = k_smem.type.shape[0]
    BLOCK_N: gl.constexpr = k_desc.block_type.shape[2]
    HEAD_DIM: gl.constexpr = k_desc.block_type.shape[3]
    KEYS: gl.constexpr = BLOCK_N if SPLIT_Q else BLOCK_N // 2
    COLS: gl.constexpr = HEAD_DIM if SPLIT_Q else HEAD_DIM // 2
    row_layout: gl.constexpr = gl.SliceLayout(1, mma_layout(KEYS))
    off_b, off_h, off_hkv = _heads(bh, heads_q, group_size)
    start_m, n_tiles = _row_block_span(block, seqlen_q, seqlen_k, causal, ROWS, BLOCK_N)
    row0 = start_m + CONSUMER * BM if SPLIT_Q else start_m
    q = q_smem.index((it % Q_BUFS) * Q_BOXES + MY_BOX).reshape([BM, HEAD_DIM])
    m_i = gl.full([BM], float("-inf"), gl.float32, row_layout)
    l_i = gl.zeros([BM], gl.float32, row_layout)
    acc = gl.zeros([BM, COLS], gl.float32, mma_layout(COLS))
    # no producer warp (WARP_SPECIALIZE off, D85): consumer 1, second at the tensor cores
    # under PINGPONG, issues Q and the ring's first STAGES tiles, then each tile into the
    # slot it has just released, once consumer 0 has released it too
    LOADS: gl.constexpr = not WARP_SPECIALIZE and CONSUMER == 1
    loads = (k_desc, v_desc, off_b, off_hkv, n_tiles)
    if LOADS:
        _load_q(q_desc, q_smem, q_ready, q_empty, 0, off_b, off_h, start_m, Q_BOXES, 2)
        for j in gl.static_range(STAGES):
            _refill(loads, k_smem, v_smem, kv_ready, kv_empty, j, LOADS)
    mbarrier.wait(q_ready.index(it % 2), (it // 2) & 1)
    if PINGPONG or OVERLAP:  # FA3's schedules on FA2 (D59)
        m_i, l_i, acc = _fold_tiles_pipelined(q, k_smem, v_smem, kv_ready, kv_empty, x_bad,
                                              bar_v, n_tiles, start_m, row0, seqlen_q,
                                              seqlen_k, causal, qk_scale, loads, g0, n_before,
                                              PINGPONG, OVERLAP, LOADS, CONSUMER)
    else:
        for j in range(n_tiles):
            g = g0 + j  # the ring's position (and split-K's rendezvous')
            slot = g % STAGES
            mbarrier.wait(kv_ready.index(slot), (g // STAGES) & 1)
            m_i, l_i, acc = _fold_tile(m_i, l_i, acc, q, k_smem, v_smem, slot, j, g, row0,
                                       seqlen_q, seqlen_k, causal, qk_scale, q_empty, x_max,
                                       x_sum, x_out, bar_max, bar_out, x_bad, bar_v, False,
                                       n_before, DEFER_NORM, SPLIT_Q, True, CONSUMER)
            mbarrier.arrive(kv_empty.index(slot), count=1)
            _refill(loads, k_smem, v_smem, kv_ready, kv_empty, j + STAGES, LOADS)
    # my products are done with Q (split-K: the other consumer's too, past the last tile's
    # rendezvous). O passes through Q's buffer to 16-byte stores (D113) where the next load
    # into it waits anyway (two Q buffers: it is the row block after next's; one program a row
    # block: none), and Q is released after: split-Q's consumer through its own box, split-K's
    # through its half of the box's bytes
    STAGE_IN_Q: gl.constexpr = Q_BUFS == 2 or not PERSISTENT
    if SPLIT_Q:
        staging = q
    else:
        staging = q_smem.index(it % Q_BUFS)._reinterpret(
            q_smem.dtype, [2 * BM, COLS],
            gl.NVMMASharedLayout.get_default_for([2 * BM, COLS], q_smem.dtype)).slice(
                CONSUMER * BM, BM, 0)
    if PERSISTENT and not STAGE_IN_Q:  # the producer may load a later row block's
        mbarrier.arrive(q_empty.index(it % 2), count=1)
    _store_outputs(m_i, l_i, acc, O, O_RES, LSE, M, L, off_b, off_h, row0, seqlen_q,
                   qk_scale, stride_ob, stride_oh, stride_om, stride_lb, stride_lh,
                   DEFER_NORM, SPLIT_Q, CONSUMER, STORE_O_RES, STAGE_IN_Q, staging)
    if PERSISTENT and STAGE_IN_Q:
        gl.thread_barrier()  # every thread's loads of the staged tiles done
        fence_async_shared()  # my generic accesses before the producer's TMA writes
        mbarrier.arrive(q_empty.index(it % 2), count=1)
    if causal:
        n_before += n_tiles - _full_tiles(start_m, seqlen_k - seqlen_q, seqlen_k, BLOCK_N)
    return g0 + n_tiles, n_before


@gluon.jit
def _consumer(q_desc, k_desc, v_desc, q_smem, k_smem, v_smem, q_ready, q_empty, kv_ready,
              kv_empty, x_max, x_sum, x_out, bar_max, bar_out, x_bad, bar_v, O, O_RES, LSE, M,
              L, o_tmp_desc, stats_desc,
              seqlen_q, seqlen_k, heads_q, group_size, batch_heads, qk_scale, stride_ob,
              stride_oh, stride_om, stride_lb, stride_lh, state,
              DEFER_NORM: gl.constexpr, SPLIT_Q: gl.constexpr, SEQ_PARALLEL: gl.constexpr,
              causal: gl.constexpr, CONSUMER: gl.constexpr, PINGPONG: gl.constexpr = False,
              OVERLAP: gl.constexpr = False, WARP_SPECIALIZE: gl.constexpr = True,
              STORE_O_RES: gl.constexpr = False, PERSISTENT: gl.constexpr = False):
    if PERSISTENT or not SEQ_PARALLEL:
        seqlen_q, seqlen_k = _in_partition(seqlen_q), _in_partition(seqlen_k)
    BM: gl.constexpr = ROWS_PER_WARPGROUP
    Q_BOXES: gl.constexpr = 2 if SPLIT_Q else 1
    ROWS: gl.constexpr = Q_BOXES * BM
    MY_BOX: gl.constexpr = CONSUMER if SPLIT_Q else 0
    STAGES: gl.constexpr = k_smem.type.shape[0]
    BLOCK_N: gl.constexpr = k_desc.block_type.shape[2]
    HEAD_DIM: gl.constexpr = k_desc.block_type.shape[3]
    KEYS: gl.constexpr = BLOCK_N if SPLIT_Q else BLOCK_N // 2
    COLS: gl.constexpr = HEAD_DIM if SPLIT_Q else HEAD_DIM // 2
    V_PARTS: gl.constexpr = v_smem.type.shape[0] // STAGES
    o_layout: gl.constexpr = mma_layout(COLS)
    row_layout: gl.constexpr = gl.SliceLayout(1, mma_layout(KEYS))

    if SEQ_PARALLEL:  # FA2: a row block's state in registers for every K/V tile
        if PERSISTENT:  # the program's row blocks one after another, as the producer loads them
            row_blocks = gl.cdiv(seqlen_q, ROWS)
            g = 0
            n_sanitised = 0
            it = 0
            n_items = row_blocks * batch_heads
            programs = _num_programs()
            for wave in range(gl.cdiv(n_items, programs)):
                w = _work_item(wave, programs, causal)
                if w < n_items:
                    g, n_sanitised = _fa2_row_block(
                        q_desc, k_desc, v_desc, q_smem, k_smem, v_smem, q_ready, q_empty,
                        kv_ready, kv_empty, x_max, x_sum, x_out, bar_max, bar_out, x_bad, bar_v,
                        O, O_RES, LSE, M, L, seqlen_q, seqlen_k, heads_q, group_size, qk_scale,
                        stride_ob, stride_oh, stride_om, stride_lb, stride_lh, w % row_blocks,
                        w // row_blocks, it, g, n_sanitised, DEFER_NORM, SPLIT_Q, causal,
                        CONSUMER, PINGPONG, OVERLAP, WARP_SPECIALIZE, STORE_O_RES, PERSISTENT)
                    it += 1
        else:  # one row block: grid (row blocks, B * Hq)
            _fa2_row_block(
                q_desc, k_desc, v_desc, q_smem, k_smem, v_smem, q_ready, q_empty, kv_ready,
                kv_empty, x_max, x_sum, x_out, bar_max, bar_out, x_bad, bar_v, O, O_RES, LSE, M,
                L, seqlen_q, seqlen_k, heads_q, group_size, qk_scale, stride_ob, stride_oh,
                stride_om, stride_lb, stride_lh, gl.program_id(0), gl.program_id(1), 0, 0, 0,
                DEFER_NORM, SPLIT_Q, causal, CONSUMER, PINGPONG, OVERLAP, WARP_SPECIALIZE,
                STORE_O_RES, PERSISTENT)
    else:  # FA1: K/V tiles outer, row blocks inner, each row block's state through HBM
        bh = gl.program_id(1)
        off_b, off_h, off_hkv = _heads(bh, heads_q, group_size)
        m_0 = gl.full([BM], float("-inf"), gl.float32, row_layout)
        l_0 = gl.zeros([BM], gl.float32, row_layout)
        acc_0 = gl.zeros([BM, COLS], gl.float32, o_layout)
        row_blocks = gl.cdiv(seqlen_q, ROWS)
        r, splits, last = _fa1_split(row_blocks, causal)
        Q_SLOTS: gl.constexpr = q_smem.type.shape[0] // Q_BOXES
        st_acc, st_stats, st_ready, st_free, o_desc, o_res_desc = state
        ST_SLOTS: gl.constexpr = st_acc.type.shape[0] // 2  # state buffers (state_slots)
        # my row blocks that see no key at all (causal, seqlen_q > seqlen_k): O = 0, L = -inf
        for i in range(r, _first_row_block(0, seqlen_q, seqlen_k, causal, ROWS, BLOCK_N),
                       splits):
            _store_outputs(m_0, l_0, acc_0, O, O_RES, LSE, M, L, off_b, off_h,
                           i * ROWS + MY_BOX * BM, seqlen_q, qk_scale, stride_ob, stride_oh,
                           stride_om, stride_lb, stride_lh, DEFER_NORM, SPLIT_Q, CONSUMER,
                           STORE_O_RES)
        t = 0
        for j in range(_tiles_seen(last * ROWS, seqlen_q, seqlen_k, causal, ROWS, BLOCK_N)):
            slot = j % STAGES
            mbarrier.wait(kv_ready.index(slot), (j // STAGES) & 1)
            sanitised, n_sanitised = _sanitise_if_masked(
                v_smem, slot, j, 0, seqlen_q, seqlen_k, x_bad, bar_v, 0, causal, V_PARTS,
                CONSUMER, TEST_FIRST=True)
            first_bad = seqlen_k
            if causal:
                if sanitised:
                    first_bad = _first_bad_key(x_bad, n_sanitised)
            for i in range(_my_first_row_block(j, r, splits, seqlen_q, seqlen_k, causal, ROWS,
                                               BLOCK_N), row_blocks, splits):
                row0 = i * ROWS + MY_BOX * BM
                s = t % 2  # the state ring's slot (the Q ring's barriers use the same index)
                b = t % ST_SLOTS  # and its buffer
                # acc: what the last K/V tile left in HBM (FA1's o_tmp), prefetched by TMA into
                # the state ring, read by _fold_tile where it is used
                acc = st_acc.index(2 * b + CONSUMER)
                if j == 0:
                    m_i, l_i = m_0, l_0
                else:
                    mbarrier.wait(st_ready.index(s), (t // 2) & 1)
                    stats = _stats_rows(st_stats.index(2 * b + CONSUMER))
                    m_i = stats.index(0).load(row_layout)
                    l_i = stats.index(1).load(row_layout)
                mbarrier.wait(q_ready.index(s), (t // 2) & 1)
                q = q_smem.index((t % Q_SLOTS) * Q_BOXES + MY_BOX).reshape([BM, HEAD_DIM])
                # the K/V slot through an opaque mov, once a step: the wgmma descriptors of
                # K_j and V_j are then formed in the step, not hoisted out of the row blocks'
                # loop and kept (spilled) across it, as in the backward (causal d=128: 20-28
                # bytes spilled)
                kv_slot = _in_partition(slot)
                # NaN goes back only into row blocks whose last row sees a non-finite V
                seen = sanitised
                if causal:
                    if sanitised:
                        seen = first_bad <= row0 + BM - 1 + seqlen_k - seqlen_q
                m_i, l_i, acc = _fold_tile(m_i, l_i, acc, q, k_smem, v_smem, kv_slot, j, t, row0,
                                           seqlen_q, seqlen_k, causal, qk_scale, q_empty,
                                           x_max, x_sum, x_out, bar_max, bar_out, x_bad,
                                           bar_v, seen, n_sanitised, DEFER_NORM,
                                           SPLIT_Q, SEQ_PARALLEL, CONSUMER)
                if j == _tiles_seen(i * ROWS, seqlen_q, seqlen_k, causal, ROWS, BLOCK_N) - 1:
                    _store_outputs_tma(m_i, l_i, acc, o_desc, o_res_desc,
                                       st_acc.index(2 * b + CONSUMER), LSE, M, L, off_b, off_h,
                                       row0, seqlen_q, qk_scale, stride_lb, stride_lh,
                                       DEFER_NORM, SPLIT_Q, CONSUMER, STORE_O_RES)
                else:
                    _store_partial_state(m_i, l_i, acc, o_tmp_desc, stats_desc, state, b, i,
                                         bh, ROWS, SPLIT_Q, CONSUMER)
                # slot s is read (and, unless this was row block i's last tile, its state
                # complete in HBM): the compiler's barrier of my 128 threads before the arrive
                # puts every thread's reads of the slot before it
                mbarrier.arrive(st_free.index(s), count=1)
                t += 1
            mbarrier.arrive(kv_empty.index(slot), count=1)


@gluon.jit
def _consumer_partition(args, DEFER_NORM: gl.constexpr, SPLIT_Q: gl.constexpr,
                        SEQ_PARALLEL: gl.constexpr, IS_CAUSAL: gl.constexpr,
                        CONSUMER: gl.constexpr, PINGPONG: gl.constexpr, OVERLAP: gl.constexpr,
                        WARP_SPECIALIZE: gl.constexpr, STORE_O_RES: gl.constexpr,
                        PERSISTENT: gl.constexpr):
    _consumer(*args, DEFER_NORM=DEFER_NORM, SPLIT_Q=SPLIT_Q, SEQ_PARALLEL=SEQ_PARALLEL,
              causal=IS_CAUSAL, CONSUMER=CONSUMER, PINGPONG=PINGPONG, OVERLAP=OVERLAP,
              WARP_SPECIALIZE=WARP_SPECIALIZE, STORE_O_RES=STORE_O_RES, PERSISTENT=PERSISTENT)


@gluon.jit
def _load_warp(args, DEFER_NORM: gl.constexpr, SPLIT_Q: gl.constexpr,
               SEQ_PARALLEL: gl.constexpr, IS_CAUSAL: gl.constexpr, PERSISTENT: gl.constexpr):
    _producer(*args, DEFER_NORM=DEFER_NORM, SPLIT_Q=SPLIT_Q, SEQ_PARALLEL=SEQ_PARALLEL,
              causal=IS_CAUSAL, CONSUMER=0, PERSISTENT=PERSISTENT)


@gluon.jit
def _hopper_attn_fwd(q_desc, k_desc, v_desc, O, O_RES, LSE, M, L, o_tmp_desc, stats_desc,
                     o_desc, o_res_desc, seqlen_q, seqlen_k, heads_q, group_size, batch_heads,
                     qk_scale, stride_ob, stride_oh, stride_om, stride_lb, stride_lh,
                     DEFER_NORM: gl.constexpr,
                     SPLIT_Q: gl.constexpr, SEQ_PARALLEL: gl.constexpr, IS_CAUSAL: gl.constexpr,
                     STAGES: gl.constexpr, CONSUMER_REGS: gl.constexpr, Q_SLOTS: gl.constexpr,
                     STATE_SLOTS: gl.constexpr = 2, PINGPONG: gl.constexpr = False,
                     OVERLAP: gl.constexpr = False, WARP_SPECIALIZE: gl.constexpr = True,
                     STORE_O_RES: gl.constexpr = False, PERSISTENT: gl.constexpr = False):
    """Grid (row blocks, B * Hq) with seq_parallel, (splits, B * Hq) without; PERSISTENT
    (seq_parallel with a producer warp): grid (programs, 1), program p taking work items
    p, p + programs, ... of the row blocks x batch_heads (B * Hq) there are, in the order the
    other grid launches them (a head's row blocks together, causal longest first; D98).
    Q_SLOTS: Q buffers (seq_parallel: 1, a persistent program 2 where they fit; FA1's
    schedule reloads Q every step: 2, or 1 where 2 do not fit).
    STATE_SLOTS: FA1's schedule's state buffers (state_slots).
    PINGPONG, OVERLAP, WARP_SPECIALIZE (off: no producer warp): FlashAttention-3's schedules,
    on FA2 all on only (D59, D85). STORE_O_RES: O_RES (through o_res_desc in FA1's schedule)
    gets O's rounding residual for the backward (D06, D91); else it aliases O, unwritten."""
    gl.static_assert(not (PINGPONG or OVERLAP or not WARP_SPECIALIZE)
                     or (DEFER_NORM and SPLIT_Q and SEQ_PARALLEL),
                     "the Hopper-era switches are built on FA2 (DEFER_NORM, SPLIT_Q, SEQ_PARALLEL)")
    gl.static_assert(not PERSISTENT or (SEQ_PARALLEL and WARP_SPECIALIZE),
                     "a persistent grid needs seq_parallel and the producer warp")
    BM: gl.constexpr = ROWS_PER_WARPGROUP
    Q_BOXES: gl.constexpr = 2 if SPLIT_Q else 1
    V_PARTS: gl.constexpr = 1 if SPLIT_Q else 2
    q_smem = gl.allocate_shared_memory(q_desc.dtype, [Q_SLOTS * Q_BOXES] +
                                       q_desc.block_type.shape, q_desc.layout)
    k_smem = gl.allocate_shared_memory(k_desc.dtype, [STAGES] + k_desc.block_type.shape,
                                       k_desc.layout)
    v_smem = gl.allocate_shared_memory(v_desc.dtype, [STAGES * V_PARTS] + v_desc.block_type.shape,
                                       v_desc.layout)
    HALF_D: gl.constexpr = v_desc.block_type.shape[3]
    # split-K's rendezvous: each consumer's row maxima, row sums and partial outputs (D/2
    # columns), and one mbarrier per consumer and exchange (maxima; outputs with sums)
    X_ROWS: gl.constexpr = 1 if SPLIT_Q else BM  # split-Q exchanges nothing
    rows_layout: gl.constexpr = gl.SwizzledSharedLayout(vec=1, per_phase=1, max_phase=1,
                                                        order=[0])
    x_max = gl.allocate_shared_memory(gl.float32, [2, BM], rows_layout)
    x_sum = gl.allocate_shared_memory(gl.float32, [2, BM], rows_layout)
    # 8-element swizzle: the wgmma accumulator's stores and loads meet no bank conflict
    # (gl.bank_conflicts: 0, against 3 extra wavefronts an access unswizzled)
    x_out = gl.allocate_shared_memory(gl.float32, [2, X_ROWS, HALF_D], gl.SwizzledSharedLayout(
        vec=8, per_phase=1, max_phase=8, order=[1, 0]))
    bar_max = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
    bar_out = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
    # causal tiles that hide a key: each consumer's first non-finite key of every column of
    # its half of the tile's keys, two buffers (see the module docstring), and its mbarrier
    X_BAD_COLS: gl.constexpr = v_desc.block_type.shape[3] * V_PARTS if IS_CAUSAL else 1
    x_bad = gl.allocate_shared_memory(gl.int32, [4, X_BAD_COLS], rows_layout)
    bar_v = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
    q_ready = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
    q_empty = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
    kv_ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    kv_empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    # FA1's schedule: the state ring, two slots of both consumers' partial state (fp32 output
    # in O_TMP's box, m and l in STATS_TMP's), loaded by the producer and written back by the
    # consumers through the slot it arrived in; seq_parallel keeps a placeholder of one box
    ST_BUFS: gl.constexpr = 1 if SEQ_PARALLEL else 2 * STATE_SLOTS  # buffer * 2 + consumer
    st_acc = gl.allocate_shared_memory(gl.float32, [ST_BUFS] + o_tmp_desc.block_type.shape,
                                       o_tmp_desc.layout)
    st_stats = gl.allocate_shared_memory(gl.float32, [ST_BUFS] + stats_desc.block_type.shape,
                                         stats_desc.layout)
    st_ready = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
    st_free = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
    for i in gl.static_range(STAGES):
        mbarrier.init(kv_ready.index(i), count=1)
        mbarrier.init(kv_empty.index(i), count=2)  # released by both consumers
    for i in gl.static_range(2):
        mbarrier.init(q_ready.index(i), count=1)
        mbarrier.init(q_empty.index(i), count=2)
        mbarrier.init(bar_max.index(i), count=1)
        mbarrier.init(bar_out.index(i), count=1)
        mbarrier.init(bar_v.index(i), count=1)
        if not SEQ_PARALLEL:
            mbarrier.init(st_ready.index(i), count=1)  # the producer's expect (or arrive)
            mbarrier.init(st_free.index(i), count=2)  # both consumers

    args = (q_desc, k_desc, v_desc, q_smem, k_smem, v_smem, q_ready, q_empty, kv_ready,
            kv_empty, x_max, x_sum, x_out, bar_max, bar_out, x_bad, bar_v, O, O_RES, LSE, M, L,
            o_tmp_desc, stats_desc,
            seqlen_q, seqlen_k, heads_q, group_size, batch_heads, qk_scale, stride_ob, stride_oh,
            stride_om, stride_lb, stride_lh,
            (st_acc, st_stats, st_ready, st_free, o_desc, o_res_desc))
    if WARP_SPECIALIZE:  # a producer warp loads, the consumers only compute
        gl.warp_specialize([(_consumer_partition, (args, DEFER_NORM, SPLIT_Q, SEQ_PARALLEL,
                                                   IS_CAUSAL, 0, PINGPONG, OVERLAP, True,
                                                   STORE_O_RES, PERSISTENT)),
                            (_consumer_partition, (args, DEFER_NORM, SPLIT_Q, SEQ_PARALLEL,
                                                   IS_CAUSAL, 1, PINGPONG, OVERLAP, True,
                                                   STORE_O_RES, PERSISTENT)),
                            (_load_warp, (args, DEFER_NORM, SPLIT_Q, SEQ_PARALLEL, IS_CAUSAL,
                                          PERSISTENT))],
                           [4, 1], [CONSUMER_REGS, 56])
    else:  # consumer 1 loads as well (_refill)
        gl.warp_specialize([(_consumer_partition, (args, DEFER_NORM, SPLIT_Q, SEQ_PARALLEL,
                                                   IS_CAUSAL, 0, PINGPONG, OVERLAP, False,
                                                   STORE_O_RES, False)),
                            (_consumer_partition, (args, DEFER_NORM, SPLIT_Q, SEQ_PARALLEL,
                                                   IS_CAUSAL, 1, PINGPONG, OVERLAP, False,
                                                   STORE_O_RES, False))],
                           [4], [CONSUMER_REGS])


_HOPPER_ATTN_FWD = CachedLaunch(_hopper_attn_fwd)  # host time: kernels/launch_cache.py


def _gl_dtype(dtype):
    return {"float16": gl.float16, "bfloat16": gl.bfloat16, "float32": gl.float32}[
        str(dtype).removeprefix("torch.")]


@functools.lru_cache(maxsize=None)
def _default_layout(box: tuple, dtype: str):
    return gl.NVMMASharedLayout.get_default_for(list(box), _gl_dtype(dtype))


def default_layout(box, dtype):
    """gl.NVMMASharedLayout.get_default_for(box, dtype), computed once a (box, dtype): a few
    microseconds of host time a call each (D95)."""
    return _default_layout(tuple(box), str(dtype).removeprefix("torch."))


def block_shapes(head_dim: int, block_n: int, split_q: bool):
    """TMA boxes over (B, H, S, D): Q rows of one warpgroup, K tiles, V tiles (split-K: in
    column halves, one per consumer)."""
    return ([1, 1, ROWS_PER_WARPGROUP.value, head_dim], [1, 1, block_n, head_dim],
            [1, 1, block_n, head_dim if split_q else head_dim // 2])


def state_block_shapes(head_dim: int, split_q: bool):
    """FA1's schedule: TMA boxes of one consumer's partial state, over O_TMP (B*H, rows_tmp, D)
    (64 rows; split-Q every column, split-K the consumer's D/2) and STATS_TMP (B*H, 4, rows_tmp)
    (its m and l rows), and of its part of O (B, H, S, D) and of O's residual for the
    epilogue."""
    rows = ROWS_PER_WARPGROUP.value
    cols = head_dim if split_q else head_dim // 2
    return [1, rows, cols], [1, 2, rows], [1, 1, rows, cols], [1, 1, rows, cols]


def state_layouts(head_dim: int, split_q: bool, dtype):
    """The boxes' shared layouts (fp32 state; O's and its residual's boxes in O's dtype, staged
    in a state buffer)."""
    return [default_layout(box, t) for box, t in
            zip(state_block_shapes(head_dim, split_q), ("float32", "float32", dtype, dtype))]


def unsupported(dtype, head_dim: int, head_dim_v: int | None = None) -> str | None:
    """Why the Hopper chassis cannot take inputs of this dtype, head_dim and v's head_dim_v
    (None: head_dim); None if it can."""
    name = str(dtype).removeprefix("torch.")
    if name not in HOPPER_DTYPES:
        return f"the hopper backend takes {' or '.join(HOPPER_DTYPES)}, got {name}"
    if head_dim not in HOPPER_HEAD_DIMS:
        return f"the hopper backend takes head_dim in {HOPPER_HEAD_DIMS}, got {head_dim}"
    if head_dim_v not in (None, head_dim):
        return (f"the hopper backend takes v with q's head_dim ({head_dim}), got head_dim_v "
                f"{head_dim_v}; use backend='triton'")
    return None


def check_hopper_call(q, k, v, variant, config, causal: bool = True):
    """Raise ValueError for what the Hopper chassis cannot do (the Triton backend can)."""
    why = unsupported(q.dtype, q.shape[-1], v.shape[-1])
    if why is None and config.block_n not in block_ns(variant):
        why = (f"the hopper backend takes block_n {' or '.join(map(str, block_ns(variant)))} "
               f"for {variant}, got {config.block_n}")
    stages = STAGES[variant.seq_parallel]
    if why is None and config.num_stages not in stages:
        why = (f"the hopper backend takes num_stages {' or '.join(map(str, stages))} for "
               f"{variant}, got {config.num_stages}")
    need = shared_bytes(q.shape[-1], config.block_n, config.num_stages, variant.split_q,
                        variant.seq_parallel, causal=causal)
    if why is None and need > SHARED_LIMIT:
        why = (f"the hopper backend's tiles need {need} bytes of shared memory at block_n "
               f"{config.block_n}, {config.num_stages} stages (sm_90: {SHARED_LIMIT}); use fewer")
    for name, t in (("q", q), ("k", k), ("v", v)):
        if why is None and not tma_ready(t):
            why = (f"the hopper backend reads {name} through TMA: it needs a unit stride along "
                   f"head_dim and 16-byte aligned strides and data, got strides {t.stride()}")
    if why:
        raise ValueError(why)


def _state_descriptors(o_tmp, stats_tmp, o, o_res, head_dim: int, split_q: bool):
    """FA1's schedule's descriptors of the partial state (o_tmp, stats_tmp), of O and of O's
    residual (o_res, or o's descriptor where there is none)."""
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

    descs = [TensorDescriptor(t, list(t.shape), list(t.stride()), box, layout)
             for t, box, layout in zip((o_tmp, stats_tmp, o),
                                       state_block_shapes(head_dim, split_q),
                                       state_layouts(head_dim, split_q, o.dtype))]
    return descs + [descs[-1] if o_res is None else TensorDescriptor(
        o_res, list(o_res.shape), list(o_res.stride()), descs[-1].block_shape,
        descs[-1].layout)]


@functools.lru_cache(maxsize=None)
def _unused_state_descriptors(device, head_dim: int, split_q: bool, dtype: str):
    """seq_parallel reads and writes none of FA1's state descriptors, and stores O through
    pointers: one set over placeholders of one box each, made once a (device, head_dim,
    split_q, dtype) (host time: D95)."""
    import torch

    rows = ROWS_PER_WARPGROUP.value
    cols = head_dim if split_q else head_dim // 2
    o = torch.empty((1, 1, rows, cols), device=device, dtype=getattr(torch, dtype[6:]))
    return _state_descriptors(torch.empty((1, rows, cols), device=device, dtype=torch.float32),
                              torch.empty((1, 2, rows), device=device, dtype=torch.float32),
                              o, None, head_dim, split_q)


def hopper_attn_fwd(q, k, v, causal, softmax_scale, variant, config, o_residual=False):
    """`kernels.forward.attn_fwd`'s contract, (o, stats, o_res), computed by the Hopper chassis
    (o_res: o's rounding residual with o_residual, else None; D91). config: block_n (`block_ns`) and num_stages are used; a row block is 128
    rows (split-Q) or 64 (split-K) by design. Without seq_parallel, FA1's schedule: one
    program per (batch, head) and split (config.fa1_splits, 0: FA1's heuristic), its row
    blocks' fp32 partial outputs and statistics in scratch buffers between K/V tiles."""
    import torch
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

    check_hopper_call(q, k, v, variant, config, causal)
    batch, heads_q, seqlen_q, head_dim = q.shape
    heads_kv, seqlen_k = k.shape[1], k.shape[2]
    o, stats, (_, m, l) = empty_outputs(q, variant.defer_norm)
    o_res = torch.empty_like(o) if o_residual else None
    descs = []
    for t, box in zip((q, k, v), block_shapes(head_dim, config.block_n, variant.split_q)):
        descs.append(TensorDescriptor(t, list(t.shape), list(t.stride()), box,
                                      default_layout(box, t.dtype)))
    rows = ROWS_PER_WARPGROUP.value * (2 if variant.split_q else 1)
    row_blocks = triton.cdiv(seqlen_q, rows)
    programs = persistent_programs(config, variant, batch * heads_q, seqlen_q, seqlen_k,
                                   bool(causal), q.device)
    if variant.seq_parallel:
        grid = (programs, 1) if programs else (row_blocks, batch * heads_q)
        descs += _unused_state_descriptors(q.device, head_dim, variant.split_q, str(o.dtype))
    else:  # FA1's o_tmp, and m, l of each consumer
        grid = (fa1_splits(config, batch * heads_q, row_blocks, q.device), batch * heads_q)
        rows_tmp = row_blocks * rows  # whole row blocks: no masks
        o_tmp = torch.empty((batch * heads_q, rows_tmp, head_dim), device=q.device,
                            dtype=torch.float32)
        stats_tmp = torch.empty((batch * heads_q, 4, rows_tmp), device=q.device,
                                dtype=torch.float32)
        descs += _state_descriptors(o_tmp, stats_tmp, o, o_res, head_dim, variant.split_q)
    residual = o if o_res is None else o_res  # aliased to o unless stored
    _HOPPER_ATTN_FWD[grid](
        *descs[:3], o, residual, stats[0], m, l, *descs[3:], seqlen_q, seqlen_k, heads_q,
        heads_q // heads_kv, batch * heads_q, softmax_scale * LOG2E, o.stride(0), o.stride(1),
        o.stride(2),
        stats[0].stride(0), stats[0].stride(1),
        DEFER_NORM=variant.defer_norm, SPLIT_Q=variant.split_q,
        SEQ_PARALLEL=variant.seq_parallel, IS_CAUSAL=bool(causal), STAGES=config.num_stages,
        PINGPONG=variant.pingpong, OVERLAP=variant.overlap,
        WARP_SPECIALIZE=variant.warp_specialize,
        CONSUMER_REGS=consumer_registers(variant.split_q, variant.seq_parallel),
        Q_SLOTS=q_buffers(head_dim, config.block_n, config.num_stages, variant.split_q,
                          variant.seq_parallel, bool(causal), persistent=bool(programs)),
        STATE_SLOTS=state_slots(head_dim, config.block_n, config.num_stages, variant.split_q,
                                variant.seq_parallel, bool(causal)),
        STORE_O_RES=o_res is not None, PERSISTENT=bool(programs), num_warps=4)
    return o, stats, o_res


def sm90_signature(variant, dtype="bfloat16", head_dim=128, block_n=128, stages=2,
                   causal=False, o_residual=False, persistent=False):
    """(signature, constexprs) of `_hopper_attn_fwd` as hopper_attn_fwd launches it, for
    triton.compile through GluonASTSource (this module's compile_for_sm90, the compile gate)."""
    short = {"float16": "fp16", "bfloat16": "bf16"}[dtype]
    persistent = persistent and variant.seq_parallel and variant.warp_specialize  # as launched
    signature, boxes = {}, block_shapes(head_dim, block_n, variant.split_q)
    for name, box in zip(("q_desc", "k_desc", "v_desc"), boxes):
        layout = default_layout(box, dtype)
        signature[name] = f"tensordesc<{short}[{','.join(map(str, box))}],{layout!r}>"
    signature.update(O=f"*{short}", O_RES=f"*{short}", LSE="*fp32", M="*fp32", L="*fp32")
    for name, box, layout, ty in zip(("o_tmp_desc", "stats_desc", "o_desc", "o_res_desc"),
                                     state_block_shapes(head_dim, variant.split_q),
                                     state_layouts(head_dim, variant.split_q, dtype),
                                     ("fp32", "fp32", short, short)):
        signature[name] = f"tensordesc<{ty}[{','.join(map(str, box))}],{layout!r}>"
    signature.update(seqlen_q="i32", seqlen_k="i32", heads_q="i32",
                     group_size="i32", batch_heads="i32", qk_scale="fp32", stride_ob="i64",
                     stride_oh="i64",
                     stride_om="i64", stride_lb="i32", stride_lh="i32")
    constexprs = {"DEFER_NORM": variant.defer_norm, "SPLIT_Q": variant.split_q,
                  "SEQ_PARALLEL": variant.seq_parallel, "IS_CAUSAL": causal, "STAGES": stages,
                  "PINGPONG": variant.pingpong, "OVERLAP": variant.overlap,
                  "WARP_SPECIALIZE": variant.warp_specialize,
                  "CONSUMER_REGS": consumer_registers(variant.split_q, variant.seq_parallel),
                  "Q_SLOTS": q_buffers(head_dim, block_n, stages, variant.split_q,
                                       variant.seq_parallel, causal, persistent=persistent),
                  "STATE_SLOTS": state_slots(head_dim, block_n, stages, variant.split_q,
                                             variant.seq_parallel, causal),
                  "STORE_O_RES": o_residual, "PERSISTENT": persistent}
    signature.update({name: "constexpr" for name in constexprs})
    return signature, constexprs


def compile_for_sm90(variant, dtype="bfloat16", head_dim=128, block_n=128, stages=2,
                     causal=False, o_residual=False, persistent=False):
    """triton.compile of the Hopper chassis for sm_90 without a GPU; returns the CompiledKernel."""
    from triton.backends.compiler import GPUTarget
    from triton.experimental.gluon._runtime import GluonASTSource

    signature, constexprs = sm90_signature(variant, dtype, head_dim, block_n, stages, causal,
                                           o_residual, persistent)
    # o and its residual 16-byte aligned with rows of whole 16-byte runs, as the launcher's
    # tensors are (Triton specialises on both)
    aligned = {(list(signature).index(name),): [["tt.divisibility", 16]]
               for name in ("O", "O_RES", "stride_ob", "stride_oh", "stride_om")}
    source = GluonASTSource(_hopper_attn_fwd, signature, constexprs, aligned)
    return triton.compile(source, target=GPUTarget("cuda", 90, 32), options=dict(num_warps=4))
