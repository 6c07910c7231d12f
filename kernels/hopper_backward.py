"""The backward pass on the Hopper chassis (kernels/hopper_forward.py: one TMA producer warp,
a ring of stages guarded by mbarriers, two consumer warpgroups on wgmma), with FA2's changes as
constexprs. split_q on and off differ only in how the dQ product is partitioned across the two
consumers (docs/decisions.md D61).

Natural-log notation as in kernels/backward.py, S = softmax_scale Q K^T, c = softmax_scale /
ln 2 (the kernel works in log2 units):

    P_ij  = exp2(S_ij c - L_i)              DEFER_NORM: L from the stored lse (log2 units)
          = exp2(S_ij c - m_i) / l_i        off: FA1's stored m and l
    dV_j += P_ij^T dO_i
    dP_ij = dO_i V_j^T
    dS_ij = P_ij (dP_ij - D_i)              D_i = rowsum(dO_i O_i) - dlse_i (the preprocess)
    dK_j += softmax_scale dS_ij^T Q_i
    dQ_i += softmax_scale dS_ij K_j

One program per column block of BLOCK_N = 128 keys of one (batch, kv head). The producer
warp loads K_j and V_j once, then Q_i and dO_i of every step (query row block i of R rows of
each query head of the kv head's GQA group that sees the column block) into a ring of STAGES
slots; R = 128 at head_dim 64 with split-Q and without OVERLAP, as FlashAttention-3 tiles its
sm_90 backward there, else 64 (`bwd_rows`). Consumer c owns keys 64c .. 64c + 63 of the
block, and its dK_c, dV_c (64 x D float32) stay in registers over every step. Each step it
computes the transposed tile (keys x queries):

    S^T_c  = K_c Q_i^T                  wgmma, 64 x R, both operands in shared memory
    P^T_c  = exp2(S^T_c c - L)          (masked entries: 0 by `where`, never by a product)
    dV_c  += P^T_c dO_i                 wgmma, A (P^T) from registers
    dP^T_c = V_c dO_i^T                 wgmma
    dS^T_c = P^T_c (dP^T_c - D)
    dK_c  += dS^T_c Q_i                 wgmma, A from registers
    dS^T_c -> shared memory (16-bit; two buffers by step parity)

and then the step's dQ_i, the one place where the settings differ:

    SPLIT_Q (FA2, section 3.3): both consumers' dS^T halves stored, one rendezvous; consumer c
      computes its D/2 columns of dQ_i over all 128 keys of the block in one product,
          dQ_i[:, cols c] = dS_i K_j[:, cols c]      wgmma R x D/2, K = 128 (dS_i: the whole
                                                     block's dS^T read back transposed)
      complete, and adds it to the float32 dQ buffer. No partial sum crosses a warpgroup.
    split-K (FA1's partition of the dQ product's keys, as the forward chassis's split-K):
      consumer c computes the partial product over its own 64 keys only,
          dQ_c = dS_c K_c                            two wgmmas 64 x D/2, K = 64
      writes the other consumer's columns (64 x D/2 float32) to an exchange buffer,
      rendezvous, reads the other's partial of its own columns, adds, and adds its D/2
      columns to the dQ buffer: 64 (D/2) 4 bytes written and read per consumer and step, the
      cost split-Q removes (both settings meet once a step: split-Q's consumers read each
      other's half of dS^T, split-K's each other's partial dQ).

    Both add their columns to dQ's buffer as FlashAttention-3 does: stored to shared memory,
    then one TMA reduction (float32 adds in L2) a consumer and step; no consumer thread issues
    an atomic (D108). dK_c's product is issued before the rendezvous and waited for after it.

OVERLAP (FA3's backward, D87; FA2 all on only): dP^T's product is issued right after S^T's,
so P^T's exponentials run under it; dV's product then waits for both (P^T's 16-bit operand is
still not live beside dP^T). The products and their operands are the same: dK and dV are FA2's
bit for bit.

SEQ_PARALLEL (FA2, section 3.2): grid (column blocks, B * Hkv), causal blocks launched longest
first in windows of kv heads (`_longest_first`, the Triton kernels' launch order). Off (FA1:
one program per (batch, head)): grid (1, B * Hkv), the program walks every column block itself
(the same loop, `range(first, n_blocks, step)`). dK is scaled by softmax_scale once, at the
end of a block. A variant with seq_parallel off runs SEQ_PARALLEL where FA1's launcher switched
to its column grid (kernels/plan/fa1_launch.py, D90).

Masks: only steps whose tile crosses the causal diagonal (bottom-right aligned: query i sees
key j iff j <= i + Sk - Sq) or the end of the keys compute one. Rows past seqlen_q arrive as
zeros (the TMA box of a 4-D descriptor ends at the head's end) and their L is +inf (the
preprocess), so their P is 0; keys past seqlen_k arrive as zeros and are masked. Row statistics
(L or m, D, and 1/l without DEFER_NORM) come from the preprocess's float32 buffers, padded to
whole row blocks, into the ring with Q_i and dO_i by TMA (as FlashAttention-3 loads them), and
each consumer reads its queries' values from shared memory (before, 32 scalar global loads a
thread and step, each with its own 64-bit address).

Domain: `unsupported` (sm_90, float16/bfloat16, head_dim 64 or 128, head_dim_v == head_dim,
TMA-ready q, k, v, dO); elsewhere the hopper backend runs the Triton backward.
"""
import triton
from triton._C.libtriton import ir
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language._core import builtin
from triton.experimental.gluon.language.nvidia.hopper import (
    fence_async_shared, mbarrier, tma, warpgroup_mma, warpgroup_mma_wait)

from .forward import LOG2E
from .hopper_forward import (HOPPER_DTYPES, HOPPER_HEAD_DIMS, _in_partition, _num_programs,
                             default_layout, mma_layout, vector_rows_layout)
from .launch_cache import CachedLaunch
from .launch_order import WINDOW_BYTES, launch_slot
from .plan.fa1_launch import bwd_column_parallel
from .plan.hopper_backward import BLOCK_N as _BLOCK_N, CTAS_PER_SM, bwd_rows, bwd_stages
from .tma import tma_ready

