"""Tile configurations for the ablation: one search space for every variant, a short tuning run
per variant, and compiling the candidates ahead of time in parallel processes.

Each variant gets its own winner from the same candidates, so no variant runs on another's
tiles. Candidates a variant cannot use are left out for it: split-K variants need block_n >= 64
so that a tile still splits into the 4 key slices of at least 16 keys that define them (FA1's 4
warps); with block_n = 32 the launcher would quietly cut the split to 2 slices. Two slices are
tried only where a candidate names them (key_slices=2, recorded with the winner). The "off"
designs also get what FA1 used that the FA2 tiles lack: 16-row query steps for seq_parallel
off (SEQ_SERIAL_FWD). TileConfig.fa1_splits and fa1_bwd_splits are not tuned: seq_parallel off
runs FA1's own launcher's heuristics (D90), or with --fa1-grid batch-heads one program per
(batch, head).

A winner is chosen per (part, variant, head_dim, causal) and seqlen band (`TUNE_BANDS`): each
band's winner is tuned on one representative cell (the first dtype of the grid, the seqlen
nearest the band's tune seqlen) and reused for the band's other seqlens and dtypes; where it
came from is recorded with it. The forward has a band for short sequences (under 2048, tuned at
1024), the backward one for long ones (from 8192, tuned at 16384); the rest is tuned at 4096.
The backward reads split_q (off: FA1's split-K of the dQ products, D50), so each variant has
its own backward key; split-K's backward is FA1's shape (16 query rows a step, dQ in the loop,
slices of 16 keys), the one tile of kernels.plan.config's heuristic, not searched.

Compiling: Triton compiles each (kernel, constexprs, dtype) once, 1-10 s each on one core, and
a thread pool does not help (measured on the development machine: 4 forward kernels took
12.2 s one after another and 14.1 s on two threads, since compilation holds the GIL). So
`precompile` launches every needed kernel once on a tiny problem in worker processes
(spawned, one CUDA context each), which fills Triton's on-disk cache; the main process then
loads the compiled kernels instead of compiling them. A tiny problem specialises like the real
one when its integer arguments fall in the same classes (== 1, divisible by 16, other): same
heads, seqlen reduced within its class, contiguous layout.
"""
from __future__ import annotations

import dataclasses
import os
from concurrent.futures import ProcessPoolExecutor, TimeoutError, as_completed
from dataclasses import dataclass, replace
from multiprocessing import get_context

import torch

from ..core.problems import DTYPES
from ..core.results import read_json
from .contenders import parse_kernel_name

FWD_FIELDS = ("block_m", "block_n", "num_warps", "num_stages", "tma")
BWD_FIELDS = ("bwd_block_m", "bwd_block_n", "bwd_num_warps", "bwd_num_stages", "bwd_dq_pass")
PART_FIELDS = {"fwd": FWD_FIELDS, "bwd": BWD_FIELDS}
SPLIT_K_MIN_BLOCK_N = 64  # 4 key slices of >= 16 keys

