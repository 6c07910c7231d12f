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
SEQ_PARALLEL: grid (column blocks, batch * kv heads); dQ_i receives contributions from many
programs and accumulates them with float32 atomic adds (the paper's scheme). Not SEQ_PARALLEL:
grid (batch * kv heads,); each program walks all column blocks itself and owns every dQ row of
its heads, so dQ is read, updated and written without atomics.
SPLIT_Q does not change the backward pass: it is the same code for both values.

Causal: query blocks that see none of a column block are never visited; only blocks that cross
the diagonal or the end of the keys compute a mask. Rows that see no key have L = -inf (or
l = 0); they are given P = 0, so they get dQ = 0 and add nothing to dK and dV.
"""
import triton
import triton.language as tl

from .forward import LOG2E


@triton.jit
def _attn_bwd_preprocess(O, DO, DLSE, DELTA,
                         stride_ob, stride_oh, stride_om, stride_od,
                         stride_dob, stride_doh, stride_dom, stride_dod,
                         heads_q, seqlen_q,
                         HAS_DLSE: tl.constexpr, BLOCK_M: tl.constexpr, HEAD_DIM: tl.constexpr):
    """DELTA = rowsum(dO * O) - dlse, float32 (B, H, Sq) contiguous."""
    off_bh = tl.program_id(1)
    off_b = off_bh // heads_q
    off_h = off_bh % heads_q
    offs_m = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, HEAD_DIM)
    row_ok = offs_m < seqlen_q
    o = tl.load(O + off_b.to(tl.int64) * stride_ob + off_h.to(tl.int64) * stride_oh
                + offs_m[:, None] * stride_om + offs_d[None, :] * stride_od,
                mask=row_ok[:, None], other=0.0).to(tl.float32)
    do = tl.load(DO + off_b.to(tl.int64) * stride_dob + off_h.to(tl.int64) * stride_doh
                 + offs_m[:, None] * stride_dom + offs_d[None, :] * stride_dod,
                 mask=row_ok[:, None], other=0.0).to(tl.float32)
    delta = tl.sum(o * do, 1)
    rows = off_bh * seqlen_q + offs_m
    if HAS_DLSE:
        delta -= tl.load(DLSE + rows, mask=row_ok, other=0.0)
    tl.store(DELTA + rows, delta, mask=row_ok)


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
def _attn_bwd_step(dk, dv, k, v, Q_ptrs, DO_ptrs, DQ_ptrs, STAT_ptr, L_ptr, DELTA_ptr,
                   start_m, offs_m, offs_n, stride_qm, stride_dom, stride_dqm,
                   seqlen_q, seqlen_k, qk_scale, sm_scale,
                   MASK: tl.constexpr, IS_CAUSAL: tl.constexpr, DEFER_NORM: tl.constexpr,
                   SEQ_PARALLEL: tl.constexpr, INPUT_PRECISION: tl.constexpr):
    """Fold query rows start_m .. start_m + BLOCK_M into dK_j, dV_j and add their dQ part."""
    rows = start_m + offs_m
    row_ok = rows < seqlen_q
    q = tl.load(Q_ptrs + start_m * stride_qm, mask=row_ok[:, None], other=0.0)  # (BLOCK_M, D)
    do = tl.load(DO_ptrs + start_m * stride_dom, mask=row_ok[:, None], other=0.0)  # (BLOCK_M, D)
    delta = tl.load(DELTA_ptr + rows, mask=row_ok, other=0.0)
    # Row statistics in log2 units; rows past the end or seeing no key get P = 0.
    stat = tl.load(STAT_ptr + rows, mask=row_ok, other=float("inf")) * 1.4426950408889634  # 1/ln 2
    if DEFER_NORM:
        stat = tl.where(stat == float("-inf"), float("inf"), stat)  # stat is L
    else:
        l = tl.load(L_ptr + rows, mask=row_ok, other=1.0)  # stat is m
        stat = tl.where(l == 0.0, float("inf"), stat)
        inv_l = 1.0 / tl.where(l == 0.0, 1.0, l)

    sT = tl.dot(k, tl.trans(q), input_precision=INPUT_PRECISION) * qk_scale  # (BLOCK_N, BLOCK_M)
    if MASK:
        visible = offs_n[:, None] < seqlen_k
        if IS_CAUSAL:
            visible = visible & (offs_n[:, None] <= rows[None, :] + (seqlen_k - seqlen_q))
        sT = tl.where(visible, sT, float("-inf"))
    pT = tl.math.exp2(sT - stat[None, :])
    if not DEFER_NORM:
        pT = pT * inv_l[None, :]
    dv += tl.dot(pT.to(do.dtype), do, input_precision=INPUT_PRECISION)
    dpT = tl.dot(v, tl.trans(do), input_precision=INPUT_PRECISION)  # (BLOCK_N, BLOCK_M)
    dsT = pT * (dpT - delta[None, :])
    dk += tl.dot(dsT.to(q.dtype), q, input_precision=INPUT_PRECISION)
    dq = tl.dot(tl.trans(dsT).to(k.dtype), k, input_precision=INPUT_PRECISION) * sm_scale
    dq_ptrs = DQ_ptrs + start_m * stride_dqm
    if SEQ_PARALLEL:
        tl.atomic_add(dq_ptrs, dq, mask=row_ok[:, None])
    else:
        # This program is the only writer of these rows: read, add, write back. The barrier
        # orders this write before another thread's read of the same rows in a later step.
        tl.store(dq_ptrs, tl.load(dq_ptrs, mask=row_ok[:, None], other=0.0) + dq,
                 mask=row_ok[:, None])
        tl.debug_barrier()
    return dk, dv


@triton.jit
def _attn_bwd_col_block(Q, K, V, DO, DQ, DK, DV, STAT, L, DELTA, start_n, off_b, off_hkv,
                        stride_qb, stride_qh, stride_qm, stride_qd,
                        stride_kb, stride_kh, stride_kn, stride_kd,
                        stride_vb, stride_vh, stride_vn, stride_vd,
                        stride_dob, stride_doh, stride_dom, stride_dod,
                        stride_dkb, stride_dkh, stride_dkn, stride_dkd,
                        heads_q, group_size, seqlen_q, seqlen_k, qk_scale, sm_scale,
                        IS_CAUSAL: tl.constexpr, DEFER_NORM: tl.constexpr,
                        SEQ_PARALLEL: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                        HEAD_DIM: tl.constexpr, INPUT_PRECISION: tl.constexpr):
    """dK_j and dV_j for keys start_n .. start_n + BLOCK_N of one kv head, summed over the
    kv head's group of query heads."""
    offs_n = start_n + tl.arange(0, BLOCK_N)
    offs_m = tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, HEAD_DIM)
    key_ok = offs_n < seqlen_k
    k = tl.load(K + off_b.to(tl.int64) * stride_kb + off_hkv.to(tl.int64) * stride_kh
                + offs_n[:, None] * stride_kn + offs_d[None, :] * stride_kd,
                mask=key_ok[:, None], other=0.0)  # (BLOCK_N, D)
    v = tl.load(V + off_b.to(tl.int64) * stride_vb + off_hkv.to(tl.int64) * stride_vh
                + offs_n[:, None] * stride_vn + offs_d[None, :] * stride_vd,
                mask=key_ok[:, None], other=0.0)  # (BLOCK_N, D)
    dk = tl.zeros([BLOCK_N, HEAD_DIM], tl.float32)
    dv = tl.zeros([BLOCK_N, HEAD_DIM], tl.float32)
    lo, full_lo, hi = _query_block_range(start_n, seqlen_q, seqlen_k, BLOCK_M, BLOCK_N, IS_CAUSAL)

    for g in range(0, group_size):  # GQA: every query head that reads this kv head
        off_h = off_hkv * group_size + g
        head_q = off_b.to(tl.int64) * stride_qb + off_h.to(tl.int64) * stride_qh
        head_do = off_b.to(tl.int64) * stride_dob + off_h.to(tl.int64) * stride_doh
        head_dq = (off_b * heads_q + off_h).to(tl.int64) * seqlen_q * HEAD_DIM  # DQ contiguous
        Q_ptrs = Q + head_q + offs_m[:, None] * stride_qm + offs_d[None, :] * stride_qd
        DO_ptrs = DO + head_do + offs_m[:, None] * stride_dom + offs_d[None, :] * stride_dod
        DQ_ptrs = DQ + head_dq + offs_m[:, None] * HEAD_DIM + offs_d[None, :]
        row_stats = (off_b * heads_q + off_h) * seqlen_q  # STAT, L, DELTA: contiguous (B, H, Sq)
        for start_m in range(lo, full_lo, BLOCK_M):
            dk, dv = _attn_bwd_step(dk, dv, k, v, Q_ptrs, DO_ptrs, DQ_ptrs, STAT + row_stats,
                                    L + row_stats, DELTA + row_stats, start_m, offs_m, offs_n,
                                    stride_qm, stride_dom, HEAD_DIM, seqlen_q, seqlen_k,
                                    qk_scale, sm_scale, True, IS_CAUSAL, DEFER_NORM,
                                    SEQ_PARALLEL, INPUT_PRECISION)
        for start_m in range(full_lo, hi, BLOCK_M):
            dk, dv = _attn_bwd_step(dk, dv, k, v, Q_ptrs, DO_ptrs, DQ_ptrs, STAT + row_stats,
                                    L + row_stats, DELTA + row_stats, start_m, offs_m, offs_n,
                                    stride_qm, stride_dom, HEAD_DIM, seqlen_q, seqlen_k,
                                    qk_scale, sm_scale, False, IS_CAUSAL, DEFER_NORM,
                                    SEQ_PARALLEL, INPUT_PRECISION)

    dk *= sm_scale
    out = off_b.to(tl.int64) * stride_dkb + off_hkv.to(tl.int64) * stride_dkh \
        + offs_n[:, None] * stride_dkn + offs_d[None, :] * stride_dkd  # DK and DV share strides
    tl.store(DK + out, dk.to(DK.dtype.element_ty), mask=key_ok[:, None])
    tl.store(DV + out, dv.to(DV.dtype.element_ty), mask=key_ok[:, None])


