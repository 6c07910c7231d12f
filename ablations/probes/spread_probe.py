"""Question: where does a short call's spread come from: host time, the kernel, or the flush?

At 512 the chassis forward's do_bench samples spread over 1.5x inside one call of do_bench
(paper run of record, 512 d=128 full: 163-279 us) while torch's FlashAttention-2 stays within
2%. Each case is timed four ways, CALLS calls each, and every sample is kept:
- bench: triton's do_bench (L2 flushed before each call), as `fa2check.ablate` times it;
- slept: the same flush and CUDA events, with `torch.cuda._sleep` between the flush and the
  start event, so the host is far ahead of the GPU and none of its time can be timed;
- kernels: the same loop under torch.profiler: each call's kernel time (its kernels' durations
  summed; the flush and the sleep left out) and the gap from its first kernel's start to its
  last kernel's end;
- back_to_back: CUDA events around each call with no flush between calls;
- host_ahead: fa2check.ablate's timer (D99), do_bench's calls with a sleep before each flush;
and the host time of each call in the slept loop (perf_counter around the call).

    python3 ablations/probes/spread_probe.py SEQLEN,D,causal|full,IMPL[:field=value,...] ...
        [--mode fwd|fwd+bwd] [--calls N] [--json P]

Cases are launch_cost_probe.py's (bf16 paper grid cells). Reading: bench wide and slept tight
means host time is timed; slept as wide as bench and kernels as wide means the kernel itself
varies; kernels tight but slept wide means a gap between the start event and the kernel.
"""
import argparse
import contextlib
import json
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from launch_cost_probe import make_case  # noqa: E402
from fa2check.core.environment import describe_environment  # noqa: E402
from fa2check.core.sdpa_backends import forced  # noqa: E402
from fa2check.ablate.timing import host_ahead_bench  # noqa: E402

SLEEP_CYCLES = 2_000_000  # about 1 ms at the H100's and H200's clocks: far above any host time
NOT_THE_CALL = ("fill", "memset", "spin", "zero")  # the flush's and the sleep's kernels


def flush_buffer():
    from triton import runtime

    return runtime.driver.active.get_empty_cache_for_benchmark()


def event_loop(call, calls: int, *, flush: bool, sleep: bool):
    """(ms of each call between CUDA events, host us of each call)."""
    cache = flush_buffer()
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(calls)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(calls)]
    host = []
    for i in range(calls):
        if flush:
            cache.zero_()
        if sleep:
            torch.cuda._sleep(SLEEP_CYCLES)
        starts[i].record()
        t0 = time.perf_counter()
        call()
        host.append((time.perf_counter() - t0) * 1e6)
        ends[i].record()
    torch.cuda.synchronize()
    return [s.elapsed_time(e) for s, e in zip(starts, ends)], host


def kernel_times(call, calls: int):
    """Per call: (sum of its kernels' durations, its first start to last end), in us."""
    from torch.profiler import ProfilerActivity, profile

    cache = flush_buffer()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            cache.zero_()
            torch.cuda._sleep(SLEEP_CYCLES)  # separates the calls: each call's kernels follow one
            call()
        torch.cuda.synchronize()
    kernels = sorted((e for e in prof.events() if e.device_type.name == "CUDA"
                      and e.device_time > 0), key=lambda e: e.time_range.start)
    per_call, current = [], None
    for e in kernels:
        if any(word in e.name.lower() for word in NOT_THE_CALL):
            current = None  # the next kernel of the call starts a new call
            continue
        if current is None:
            current = [0.0, e.time_range.start, e.time_range.end]
            per_call.append(current)
        current[0] += e.time_range.end - e.time_range.start
        current[2] = max(current[2], e.time_range.end)
    names = sorted({e.name[:50] for e in kernels
                    if not any(word in e.name.lower() for word in NOT_THE_CALL)})
    return [c[0] for c in per_call], [c[2] - c[1] for c in per_call], names


def stats(values) -> dict:
    a = np.asarray(values, dtype=np.float64)
    q = np.percentile(a, [0, 25, 50, 75, 100])
    return dict(min=q[0], q25=q[1], median=q[2], q75=q[3], max=q[4], n=int(a.size))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("cases", nargs="+")
    parser.add_argument("--mode", choices=("fwd", "fwd+bwd"), default="fwd")
    parser.add_argument("--calls", type=int, default=60)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--commit")
    args = parser.parse_args()
    from triton.testing import do_bench

    rows = []
    for spec in args.cases:
        call, backend = make_case(spec, args.mode)
        with forced(backend) if backend else contextlib.nullcontext():
            call()
            torch.cuda.synchronize()
            bench = [t * 1e3 for t in do_bench(call, return_mode="all")]
            slept, host = event_loop(call, args.calls, flush=True, sleep=True)
            back_to_back, _ = event_loop(call, args.calls, flush=False, sleep=False)
            busy, span, names = kernel_times(call, args.calls)
            ahead = host_ahead_bench(call, 5.0, 20.0)
        row = dict(case=spec, mode=args.mode, kernels=names,
                   samples=dict(bench=bench, slept=[t * 1e3 for t in slept], kernel_sum=busy,
                                kernel_span=span, back_to_back=[t * 1e3 for t in back_to_back],
                                host=host, host_ahead=[t * 1e3 for t in ahead.samples]))
        row["stats"] = {k: stats(v) for k, v in row["samples"].items()}
        rows.append(row)
        print(spec, args.mode, "kernels:", "; ".join(names), flush=True)
    print(f"{'case':44s} {'way':13s} {'min':>7s} {'q25':>7s} {'median':>7s} {'q75':>7s} "
          f"{'max':>7s} (us)")
    for row in rows:
        for way, s in row["stats"].items():
            print(f"{row['case'][:44]:44s} {way:13s} {s['min']:7.1f} {s['q25']:7.1f} "
                  f"{s['median']:7.1f} {s['q75']:7.1f} {s['max']:7.1f}")
    if args.json:
        args.json.write_text(json.dumps({
            "environment": describe_environment("cuda", commit=args.commit),
            "command": " ".join(sys.argv), "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
