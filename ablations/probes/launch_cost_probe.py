"""Question: where does a short call's time go, host or GPU? (D28, D29)

Where a short call's time goes: the host (Python, argument checks, launches) against the
GPU's kernel time.

    python3 ablations/probes/launch_cost_probe.py SEQLEN,D,causal|full,IMPL[:field=value,...] ...
        [--mode fwd|fwd+bwd] [--breakdown] [--json P]

IMPL is `fa2` (our kernels, all improvements on, the launcher's GPU default config with the
given fields on top, as in compare_kernels.py), `BACKEND@VARIANT` (kernels' backend `triton`,
`gluon` or `hopper`, a Variant name such as `-defer-seqpar-splitq`: that backend's default
config for the variant, fields on top) or an SDPA backend name (`sdpa-flash`, ...).
Cells are the paper grid's (bf16, 16k tokens, 2048 = heads * head_dim). For each case:
- bench_ms: median of do_bench, as `fa2check.ablate` times the call (L2 flushed first); the
  call is the forward, or with --mode fwd+bwd the forward and torch.autograd.grad of q, k, v;
- host_us: host time a call, the median of CALLS calls each made with the GPU idle (enqueued
  back to back, calls whose kernels outlast their host time can make the host wait for a full
  launch queue: at 6d2ac0d, so measured, the chassis's d=64 cells read 109 us and its d=128
  cells 207-223 us for the same host code);
- gpu_us: CUDA kernel time a call by kernel name (torch.profiler);
- the host functions with most own time (cProfile) over CALLS calls.
When host_us exceeds what do_bench's L2 flush hides, bench_ms is host-bound.

--breakdown: the host time of the pieces of one call of ours (argument checks, allocations,
descriptors, the launches; the backward's launch and autograd's part in a fwd+bwd call), and of
empty Triton kernels with 1 and with 34 arguments (what a launch costs on this host, and how
much of it the arguments are), each the best of ROUNDS rounds of CALLS calls, on a problem
small enough that the GPU never holds the host back.
--hopper-breakdown: the same for the Hopper chassis's FA2 forward (D95): the call with and
without the launch cache, its Python alone, its launch through Triton's path and through
CachedLaunch, one descriptor's encoding and one shared layout.
"""
import argparse
import contextlib
import cProfile
import io
import json
import pstats
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path

import torch
import triton

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from fa2check.core.environment import describe_environment  # noqa: E402
from fa2check.ablate.grids import paper_batch, paper_heads  # noqa: E402
from fa2check.core.sdpa_backends import BACKENDS, forced, sdpa  # noqa: E402
from fa2check.ablate.timing import summary  # noqa: E402

CALLS = 300


def make_case(spec: str, mode: str):
    """(the timed call, the SDPA backend to force around it or None)."""
    cell, _, fields = spec.partition(":")
    seqlen, d, mask, impl = cell.split(",")
    seqlen, d, causal = int(seqlen), int(d), mask == "causal"
    heads, batch = paper_heads(d), paper_batch(seqlen)
    backward = mode == "fwd+bwd"
    q, k, v, do = (torch.randn(batch, heads, seqlen, d, device="cuda", dtype=torch.bfloat16,
                               requires_grad=backward and i < 3) for i in range(4))

    def timed(attend):
        if backward:
            return lambda: torch.autograd.grad(attend(q, k, v, causal), (q, k, v), do)
        return lambda: attend(q, k, v, causal)

    if impl in BACKENDS:  # forced around the whole measurement, as fa2check.ablate does
        return timed(sdpa), impl
    from compare_kernels import config_overrides  # this script's folder is on sys.path
    from kernels import TileConfig, Variant, default_config, flash_attention
    from kernels.plan.tiles import BACKENDS as KERNEL_BACKENDS

    kernel_backend, _, name = ("triton@+defer+seqpar+splitq" if impl == "fa2" else impl).partition("@")
    if kernel_backend not in KERNEL_BACKENDS or not name:
        raise SystemExit(f"unknown IMPL {impl!r}: fa2, BACKEND@VARIANT (BACKEND one of "
                         f"{', '.join(KERNEL_BACKENDS)}) or one of {', '.join(BACKENDS)}")
    variant = Variant.parse(name)
    config = replace(default_config(d, True, variant, torch.bfloat16, kernel_backend,
                                    causal=causal, seqlen_q=seqlen, seqlen_k=seqlen),
                     **config_overrides(fields, TileConfig))

    def ours(q, k, v, causal):
        return flash_attention(q, k, v, causal=causal, variant=variant, config=config,
                               backend=kernel_backend)

    return timed(ours), None


def host_us(call) -> float:
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(CALLS):
        call()
    elapsed = time.perf_counter() - start
    torch.cuda.synchronize()
    return elapsed / CALLS * 1e6