# (block_m, block_n, num_warps, num_stages[, tma]), the same list for every variant of a
# head_dim; tma (K/V through tensor descriptors) is False where not given
FWD_SPACE = {
    64: [(128, 64, 4, 3), (128, 128, 8, 3), (128, 64, 8, 3), (64, 64, 4, 3), (64, 128, 4, 3),
         (32, 64, 4, 3), (64, 64, 4, 4), (128, 64, 8, 4), (64, 64, 4, 3, True),
         (128, 64, 8, 3, True), (64, 64, 4, 4, True), (128, 64, 4, 3, True),
         (128, 128, 8, 3, True), (64, 128, 4, 3, True), (64, 64, 4, 2, True)],
    128: [(128, 64, 8, 3), (128, 128, 8, 2), (64, 64, 4, 3), (64, 64, 8, 3), (64, 128, 8, 2),
          (32, 64, 4, 3), (32, 128, 4, 2), (64, 32, 4, 3), (64, 64, 4, 4), (128, 64, 8, 4),
          (128, 128, 8, 3), (64, 64, 4, 3, True), (128, 64, 8, 3, True), (64, 64, 4, 4, True),
          (128, 128, 8, 3, True), (32, 128, 4, 2, True), (64, 32, 4, 3, True),
          (128, 128, 8, 2, True)],
}  # default_config's choices are among them (split-K at d=128 defaults to (64, 64, 8, 3)).
# TMA (K/V through tensor descriptors) was 4-9% faster than the same tiles with pointer loads
# at 1k-4k in an A/B on the H200 (docs/decisions.md#D10), so every tile that won
# for some variant before has a TMA twin; TMA also takes the split-K tiles' spills down
# (compile gate: (32, 128, 4, 2) at d=128 from 1288 to 816 bytes). Dropped as never in any
# variant's best three in the tuned runs so far: (128, 32, 4, 3) and (64, 32, 4, 2) at d=64.
# Added with D19: (64, 64, 4, 2, True) at d=64 (42 KB of shared memory: room for 5
# CTAs an SM, though its 111 registers allow 4), the fastest FA2 tile of a 1k-2k causal A/B (up
# to 5% ahead of the winners at 2k, timed 100 ms a version, a longer load than the benchmark's;
# the tuner has not picked it for FA2).
# (A tile choice computing 1/4 or 1/2 of the exp2 by a polynomial on the FMA units was built
# for d=64 and measured 8-14% and 22-26% slower on the H200; removed, D14.)
# (bwd_block_m, bwd_block_n, bwd_num_warps, bwd_num_stages, bwd_dq_pass): both places of the
# dQ computation (kernels/backward.py). Chosen from the sm_90 compile gate's spill census
# (python -m fa2check.compile_gate --kernel attn_bwd --bwd-...) and the first tuned run
# (results/20261130-151801-*: the dQ pass won every key, and 3 stages beat 2 everywhere),
# so the list is mostly dQ-pass tiles around those winners, with more stages, and the best
# dQ-in-loop tiles of that run. (TMA loads in the backward's loops were built and measured
# no faster, 1-4% slower at d=64: D32; removed.) Those runs timed dQ in the loop with
# fenced (acq_rel) atomics; with relaxed ones (D31) the
# space gained the dQ-in-loop tiles the compile gate shows spilling least: d=64 (32, 64, 4, 2)
# none, (32, 64, 4, 3) 52 bytes causal; d=128 (16, 64, 4, 3) 92/116 bytes. Measured after (A/B,
# D31): relaxed adds made dQ in the loop 1.7-2.0x faster, still 1.2-1.5x slower
# than the dQ pass, and none of these tiles won a long-sequence key; the short-sequence
# winners in the committed results were tuned before they were added.
BWD_SPACE = {
    64: [(32, 64, 4, 3, True), (32, 64, 4, 4, True), (32, 64, 4, 5, True), (64, 64, 8, 3, True),
         (64, 128, 8, 2, True), (64, 128, 8, 3, True), (32, 128, 8, 3, True),
         (32, 128, 8, 4, True), (32, 128, 4, 3, True), (32, 128, 8, 2, False),
         (32, 128, 8, 3, False), (32, 64, 4, 2, False), (32, 64, 4, 3, False)],
    128: [(64, 128, 8, 2, True), (64, 128, 8, 3, True), (32, 128, 8, 3, True),
          (32, 128, 8, 4, True), (64, 64, 8, 3, True), (32, 64, 4, 3, True),
          (64, 64, 4, 2, True), (16, 128, 8, 3, True), (32, 128, 8, 2, False),
          (16, 128, 8, 2, False), (32, 128, 8, 3, False), (16, 64, 4, 3, False)],
}
# Causal keys also try these d=128 tiles with nan_flags off (kernels/forward.py: the REPAIR
# launch finds the row blocks to recompute from their first output row, and the main launch's
# epilogue checks nothing). A/Bs on the H200 put the tuned FA2 tile 0.6-4.8% faster with it
# off and the other TMA tiles here 2.8-11.7%; pointer-load tiles were slower off (d=128
# (64, 64, 4, 3) by up to 8%, d=64's tuned tile by 5-14%), though the main loop's PTX is the
# same: ptxas schedules it differently. No d=64 tile off beat d=64's best on, so d=64 has none
# (docs/decisions.md#D04).
CAUSAL_FWD_NAN_FLAGS_OFF = {128: [(64, 64, 4, 3, True), (64, 64, 4, 4, True),
                                  (128, 64, 8, 3, True)]}
