"""Compile gate: build every kernel variant for Hopper (sm_90) on a machine without a GPU.

    python -m fa2check.compile_gate [--variant fa2] [--dtype bfloat16] [--head-dim 64] [--causal]

Each case goes through Triton's full pipeline (TTIR -> TTGIR -> LLVM IR -> PTX -> cubin) with
`triton.compile(ASTSource(...), target=GPUTarget("cuda", 90, 32))`, specialised as the launcher
would specialise a contiguous call (see `runtime_specialization`). The CompiledKernel's
`n_regs`/`n_spills` need a GPU driver (`_init_handles` loads the cubin), so registers and spill
bytes come from the `ptxas -v` log of Triton's own ptxas run (TRITON_DUMP_PTXAS_LOG), or from
rerunning Triton's bundled ptxas on the PTX after a Triton cache hit. Shared memory is
`metadata.shared`; wgmma is a search of the PTX. CTAs per SM is an occupancy bound from those
facts and sm_90's limits (`ctas_per_sm`). Warp-specialized kernels (the Hopper chassis,
`hopper_attn_fwd` and `hopper_attn_bwd`) also show each partition's registers after
setmaxnreg, and every warpgroup-MMA kernel its synchronisation sites (`sync`: wgmma waits by
depth, mbarrier waits and arrives, the named-barrier turns of the Hopper switches;
`--variant=+defer+seqpar+splitq+pingpong+overlap` shows them; `-warpspec` drops the producer
warp, 8 warps instead of 12). A case fails if it does not
compile, needs more shared memory than an sm_90 block may have, or its machine code (SASS, from
Triton's cuobjdump) reads a uniform register before writing it: ptxas miscompiled the REPAIR
launch so (fa2check.inspect.sass, decisions D115).

New kernels join the gate by adding a `KernelSpec` to `SPECS` (e.g. a backward kernel).
The kernels must be `triton.jit` functions: with TRITON_INTERPRET set they are interpreter
objects that cannot be compiled, so `main` then reruns itself without that variable.
"""
from __future__ import annotations

import argparse
import contextlib
import dataclasses
import io
import itertools
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from collections import Counter
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass
from multiprocessing import get_context
from typing import Callable

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table
from rich.text import Text

from kernels import TILE_HEAD_DIMS, TileConfig, Variant, default_config
from kernels.plan.tiles import block_d
from kernels.forward import REPAIR_CHUNK, chunk_constexprs, sanitises_masked_tiles

from .sass import cubin_sass, uninitialized_uniform_reads

DTYPES = {"float16": "fp16", "bfloat16": "bf16", "float32": "fp32"}  # torch name -> Triton type
SM90_MAX_SHARED = 232448  # bytes of shared memory one block may opt in to on H100/H200 (227 KiB)
# sm_90's per-SM limits (CUDA programming guide, compute capability 9.0), for `ctas_per_sm`
SM90_REGISTERS = 65536  # 32-bit registers per SM
SM90_REGISTER_UNIT = 256  # registers are allocated per warp in units of 256 (8 per thread)
SM90_SM_SHARED = 233472  # 228 KiB of shared memory per SM (the largest carveout)
SM90_SHARED_RESERVED = 1024  # shared memory the system reserves per block
SM90_MAX_THREADS = 2048  # resident threads per SM
SM90_MAX_BLOCKS = 32  # resident blocks per SM


@dataclass(frozen=True)
class Case:
    """One cell of the gate: what a launcher call would fix at compile time."""
    variant: Variant
    dtype: str  # a key of DTYPES
    head_dim: int
    causal: bool
    config: TileConfig
    # sequence lengths compiled as the constant 1, as Triton's launcher does for a call with
    # that length (e.g. decoding's seqlen_q == 1); it changes loop bounds and pipelining
    length_one: tuple[str, ...] = ()
    head_dim_v: int | None = None  # v's (and o's) head dim; None: head_dim

    @property
    def v_dim(self) -> int:
        return self.head_dim if self.head_dim_v is None else self.head_dim_v


def head_dims_label(head_dim: int, head_dim_v: int | None) -> str:
    """'96', or '192/128' where v has a head dim of its own."""
    return str(head_dim) if head_dim_v in (None, head_dim) else f"{head_dim}/{head_dim_v}"


@dataclass(frozen=True)
class KernelSpec:
    name: str
    kernel: Callable[[], object]  # returns the triton.jit function (imported lazily)
    specialize: Callable[[object, Case], tuple[dict, dict, dict]]  # -> signature, constexprs, attrs
    tiles: Callable[[Case], dict]  # -> this kernel's block_m, block_n, num_warps, num_stages
    causal_only: bool = False  # launched for causal calls only
    backend: str = "triton"  # kernels.plan.tiles.BACKENDS: "gluon" kernels are Gluon functions
    supports: Callable[[str, int], bool] = lambda dtype, head_dim: True
    # -> extra compile options: the Triton forward's launches pass ptxas a register cap
    register_cap: Callable[[TileConfig], dict] = lambda config: {}


