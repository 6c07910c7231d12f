"""The forward pass in Gluon, with the warp partitioning of each split stated, not inferred.

Same flags, math and outputs as `kernels.forward` (read its docstring first); what differs is
that the kernel writes down how the warps share a tile. Every tile is held as a 3-D tensor
(KEY_SLICES, BLOCK_M, keys per slice) in one Ampere-style mma.sync layout (`mma_v2`, the A100
setting of the FA2 paper), with the warps along one axis:

    split-Q (SPLIT_Q):  KEY_SLICES = 1,         warps_per_cta [1, NUM_WARPS, 1]
        each warp owns BLOCK_M / NUM_WARPS whole query rows: S = Q K_j^T, the row max, the row
        sum and P V all stay inside the warp. No shared memory between warps in the loop.
    split-K (FA1):      KEY_SLICES = NUM_WARPS, warps_per_cta [NUM_WARPS, 1, 1]
        each warp owns one slice of the tile's keys for all BLOCK_M rows, Q is read by every
        warp. The row max and row sum of a tile are reductions over the slice axis, i.e.
        across warps, and so is the sum of the warps' partial outputs P_s V_s: Gluon lowers
        each of the three to a round trip through shared memory with a barrier, at every tile.
        This is the communication FA2's section 3.3 removes.

Nothing else differs between the two: one code path, the layouts are constexprs. Operands are
loaded with plain coalesced loads and converted to the MMA operand layouts (through shared
memory); there is no asynchronous copy pipeline, so absolute speed is below the Triton kernels'
(wgmma, pipelined): this backend exists to measure the split, not to be the fastest.

Hidden non-finite V (causal): the V tile is in registers anyway, so the masked tiles always
zero non-finite V and put NaN back where a row does see one (as the Triton kernels' REPAIR
launch does), with no second launch.
"""
import triton
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.ampere import mma_v2

from .forward import LN2 as _LN2, LOG2E
from .launch_cache import CachedLaunch
from .plan.outputs import empty_outputs

LN2 = gl.constexpr(_LN2)

GLUON_DTYPES = ("float16", "bfloat16")  # mma.sync operands; float32 stays on the Triton kernels
GLUON_HEAD_DIMS = (16, 32, 64, 128)


@gluon.constexpr_function
def warps_per_cta(key_slices, num_warps):
    """The split itself: warps along the query rows (split-Q, one slice) or along the key
    slices (split-K), of a (slices, rows, keys per slice or D) tile."""
    return [1, num_warps, 1] if key_slices == 1 else [num_warps, 1, 1]


@gluon.constexpr_function
def mma_layout(key_slices, num_warps):
    return gl.NVMMADistributedLayout(version=[2, 0],
                                     warps_per_cta=warps_per_cta(key_slices, num_warps),
                                     instr_shape=[1, 16, 8])


@gluon.constexpr_function
def load_layout(key_slices, num_warps):
    """Coalesced global loads of (slices, rows, head_dim) tiles, 8 contiguous elements a thread,
    the warps split as in the MMA layout (split-K: each warp loads its own slice)."""
    return gl.BlockedLayout(size_per_thread=[1, 1, 8], threads_per_warp=[1, 4, 8],
                            warps_per_cta=warps_per_cta(key_slices, num_warps), order=[2, 1, 0])


@gluon.constexpr_function
def output_layout(key_slices, num_warps):
    """The running output (BLOCK_M, D). Split-Q: the P V accumulator's own layout (rows split
    over warps). Split-K: the sum over the warps' slices leaves every warp with the whole
    tile, so the output is spread over the warps along D instead of kept num_warps times."""
    if key_slices == 1:
        return gl.SliceLayout(0, mma_layout(key_slices, num_warps))
    return gl.BlockedLayout(size_per_thread=[1, 2], threads_per_warp=[8, 4],
                            warps_per_cta=[1, num_warps], order=[1, 0])