BLOCK_N = gl.constexpr(_BLOCK_N)  # keys a program's column block: 64 a consumer
BWD_CONSUMER_REGS = 240  # setmaxnreg of the worker consumer (the default one gets as many)
BWD_PRODUCER_REGS = gl.constexpr(24)  # the producer warp: TMA issue only


@gluon.jit
def _block_loop(seqlen_q, seqlen_k, group, SEQ_PARALLEL: gl.constexpr, causal: gl.constexpr,
                HEAD_DIM: gl.constexpr):
    """This program's kv head (b Hkv + h) and column blocks, range(first, n_blocks, step).
    seq_parallel: one block, grid axis 0's (causal: the launch slot's, _longest_first); FA1's
    schedule: every block of grid axis 1's head."""
    n_blocks = gl.cdiv(seqlen_k, BLOCK_N)
    if SEQ_PARALLEL:
        if causal:
            bh, j = _longest_first(n_blocks, group, seqlen_q, HEAD_DIM)
            return bh, j, n_blocks, n_blocks
        return gl.program_id(1), gl.program_id(0), n_blocks, n_blocks
    return gl.program_id(1), 0, n_blocks, 1


@gluon.jit
def _longest_first(n_blocks, group, seqlen_q, HEAD_DIM: gl.constexpr):
    """Causal seq_parallel: (kv head, column block) of this launch slot. Column block j walks
    the rows from j's diagonal down, so block 0 is the longest; with each head's blocks in
    index order the last heads' long blocks start last and end alone (launch_tail.py's model:
    a tail of 3-7% at 1k-8k). The Triton kernels' order (kernels/launch_order.py): windows of
    kv heads, every head's block t before any head's block t + 1; a window's Q, dO and dQ's
    float32 rows (8 bytes an element a query head) take about WINDOW_BYTES, so they stay in
    the L2 while its blocks re-read them."""
    n_heads = _num_programs(1)  # B Hkv
    per_row = 8 * group * HEAD_DIM  # bytes of a kv head's Q, dO and dQ rows a query
    window = gl.maximum(gl.minimum(n_heads, WINDOW_BYTES // per_row // seqlen_q), 1)
    return launch_slot(gl.program_id(0), gl.program_id(1), n_blocks, n_heads, n_blocks, 0, 1,
                       window)


@gluon.jit
def _row_blocks(start_n, seqlen_q, seqlen_k, causal: gl.constexpr, ROWS: gl.constexpr):
    """Row blocks [lo, hi) of ROWS rows that see a key of the column block from start_n
    (causal: from the first whose last row sees key start_n)."""
    lo = 0
    if causal:
        lo = gl.maximum(start_n - (seqlen_k - seqlen_q), 0) // ROWS
    return lo, gl.cdiv(seqlen_q, ROWS)


@gluon.jit
def _producer(args, SPLIT_Q: gl.constexpr, SEQ_PARALLEL: gl.constexpr,
              DEFER_NORM: gl.constexpr, causal: gl.constexpr):
    """One warp: K_j, V_j into their slot once both consumers released the last block, then
    Q_i, dO_i of each step into the ring (slot t % STAGES once both released step t - STAGES)."""
    (q_desc, k_desc, v_desc, do_desc, q_smem, k_smem, v_smem, do_smem, ds_smem, x_dq,
     row_stats, qd_ready, qd_empty, kv_ready, kv_empty, bar_x, dq_desc, DK, DV, stat_desc,
     inv_l_desc, delta_desc, seqlen_q, seqlen_k, heads_q, heads_kv, qk_scale,
     sm_scale) = args
    seqlen_q, seqlen_k = _in_partition(seqlen_q), _in_partition(seqlen_k)
    group = heads_q // heads_kv
    bh, first, n_blocks, step = _block_loop(seqlen_q, seqlen_k, group, SEQ_PARALLEL, causal,
                                            k_desc.block_type.shape[3])
    off_b, off_hkv = bh // heads_kv, bh % heads_kv
    nb = 0
    t = 0
    for j in range(first, n_blocks, step):
        _load_block(args, nb, off_b, off_hkv, j)
        lo, hi = _row_blocks(j * BLOCK_N, seqlen_q, seqlen_k, causal, q_desc.block_type.shape[2])
        for h in range(off_hkv * group, off_hkv * group + group):
            for i in range(lo, hi):
                _load_step(args, t, off_b, h, i)
                t += 1
        nb += 1


@gluon.jit
def _load_block(args, nb, off_b, off_hkv, j):
    """K_j, V_j into their slot once both consumers released the last block (the nb-th)."""
    (q_desc, k_desc, v_desc, do_desc, q_smem, k_smem, v_smem, do_smem, ds_smem, x_dq,
     row_stats, qd_ready, qd_empty, kv_ready, kv_empty, bar_x, dq_desc, DK, DV, stat_desc,
     inv_l_desc, delta_desc, seqlen_q, seqlen_k, heads_q, heads_kv, qk_scale,
     sm_scale) = args
    mbarrier.wait(kv_empty.index(0), (nb & 1) ^ 1)
    mbarrier.expect(kv_ready.index(0), k_desc.block_type.nbytes + v_desc.block_type.nbytes)
    tma.async_copy_global_to_shared(k_desc, [off_b, off_hkv, j * BLOCK_N, 0],
                                    kv_ready.index(0), k_smem.index(0))
    tma.async_copy_global_to_shared(v_desc, [off_b, off_hkv, j * BLOCK_N, 0],
                                    kv_ready.index(0), v_smem.index(0))


@gluon.jit
def _load_step(args, t, off_b, h, i):
    """Q_i, dO_i of query head h into slot t % STAGES once both consumers released step
    t - STAGES."""
    (q_desc, k_desc, v_desc, do_desc, q_smem, k_smem, v_smem, do_smem, ds_smem, x_dq,
     row_stats, qd_ready, qd_empty, kv_ready, kv_empty, bar_x, dq_desc, DK, DV, stat_desc,
     inv_l_desc, delta_desc, seqlen_q, seqlen_k, heads_q, heads_kv, qk_scale,
     sm_scale) = args
    STAGES: gl.constexpr = q_smem.type.shape[0]
    ROWS: gl.constexpr = q_desc.block_type.shape[2]
    slot = t % STAGES
    mbarrier.wait(qd_empty.index(slot), ((t // STAGES) & 1) ^ 1)
    ready = qd_ready.index(slot)
    N_STATS: gl.constexpr = row_stats.type.shape[0] // STAGES
    mbarrier.expect(ready, q_desc.block_type.nbytes + do_desc.block_type.nbytes
                    + N_STATS * stat_desc.block_type.nbytes)
    tma.async_copy_global_to_shared(q_desc, [off_b, h, i * ROWS, 0], ready,
                                    q_smem.index(slot))
    tma.async_copy_global_to_shared(do_desc, [off_b, h, i * ROWS, 0], ready,
                                    do_smem.index(slot))
    # the rows' statistics, as FlashAttention-3 loads them: L (or m), D and (FA1) 1/l
    tma.async_copy_global_to_shared(stat_desc, [off_b, h, i * ROWS], ready,
                                    row_stats.index(slot * N_STATS))
    tma.async_copy_global_to_shared(delta_desc, [off_b, h, i * ROWS], ready,
                                    row_stats.index(slot * N_STATS + 1))
    if N_STATS == 3:
        tma.async_copy_global_to_shared(inv_l_desc, [off_b, h, i * ROWS], ready,
                                        row_stats.index(slot * N_STATS + 2))


@gluon.jit
def _refill_step(args, u, n_steps, off_b, first_h, lo, n_rows, LOADS: gl.constexpr):
    """Without the producer warp (WARP_SPECIALIZE off, seq_parallel's one column block), the
    loading consumer (LOADS) issues step u of the block itself: its steps run over the group's
    query heads, n_rows row blocks (from lo) each."""
    if LOADS:
        if u < n_steps:
            _load_step(args, u, off_b, first_h + u // n_rows, lo + u % n_rows)


@gluon.jit
def _meet(bar_x, t, CONSUMER: gl.constexpr):
    """The step's rendezvous: arrive on my mbarrier of step parity t % 2 (the compiler puts a
    barrier of my warpgroup's 128 threads before the arrive, so my shared-memory stores are
    done) and wait on the other consumer's. Two barriers a consumer, by parity: my arrival of
    step t + 1 cannot complete a second phase of the barrier the other is still to wait on for
    step t (my arrival of step t + 2, on that barrier, needs the other's of step t + 1, made
    after its wait of step t)."""
    p = t % 2
    mbarrier.arrive(bar_x.index(2 * p + CONSUMER), count=1)
    mbarrier.wait(bar_x.index(2 * p + 1 - CONSUMER), (t // 2) & 1)


@gluon.jit
def _dq_step(ds_smem, k_tile, x_dq, bar_x, t, dq_desc, row, sm_scale, SPLIT_Q: gl.constexpr,
             CONSUMER: gl.constexpr):
    """The step's dQ_i (my D/2 columns) once my dS^T half is in ds_smem[t % 2], complete over
    the block's 128 keys (SPLIT_Q) or as the sum of both consumers' partial products over
    their 64 keys each, met through x_dq (split-K); then added to dQ's buffer at `row`
    ([b, h, first row]) by a TMA reduction from x_dq (_reduce_dq)."""
    HEAD_DIM: gl.constexpr = k_tile.type.shape[1]
    COLS: gl.constexpr = HEAD_DIM // 2
    ROWS: gl.constexpr = ds_smem.type.shape[2]
    KEYS: gl.constexpr = BLOCK_N // 2
    q_layout: gl.constexpr = mma_layout(COLS)
    zero = gl.zeros([ROWS, COLS], gl.float32, q_layout)
    ds_buf = ds_smem.index(t % 2)  # (128 keys, ROWS queries): dS^T of the block
    # my last step's reduction has read its x_dq buffer (the rendezvous's barrier then makes
    # the issuing thread's wait my warpgroup's, and its arrival the other consumer's: split-K's
    # partner writes that buffer next, after this step's rendezvous)
    tma.store_wait(0)
    # my dS^T stores (generic proxy) before the wgmmas' reads of them (async proxy)
    fence_async_shared()
    if SPLIT_Q:
        _meet(bar_x, t, CONSUMER)  # both halves of dS^T stored
        dq = warpgroup_mma(ds_buf.permute((1, 0)), k_tile.slice(CONSUMER * COLS, COLS, 1), zero,
                           use_acc=False)
        # my buffer through an opaque index: my threads' store addresses are then formed in
        # the step, not hoisted out of it and kept across it (they spilled with OVERLAP)
        staging = x_dq.index(_in_partition(t - t) + CONSUMER)
    else:
        gl.thread_barrier()  # every thread of my warpgroup stored its part of my half
        ds_mine = ds_buf.slice(CONSUMER * KEYS, KEYS, 0).permute((1, 0))  # dS_c: ROWS x 64
        k_mine = k_tile.slice(CONSUMER * KEYS, KEYS, 0)  # K_c: my 64 keys
        # the other consumer's columns first, so that one 64 x D/2 partial is live at a time
        dq_other = warpgroup_mma(ds_mine, k_mine.slice((1 - CONSUMER) * COLS, COLS, 1), zero,
                                 use_acc=False)
        _tile(x_dq.index((t % 2) * 2 + CONSUMER)).store(dq_other)
        dq = warpgroup_mma(ds_mine, k_mine.slice(CONSUMER * COLS, COLS, 1), zero,
                           use_acc=False, is_async=True)
        _meet(bar_x, t, CONSUMER)  # the other's partial of my columns is stored
        dq = warpgroup_mma_wait(num_outstanding=0, deps=(dq,))
        # the other's partial's buffer, read, stages my sum (nobody else's until step t + 2)
        staging = x_dq.index((t % 2) * 2 + 1 - CONSUMER)
        dq = dq + _tile(staging).load(q_layout)
        gl.thread_barrier()  # every thread of my warpgroup read it
    _reduce_dq(dq_desc, staging, dq * sm_scale, row, CONSUMER)


@gluon.jit
def _tile(buf):
    """A (1, 1, R, D/2) x_dq buffer as the R x D/2 tile of registers it stages."""
    return buf.reshape([buf.type.shape[2], buf.type.shape[3]])


@gluon.jit
def _consumer(args, SPLIT_Q: gl.constexpr, SEQ_PARALLEL: gl.constexpr,
              DEFER_NORM: gl.constexpr, causal: gl.constexpr, CONSUMER: gl.constexpr,
              WARP_SPECIALIZE: gl.constexpr = True, OVERLAP: gl.constexpr = False):
    (q_desc, k_desc, v_desc, do_desc, q_smem, k_smem, v_smem, do_smem, ds_smem, x_dq,
     row_stats, qd_ready, qd_empty, kv_ready, kv_empty, bar_x, dq_desc, DK, DV, stat_desc,
     inv_l_desc, delta_desc, seqlen_q, seqlen_k, heads_q, heads_kv, qk_scale,
     sm_scale) = args
    seqlen_q, seqlen_k = _in_partition(seqlen_q), _in_partition(seqlen_k)
    STAGES: gl.constexpr = q_smem.type.shape[0]
    HEAD_DIM: gl.constexpr = k_desc.block_type.shape[3]
    COLS: gl.constexpr = HEAD_DIM // 2
    KEYS: gl.constexpr = BLOCK_N // 2  # mine: keys 64c .. 64c + 63 of the block
    ROWS: gl.constexpr = q_desc.block_type.shape[2]  # query rows a step (bwd_rows)
    dtype: gl.constexpr = k_desc.dtype
    s_layout: gl.constexpr = mma_layout(ROWS)  # S^T, P^T, dP^T, dS^T: 64 keys x ROWS queries
    acc_layout: gl.constexpr = mma_layout(HEAD_DIM)  # dK_c, dV_c: 64 keys x D
    op_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=acc_layout, k_width=2)
    col_layout: gl.constexpr = gl.SliceLayout(0, s_layout)  # a query's statistic
    key_layout: gl.constexpr = gl.SliceLayout(1, s_layout)
    group = heads_q // heads_kv
    bh, first, n_blocks, step = _block_loop(seqlen_q, seqlen_k, group, SEQ_PARALLEL, causal,
                                            HEAD_DIM)
    off_b, off_hkv = bh // heads_kv, bh % heads_kv
    diag = seqlen_k - seqlen_q  # query i sees key j iff j <= i + diag
    # no producer warp (WARP_SPECIALIZE off, D86; seq_parallel only: one block, t from 0):
    # consumer 1 issues K_j, V_j and the first STAGES steps, then each step into the slot it
    # has just released, once consumer 0 has released it too
    LOADS: gl.constexpr = not WARP_SPECIALIZE and CONSUMER == 1
    nb = 0
    t = 0
    for j in range(first, n_blocks, step):
        start_n = j * BLOCK_N
        lo, hi = _row_blocks(start_n, seqlen_q, seqlen_k, causal, ROWS)
        if LOADS:
            _load_block(args, nb, off_b, off_hkv, j)
            for u in gl.static_range(STAGES):
                _refill_step(args, u, group * (hi - lo), off_b, off_hkv * group, lo, hi - lo,
                             LOADS)
        mbarrier.wait(kv_ready.index(0), nb & 1)
        keys = start_n + CONSUMER * KEYS + gl.arange(0, KEYS, layout=key_layout)
        dk = gl.zeros([KEYS, HEAD_DIM], gl.float32, acc_layout)
        dv = gl.zeros([KEYS, HEAD_DIM], gl.float32, acc_layout)
        # row blocks from full_lo on see every key of the block (none if it passes seqlen_k)
        full_lo = hi
        if start_n + BLOCK_N <= seqlen_k:
            full_lo = 0
            if causal:
                full_lo = gl.minimum(gl.cdiv(gl.maximum(start_n + BLOCK_N - 1 - diag, 0),
                                             ROWS), hi)
        for h in range(off_hkv * group, off_hkv * group + group):
            for i in range(lo, hi):
                slot = t % STAGES
                mbarrier.wait(qd_ready.index(slot), (t // STAGES) & 1)
                # K_j, V_j through an opaque index (0): the wgmma descriptors of K_c and V_c
                # are then formed in the step, not hoisted out of the loop and kept (spilled)
                # in registers across it
                kv = _in_partition(t - t)
                k_tile = k_smem.index(kv).reshape([BLOCK_N, HEAD_DIM])
                k_c = k_tile.slice(CONSUMER * KEYS, KEYS, 0)
                v_c = v_smem.index(kv).reshape([BLOCK_N, HEAD_DIM]).slice(CONSUMER * KEYS, KEYS, 0)
                q = q_smem.index(slot).reshape([ROWS, HEAD_DIM])
                do = do_smem.index(slot).reshape([ROWS, HEAD_DIM])
                zero = gl.zeros([KEYS, ROWS], gl.float32, s_layout)
                st = warpgroup_mma(k_c, q.permute((1, 0)), zero, use_acc=False, is_async=True)
                # the step's query indices through an opaque mov: LLVM would otherwise hoist
                # what depends on them only through the loop-invariant arange (each thread's
                # 32 differences key - query of the mask) out of the loop, live (and spilled)
                # across every step
                rows = _in_partition(i * ROWS + gl.arange(0, ROWS, layout=col_layout))
                stat = _row_stat(row_stats, slot, 0, STAGES, col_layout)
                if OVERLAP:  # FA3's backward: dP^T issued with S^T, P^T's exponentials under it
                    dpt = _issue_dpt(v_c, do, row_stats, slot, STAGES, s_layout)
                    st = warpgroup_mma_wait(num_outstanding=1, deps=(st,))
                else:
                    st = warpgroup_mma_wait(num_outstanding=0, deps=(st,))
                pt = gl.exp2(st * qk_scale - stat[None, :])
                if not DEFER_NORM:  # FA1: P = exp2(S c - m) / l
                    pt = pt * _row_stat(row_stats, slot, 2, STAGES, col_layout)[None, :]
                if i < full_lo:  # the tile crosses the diagonal or the end of the keys
                    pt = gl.where(_visible(keys, rows, seqlen_k, diag, causal), pt, 0.0)
                # dV's product done before dP^T's is issued: P^T's 16-bit operand is not live
                # beside dP^T (at d=128 dK_c and dV_c alone hold 128 registers a thread)
                dv = warpgroup_mma(gl.convert_layout(pt.to(dtype), op_layout), do, dv,
                                   is_async=True)
                if OVERLAP:  # dP^T's group retires before dV's
                    dv, dpt = warpgroup_mma_wait(num_outstanding=0, deps=(dv, dpt))
                else:
                    dv = warpgroup_mma_wait(num_outstanding=0, deps=(dv,))
                    dpt = _issue_dpt(v_c, do, row_stats, slot, STAGES, s_layout)
                    dpt = warpgroup_mma_wait(num_outstanding=0, deps=(dpt,))
                dst = pt * dpt
                if i < full_lo:
                    # a hidden key's dP may be non-finite: its dS is 0 by `where`, not 0 * dP.
                    # P^T = 0 marks it (the visibility mask itself, 32 predicates a thread, would
                    # stay live across dP's product and spill); a visible entry whose P
                    # underflowed to 0 gets dS = 0 too, as it would but for a non-finite dP
                    dst = gl.where(pt == 0.0, 0.0, dst)
                dst = dst.to(dtype)
                ds_buf = t % 2
                if not SEQ_PARALLEL or OVERLAP:
                    # the buffer through an opaque mov, so that my threads' store addresses are
                    # formed in the step, not hoisted out of it and kept (spilled) across it:
                    # FA1's schedule walks every column block, OVERLAP holds dP^T longer
                    # (d=128: 16-28 bytes spilled)
                    ds_buf = _in_partition(ds_buf)
                ds_smem.index(ds_buf).slice(CONSUMER * KEYS, KEYS, 0).store(dst)
                # dK's product runs under the rendezvous; dQ's first product waits for it
                dk = warpgroup_mma(gl.convert_layout(dst, op_layout), q, dk, is_async=True)
                _dq_step(ds_smem, k_tile, x_dq, bar_x, t, dq_desc, (off_b, h, i * ROWS),
                         sm_scale, SPLIT_Q, CONSUMER)
                dk = warpgroup_mma_wait(num_outstanding=0, deps=(dk,))
                mbarrier.arrive(qd_empty.index(slot), count=1)  # Q_i, dO_i read: load the next
                _refill_step(args, t + STAGES, group * (hi - lo), off_b, off_hkv * group, lo,
                             hi - lo, LOADS)
                t += 1
        mbarrier.arrive(kv_empty.index(0), count=1)  # K_j, V_j read by every product
        # the staging buffer of my last step's dQ (split-K: by its parity; before any step,
        # the one the other consumer writes only after our first meeting)
        staging = x_dq.index(CONSUMER if SPLIT_Q else ((t + 1) % 2) * 2 + 1 - CONSUMER)
        _store_block(dk * sm_scale, dv, DK, DV, staging, off_b, off_hkv, heads_kv, start_n,
                     seqlen_k, CONSUMER)
        nb += 1
    tma.store_wait(0)  # my last reduction has read its buffer before the block's memory goes


@gluon.jit
def _issue_dpt(v_c, do, row_stats, slot, STAGES: gl.constexpr, s_layout: gl.constexpr):
    """dP^T - D_i = V_c dO_i^T - D_i in one product, issued (not waited for): the accumulator
    starts at -D_i (D_i's registers are then not live beside P^T and dP^T, the step's peak)."""
    ROWS: gl.constexpr = do.type.shape[0]
    delta = _row_stat(row_stats, slot, 1, STAGES, gl.SliceLayout(0, s_layout))
    minus_delta = gl.zeros([BLOCK_N // 2, ROWS], gl.float32, s_layout) - delta[None, :]
    return warpgroup_mma(v_c, do.permute((1, 0)), minus_delta, is_async=True)


@gluon.jit
def _row_stat(row_stats, slot, k: gl.constexpr, STAGES: gl.constexpr, layout: gl.constexpr):
    """Statistic k (0: L or m, 1: D, 2: 1/l) of the step's rows, from ring slot `slot`."""
    N_STATS: gl.constexpr = row_stats.type.shape[0] // STAGES
    ROWS: gl.constexpr = row_stats.type.shape[3]
    return row_stats.index(slot * N_STATS + k).reshape([ROWS]).load(layout)


@builtin
def _tma_reduce_add(desc, coord, src, _semantic=None):
    """Adds shared-memory tile src into desc's box at coord (`cp.reduce.async.bulk.tensor`,
    float32 add in L2): the TMA store's reducing twin, which Gluon's hopper.tma does not name.
    Completion as a store's (tma.store_wait)."""
    coord = _semantic._convert_to_ir_values(coord, require_i64=False)
    _semantic.builder.create_async_tma_reduce(ir.DESCRIPTOR_REDUCE_KIND.ADD, desc.handle, coord,
                                              src.handle)


@gluon.jit
def _reduce_dq(dq_desc, buf, dq, row, CONSUMER: gl.constexpr):
    """dQ_i's D/2 columns of mine added to the float32 buffer (B, Hq, Sq, D) by one TMA
    reduction from buf: the tensor's bounds drop rows past Sq (D108)."""
    COLS: gl.constexpr = dq.type.shape[1]
    _tile(buf).store(dq)
    fence_async_shared()  # my stores (generic proxy) before the TMA's reads (async proxy)
    gl.thread_barrier()  # every thread of my warpgroup stored its part
    _tma_reduce_add(dq_desc, [row[0], row[1], row[2], CONSUMER * COLS], buf)


@gluon.jit
def _visible(keys, rows, seqlen_k, diag, causal: gl.constexpr):
    """(keys x queries): key j is below seqlen_k and, causal, j <= i + diag for query i."""
    visible = (keys < seqlen_k)[:, None] & (rows >= 0)[None, :]
    if causal:
        visible = visible & (keys[:, None] <= rows[None, :] + diag)
    return visible


@gluon.jit
def _store_block(dk, dv, DK, DV, staging, off_b, off_hkv, heads_kv, start_n, seqlen_k,
                 CONSUMER: gl.constexpr):
    """My 64 keys' dK, dV (contiguous (B, Hkv, Sk, D)), in their dtype, 16 bytes a store: the
    wgmma layout holds a thread's values 2 columns wide (4-byte stores, stalled on the LSU queue
    at 2k: D112), so each passes through `staging` (the x_dq buffer my last step's dQ reduction
    read from: free until I meet the other consumer again) to rows of 8 values a thread."""
    KEYS: gl.constexpr = dk.type.shape[0]
    HEAD_DIM: gl.constexpr = dk.type.shape[1]
    dtype: gl.constexpr = DK.dtype.element_ty
    layout: gl.constexpr = vector_rows_layout(HEAD_DIM)
    buf = staging._reinterpret(dtype, [KEYS, HEAD_DIM],
                               gl.NVMMASharedLayout.get_default_for([KEYS, HEAD_DIM], dtype))
    keys = start_n + CONSUMER * KEYS + gl.arange(0, KEYS, layout=gl.SliceLayout(1, layout))
    cols = gl.arange(0, HEAD_DIM, layout=gl.SliceLayout(0, layout))
    offs = keys[:, None] * HEAD_DIM + cols[None, :]
    # the kv head's index through an opaque mov: its 64-bit offsets are formed here, not
    # hoisted out of the block's loop and kept (spilled) across it
    base = _in_partition(off_b * heads_kv + off_hkv).to(gl.int64) * seqlen_k * HEAD_DIM
    mask = (keys < seqlen_k)[:, None]
    # hopper_forward's _through, written out: called here, its PTX has one more bar.sync
    tma.store_wait(0)  # my last reduction has read the buffer (the issuing thread's wait ...
    gl.thread_barrier()  # ... made my warpgroup's)
    buf.store(dk.to(dtype))
    gl.thread_barrier()  # every thread's part of dK stored
    gl.store(DK + base + offs, buf.load(layout), mask=mask)
    gl.thread_barrier()  # every thread's part of dK read
    buf.store(dv.to(dtype))
    gl.thread_barrier()
    gl.store(DV + base + offs, buf.load(layout), mask=mask)
    gl.thread_barrier()  # read before my next step's stores into the buffer


@gluon.jit
def _consumer_partition(args, SPLIT_Q: gl.constexpr, SEQ_PARALLEL: gl.constexpr,
                        DEFER_NORM: gl.constexpr, IS_CAUSAL: gl.constexpr,
                        CONSUMER: gl.constexpr, WARP_SPECIALIZE: gl.constexpr,
                        OVERLAP: gl.constexpr):
    _consumer(args, SPLIT_Q, SEQ_PARALLEL, DEFER_NORM, IS_CAUSAL, CONSUMER, WARP_SPECIALIZE,
              OVERLAP)


@gluon.jit
def _load_partition(args, SPLIT_Q: gl.constexpr, SEQ_PARALLEL: gl.constexpr,
                    DEFER_NORM: gl.constexpr, IS_CAUSAL: gl.constexpr):
    _producer(args, SPLIT_Q, SEQ_PARALLEL, DEFER_NORM, IS_CAUSAL)


@gluon.jit
def _hopper_attn_bwd(q_desc, k_desc, v_desc, do_desc, dq_desc, DK, DV, stat_desc, inv_l_desc,
                     delta_desc, seqlen_q, seqlen_k, heads_q, heads_kv, qk_scale,
                     sm_scale,
                     SPLIT_Q: gl.constexpr, SEQ_PARALLEL: gl.constexpr,
                     DEFER_NORM: gl.constexpr, IS_CAUSAL: gl.constexpr, STAGES: gl.constexpr,
                     CONSUMER_REGS: gl.constexpr, WARP_SPECIALIZE: gl.constexpr = True,
                     OVERLAP: gl.constexpr = False):
    """Grid (column blocks, B * Hkv) with seq_parallel, (1, B * Hkv) without. dq_desc: over
    the float32 (B, Hq, Sq, D) dQ, zeroed, with (1, 1, R, D/2) boxes (R: q_desc's rows); DK,
    DV: (B, Hkv, Sk, D) contiguous; stat_desc, inv_l_desc, delta_desc: over the preprocess's
    (B, Hq, padded_q) float32 rows (L or m, 1/l, D), with (1, 1, R) boxes. WARP_SPECIALIZE
    off: no producer warp (FA2 all on only, D86); OVERLAP: dP^T issued with S^T (FA2 all on
    only, D87)."""
    gl.static_assert((WARP_SPECIALIZE and not OVERLAP)
                     or (DEFER_NORM and SPLIT_Q and SEQ_PARALLEL),
                     "warp_specialize off and overlap are built on FA2 (DEFER_NORM, SPLIT_Q, "
                     "SEQ_PARALLEL)")
    HEAD_DIM: gl.constexpr = k_desc.block_type.shape[3]
    dtype: gl.constexpr = k_desc.dtype
    q_smem = gl.allocate_shared_memory(dtype, [STAGES] + q_desc.block_type.shape, q_desc.layout)
    do_smem = gl.allocate_shared_memory(dtype, [STAGES] + do_desc.block_type.shape,
                                        do_desc.layout)
    k_smem = gl.allocate_shared_memory(dtype, [1] + k_desc.block_type.shape, k_desc.layout)
    v_smem = gl.allocate_shared_memory(dtype, [1] + v_desc.block_type.shape, v_desc.layout)
    ROWS: gl.constexpr = q_desc.block_type.shape[2]
    # dS^T of the block (128 keys x ROWS queries, consumer c's keys in rows 64c ..), two
    # buffers by step parity: the next step's store never meets the other consumer's read of
    # this one
    ds_smem = gl.allocate_shared_memory(dtype, [2, BLOCK_N, ROWS],
                                        gl.NVMMASharedLayout.get_default_for([BLOCK_N, ROWS],
                                                                             dtype))
    # dQ_i's R x D/2 float32 tiles, in dQ's TMA layout: split-Q, consumer c's columns on their
    # way to the TMA reduction; split-K, its exchange, (parity, consumer) -> its partial of the
    # other's columns, and the buffer a consumer has read stages its sum (_dq_step)
    X_BUFS: gl.constexpr = 2 if SPLIT_Q else 4
    x_dq = gl.allocate_shared_memory(gl.float32, [X_BUFS] + dq_desc.block_type.shape,
                                     dq_desc.layout)
    # each ring slot's row statistics (L or m, D, and under FA1's normalisation 1/l), R rows
    N_STATS: gl.constexpr = 2 if DEFER_NORM else 3
    row_stats = gl.allocate_shared_memory(gl.float32, [STAGES * N_STATS]
                                          + stat_desc.block_type.shape, stat_desc.layout)
    qd_ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    qd_empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    kv_ready = gl.allocate_shared_memory(gl.int64, [1, 1], mbarrier.MBarrierLayout())
    kv_empty = gl.allocate_shared_memory(gl.int64, [1, 1], mbarrier.MBarrierLayout())
    bar_x = gl.allocate_shared_memory(gl.int64, [4, 1], mbarrier.MBarrierLayout())  # _meet
    for s in gl.static_range(STAGES):
        mbarrier.init(qd_ready.index(s), count=1)
        mbarrier.init(qd_empty.index(s), count=2)  # released by both consumers
    mbarrier.init(kv_ready.index(0), count=1)
    mbarrier.init(kv_empty.index(0), count=2)
    for c in gl.static_range(4):
        mbarrier.init(bar_x.index(c), count=1)

    args = (q_desc, k_desc, v_desc, do_desc, q_smem, k_smem, v_smem, do_smem, ds_smem, x_dq,
            row_stats, qd_ready, qd_empty, kv_ready, kv_empty, bar_x, dq_desc, DK, DV, stat_desc,
            inv_l_desc, delta_desc, seqlen_q, seqlen_k, heads_q, heads_kv, qk_scale,
            sm_scale)
    if WARP_SPECIALIZE:  # a producer warp loads, the consumers only compute
        gl.warp_specialize([(_consumer_partition,
                             (args, SPLIT_Q, SEQ_PARALLEL, DEFER_NORM, IS_CAUSAL, 0, True,
                              OVERLAP)),
                            (_consumer_partition,
                             (args, SPLIT_Q, SEQ_PARALLEL, DEFER_NORM, IS_CAUSAL, 1, True,
                              OVERLAP)),
                            (_load_partition,
                             (args, SPLIT_Q, SEQ_PARALLEL, DEFER_NORM, IS_CAUSAL))],
                           [4, 1], [CONSUMER_REGS, BWD_PRODUCER_REGS])
    else:  # consumer 1 loads as well (_refill_step)
        gl.warp_specialize([(_consumer_partition,
                             (args, SPLIT_Q, SEQ_PARALLEL, DEFER_NORM, IS_CAUSAL, 0, False,
                              OVERLAP)),
                            (_consumer_partition,
                             (args, SPLIT_Q, SEQ_PARALLEL, DEFER_NORM, IS_CAUSAL, 1, False,
                              OVERLAP))],
                           [4], [CONSUMER_REGS])


_HOPPER_ATTN_BWD = CachedLaunch(_hopper_attn_bwd)  # host time: kernels/launch_cache.py


def block_shapes(head_dim: int, rows: int):
    """TMA boxes over (B, H, S, D): Q and dO rows of a step (`bwd_rows`), K and V of a column
    block, and a consumer's D/2 columns of dQ's rows of a step."""
    return ([1, 1, rows, head_dim], [1, 1, BLOCK_N.value, head_dim],
            [1, 1, BLOCK_N.value, head_dim], [1, 1, rows, head_dim], [1, 1, rows, head_dim // 2])


def block_layouts(head_dim: int, rows: int, dtype):
    """Shared layouts of the boxes. K's swizzle spans D/2 columns (head_dim bytes of 16-bit
    values), so that a consumer's column half of K is whole swizzle atoms: the dQ products read
    K_j[:, cols c] as their B operand. dQ's float32 box: 128-byte swizzle (the TMA splits a
    wider box into 32-column pieces)."""
    q, k, v, do = (default_layout(box, dtype) for box in block_shapes(head_dim, rows)[:4])
    k = gl.NVMMASharedLayout(swizzle_byte_width=head_dim, element_bitwidth=16, rank=4)
    dq = gl.NVMMASharedLayout(swizzle_byte_width=128, element_bitwidth=32, rank=4)
    return q, k, v, do, dq


STAT_LAYOUT = gl.NVMMASharedLayout(swizzle_byte_width=0, element_bitwidth=32, rank=3)


def _stat_descriptors(rows, *stats):
    """Descriptors over the preprocess's (B, Hq, padded_q) float32 statistics, a step's rows
    of one (batch, head) a box."""
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

    return [TensorDescriptor(t, list(t.shape), list(t.stride()), [1, 1, rows], STAT_LAYOUT)
            for t in stats]


def unsupported(q, k, v) -> str | None:
    """Why the Gluon backward cannot take this call (the hopper backend then runs the Triton
    backward); None if it can. dO is made TMA-ready by hopper_attn_bwd."""
    name = str(q.dtype).removeprefix("torch.")
    if name not in HOPPER_DTYPES:
        return f"dtype {name} (takes {' or '.join(HOPPER_DTYPES)})"
    if q.shape[-1] not in HOPPER_HEAD_DIMS or v.shape[-1] != q.shape[-1]:
        return f"head_dim {q.shape[-1]}, head_dim_v {v.shape[-1]} (takes 64 or 128, equal)"
    import torch

    if not q.is_cuda or torch.cuda.get_device_capability(q.device) != (9, 0):
        return "not an sm_90 device"
    if q.shape[0] * q.shape[1] * (q.shape[2] + BLOCK_N.value) >= 2**31:
        return "the row statistics' int32 offsets (batch * heads_q * seqlen_q too large)"
    for n, t in (("q", q), ("k", k), ("v", v)):
        if not tma_ready(t):
            return f"{n} is not TMA-ready (strides {tuple(t.stride())})"
    return None


def _descriptors(q, k, v, do, dq, rows):
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

    head_dim = q.shape[-1]
    return [TensorDescriptor(t, list(t.shape), list(t.stride()), box, layout)
            for t, box, layout in zip((q, k, v, do, dq), block_shapes(head_dim, rows),
                                      block_layouts(head_dim, rows, q.dtype))]


def hopper_attn_bwd(q, k, v, o, stats, do, dlse, causal, softmax_scale, variant, config,
                    o_res=None):
    """`kernels.backward.attn_bwd`'s contract on the Hopper chassis (check `unsupported`
    first). The preprocess (D, L or m and 1/l) and dQ's float32 buffer are attn_bwd's."""
    import torch

    from .backward import bwd_preprocess

    batch, heads_q, seqlen_q, head_dim = q.shape
    heads_kv, seqlen_k = k.shape[1], k.shape[2]
    do = do if tma_ready(do) else do.contiguous()
    rows = bwd_rows(head_dim, variant)
    dq = torch.empty((batch, heads_q, seqlen_q, head_dim), device=q.device,
                     dtype=torch.float32)  # the TMA reductions' sum, zeroed by the preprocess
    delta, stat2, inv_l, _ = bwd_preprocess(q, k, v, o, stats, do, dlse, variant,
                                            config, o_res, row_multiple=rows, dq_acc=dq)
    dk = torch.empty(k.shape, device=k.device, dtype=k.dtype)  # contiguous
    dv = torch.empty(v.shape, device=v.device, dtype=v.dtype)
    n_blocks = triton.cdiv(seqlen_k, BLOCK_N.value)
    # FA1's launcher (seq_parallel off) may pick one program per column block too (D90)
    columns = bwd_column_parallel(variant, config.fa1_bwd_splits, batch * heads_kv, seqlen_k,
                                  BLOCK_N.value, causal, lambda: _sms_and_ctas(q.device))
    grid = (n_blocks if columns else 1, batch * heads_kv)
    stat_d, delta_d = _stat_descriptors(rows, stat2, delta)
    # under DEFER_NORM the kernel never reads 1/l: its argument repeats L's descriptor
    inv_l_d = stat_d if variant.defer_norm else _stat_descriptors(rows, inv_l)[0]
    _HOPPER_ATTN_BWD[grid](
        *_descriptors(q, k, v, do, dq, rows), dk, dv, stat_d, inv_l_d, delta_d,
        seqlen_q, seqlen_k, heads_q, heads_kv, softmax_scale * LOG2E, softmax_scale,
        SPLIT_Q=variant.split_q, SEQ_PARALLEL=columns,
        DEFER_NORM=variant.defer_norm, IS_CAUSAL=bool(causal),
        STAGES=bwd_stages(head_dim, variant.split_q, rows), CONSUMER_REGS=BWD_CONSUMER_REGS,
        WARP_SPECIALIZE=variant.warp_specialize, OVERLAP=variant.overlap, num_warps=4)
    return dq.to(q.dtype), dk, dv


def _sms_and_ctas(device) -> tuple[int, int]:
    """FA1's backward heuristic's occupancy question, for this kernel on this device."""
    import torch

    return torch.cuda.get_device_properties(device).multi_processor_count, CTAS_PER_SM


def sm90_signature(variant, dtype="bfloat16", head_dim=128, causal=False,
                   consumer_registers=BWD_CONSUMER_REGS):
    """(signature, constexprs) of `_hopper_attn_bwd` as hopper_attn_bwd launches it
    (consumer_registers: the worker consumer's setmaxnreg, for a test's starved build)."""
    short = {"float16": "fp16", "bfloat16": "bf16"}[dtype]
    rows = bwd_rows(head_dim, variant)
    signature = {}
    for name, box, layout in zip(("q_desc", "k_desc", "v_desc", "do_desc", "dq_desc"),
                                 block_shapes(head_dim, rows),
                                 block_layouts(head_dim, rows, dtype)):
        element = "fp32" if name == "dq_desc" else short
        signature[name] = f"tensordesc<{element}[{','.join(map(str, box))}],{layout!r}>"
    stat = f"tensordesc<fp32[1,1,{rows}],{STAT_LAYOUT!r}>"
    signature.update(DK=f"*{short}", DV=f"*{short}", stat_desc=stat, inv_l_desc=stat,
                     delta_desc=stat, seqlen_q="i32", seqlen_k="i32",
                     heads_q="i32", heads_kv="i32", qk_scale="fp32",
                     sm_scale="fp32")
    constexprs = {"SPLIT_Q": variant.split_q, "SEQ_PARALLEL": variant.seq_parallel,
                  "DEFER_NORM": variant.defer_norm, "IS_CAUSAL": causal,
                  "STAGES": bwd_stages(head_dim, variant.split_q, rows),
                  "CONSUMER_REGS": consumer_registers,
                  "WARP_SPECIALIZE": variant.warp_specialize, "OVERLAP": variant.overlap}
    signature.update({name: "constexpr" for name in constexprs})
    return signature, constexprs


def compile_for_sm90(variant, dtype="bfloat16", head_dim=128, causal=False,
                     consumer_registers=BWD_CONSUMER_REGS):
    """triton.compile of the backward for sm_90 without a GPU; returns the CompiledKernel."""
    from triton.backends.compiler import GPUTarget
    from triton.experimental.gluon._runtime import GluonASTSource

    signature, constexprs = sm90_signature(variant, dtype, head_dim, causal, consumer_registers)
    # dK and dV 16-byte aligned, as the launcher's torch tensors are (Triton specialises on it)
    aligned = {(list(signature).index(name),): [["tt.divisibility", 16]] for name in ("DK", "DV")}
    source = GluonASTSource(_hopper_attn_bwd, signature, constexprs, aligned)
    return triton.compile(source, target=GPUTarget("cuda", 90, 32), options=dict(num_warps=4))