def runtime_specialization(fn, pointers: dict[str, str], constexprs: dict, floats=(), unit=(),
                           div16=(), descriptors=None):
    """(signature, constexprs, attrs) for ASTSource, as the runtime launcher would specialise.

    Like Triton's launcher: ints equal to 1 (`unit`, the innermost strides of contiguous
    tensors) become constexpr 1, and pointers plus ints in `div16` carry tt.divisibility=16.
    Other ints are plain i32 (sequence lengths and head counts can be anything).
    descriptors: {name: "tensordesc<...>" signature, or None for an argument passed as None}.
    """
    signature, consts, attrs = {}, dict(constexprs), {}
    for i, name in enumerate(fn.arg_names):
        if name in (descriptors or {}):
            signature[name] = descriptors[name] or "constexpr"
            if descriptors[name] is None:
                consts[name] = None
        elif name in constexprs:
            signature[name] = "constexpr"
        elif name in unit:
            signature[name], consts[name] = "constexpr", 1
        elif name in pointers:
            signature[name] = "*" + pointers[name]
            attrs[(i,)] = [["tt.divisibility", 16]]  # torch allocations are 16-byte aligned
        elif name in floats:
            signature[name] = "fp32"
        else:
            signature[name] = "i32"
            if name in div16:
                attrs[(i,)] = [["tt.divisibility", 16]]
    return signature, consts, attrs


def _forward_kernel():
    from kernels.forward import _attn_fwd
    return _attn_fwd


def _forward_specialization(fn, case: Case, repair: bool = False, o_residual: bool = False):
    """Arguments of `kernels.forward.attn_fwd` for contiguous (B, H, S, D) q, k, v and o;
    o_residual: as in a call that will be differentiated (float16/bfloat16)."""
    cfg, v = case.config, case.variant
    io = DTYPES[case.dtype]
    pointers = {"Q": io, "K": io, "V": io, "O": io, "O_RES": io, "LSE": "fp32", "M": "fp32",
                "L": "fp32", "FLAGS": "i32", "ACC_TMP": "fp32", "M_TMP": "fp32", "L_TMP": "fp32"}
    # contiguous: stride_*d == 1; stride_*m/n, *h, *b are multiples of head_dim, hence of 16.
    # The stats strides (multiples of seqlen_q), heads_q and group_size stay plain i32 (the
    # kernel does not specialise group_size: D70).
    unit = [f"stride_{t}d" for t in "qkvo"] + list(case.length_one)
    div16 = [f"stride_{name}" for name in ("qb", "qh", "qm", "kb", "kh", "kn")
             ] if case.head_dim % 16 == 0 else []
    div16 += [f"stride_{name}" for name in ("vb", "vh", "vn", "ob", "oh", "om")
              ] if case.v_dim % 16 == 0 else []  # v's and o's: multiples of v's head dim
    tma = cfg.tma and not repair  # as attn_fwd: REPAIR loads through pointers
    constexprs = dict(IS_CAUSAL=case.causal, DEFER_NORM=v.defer_norm, SEQ_PARALLEL=v.seq_parallel,
                      SPLIT_Q=v.split_q, KEY_SLICES=cfg.key_slices, BLOCK_M=cfg.block_m,
                      BLOCK_N=cfg.block_n, HEAD_DIM=case.head_dim, HEAD_DIM_V=case.v_dim,
                      **chunk_constexprs(case.head_dim, case.v_dim),
                      INPUT_PRECISION=cfg.input_precision,
                      REPAIR=repair,
                      REPAIR_CHUNK=REPAIR_CHUNK, TMA=tma, STORE_O_RES=o_residual,
                      NAN_FLAGS=cfg.nan_flags,
                      SANITISE_MASKED=sanitises_masked_tiles(v, case.dtype == "float32"))
    # a descriptor a column chunk (kernels.tma.chunk_descriptors), None where there is none
    boxes = {name: _row_box(io, cfg.block_n, constexprs[width]) if tma and constexprs[width]
             else None for name, width in (("KD", "BLOCK_D"), ("VD", "BLOCK_DV"),
                                           ("KD1", "BLOCK_D1"), ("VD1", "BLOCK_DV1"))}
    return runtime_specialization(fn, pointers, constexprs, floats=("qk_scale",), unit=unit,
                                  div16=div16, descriptors=boxes)


def _forward_register_cap(c: TileConfig) -> dict:
    """As attn_fwd launches: maxnreg only when TileConfig.max_registers sets a cap."""
    return {"maxnreg": c.max_registers} if c.max_registers else {}


def _row_box(io: str, rows: int, width: int) -> str:
    """The signature of a kernels.tma.chunk_descriptors descriptor: (1, 1, rows, width) boxes."""
    return f"tensordesc<{io}[1,1,{rows},{width}]>"


def _tile_shape(c: TileConfig) -> dict:
    return dict(block_m=c.block_m, block_n=c.block_n, num_warps=c.num_warps)


def _forward_tiles(case: Case) -> dict:
    c = case.config
    choices = ",".join(name for name, on in (("tma", c.tma), ("no-nan-flags", not c.nan_flags),
                                             (f"max-registers={c.max_registers}",
                                              c.max_registers)) if on)
    return dict(**_tile_shape(c), num_stages=c.num_stages, choices=choices)


def _backward_tiles(case: Case) -> dict:
    c = case.config
    return dict(block_m=c.bwd_block_m, block_n=c.bwd_block_n, num_warps=c.bwd_num_warps,
                num_stages=c.bwd_num_stages, dq_pass=c.bwd_dq_pass, key_slices=c.bwd_key_slices)


def _backward_kernel():
    from kernels.backward import _attn_bwd
    return _attn_bwd