@triton.jit
def _attn_bwd(Q, K, V, DO, DQ, DK, DV, STAT, L, DELTA,
              stride_qb, stride_qh, stride_qm, stride_qd,
              stride_kb, stride_kh, stride_kn, stride_kd,
              stride_vb, stride_vh, stride_vn, stride_vd,
              stride_dob, stride_doh, stride_dom, stride_dod,
              stride_dkb, stride_dkh, stride_dkn, stride_dkd,
              heads_q, heads_kv, seqlen_q, seqlen_k, qk_scale, sm_scale,
              IS_CAUSAL: tl.constexpr, DEFER_NORM: tl.constexpr, SEQ_PARALLEL: tl.constexpr,
              BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, HEAD_DIM: tl.constexpr,
              INPUT_PRECISION: tl.constexpr):
    if SEQ_PARALLEL:
        off_bh = tl.program_id(1)
    else:
        off_bh = tl.program_id(0)
    off_b = off_bh // heads_kv
    off_hkv = off_bh % heads_kv
    group_size = heads_q // heads_kv
    if SEQ_PARALLEL:
        _attn_bwd_col_block(Q, K, V, DO, DQ, DK, DV, STAT, L, DELTA,
                            tl.program_id(0) * BLOCK_N, off_b, off_hkv,
                            stride_qb, stride_qh, stride_qm, stride_qd,
                            stride_kb, stride_kh, stride_kn, stride_kd,
                            stride_vb, stride_vh, stride_vn, stride_vd,
                            stride_dob, stride_doh, stride_dom, stride_dod,
                            stride_dkb, stride_dkh, stride_dkn, stride_dkd,
                            heads_q, group_size, seqlen_q, seqlen_k, qk_scale, sm_scale,
                            IS_CAUSAL, DEFER_NORM, SEQ_PARALLEL, BLOCK_M, BLOCK_N, HEAD_DIM,
                            INPUT_PRECISION)
    else:
        for start_n in range(0, seqlen_k, BLOCK_N):
            _attn_bwd_col_block(Q, K, V, DO, DQ, DK, DV, STAT, L, DELTA, start_n, off_b, off_hkv,
                                stride_qb, stride_qh, stride_qm, stride_qd,
                                stride_kb, stride_kh, stride_kn, stride_kd,
                                stride_vb, stride_vh, stride_vn, stride_vd,
                                stride_dob, stride_doh, stride_dom, stride_dod,
                                stride_dkb, stride_dkh, stride_dkn, stride_dkd,
                                heads_q, group_size, seqlen_q, seqlen_k, qk_scale, sm_scale,
                                IS_CAUSAL, DEFER_NORM, SEQ_PARALLEL, BLOCK_M, BLOCK_N, HEAD_DIM,
                                INPUT_PRECISION)


