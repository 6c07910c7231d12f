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
  not DEFER_NORM (FA1, Algorithm 1 of the FA1 paper: O normalised at every tile):
    O_i    = acc / l_i                               # the last tile's normalisation
    acc    = (l_i * alpha) * O_i + P_ij V_j
    after the loop: O_i = acc / l_i, and m_i * softmax_scale and l_i are stored separately.
      (Each tile's division is done at the start of the next, so the product's output is
      carried as it is; l_i * alpha * O_i is the dot's accumulator, so wgmma accumulates in
      place; P enters the product unscaled, its largest entry exactly 1. D47, D97.)

SPLIT_Q off (split-K): each K/V tile is cut into KEY_SLICES slices of keys. Every slice computes
its own max m_s, sum l_s and partial output O_s = exp2((S_s - m_s) c) V_s independently; the
slices are then merged (m_tile = max m_s, weights exp2((m_s - m_new) c)), which is the cross-slice
communication that FA1's split-K warp partitioning pays at every tile. Triton picks the warp
mapping itself, so this reproduces split-K's data flow, not its exact warp assignment.

SEQ_PARALLEL (FA2): grid (row blocks, batch * heads), one program per row block (causal:
launched longest first from LONGEST_FIRST_MIN_KEYS keys, kernels/launch_order.py). The K/V
tiles are the inner loop, and a row block's state (m_i, l_i, acc) stays on chip from its first
tile to its last.

not SEQ_PARALLEL (FA1's schedule: csrc/flash_attn/src/fmha_fprop_kernel_1xN.h and
fmha_fwd_launch_template.h in flash-attention before FlashAttention-2): the loops are swapped.
The K/V tiles are the outer loop; K_j and V_j are loaded once and folded into every query row
block that sees them, one row block after another (FA1 stepped 16 rows at a time; here
BLOCK_M). Between tiles a row block's state waits in HBM: its float32 acc, m_i and l_i are read
from a scratch (FA1's o_tmp) at every tile after its first and written back at every tile
before its last, and the last tile it sees finalizes it (O = acc / l_i; DEFER_NORM: L_i
stored; not DEFER_NORM: m_i and l_i stored). FA1 kept O normalised and
one lse a row between tiles; the scratch holds the variant's own (acc, m_i, l_i) instead, so
every row's arithmetic is the same as with SEQ_PARALLEL and o and L are bitwise equal. Causal:
a tile visits only the row blocks that see some of its keys; row blocks that see no key at all
(seqlen_q > seqlen_k) get O = 0, L = -inf without a tile.
  Grid (batch * heads, splits), TileConfig.fa1_splits: split s owns row blocks s, s + splits,
s + 2 splits, ... (interleaved, as FA1's blockIdx.z took query steps blockIdx.z, + gridDim.z,
...), and loads every K/V tile its row blocks see. 0, the default, takes FA1's launcher's
heuristic (kernels/plan/fa1_launch.py), which adds splits to fill the GPU's waves, as the FA1 the
FA2 paper timed did (D90); 1 is one program per (batch, head), the paper's prose ("parallel
over batch and heads"), kept as a reference grid.
  HBM traffic per (batch, head) with N = seqlen_q = seqlen_k, D = head_dim, Bc = BLOCK_N and
2-byte inputs: K and V read once (4 N D bytes; once a split), O written once (2 N D), and at each
of the N / Bc tiles Q read once (2 N D) and the float32 partial output read and written
(8 N D, plus 16 N for m_i and l_i): about 10 N^2 D / Bc bytes, halved by causal masking. Its
4 N^2 D FLOPs make 0.4 Bc FLOP a byte (26 at Bc = 64), against an H200's ~165 (794 TFLOP/s
over 4.8 TB/s): HBM-bound unless the scratch of the heads in flight stays in the 50 MB L2. The
K/V-inner schedule reads K and V once a row block, 4 N^2 D / Br bytes: Br FLOP a byte.

Causal masking is bottom-right aligned: query i sees key j iff j <= i + (seqlen_k - seqlen_q).
K/V tiles wholly above the diagonal are never visited; only tiles that cross the diagonal or the
end of the keys (FA1's schedule: the keys' last tile, whole or not) compute a mask, and causal
ones the causal compare alone (it hides every key past seqlen_k too). Masked scores are -inf.
A row that sees no key gets O = 0 and L = -inf.