def _backward_specialization(fn, case: Case):
    """Arguments of `kernels.backward.attn_bwd` for contiguous q, k, v and dO."""
    cfg, v = case.config, case.variant
    io = DTYPES[case.dtype]
    pointers = {"Q": io, "K": io, "V": io, "DO": io, "DK": io, "DV": io,
                "DQ": io if cfg.bwd_dq_pass else "fp32", "STAT": "fp32", "INV_L": "fp32",
                "DELTA": "fp32"}
    unit = [f"stride_{t}d" for t in ("q", "k", "v", "do", "dk")] + list(case.length_one)
    # padded_q is a whole number of blocks of >= 16 rows
    div16 = [f"stride_{t}{d}" for t in ("q", "k", "v", "do", "dk") for d in "bh"] + \
        ["stride_qm", "stride_kn", "stride_vn", "stride_dom", "stride_dkn", "padded_q"]
    if case.head_dim % 16 or case.v_dim % 16:  # strides are multiples of the head dims only
        div16 = ["padded_q"]
    constexprs = dict(IS_CAUSAL=case.causal, DEFER_NORM=v.defer_norm, SEQ_PARALLEL=v.seq_parallel,
                      SPLIT_Q=v.split_q, KEY_SLICES=1 if v.split_q else cfg.bwd_key_slices,
                      DQ_PASS=cfg.bwd_dq_pass, BLOCK_M=cfg.bwd_block_m, BLOCK_N=cfg.bwd_block_n,
                      HEAD_DIM=case.head_dim, BLOCK_D=block_d(case.head_dim),
                      HEAD_DIM_V=case.v_dim, BLOCK_DV=block_d(case.v_dim),
                      INPUT_PRECISION=cfg.input_precision)
    return runtime_specialization(fn, pointers, constexprs, floats=("qk_scale", "sm_scale"),
                                  unit=unit, div16=div16)


def _gluon_forward_kernel():
    from kernels.gluon_forward import _gluon_attn_fwd
    return _gluon_attn_fwd


def _gluon_forward_specialization(fn, case: Case):
    """Arguments of `kernels.gluon_forward.gluon_attn_fwd` for contiguous q, k, v and o."""
    cfg, v = case.config, case.variant
    io = DTYPES[case.dtype]
    pointers = {"Q": io, "K": io, "V": io, "O": io, "O_RES": io, "LSE": "fp32", "M": "fp32",
                "L": "fp32"}
    div16 = [f"stride_{name}" for name in ("qb", "qh", "qm", "kb", "kh", "kn", "vb", "vh", "vn",
                                           "ob", "oh", "om")]
    constexprs = dict(IS_CAUSAL=case.causal, DEFER_NORM=v.defer_norm, SEQ_PARALLEL=v.seq_parallel,
                      KEY_SLICES=1 if v.split_q else cfg.num_warps, BLOCK_M=cfg.block_m,
                      BLOCK_N=cfg.block_n, HEAD_DIM=case.head_dim, NUM_WARPS=cfg.num_warps,
                      STORE_O_RES=False)
    return runtime_specialization(fn, pointers, constexprs, floats=("qk_scale",),
                                  unit=list(case.length_one), div16=div16)


def _gluon_supports(dtype: str, head_dim: int) -> bool:
    from kernels.gluon_forward import unsupported
    return unsupported(dtype, head_dim) is None


def _hopper_forward_kernel():
    from kernels.hopper_forward import _hopper_attn_fwd
    return _hopper_attn_fwd


def _hopper_forward_specialization(fn, case: Case):
    """Arguments of `kernels.hopper_forward.hopper_attn_fwd` (descriptors over q, k, v, the
    FA1 schedule's scratch and o)."""
    from kernels.hopper_forward import sm90_signature
    cfg = case.config
    signature, constexprs = sm90_signature(case.variant, case.dtype, case.head_dim, cfg.block_n,
                                           cfg.num_stages, case.causal,
                                           persistent=cfg.persistent)
    return signature, constexprs, {}


def _hopper_supports(dtype: str, head_dim: int) -> bool:
    from kernels.hopper_forward import unsupported
    return unsupported(dtype, head_dim) is None


def _hopper_backward_kernel():
    from kernels.hopper_backward import _hopper_attn_bwd
    return _hopper_attn_bwd


def _hopper_backward_specialization(fn, case: Case):
    """Arguments of `kernels.hopper_backward.hopper_attn_bwd` (descriptors over q, k, v, dO)."""
    from kernels.hopper_backward import sm90_signature
    signature, constexprs = sm90_signature(case.variant, case.dtype, case.head_dim, case.causal)
    return signature, constexprs, {}


def _hopper_backward_tiles(case: Case) -> dict:
    """The Hopper backward's fixed tiles: its query rows a step and the Q/dO ring's slots
    (`kernels.plan.hopper_backward`: `bwd_rows`, `bwd_stages`), 128 keys a program."""
    from kernels.plan.hopper_backward import BLOCK_N, bwd_rows, bwd_stages
    rows = bwd_rows(case.head_dim, case.variant)
    return dict(block_m=rows, block_n=BLOCK_N, num_warps=4,
                num_stages=bwd_stages(case.head_dim, case.variant.split_q, rows))


SPECS = {spec.name: spec for spec in [
    KernelSpec("attn_fwd", _forward_kernel, _forward_specialization,
               _forward_tiles, register_cap=_forward_register_cap),
    # the second launch of a causal forward: recomputes row blocks flagged with a NaN
    KernelSpec("attn_fwd_repair", _forward_kernel,
               lambda fn, case: _forward_specialization(fn, case, repair=True),
               _forward_tiles, causal_only=True, register_cap=_forward_register_cap),
    # the forward of a call that will be differentiated: also stores o's rounding residual
    KernelSpec("attn_fwd_grad", _forward_kernel,
               lambda fn, case: _forward_specialization(fn, case, o_residual=True),
               _forward_tiles, supports=lambda dtype, head_dim: dtype != "float32",
               register_cap=_forward_register_cap),
    KernelSpec("attn_bwd", _backward_kernel, _backward_specialization,
               _backward_tiles),
    KernelSpec("gluon_attn_fwd", _gluon_forward_kernel, _gluon_forward_specialization,
               lambda case: {**_tile_shape(case.config), "num_stages": 1}, backend="gluon",
               supports=_gluon_supports),
    # the Hopper chassis (warp-specialized: registers per partition from setmaxnreg)
    KernelSpec("hopper_attn_fwd", _hopper_forward_kernel, _hopper_forward_specialization,
               lambda case: {**_tile_shape(case.config), "num_stages": case.config.num_stages},
               backend="hopper",
               supports=_hopper_supports),
    # the Hopper chassis's backward (D61): split-Q and split-K of the dQ product
    KernelSpec("hopper_attn_bwd", _hopper_backward_kernel, _hopper_backward_specialization,
               _hopper_backward_tiles, backend="hopper", supports=_hopper_supports),
]}