def attn_bwd(q, k, v, o, stats, do, dlse, causal, softmax_scale, variant, config):
    """dq, dk, dv for flash_attention's forward saved tensors; stats as attn_fwd returned them."""
    import torch

    batch, heads_q, seqlen_q, head_dim = q.shape
    heads_kv, seqlen_k = k.shape[1], k.shape[2]
    delta = torch.empty((batch, heads_q, seqlen_q), device=q.device, dtype=torch.float32)
    dlse_c = dlse.float().contiguous() if dlse is not None else delta
    _attn_bwd_preprocess[(triton.cdiv(seqlen_q, config.bwd_block_m), batch * heads_q)](
        o, do, dlse_c, delta, *o.stride(), *do.stride(), heads_q, seqlen_q,
        HAS_DLSE=dlse is not None, BLOCK_M=config.bwd_block_m, HEAD_DIM=head_dim)

    dq_acc = torch.zeros((batch, heads_q, seqlen_q, head_dim), device=q.device, dtype=torch.float32)
    dk = torch.empty(k.shape, device=k.device, dtype=k.dtype)
    dv = torch.empty(v.shape, device=v.device, dtype=v.dtype)
    stat = stats[0].contiguous()  # lse, or m when not defer_norm
    l = stats[1].contiguous() if not variant.defer_norm else stat
    if variant.seq_parallel:
        grid = (triton.cdiv(seqlen_k, config.bwd_block_n), batch * heads_kv)
    else:
        grid = (batch * heads_kv,)
    _attn_bwd[grid](
        q, k, v, do, dq_acc, dk, dv, stat, l, delta,
        *q.stride(), *k.stride(), *v.stride(), *do.stride(), *dk.stride(),
        heads_q, heads_kv, seqlen_q, seqlen_k, softmax_scale * LOG2E, softmax_scale,
        IS_CAUSAL=causal, DEFER_NORM=variant.defer_norm, SEQ_PARALLEL=variant.seq_parallel,
        BLOCK_M=config.bwd_block_m, BLOCK_N=config.bwd_block_n, HEAD_DIM=head_dim,
        INPUT_PRECISION=config.input_precision,
        num_warps=config.bwd_num_warps, num_stages=config.bwd_num_stages,
    )
    return dq_acc.to(q.dtype), dk, dv