def host_us_alone(call) -> float:
    """The median host time of one call, the GPU idle before each (see the module docstring)."""
    times = []
    for _ in range(CALLS):
        torch.cuda.synchronize()
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    torch.cuda.synchronize()
    return statistics.median(times) * 1e6


def gpu_us(call) -> dict:
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(50):
            call()
        torch.cuda.synchronize()
    per_kernel = {}
    for event in prof.key_averages():
        if event.device_type.name == "CUDA" and event.self_device_time_total > 0:
            per_kernel[event.key[:60]] = event.self_device_time_total / 50
    return per_kernel


def top_host_functions(call, n=12) -> str:
    profiler = cProfile.Profile()
    profiler.enable()
    for _ in range(CALLS):
        call()
    profiler.disable()
    torch.cuda.synchronize()
    out = io.StringIO()
    pstats.Stats(profiler, stream=out).sort_stats("tottime").print_stats(n)
    return out.getvalue()


ROUNDS = 5


@triton.jit
def _empty_1(X):
    pass


@triton.jit
def _empty_34(P0, P1, P2, P3, P4, P5, P6, P7, P8, P9, P10, I0, I1, I2, I3, I4, I5, I6, I7, I8,
              I9, I10, I11, I12, I13, I14, I15, I16, I17, I18, I19, I20, I21, I22):
    pass  # as many arguments as the forward's main launch: 11 tensors, 23 integers


def best_host_us(call) -> float:
    call()
    return min(host_us(call) for _ in range(ROUNDS))


def _tiny_inputs(requires_grad=False):
    """q, k, v of the tiny problem (1, 1, 128, 128) that the host breakdowns time."""
    return [torch.randn(1, 1, 128, 128, device="cuda", dtype=torch.bfloat16,
                        requires_grad=requires_grad) for _ in range(3)]


def breakdown(cycle=False) -> tuple[dict, dict]:
    """Host microseconds of each piece of our forward call, tiny problem (1, 1, 128, 128), and
    the cProfile of each attn_fwd launch case."""
    from kernels import Variant, default_config, flash_attention
    from kernels.forward import attn_fwd
    from kernels.interface import _check_inputs
    from kernels.tma import row_descriptors

    q, k, v = _tiny_inputs()
    base = replace(default_config(128, True, None, torch.bfloat16), block_m=64, block_n=64,
                   num_warps=4, num_stages=3)
    fa2 = Variant()
    profiles = {}  # cProfile of the forward launches: where the causal pointer call's time goes
    times = {
        "checks (_check_inputs)": best_host_us(lambda: _check_inputs(q, k, v, True, None, fa2)),
        "torch.empty x3": best_host_us(lambda: (torch.empty_like(q), torch.empty(1, 1, 128,
                                                                                   device="cuda"),
                                                torch.empty(2, device="cuda",
                                                            dtype=torch.int32))),
        "row_descriptors (2)": best_host_us(lambda: row_descriptors((k, v), 64)),
        "sdpa-flash, causal": best_host_us(lambda: sdpa(q, k, v, True)),
    }
    for tma in (False, True):
        config = replace(base, tma=tma)
        for causal in (False, True):
            name = f"{'tma' if tma else 'pointers'}, {'causal' if causal else 'full'}"

            def forward():
                return attn_fwd(q, k, v, causal, 0.1, fa2, config)

            times[f"attn_fwd, {name}"] = best_host_us(forward)
            profiles[f"attn_fwd, {name}"] = top_host_functions(forward, n=25)
            times[f"flash_attention, {name}"] = best_host_us(
                lambda: flash_attention(q, k, v, causal=causal, config=config))
    times.update(backward_breakdown(base))
    if cycle:
        times.update(cycle_breakdown(base))
    return times, profiles


class _NoOp(torch.autograd.Function):
    """What a Python autograd.Function costs on CUDA tensors with no kernel of ours: one
    allocation forward, three backward, as our forward and backward make."""

    @staticmethod
    def forward(ctx, q, k, v):
        return torch.empty_like(q)

    @staticmethod
    def backward(ctx, do):
        return torch.empty_like(do), torch.empty_like(do), torch.empty_like(do)