# d=64 also tries these (block_m, block_n, num_warps, num_stages, tma, max_registers): the
# forward is latency-bound there (two CTAs of 4 warps an SM left half the cycles with no warp
# to issue, Nsight Compute, D14), and a register cap adds a resident CTA without
# spilling (sm_90 compile gate, bf16, causal and full): the pointer tiles use 133 registers,
# 3 CTAs an SM, and 128 without spills (4 CTAs; shared memory allows 4 with 3 stages, 5 with
# 2); the 2-stage TMA tile uses 111 (4 CTAs) and 96 with 4 bytes of spills (5 CTAs, 41 KB of
# shared memory each). Since the forward's causal-only mask (D23) the causal main
# launch needs 128 (pointer tile) and 112 (TMA tile) uncapped, and the TMA tile at 96
# spills nothing. On the H200 (D22) the TMA tile at 96 registers was the
# fastest of five tiles (these three, two uncapped) in 15 of 16 d=64 cells (1k-16k, both
# masks and dtypes), and FA2's re-tuned winner below 2k; the pointer tile at 128 gained 1-6%
# with the full mask, nothing causal; the 2-stage pointer tile at 128 lost 0.4-8%.
REGISTER_CAPPED_FWD = {64: [(64, 64, 4, 3, False, 128), (64, 64, 4, 2, False, 128),
                            (64, 64, 4, 2, True, 96)]}
# seq_parallel off (FA1's schedule, kernels/forward.py) also tries FA1's own 16-row query
# steps (mma.sync rather than wgmma, which needs 64 rows a warpgroup) with FA1's 128-key tiles
# and 64-key ones; 64-row steps are in the space above. Its HBM traffic falls as 1/block_n
# (the partial outputs go through HBM once a K/V tile).
SEQ_SERIAL_FWD = {64: [(16, 64, 4, 2), (16, 128, 4, 2)], 128: [(16, 64, 4, 2), (16, 128, 4, 2)]}
SEQ_SERIAL_FWD_OTHER = [(16, 64, 4, 2)]
# Split-K's key slices: 4 (FA1's 4 warps, WARPS_N = 4) on every candidate, and 2 on these
# (each slice's partial output is a (block_m, D) float32 tile, so fewer slices spill less).
SPLIT_K_TWO_SLICES = {64: [(128, 64, 4, 3), (64, 64, 4, 3), (64, 128, 4, 3)],
                      128: [(64, 64, 8, 3), (64, 64, 4, 3), (64, 128, 8, 2)]}
SPLIT_K_TWO_SLICES_OTHER = [(64, 64, 4, 2)]
# Other head dims: small tiles that fit the registers and shared memory of any of them.
FWD_SPACE_OTHER = [(64, 64, 4, 2), (64, 32, 4, 2), (32, 64, 4, 2), (128, 64, 8, 2)]
BWD_SPACE_OTHER = [(32, 32, 4, 2, False), (32, 64, 4, 2, False), (64, 64, 8, 2, False),
                   (32, 64, 4, 2, True), (16, 64, 4, 2, True)]
# The Gluon forward (mma.sync, no software pipeline: one stage): (block_m, block_n, warps, 1)
# for every head_dim. Split-Q needs 16 rows per warp, split-K 16 keys per warp (a slice each),
# so each variant keeps the candidates its split can run (see kernels.gluon_forward).
GLUON_FWD_SPACE = [(64, 32, 4, 1), (64, 64, 4, 1), (128, 32, 8, 1), (128, 64, 8, 1),
                   (64, 128, 4, 1), (16, 64, 4, 1), (32, 64, 4, 1), (16, 128, 4, 1),
                   (32, 128, 4, 1)]
# The Hopper chassis (kernels/hopper_forward.py): 64 rows a consumer warpgroup and 4 warps by
# design; block_n and the K/V ring's stages are its tile choices, less those whose buffers pass
# the shared memory a block may use (hopper_forward.shared_bytes, SHARED_LIMIT).
HOPPER_FWD_SPACE = [(64, 128, 4, 1), (64, 128, 4, 2), (64, 128, 4, 3), (64, 64, 4, 1),
                    (64, 64, 4, 2), (64, 64, 4, 3),  # 1 stage: FA1's schedule only (D55)
                    (64, 256, 4, 1), (64, 256, 4, 2)]  # 256 keys: split-K only (D67)
# The interpreter: two small candidates, so the tuning code path runs cheaply on a CPU.
CPU_FWD_SPACE = [(32, 16, 4, 1), (16, 32, 4, 1, True)]
CPU_BWD_SPACE = [(16, 32, 4, 1, False), (32, 16, 4, 1, True)]