Head dims that are not tile widths (D49, D60): a tile's head dimension is a power of two
(tl.arange, tl.dot). A head_dim that is not one is carried either padded to one tile of
BLOCK_D = block_d(head_dim) columns (the padding loaded as 0, adding exactly 0 to every dot
over D, never stored), or, where that wastes more columns, in two column chunks of BLOCK_D and
BLOCK_D1 columns (kernels.plan.tiles.head_chunks: BLOCK_D the largest power of two below head_dim,
BLOCK_D1 the rest's tile, padded as before): 96 = 64 + 32, 192 = 128 + 64.
    S_ij = Q_i[:, :D0] K_j[:, :D0]^T + Q_i[:, D0:] K_j[:, D0:]^T     (the second dot accumulates
                                                                      into the first's result)
and v's head dim likewise (BLOCK_DV, BLOCK_DV1): O_i = [O_0 | O_1], two accumulators acc and
acc1 folded with the same P (P_ij V_j[:, :D0] and P_ij V_j[:, D0:]). BLOCK_D1 == 0 (a tile
width, or padding as cheap) compiles today's one-tile code.

TMA (a tile choice, `TileConfig.tma`, not one of FA2's changes): K and V tiles are loaded
through tensor descriptors (Hopper's TMA unit; KD, VD) instead of pointer arithmetic; keys past
seqlen_k, and a padded tile's columns past K's or V's head dim, arrive as zeros. A head dim in
two column chunks has a descriptor a chunk (KD1, VD1: boxes BLOCK_D1 and BLOCK_DV1 wide, loaded
at column BLOCK_D and BLOCK_DV of the same tensors; D62). The math is the same code, in both
schedules. The REPAIR launch (below) always loads through pointers: it rarely has work, and
each descriptor is encoded on the host at every launch.

Non-finite V at hidden keys (causal): in a tile that crosses the diagonal a hidden key's P is 0,
but 0 * NaN and 0 * inf are NaN inside P V, so a NaN or inf in V at a key a row cannot see
would reach the row. Keeping such V out of the product in every masked tile costs the fast path
10-35% (V must pass through registers; docs/decisions.md D02), so it is done only where needed: a
second launch (REPAIR) recomputes just the row blocks that may hold a leak (K/V inner whatever
SEQ_PARALLEL says: each row's arithmetic is the same), with V sanitised in the masked tiles and
NaN put back where a row does see a non-finite V. Which blocks, two ways (a
tile choice, `TileConfig.nan_flags`, since each is faster for some tiles; decisions D04):
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
from .plan.fa1_launch import FA1_MAX_SPLITS, fa1_num_splits
from .plan.occupancy import sms_and_ctas_per_sm
from .plan.outputs import empty_outputs
from .plan.tiles import head_chunks
from .tma import chunk_descriptors

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
def _head_cols(mask, HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr, D_AXIS: tl.constexpr):
    """`mask` (a 2-D tile's, or a broadcastable part of one) and, where the tile's head
    dimension is padded (BLOCK_D > HEAD_DIM), the real columns: offs_d < HEAD_DIM along axis
    D_AXIS. Padded columns are loaded as 0 (so they add exactly 0 to every dot over D) and never
    stored; a head_dim that needs no padding compiles without the column mask. A second column
    chunk (D60) passes its own columns: HEAD_DIM - BLOCK_D of BLOCK_D1."""
    if BLOCK_D > HEAD_DIM:
        d_ok = tl.arange(0, BLOCK_D) < HEAD_DIM
        if D_AXIS == 0:
            mask = mask & d_ok[:, None]
        else:
            mask = mask & d_ok[None, :]
    return mask


@triton.jit
def _tile_keys(K_tile_ptrs, KD, off_b, off_hkv, start_n, offs_n, seqlen_k,
               MASK: tl.constexpr, BLOCK_N: tl.constexpr, HEAD_DIM: tl.constexpr,
               BLOCK_D: tl.constexpr, TMA: tl.constexpr, COL0: tl.constexpr):
    """K_j^T (BLOCK_D, BLOCK_N) of the column chunk from column COL0 (K_tile_ptrs point
    there; KD's box is BLOCK_D wide); keys past seqlen_k and padded columns are zeros."""
    if TMA:  # tensor descriptors: keys past seqlen_k and columns past K's arrive as zeros
        kT = tl.trans(KD.load([off_b, off_hkv, start_n, COL0]).reshape(BLOCK_N, BLOCK_D))
    elif MASK:
        kT = tl.load(K_tile_ptrs, other=0.0, mask=_head_cols(
            (start_n + offs_n < seqlen_k)[None, :], HEAD_DIM, BLOCK_D, 0))
    elif BLOCK_D > HEAD_DIM:
        kT = tl.load(K_tile_ptrs, mask=(tl.arange(0, BLOCK_D) < HEAD_DIM)[:, None], other=0.0)
    else:
        kT = tl.load(K_tile_ptrs)
    return kT


@triton.jit
def _tile_scores(q, kT, q1, kT1, start_n, offs_m, offs_n, seqlen_q, seqlen_k,
                 MASK: tl.constexpr, IS_CAUSAL: tl.constexpr, BLOCK_D1: tl.constexpr,
                 INPUT_PRECISION: tl.constexpr):
    """S_ij = Q_i K_j^T, raw (unscaled), over both column chunks (q1, kT1: the second, if
    BLOCK_D1); with MASK, -inf where a key is past seqlen_k or (causal) hidden from the row."""
    s = tl.dot(q, kT, input_precision=INPUT_PRECISION)  # (BLOCK_M, BLOCK_N)
    if BLOCK_D1 > 0:
        s = tl.dot(q1, kT1, s, input_precision=INPUT_PRECISION)
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
                 MASK: tl.constexpr, BLOCK_N: tl.constexpr, HEAD_DIM_V: tl.constexpr,
                 BLOCK_DV: tl.constexpr, TMA: tl.constexpr, COL0: tl.constexpr):
    """V_j (BLOCK_N, BLOCK_DV) of the column chunk from column COL0, as _tile_keys; rows past
    seqlen_k and padded columns are zeros."""
    if TMA:
        v = VD.load([off_b, off_hkv, start_n, COL0]).reshape(BLOCK_N, BLOCK_DV)
    elif MASK:
        v = tl.load(V_tile_ptrs, other=0.0, mask=_head_cols(
            (start_n + offs_n < seqlen_k)[:, None], HEAD_DIM_V, BLOCK_DV, 1))
    elif BLOCK_DV > HEAD_DIM_V:
        v = tl.load(V_tile_ptrs, mask=(tl.arange(0, BLOCK_DV) < HEAD_DIM_V)[None, :], other=0.0)
    else:
        v = tl.load(V_tile_ptrs)
    return v


@triton.jit
def _second_chunk_tiles(K1_tile_ptrs, V1_tile_ptrs, KD1, VD1, off_b, off_hkv, start_n, offs_n,
                        seqlen_k, MASK: tl.constexpr, BLOCK_N: tl.constexpr,
                        HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_D1: tl.constexpr,
                        HEAD_DIM_V: tl.constexpr, BLOCK_DV: tl.constexpr,
                        BLOCK_DV1: tl.constexpr, TMA: tl.constexpr):
    """(K1_j^T, V1_j): a K/V tile's second column chunks (D60), from column BLOCK_D of K and
    BLOCK_DV of V, through pointers or (TMA) descriptors of their own whose boxes are the
    chunks' widths (D62); 0 for a chunk that does not exist."""
    kT1 = 0
    v1 = 0
    if BLOCK_D1 > 0:
        kT1 = _tile_keys(K1_tile_ptrs, KD1, off_b, off_hkv, start_n, offs_n, seqlen_k, MASK,
                         BLOCK_N, HEAD_DIM - BLOCK_D, BLOCK_D1, TMA, BLOCK_D)
    if BLOCK_DV1 > 0:
        v1 = _tile_values(V1_tile_ptrs, VD1, off_b, off_hkv, start_n, offs_n, seqlen_k, MASK,
                          BLOCK_N, HEAD_DIM_V - BLOCK_DV, BLOCK_DV1, TMA, BLOCK_DV)
    return kT1, v1


@triton.jit
def _sanitized_values(v, start_n, offs_n, seqlen_k):
    """V_j with its non-finite values zeroed, and for each column d the first key of the tile
    whose V[:, d] is non-finite (seqlen_k if none). Row i sees a prefix of the tile's keys, so
    it sees a non-finite V[:, d] iff that key is visible to it (_nan_where_seen)."""
    v_finite = tl.abs(v) < float("inf")  # False for NaN too
    first_bad_key = tl.min(tl.where(v_finite, seqlen_k, (start_n + offs_n)[:, None]), 0)
    return tl.where(v_finite, v, 0.0), first_bad_key


@triton.jit
def _sanitized_chunks(v, v1, start_n, offs_n, seqlen_k, BLOCK_DV1: tl.constexpr):
    """_sanitized_values of V_j's column chunks: (v, first_bad_key, v1, first_bad_key1), v1
    and first_bad_key1 left as they are (0) where there is no second chunk."""
    v, first_bad_key = _sanitized_values(v, start_n, offs_n, seqlen_k)
    first_bad_key1 = 0
    if BLOCK_DV1 > 0:
        v1, first_bad_key1 = _sanitized_values(v1, start_n, offs_n, seqlen_k)
    return v, first_bad_key, v1, first_bad_key1


@triton.jit
def _nan_where_seen(acc, acc1, first_bad_key, first_bad_key1, offs_m, seqlen_q, seqlen_k,
                    BLOCK_DV1: tl.constexpr):
    """acc (and acc1, V's second column chunk, where BLOCK_DV1 > 0) with NaN in the columns
    where a row sees a non-finite V that _sanitized_values zeroed (causal: query i sees key j
    iff j <= i + seqlen_k - seqlen_q)."""
    diag = seqlen_k - seqlen_q
    acc = tl.where(first_bad_key[None, :] <= offs_m[:, None] + diag, float("nan"), acc)
    if BLOCK_DV1 > 0:
        acc1 = tl.where(first_bad_key1[None, :] <= offs_m[:, None] + diag, float("nan"), acc1)
    return acc, acc1


@triton.jit
def _slice_outputs(p3, v, KEY_SLICES: tl.constexpr, SLICE: tl.constexpr, BLOCK_DV: tl.constexpr,
                   INPUT_PRECISION: tl.constexpr):
    """Split-K: each key slice's partial output O_s = P_s V_s, (KEY_SLICES, BLOCK_M, BLOCK_DV)."""
    v3 = tl.reshape(v, (KEY_SLICES, SLICE, BLOCK_DV))
    return tl.dot(tl.permute(p3, (1, 0, 2)).to(v.dtype), v3, input_precision=INPUT_PRECISION)


@triton.jit
def _merge_slices(o_s, w):
    """Split-K: the slices' partial outputs weighted by w (BLOCK_M, KEY_SLICES) and summed."""
    return tl.sum(o_s * tl.permute(w, (1, 0))[:, :, None], 0)


@triton.jit
def _fold_tile(m_i, l_i, acc, acc1, s, v, v1, qk_scale, DEFER_NORM: tl.constexpr,
               SPLIT_Q: tl.constexpr, KEY_SLICES: tl.constexpr, BLOCK_M: tl.constexpr,
               BLOCK_N: tl.constexpr, BLOCK_DV: tl.constexpr, BLOCK_DV1: tl.constexpr,
               INPUT_PRECISION: tl.constexpr):
    """Fold one tile's raw scores S_ij and values V_j (BLOCK_N, BLOCK_DV; with BLOCK_DV1, v1 the
    next BLOCK_DV1 columns, into acc1) into the running (m_i, l_i, acc, acc1).

    The max is taken in raw units and the scale applied after the subtraction, so exp2's
    argument is exact where it matters (s == m gives exp2(0) = 1). Scaling first lets the
    compiler fuse s * qk_scale - m into one fma whose unrounded product differs from the
    rounded max by up to half an ulp of s * qk_scale: 8192 for logits near 2e11, enough to
    overflow exp2 (seen on the H200 with all-equal bfloat16 inputs of 133120)."""
    if SPLIT_Q:
        m_new = tl.maximum(m_i, tl.max(s, 1))
        m_use = tl.where(m_new == float("-inf"), 0.0, m_new)  # a row with nothing visible yet
        p = tl.math.exp2((s - m_use[:, None]) * qk_scale)
        l_tile = tl.sum(p, 1)
        if DEFER_NORM:
            pv = tl.dot(p.to(v.dtype), v, input_precision=INPUT_PRECISION)  # (BLOCK_M, Dv)
            if BLOCK_DV1 > 0:
                pv1 = tl.dot(p.to(v.dtype), v1, input_precision=INPUT_PRECISION)
    else:
        SLICE: tl.constexpr = BLOCK_N // KEY_SLICES
        s3 = tl.reshape(s, (BLOCK_M, KEY_SLICES, SLICE))
        m_s = tl.max(s3, 2)  # (BLOCK_M, KEY_SLICES): each slice's own max
        m_s_use = tl.where(m_s == float("-inf"), 0.0, m_s)
        p3 = tl.math.exp2((s3 - m_s_use[:, :, None]) * qk_scale)
        l_s = tl.sum(p3, 2)  # each slice's own sum
        o_s = _slice_outputs(p3, v, KEY_SLICES, SLICE, BLOCK_DV, INPUT_PRECISION)
        if BLOCK_DV1 > 0:
            o_s1 = _slice_outputs(p3, v1, KEY_SLICES, SLICE, BLOCK_DV1, INPUT_PRECISION)
        # merge the slices: the split-K communication
        m_new = tl.maximum(m_i, tl.max(m_s, 1))
        m_use = tl.where(m_new == float("-inf"), 0.0, m_new)
        w = tl.math.exp2((m_s - m_use[:, None]) * qk_scale)  # (BLOCK_M, KEY_SLICES)
        l_tile = tl.sum(w * l_s, 1)
        pv = _merge_slices(o_s, w)
        if BLOCK_DV1 > 0:
            pv1 = _merge_slices(o_s1, w)

    alpha = tl.math.exp2((m_i - m_use) * qk_scale)
    l_new = alpha * l_i + l_tile
    keep = alpha
    if not DEFER_NORM:
        # FA1's per-tile normalisation, O_i = acc / l_i, one tile late: acc is the sum the last
        # tile left (l_i O_i); O_i is formed here and taken back by l_i alpha, then the tile
        # adds P_ij V_j (the last tile's division is the epilogue's). So FA1 passes over acc
        # twice a tile where FA2 does once, the product's output is carried as it is (divided
        # right after the product, it spilled on sm_90) and P enters the product unscaled, its
        # largest entry exactly 1 (D97). A row with l_i == 0 has seen nothing: acc is 0.
        inv_l = 1.0 / tl.where(l_i == 0.0, 1.0, l_i)
        acc = acc * inv_l[:, None]
        if BLOCK_DV1 > 0:
            acc1 = acc1 * inv_l[:, None]
        keep = l_i * alpha
    if DEFER_NORM or not SPLIT_Q:
        acc = acc * keep[:, None] + pv
        if BLOCK_DV1 > 0:
            acc1 = acc1 * keep[:, None] + pv1
    else:  # the product accumulates onto the rescaled acc (D47)
        acc = tl.dot(p.to(v.dtype), v, acc * keep[:, None], input_precision=INPUT_PRECISION)
        if BLOCK_DV1 > 0:
            acc1 = tl.dot(p.to(v.dtype), v1, acc1 * keep[:, None],
                          input_precision=INPUT_PRECISION)
    return m_new, l_new, acc, acc1


@triton.jit
def _online_softmax_step(m_i, l_i, acc, acc1, q, q1, K_tile_ptrs, V_tile_ptrs, K1_tile_ptrs,
                         V1_tile_ptrs, KD, VD, KD1, VD1, off_b, off_hkv,
                         start_n, offs_m, offs_n, seqlen_q, seqlen_k, qk_scale,
                         MASK: tl.constexpr, IS_CAUSAL: tl.constexpr, DEFER_NORM: tl.constexpr,
                         SPLIT_Q: tl.constexpr, KEY_SLICES: tl.constexpr,
                         BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, HEAD_DIM: tl.constexpr,
                         BLOCK_D: tl.constexpr, BLOCK_D1: tl.constexpr,
                         HEAD_DIM_V: tl.constexpr, BLOCK_DV: tl.constexpr,
                         BLOCK_DV1: tl.constexpr,
                         INPUT_PRECISION: tl.constexpr, SANITIZE_V: tl.constexpr,
                         TMA: tl.constexpr):
    """Fold one K/V tile (keys start_n .. start_n + BLOCK_N) into the running (m_i, l_i, acc,
    acc1); the second column chunks' tiles (K1, V1) where BLOCK_D1, BLOCK_DV1 > 0."""
    kT = _tile_keys(K_tile_ptrs, KD, off_b, off_hkv, start_n, offs_n, seqlen_k, MASK, BLOCK_N,
                    HEAD_DIM, BLOCK_D, TMA, 0)
    v = _tile_values(V_tile_ptrs, VD, off_b, off_hkv, start_n, offs_n, seqlen_k, MASK, BLOCK_N,
                     HEAD_DIM_V, BLOCK_DV, TMA, 0)
    kT1, v1 = _second_chunk_tiles(K1_tile_ptrs, V1_tile_ptrs, KD1, VD1, off_b, off_hkv, start_n,
                                  offs_n, seqlen_k, MASK, BLOCK_N, HEAD_DIM, BLOCK_D, BLOCK_D1,
                                  HEAD_DIM_V, BLOCK_DV, BLOCK_DV1, TMA)
    if SANITIZE_V:
        # before the scores' product: V's sanitised tiles then get shared memory of their own,
        # not the K tiles' (the REPAIR builds that reused it were miscompiled by ptxas, D115)
        v, first_bad_key, v1, first_bad_key1 = _sanitized_chunks(v, v1, start_n, offs_n,
                                                                 seqlen_k, BLOCK_DV1)
    s = _tile_scores(q, kT, q1, kT1, start_n, offs_m, offs_n, seqlen_q, seqlen_k, MASK,
                     IS_CAUSAL, BLOCK_D1, INPUT_PRECISION)
    m_i, l_i, acc, acc1 = _fold_tile(m_i, l_i, acc, acc1, s, v, v1, qk_scale, DEFER_NORM,
                                     SPLIT_Q, KEY_SLICES, BLOCK_M, BLOCK_N, BLOCK_DV,
                                     BLOCK_DV1, INPUT_PRECISION)
    if SANITIZE_V:
        # after the update, so the product and its accumulation are the main launch's own
        # code and a row that sees no non-finite V gets the same bits as there
        acc, acc1 = _nan_where_seen(acc, acc1, first_bad_key, first_bad_key1, offs_m, seqlen_q,
                                    seqlen_k, BLOCK_DV1)
    return m_i, l_i, acc, acc1


@triton.jit
def _store_o(O, O_RES, o_head, acc, offs_m, row_ok, stride_om, stride_od, COL0: tl.constexpr,
             HEAD_DIM_V: tl.constexpr, BLOCK_DV: tl.constexpr, STORE_O_RES: tl.constexpr):
    """O's columns COL0 .. COL0 + BLOCK_DV (HEAD_DIM_V of them real) from acc, and with
    STORE_O_RES their rounding residual."""
    offs_d = COL0 + tl.arange(0, BLOCK_DV)
    o_rows = o_head + offs_m[:, None] * stride_om + offs_d[None, :] * stride_od
    o = acc.to(O.dtype.element_ty)
    o_ok = _head_cols(row_ok[:, None], HEAD_DIM_V, BLOCK_DV, 1)  # padded columns never stored
    tl.store(O + o_rows, o, mask=o_ok)
    if STORE_O_RES:
        tl.store(O_RES + o_rows, (acc - o.to(tl.float32)).to(O.dtype.element_ty), mask=o_ok)


@triton.jit
def _store_row_block(O, O_RES, LSE, M, L, FLAGS, acc, acc1, m_i, l_i, block_index, offs_m,
                     row_ok, off_b, off_h, stride_ob, stride_oh, stride_om, stride_od,
                     stride_lb, stride_lh, qk_scale, IS_CAUSAL: tl.constexpr,
                     DEFER_NORM: tl.constexpr, HEAD_DIM_V: tl.constexpr,
                     BLOCK_DV: tl.constexpr, BLOCK_DV1: tl.constexpr, REPAIR: tl.constexpr,
                     STORE_O_RES: tl.constexpr, NAN_FLAGS: tl.constexpr):
    """A row block's epilogue, after its last K/V tile: O = acc / l_i (DEFER_NORM: the one
    deferred division; not: the last tile's) and L_i, or (not DEFER_NORM) m_i and l_i; its NaN
    flag; O's rounding residual. O has V's head dimension, its columns from BLOCK_DV on in acc1
    where BLOCK_DV1 > 0."""
    sees_a_key = l_i > 0.0
    l_safe = tl.where(sees_a_key, l_i, 1.0)  # a row that sees no key: acc is 0
    acc = acc / l_safe[:, None]
    if BLOCK_DV1 > 0:
        acc1 = acc1 / l_safe[:, None]
    if DEFER_NORM:
        log2_l = tl.math.log2(l_safe)
        lse = tl.where(sees_a_key, (m_i * qk_scale + log2_l) * 0.6931471805599453,  # ln 2
                       float("-inf"))
        tl.store(LSE + off_b * stride_lb + off_h * stride_lh + offs_m, lse, mask=row_ok)
    else:
        stat = off_b * stride_lb + off_h * stride_lh + offs_m
        tl.store(M + stat, m_i * qk_scale * 0.6931471805599453, mask=row_ok)  # natural-log units
        tl.store(L + stat, l_i, mask=row_ok)
    if IS_CAUSAL and not REPAIR and NAN_FLAGS:  # a NaN may be a hidden key's 0 * NaN
        flag = FLAGS + block_index
        has_nan = tl.max((acc != acc).to(tl.int32))
        if BLOCK_DV1 > 0:
            has_nan = tl.maximum(has_nan, tl.max((acc1 != acc1).to(tl.int32)))
        tl.store(flag, has_nan)
    o_head = off_b.to(tl.int64) * stride_ob + off_h.to(tl.int64) * stride_oh
    _store_o(O, O_RES, o_head, acc, offs_m, row_ok, stride_om, stride_od, 0, HEAD_DIM_V,
             BLOCK_DV, STORE_O_RES)
    if BLOCK_DV1 > 0:
        _store_o(O, O_RES, o_head, acc1, offs_m, row_ok, stride_om, stride_od, BLOCK_DV,
                 HEAD_DIM_V - BLOCK_DV, BLOCK_DV1, STORE_O_RES)


@triton.jit
def _row_tile(rows, rows_ok, stride_d, COL0: tl.constexpr, COLS: tl.constexpr,
              BLOCK: tl.constexpr):
    """Columns COL0 .. COL0 + BLOCK of the rows that start at the pointers `rows`, (rows,
    BLOCK); rows not rows_ok and columns past COLS of the BLOCK (padding) are 0."""
    offs_d = COL0 + tl.arange(0, BLOCK)
    return tl.load(rows[:, None] + offs_d[None, :] * stride_d,
                   mask=_head_cols(rows_ok[:, None], COLS, BLOCK, 1), other=0.0)


@triton.jit
def _second_chunk_ptrs(k_base, v_base, offs_n, stride_kn, stride_kd, stride_vn, stride_vd,
                       BLOCK_D: tl.constexpr, BLOCK_D1: tl.constexpr, BLOCK_DV: tl.constexpr,
                       BLOCK_DV1: tl.constexpr):
    """Pointers to the first K/V tile's second column chunks (D60): K1^T (BLOCK_D1, BLOCK_N)
    from column BLOCK_D, V1 (BLOCK_N, BLOCK_DV1) from column BLOCK_DV; 0 for a chunk that does
    not exist."""
    K1_ptrs = 0
    V1_ptrs = 0
    if BLOCK_D1 > 0:
        offs_d1 = BLOCK_D + tl.arange(0, BLOCK_D1)
        K1_ptrs = k_base + offs_n[None, :] * stride_kn + offs_d1[:, None] * stride_kd
    if BLOCK_DV1 > 0:
        offs_dv1 = BLOCK_DV + tl.arange(0, BLOCK_DV1)
        V1_ptrs = v_base + offs_n[:, None] * stride_vn + offs_dv1[None, :] * stride_vd
    return K1_ptrs, V1_ptrs


@triton.jit
def _attn_fwd_row_block(Q, K, V, O, O_RES, LSE, M, L, FLAGS, KD, VD, KD1, VD1, block_index,
                        start_m,
                        off_b, off_h, off_hkv,
                        stride_qb, stride_qh, stride_qm, stride_qd,
                        stride_kb, stride_kh, stride_kn, stride_kd,
                        stride_vb, stride_vh, stride_vn, stride_vd,
                        stride_ob, stride_oh, stride_om, stride_od,
                        stride_lb, stride_lh,
                        seqlen_q, seqlen_k, qk_scale,
                        IS_CAUSAL: tl.constexpr, DEFER_NORM: tl.constexpr, SPLIT_Q: tl.constexpr,
                        KEY_SLICES: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                        HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_D1: tl.constexpr,
                        HEAD_DIM_V: tl.constexpr, BLOCK_DV: tl.constexpr,
                        BLOCK_DV1: tl.constexpr, INPUT_PRECISION: tl.constexpr,
                        REPAIR: tl.constexpr, TMA: tl.constexpr, STORE_O_RES: tl.constexpr,
                        NAN_FLAGS: tl.constexpr):
    """Attention for query rows start_m .. start_m + BLOCK_M of one (batch, head).
    REPAIR: V sanitised in the masked tiles (see the module docstring); otherwise a causal call
    with NAN_FLAGS sets this row block's flag (block_index) iff its output holds a NaN.
    STORE_O_RES: O_RES gets O's rounding residual, O - float(O as stored), in O's dtype (for
    the backward's Delta)."""
    offs_m = start_m + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, BLOCK_D)
    offs_dv = tl.arange(0, BLOCK_DV)
    row_ok = offs_m < seqlen_q

    q_base = Q + off_b.to(tl.int64) * stride_qb + off_h.to(tl.int64) * stride_qh
    k_base = K + off_b.to(tl.int64) * stride_kb + off_hkv.to(tl.int64) * stride_kh
    v_base = V + off_b.to(tl.int64) * stride_vb + off_hkv.to(tl.int64) * stride_vh
    q = tl.load(q_base + offs_m[:, None] * stride_qm + offs_d[None, :] * stride_qd,
                mask=_head_cols(row_ok[:, None], HEAD_DIM, BLOCK_D, 1),
                other=0.0)  # (BLOCK_M, BLOCK_D), padded columns 0
    K_ptrs = k_base + offs_n[None, :] * stride_kn + offs_d[:, None] * stride_kd  # (D, BLOCK_N)
    V_ptrs = v_base + offs_n[:, None] * stride_vn + offs_dv[None, :] * stride_vd  # (BLOCK_N, Dv)

    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, BLOCK_DV], tl.float32)
    q1 = 0  # the second column chunks (D60), where there are
    acc1 = 0
    if BLOCK_D1 > 0:
        q1 = _row_tile(q_base + offs_m * stride_qm, row_ok, stride_qd, BLOCK_D,
                       HEAD_DIM - BLOCK_D, BLOCK_D1)  # (BLOCK_M, BLOCK_D1)
    if BLOCK_DV1 > 0:
        acc1 = tl.zeros([BLOCK_M, BLOCK_DV1], tl.float32)
    K1_ptrs, V1_ptrs = _second_chunk_ptrs(k_base, v_base, offs_n, stride_kn, stride_kd,
                                          stride_vn, stride_vd, BLOCK_D, BLOCK_D1, BLOCK_DV,
                                          BLOCK_DV1)

    full_end, hi = _visible_key_range(start_m, seqlen_q, seqlen_k, BLOCK_M, BLOCK_N, IS_CAUSAL)
    for start_n in range(0, full_end, BLOCK_N):
        m_i, l_i, acc, acc1 = _online_softmax_step(
            m_i, l_i, acc, acc1, q, q1, K_ptrs + start_n * stride_kn,
            V_ptrs + start_n * stride_vn, K1_ptrs + start_n * stride_kn,
            V1_ptrs + start_n * stride_vn,
            KD, VD, KD1, VD1, off_b, off_hkv, start_n, offs_m, offs_n, seqlen_q, seqlen_k,
            qk_scale,
            False, IS_CAUSAL, DEFER_NORM, SPLIT_Q, KEY_SLICES, BLOCK_M, BLOCK_N, HEAD_DIM,
            BLOCK_D, BLOCK_D1, HEAD_DIM_V, BLOCK_DV, BLOCK_DV1, INPUT_PRECISION, False, TMA)
    for start_n in range(full_end, hi, BLOCK_N):
        m_i, l_i, acc, acc1 = _online_softmax_step(
            m_i, l_i, acc, acc1, q, q1, K_ptrs + start_n * stride_kn,
            V_ptrs + start_n * stride_vn, K1_ptrs + start_n * stride_kn,
            V1_ptrs + start_n * stride_vn,
            KD, VD, KD1, VD1, off_b, off_hkv, start_n, offs_m, offs_n, seqlen_q, seqlen_k,
            qk_scale,
            True, IS_CAUSAL, DEFER_NORM, SPLIT_Q, KEY_SLICES, BLOCK_M, BLOCK_N, HEAD_DIM,
            BLOCK_D, BLOCK_D1, HEAD_DIM_V, BLOCK_DV, BLOCK_DV1, INPUT_PRECISION,
            IS_CAUSAL and REPAIR, TMA)

    _store_row_block(O, O_RES, LSE, M, L, FLAGS, acc, acc1, m_i, l_i, block_index, offs_m,
                     row_ok, off_b, off_h, stride_ob, stride_oh, stride_om, stride_od,
                     stride_lb, stride_lh, qk_scale, IS_CAUSAL, DEFER_NORM, HEAD_DIM_V, BLOCK_DV,
                     BLOCK_DV1, REPAIR, STORE_O_RES, NAN_FLAGS)


@triton.jit
def _row_blocks_seeing(start_n, seqlen_q, seqlen_k, BLOCK_M: tl.constexpr,
                       BLOCK_N: tl.constexpr, IS_CAUSAL: tl.constexpr):
    """The inverse of _visible_key_range for the K/V tile at keys start_n .. start_n + BLOCK_N
    that ends before the keys do: row blocks >= first see some of its keys (start_n < hi); of
    those, row blocks < ends see none past it (hi <= start_n + BLOCK_N: their last tile), and
    row blocks >= unmasked see all of it (start_n + BLOCK_N <= full_end: no mask).
    first <= ends <= unmasked; without causal all three are 0."""
    if IS_CAUSAL:
        diag = seqlen_k - seqlen_q  # query i sees key j iff j <= i + diag
        first = tl.maximum(start_n - diag, 0) // BLOCK_M
        ends = tl.maximum(start_n + BLOCK_N - diag, 0) // BLOCK_M
        unmasked = tl.cdiv(tl.maximum(start_n + BLOCK_N - 1 - diag, 0), BLOCK_M)
    else:
        first = 0
        ends = 0
        unmasked = 0
    return first, ends, unmasked


@triton.jit
def _first_of_split(row_block, split, n_splits):
    """The first row block >= row_block of split `split`, which owns row blocks
    split, split + n_splits, ... (FA1's interleaving)."""
    return row_block + (split - row_block % n_splits + n_splits) % n_splits


@triton.jit
def _fold_kv_block(Q, O, O_RES, LSE, M, L, FLAGS, ACC_TMP, M_TMP, L_TMP, kT, v, first_bad_key,
                   kT1, v1, first_bad_key1, start_n, rb_lo, rb_hi, split, n_splits,
                   first_block, off_b, off_h,
                   stride_qb, stride_qh, stride_qm, stride_qd,
                   stride_ob, stride_oh, stride_om, stride_od, stride_lb, stride_lh,
                   seqlen_q, seqlen_k, qk_scale,
                   MASK: tl.constexpr, LAST: tl.constexpr, IS_CAUSAL: tl.constexpr,
                   DEFER_NORM: tl.constexpr, SPLIT_Q: tl.constexpr, KEY_SLICES: tl.constexpr,
                   BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, HEAD_DIM: tl.constexpr,
                   BLOCK_D: tl.constexpr, BLOCK_D1: tl.constexpr, HEAD_DIM_V: tl.constexpr,
                   BLOCK_DV: tl.constexpr, BLOCK_DV1: tl.constexpr,
                   INPUT_PRECISION: tl.constexpr, STORE_O_RES: tl.constexpr,
                   SANITIZED_V: tl.constexpr):
    """FA1's inner loop: fold the K/V tile (kT, v; the second column chunks kT1, v1 and
    first_bad_key1 where BLOCK_D1, BLOCK_DV1 > 0) at keys start_n .. start_n + BLOCK_N into
    each of this split's row blocks in [rb_lo, rb_hi), every one of which sees some of its
    keys. SANITIZED_V: v is _sanitized_values' (causal masked tiles), and NaN goes back into
    the columns where a row sees a non-finite V (first_bad_key); otherwise first_bad_key is
    not read. A row block's (m_i, l_i, acc) come from the HBM scratch (ACC_TMP, M_TMP, L_TMP: FA1's
    o_tmp) unless this is its first tile; LAST: this is the last tile of every one of these
    row blocks, which are finalized (O, L_i or m_i and l_i stored); otherwise their state goes
    back to the scratch."""
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, BLOCK_D)
    offs_dv = tl.arange(0, BLOCK_DV)
    q_head = Q + off_b.to(tl.int64) * stride_qb + off_h.to(tl.int64) * stride_qh
    o_head = off_b.to(tl.int64) * stride_ob + off_h.to(tl.int64) * stride_oh
    stat_head = off_b * stride_lb + off_h * stride_lh
    for row_block in range(_first_of_split(rb_lo, split, n_splits), rb_hi, n_splits):
        offs_m = row_block * BLOCK_M + tl.arange(0, BLOCK_M)
        row_ok = offs_m < seqlen_q
        # addresses from the row block's index inside the loop: offsets hoisted out of it
        # would hold about 40 more registers a thread (sm_90 compile gate)
        row_cols_ok = _head_cols(row_ok[:, None], HEAD_DIM, BLOCK_D, 1)
        q = tl.load(q_head + offs_m[:, None] * stride_qm + offs_d[None, :] * stride_qd,
                    mask=row_cols_ok, other=0.0)  # (BLOCK_M, BLOCK_D), read again at every tile
        acc_ptrs = ACC_TMP + o_head + offs_m[:, None] * stride_om + offs_dv[None, :] * stride_od
        # every row block's first tile is the keys' first (a row sees a prefix of the keys);
        # then its state is the scratch's, written by this program at the previous tile
        resumed = row_ok & (start_n > 0)
        acc = tl.load(acc_ptrs, mask=_head_cols(resumed[:, None], HEAD_DIM_V, BLOCK_DV, 1),
                      other=0.0)  # (BLOCK_M, BLOCK_DV) float32
        m_i = tl.load(M_TMP + stat_head + offs_m, mask=resumed, other=float("-inf"))
        l_i = tl.load(L_TMP + stat_head + offs_m, mask=resumed, other=0.0)
        q1 = 0  # the second column chunks (D60), where there are
        acc1 = 0
        if BLOCK_D1 > 0:
            q1 = _row_tile(q_head + offs_m * stride_qm, row_ok, stride_qd, BLOCK_D,
                           HEAD_DIM - BLOCK_D, BLOCK_D1)
        if BLOCK_DV1 > 0:
            acc1 = _row_tile(ACC_TMP + o_head + offs_m * stride_om, resumed, stride_od,
                             BLOCK_DV, HEAD_DIM_V - BLOCK_DV, BLOCK_DV1)
        s = _tile_scores(q, kT, q1, kT1, start_n, offs_m, offs_n, seqlen_q, seqlen_k, MASK,
                         IS_CAUSAL, BLOCK_D1, INPUT_PRECISION)
        m_i, l_i, acc, acc1 = _fold_tile(m_i, l_i, acc, acc1, s, v, v1, qk_scale, DEFER_NORM,
                                         SPLIT_Q, KEY_SLICES, BLOCK_M, BLOCK_N, BLOCK_DV,
                                         BLOCK_DV1, INPUT_PRECISION)
        if SANITIZED_V:
            acc, acc1 = _nan_where_seen(acc, acc1, first_bad_key, first_bad_key1, offs_m,
                                        seqlen_q, seqlen_k, BLOCK_DV1)
        if LAST:  # no NaN flags: nothing hidden leaks here, and REPAIR does not run
            _store_row_block(O, O_RES, LSE, M, L, FLAGS, acc, acc1, m_i, l_i,
                             first_block + row_block, offs_m, row_ok, off_b, off_h, stride_ob,
                             stride_oh, stride_om, stride_od, stride_lb, stride_lh, qk_scale,
                             IS_CAUSAL, DEFER_NORM, HEAD_DIM_V, BLOCK_DV, BLOCK_DV1, False,
                             STORE_O_RES, False)
        else:
            tl.store(acc_ptrs, acc, mask=_head_cols(row_ok[:, None], HEAD_DIM_V, BLOCK_DV, 1))
            if BLOCK_DV1 > 0:  # float32 into float32: the rounding residual is not stored
                _store_o(ACC_TMP, ACC_TMP, o_head, acc1, offs_m, row_ok, stride_om, stride_od,
                         BLOCK_DV, HEAD_DIM_V - BLOCK_DV, BLOCK_DV1, False)
            tl.store(M_TMP + stat_head + offs_m, m_i, mask=row_ok)
            tl.store(L_TMP + stat_head + offs_m, l_i, mask=row_ok)


