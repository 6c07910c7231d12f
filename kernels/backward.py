"""FlashAttention backward pass (Algorithm 2 of the FA2 paper) with the forward's switches.

Natural-log notation, S = softmax_scale * Q K^T; the kernels work in log2 units (exp2):

    D_i   = rowsum(dO_i * O_i) - dlse_i                  # preprocess, once per row
    P_ij  = exp(S_ij - L_i)                              # DEFER_NORM: from the stored lse L
          = exp(S_ij - m_i) / l_i                        # not DEFER_NORM: from FA1's m and l
    dV_j += P_ij^T dO_i
    dP_ij = dO_i V_j^T
    dS_ij = P_ij * (dP_ij - D_i)
    dK_j += softmax_scale * dS_ij^T Q_i
    dQ_i += softmax_scale * dS_ij K_j

The gradient through the returned lse is folded into D: d lse_i / d S_ij = P_ij, so a loss that
uses lse adds dlse_i * P_ij to dS_ij, which is the same as subtracting dlse_i from D_i.

One program owns a key/value column block K_j, V_j of one kv head and keeps dK_j, dV_j in
registers while it walks the query row blocks of every query head in that kv head's GQA group:
the group reduction of dK and dV happens in registers, and K/V are never repeated per head.
Where dQ is computed (DQ_PASS, a tile choice tuned like block sizes, not one of FA2's changes):
  off: in the same loop as dK, dV (the paper's Algorithm 2): every step adds its dS_ij K_j to
       dQ_i in a float32 buffer: atomic adds when SEQ_PARALLEL (many programs share dQ_i), a
       read-modify-write otherwise (one program owns all of a head's rows). The adds are
       relaxed (fire-and-forget reductions, as FA2's atomicAdd): the buffer is read only after
       the kernel ends, so no add needs ordering (Triton's default, acq_rel, puts a GPU-wide
       fence and an L1 invalidation around each one).
  on:  in a pass of its own: one program per query row block keeps dQ_i in registers while it
       walks the key blocks, recomputing S_ij and dP_ij (two more products per tile: 7 instead
       of 5) in exchange for no atomics, no float32 buffer, and fewer tiles live at once. The
       dQ pass swaps the tile shape: BLOCK_N query rows against BLOCK_M keys, so its
       accumulator is the size of dK's.
SEQ_PARALLEL: one program per column block (and, with DQ_PASS, one per query row block of each
query head) in grid (blocks, batch * kv heads). Not SEQ_PARALLEL: grid (batch * kv heads,);
each program walks all column blocks (then, with DQ_PASS, all row blocks of its heads) itself.
A variant with seq_parallel off runs that grid where FA1's launcher did and the column grid
(SEQ_PARALLEL) where FA1's launcher switched to it (kernels/plan/fa1_launch.py, D90).
SPLIT_Q off (split-K, FA1's backward partition): dQ_i += dS_ij K_j sums over the keys of a
tile, and FA1 cut those keys over its warps (csrc/flash_attn/src/fmha_dgrad_kernel_1xN_loop.h
in flash-attention before FlashAttention-2: the dQ product's tile is Cta_tile_o =
Cta_tile_extd<STEP, D, S, WARPS_M, 1, WARPS_N>, its keys split over the 8 WARPS_N warps, each
warp's partial dQ swizzled through shared memory and summed there at every 16-row step). Here
the keys of each dQ product are cut into KEY_SLICES slices: a 3-D product gives one partial
dQ a slice, (KEY_SLICES, rows, D), summed over the slices at every step (a reduction across
warps when Triton lays the slices on warps, as it does the forward's). dK_j and dV_j are
unchanged: FA1's warps owned their keys' rows of dK and dV (Cta_tile_dkv takes WARPS_N along
the keys and none along the query rows it sums over), as FA2's do. SPLIT_Q on: every dQ
product sums over all its keys inside one product (FA2, section 3.3).

Causal: query blocks that see none of a column block are never visited; only blocks that cross
the diagonal or the end of the keys compute a mask. Rows that see no key have L = -inf (or
l = 0); they are given P = 0, so they get dQ = 0 and add nothing to dK and dV.
"""
import triton
import triton.language as tl

from .forward import LOG2E, _head_cols, _visible_key_range
from .launch_cache import CachedLaunch
from .plan.fa1_launch import bwd_column_parallel
from .plan.occupancy import sms_and_ctas_per_sm
from .plan.tiles import block_d


@triton.jit
def _load_rows(X, off_b, off_h, rows, offs_d, seqlen, stride_b, stride_h, stride_s, stride_d,
               HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr):
    """Rows `rows` of X[off_b, off_h] (a (B, H, S, D) tensor), zero past seqlen and in the
    padded columns: (rows, BLOCK_D)."""
    return tl.load(X + off_b.to(tl.int64) * stride_b + off_h.to(tl.int64) * stride_h
                   + rows[:, None] * stride_s + offs_d[None, :] * stride_d,
                   mask=_head_cols((rows < seqlen)[:, None], HEAD_DIM, BLOCK_D, 1), other=0.0)