# Tuning's last step: the fastest FINALISTS of the first pass are timed again, in FINAL_ROUNDS
# interleaved rounds, and the lowest median of those wins. The top tiles of a key are often
# within 1-3% of each other, and a pass times them one after another while the GPU's clock
# and power drift (on the H200 the finalists' final medians were -0.7% to +7.3% off their own
# first-pass times; docs/decisions.md#D18). In their first use they kept the first
# pass's leader in all 32 keys.
FINALISTS = 3
FINAL_ROUNDS = 3

TUNE_SEQLEN = 4096
# Seqlen bands, per part: {band: (first seqlen of the band, seqlen it is tuned on)}; the band
# "" is tuned at TUNE_SEQLEN (--tune-seqlen). Why more than one:
# - bwd "long": the tile tuned at 4k for FA2 d=128 causal, (32, 64, 4, 3), ran 16k fwd+bwd 4.4%
#   slower than (64, 128, 8, 3) on the H200 (docs/decisions.md#D17). The forward
#   has no long band: at 16k its slowest variants would make the 32 forward keys' tuning about
#   800 s (fa2check.ablate.plan's estimate), more than a device call.
# - fwd "short": at 1k a row block walks a quarter of the K/V tiles it walks at 4k, so the
#   per-program costs weigh more; every tile of the space timed at 1k and 2k on the H200 found
#   tiles 2-3% faster than the 4k winners at 1k and none at 2k (docs/decisions.md#D16).
TUNE_BANDS = {"fwd": {"short": (0, 1024), "": (2048, TUNE_SEQLEN)},
              "bwd": {"": (0, TUNE_SEQLEN), "long": (8192, 16384)}}


def band_of(part: str, seqlen: int) -> str:
    """The seqlen band whose winner a part uses at this seqlen."""
    return max(((start, band) for band, (start, _) in TUNE_BANDS[part].items()
                if start <= seqlen))[1]


def band_seqlens(part: str, band: str) -> str:
    """The seqlens a band covers, for tables: '< 2048', '>= 8192', '2048-8191' or 'all'."""
    starts = sorted(start for start, _ in TUNE_BANDS[part].values())
    start = TUNE_BANDS[part][band][0]
    ends = [s for s in starts if s > start]
    if start == 0:
        return f"< {ends[0]}" if ends else "all"
    return f">= {start}" if not ends else f"{start}-{ends[0] - 1}"


@dataclass(frozen=True)
class TuneKey:
    part: str  # "fwd" or "bwd"
    variant: str  # str(Variant)
    head_dim: int
    causal: bool
    band: str = ""  # the seqlen band of TUNE_BANDS[part] this winner is for

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)


def variant_of(key: TuneKey):
    return parse_kernel_name(key.variant)[1]


def part_variant(part: str, variant):
    """The variant whose config a part uses: each part its own since D50, a Hopper switch
    variant its FA2 variant's (`variant.fa2`): the switches change the schedule only, so their
    game compares schedules on the same tiles, as ablations/probes/hopper_switches.py did (D66)."""
    return variant.fa2


def fields_of(config, part: str) -> dict:
    return {f: getattr(config, f) for f in PART_FIELDS[part]}