@gluon.jit
def _axis(n: gl.constexpr, axis: gl.constexpr, layout: gl.constexpr):
    """arange(n) placed along `axis` of a rank-3 tensor of `layout` (size 1 elsewhere)."""
    if axis == 0:
        x = gl.arange(0, n, layout=gl.SliceLayout(1, gl.SliceLayout(2, layout)))
        return gl.expand_dims(gl.expand_dims(x, 1), 2)
    elif axis == 1:
        x = gl.arange(0, n, layout=gl.SliceLayout(0, gl.SliceLayout(2, layout)))
        return gl.expand_dims(gl.expand_dims(x, 0), 2)
    else:
        x = gl.arange(0, n, layout=gl.SliceLayout(0, gl.SliceLayout(1, layout)))
        return gl.expand_dims(gl.expand_dims(x, 0), 1)


@gluon.jit
def _gluon_row_block(Q, K, V, O, O_RES, LSE, M, L, start_m, off_b, off_h, off_hkv,
                     stride_qb, stride_qh, stride_qm, stride_kb, stride_kh, stride_kn,
                     stride_vb, stride_vh, stride_vn, stride_ob, stride_oh, stride_om,
                     stride_lb, stride_lh, seqlen_q, seqlen_k, qk_scale,
                     IS_CAUSAL: gl.constexpr, DEFER_NORM: gl.constexpr,
                     KEY_SLICES: gl.constexpr, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr,
                     HEAD_DIM: gl.constexpr, NUM_WARPS: gl.constexpr,
                     STORE_O_RES: gl.constexpr):
    SLICE: gl.constexpr = BLOCK_N // KEY_SLICES  # keys per slice (per warp under split-K)
    mma: gl.constexpr = mma_layout(KEY_SLICES, NUM_WARPS)
    ld: gl.constexpr = load_layout(KEY_SLICES, NUM_WARPS)
    a_op: gl.constexpr = gl.DotOperandLayout(0, mma, 2)
    b_op: gl.constexpr = gl.DotOperandLayout(1, mma, 2)
    acc_l: gl.constexpr = output_layout(KEY_SLICES, NUM_WARPS)  # (BLOCK_M, D)
    row_l: gl.constexpr = gl.SliceLayout(0, gl.SliceLayout(2, mma))  # (BLOCK_M,) statistics

    # Q_i, the same for every slice: (KEY_SLICES, BLOCK_M, D), a warp reads the rows it needs
    rows_ld = start_m + _axis(BLOCK_M, 1, ld)
    dims_ld = _axis(HEAD_DIM, 2, ld)
    q_ptrs = Q + off_b.to(gl.int64) * stride_qb + off_h.to(gl.int64) * stride_qh \
        + rows_ld * stride_qm + dims_ld + 0 * _axis(KEY_SLICES, 0, ld)
    q = gl.convert_layout(gl.load(q_ptrs, mask=rows_ld < seqlen_q, other=0.0), a_op)
    # K_j and V_j as (KEY_SLICES, SLICE, D); key = s * SLICE + j
    slice_ld = _axis(KEY_SLICES, 0, ld)
    keys_ld = slice_ld * SLICE + _axis(SLICE, 1, ld)  # (S, SLICE, 1)
    k_base = K + off_b.to(gl.int64) * stride_kb + off_hkv.to(gl.int64) * stride_kh
    v_base = V + off_b.to(gl.int64) * stride_vb + off_hkv.to(gl.int64) * stride_vh

    # scores' coordinates in the mma layout
    rows = start_m + _axis(BLOCK_M, 1, mma)  # (1, BLOCK_M, 1)
    keys_s = _axis(KEY_SLICES, 0, mma) * SLICE + _axis(SLICE, 2, mma)  # (S, 1, SLICE)
    diag = seqlen_k - seqlen_q  # query i sees key j iff j <= i + diag

    m_i = gl.full([BLOCK_M], float("-inf"), gl.float32, row_l)
    l_i = gl.full([BLOCK_M], 0.0, gl.float32, row_l)
    acc = gl.full([BLOCK_M, HEAD_DIM], 0.0, gl.float32, acc_l)
    # NaN put back into the output columns of rows that see a non-finite V (causal only)
    first_bad = gl.full([HEAD_DIM], seqlen_k, gl.int32, gl.SliceLayout(0, acc_l))

    if IS_CAUSAL:
        full_end = (gl.minimum(gl.maximum(start_m + diag + 1, 0), seqlen_k) // BLOCK_N) * BLOCK_N
        hi = gl.minimum(gl.maximum(start_m + BLOCK_M + diag, 0), seqlen_k)
    else:
        full_end = (seqlen_k // BLOCK_N) * BLOCK_N
        hi = seqlen_k
    for start_n in range(0, hi, BLOCK_N):
        masked = start_n >= full_end
        key_ok_ld = start_n + keys_ld < seqlen_k
        k = gl.load(k_base + (start_n + keys_ld) * stride_kn + dims_ld, mask=key_ok_ld,
                    other=0.0)  # (S, SLICE, D)
        v = gl.load(v_base + (start_n + keys_ld) * stride_vn + dims_ld, mask=key_ok_ld,
                    other=0.0)  # (S, SLICE, D)
        s = mma_v2(q, gl.convert_layout(gl.permute(k, (0, 2, 1)), b_op),  # (S, BLOCK_M, SLICE)
                   gl.full([KEY_SLICES, BLOCK_M, SLICE], 0.0, gl.float32, mma))
        if masked:
            visible = start_n + keys_s < seqlen_k
            if IS_CAUSAL:
                visible = visible & (start_n + keys_s <= rows + diag)
            s = gl.where(visible, s, float("-inf"))
            if IS_CAUSAL:  # keep hidden non-finite V out of P V (see the module docstring)
                v_finite = gl.abs(v.to(gl.float32)) < float("inf")  # False for NaN too
                bad_key = gl.where(v_finite, seqlen_k, start_n + keys_ld)
                first_bad = gl.minimum(first_bad, gl.convert_layout(
                    gl.min(gl.min(bad_key, 1), 0), gl.SliceLayout(0, acc_l)))
                v = gl.where(v_finite, v, 0.0)

        # Row statistics of the tile: max/sum within a slice (in-warp), then across slices
        # (split-K: across warps, through shared memory; split-Q: one slice, nothing to do)
        m_new = gl.maximum(m_i, gl.max(gl.max(s, 2), 0))
        m_use = gl.where(m_new == float("-inf"), 0.0, m_new)
        p = gl.exp2((s - gl.expand_dims(gl.expand_dims(m_use, 0), 2)) * qk_scale)
        l_tile = gl.sum(gl.sum(p, 2), 0)
        # Partial outputs P_s V_s per slice, summed over the slices (split-K: across warps)
        pv_s = mma_v2(gl.convert_layout(p.to(v.dtype), a_op), gl.convert_layout(v, b_op),
                      gl.full([KEY_SLICES, BLOCK_M, HEAD_DIM], 0.0, gl.float32, mma))
        pv = gl.convert_layout(gl.sum(pv_s, 0), acc_l)

        alpha = gl.exp2((m_i - m_use) * qk_scale)
        l_new = alpha * l_i + l_tile
        alpha_o = gl.expand_dims(gl.convert_layout(alpha, gl.SliceLayout(1, acc_l)), 1)
        if DEFER_NORM:
            acc = acc * alpha_o + pv
        else:
            inv_l_new = 1.0 / gl.where(l_new == 0.0, 1.0, l_new)
            inv_o = gl.expand_dims(gl.convert_layout(inv_l_new, gl.SliceLayout(1, acc_l)), 1)
            scale_o = gl.expand_dims(gl.convert_layout(l_i * alpha * inv_l_new,
                                                       gl.SliceLayout(1, acc_l)), 1)
            acc = acc * scale_o + pv * inv_o
        m_i, l_i = m_new, l_new

    rows_o = start_m + gl.expand_dims(gl.arange(0, BLOCK_M, layout=gl.SliceLayout(1, acc_l)), 1)
    dims_o = gl.expand_dims(gl.arange(0, HEAD_DIM, layout=gl.SliceLayout(0, acc_l)), 0)
    if IS_CAUSAL:
        acc = gl.where(gl.expand_dims(first_bad, 0) <= rows_o + diag, float("nan"), acc)
    sees_a_key = l_i > 0.0
    l_safe = gl.where(sees_a_key, l_i, 1.0)
    stat_rows = start_m + gl.arange(0, BLOCK_M, layout=row_l)
    stat = off_b * stride_lb + off_h * stride_lh + stat_rows
    if DEFER_NORM:
        acc = acc / gl.expand_dims(gl.convert_layout(l_safe, gl.SliceLayout(1, acc_l)), 1)
        lse = gl.where(sees_a_key, (m_i * qk_scale + gl.log2(l_safe)) * LN2, float("-inf"))
        gl.store(LSE + stat, lse, mask=stat_rows < seqlen_q)
    else:
        gl.store(M + stat, m_i * qk_scale * LN2, mask=stat_rows < seqlen_q)
        gl.store(L + stat, l_i, mask=stat_rows < seqlen_q)
    o_ptrs = O + off_b.to(gl.int64) * stride_ob + off_h.to(gl.int64) * stride_oh \
        + rows_o * stride_om + dims_o
    gl.store(o_ptrs, acc.to(O.dtype.element_ty), mask=rows_o < seqlen_q)
    if STORE_O_RES:  # o's rounding residual at o's offsets, for the backward's Delta (D06)
        res_ptrs = O_RES + off_b.to(gl.int64) * stride_ob + off_h.to(gl.int64) * stride_oh \
            + rows_o * stride_om + dims_o
        residual = acc - acc.to(O.dtype.element_ty).to(gl.float32)
        gl.store(res_ptrs, residual.to(O.dtype.element_ty), mask=rows_o < seqlen_q)


@gluon.jit
def _gluon_attn_fwd(Q, K, V, O, O_RES, LSE, M, L,
                    stride_qb, stride_qh, stride_qm, stride_kb, stride_kh, stride_kn,
                    stride_vb, stride_vh, stride_vn, stride_ob, stride_oh, stride_om,
                    stride_lb, stride_lh, heads_q, group_size, seqlen_q, seqlen_k, qk_scale,
                    IS_CAUSAL: gl.constexpr, DEFER_NORM: gl.constexpr,
                    SEQ_PARALLEL: gl.constexpr, KEY_SLICES: gl.constexpr,
                    BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, HEAD_DIM: gl.constexpr,
                    NUM_WARPS: gl.constexpr, STORE_O_RES: gl.constexpr = False):
    if SEQ_PARALLEL:
        off_bh = gl.program_id(1)
    else:
        off_bh = gl.program_id(0)
    off_b = off_bh // heads_q
    off_h = off_bh % heads_q
    off_hkv = off_h // group_size  # GQA/MQA
    if SEQ_PARALLEL:
        _gluon_row_block(Q, K, V, O, O_RES, LSE, M, L, gl.program_id(0) * BLOCK_M, off_b, off_h,
                         off_hkv,
                         stride_qb, stride_qh, stride_qm, stride_kb, stride_kh, stride_kn,
                         stride_vb, stride_vh, stride_vn, stride_ob, stride_oh, stride_om,
                         stride_lb, stride_lh, seqlen_q, seqlen_k, qk_scale, IS_CAUSAL,
                         DEFER_NORM, KEY_SLICES, BLOCK_M, BLOCK_N, HEAD_DIM, NUM_WARPS,
                         STORE_O_RES)
    else:
        for start_m in range(0, seqlen_q, BLOCK_M):
            _gluon_row_block(Q, K, V, O, O_RES, LSE, M, L, start_m, off_b, off_h, off_hkv,
                             stride_qb, stride_qh, stride_qm, stride_kb, stride_kh, stride_kn,
                             stride_vb, stride_vh, stride_vn, stride_ob, stride_oh, stride_om,
                             stride_lb, stride_lh, seqlen_q, seqlen_k, qk_scale, IS_CAUSAL,
                             DEFER_NORM, KEY_SLICES, BLOCK_M, BLOCK_N, HEAD_DIM, NUM_WARPS,
                             STORE_O_RES)


def unsupported(dtype, head_dim: int, head_dim_v: int | None = None) -> str | None:
    """Why the Gluon kernel cannot take inputs of this dtype (torch dtype or its name), head_dim
    and v's head_dim_v (None: head_dim) (the Triton backend can); None if it can."""
    name = str(dtype).removeprefix("torch.")
    if name not in GLUON_DTYPES:
        return (f"the gluon backend takes {' or '.join(GLUON_DTYPES)} (mma.sync operands), got "
                f"{name}; use backend='triton'")
    if head_dim not in GLUON_HEAD_DIMS:
        return f"the gluon backend takes head_dim in {GLUON_HEAD_DIMS}, got {head_dim}"
    if head_dim_v not in (None, head_dim):
        return (f"the gluon backend takes v with q's head_dim ({head_dim}), got head_dim_v "
                f"{head_dim_v}; use backend='triton'")
    return None


def bad_tiles(split_q: bool, block_m: int, block_n: int, num_warps: int) -> str | None:
    """Why these tiles do not split over the warps as the variant's split needs; None if they do."""
    if split_q and block_m % (16 * num_warps):
        return (f"gluon split-Q: block_m ({block_m}) must be a multiple of 16 rows per warp x "
                f"num_warps ({num_warps})")
    if not split_q and block_n % (16 * num_warps):
        return (f"gluon split-K: block_n ({block_n}) must be a multiple of 16 keys per warp x "
                f"num_warps ({num_warps}): each warp owns one slice of the keys")
    return None


def check_gluon_call(dtype, head_dim: int, variant, config, head_dim_v: int | None = None):
    """Raise ValueError for what the Gluon kernel cannot do (the Triton backend can)."""
    why = unsupported(dtype, head_dim, head_dim_v) or bad_tiles(variant.split_q, config.block_m,
                                                     config.block_n, config.num_warps)
    if why:
        raise ValueError(why)


_GLUON_ATTN_FWD = CachedLaunch(_gluon_attn_fwd)  # host time: kernels/launch_cache.py


def gluon_attn_fwd(q, k, v, causal, softmax_scale, variant, config, o_residual=False):
    """`kernels.forward.attn_fwd`'s contract, (o, stats, o_res), computed by the Gluon kernel
    (CUDA only; o_res: o's rounding residual with o_residual, else None; D91).
    Split-K cuts each K/V tile into num_warps slices, one per warp (config.key_slices unused)."""
    import torch

    check_gluon_call(q.dtype, q.shape[-1], variant, config, v.shape[-1])
    q, k, v = (t if t.stride(-1) == 1 else t.contiguous() for t in (q, k, v))
    batch, heads_q, seqlen_q, head_dim = q.shape
    heads_kv, seqlen_k = k.shape[1], k.shape[2]
    o, stats, (_, m, l) = empty_outputs(q, variant.defer_norm)
    o_res = torch.empty_like(o) if o_residual and q.dtype != torch.float32 else None
    row_blocks = triton.cdiv(seqlen_q, config.block_m)
    grid = (row_blocks, batch * heads_q) if variant.seq_parallel else (batch * heads_q,)
    _GLUON_ATTN_FWD[grid](
        q, k, v, o, o if o_res is None else o_res, stats[0], m, l,
        q.stride(0), q.stride(1), q.stride(2), k.stride(0), k.stride(1), k.stride(2),
        v.stride(0), v.stride(1), v.stride(2), o.stride(0), o.stride(1), o.stride(2),
        stats[0].stride(0), stats[0].stride(1), heads_q, heads_q // heads_kv, seqlen_q,
        seqlen_k, softmax_scale * LOG2E,
        IS_CAUSAL=causal, DEFER_NORM=variant.defer_norm, SEQ_PARALLEL=variant.seq_parallel,
        KEY_SLICES=1 if variant.split_q else config.num_warps, BLOCK_M=config.block_m,
        BLOCK_N=config.block_n, HEAD_DIM=head_dim, NUM_WARPS=config.num_warps,
        num_warps=config.num_warps, STORE_O_RES=o_res is not None,
    )
    return o, stats, o_res
