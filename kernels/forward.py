"""FlashAttention forward pass with FA2's three changes as constexpr switches.

For one query row block Q_i (BLOCK_M rows) and the K/V tiles K_j, V_j (BLOCK_N keys each), with
raw scores S = Q K^T and c = softmax_scale * log2(e) (so exp2 replaces exp):

    m_new  = max(m_i, rowmax(S_ij))                  # in raw units (c > 0)
    alpha  = exp2((m_i - m_new) * c)                 # rescales everything accumulated so far
    P_ij   = exp2((S_ij - m_new) * c)
    l_new  = alpha * l_i + rowsum(P_ij)

  DEFER_NORM (FA2, Algorithm 1 of the FA2 paper):
    acc    = alpha * acc + P_ij V_j                  # unnormalised
    after the loop: O_i = acc / l_i once, and L_i = m_i * softmax_scale + log(l_i) is stored
    for the backward.
  not DEFER_NORM (FA1, Algorithm 1 of the FA1 paper):
    acc    = (l_i * alpha * acc + P_ij V_j) / l_new  # normalised at every tile
           = (P_ij / l_new) V_j + acc * (l_i * alpha / l_new)
      (P is scaled before the product, so the rescaled acc is the dot's accumulator and wgmma
      accumulates in place, as in FA2; scaling after the product took 236-243 registers at d=128
      where this takes 170-172: bf16, 128 x 64 tiles, sm_90 compile gate.)
    after the loop: O_i = acc, and m_i * softmax_scale and l_i are stored separately.

SPLIT_Q off (split-K): each K/V tile is cut into KEY_SLICES slices of keys. Every slice computes
its own max m_s, sum l_s and partial output O_s = exp2((S_s - m_s) c) V_s independently; the
slices are then merged (m_tile = max m_s, weights exp2((m_s - m_new) c)), which is the cross-slice
communication that FA1's split-K warp partitioning pays at every tile. Triton picks the warp
mapping itself, so this reproduces split-K's data flow, not its exact warp assignment.

SEQ_PARALLEL: grid (row blocks, batch * heads), one program per row block (causal: launched
longest first from LONGEST_FIRST_MIN_KEYS keys, kernels/launch_order.py); off: grid
(batch * heads,) and each program walks the row blocks in turn, as FA1 scheduled the work.
In both cases the K/V loop is the inner loop and a row block's state (m, l, acc) stays on chip.

Causal masking is bottom-right aligned: query i sees key j iff j <= i + (seqlen_k - seqlen_q).
K/V tiles wholly above the diagonal are never visited; only tiles that cross the diagonal or the
end of the keys compute a mask, and causal ones the causal compare alone (it hides every key
past seqlen_k too). Masked scores are -inf. A row that sees no key gets O = 0 and L = -inf.

TMA (a tile choice, `TileConfig.tma`, not one of FA2's changes): K and V tiles are loaded
through tensor descriptors (Hopper's TMA unit; KD, VD) instead of pointer arithmetic; keys past
seqlen_k arrive as zeros. The math is the same code. The REPAIR launch (below) always loads
through pointers: it rarely has work, and each descriptor is encoded on the host at every launch.

Non-finite V at hidden keys (causal): in a tile that crosses the diagonal a hidden key's P is 0,
but 0 * NaN and 0 * inf are NaN inside P V, so a NaN or inf in V at a key a row cannot see
would reach the row. Keeping such V out of the product in every masked tile costs the fast path
10-35% (V must pass through registers; ablations/NOTES.md), so it is done only where needed: a
second launch (REPAIR) recomputes just the row blocks that may hold a leak, with V sanitised in
the masked tiles and NaN put back where a row does see a non-finite V. Which blocks, two ways (a
tile choice, `TileConfig.nan_flags`, since each is faster for some tiles; ablations/NOTES.md):
  NAN_FLAGS: the main launch records, per row block, whether its output holds a NaN (one
    reduction over the accumulator in the epilogue); REPAIR reads the flags.
  otherwise: REPAIR reads each row block's first output row, and the main launch checks
    nothing. That row is enough: every row of a block folds the same masked tiles, and a key
    hidden from some row is hidden from the block's first row too (query i sees key j iff
    j <= i + diag), whose P there is 0, so a leaked NaN or +-inf of V[:, d] always makes the
    first row's column d NaN (0 * NaN, 0 * inf).
"""
import triton
import triton.language as tl

