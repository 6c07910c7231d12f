"""Question: does an FA3-style ping-pong forward close the d=64 misses? (D43: no)

An experiment, not a backend: a FlashAttention-3-style forward in Gluon (Hopper wgmma + TMA
+ warp specialisation), tried for the d=64 misses of issue 7. Measured on the H200
(docs/decisions.md#D43): it beats the Triton kernel's tuned tiles only at d=64 non-causal 1k,
with persistent programs.

A program walks work items of CONSUMERS * BLOCK_M query rows of one (batch, head) with
CONSUMERS + 1 partitions:
- a producer warp: per item, TMA loads of every consumer's Q rows (once the consumers have
  released the previous item's), then K_j and V_j into a ring of STAGES slots (ready/empty
  mbarriers; a slot is empty once every consumer has released it);
- 2 or 3 consumer warpgroups (the default partition and 4-warp workers), each owning BLOCK_M
  rows with its own m_i, l_i and O accumulator, so no softmax statistic crosses a warpgroup
  (split-Q).

The consumers take turns at the tensor cores (one mbarrier each, `turn`): in its turn a
consumer issues S_j = Q K_j^T and O += P_{j-1} V_{j-1}, passes the turn on, waits for S_j
and does its softmax while P_{j-1} V_{j-1} still runs. Deferred normalisation: one division
by l_i at the end, and L_i = m_i c + log2 l_i stored (natural log) as the Triton kernels do.

Its domain is narrow: float16/bfloat16, contiguous, as many keys as queries, seqlen a
multiple of BLOCK_N (K/V are read through a descriptor over the flattened (B*H*S, D) rows, so
a partial last tile would read the next head's keys), causal or not, GQA by the head mapping;
no non-finite V semantics, no backward. None of the verify cases fits it.

    env -u TRITON_INTERPRET python3 ablations/probes/gluon_pingpong.py --compile   # sm_90, no GPU
    python3 ablations/probes/gluon_pingpong.py --check [--causal] --programs 0,132  # on the GPU

--check compares batch 0 with the float64 oracle and times it beside kernels.flash_attention
(with the FA2 tiles of a saved forward run) and sdpa flash on one cell of the paper's grid.
"""
import argparse
import sys
from pathlib import Path

import triton
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (
    mbarrier, tma, warpgroup_mma, warpgroup_mma_wait)

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from kernels.forward import LN2 as _LN2, LOG2E  # noqa: E402

LN2 = gl.constexpr(_LN2)


@gluon.constexpr_function
def mma_layout(n):
    """wgmma accumulator layout of one warpgroup: M = 64 rows (16 per warp), N = n."""
    return gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, n, 16])