@triton.jit
def _attn_fwd_kv_outer(Q, K, V, O, O_RES, LSE, M, L, FLAGS, KD, VD, KD1, VD1, ACC_TMP, M_TMP,
                       L_TMP,
                       first_block, off_b, off_h, off_hkv, split, n_splits,
                       stride_qb, stride_qh, stride_qm, stride_qd,
                       stride_kb, stride_kh, stride_kn, stride_kd,
                       stride_vb, stride_vh, stride_vn, stride_vd,
                       stride_ob, stride_oh, stride_om, stride_od,
                       stride_lb, stride_lh,
                       seqlen_q, seqlen_k, qk_scale,
                       IS_CAUSAL: tl.constexpr, DEFER_NORM: tl.constexpr,
                       SPLIT_Q: tl.constexpr, KEY_SLICES: tl.constexpr, BLOCK_M: tl.constexpr,
                       BLOCK_N: tl.constexpr, HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr,
                       BLOCK_D1: tl.constexpr, HEAD_DIM_V: tl.constexpr,
                       BLOCK_DV: tl.constexpr, BLOCK_DV1: tl.constexpr,
                       INPUT_PRECISION: tl.constexpr, TMA: tl.constexpr,
                       STORE_O_RES: tl.constexpr):
    """FA1's schedule for one (batch, head) and one split of its row blocks: K/V tiles outer,
    each loaded once and folded into every row block that sees it (see the module docstring).
    Which row blocks a tile ends, and which need a mask, are ranges of row blocks, so every
    call of the inner loop knows both at compile time. Causal: the row blocks that need a mask
    get the tile's V sanitised once a tile (the module docstring), so this launch keeps hidden
    non-finite V out itself and sets no NaN flags."""
    row_blocks = tl.cdiv(seqlen_q, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, BLOCK_D)
    offs_dv = tl.arange(0, BLOCK_DV)
    k_base = K + off_b.to(tl.int64) * stride_kb + off_hkv.to(tl.int64) * stride_kh
    v_base = V + off_b.to(tl.int64) * stride_vb + off_hkv.to(tl.int64) * stride_vh
    K_ptrs = k_base + offs_n[None, :] * stride_kn + offs_d[:, None] * stride_kd  # (D, BLOCK_N)
    V_ptrs = v_base + offs_n[:, None] * stride_vn + offs_dv[None, :] * stride_vd  # (BLOCK_N, Dv)
    K1_ptrs, V1_ptrs = _second_chunk_ptrs(k_base, v_base, offs_n, stride_kn, stride_kd,
                                          stride_vn, stride_vd, BLOCK_D, BLOCK_D1, BLOCK_DV,
                                          BLOCK_DV1)
    acc1_none = 0  # a blind row block's second output chunk
    if BLOCK_DV1 > 0:
        acc1_none = tl.zeros([BLOCK_M, BLOCK_DV1], tl.float32)

    # causal with seqlen_q > seqlen_k: row blocks below the first that sees key 0 see no key
    # at all and no tile visits them; they get O = 0 and L = -inf (m = -inf, l = 0)
    blind, _, _ = _row_blocks_seeing(0, seqlen_q, seqlen_k, BLOCK_M, BLOCK_N, IS_CAUSAL)
    for row_block in range(split, blind, n_splits):
        offs_m = row_block * BLOCK_M + tl.arange(0, BLOCK_M)
        _store_row_block(O, O_RES, LSE, M, L, FLAGS, tl.zeros([BLOCK_M, BLOCK_DV], tl.float32),
                         acc1_none, tl.full([BLOCK_M], float("-inf"), tl.float32),
                         tl.zeros([BLOCK_M], tl.float32), first_block + row_block, offs_m,
                         offs_m < seqlen_q, off_b, off_h, stride_ob, stride_oh, stride_om,
                         stride_od, stride_lb, stride_lh, qk_scale, IS_CAUSAL, DEFER_NORM,
                         HEAD_DIM_V, BLOCK_DV, BLOCK_DV1, False, STORE_O_RES, False)

    final_start = (seqlen_k - 1) // BLOCK_N * BLOCK_N  # the keys' last tile
    for start_n in range(0, final_start, BLOCK_N):  # whole tiles, none the keys' last
        kT = _tile_keys(K_ptrs + start_n * stride_kn, KD, off_b, off_hkv, start_n, offs_n,
                        seqlen_k, False, BLOCK_N, HEAD_DIM, BLOCK_D, TMA, 0)
        v = _tile_values(V_ptrs + start_n * stride_vn, VD, off_b, off_hkv, start_n, offs_n,
                         seqlen_k, False, BLOCK_N, HEAD_DIM_V, BLOCK_DV, TMA, 0)
        kT1, v1 = _second_chunk_tiles(K1_ptrs + start_n * stride_kn,
                                      V1_ptrs + start_n * stride_vn, KD1, VD1, off_b, off_hkv,
                                      start_n, offs_n, seqlen_k, False, BLOCK_N, HEAD_DIM,
                                      BLOCK_D, BLOCK_D1, HEAD_DIM_V, BLOCK_DV, BLOCK_DV1, TMA)
        # the scratch is stored and read back in different thread layouts (and read ahead by
        # the pipeliner): a CTA barrier orders the last tile's stores before this tile's loads
        tl.debug_barrier()
        first, ends, unmasked = _row_blocks_seeing(start_n, seqlen_q, seqlen_k, BLOCK_M,
                                                   BLOCK_N, IS_CAUSAL)
        if IS_CAUSAL:  # the row blocks the diagonal crosses: ending here, then going on
            v_ok, first_bad_key, v1_ok, first_bad_key1 = _sanitized_chunks(
                v, v1, start_n, offs_n, seqlen_k, BLOCK_DV1)
            _fold_kv_block(Q, O, O_RES, LSE, M, L, FLAGS, ACC_TMP, M_TMP, L_TMP, kT, v_ok,
                           first_bad_key, kT1, v1_ok, first_bad_key1, start_n, first,
                           tl.minimum(ends, row_blocks), split, n_splits, first_block, off_b,
                           off_h, stride_qb, stride_qh, stride_qm, stride_qd, stride_ob,
                           stride_oh, stride_om, stride_od, stride_lb, stride_lh, seqlen_q,
                           seqlen_k, qk_scale, True, True, IS_CAUSAL, DEFER_NORM, SPLIT_Q,
                           KEY_SLICES, BLOCK_M, BLOCK_N, HEAD_DIM, BLOCK_D, BLOCK_D1,
                           HEAD_DIM_V, BLOCK_DV, BLOCK_DV1, INPUT_PRECISION, STORE_O_RES, True)
            _fold_kv_block(Q, O, O_RES, LSE, M, L, FLAGS, ACC_TMP, M_TMP, L_TMP, kT, v_ok,
                           first_bad_key, kT1, v1_ok, first_bad_key1, start_n, ends,
                           tl.minimum(unmasked, row_blocks), split, n_splits, first_block,
                           off_b, off_h, stride_qb, stride_qh, stride_qm, stride_qd, stride_ob,
                           stride_oh, stride_om, stride_od, stride_lb, stride_lh, seqlen_q,
                           seqlen_k, qk_scale, True, False, IS_CAUSAL, DEFER_NORM, SPLIT_Q,
                           KEY_SLICES, BLOCK_M, BLOCK_N, HEAD_DIM, BLOCK_D, BLOCK_D1,
                           HEAD_DIM_V, BLOCK_DV, BLOCK_DV1, INPUT_PRECISION, STORE_O_RES, True)
        _fold_kv_block(Q, O, O_RES, LSE, M, L, FLAGS, ACC_TMP, M_TMP, L_TMP, kT, v, 0, kT1, v1,
                       0, start_n, unmasked, row_blocks, split, n_splits, first_block, off_b,
                       off_h, stride_qb, stride_qh, stride_qm, stride_qd, stride_ob, stride_oh,
                       stride_om, stride_od, stride_lb, stride_lh, seqlen_q, seqlen_k, qk_scale,
                       False, False, IS_CAUSAL, DEFER_NORM, SPLIT_Q, KEY_SLICES, BLOCK_M,
                       BLOCK_N, HEAD_DIM, BLOCK_D, BLOCK_D1, HEAD_DIM_V, BLOCK_DV, BLOCK_DV1,
                       INPUT_PRECISION, STORE_O_RES, False)
    # the keys' last tile, whole or not: masked, and the last of every row block that sees it
    kT = _tile_keys(K_ptrs + final_start * stride_kn, KD, off_b, off_hkv, final_start, offs_n,
                    seqlen_k, True, BLOCK_N, HEAD_DIM, BLOCK_D, TMA, 0)
    v = _tile_values(V_ptrs + final_start * stride_vn, VD, off_b, off_hkv, final_start, offs_n,
                     seqlen_k, True, BLOCK_N, HEAD_DIM_V, BLOCK_DV, TMA, 0)
    kT1, v1 = _second_chunk_tiles(K1_ptrs + final_start * stride_kn,
                                  V1_ptrs + final_start * stride_vn, KD1, VD1, off_b, off_hkv,
                                  final_start, offs_n, seqlen_k, True, BLOCK_N, HEAD_DIM,
                                  BLOCK_D, BLOCK_D1, HEAD_DIM_V, BLOCK_DV, BLOCK_DV1, TMA)
    tl.debug_barrier()
    first, _, _ = _row_blocks_seeing(final_start, seqlen_q, seqlen_k, BLOCK_M, BLOCK_N,
                                     IS_CAUSAL)
    first_bad_key = 0  # not read without causal: no key of a tile is hidden from a row
    first_bad_key1 = 0
    if IS_CAUSAL:
        v, first_bad_key, v1, first_bad_key1 = _sanitized_chunks(v, v1, final_start, offs_n,
                                                                 seqlen_k, BLOCK_DV1)
    _fold_kv_block(Q, O, O_RES, LSE, M, L, FLAGS, ACC_TMP, M_TMP, L_TMP, kT, v, first_bad_key,
                   kT1, v1, first_bad_key1, final_start, first, row_blocks, split, n_splits,
                   first_block, off_b, off_h, stride_qb, stride_qh, stride_qm, stride_qd,
                   stride_ob, stride_oh, stride_om, stride_od, stride_lb, stride_lh, seqlen_q,
                   seqlen_k, qk_scale, True, True, IS_CAUSAL, DEFER_NORM, SPLIT_Q, KEY_SLICES,
                   BLOCK_M, BLOCK_N, HEAD_DIM, BLOCK_D, BLOCK_D1, HEAD_DIM_V, BLOCK_DV,
                   BLOCK_DV1, INPUT_PRECISION, STORE_O_RES, IS_CAUSAL)