from .launch_cache import CachedLaunch
from .launch_order import LONGEST_FIRST_MIN_KEYS, heaviest_first
from .tma import row_descriptors

LOG2E = 1.4426950408889634  # 1 / ln 2
LN2 = 0.6931471805599453  # ln 2
# row blocks one REPAIR program checks: small enough that a call whose every row block needs
# the recompute (NaN in Q, say) recomputes in parallel, with at most 16 row blocks per program
REPAIR_CHUNK = 16


@triton.jit
def _visible_key_range(start_m, seqlen_q, seqlen_k,
                       BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, IS_CAUSAL: tl.constexpr):
    """Keys [0, full_end) are visible to every row of the block and need no mask; keys
    [full_end, hi) need one; keys >= hi are invisible to the whole block (never loaded)."""
    if IS_CAUSAL:
        diag = seqlen_k - seqlen_q  # query i sees key j iff j <= i + diag
        all_rows_see = tl.minimum(tl.maximum(start_m + diag + 1, 0), seqlen_k)
        hi = tl.minimum(tl.maximum(start_m + BLOCK_M + diag, 0), seqlen_k)
    else:
        all_rows_see = seqlen_k
        hi = seqlen_k
    full_end = (all_rows_see // BLOCK_N) * BLOCK_N
    return full_end, hi


@triton.jit
def _tile_keys(K_tile_ptrs, KD, off_b, off_hkv, start_n, offs_n, seqlen_k,
               MASK: tl.constexpr, BLOCK_N: tl.constexpr, HEAD_DIM: tl.constexpr,
               TMA: tl.constexpr):
    """K_j^T (D, BLOCK_N); keys past seqlen_k are zeros."""
    if TMA:  # tensor descriptors: keys past seqlen_k arrive as zeros, no load mask
        kT = tl.trans(KD.load([off_b, off_hkv, start_n, 0]).reshape(BLOCK_N, HEAD_DIM))
    elif MASK:
        kT = tl.load(K_tile_ptrs, mask=(start_n + offs_n < seqlen_k)[None, :], other=0.0)
    else:
        kT = tl.load(K_tile_ptrs)
    return kT


@triton.jit
def _tile_scores(q, kT, start_n, offs_m, offs_n, seqlen_q, seqlen_k,
                 MASK: tl.constexpr, IS_CAUSAL: tl.constexpr, INPUT_PRECISION: tl.constexpr):
    """S_ij = Q_i K_j^T, raw (unscaled); with MASK, -inf where a key is past seqlen_k or
    (causal) hidden from the row."""
    s = tl.dot(q, kT, input_precision=INPUT_PRECISION)  # (BLOCK_M, BLOCK_N)
    if MASK:
        keys = start_n + offs_n
        if IS_CAUSAL:
            # the causal compare alone: a row i < seqlen_q sees keys j <= i + seqlen_k - seqlen_q
            # <= seqlen_k - 1, never one past seqlen_k (rows past seqlen_q are not stored)
            visible = keys[None, :] <= offs_m[:, None] + (seqlen_k - seqlen_q)
        else:
            visible = (keys < seqlen_k)[None, :]
        s = tl.where(visible, s, float("-inf"))
    return s


@triton.jit
def _tile_values(V_tile_ptrs, VD, off_b, off_hkv, start_n, offs_n, seqlen_k,
                 MASK: tl.constexpr, BLOCK_N: tl.constexpr, HEAD_DIM: tl.constexpr,
                 TMA: tl.constexpr):
    """V_j (BLOCK_N, D); rows past seqlen_k are zeros."""
    if TMA:
        v = VD.load([off_b, off_hkv, start_n, 0]).reshape(BLOCK_N, HEAD_DIM)
    elif MASK:
        v = tl.load(V_tile_ptrs, mask=(start_n + offs_n < seqlen_k)[:, None], other=0.0)
    else:
        v = tl.load(V_tile_ptrs)
    return v


@triton.jit
def _fold_tile(m_i, l_i, acc, s, v, start_n, offs_m, offs_n, seqlen_q, seqlen_k, qk_scale,
               DEFER_NORM: tl.constexpr, SPLIT_Q: tl.constexpr, KEY_SLICES: tl.constexpr,
               BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, HEAD_DIM: tl.constexpr,
               INPUT_PRECISION: tl.constexpr, SANITIZE_V: tl.constexpr):
    """Fold one tile's raw scores S_ij and values V_j into the running (m_i, l_i, acc).

    The max is taken in raw units and the scale applied after the subtraction, so exp2's
    argument is exact where it matters (s == m gives exp2(0) = 1). Scaling first lets the
    compiler fuse s * qk_scale - m into one fma whose unrounded product differs from the
    rounded max by up to half an ulp of s * qk_scale: 8192 for logits near 2e11, enough to
    overflow exp2 (seen on the H200 with all-equal bfloat16 inputs of 133120)."""
    if SANITIZE_V:
        # Row i sees a prefix of the tile's keys, so it sees a non-finite V[:, d] iff the first
        # such key of column d is visible to it: zero those V, put NaN back after the update.
        v_finite = tl.abs(v) < float("inf")  # False for NaN too
        first_bad_key = tl.min(tl.where(v_finite, seqlen_k, (start_n + offs_n)[:, None]), 0)
        v = tl.where(v_finite, v, 0.0)

    if SPLIT_Q:
        m_new = tl.maximum(m_i, tl.max(s, 1))
        m_use = tl.where(m_new == float("-inf"), 0.0, m_new)  # a row with nothing visible yet
        p = tl.math.exp2((s - m_use[:, None]) * qk_scale)
        l_tile = tl.sum(p, 1)
        if DEFER_NORM:
            pv = tl.dot(p.to(v.dtype), v, input_precision=INPUT_PRECISION)  # (BLOCK_M, D)
    else:
        SLICE: tl.constexpr = BLOCK_N // KEY_SLICES
        s3 = tl.reshape(s, (BLOCK_M, KEY_SLICES, SLICE))
        m_s = tl.max(s3, 2)  # (BLOCK_M, KEY_SLICES): each slice's own max
        m_s_use = tl.where(m_s == float("-inf"), 0.0, m_s)
        p3 = tl.math.exp2((s3 - m_s_use[:, :, None]) * qk_scale)
        l_s = tl.sum(p3, 2)  # each slice's own sum
        v3 = tl.reshape(v, (KEY_SLICES, SLICE, HEAD_DIM))
        o_s = tl.dot(tl.permute(p3, (1, 0, 2)).to(v.dtype), v3,
                     input_precision=INPUT_PRECISION)  # (KEY_SLICES, BLOCK_M, D) partial outputs
        # merge the slices: the split-K communication
        m_new = tl.maximum(m_i, tl.max(m_s, 1))
        m_use = tl.where(m_new == float("-inf"), 0.0, m_new)
        w = tl.math.exp2((m_s - m_use[:, None]) * qk_scale)  # (BLOCK_M, KEY_SLICES)
        l_tile = tl.sum(w * l_s, 1)
        if DEFER_NORM:
            pv = tl.sum(o_s * tl.permute(w, (1, 0))[:, :, None], 0)

    alpha = tl.math.exp2((m_i - m_use) * qk_scale)
    l_new = alpha * l_i + l_tile
    if DEFER_NORM:
        acc = acc * alpha[:, None] + pv
    else:
        # acc = (l_i * alpha * acc + P_ij V_j) / l_new, with 1/l_new applied to P (split-K: to
        # the slice weights) before the product, so that the rescaled acc is the dot's
        # accumulator (wgmma accumulates in place) rather than a second tile added to it.
        # A row with l_new == 0 has seen nothing: its P is 0 and acc stays 0.
        inv_l_new = 1.0 / tl.where(l_new == 0.0, 1.0, l_new)
        acc = acc * (l_i * alpha * inv_l_new)[:, None]
        if SPLIT_Q:
            p_n = p * inv_l_new[:, None]  # P_ij / l_new, in [0, 1]
            acc = tl.dot(p_n.to(v.dtype), v, acc, input_precision=INPUT_PRECISION)
        else:
            w_n = w * inv_l_new[:, None]  # the slice weights over l_new
            acc += tl.sum(o_s * tl.permute(w_n, (1, 0))[:, :, None], 0)
    if SANITIZE_V:
        # after the update, so the product and its accumulation are the main launch's own
        # code and a row that sees no non-finite V gets the same bits as there
        sees_bad = first_bad_key[None, :] <= offs_m[:, None] + (seqlen_k - seqlen_q)
        acc = tl.where(sees_bad, float("nan"), acc)
    return m_new, l_new, acc


@triton.jit
def _online_softmax_step(m_i, l_i, acc, q, K_tile_ptrs, V_tile_ptrs, KD, VD, off_b, off_hkv,
                         start_n, offs_m, offs_n, seqlen_q, seqlen_k, qk_scale,
                         MASK: tl.constexpr, IS_CAUSAL: tl.constexpr, DEFER_NORM: tl.constexpr,
                         SPLIT_Q: tl.constexpr, KEY_SLICES: tl.constexpr,
                         BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, HEAD_DIM: tl.constexpr,
                         INPUT_PRECISION: tl.constexpr, SANITIZE_V: tl.constexpr,
                         TMA: tl.constexpr):
    """Fold one K/V tile (keys start_n .. start_n + BLOCK_N) into the running (m_i, l_i, acc)."""
    kT = _tile_keys(K_tile_ptrs, KD, off_b, off_hkv, start_n, offs_n, seqlen_k, MASK, BLOCK_N,
                    HEAD_DIM, TMA)
    v = _tile_values(V_tile_ptrs, VD, off_b, off_hkv, start_n, offs_n, seqlen_k, MASK, BLOCK_N,
                     HEAD_DIM, TMA)
    s = _tile_scores(q, kT, start_n, offs_m, offs_n, seqlen_q, seqlen_k, MASK, IS_CAUSAL,
                     INPUT_PRECISION)
    return _fold_tile(m_i, l_i, acc, s, v, start_n, offs_m, offs_n, seqlen_q, seqlen_k,
                      qk_scale, DEFER_NORM, SPLIT_Q, KEY_SLICES, BLOCK_M, BLOCK_N, HEAD_DIM,
                      INPUT_PRECISION, SANITIZE_V)


@triton.jit
def _attn_fwd_row_block(Q, K, V, O, O_RES, LSE, M, L, FLAGS, KD, VD, block_index, start_m,
                        off_b, off_h, off_hkv,
                        stride_qb, stride_qh, stride_qm, stride_qd,
                        stride_kb, stride_kh, stride_kn, stride_kd,
                        stride_vb, stride_vh, stride_vn, stride_vd,
                        stride_ob, stride_oh, stride_om, stride_od,
                        stride_lb, stride_lh,
                        seqlen_q, seqlen_k, qk_scale,
                        IS_CAUSAL: tl.constexpr, DEFER_NORM: tl.constexpr, SPLIT_Q: tl.constexpr,
                        KEY_SLICES: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                        HEAD_DIM: tl.constexpr, INPUT_PRECISION: tl.constexpr,
                        REPAIR: tl.constexpr, TMA: tl.constexpr, STORE_O_RES: tl.constexpr,
                        NAN_FLAGS: tl.constexpr):
    """Attention for query rows start_m .. start_m + BLOCK_M of one (batch, head).
    REPAIR: V sanitised in the masked tiles (see the module docstring); otherwise a causal call
    with NAN_FLAGS sets this row block's flag (block_index) iff its output holds a NaN.
    STORE_O_RES: O_RES gets O's rounding residual, O - float(O as stored), in O's dtype (for
    the backward's Delta)."""
    offs_m = start_m + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, HEAD_DIM)
    row_ok = offs_m < seqlen_q

    q_base = Q + off_b.to(tl.int64) * stride_qb + off_h.to(tl.int64) * stride_qh
    k_base = K + off_b.to(tl.int64) * stride_kb + off_hkv.to(tl.int64) * stride_kh
    v_base = V + off_b.to(tl.int64) * stride_vb + off_hkv.to(tl.int64) * stride_vh
    q = tl.load(q_base + offs_m[:, None] * stride_qm + offs_d[None, :] * stride_qd,
                mask=row_ok[:, None], other=0.0)  # (BLOCK_M, D)
    K_ptrs = k_base + offs_n[None, :] * stride_kn + offs_d[:, None] * stride_kd  # (D, BLOCK_N)
    V_ptrs = v_base + offs_n[:, None] * stride_vn + offs_d[None, :] * stride_vd  # (BLOCK_N, D)

    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], tl.float32)

    full_end, hi = _visible_key_range(start_m, seqlen_q, seqlen_k, BLOCK_M, BLOCK_N, IS_CAUSAL)
    for start_n in range(0, full_end, BLOCK_N):
        m_i, l_i, acc = _online_softmax_step(
            m_i, l_i, acc, q, K_ptrs + start_n * stride_kn, V_ptrs + start_n * stride_vn,
            KD, VD, off_b, off_hkv, start_n, offs_m, offs_n, seqlen_q, seqlen_k, qk_scale,
            False, IS_CAUSAL, DEFER_NORM, SPLIT_Q, KEY_SLICES, BLOCK_M, BLOCK_N, HEAD_DIM,
            INPUT_PRECISION, False, TMA)
    for start_n in range(full_end, hi, BLOCK_N):
        m_i, l_i, acc = _online_softmax_step(
            m_i, l_i, acc, q, K_ptrs + start_n * stride_kn, V_ptrs + start_n * stride_vn,
            KD, VD, off_b, off_hkv, start_n, offs_m, offs_n, seqlen_q, seqlen_k, qk_scale,
            True, IS_CAUSAL, DEFER_NORM, SPLIT_Q, KEY_SLICES, BLOCK_M, BLOCK_N, HEAD_DIM,
            INPUT_PRECISION, IS_CAUSAL and REPAIR, TMA)

    sees_a_key = l_i > 0.0
    if DEFER_NORM:
        acc = acc / tl.where(sees_a_key, l_i, 1.0)[:, None]  # the one deferred division
        log2_l = tl.math.log2(tl.where(sees_a_key, l_i, 1.0))
        lse = tl.where(sees_a_key, (m_i * qk_scale + log2_l) * 0.6931471805599453,  # ln 2
                       float("-inf"))
        tl.store(LSE + off_b * stride_lb + off_h * stride_lh + offs_m, lse, mask=row_ok)
    else:
        stat = off_b * stride_lb + off_h * stride_lh + offs_m
        tl.store(M + stat, m_i * qk_scale * 0.6931471805599453, mask=row_ok)  # natural-log units
        tl.store(L + stat, l_i, mask=row_ok)
    if IS_CAUSAL and not REPAIR and NAN_FLAGS:  # a NaN may be a hidden key's 0 * NaN
        tl.store(FLAGS + block_index, tl.max((acc != acc).to(tl.int32)))
    o_rows = (off_b.to(tl.int64) * stride_ob + off_h.to(tl.int64) * stride_oh
              + offs_m[:, None] * stride_om + offs_d[None, :] * stride_od)
    o = acc.to(O.dtype.element_ty)
    tl.store(O + o_rows, o, mask=row_ok[:, None])
    if STORE_O_RES:
        tl.store(O_RES + o_rows, (acc - o.to(tl.float32)).to(O.dtype.element_ty),
                 mask=row_ok[:, None])