@triton.jit
def _attn_bwd_preprocess(O, O_RES, DO, DLSE, STAT, L, DELTA, STAT2, INV_L, DQ_ACC,
                         stride_ob, stride_oh, stride_om, stride_od,
                         stride_dob, stride_doh, stride_dom, stride_dod,
                         heads_q, seqlen_q, padded_q,
                         HAS_DLSE: tl.constexpr, HAS_O_RES: tl.constexpr,
                         DEFER_NORM: tl.constexpr, ZERO_DQ: tl.constexpr, BLOCK_M: tl.constexpr,
                         HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr,
                         HEAD_DIM_V: tl.constexpr, BLOCK_DV: tl.constexpr):
    """What every backward step reads of a query row (O and dO have V's head dimension),
    float32 (B, H, padded_q) contiguous, the rows padded to whole blocks of the backward so
    that its loops load them without masks:
      DELTA = rowsum(dO * O) - dlse, 0 past seqlen_q. HAS_O_RES: O is the stored output plus
              its rounding residual O_RES (same strides), about float32's precision;
      STAT2 = the row's statistic in log2 units, P = exp2(S * c - STAT2) (* INV_L when not
              DEFER_NORM): lse / ln 2 (STAT is lse) or m / ln 2 (STAT is m, L is l); +inf
              for rows that see no key and rows past seqlen_q, so P = 0 there;
      INV_L = 1 / l (not DEFER_NORM; 1 where l = 0).
    ZERO_DQ: also zero these rows of DQ_ACC, dQ's float32 accumulator ((B, H, Sq, HEAD_DIM)
    contiguous), which the backward adds into: one kernel fewer than a separate fill."""
    off_bh = tl.program_id(1)
    off_b = off_bh // heads_q
    off_h = off_bh % heads_q
    offs_m = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, BLOCK_DV)
    row_ok = offs_m < seqlen_q
    if ZERO_DQ:
        offs_dq = tl.arange(0, BLOCK_D)
        tl.store(DQ_ACC + (off_bh.to(tl.int64) * seqlen_q + offs_m[:, None]) * HEAD_DIM
                 + offs_dq[None, :], tl.zeros([BLOCK_M, BLOCK_D], tl.float32),
                 mask=_head_cols(row_ok[:, None], HEAD_DIM, BLOCK_D, 1))
    o = _load_rows(O, off_b, off_h, offs_m, offs_d, seqlen_q,
                   stride_ob, stride_oh, stride_om, stride_od, HEAD_DIM_V, BLOCK_DV).to(tl.float32)
    if HAS_O_RES:
        o += _load_rows(O_RES, off_b, off_h, offs_m, offs_d, seqlen_q,
                        stride_ob, stride_oh, stride_om, stride_od, HEAD_DIM_V,
                        BLOCK_DV).to(tl.float32)
    do = _load_rows(DO, off_b, off_h, offs_m, offs_d, seqlen_q,
                    stride_dob, stride_doh, stride_dom, stride_dod, HEAD_DIM_V,
                    BLOCK_DV).to(tl.float32)
    delta = tl.sum(o * do, 1)
    rows = off_bh * seqlen_q + offs_m  # DLSE, STAT, L: (B, H, Sq) contiguous
    out = off_bh * padded_q + offs_m
    if HAS_DLSE:
        delta -= tl.load(DLSE + rows, mask=row_ok, other=0.0)
    tl.store(DELTA + out, delta)
    stat = tl.load(STAT + rows, mask=row_ok, other=float("-inf")) * 1.4426950408889634  # 1/ln 2
    if DEFER_NORM:  # lse = -inf: the row sees no key
        tl.store(STAT2 + out, tl.where(stat == float("-inf"), float("inf"), stat))
    else:  # l = 0: the row sees no key
        l = tl.load(L + rows, mask=row_ok, other=0.0)
        tl.store(STAT2 + out, tl.where(l == 0.0, float("inf"), stat))
        tl.store(INV_L + out, 1.0 / tl.where(l == 0.0, 1.0, l))