@triton.jit
def _needs_repair(O, FLAGS, blocks, row_blocks, heads_q, n_blocks, stride_ob, stride_oh,
                  stride_om, stride_od, BLOCK_M: tl.constexpr, HEAD_DIM_V: tl.constexpr,
                  BLOCK_DV: tl.constexpr, BLOCK_DV1: tl.constexpr,
                  NAN_FLAGS: tl.constexpr):
    """For each row block in `blocks` (numbered (batch, head, row block) in order), 1 if it may
    hold a leaked NaN: its flag, or (not NAN_FLAGS) a NaN in its first output row (V's head
    dimension wide: both column chunks)."""
    in_range = blocks < n_blocks
    if NAN_FLAGS:
        return tl.load(FLAGS + blocks, mask=in_range, other=0)
    off_bh = blocks // row_blocks
    first_rows = (O + (off_bh // heads_q).to(tl.int64) * stride_ob
                  + (off_bh % heads_q).to(tl.int64) * stride_oh
                  + ((blocks % row_blocks) * BLOCK_M).to(tl.int64) * stride_om)
    offs_d = tl.arange(0, BLOCK_DV)
    o = tl.load(first_rows[:, None] + offs_d[None, :] * stride_od,
                mask=_head_cols(in_range[:, None], HEAD_DIM_V, BLOCK_DV, 1),
                other=0.0).to(tl.float32)  # float32: the interpreter keeps bf16 as raw bits
    has_nan = tl.max((o != o).to(tl.int32), 1)
    if BLOCK_DV1 > 0:
        o1 = _row_tile(first_rows, in_range, stride_od, BLOCK_DV, HEAD_DIM_V - BLOCK_DV,
                       BLOCK_DV1).to(tl.float32)
        has_nan = tl.maximum(has_nan, tl.max((o1 != o1).to(tl.int32), 1))
    return has_nan


# group_size is not specialised: MHA (group_size == 1) and GQA calls share one compile, at the
# cost of one integer division a program (D70); nor n_blocks, which only the REPAIR launch reads:
# specialised, it split one kernel into compiles by batch x heads x row blocks (D96)
@triton.jit(do_not_specialize=["group_size", "n_blocks"])
def _attn_fwd(Q, K, V, O, O_RES, LSE, M, L, FLAGS, KD, VD, KD1, VD1, ACC_TMP, M_TMP, L_TMP,
              stride_qb, stride_qh, stride_qm, stride_qd,
              stride_kb, stride_kh, stride_kn, stride_kd,
              stride_vb, stride_vh, stride_vn, stride_vd,
              stride_ob, stride_oh, stride_om, stride_od,
              stride_lb, stride_lh,
              heads_q, group_size, seqlen_q, seqlen_k, qk_scale, n_blocks,
              IS_CAUSAL: tl.constexpr, DEFER_NORM: tl.constexpr, SEQ_PARALLEL: tl.constexpr,
              SPLIT_Q: tl.constexpr, KEY_SLICES: tl.constexpr, BLOCK_M: tl.constexpr,
              BLOCK_N: tl.constexpr, HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr,
              BLOCK_D1: tl.constexpr, HEAD_DIM_V: tl.constexpr, BLOCK_DV: tl.constexpr,
              BLOCK_DV1: tl.constexpr, INPUT_PRECISION: tl.constexpr, REPAIR: tl.constexpr,
              REPAIR_CHUNK: tl.constexpr, TMA: tl.constexpr,
              STORE_O_RES: tl.constexpr, NAN_FLAGS: tl.constexpr,
              SANITISE_MASKED: tl.constexpr):
    # TMA: a descriptor a column chunk (D62); KD1 and VD1 (None without TMA) carry the second
    # chunks where BLOCK_D1 and BLOCK_DV1 > 0 (kernels.tma.chunk_descriptors)
    row_blocks = tl.cdiv(seqlen_q, BLOCK_M)  # FLAGS: one per (batch, head, row block)
    if REPAIR:
        # A few programs, each checking REPAIR_CHUNK row blocks at once; one that finds a
        # possible leak recomputes those of its blocks in turn (rare: NaN in the output).
        first = tl.program_id(0) * REPAIR_CHUNK
        chunk = tl.arange(0, REPAIR_CHUNK)
        needs = _needs_repair(O, FLAGS, first + chunk, row_blocks, heads_q, n_blocks, stride_ob,
                              stride_oh, stride_om, stride_od, BLOCK_M, HEAD_DIM_V, BLOCK_DV,
                              BLOCK_DV1, NAN_FLAGS)
        if tl.max(needs) != 0:
            for block in range(first, tl.minimum(first + REPAIR_CHUNK, n_blocks)):
                off_bh = block // row_blocks
                off_h = off_bh % heads_q
                if tl.sum(tl.where(chunk == block - first, needs, 0)) != 0:
                    _attn_fwd_row_block(Q, K, V, O, O_RES, LSE, M, L, FLAGS, KD, VD, KD1, VD1,
                                        block,
                                        (block % row_blocks) * BLOCK_M, off_bh // heads_q,
                                        off_h, off_h // group_size,
                                        stride_qb, stride_qh, stride_qm, stride_qd,
                                        stride_kb, stride_kh, stride_kn, stride_kd,
                                        stride_vb, stride_vh, stride_vn, stride_vd,
                                        stride_ob, stride_oh, stride_om, stride_od, stride_lb,
                                        stride_lh, seqlen_q, seqlen_k, qk_scale, IS_CAUSAL,
                                        DEFER_NORM, SPLIT_Q, KEY_SLICES, BLOCK_M, BLOCK_N,
                                        HEAD_DIM, BLOCK_D, BLOCK_D1, HEAD_DIM_V, BLOCK_DV,
                                        BLOCK_DV1, INPUT_PRECISION, True, TMA,
                                        STORE_O_RES, NAN_FLAGS)
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
        _attn_fwd_row_block(Q, K, V, O, O_RES, LSE, M, L, FLAGS, KD, VD, KD1, VD1,
                            first_block + row_block, row_block * BLOCK_M, off_b, off_h, off_hkv,
                            stride_qb, stride_qh, stride_qm, stride_qd,
                            stride_kb, stride_kh, stride_kn, stride_kd,
                            stride_vb, stride_vh, stride_vn, stride_vd,
                            stride_ob, stride_oh, stride_om, stride_od, stride_lb, stride_lh,
                            seqlen_q, seqlen_k, qk_scale, IS_CAUSAL, DEFER_NORM, SPLIT_Q,
                            KEY_SLICES, BLOCK_M, BLOCK_N, HEAD_DIM, BLOCK_D, BLOCK_D1,
                            HEAD_DIM_V, BLOCK_DV, BLOCK_DV1, INPUT_PRECISION,
                            IS_CAUSAL and SANITISE_MASKED, TMA, STORE_O_RES, NAN_FLAGS)
    else:  # grid (batch * heads, splits): this program owns every n_splits-th row block
        _attn_fwd_kv_outer(Q, K, V, O, O_RES, LSE, M, L, FLAGS, KD, VD, KD1, VD1, ACC_TMP,
                           M_TMP, L_TMP,
                           first_block, off_b, off_h, off_hkv, tl.program_id(1),
                           tl.num_programs(1),
                           stride_qb, stride_qh, stride_qm, stride_qd,
                           stride_kb, stride_kh, stride_kn, stride_kd,
                           stride_vb, stride_vh, stride_vn, stride_vd,
                           stride_ob, stride_oh, stride_om, stride_od, stride_lb, stride_lh,
                           seqlen_q, seqlen_k, qk_scale, IS_CAUSAL, DEFER_NORM, SPLIT_Q,
                           KEY_SLICES, BLOCK_M, BLOCK_N, HEAD_DIM, BLOCK_D, BLOCK_D1,
                           HEAD_DIM_V, BLOCK_DV, BLOCK_DV1, INPUT_PRECISION, TMA, STORE_O_RES)


_ATTN_FWD = CachedLaunch(_attn_fwd)  # host time: kernels/launch_cache.py


def chunk_constexprs(head_dim: int, head_dim_v: int) -> dict:
    """The kernel's column chunks of q/k's and of v's head dims (kernels.plan.tiles.head_chunks):
    BLOCK_D, BLOCK_D1, BLOCK_DV, BLOCK_DV1."""
    (d0, d1), (dv0, dv1) = head_chunks(head_dim), head_chunks(head_dim_v)
    return dict(BLOCK_D=d0, BLOCK_D1=d1, BLOCK_DV=dv0, BLOCK_DV1=dv1)


def sanitises_masked_tiles(variant, float32: bool) -> bool:
    """Whether the main launch keeps non-finite V at hidden keys out itself (V sanitised in its
    masked tiles), so that no REPAIR launch follows: FA1's schedule always (decisions D53), and
    the row-block schedule for float32 split-K, whose REPAIR recompute the H200 compiles 1 ulp
    apart from the main launch (D03; verify's float32 d=40 case, D64). Elsewhere REPAIR keeps
    the fast path free of the sanitising (D02)."""
    return not variant.seq_parallel or (not variant.split_q and float32)


def attn_fwd(q, k, v, causal, softmax_scale, variant, config, o_residual=False):
    """Launch the forward kernel. q (B, Hq, Sq, D), k (B, Hkv, Sk, D) and v (B, Hkv, Sk, Dv),
    already validated; o is (B, Hq, Sq, Dv).

    Returns (o, stats, o_res): stats is (lse,) when variant.defer_norm, else (m, l), each
    float32 (B, Hq, Sq) with m in natural-log units. o_res is None unless o_residual and o is
    float16/bfloat16: then it is O - float(o) in o's dtype, O being the float32 output before
    rounding, so the backward's Delta = rowsum(dO * O) need not take O from o alone (with
    heavy-tailed values dP - Delta cancels and magnifies o's rounding).
    """
    import torch

    batch, heads_q, seqlen_q, head_dim = q.shape
    heads_kv, seqlen_k = k.shape[1], k.shape[2]
    head_dim_v = v.shape[3]
    o, stats, (lse, m, l) = empty_outputs(q, variant.defer_norm, head_dim_v)
    stat_shape = (batch, heads_q, seqlen_q)
    o_res = torch.empty_like(o) if o_residual and q.dtype != torch.float32 else None
    row_blocks = triton.cdiv(seqlen_q, config.block_m)
    n_blocks = batch * heads_q * row_blocks
    sanitise_masked = sanitises_masked_tiles(variant, q.dtype == torch.float32)
    repair_launch = causal and not sanitise_masked
    # with nan_flags: one flag per row block, set by the main launch where the output holds a NaN
    flags = torch.empty(n_blocks if repair_launch and config.nan_flags else 1, device=q.device,
                        dtype=torch.int32)
    # FA1's o_tmp (seq_parallel off): each row block's float32 (acc, m_i, l_i) between K/V
    # tiles, laid out as o and the stats; not touched when one tile holds every key, where a
    # float32 stand-in keeps the pointer's dtype, so one and several tiles are one compile
    acc_tmp = o if variant.seq_parallel else stats[0]
    m_tmp, l_tmp = stats[0], stats[0]
    if not variant.seq_parallel and seqlen_k > config.block_n:
        acc_tmp = torch.empty(o.shape, device=q.device, dtype=torch.float32)
        # apart, so each is aligned as the stand-in is
        m_tmp, l_tmp = (torch.empty(stat_shape, device=q.device, dtype=torch.float32)
                        for _ in range(2))
    repair_grid = (triton.cdiv(n_blocks, REPAIR_CHUNK),)
    chunks = chunk_constexprs(head_dim, head_dim_v)
    kd, kd1 = chunk_descriptors(k, config.block_n, chunks["BLOCK_D"], chunks["BLOCK_D1"]) \
        if config.tma else (None, None)
    vd, vd1 = chunk_descriptors(v, config.block_n, chunks["BLOCK_DV"], chunks["BLOCK_DV1"]) \
        if config.tma else (None, None)
    for repair in (False, True) if repair_launch else (False,):
        # REPAIR rarely has work: pointer loads, no descriptors to encode on the host
        tma = config.tma and not repair
        descriptors = (kd, vd, kd1, vd1) if tma else (None,) * 4
        args = (q, k, v, o, o if o_res is None else o_res, lse, m, l, flags, *descriptors,
                acc_tmp, m_tmp, l_tmp,
                *q.stride(), *k.stride(), *v.stride(), *o.stride(), stats[0].stride(0),
                stats[0].stride(1), heads_q, heads_q // heads_kv, seqlen_q, seqlen_k,
                softmax_scale * LOG2E, n_blocks)
        kwargs = dict(
            IS_CAUSAL=causal, DEFER_NORM=variant.defer_norm, SEQ_PARALLEL=variant.seq_parallel,
            SPLIT_Q=variant.split_q, KEY_SLICES=config.key_slices, BLOCK_M=config.block_m,
            BLOCK_N=config.block_n, HEAD_DIM=head_dim, HEAD_DIM_V=head_dim_v,
            **chunks, INPUT_PRECISION=config.input_precision,
            REPAIR=repair, REPAIR_CHUNK=REPAIR_CHUNK, TMA=tma, STORE_O_RES=o_res is not None,
            NAN_FLAGS=config.nan_flags, SANITISE_MASKED=sanitise_masked,
            num_warps=config.num_warps,
            num_stages=config.num_stages,
            maxnreg=config.max_registers or None,
        )
        if repair:
            grid = repair_grid
        elif variant.seq_parallel:
            grid = (row_blocks, batch * heads_q)
        else:
            splits = config.fa1_splits or fa1_num_splits(
                batch * heads_q, *sms_and_ctas_per_sm(_attn_fwd, q.device, args, kwargs),
                max_splits=min(FA1_MAX_SPLITS, row_blocks))
            grid = (batch * heads_q, min(splits, row_blocks))
        _ATTN_FWD[grid](*args, **kwargs)
    return o, stats, o_res