@triton.jit
def _needs_repair(O, FLAGS, blocks, row_blocks, heads_q, n_blocks, stride_ob, stride_oh,
                  stride_om, stride_od, BLOCK_M: tl.constexpr, HEAD_DIM: tl.constexpr,
                  NAN_FLAGS: tl.constexpr):
    """For each row block in `blocks` (numbered (batch, head, row block) in order), 1 if it may
    hold a leaked NaN: its flag, or (not NAN_FLAGS) a NaN in its first output row."""
    in_range = blocks < n_blocks
    if NAN_FLAGS:
        return tl.load(FLAGS + blocks, mask=in_range, other=0)
    off_bh = blocks // row_blocks
    first_rows = (O + (off_bh // heads_q).to(tl.int64) * stride_ob
                  + (off_bh % heads_q).to(tl.int64) * stride_oh
                  + ((blocks % row_blocks) * BLOCK_M).to(tl.int64) * stride_om)
    offs_d = tl.arange(0, HEAD_DIM)
    o = tl.load(first_rows[:, None] + offs_d[None, :] * stride_od, mask=in_range[:, None],
                other=0.0).to(tl.float32)  # float32: the interpreter keeps bf16 as raw bits
    return tl.max((o != o).to(tl.int32), 1)


@triton.jit
def _attn_fwd(Q, K, V, O, O_RES, LSE, M, L, FLAGS, KD, VD,
              stride_qb, stride_qh, stride_qm, stride_qd,
              stride_kb, stride_kh, stride_kn, stride_kd,
              stride_vb, stride_vh, stride_vn, stride_vd,
              stride_ob, stride_oh, stride_om, stride_od,
              stride_lb, stride_lh,
              heads_q, group_size, seqlen_q, seqlen_k, qk_scale, n_blocks,
              IS_CAUSAL: tl.constexpr, DEFER_NORM: tl.constexpr, SEQ_PARALLEL: tl.constexpr,
              SPLIT_Q: tl.constexpr, KEY_SLICES: tl.constexpr, BLOCK_M: tl.constexpr,
              BLOCK_N: tl.constexpr, HEAD_DIM: tl.constexpr, INPUT_PRECISION: tl.constexpr,
              REPAIR: tl.constexpr, REPAIR_CHUNK: tl.constexpr, TMA: tl.constexpr,
              STORE_O_RES: tl.constexpr, NAN_FLAGS: tl.constexpr):
    row_blocks = tl.cdiv(seqlen_q, BLOCK_M)  # FLAGS: one per (batch, head, row block)
    if REPAIR:
        # A few programs, each checking REPAIR_CHUNK row blocks at once; one that finds a
        # possible leak recomputes those of its blocks in turn (rare: NaN in the output).
        first = tl.program_id(0) * REPAIR_CHUNK
        chunk = tl.arange(0, REPAIR_CHUNK)
        needs = _needs_repair(O, FLAGS, first + chunk, row_blocks, heads_q, n_blocks, stride_ob,
                              stride_oh, stride_om, stride_od, BLOCK_M, HEAD_DIM, NAN_FLAGS)
        if tl.max(needs) != 0:
            for block in range(first, tl.minimum(first + REPAIR_CHUNK, n_blocks)):
                off_bh = block // row_blocks
                off_h = off_bh % heads_q
                if tl.sum(tl.where(chunk == block - first, needs, 0)) != 0:
                    _attn_fwd_row_block(Q, K, V, O, O_RES, LSE, M, L, FLAGS, KD, VD, block,
                                        (block % row_blocks) * BLOCK_M, off_bh // heads_q,
                                        off_h, off_h // group_size,
                                        stride_qb, stride_qh, stride_qm, stride_qd,
                                        stride_kb, stride_kh, stride_kn, stride_kd,
                                        stride_vb, stride_vh, stride_vn, stride_vd,
                                        stride_ob, stride_oh, stride_om, stride_od, stride_lb,
                                        stride_lh, seqlen_q, seqlen_k, qk_scale, IS_CAUSAL,
                                        DEFER_NORM, SPLIT_Q, KEY_SLICES, BLOCK_M, BLOCK_N,
                                        HEAD_DIM, INPUT_PRECISION, True, TMA, STORE_O_RES,
                                        NAN_FLAGS)
        return
    if SEQ_PARALLEL:
        off_bh = tl.program_id(1)
        row_block = tl.program_id(0)
        if IS_CAUSAL and seqlen_k >= LONGEST_FIRST_MIN_KEYS:  # most keys first
            off_bh, row_block = heaviest_first(0, row_blocks, 1, seqlen_k, HEAD_DIM, 2)
    else:
        off_bh = tl.program_id(0)
    off_b = off_bh // heads_q
    off_h = off_bh % heads_q
    off_hkv = off_h // group_size  # GQA/MQA: query head h reads kv head h // group_size
    first_block = off_bh * row_blocks

    if SEQ_PARALLEL:
        _attn_fwd_row_block(Q, K, V, O, O_RES, LSE, M, L, FLAGS, KD, VD,
                            first_block + row_block, row_block * BLOCK_M, off_b, off_h, off_hkv,
                            stride_qb, stride_qh, stride_qm, stride_qd,
                            stride_kb, stride_kh, stride_kn, stride_kd,
                            stride_vb, stride_vh, stride_vn, stride_vd,
                            stride_ob, stride_oh, stride_om, stride_od, stride_lb, stride_lh,
                            seqlen_q, seqlen_k, qk_scale, IS_CAUSAL, DEFER_NORM, SPLIT_Q,
                            KEY_SLICES, BLOCK_M, BLOCK_N, HEAD_DIM, INPUT_PRECISION, False, TMA,
                            STORE_O_RES, NAN_FLAGS)
    else:
        for start_m in range(0, seqlen_q, BLOCK_M):
            _attn_fwd_row_block(Q, K, V, O, O_RES, LSE, M, L, FLAGS, KD, VD,
                                first_block + start_m // BLOCK_M, start_m, off_b, off_h, off_hkv,
                                stride_qb, stride_qh, stride_qm, stride_qd,
                                stride_kb, stride_kh, stride_kn, stride_kd,
                                stride_vb, stride_vh, stride_vn, stride_vd,
                                stride_ob, stride_oh, stride_om, stride_od, stride_lb, stride_lh,
                                seqlen_q, seqlen_k, qk_scale, IS_CAUSAL, DEFER_NORM, SPLIT_Q,
                                KEY_SLICES, BLOCK_M, BLOCK_N, HEAD_DIM, INPUT_PRECISION, False, TMA,
                                STORE_O_RES, NAN_FLAGS)


_ATTN_FWD = CachedLaunch(_attn_fwd)  # host time: kernels/launch_cache.py


def attn_fwd(q, k, v, causal, softmax_scale, variant, config, o_residual=False):
    """Launch the forward kernel. q (B, Hq, Sq, D), k and v (B, Hkv, Sk, D), already validated.

    Returns (o, stats, o_res): stats is (lse,) when variant.defer_norm, else (m, l), each
    float32 (B, Hq, Sq) with m in natural-log units. o_res is None unless o_residual and o is
    float16/bfloat16: then it is O - float(o) in o's dtype, O being the float32 output before
    rounding, so the backward's Delta = rowsum(dO * O) need not take O from o alone (with
    heavy-tailed values dP - Delta cancels and magnifies o's rounding).
    """
    import torch

    batch, heads_q, seqlen_q, head_dim = q.shape
    heads_kv, seqlen_k = k.shape[1], k.shape[2]
    o = torch.empty_like(q, memory_format=torch.contiguous_format)
    stat_shape = (batch, heads_q, seqlen_q)
    if variant.defer_norm:
        stats = (torch.empty(stat_shape, device=q.device, dtype=torch.float32),)
        lse, m, l = stats[0], stats[0], stats[0]  # m and l are not written
    else:
        stats = tuple(torch.empty(stat_shape, device=q.device, dtype=torch.float32) for _ in range(2))
        m, l = stats
        lse = m  # not written
    o_res = torch.empty_like(o) if o_residual and q.dtype != torch.float32 else None
    row_blocks = triton.cdiv(seqlen_q, config.block_m)
    n_blocks = batch * heads_q * row_blocks
    # causal with nan_flags: one flag per row block, set by the main launch where the output
    # holds a NaN
    flags = torch.empty(n_blocks if causal and config.nan_flags else 1, device=q.device,
                        dtype=torch.int32)
    main_grid = (row_blocks, batch * heads_q) if variant.seq_parallel else (batch * heads_q,)
    repair_grid = (triton.cdiv(n_blocks, REPAIR_CHUNK),)
    kd, vd = row_descriptors((k, v), config.block_n) if config.tma else (None, None)
    for repair in (False, True) if causal else (False,):
        # REPAIR rarely has work: pointer loads, no descriptors to encode on the host
        tma = config.tma and not repair
        _ATTN_FWD[repair_grid if repair else main_grid](
            q, k, v, o, o if o_res is None else o_res, lse, m, l, flags, kd if tma else None,
            vd if tma else None,
            *q.stride(), *k.stride(), *v.stride(), *o.stride(), stats[0].stride(0),
            stats[0].stride(1), heads_q, heads_q // heads_kv, seqlen_q, seqlen_k,
            softmax_scale * LOG2E, n_blocks,
            IS_CAUSAL=causal, DEFER_NORM=variant.defer_norm, SEQ_PARALLEL=variant.seq_parallel,
            SPLIT_Q=variant.split_q, KEY_SLICES=config.key_slices, BLOCK_M=config.block_m,
            BLOCK_N=config.block_n, HEAD_DIM=head_dim, INPUT_PRECISION=config.input_precision,
            REPAIR=repair, REPAIR_CHUNK=REPAIR_CHUNK, TMA=tma, STORE_O_RES=o_res is not None,
            NAN_FLAGS=config.nan_flags,
            num_warps=config.num_warps,
            num_stages=config.num_stages,
            maxnreg=config.max_registers or None,
        )
    return o, stats, o_res