@gluon.jit
def _work(tile, seqlen, heads_q, group_size, causal, ROWS: gl.constexpr, BLOCK_N: gl.constexpr):
    """Work item `tile` -> the first row of its row block within the head, that row and its kv
    head's first row in the flattened (B*H*S, D) rows, the row past its head's last, and its
    number of K/V tiles (causal: up to the block's last row). Consecutive items are row blocks
    of one head, so programs running side by side share K/V in L2; the last row blocks come
    first, which are the longest when causal."""
    n_blocks = gl.cdiv(seqlen, ROWS)
    bh = tile // n_blocks
    kv_bh = (bh // heads_q) * (heads_q // group_size) + (bh % heads_q) // group_size
    start = (n_blocks - 1 - tile % n_blocks) * ROWS
    n_kv = gl.cdiv(gl.minimum(start + ROWS, seqlen) if causal else seqlen, BLOCK_N)
    return start, bh * seqlen + start, kv_bh * seqlen, bh * seqlen + seqlen, n_kv


@gluon.jit
def _producer(q_desc, k_desc, v_desc, q_smem, k_smem, v_smem, q_ready, q_empty, kv_ready,
              kv_empty, turn, O, LSE, seqlen, heads_q, group_size, n_work, causal, qk_scale,
              CONSUMER: gl.constexpr):
    BLOCK_M: gl.constexpr = q_desc.block_type.shape[0]  # tile sizes: see _consumer
    BLOCK_N: gl.constexpr = k_desc.block_type.shape[0]
    STAGES: gl.constexpr = k_smem.type.shape[0]
    CONSUMERS: gl.constexpr = q_smem.type.shape[0]
    i = 0  # work items done by this program
    g = 0  # K/V tiles loaded by this program: the ring's position
    for tile in range(gl.program_id(0), n_work, gl.num_programs(0)):
        _, q_row, kv_row, _, n_tiles = _work(tile, seqlen, heads_q, group_size, causal,
                                             CONSUMERS * BLOCK_M, BLOCK_N)
        # the next item's Q is loaded once every consumer has issued its last S of this one
        # (mbarriers start with their phase of parity 1 complete)
        mbarrier.wait(q_empty, (i & 1) ^ 1)
        mbarrier.expect(q_ready, CONSUMERS * q_desc.block_type.nbytes)
        for c in gl.static_range(CONSUMERS):
            tma.async_copy_global_to_shared(q_desc, [q_row + c * BLOCK_M, 0], q_ready,
                                            q_smem.index(c))
        for j in range(n_tiles):
            slot = g % STAGES
            mbarrier.wait(kv_empty.index(slot), ((g // STAGES) & 1) ^ 1)
            ready = kv_ready.index(slot)
            mbarrier.expect(ready, k_desc.block_type.nbytes + v_desc.block_type.nbytes)
            tma.async_copy_global_to_shared(k_desc, [kv_row + j * BLOCK_N, 0], ready,
                                            k_smem.index(slot))
            tma.async_copy_global_to_shared(v_desc, [kv_row + j * BLOCK_N, 0], ready,
                                            v_smem.index(slot))
            g += 1
        i += 1


@gluon.jit
def _causal_mask(s, rows, j, first_masked):
    """S_j with the keys after each row's own position at -inf, from K/V tile first_masked on
    (the tiles before it are below the diagonal for all of these rows)."""
    if j >= first_masked:
        BLOCK_N: gl.constexpr = s.type.shape[1]
        keys = j * BLOCK_N + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(0, s.type.layout))
        s = gl.where(keys[None, :] <= rows[:, None], s, float("-inf"))
    return s


@gluon.jit
def _online_softmax(s, m_i, l_i, qk_scale):
    """One tile of the online softmax, in raw units then scaled (see kernels/forward.py):
    returns the new m_i and l_i, the unnormalised P in float32, and alpha, the factor that takes
    the accumulator from the old max to the new one."""
    m_new = gl.maximum(m_i, gl.max(s, 1))
    p32 = gl.exp2((s - m_new[:, None]) * qk_scale)
    alpha = gl.exp2((m_i - m_new) * qk_scale)
    return m_new, l_i * alpha + gl.sum(p32, 1), p32, alpha


@gluon.jit
def _consumer(q_desc, k_desc, v_desc, q_smem, k_smem, v_smem, q_ready, q_empty, kv_ready,
              kv_empty, turn, O, LSE, seqlen, heads_q, group_size, n_work, causal, qk_scale,
              CONSUMER: gl.constexpr):
    # the tile sizes come from the descriptors and buffers: constexprs do not survive the
    # argument tuple of a warp-specialised partition
    BLOCK_M: gl.constexpr = q_desc.block_type.shape[0]
    BLOCK_N: gl.constexpr = k_desc.block_type.shape[0]
    HEAD_DIM: gl.constexpr = q_desc.block_type.shape[1]
    STAGES: gl.constexpr = k_smem.type.shape[0]
    CONSUMERS: gl.constexpr = q_smem.type.shape[0]
    NEXT: gl.constexpr = (CONSUMER + 1) % CONSUMERS  # whose turn at the tensor cores is next
    FIRST: gl.constexpr = 1 if CONSUMER == 0 else 0  # the parity of my first turn
    s_layout: gl.constexpr = mma_layout(BLOCK_N)
    o_layout: gl.constexpr = mma_layout(HEAD_DIM)
    p_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=o_layout, k_width=2)
    row_layout: gl.constexpr = gl.SliceLayout(1, s_layout)
    orow_layout: gl.constexpr = gl.SliceLayout(1, o_layout)
    dtype: gl.constexpr = q_desc.dtype

    q = q_smem.index(CONSUMER)
    s_zero = gl.zeros([BLOCK_M, BLOCK_N], gl.float32, s_layout)
    i = 0  # work items done by this program
    g = 0  # K/V tiles consumed: the ring's position, and my turns at the tensor cores so far
    for tile in range(gl.program_id(0), n_work, gl.num_programs(0)):
        start, q_row, kv_row, q_end, n_tiles = _work(tile, seqlen, heads_q, group_size, causal,
                                                     CONSUMERS * BLOCK_M, BLOCK_N)
        # causal: my rows' positions, and the first K/V tile with a key past my first row
        # (every consumer takes all of the block's tiles, so they all have as many turns)
        my_rows = start + CONSUMER * BLOCK_M + gl.arange(0, BLOCK_M, layout=row_layout)
        first_masked = (start + CONSUMER * BLOCK_M + 1) // BLOCK_N if causal else n_tiles
        m_i = gl.full([BLOCK_M], float("-inf"), gl.float32, row_layout)
        l_i = gl.zeros([BLOCK_M], gl.float32, row_layout)
        acc = gl.zeros([BLOCK_M, HEAD_DIM], gl.float32, o_layout)
        mbarrier.wait(q_ready, i & 1)

        # K/V tile 0 (peeled: there is no P V product to issue beside S_0). Every turn: wait
        # for mine (the consumers go round in order; consumer 0's first wait passes at once),
        # issue, and pass it on as soon as my products are issued, so the next consumer's
        # queue up behind them on the tensor cores.
        slot = g % STAGES
        mbarrier.wait(kv_ready.index(slot), (g // STAGES) & 1)
        mbarrier.wait(turn.index(CONSUMER), (g & 1) ^ FIRST)
        s_async = warpgroup_mma(q, k_smem.index(slot).permute((1, 0)), s_zero, use_acc=False,
                                is_async=True)
        mbarrier.arrive(turn.index(NEXT), count=1)
        s = warpgroup_mma_wait(num_outstanding=0, deps=(s_async,))
        s = _causal_mask(s, my_rows, 0, first_masked)
        m_i, l_i, p32, alpha = _online_softmax(s, m_i, l_i, qk_scale)
        p = gl.convert_layout(p32.to(dtype), p_layout)
        for j in range(1, n_tiles):
            prev = slot
            slot = (g + j) % STAGES
            mbarrier.wait(kv_ready.index(slot), ((g + j) // STAGES) & 1)
            mbarrier.wait(turn.index(CONSUMER), ((g + j) & 1) ^ FIRST)
            s_async = warpgroup_mma(q, k_smem.index(slot).permute((1, 0)), s_zero,
                                    use_acc=False, is_async=True)
            acc_async = warpgroup_mma(p, v_smem.index(prev), acc, is_async=True)
            mbarrier.arrive(turn.index(NEXT), count=1)
            # S_j is done first (wgmma groups retire in order): its softmax runs while
            # P_{j-1} V_{j-1} is still on the tensor cores
            s = warpgroup_mma_wait(num_outstanding=1, deps=(s_async,))
            s = _causal_mask(s, my_rows, j, first_masked)
            m_i, l_i, p32, alpha = _online_softmax(s, m_i, l_i, qk_scale)
            acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc_async,))
            mbarrier.arrive(kv_empty.index(prev), count=1)  # V_{j-1} used by me
            acc = acc * gl.convert_layout(alpha, orow_layout)[:, None]
            p = gl.convert_layout(p32.to(dtype), p_layout)
        mbarrier.arrive(q_empty, count=1)  # my last S is done: Q may be overwritten

        acc_async = warpgroup_mma(p, v_smem.index(slot), acc, is_async=True)
        acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc_async,))
        mbarrier.arrive(kv_empty.index(slot), count=1)
        g += n_tiles
        i += 1

        # the one deferred division, and L = m c + log2 l (natural log); rows past this head's
        # last (the next head's, read through the flattened descriptor) are dropped
        acc = acc / gl.convert_layout(l_i, orow_layout)[:, None]
        lse = (m_i * qk_scale + gl.log2(l_i)) * LN2
        rows = q_row + CONSUMER * BLOCK_M + gl.arange(0, BLOCK_M, layout=orow_layout)
        dims = gl.arange(0, HEAD_DIM, layout=gl.SliceLayout(0, o_layout))
        gl.store(O + rows.to(gl.int64)[:, None] * HEAD_DIM + dims[None, :], acc.to(dtype),
                 mask=(rows < q_end)[:, None])
        gl.store(LSE + rows, gl.convert_layout(lse, orow_layout), mask=rows < q_end)


@gluon.jit
def _consumer0(args):
    _consumer(*args, CONSUMER=0)


@gluon.jit
def _worker_consumer1(args):
    _consumer(*args, CONSUMER=1)


@gluon.jit
def _worker_consumer2(args):
    _consumer(*args, CONSUMER=2)


@gluon.jit
def _worker_producer(args):
    _producer(*args, CONSUMER=0)  # CONSUMER unused: the partitions share one argument list


@gluon.jit
def pingpong_fwd(q_desc, k_desc, v_desc, O, LSE, seqlen, heads_q, group_size, n_work, causal,
                 qk_scale,
                 BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, HEAD_DIM: gl.constexpr,
                 STAGES: gl.constexpr, CONSUMERS: gl.constexpr):
    """q_desc: the (B*Hq*S, D) rows of q in boxes of BLOCK_M rows; k_desc, v_desc: the
    (B*Hkv*S, D) rows in boxes of BLOCK_N. O (B*Hq*S, D) and LSE (B*Hq*S,) contiguous. n_work =
    B * Hq * cdiv(S, CONSUMERS * BLOCK_M) work items; a 1-D grid of any size walks them
    (n_work programs: one item each; fewer: persistent programs)."""
    q_smem = gl.allocate_shared_memory(q_desc.dtype, [CONSUMERS] + q_desc.block_type.shape,
                                       q_desc.layout)
    k_smem = gl.allocate_shared_memory(k_desc.dtype, [STAGES] + k_desc.block_type.shape,
                                       k_desc.layout)
    v_smem = gl.allocate_shared_memory(v_desc.dtype, [STAGES] + v_desc.block_type.shape,
                                       v_desc.layout)
    q_ready = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    q_empty = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    kv_ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    kv_empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    turn = gl.allocate_shared_memory(gl.int64, [CONSUMERS, 1], mbarrier.MBarrierLayout())
    mbarrier.init(q_ready, count=1)
    mbarrier.init(q_empty, count=CONSUMERS)
    for i in gl.static_range(STAGES):
        mbarrier.init(kv_ready.index(i), count=1)
        mbarrier.init(kv_empty.index(i), count=CONSUMERS)  # released by every consumer
    for i in gl.static_range(CONSUMERS):
        mbarrier.init(turn.index(i), count=1)

    args = (q_desc, k_desc, v_desc, q_smem, k_smem, v_smem, q_ready, q_empty, kv_ready,
            kv_empty, turn, O, LSE, seqlen, heads_q, group_size, n_work, causal, qk_scale)
    if CONSUMERS == 2:
        gl.warp_specialize([(_consumer0, (args,)), (_worker_consumer1, (args,)),
                            (_worker_producer, (args,))], [4, 1], [232, 24])
    else:
        gl.warp_specialize([(_consumer0, (args,)), (_worker_consumer1, (args,)),
                            (_worker_consumer2, (args,)), (_worker_producer, (args,))],
                           [4, 4, 1], [160, 160, 24])


def descriptors(q, k, v, block_m: int, block_n: int):
    """TMA descriptors over the flattened (B*H*S, D) rows of contiguous q, k, v."""
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

    dtype = {"torch.bfloat16": gl.bfloat16, "torch.float16": gl.float16}[str(q.dtype)]
    out = []
    for t, rows in ((q, block_m), (k, block_n), (v, block_n)):
        flat = t.reshape(-1, t.shape[-1])
        layout = gl.NVMMASharedLayout.get_default_for([rows, t.shape[-1]], dtype)
        out.append(TensorDescriptor.from_tensor(flat, [rows, t.shape[-1]], layout))
    return out


def pingpong_attention(q, k, v, causal=False, block_m=64, block_n=128, stages=2, consumers=2,
                       programs=0, softmax_scale=None):
    """Attention of contiguous (B, H, S, D) q, k, v (as many keys as queries); S a multiple of
    block_n.
    programs: 0 for one per work item, else that many persistent programs. Returns (o, lse)."""
    import torch

    batch, heads_q, seqlen, head_dim = q.shape
    if seqlen % block_n:
        raise ValueError(f"seqlen {seqlen} must be a multiple of block_n {block_n}")
    if consumers not in (2, 3):
        raise ValueError(f"consumers must be 2 or 3, got {consumers}")
    scale = head_dim ** -0.5 if softmax_scale is None else softmax_scale
    o = torch.empty_like(q)
    lse = torch.empty(q.shape[:3], device=q.device, dtype=torch.float32)
    q_desc, k_desc, v_desc = descriptors(q, k, v, block_m, block_n)
    n_work = triton.cdiv(seqlen, consumers * block_m) * batch * heads_q
    grid = (min(programs, n_work) if programs else n_work,)
    pingpong_fwd[grid](q_desc, k_desc, v_desc, o, lse, seqlen, heads_q, heads_q // k.shape[1],
                       n_work, int(causal), scale * LOG2E, BLOCK_M=block_m, BLOCK_N=block_n,
                       HEAD_DIM=head_dim, STAGES=stages, CONSUMERS=consumers, num_warps=4)
    return o, lse


def compile_for_sm90(dtype="bf16", block_m=64, block_n=128, head_dim=64, stages=2,
                     consumers=2):
    """triton.compile for sm_90 without a GPU; returns the CompiledKernel."""
    from triton.backends.compiler import GPUTarget
    from triton.experimental.gluon._runtime import GluonASTSource

    gl_dtype = {"bf16": gl.bfloat16, "fp16": gl.float16}[dtype]

    def desc(rows):
        layout = gl.NVMMASharedLayout.get_default_for([rows, head_dim], gl_dtype)
        return f"tensordesc<{dtype}[{rows},{head_dim}],{layout!r}>"

    signature = {"q_desc": desc(block_m), "k_desc": desc(block_n), "v_desc": desc(block_n),
                 "O": f"*{dtype}", "LSE": "*fp32", "seqlen": "i32", "heads_q": "i32",
                 "group_size": "i32", "n_work": "i32", "causal": "i32", "qk_scale": "fp32",
                 "BLOCK_M": "constexpr", "BLOCK_N": "constexpr", "HEAD_DIM": "constexpr",
                 "STAGES": "constexpr", "CONSUMERS": "constexpr"}
    constexprs = {"BLOCK_M": block_m, "BLOCK_N": block_n, "HEAD_DIM": head_dim, "STAGES": stages,
                  "CONSUMERS": consumers}
    source = GluonASTSource(pingpong_fwd, signature, constexprs, {})
    return triton.compile(source, target=GPUTarget("cuda", 90, 32), options=dict(num_warps=4))


def tuned_config(path, seqlen, head_dim, causal, dtype):
    """The FA2 variant's tiles of that run's cell."""
    from fa2check.ablate.results import load
    from kernels import TileConfig

    for cell in load(path)["cells"]:
        c = cell["cell"]
        if (c["seqlen"], c["head_dim"], c["dtype"], c["causal"]) == (
                seqlen, head_dim, dtype, causal):
            return TileConfig(**cell["configs"]["+defer+seqpar+splitq"])
    raise ValueError(f"{path} has no {dtype} cell at seqlen {seqlen}, d={head_dim}, "
                     f"causal={causal}")


def compile_report(**options) -> dict:
    """compile_for_sm90(**options): ptxas's registers and spills, shared memory, and the PTX's
    wgmma, setmaxnreg and mbarrier-wait counts."""
    from fa2check.inspect.compile_gate import ptxas_usage, rerun_ptxas

    compiled = compile_for_sm90(**options)
    ptx = compiled.asm["ptx"]
    return dict(ptxas_usage(rerun_ptxas(ptx)), shared=compiled.metadata.shared,
                wgmma=ptx.count("wgmma.mma_async"), setmaxnreg=ptx.count("setmaxnreg"),
                mbarrier_waits=ptx.count("mbarrier.try_wait"))


def check(args):
    """On the GPU: batch 0 against the float64 oracle, then TFLOP/s beside kernels.flash_attention
    (with a saved run's FA2 tiles) and sdpa flash, on the paper grid's cell."""
    import torch
    from triton.testing import do_bench

    from fa2check.ablate.grids import Cell, paper_batch, paper_heads
    from fa2check.core.oracle import reference
    from fa2check.core.sdpa_backends import forced, sdpa
    from fa2check.ablate.timing import tflops
    from kernels import flash_attention

    n, d = args.seqlen, args.head_dim
    cell = Cell(paper_batch(n), paper_heads(d), paper_heads(d), n, d, args.dtype, args.causal)
    q, k, v = (torch.randn(cell.batch, cell.heads_q, n, d, device="cuda",
                           dtype=cell.torch_dtype) for _ in range(3))

    def pingpong(programs):
        return pingpong_attention(q, k, v, args.causal, block_n=args.block_n,
                                  stages=args.stages, consumers=args.consumers,
                                  programs=programs)

    def sdpa_flash():
        with forced("sdpa-flash"):
            return sdpa(q, k, v, args.causal)

    o_ref, lse_ref = reference(q[:1], k[:1], v[:1], causal=args.causal)
    runs = []
    for programs in map(int, args.programs.split(",")):
        o, lse = pingpong(programs)
        torch.cuda.synchronize()
        print(f"{args.dtype} d={d} n={n} causal={args.causal} block_n={args.block_n} "
              f"stages={args.stages} consumers={args.consumers} programs={programs}: "
              f"max |o - oracle| (batch 0) {(o[:1].double() - o_ref).abs().max().item():.3e}, "
              f"max |lse - oracle| {(lse[:1].double() - lse_ref).abs().max().item():.3e}",
              flush=True)
        runs.append((f"pingpong/{programs}", lambda programs=programs: pingpong(programs)))
    tuned = tuned_config(args.tuned_from, n, d, args.causal, args.dtype)
    runs += [("flash_attention", lambda: flash_attention(q, k, v, causal=args.causal,
                                                         config=tuned)),
             ("sdpa_flash", sdpa_flash)]
    for name, fn in runs:
        ms = do_bench(fn, warmup=25, rep=100)
        print(f"  {name:16s} {ms:.4f} ms {tflops(cell.flops('fwd'), ms):6.0f} TFLOP/s",
              flush=True)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description="A FlashAttention-3-style forward in Gluon (an "
                                "experiment): compile it for sm_90, or check and time it on "
                                "the GPU")
    p.add_argument("--compile", action="store_true", help="compile for sm_90 (no GPU needed)")
    p.add_argument("--check", action="store_true", help="GPU: oracle check and timing")
    p.add_argument("--head-dim", type=int, default=64)
    p.add_argument("--block-n", type=int, default=128)
    p.add_argument("--stages", type=int, default=2)
    p.add_argument("--consumers", type=int, default=2, help="consumer warpgroups (2 or 3)")
    p.add_argument("--seqlen", type=int, default=1024)
    p.add_argument("--causal", action="store_true")
    p.add_argument("--dtype", choices=("bfloat16", "float16"), default="bfloat16")
    p.add_argument("--programs", default="0", help="comma-separated program counts to time (0: "
                   "one per work item; else persistent programs)")
    p.add_argument("--tuned-from", default="ablations/results/20261202-024307-nvidia-h200-paper-"
                   "fwd.json", help="time kernels.flash_attention with this run's FA2 tiles")
    args = p.parse_args(argv)
    if args.compile:
        print(compile_report(block_n=args.block_n, head_dim=args.head_dim, stages=args.stages,
                             consumers=args.consumers))
    if args.check:
        check(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