def candidates(part: str, head_dim: int, variant, on_gpu: bool,
               kernel_backend: str = "triton", causal: bool = False) -> list[dict]:
    """The search space for one part, head_dim and mask, less what `variant` cannot use."""
    if kernel_backend == "gluon":
        from kernels.gluon_forward import bad_tiles

        return [dict(zip(FWD_FIELDS, c)) for c in GLUON_FWD_SPACE
                if not bad_tiles(variant.split_q, *c[:3])]
    if kernel_backend == "hopper" and part == "fwd":
        from kernels.plan.hopper_forward import SHARED_LIMIT, STAGES, block_ns, shared_bytes

        return [dict(zip(FWD_FIELDS, c)) for c in HOPPER_FWD_SPACE
                if c[3] in STAGES[variant.seq_parallel] and c[1] in block_ns(variant)
                and shared_bytes(head_dim, c[1], c[3], variant.split_q, variant.seq_parallel,
                                 causal=causal) <= SHARED_LIMIT]
    if part == "bwd" and not variant.split_q and on_gpu:  # FA1's backward shape (D50)
        from kernels.plan.config import heuristic_config

        fa1 = heuristic_config(head_dim, True, variant)
        return [{**fields_of(fa1, "bwd"), "bwd_key_slices": fa1.bwd_key_slices}]
    from kernels.plan.tiles import block_d

    if not on_gpu:
        space = CPU_FWD_SPACE if part == "fwd" else CPU_BWD_SPACE
    elif part == "fwd":  # a head dim below a tile width fits its tiles (96: 128's)
        space = FWD_SPACE.get(block_d(head_dim), FWD_SPACE_OTHER)
    else:
        space = BWD_SPACE.get(block_d(head_dim), BWD_SPACE_OTHER)
    out = [dict(zip(PART_FIELDS[part], c)) for c in space]
    if part == "fwd" and causal and on_gpu:
        out += [{**dict(zip(FWD_FIELDS, c)), "nan_flags": False}
                for c in CAUSAL_FWD_NAN_FLAGS_OFF.get(head_dim, [])]
    if part == "fwd" and on_gpu:
        out += [{**dict(zip(FWD_FIELDS, c[:5])), "max_registers": c[5]}
                for c in REGISTER_CAPPED_FWD.get(head_dim, [])]
    if part == "fwd" and not variant.seq_parallel and on_gpu:
        out += [dict(zip(FWD_FIELDS, c))
                for c in SEQ_SERIAL_FWD.get(head_dim, SEQ_SERIAL_FWD_OTHER)]
    if part == "fwd" and not variant.split_q and on_gpu:
        out = [c for c in out if c["block_n"] >= SPLIT_K_MIN_BLOCK_N]
        out += [{**dict(zip(FWD_FIELDS, c)), "key_slices": 2}
                for c in SPLIT_K_TWO_SLICES.get(head_dim, SPLIT_K_TWO_SLICES_OTHER)]
    return out


def build_config(head_dim: int, variant, on_gpu: bool, fwd: dict | None = None,
                 bwd: dict | None = None, kernel_backend: str = "triton"):
    """default_config with the given forward and backward fields, fitted to the variant."""
    from kernels import default_config

    config = default_config(head_dim, on_gpu, backend=kernel_backend)
    config = replace(config, **(fwd or {}), **(bwd or {}))
    return config.for_variant(variant, on_gpu)


def representative(cells, key: TuneKey, tune_seqlen: int = TUNE_SEQLEN):
    """The cell a key is tuned on: among the cells of its band, the grid's first dtype, seqlen
    nearest the band's tune seqlen (tune_seqlen for the band "")."""
    matching = [c for c in cells if c.head_dim == key.head_dim and c.causal == key.causal
                and band_of(key.part, c.seqlen) == key.band]
    dtype = matching[0].dtype
    matching = [c for c in matching if c.dtype == dtype]
    target = TUNE_BANDS[key.part][key.band][1] if key.band else tune_seqlen
    return min(matching, key=lambda c: (abs(c.seqlen - target), -c.seqlen))


def load_configs(paths) -> dict[TuneKey, dict]:
    """Config records from earlier results JSON files (later files win)."""
    found = {}
    for path in paths:
        data = read_json(path)
        for record in data.get("configs", []):
            key = TuneKey(**_with_band(record["key"]))
            found[key] = {**record, "key": key.as_dict(),
                          "source": f"loaded from {os.path.basename(path)} "
                                    f"({record.get('source', 'unknown')})"}
    return found


def _with_band(key: dict) -> dict:
    """Keys of older files: none had a band (tuned at 4k, the band ""), then the backward's
    had `long` (True: the band "long")."""
    key = dict(key)
    long_ = key.pop("long", False)
    key.setdefault("band", "long" if long_ else "")
    return key


# ----------------------------------------------------------------------------- precompiling

def warm_seqlen(seqlen: int) -> int:
    """A short seqlen in the same specialisation class as seqlen (1, multiple of 16, other)."""
    if seqlen == 1 or seqlen <= 256:
        return seqlen
    return 256 if seqlen % 16 == 0 else 257