@dataclass
class CompileReport:
    kernel: str
    variant: str
    dtype: str
    head_dim: int
    causal: bool
    block_m: int
    block_n: int
    num_warps: int
    num_stages: int
    key_slices: int
    input_precision: str
    dq_pass: bool | None = None  # backward only: dQ in its own pass (TileConfig.bwd_dq_pass)
    registers: int | None = None  # per thread, from ptxas -v
    spill_stores: int | None = None  # bytes, from ptxas -v
    spill_loads: int | None = None
    stack_bytes: int | None = None  # stack frame per thread (spills live there)
    shared_bytes: int | None = None  # metadata.shared: dynamic shared memory per block
    wgmma: bool | None = None  # PTX uses Hopper's warpgroup MMA
    # ptxas made every wgmma wait for the one before (its C7515 "Potential Performance Loss"
    # note): the tensor cores then never overlap anything within a warpgroup
    wgmma_serialized: bool | None = None
    # memory orders of the PTX's atomic adds (dQ in the loop with seq_parallel): "relaxed" is
    # a fire-and-forget reduction; "acq_rel" (Triton's default) wraps each in a GPU-wide fence
    atomics: str = ""
    choices: str = ""  # tile choices that change the code (TileConfig.tma)
    compile_s: float | None = None  # near zero on a Triton cache hit (~/.triton/cache)
    error: str | None = None
    head_dim_v: int | None = None  # v's own head dim; None: head_dim
    # occupancy bound: blocks one SM can hold by sm_90's limits (`ctas_per_sm`); None where
    # the case failed. Warp-specialized kernels (setmaxnreg): from ptxas's count over every
    # warp of the launch (PTX .reqntid), the budget setmaxnreg shares out
    ctas_per_sm: int | None = None
    # warp-specialized kernels: registers a thread of each partition holds after setmaxnreg,
    # the default partition first, then the workers' (`partition_registers`)
    partition_registers: tuple[int, ...] = ()
    launch_warps: int | None = None  # every warp of the launch (PTX .reqntid / 32)
    # warpgroup-MMA kernels: how the compiled code synchronises (`sync_counts`, `sync_label`)
    sync: str = ""

    @property
    def ok(self) -> bool:
        return self.error is None