def backward_breakdown(config) -> dict:
    """Host microseconds of a fwd+bwd call's pieces on the tiny problem: the whole call, the
    forward with its autograd node, autograd.grad of a kept graph (the engine and our
    backward), a no-op autograd.Function, the backward's launches alone (attn_bwd on saved
    forward outputs), autograd on a trivial op, and empty Triton launches."""
    from kernels import Variant, flash_attention
    from kernels.backward import attn_bwd
    from kernels.forward import attn_fwd
    from kernels.launch_cache import CachedLaunch

    q, k, v = _tiny_inputs(requires_grad=True)
    do = torch.randn_like(q)
    fa2 = Variant()
    with torch.no_grad():
        o, stats, o_res = attn_fwd(q, k, v, True, 0.1, fa2, config, o_residual=True)
    ints = [1] * 23
    cached_34 = CachedLaunch(_empty_34)  # as kernels/launch_cache.py launches ours
    kept = flash_attention(q, k, v, causal=True, config=config)  # a graph to run again
    return {
        "fwd+bwd: flash_attention + autograd.grad, causal": best_host_us(
            lambda: torch.autograd.grad(flash_attention(q, k, v, causal=True, config=config),
                                        (q, k, v), do)),
        "flash_attention with an autograd node, causal": best_host_us(
            lambda: flash_attention(q, k, v, causal=True, config=config)),
        "autograd.grad of a kept graph of ours (engine + backward)": best_host_us(
            lambda: torch.autograd.grad(kept, (q, k, v), do, retain_graph=True)),
        "no-op autograd.Function: forward + autograd.grad": best_host_us(
            lambda: torch.autograd.grad(_NoOp.apply(q, k, v), (q, k, v), do)),
        "attn_bwd (2 launches), causal": best_host_us(
            lambda: attn_bwd(q, k, v, o, stats, do, None, True, 0.1, fa2, config, o_res)),
        "autograd.grad of q * 2": best_host_us(lambda: torch.autograd.grad(q * 2, (q,), do)),
        "empty Triton launch, 1 argument": best_host_us(lambda: _empty_1[(1,)](q)),
        "empty Triton launch, 34 arguments": best_host_us(
            lambda: _empty_34[(1,)](q, k, v, o, o, stats[0], stats[0], stats[0], do, q, q,
                                    *ints)),
        "empty Triton launch, 34 arguments, CachedLaunch": best_host_us(
            lambda: cached_34[(1,)](q, k, v, o, o, stats[0], stats[0], stats[0], do, q, q,
                                    *ints)),
    }


def cycle_breakdown(config) -> dict:
    """Host microseconds of a fresh fwd+bwd call on the tiny problem with parts of it stubbed
    out (the backward's launches, the forward's launches, both), with the garbage collector
    off, and split as a forward and a grad of the graph it made: where the time goes that the
    pieces of backward_breakdown leave unexplained."""
    import gc

    import kernels.backward
    import kernels.interface
    from kernels import flash_attention

    q, k, v = _tiny_inputs(requires_grad=True)
    do = torch.randn_like(q)

    def fresh():
        return torch.autograd.grad(flash_attention(q, k, v, causal=True, config=config),
                                   (q, k, v), do)

    def split():
        o = flash_attention(q, k, v, causal=True, config=config)
        return torch.autograd.grad(o, (q, k, v), do, retain_graph=True)

    def no_backward(q, k, v, *rest):
        return torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)

    def no_forward(q, *rest, **kwargs):
        stat = torch.empty(q.shape[:3], device=q.device)
        return torch.empty_like(q), None, (stat,), torch.empty_like(q)

    times = {"fresh fwd+bwd": best_host_us(fresh), "forward, then grad retaining the graph":
             best_host_us(split)}
    gc.disable()
    times["fresh fwd+bwd, gc off"] = best_host_us(fresh)
    gc.enable()
    real_bwd, real_fwd = kernels.backward.attn_bwd, kernels.interface._forward
    try:
        kernels.backward.attn_bwd = no_backward
        times["fresh fwd+bwd, backward stubbed"] = best_host_us(fresh)
        kernels.interface._forward = no_forward
        times["fresh fwd+bwd, both stubbed"] = best_host_us(fresh)
        kernels.backward.attn_bwd = real_bwd
        times["fresh fwd+bwd, forward stubbed"] = best_host_us(fresh)
    finally:
        kernels.backward.attn_bwd, kernels.interface._forward = real_bwd, real_fwd
    return times