@triton.jit
def _query_block_range(start_n, seqlen_q, seqlen_k,
                       BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, IS_CAUSAL: tl.constexpr):
    """For keys start_n .. start_n + BLOCK_N: query blocks [lo, full_lo) need a mask, blocks
    [full_lo, hi) see every key of the column block; blocks before lo see none of it."""
    hi = tl.cdiv(seqlen_q, BLOCK_M) * BLOCK_M
    if IS_CAUSAL:
        diag = seqlen_k - seqlen_q  # query i sees key j iff j <= i + diag
        lo = (tl.maximum(start_n - diag, 0) // BLOCK_M) * BLOCK_M
        first_full_row = tl.maximum(start_n + BLOCK_N - 1 - diag, 0)
        full_lo = tl.minimum(tl.cdiv(first_full_row, BLOCK_M) * BLOCK_M, hi)
    else:
        lo = 0
        full_lo = 0
    if start_n + BLOCK_N > seqlen_k:  # a partial column block: every step masks the keys
        full_lo = hi
    return lo, full_lo, hi


@triton.jit
def _dq_over_key_slices(ds, k, ROWS: tl.constexpr, KEYS: tl.constexpr, KEY_SLICES: tl.constexpr,
                        BLOCK_D: tl.constexpr, INPUT_PRECISION: tl.constexpr):
    """Split-K's dS_ij K_j: ds (ROWS, KEYS) and k (KEYS, BLOCK_D) cut along the keys into
    KEY_SLICES slices, one partial dQ a slice, then the partials summed over the slices."""
    SLICE: tl.constexpr = KEYS // KEY_SLICES
    ds3 = tl.permute(tl.reshape(ds, (ROWS, KEY_SLICES, SLICE)), (1, 0, 2))  # (slices, rows, keys)
    k3 = tl.reshape(k, (KEY_SLICES, SLICE, BLOCK_D))
    dq_s = tl.dot(ds3, k3, input_precision=INPUT_PRECISION)  # (KEY_SLICES, ROWS, D) partials
    return tl.sum(dq_s, 0)  # the split-K merge


@triton.jit
def _attn_bwd_kv_step(dk, dv, k, v, Q_ptrs, DO_ptrs, DQ_ptrs, STAT_ptr, INV_L_ptr, DELTA_ptr,
                      start_m, offs_m, offs_n, stride_qm, stride_dom, stride_dqm,
                      seqlen_q, seqlen_k, qk_scale, sm_scale,
                      MASK: tl.constexpr, IS_CAUSAL: tl.constexpr, DEFER_NORM: tl.constexpr,
                      SEQ_PARALLEL: tl.constexpr, DQ_PASS: tl.constexpr, SPLIT_Q: tl.constexpr,
                      KEY_SLICES: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                      HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr, HEAD_DIM_V: tl.constexpr,
                      BLOCK_DV: tl.constexpr, INPUT_PRECISION: tl.constexpr):
    """Fold query rows start_m .. start_m + BLOCK_M into dK_j, dV_j (and, without DQ_PASS, add
    their dQ part). Works on the transposed tile (keys x rows): dK_j, dV_j are row sums of it."""
    rows = start_m + offs_m
    row_ok = rows < seqlen_q
    row_cols_ok = _head_cols(row_ok[:, None], HEAD_DIM, BLOCK_D, 1)  # padded columns: 0
    q = tl.load(Q_ptrs + start_m * stride_qm, mask=row_cols_ok, other=0.0)  # (BLOCK_M, BLOCK_D)
    do = tl.load(DO_ptrs + start_m * stride_dom, other=0.0,
                 mask=_head_cols(row_ok[:, None], HEAD_DIM_V, BLOCK_DV, 1))  # (BLOCK_M, BLOCK_DV)
    delta = tl.load(DELTA_ptr + rows)  # rows padded to whole blocks: no mask
    stat = tl.load(STAT_ptr + rows)

    sT = tl.dot(k, tl.trans(q), input_precision=INPUT_PRECISION) * qk_scale  # (BLOCK_N, BLOCK_M)
    if MASK:
        visible = offs_n[:, None] < seqlen_k
        if IS_CAUSAL:
            visible = visible & (offs_n[:, None] <= rows[None, :] + (seqlen_k - seqlen_q))
        sT = tl.where(visible, sT, float("-inf"))
    pT = tl.math.exp2(sT - stat[None, :])
    if not DEFER_NORM:
        pT = pT * tl.load(INV_L_ptr + rows)[None, :]
    dv += tl.dot(pT.to(do.dtype), do, input_precision=INPUT_PRECISION)
    dpT = tl.dot(v, tl.trans(do), input_precision=INPUT_PRECISION)  # (BLOCK_N, BLOCK_M)
    dsT = pT * (dpT - delta[None, :])
    dk += tl.dot(dsT.to(q.dtype), q, input_precision=INPUT_PRECISION)
    if not DQ_PASS:
        if SPLIT_Q:
            dq = tl.dot(tl.trans(dsT).to(k.dtype), k, input_precision=INPUT_PRECISION)
        else:
            dq = _dq_over_key_slices(tl.trans(dsT).to(k.dtype), k, BLOCK_M, BLOCK_N, KEY_SLICES,
                                     BLOCK_D, INPUT_PRECISION)
        dq = dq * sm_scale
        dq_ptrs = DQ_ptrs + start_m * stride_dqm
        if SEQ_PARALLEL:
            tl.atomic_add(dq_ptrs, dq, mask=row_cols_ok, sem="relaxed")
        else:
            # This program is the only writer of these rows: read, add, write back. The barrier
            # orders this write before another thread's read of the same rows in a later step.
            tl.store(dq_ptrs, tl.load(dq_ptrs, mask=row_cols_ok, other=0.0) + dq,
                     mask=row_cols_ok)
            tl.debug_barrier()
    return dk, dv


@triton.jit
def _attn_bwd_col_block(Q, K, V, DO, DQ, DK, DV, STAT, INV_L, DELTA, start_n, off_b, off_hkv,
                        stride_qb, stride_qh, stride_qm, stride_qd,
                        stride_kb, stride_kh, stride_kn, stride_kd,
                        stride_vb, stride_vh, stride_vn, stride_vd,
                        stride_dob, stride_doh, stride_dom, stride_dod,
                        stride_dkb, stride_dkh, stride_dkn, stride_dkd,
                        heads_q, group_size, seqlen_q, padded_q, seqlen_k, qk_scale, sm_scale,
                        IS_CAUSAL: tl.constexpr, DEFER_NORM: tl.constexpr,
                        SEQ_PARALLEL: tl.constexpr, DQ_PASS: tl.constexpr,
                        SPLIT_Q: tl.constexpr, KEY_SLICES: tl.constexpr,
                        BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                        HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr,
                        HEAD_DIM_V: tl.constexpr, BLOCK_DV: tl.constexpr,
                        INPUT_PRECISION: tl.constexpr):
    """dK_j and dV_j for keys start_n .. start_n + BLOCK_N of one kv head, summed over the
    kv head's group of query heads."""
    offs_n = start_n + tl.arange(0, BLOCK_N)
    offs_m = tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, BLOCK_D)
    offs_dv = tl.arange(0, BLOCK_DV)
    key_ok = offs_n < seqlen_k
    k = _load_rows(K, off_b, off_hkv, offs_n, offs_d, seqlen_k,
                   stride_kb, stride_kh, stride_kn, stride_kd, HEAD_DIM, BLOCK_D)  # (BLOCK_N, D)
    v = _load_rows(V, off_b, off_hkv, offs_n, offs_dv, seqlen_k,
                   stride_vb, stride_vh, stride_vn, stride_vd, HEAD_DIM_V, BLOCK_DV)  # (.., Dv)
    dk = tl.zeros([BLOCK_N, BLOCK_D], tl.float32)
    dv = tl.zeros([BLOCK_N, BLOCK_DV], tl.float32)
    lo, full_lo, hi = _query_block_range(start_n, seqlen_q, seqlen_k, BLOCK_M, BLOCK_N, IS_CAUSAL)

    for g in range(0, group_size):  # GQA: every query head that reads this kv head
        off_h = off_hkv * group_size + g
        head_q = off_b.to(tl.int64) * stride_qb + off_h.to(tl.int64) * stride_qh
        head_do = off_b.to(tl.int64) * stride_dob + off_h.to(tl.int64) * stride_doh
        head_dq = (off_b * heads_q + off_h).to(tl.int64) * seqlen_q * HEAD_DIM  # DQ contiguous
        Q_ptrs = Q + head_q + offs_m[:, None] * stride_qm + offs_d[None, :] * stride_qd
        DO_ptrs = DO + head_do + offs_m[:, None] * stride_dom + offs_dv[None, :] * stride_dod
        DQ_ptrs = DQ + head_dq + offs_m[:, None] * HEAD_DIM + offs_d[None, :]
        row_stats = (off_b * heads_q + off_h) * padded_q  # STAT, INV_L, DELTA: (B, H, padded_q)
        for start_m in range(lo, full_lo, BLOCK_M):
            dk, dv = _attn_bwd_kv_step(dk, dv, k, v, Q_ptrs, DO_ptrs, DQ_ptrs, STAT + row_stats,
                                       INV_L + row_stats, DELTA + row_stats, start_m, offs_m,
                                       offs_n, stride_qm, stride_dom, HEAD_DIM, seqlen_q, seqlen_k,
                                       qk_scale, sm_scale, True, IS_CAUSAL, DEFER_NORM,
                                       SEQ_PARALLEL, DQ_PASS, SPLIT_Q, KEY_SLICES, BLOCK_M,
                                       BLOCK_N, HEAD_DIM, BLOCK_D, HEAD_DIM_V, BLOCK_DV,
                                       INPUT_PRECISION)
        for start_m in range(full_lo, hi, BLOCK_M):
            dk, dv = _attn_bwd_kv_step(dk, dv, k, v, Q_ptrs, DO_ptrs, DQ_ptrs, STAT + row_stats,
                                       INV_L + row_stats, DELTA + row_stats, start_m, offs_m,
                                       offs_n, stride_qm, stride_dom, HEAD_DIM, seqlen_q, seqlen_k,
                                       qk_scale, sm_scale, False, IS_CAUSAL, DEFER_NORM,
                                       SEQ_PARALLEL, DQ_PASS, SPLIT_Q, KEY_SLICES, BLOCK_M,
                                       BLOCK_N, HEAD_DIM, BLOCK_D, HEAD_DIM_V, BLOCK_DV,
                                       INPUT_PRECISION)

    dk *= sm_scale
    out = off_b.to(tl.int64) * stride_dkb + off_hkv.to(tl.int64) * stride_dkh \
        + offs_n[:, None] * stride_dkn + offs_d[None, :] * stride_dkd  # DK's (DV's if Dv == D)
    key_cols_ok = _head_cols(key_ok[:, None], HEAD_DIM, BLOCK_D, 1)  # padded columns: not stored
    tl.store(DK + out, dk.to(DK.dtype.element_ty), mask=key_cols_ok)
    if HEAD_DIM_V == HEAD_DIM:
        tl.store(DV + out, dv.to(DV.dtype.element_ty), mask=key_cols_ok)
    else:  # DV is contiguous like DK with rows HEAD_DIM_V wide: DK's strides scaled
        dv_out = off_b.to(tl.int64) * (stride_dkb // HEAD_DIM * HEAD_DIM_V) \
            + off_hkv.to(tl.int64) * (stride_dkh // HEAD_DIM * HEAD_DIM_V) \
            + offs_n[:, None] * HEAD_DIM_V + offs_dv[None, :]
        tl.store(DV + dv_out, dv.to(DV.dtype.element_ty),
                 mask=_head_cols(key_ok[:, None], HEAD_DIM_V, BLOCK_DV, 1))


@triton.jit
def _transposed_tile(ptrs, key_ok, MASK: tl.constexpr, HEAD_DIM: tl.constexpr,
                     BLOCK_D: tl.constexpr):
    """K_j^T or V_j^T (BLOCK_D, BLOCK_N) at `ptrs`; with MASK, keys past seqlen_k (not key_ok)
    are zeros; padded columns are zeros."""
    if MASK:
        return tl.load(ptrs, mask=_head_cols(key_ok[None, :], HEAD_DIM, BLOCK_D, 0), other=0.0)
    elif BLOCK_D != HEAD_DIM:
        return tl.load(ptrs, mask=(tl.arange(0, BLOCK_D) < HEAD_DIM)[:, None], other=0.0)
    return tl.load(ptrs)


@triton.jit
def _attn_bwd_q_step(dq, q, do, stat, inv_l, delta, kT_ptrs, vT_ptrs, start_n, rows, offs_n,
                     stride_kn, stride_vn, seqlen_q, seqlen_k, qk_scale,
                     MASK: tl.constexpr, IS_CAUSAL: tl.constexpr, DEFER_NORM: tl.constexpr,
                     SPLIT_Q: tl.constexpr, KEY_SLICES: tl.constexpr, BLOCK_M: tl.constexpr,
                     BLOCK_N: tl.constexpr, HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr,
                     HEAD_DIM_V: tl.constexpr, BLOCK_DV: tl.constexpr,
                     INPUT_PRECISION: tl.constexpr):
    """dQ_i += dS_ij K_j for keys start_n .. start_n + BLOCK_N (S_ij, P_ij, dP_ij recomputed)."""
    keys = start_n + offs_n
    key_ok = keys < seqlen_k
    kT = _transposed_tile(kT_ptrs + start_n * stride_kn, key_ok, MASK, HEAD_DIM, BLOCK_D)
    vT = _transposed_tile(vT_ptrs + start_n * stride_vn, key_ok, MASK, HEAD_DIM_V, BLOCK_DV)
    s = tl.dot(q, kT, input_precision=INPUT_PRECISION) * qk_scale  # (BLOCK_M, BLOCK_N)
    if MASK:
        visible = key_ok[None, :]
        if IS_CAUSAL:
            visible = visible & (keys[None, :] <= rows[:, None] + (seqlen_k - seqlen_q))
        s = tl.where(visible, s, float("-inf"))
    p = tl.math.exp2(s - stat[:, None])
    if not DEFER_NORM:
        p = p * inv_l[:, None]
    dp = tl.dot(do, vT, input_precision=INPUT_PRECISION)
    ds = p * (dp - delta[:, None])
    if SPLIT_Q:
        return dq + tl.dot(ds.to(kT.dtype), tl.trans(kT), input_precision=INPUT_PRECISION)
    return dq + _dq_over_key_slices(ds.to(kT.dtype), tl.trans(kT), BLOCK_M, BLOCK_N, KEY_SLICES,
                                    BLOCK_D, INPUT_PRECISION)


@triton.jit
def _attn_bwd_dq_row_block(Q, K, V, DO, DQ, STAT, INV_L, DELTA, start_m, off_b, off_h, off_hkv,
                           stride_qb, stride_qh, stride_qm, stride_qd,
                           stride_kb, stride_kh, stride_kn, stride_kd,
                           stride_vb, stride_vh, stride_vn, stride_vd,
                           stride_dob, stride_doh, stride_dom, stride_dod,
                           heads_q, seqlen_q, padded_q, seqlen_k, qk_scale, sm_scale,
                           IS_CAUSAL: tl.constexpr, DEFER_NORM: tl.constexpr,
                           SPLIT_Q: tl.constexpr, KEY_SLICES: tl.constexpr,
                           BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                           HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr,
                           HEAD_DIM_V: tl.constexpr, BLOCK_DV: tl.constexpr,
                           INPUT_PRECISION: tl.constexpr):
    """DQ_PASS: dQ_i of query rows start_m .. start_m + BLOCK_M of head off_h, written once."""
    rows = start_m + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, BLOCK_D)
    offs_dv = tl.arange(0, BLOCK_DV)
    row_ok = rows < seqlen_q
    q = _load_rows(Q, off_b, off_h, rows, offs_d, seqlen_q,
                   stride_qb, stride_qh, stride_qm, stride_qd, HEAD_DIM, BLOCK_D)  # (BLOCK_M, D)
    do = _load_rows(DO, off_b, off_h, rows, offs_dv, seqlen_q,
                    stride_dob, stride_doh, stride_dom, stride_dod, HEAD_DIM_V, BLOCK_DV)
    row_stats = (off_b * heads_q + off_h) * padded_q
    delta = tl.load(DELTA + row_stats + rows)  # rows padded to whole blocks: no mask
    stat = tl.load(STAT + row_stats + rows)
    inv_l = stat  # not used
    if not DEFER_NORM:
        inv_l = tl.load(INV_L + row_stats + rows)
    kT_ptrs = K + off_b.to(tl.int64) * stride_kb + off_hkv.to(tl.int64) * stride_kh \
        + offs_n[None, :] * stride_kn + offs_d[:, None] * stride_kd  # (D, BLOCK_N)
    vT_ptrs = V + off_b.to(tl.int64) * stride_vb + off_hkv.to(tl.int64) * stride_vh \
        + offs_n[None, :] * stride_vn + offs_dv[:, None] * stride_vd  # (Dv, BLOCK_N)

    dq = tl.zeros([BLOCK_M, BLOCK_D], tl.float32)
    full_end, hi = _visible_key_range(start_m, seqlen_q, seqlen_k, BLOCK_M, BLOCK_N, IS_CAUSAL)
    for start_n in range(0, full_end, BLOCK_N):
        dq = _attn_bwd_q_step(dq, q, do, stat, inv_l, delta, kT_ptrs, vT_ptrs, start_n, rows,
                              offs_n, stride_kn, stride_vn, seqlen_q, seqlen_k, qk_scale,
                              False, IS_CAUSAL, DEFER_NORM, SPLIT_Q, KEY_SLICES, BLOCK_M,
                              BLOCK_N, HEAD_DIM, BLOCK_D, HEAD_DIM_V, BLOCK_DV,
                              INPUT_PRECISION)
    for start_n in range(full_end, hi, BLOCK_N):
        dq = _attn_bwd_q_step(dq, q, do, stat, inv_l, delta, kT_ptrs, vT_ptrs, start_n, rows,
                              offs_n, stride_kn, stride_vn, seqlen_q, seqlen_k, qk_scale,
                              True, IS_CAUSAL, DEFER_NORM, SPLIT_Q, KEY_SLICES, BLOCK_M,
                              BLOCK_N, HEAD_DIM, BLOCK_D, HEAD_DIM_V, BLOCK_DV,
                              INPUT_PRECISION)
    dq *= sm_scale
    out = (off_b * heads_q + off_h).to(tl.int64) * seqlen_q * HEAD_DIM \
        + rows[:, None] * HEAD_DIM + offs_d[None, :]  # DQ contiguous
    tl.store(DQ + out, dq.to(DQ.dtype.element_ty),
             mask=_head_cols(row_ok[:, None], HEAD_DIM, BLOCK_D, 1))


# the head counts are not specialised (an MQA call's heads_kv == 1 would be): MHA, GQA and MQA
# calls share one compile (D70)
@triton.jit(do_not_specialize=["heads_q", "heads_kv"])
def _attn_bwd(Q, K, V, DO, DQ, DK, DV, STAT, INV_L, DELTA,
              stride_qb, stride_qh, stride_qm, stride_qd,
              stride_kb, stride_kh, stride_kn, stride_kd,
              stride_vb, stride_vh, stride_vn, stride_vd,
              stride_dob, stride_doh, stride_dom, stride_dod,
              stride_dkb, stride_dkh, stride_dkn, stride_dkd,
              heads_q, heads_kv, seqlen_q, padded_q, seqlen_k, qk_scale, sm_scale,
              IS_CAUSAL: tl.constexpr, DEFER_NORM: tl.constexpr, SEQ_PARALLEL: tl.constexpr,
              SPLIT_Q: tl.constexpr, KEY_SLICES: tl.constexpr,
              DQ_PASS: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
              HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr, HEAD_DIM_V: tl.constexpr,
              BLOCK_DV: tl.constexpr, INPUT_PRECISION: tl.constexpr):
    if SEQ_PARALLEL:
        off_bh = tl.program_id(1)
    else:
        off_bh = tl.program_id(0)
    off_b = off_bh // heads_kv
    off_hkv = off_bh % heads_kv
    group_size = heads_q // heads_kv
    n_col_blocks = tl.cdiv(seqlen_k, BLOCK_N)
    n_row_blocks = tl.cdiv(seqlen_q, BLOCK_N)  # of the dQ pass, which has BLOCK_N rows
    if SEQ_PARALLEL:
        pid = tl.program_id(0)
        if pid < n_col_blocks:
            _attn_bwd_col_block(Q, K, V, DO, DQ, DK, DV, STAT, INV_L, DELTA, pid * BLOCK_N, off_b,
                                off_hkv, stride_qb, stride_qh, stride_qm, stride_qd,
                                stride_kb, stride_kh, stride_kn, stride_kd,
                                stride_vb, stride_vh, stride_vn, stride_vd,
                                stride_dob, stride_doh, stride_dom, stride_dod,
                                stride_dkb, stride_dkh, stride_dkn, stride_dkd,
                                heads_q, group_size, seqlen_q, padded_q, seqlen_k, qk_scale,
                                sm_scale,
                                IS_CAUSAL, DEFER_NORM, SEQ_PARALLEL, DQ_PASS, SPLIT_Q,
                                KEY_SLICES, BLOCK_M, BLOCK_N, HEAD_DIM, BLOCK_D, HEAD_DIM_V,
                                BLOCK_DV, INPUT_PRECISION)
        elif DQ_PASS:  # one row block of one query head of the group
            r = pid - n_col_blocks
            _attn_bwd_dq_row_block(Q, K, V, DO, DQ, STAT, INV_L, DELTA,
                                   (r % n_row_blocks) * BLOCK_N, off_b,
                                   off_hkv * group_size + r // n_row_blocks, off_hkv,
                                   stride_qb, stride_qh, stride_qm, stride_qd,
                                   stride_kb, stride_kh, stride_kn, stride_kd,
                                   stride_vb, stride_vh, stride_vn, stride_vd,
                                   stride_dob, stride_doh, stride_dom, stride_dod,
                                   heads_q, seqlen_q, padded_q, seqlen_k, qk_scale, sm_scale,
                                   IS_CAUSAL, DEFER_NORM, SPLIT_Q, KEY_SLICES, BLOCK_N, BLOCK_M,
                                   HEAD_DIM, BLOCK_D, HEAD_DIM_V, BLOCK_DV, INPUT_PRECISION)
    else:
        for start_n in range(0, seqlen_k, BLOCK_N):
            _attn_bwd_col_block(Q, K, V, DO, DQ, DK, DV, STAT, INV_L, DELTA, start_n, off_b,
                                off_hkv, stride_qb, stride_qh, stride_qm, stride_qd,
                                stride_kb, stride_kh, stride_kn, stride_kd,
                                stride_vb, stride_vh, stride_vn, stride_vd,
                                stride_dob, stride_doh, stride_dom, stride_dod,
                                stride_dkb, stride_dkh, stride_dkn, stride_dkd,
                                heads_q, group_size, seqlen_q, padded_q, seqlen_k, qk_scale,
                                sm_scale,
                                IS_CAUSAL, DEFER_NORM, SEQ_PARALLEL, DQ_PASS, SPLIT_Q,
                                KEY_SLICES, BLOCK_M, BLOCK_N, HEAD_DIM, BLOCK_D, HEAD_DIM_V,
                                BLOCK_DV, INPUT_PRECISION)
        if DQ_PASS:
            for r in range(0, group_size * n_row_blocks):
                _attn_bwd_dq_row_block(Q, K, V, DO, DQ, STAT, INV_L, DELTA,
                                       (r % n_row_blocks) * BLOCK_N, off_b,
                                       off_hkv * group_size + r // n_row_blocks, off_hkv,
                                       stride_qb, stride_qh, stride_qm, stride_qd,
                                       stride_kb, stride_kh, stride_kn, stride_kd,
                                       stride_vb, stride_vh, stride_vn, stride_vd,
                                       stride_dob, stride_doh, stride_dom, stride_dod,
                                       heads_q, seqlen_q, padded_q, seqlen_k, qk_scale, sm_scale,
                                       IS_CAUSAL, DEFER_NORM, SPLIT_Q, KEY_SLICES, BLOCK_N,
                                       BLOCK_M, HEAD_DIM, BLOCK_D, HEAD_DIM_V, BLOCK_DV,
                                       INPUT_PRECISION)


_ATTN_BWD_PREPROCESS = CachedLaunch(_attn_bwd_preprocess)  # kernels/launch_cache.py
_ATTN_BWD = CachedLaunch(_attn_bwd)


def bwd_preprocess(q, k, v, o, stats, do, dlse, variant, config, o_res=None, row_multiple=1,
                   dq_acc=None):
    """The per-row inputs of the backward's steps (`_attn_bwd_preprocess`): delta, stat2,
    inv_l (stat2 itself under defer_norm), float32 (B, Hq, padded_q), and padded_q: seqlen_q
    rounded up to whole blocks of either pass (and of row_multiple, a power of two). dq_acc:
    dQ's float32 accumulator (q's shape, contiguous), zeroed here, or None."""
    import torch

    batch, heads_q, seqlen_q, head_dim = q.shape
    head_dim_v = v.shape[3]
    pad = max(config.bwd_block_m, config.bwd_block_n, row_multiple)
    padded_q = triton.cdiv(seqlen_q, pad) * pad
    rows = dict(size=(batch, heads_q, padded_q), device=q.device, dtype=torch.float32)
    delta, stat2 = torch.empty(**rows), torch.empty(**rows)
    inv_l = stat2 if variant.defer_norm else torch.empty(**rows)
    stat = stats[0].contiguous()  # lse, or m when not defer_norm
    l = stats[1].contiguous() if not variant.defer_norm else stat
    dlse_c = dlse.float().contiguous() if dlse is not None else delta
    _ATTN_BWD_PREPROCESS[(padded_q // config.bwd_block_m, batch * heads_q)](
        o, o if o_res is None else o_res, do, dlse_c, stat, l, delta, stat2, inv_l,
        delta if dq_acc is None else dq_acc,
        *o.stride(), *do.stride(), heads_q, seqlen_q, padded_q, HAS_DLSE=dlse is not None,
        HAS_O_RES=o_res is not None, DEFER_NORM=variant.defer_norm, ZERO_DQ=dq_acc is not None,
        BLOCK_M=config.bwd_block_m, HEAD_DIM=head_dim, BLOCK_D=block_d(head_dim),
        HEAD_DIM_V=head_dim_v, BLOCK_DV=block_d(head_dim_v))
    return delta, stat2, inv_l, padded_q


def attn_bwd(q, k, v, o, stats, do, dlse, causal, softmax_scale, variant, config, o_res=None):
    """dq, dk, dv for flash_attention's forward saved tensors; stats and o_res as attn_fwd
    returned them (o_res: None, or o's rounding residual, which makes Delta about exact)."""
    import torch

    batch, heads_q, seqlen_q, head_dim = q.shape
    heads_kv, seqlen_k, head_dim_v = k.shape[1], k.shape[2], v.shape[3]
    shape = (batch, heads_q, seqlen_q, head_dim)  # dQ is written contiguous
    # every dQ row written once, by one program (dq pass), or accumulated across steps and
    # programs in float32, zeroed by the preprocess
    dq = torch.empty(shape, device=q.device,
                     dtype=q.dtype if config.bwd_dq_pass else torch.float32)
    # per-row inputs of the backward's steps, rows padded to whole blocks of either pass
    delta, stat2, inv_l, padded_q = bwd_preprocess(
        q, k, v, o, stats, do, dlse, variant, config, o_res,
        dq_acc=None if config.bwd_dq_pass else dq)
    dk = torch.empty(k.shape, device=k.device, dtype=k.dtype)  # contiguous, and so is dv:
    dv = torch.empty(v.shape, device=v.device, dtype=v.dtype)  # the kernel scales dk's strides
    args = (q, k, v, do, dq, dk, dv, stat2, inv_l, delta,
            *q.stride(), *k.stride(), *v.stride(), *do.stride(), *dk.stride(),
            heads_q, heads_kv, seqlen_q, padded_q, seqlen_k, softmax_scale * LOG2E, softmax_scale)
    kwargs = dict(
        IS_CAUSAL=causal, DEFER_NORM=variant.defer_norm, SEQ_PARALLEL=variant.seq_parallel,
        SPLIT_Q=variant.split_q, KEY_SLICES=1 if variant.split_q else config.bwd_key_slices,
        DQ_PASS=config.bwd_dq_pass, BLOCK_M=config.bwd_block_m, BLOCK_N=config.bwd_block_n,
        HEAD_DIM=head_dim, BLOCK_D=block_d(head_dim), HEAD_DIM_V=head_dim_v,
        BLOCK_DV=block_d(head_dim_v), INPUT_PRECISION=config.input_precision,
        num_warps=config.bwd_num_warps, num_stages=config.bwd_num_stages,
    )
    # FA1's launcher (seq_parallel off) may pick one program per column block too (D90); its
    # occupancy question is asked of the kernel with one program per (batch, kv head)
    if bwd_column_parallel(variant, config.fa1_bwd_splits, batch * heads_kv, seqlen_k,
                           config.bwd_block_n, causal,
                           lambda: sms_and_ctas_per_sm(_attn_bwd, q.device, args, kwargs)):
        blocks = triton.cdiv(seqlen_k, config.bwd_block_n)
        if config.bwd_dq_pass:
            blocks += heads_q // heads_kv * triton.cdiv(seqlen_q, config.bwd_block_n)
        grid = (blocks, batch * heads_kv)
        kwargs["SEQ_PARALLEL"] = True
    else:
        grid = (batch * heads_kv,)
    _ATTN_BWD[grid](*args, **kwargs)
    return dq.to(q.dtype), dk, dv