def ctas_per_sm_limits(registers: int, num_warps: int, shared_bytes: int) -> dict[str, int]:
    """The blocks one sm_90 SM can hold under each of its limits (an occupancy bound from the
    compile facts, not a measurement); `ctas_per_sm` is their minimum.

    registers: per thread (ptxas -v); shared_bytes: the block's shared memory (metadata.shared).
    - "registers": 65536 32-bit registers per SM, allocated per warp in units of 256, i.e. the
      registers per thread rounded up to a multiple of 8; the SM holds whole blocks' warps.
    - "shared": 228 KiB per SM (the largest carveout), each block taking its shared memory plus
      1 KiB the system reserves per block; 0 above the 227 KiB one block may have.
    - "threads": 2048 resident threads per SM.
    - "blocks": 32 resident blocks per SM.
    For a warp-specialized kernel (setmaxnreg moves registers between warpgroups) the register
    limit is the launch's: ptxas's count over every warp of the launch (num_warps: the PTX's
    .reqntid / 32), the budget its setmaxnreg shares out (the Hopper chassis). The gate's
    Gluon forward (gluon_attn_fwd) is not warp-specialized: every warp runs the same code with
    ptxas's count, as in the Triton kernels.
    """
    warp_registers = -(-registers * 32 // SM90_REGISTER_UNIT) * SM90_REGISTER_UNIT
    by_registers = SM90_REGISTERS // max(warp_registers, 1) // num_warps
    by_shared = (0 if shared_bytes > SM90_MAX_SHARED
                 else SM90_SM_SHARED // (shared_bytes + SM90_SHARED_RESERVED))
    return dict(registers=by_registers, shared=by_shared,
                threads=SM90_MAX_THREADS // (32 * num_warps), blocks=SM90_MAX_BLOCKS)


def ctas_per_sm(registers: int, num_warps: int, shared_bytes: int) -> int:
    """Blocks (CTAs) per sm_90 SM: the least of `ctas_per_sm_limits` (an occupancy bound)."""
    return min(ctas_per_sm_limits(registers, num_warps, shared_bytes).values())


def occupancy_limiter(registers: int, num_warps: int, shared_bytes: int) -> str:
    """Which limit sets `ctas_per_sm`: "registers", "shared", "threads" or "blocks"."""
    limits = ctas_per_sm_limits(registers, num_warps, shared_bytes)
    return min(limits, key=limits.get)


def ptxas_usage(log: str) -> dict:
    """Registers, spill bytes and stack frame from the `ptxas -v` log of a single kernel."""
    found = lambda pattern: int(re.search(pattern, log).group(1))  # noqa: E731
    return dict(registers=found(r"Used (\d+) registers"),
                spill_stores=found(r"(\d+) bytes spill stores"),
                spill_loads=found(r"(\d+) bytes spill loads"),
                stack_bytes=found(r"(\d+) bytes stack frame"),
                wgmma_serialized="wgmma.mma_async instructions are serialized" in log)


def launch_warps(ptx: str, num_warps: int) -> int:
    """Warps of a launch: the PTX's .reqntid (a warp-specialized kernel's workers included),
    or num_warps where it has none."""
    found = re.search(r"\.reqntid (\d+)", ptx)
    return int(found.group(1)) // 32 if found else num_warps


def partition_registers(ptx: str, ttgir: str) -> tuple[int, ...]:
    """A warp-specialized kernel's registers a thread per partition: the default partition's,
    then each worker's as requested (TTGIR's requestedRegisters, which its setmaxnreg sets).
    The default partition gets what the launch's registers (PTX .maxnreg a thread over
    .reqntid threads) leave after the workers' warpgroups, at most 256, a multiple of 8
    (Triton's allocation; in the chassis's PTX the default partition's setmaxnreg.dec has
    that value: 216 for split-Q, 248 for split-K with seq_parallel)."""
    workers = re.search(r"requestedRegisters = array<i32: ([\d, ]+)>", ttgir)
    maxnreg, threads = re.search(r"\.maxnreg (\d+)", ptx), re.search(r"\.reqntid (\d+)", ptx)
    if not (workers and maxnreg and threads):
        return ()
    regs = tuple(int(n) for n in workers.group(1).split(","))
    left = int(maxnreg.group(1)) * int(threads.group(1)) // 128 - sum(regs)
    return (min(256, left // 8 * 8),) + regs


def rerun_ptxas(ptx: str) -> str:
    """The `ptxas -v` log for `ptx` (sm_90a, Triton's bundled ptxas), for Triton cache hits."""
    from triton.backends.nvidia.compiler import get_ptxas
    with tempfile.TemporaryDirectory() as tmp:
        src = os.path.join(tmp, "k.ptx")
        with open(src, "w") as f:
            f.write(ptx)
        cmd = [get_ptxas(90).path, "-v", "--gpu-name=sm_90a", src, "-o", src + ".o"]
        return subprocess.run(cmd, check=True, capture_output=True, text=True).stderr


def make_case(variant: Variant, dtype: str, head_dim: int, causal: bool,
              config: TileConfig | None = None, length_one=(), backend: str = "triton",
              head_dim_v: int | None = None) -> Case:
    """A given config is used as is, as `flash_attention` does (it validates, never refits);
    the default one is for the wider of q's and v's head dims, as flash_attention picks it."""
    widest = max(head_dim, head_dim_v or head_dim)
    config = config or default_config(widest, on_gpu=True, variant=variant, dtype=dtype,
                                      backend=backend, causal=causal)
    return Case(variant, dtype, head_dim, causal, config, tuple(length_one), head_dim_v)


def compile_for_sm90(spec_name: str, variant: Variant, dtype: str, head_dim: int, causal: bool,
                     config: TileConfig | None = None, length_one=(),
                     head_dim_v: int | None = None) -> CompileReport:
    """Compile one case for sm_90; raises on a compile error (see `run_gate` for collecting)."""
    return compile_kernel_for_sm90(spec_name, variant, dtype, head_dim, causal, config,
                                   length_one, head_dim_v)[0]


def compile_kernel_for_sm90(spec_name: str, variant: Variant, dtype: str, head_dim: int,
                            causal: bool, config: TileConfig | None = None, length_one=(),
                            head_dim_v: int | None = None):
    """`compile_for_sm90`, also returning Triton's CompiledKernel: (report, compiled)."""
    import triton
    from triton import knobs
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource
    from triton.experimental.gluon._runtime import GluonASTSource

    spec = SPECS[spec_name]
    case = make_case(variant, dtype, head_dim, causal, config, length_one, spec.backend,
                     head_dim_v)
    fn = spec.kernel()
    if not isinstance(fn, triton.runtime.JITFunction):
        raise RuntimeError(f"{spec_name} is a {type(fn).__name__}, not a JITFunction: unset "
                           "TRITON_INTERPRET before triton is imported to compile for sm_90")
    signature, constexprs, attrs = spec.specialize(fn, case)
    report = _blank_report(spec_name, case)
    start = time.perf_counter()
    with knobs.nvidia.scope(), contextlib.redirect_stdout(io.StringIO()) as out:
        knobs.nvidia.dump_ptxas_log = True  # Triton prints its own `ptxas -v` log
        # Gluon's source also sets the module's num-warps, which its reductions need
        source = (ASTSource if spec.backend == "triton" else GluonASTSource)(fn, signature,
                                                                            constexprs, attrs)
        compiled = triton.compile(source,
                                  target=GPUTarget("cuda", 90, 32),
                                  options=dict(num_warps=report.num_warps,
                                               num_stages=report.num_stages,
                                               **spec.register_cap(case.config)))
    report.compile_s = round(time.perf_counter() - start, 2)
    log = out.getvalue()
    if "Used" not in log:  # a cache hit runs no ptxas
        log = rerun_ptxas(compiled.asm["ptx"])
    report.shared_bytes = compiled.metadata.shared
    report.wgmma = "wgmma" in compiled.asm["ptx"]
    report.atomics = ",".join(sorted(set(ATOMIC_ORDER.findall(compiled.asm["ptx"]))))
    for key, value in ptxas_usage(log).items():
        setattr(report, key, value)
    report.launch_warps = launch_warps(compiled.asm["ptx"], report.num_warps)
    report.ctas_per_sm = ctas_per_sm(report.registers, report.launch_warps, report.shared_bytes)
    if report.wgmma:
        report.sync = sync_label(sync_counts(compiled.asm["ptx"]))
    if "setmaxnreg" in compiled.asm["ptx"]:
        report.partition_registers = partition_registers(compiled.asm["ptx"],
                                                         compiled.asm["ttgir"])
    if report.shared_bytes > SM90_MAX_SHARED:
        report.error = (f"needs {report.shared_bytes} bytes of shared memory; "
                        f"an sm_90 block may have {SM90_MAX_SHARED}")
    miscompiled = uninitialized_uniform_reads(cubin_sass(compiled.asm["cubin"]))
    if miscompiled:  # beside a shared-memory failure, not instead of it
        report.error = "; ".join(filter(None, [report.error, (
            "ptxas read uniform registers before writing them ("
            + "; ".join(f"{insn} at {addr}" for addr, insn, _ in miscompiled[:2])
            + "): its machine code is wrong (fa2check.inspect.sass, D115)")]))
    return report, compiled


WGMMA_WAIT = re.compile(r"wgmma\.wait_group\.sync\.aligned\s+(\d+);")
NAMED_BARRIER = re.compile(r"\b(bar\.sync|bar\.arrive|barrier\.sync)\s+(\d+)(?:,\s*(\d+))?")


def sync_counts(ptx: str) -> dict:
    """The PTX's synchronisation sites (static counts, not executions): wgmma waits by the
    number of groups left in flight, mbarrier waits and arrives, and named barriers by
    (instruction, id, threads; threads None: the whole CTA)."""
    return dict(
        wgmma_waits=dict(sorted(Counter(int(n) for n in WGMMA_WAIT.findall(ptx)).items())),
        mbarrier_waits=ptx.count("mbarrier.try_wait"),
        mbarrier_arrives=len(re.findall(r"mbarrier\.arrive(?!\.expect_tx)", ptx)),
        named=dict(Counter((op, int(i), int(n) if n else None)
                           for op, i, n in NAMED_BARRIER.findall(ptx))))


def sync_label(counts: dict) -> str:
    """'wait0 8 wait1 2, mbar 7/9, turns 12': wgmma waits by depth (OVERLAP's wait_group 1
    keeps a product in flight), mbarrier waits / arrives, and the named barriers of 256
    threads (PINGPONG's turns between the two consumer warpgroups)."""
    waits = " ".join(f"wait{d} {n}" for d, n in counts["wgmma_waits"].items())
    turns = sum(n for (_, _, threads), n in counts["named"].items() if threads == 256)
    return (f"{waits}, mbar {counts['mbarrier_waits']}/{counts['mbarrier_arrives']}"
            + (f", turns {turns}" if turns else ""))


def _blank_report(spec_name: str, case: Case) -> CompileReport:
    cfg = case.config
    tiles = {"key_slices": cfg.key_slices, **SPECS[spec_name].tiles(case)}  # the backward's own
    return CompileReport(spec_name, str(case.variant), case.dtype, case.head_dim, case.causal,
                         input_precision=cfg.input_precision, head_dim_v=case.head_dim_v,
                         **tiles)


def _compile_or_report(spec_name: str, case: Case) -> CompileReport:
    try:
        return compile_for_sm90(spec_name, case.variant, case.dtype, case.head_dim, case.causal,
                                case.config, case.length_one, case.head_dim_v)
    except Exception as e:  # noqa: BLE001 - every failure becomes a report
        report = _blank_report(spec_name, case)
        report.error = describe_error(e)
        return report


def describe_error(e: BaseException) -> str:
    """The root cause on the first line, then the innermost Triton source excerpt if any."""
    chain = [e]
    while (nxt := chain[-1].__cause__ or chain[-1].__context__) and nxt not in chain:
        chain.append(nxt)
    root = chain[-1]
    text = f"{type(root).__name__}: {root}".strip()
    excerpts = [x for x in chain if type(x).__name__ == "CompilationError"]
    if excerpts and excerpts[-1] is not root:
        text += f"\n{excerpts[-1]}"
    return text


# the tile widths, and head dims whose tiles have a second column chunk (32 + 16, 64 + 32,
# 128 + 16): ptxas miscompiled REPAIR only there (D115)
DEFAULT_HEAD_DIMS = (*TILE_HEAD_DIMS, 40, 96, 130)


def gate_cases(variants, dtypes, head_dims, causals, specs=tuple(SPECS), overrides=None,
               length_one=()) -> list[tuple[str, Case]]:
    """(kernel spec, case) for every combination a launcher can reach. A head dim is an int
    or a pair (q's, v's), as `head_dim_list` reads 192/128."""
    cases = []
    for spec, variant, dtype, dims, causal in itertools.product(specs, variants, dtypes,
                                                                head_dims, causals):
        head_dim, head_dim_v = (dims, dims) if isinstance(dims, int) else dims
        if SPECS[spec].causal_only and not causal or not SPECS[spec].supports(dtype, head_dim):
            continue
        if SPECS[spec].backend != "triton" and head_dim_v != head_dim:
            continue  # the Gluon forward takes v of q's head dim only (D56)
        config = default_config(max(head_dim, head_dim_v), on_gpu=True, variant=variant,
                                dtype=dtype, backend=SPECS[spec].backend, causal=causal)
        config = dataclasses.replace(config, **(overrides or {}))
        cases.append((spec, make_case(variant, dtype, head_dim, causal, config, length_one,
                                      head_dim_v=None if head_dim_v == head_dim else head_dim_v)))
    return cases


def run_gate(variants, dtypes, head_dims, causals, specs=tuple(SPECS), overrides=None,
             jobs: int = 1, progress: Callable[[CompileReport], None] | None = None,
             length_one=()):
    """Compile every combination; failures are returned as reports with `error` set.

    overrides: TileConfig fields replacing the default config's; jobs > 1 compiles in that
    many worker processes; progress is called with each report as it finishes; length_one:
    sequence lengths compiled as the constant 1 (see Case).
    """
    cases = gate_cases(variants, dtypes, head_dims, causals, specs, overrides, length_one)
    return run_in_workers(_compile_or_report, cases, jobs, progress)


def run_in_workers(fn, cases: list[tuple], jobs: int, progress=None) -> list:
    """[fn(*case) for case in cases], in that order, on `jobs` spawned worker processes when
    jobs > 1 (spawn: no fork of a process that runs rich's refresh thread); progress is called
    with each result as it finishes."""
    results = [None] * len(cases)

    def done(i, result):
        results[i] = result
        if progress:
            progress(result)

    if jobs <= 1:
        for i, case in enumerate(cases):
            done(i, fn(*case))
    else:
        with ProcessPoolExecutor(jobs, mp_context=get_context("spawn")) as pool:
            futures = {pool.submit(fn, *case): i for i, case in enumerate(cases)}
            for future in as_completed(futures):
                done(futures[future], future.result())
    return results


def _table(reports):
    table = Table(title="sm_90 compile gate")
    for column in ("kernel", "variant", "dtype", "D", "causal", "BM", "BN", "warps", "stages",
                   "slices", "choices", "dQ", "regs", "spill st/ld", "smem", "CTAs/SM", "wgmma",
                   "sync", "s", "status"):
        table.add_column(column, justify="left" if column in ("kernel", "variant", "dtype",
                                                               "status") else "right")
    for r in reports:
        status = Text("ok", "green") if r.ok else Text(r.error.splitlines()[0][:60], "red")
        spills = Text("" if r.spill_stores is None else f"{r.spill_stores}/{r.spill_loads}",
                      "yellow" if r.spill_stores else "")
        table.add_row(r.kernel, r.variant, r.dtype, head_dims_label(r.head_dim, r.head_dim_v),
                      "y" if r.causal else "n",
                      str(r.block_m), str(r.block_n), str(r.num_warps), str(r.num_stages),
                      str(r.key_slices), r.choices, _dq(r), _registers(r),
                      spills, _s(r.shared_bytes), _ctas(r), _wgmma(r), r.sync, _s(r.compile_s),
                      status)
    return table


def _registers(r) -> str:
    """ptxas's count, and a warp-specialized kernel's per partition: '168 (216/232/56)'."""
    parts = "/".join(map(str, r.partition_registers))
    return _s(r.registers) + (f" ({parts})" if parts else "")


def _ctas(r) -> str:
    """'2 smem': the occupancy bound and the limit that sets it (regs, smem, threads or
    blocks; see ctas_per_sm_limits)."""
    if r.ctas_per_sm is None:
        return ""
    limiter = occupancy_limiter(r.registers, r.launch_warps or r.num_warps, r.shared_bytes)
    return f"{r.ctas_per_sm} {LIMITER_LABEL[limiter]}"


LIMITER_LABEL = dict(registers="regs", shared="smem", threads="threads", blocks="blocks")


DQ_MODE = {True: "pass", False: "in loop"}
ATOMIC_ORDER = re.compile(r"\b(?:atom|red)\.global(?:\.\w+)*?\.(relaxed|acquire|release|acq_rel)\b")


def _dq(r):
    """Where dQ is computed, and the order of its atomic adds when they are not relaxed."""
    mode = _s(DQ_MODE.get(r.dq_pass))
    if r.atomics and r.atomics != "relaxed":
        return Text(f"{mode}, {r.atomics} atomics", "yellow")
    return mode


def _wgmma(r):
    if r.wgmma is None:
        return ""
    return Text("serial", "yellow") if r.wgmma_serialized else "yn"[not r.wgmma]


def _s(value) -> str:
    return "" if value is None else str(value)


def interpreting() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


def rerun_without_interpreter(module: str, argv) -> int:
    """triton.jit already built interpreter objects in this process: run `python -m module`
    in a clean one and return its exit status."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    return subprocess.run([sys.executable, "-m", module, *argv], env=env).returncode


def add_case_arguments(p, kernels: str, dtypes: str, head_dims: str):
    """The options that select cases (kernel, variant, dtype, head_dim); help: their defaults."""
    p.add_argument("--kernel", action="append", choices=sorted(SPECS), help=f"default: {kernels}")
    p.add_argument("--variant", action="append", type=Variant.parse,
                   help="e.g. fa2, fa1 or '+defer-seqpar+splitq' (repeatable); default: all 8")
    p.add_argument("--dtype", action="append", choices=list(DTYPES), help=f"default: {dtypes}")
    p.add_argument("--head-dim", "--head-dims", action="extend", type=head_dim_list,
                   help=f"repeatable, or a comma-separated list (e.g. 40,80,96,160,192); "
                        f"default: {head_dims}")


def head_dim_list(text: str) -> list:
    """'64', '40,80,96' or '192/128' (q's head dim 192, v's 128): the head dims of one
    --head-dim option, ints and (q's, v's) pairs."""
    try:
        dims = [_head_dims(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected head dims like 64, 40,80,96 or 192/128, "
                                         f"got {text!r}")
    if not dims or min(min(d) if isinstance(d, tuple) else d for d in dims) < 1:
        raise argparse.ArgumentTypeError(f"head dims are positive, got {text!r}")
    return dims


def _head_dims(part: str):
    """'96' -> 96; '192/128' -> (192, 128)."""
    if "/" not in part:
        return int(part)
    q_dim, v_dim = part.split("/")
    return int(q_dim), int(v_dim)


def add_output_arguments(p):
    """--jobs and --json, shared with the layout report."""
    p.add_argument("--jobs", "-j", type=int, default=os.cpu_count() or 1,
                   help="worker processes (default: one per CPU)")
    p.add_argument("--json", metavar="PATH", help="write the reports as JSON")


def report_console(width: int):
    """A rich console; writing to a log file, `width` columns rather than 80."""
    console = Console()
    if not console.is_terminal:
        console.width = width
    return console


def summarize(console, reports, failed: int, started: float, json_path: str | None) -> int:
    """The closing line, the JSON file if asked for, and the exit status (1 if any failed)."""
    console.print(f"{len(reports) - failed}/{len(reports)} compiled for sm_90 in "
                  f"{time.perf_counter() - started:.0f} s")
    if json_path:
        with open(json_path, "w") as f:
            json.dump([dataclasses.asdict(r) for r in reports], f, indent=1)
    return 1 if failed else 0


@contextlib.contextmanager
def compile_progress(console, total: int):
    """A progress bar over `total` compiles; yields advance(description). Where the console is
    not a terminal (a log file, a device call), where a bar would print nothing until the end,
    a line at each tenth of the cases instead."""
    if not console.is_terminal:
        start, done = time.perf_counter(), 0

        def advance(description):
            nonlocal done
            done += 1
            if done * 10 // total > (done - 1) * 10 // total:
                console.print(f"compiling for sm_90: {done}/{total} in "
                              f"{time.perf_counter() - start:.0f} s (last: {description})",
                              highlight=False, markup=False)

        yield advance
        return

    with Progress(TextColumn("compiling for sm_90"), BarColumn(), MofNCompleteColumn(),
                  TimeElapsedColumn(), TextColumn("{task.description}"), console=console) as bar:
        task = bar.add_task("", total=total)
        yield lambda description: bar.update(task, advance=1, description=description)


INT_OVERRIDES = ("block_m", "block_n", "num_warps", "num_stages", "key_slices", "max_registers",
                 "bwd_block_m", "bwd_block_n", "bwd_num_warps", "bwd_num_stages", "bwd_key_slices")
BOOL_OVERRIDES = ("tma", "nan_flags", "bwd_dq_pass")


def parse_args(argv):
    p = argparse.ArgumentParser(prog="python -m fa2check.compile_gate", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    add_case_arguments(p, "all", "all", "16, 32, 64, 128 and 256, and 40, 96 and 130 (two "
                       "column chunks); any from 1 to 256 may be asked for")
    p.add_argument("--causal", action=argparse.BooleanOptionalAction, default=None,
                   help="only causal / only non-causal; default: both")
    for field in INT_OVERRIDES:
        p.add_argument("--" + field.replace("_", "-"), type=int, help="override the default config")
    p.add_argument("--tma", action=argparse.BooleanOptionalAction, default=None,
                   help="override the default config: K/V through tensor descriptors (forward)")
    p.add_argument("--nan-flags", action=argparse.BooleanOptionalAction, default=None,
                   help="override the default config: the causal forward's main launch flags "
                        "row blocks with a NaN for REPAIR (off: REPAIR reads first output rows)")
    p.add_argument("--bwd-dq-pass", action=argparse.BooleanOptionalAction, default=None,
                   help="override the default config: dQ in its own pass (backward)")
    p.add_argument("--length-one", action="append", default=[], choices=("seqlen_q", "seqlen_k"),
                   help="compile this length as the constant 1, as a call with length 1 is")
    add_output_arguments(p)
    return p.parse_args(argv)


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if interpreting():
        return rerun_without_interpreter("fa2check.compile_gate", argv)
    args = parse_args(argv)
    overrides = {f: getattr(args, f) for f in INT_OVERRIDES + BOOL_OVERRIDES
                 if getattr(args, f) is not None}
    variants = args.variant or Variant.all()
    dtypes = args.dtype or list(DTYPES)
    head_dims = args.head_dim or list(DEFAULT_HEAD_DIMS)
    causals = [args.causal] if args.causal is not None else [False, True]
    specs = args.kernel or list(SPECS)
    total = len(gate_cases(variants, dtypes, head_dims, causals, specs))

    console = report_console(180)
    start = time.perf_counter()
    with compile_progress(console, total) as advance:
        def progress(r):
            advance(f"{r.kernel} {r.variant} {r.dtype} D={r.head_dim} causal={r.causal}")
        reports = run_gate(variants, dtypes, head_dims, causals, specs=specs, overrides=overrides,
                           jobs=args.jobs, progress=progress, length_one=args.length_one)
    console.print(_table(reports))
    failed = [r for r in reports if not r.ok]
    for r in failed:
        console.print(f"FAILED {r.kernel} {r.variant} {r.dtype} D={r.head_dim} causal={r.causal} "
                      f"(BM={r.block_m} BN={r.block_n} warps={r.num_warps} stages={r.num_stages} "
                      f"slices={r.key_slices}):\n{r.error}", style="red", markup=False,
                      highlight=False)
    return summarize(console, reports, len(failed), start, args.json)


if __name__ == "__main__":
    sys.exit(main())