def hopper_breakdown() -> dict:
    """Host microseconds of the Hopper chassis's FA2 forward call on the tiny problem: the
    whole call (with and without kernels/launch_cache.py), its Python with the launch
    stubbed, the launch alone through Triton's path and through CachedLaunch, one TMA
    descriptor's encoding at launch (make_tensordesc_arg, in either path), and one shared
    layout's `get_default_for` (D95)."""
    from triton.backends.nvidia.driver import make_tensordesc_arg
    from triton.experimental.gluon import language as gl

    import kernels.hopper_forward as chassis
    import kernels.launch_cache
    from kernels import TileConfig, Variant

    q, k, v = _tiny_inputs()
    config, fa2 = TileConfig(block_m=128, block_n=128, num_stages=2), Variant()
    cached, jit = chassis._HOPPER_ATTN_FWD, chassis._hopper_attn_fwd
    recorded = {}

    class Stub:  # records the launch's grid and arguments, launches nothing
        def __getitem__(self, grid):
            def launch(*args, **kwargs):
                recorded.update(grid=grid, args=args, kwargs=kwargs)
            return launch

    def call(causal):
        return chassis.hopper_attn_fwd(q, k, v, causal, 0.1, fa2, config)

    times = {}
    for causal in (False, True):
        name = "causal" if causal else "full"
        times[f"hopper_attn_fwd, {name}"] = best_host_us(lambda: call(causal))
        kernels.launch_cache.enabled = False
        try:
            times[f"hopper_attn_fwd, launch cache off, {name}"] = best_host_us(
                lambda: call(causal))
        finally:
            kernels.launch_cache.enabled = True
        chassis._HOPPER_ATTN_FWD = Stub()
        try:
            times[f"hopper_attn_fwd, launch stubbed, {name}"] = best_host_us(lambda: call(causal))
        finally:
            chassis._HOPPER_ATTN_FWD = cached
        grid, args, kwargs = recorded["grid"], recorded["args"], recorded["kwargs"]
        times[f"launch through Triton's path, {name}"] = best_host_us(
            lambda: jit[grid](*args, **kwargs))
        times[f"launch through CachedLaunch, {name}"] = best_host_us(
            lambda: cached[grid](*args, **kwargs))
    meta = jit[grid](*args, **kwargs).metadata.tensordesc_meta
    times["one descriptor encoded (make_tensordesc_arg)"] = best_host_us(
        lambda: make_tensordesc_arg(args[0], meta[0] if meta else None))
    times["one get_default_for"] = best_host_us(
        lambda: gl.NVMMASharedLayout.get_default_for([1, 1, 64, 128], gl.bfloat16))
    return times


def main():
    global CALLS  # --calls sets the rounds' length for every measurement below
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("cases", nargs="*")
    parser.add_argument("--mode", choices=("fwd", "fwd+bwd"), default="fwd")
    parser.add_argument("--breakdown", action="store_true")
    parser.add_argument("--hopper-breakdown", action="store_true",
                        help="the Hopper chassis forward's host pieces (tiny problem)")
    parser.add_argument("--cycle", action="store_true",
                        help="with --breakdown: the fresh fwd+bwd call with parts stubbed out")
    parser.add_argument("--no-launch-cache", action="store_true",
                        help="every launch through Triton's own path (kernels/launch_cache.py)")
    parser.add_argument("--calls", type=int, default=CALLS,
                        help=f"calls a host-time round (default {CALLS}); fewer keep the GPU's "
                             "launch queue short")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--commit", help="git commit to record (the device's copy of the tree "
                                         "may carry a stale .git)")
    args = parser.parse_args()
    if args.calls < 1:
        parser.error("--calls must be at least 1")
    CALLS = args.calls
    from triton.testing import do_bench

    if args.no_launch_cache:
        import kernels.launch_cache

        kernels.launch_cache.enabled = False
    pieces, profiles = breakdown(args.cycle) if args.breakdown else ({}, {})
    if args.hopper_breakdown:
        pieces.update(hopper_breakdown())
    rows = []
    for spec in args.cases:
        call, backend = make_case(spec, args.mode)
        with forced(backend) if backend else contextlib.nullcontext():
            call()
            torch.cuda.synchronize()
            bench = summary(do_bench(call, return_mode="all"))
            row = dict(case=spec, mode=args.mode, bench_ms=bench["median"],
                       bench_q25=bench["q25"], bench_q75=bench["q75"],
                       host_us=host_us_alone(call),
                       gpu_us=gpu_us(call), host_profile=top_host_functions(call))
        rows.append(row)
        print(row["host_profile"], flush=True)
    print(f"{'case':58s} {'bench ms':>9s} {'host us':>8s} {'gpu us':>8s}  kernels (us)")
    for row in rows:
        kernels = row["gpu_us"]
        print(f"{row['case'][:58]:58s} {row['bench_ms']:9.4f} {row['host_us']:8.1f} "
              f"{sum(kernels.values()):8.1f}  "
              + ", ".join(f"{k[:24]} {v:.1f}" for k, v in kernels.items()))
    for piece, us in pieces.items():
        print(f"host {piece:40s} {us:7.1f} us")
    if args.json:
        environment = describe_environment("cuda", commit=args.commit)
        args.json.write_text(json.dumps({"environment": environment,
                                         "launch_cache": not args.no_launch_cache,
                                         "command": " ".join(sys.argv), "rows": rows,
                                         "host_breakdown_us": pieces,
                                         "host_breakdown_profiles": profiles}, indent=1))


if __name__ == "__main__":
    main()