def warm_job(job: dict) -> str | None:
    """Run one (part, variant, config) on a tiny problem so Triton compiles it; the error
    text when it cannot run (a compile error, too much shared memory), else None."""
    from kernels import TileConfig, flash_attention

    try:
        config = TileConfig(**job["config"])
        kernel_backend, variant = parse_kernel_name(job["variant"])
        s, d = warm_seqlen(job["seqlen"]), job["head_dim"]
        dtype = DTYPES[job["dtype"]]
        q = torch.randn(1, job["heads_q"], s, d, device="cuda", dtype=dtype)
        k, v = (torch.randn(1, job["heads_kv"], s, dk, device="cuda", dtype=dtype)
                for dk in (d, job.get("head_dim_v") or d))
        backward = job["part"] == "bwd"
        for t in (q, k, v):
            t.requires_grad_(backward)
        o = flash_attention(q, k, v, causal=job["causal"], variant=variant, config=config,
                            backend=kernel_backend)
        if backward:
            torch.autograd.grad(o, (q, k, v), torch.randn_like(o))
        torch.cuda.synchronize()
    except Exception as e:  # noqa: BLE001 - every failure is reported, the candidate dropped
        return f"{type(e).__name__}: {e}"[:500]
    return None


# the forward config fields that change its compiled kernels (the tuned ones and the rest)
FWD_CODE_FIELDS = FWD_FIELDS + ("key_slices", "nan_flags", "input_precision", "max_registers")


def job_key(job: dict) -> tuple:
    """What makes a job's compiled kernels distinct: jobs with equal keys share them."""
    fields = FWD_CODE_FIELDS if job["part"] == "fwd" else PART_FIELDS[job["part"]]
    return (job["part"], job["variant"], job["dtype"], job["head_dim"], job.get("head_dim_v"),
            job["causal"],
            job["heads_q"], job["heads_kv"], warm_seqlen(job["seqlen"]),
            tuple(job["config"][f] for f in fields),
            tuple(job["config"][f] for f in FWD_CODE_FIELDS) if job["part"] == "bwd" else ())


def make_job(part: str, name: str, config, cell) -> dict:
    """name: the kernel's name (fa2check.ablate.contenders.kernel_name) or its Variant."""
    return {"part": part, "variant": str(name), "config": dataclasses.asdict(config),
            "dtype": cell.dtype, "head_dim": cell.head_dim, "causal": cell.causal,
            "heads_q": cell.heads_q, "heads_kv": cell.heads_kv, "seqlen": cell.seqlen,
            **({"head_dim_v": cell.head_dim_v} if cell.head_dim_v is not None else {})}


NOT_COMPILED = "not compiled: --budget-s ran out first"


def precompile(jobs: list[dict], workers: int, progress=None, deadline: float | None = None,
               use_cache: bool = False) -> dict[tuple, str | None]:
    """Run `warm_job` for each distinct job in `workers` spawned processes: forward jobs first
    (backward jobs run a forward too), then backward jobs. Returns {job_key: error or None}.
    progress(key, error) after each job; jobs not finished by `deadline` (perf_counter) are
    cancelled and get NOT_COMPILED. use_cache: skip the jobs Triton's cache already holds
    (fa2check.ablate.compile_cache) and list the ones that compiled."""
    import time

    from . import compile_cache

    unique = {}
    for job in jobs:
        unique.setdefault(job_key(job), job)
    results = {}
    if use_cache:
        for key in compile_cache.cached(unique):
            results[key] = None
            del unique[key]
            if progress:
                progress(key, None)
    if not unique:
        return results
    workers = max(1, min(workers, len(unique)))
    pool = ProcessPoolExecutor(workers, mp_context=get_context("spawn"))
    try:
        for part in ("fwd", "bwd"):
            futures = {pool.submit(warm_job, job): key for key, job in unique.items()
                       if job["part"] == part}
            pending = set(futures)
            while pending:
                timeout = None if deadline is None else max(0.0, deadline - time.perf_counter())
                done = set()
                try:
                    for future in as_completed(pending, timeout=timeout):
                        done.add(future)
                        results[futures[future]] = future.result()
                        if progress:
                            progress(futures[future], results[futures[future]])
                except TimeoutError:
                    pass
                pending -= done
                if pending and deadline is not None and time.perf_counter() >= deadline:
                    break
            if pending:  # the budget ran out: nothing more starts
                for future in pending:
                    future.cancel()
                    results[futures[future]] = NOT_COMPILED
                for key, job in unique.items():
                    results.setdefault(key, NOT_COMPILED)
                break
    finally:
        cut = any(e == NOT_COMPILED for e in results.values())
        if cut:  # a worker still compiling would hold the command past its budget
            for process in list((pool._processes or {}).values()):
                process.terminate()
        pool.shutdown(wait=not cut, cancel_futures=True)
        if use_cache:
            compile_cache.remember([k for k, e in results.items() if e is None])
    return results


def default_workers() -> int:
    return max(1, min(15, (os.cpu_count() or 2) - 1))
