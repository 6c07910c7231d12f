"""Timing: `triton.testing.do_bench` samples, the statistics the harness reports, the matmul
rate of the same GPU, and the GPU's state (clocks, power) read around a run.

do_bench (GPU): runs fn once, estimates its time from 5 runs, runs `warmup` ms untimed, then
times `rep` ms of calls with CUDA events, zeroing a 256 MB buffer before each call to flush the
L2 cache. With return_mode="all" it returns every timed call (its default returns the mean);
the harness takes the median and interquartile range itself. Its warm-up and estimate runs are
not among the returned samples.

A slow call (one that takes at least half of `rep` ms) gets at most two timed calls from do_bench,
after 7 untimed ones (its first call, the 5-call estimate, one warm-up). `bench` times such a call
itself: one untimed call, then SLOW_SAMPLES calls each after the same L2 flush, with the same
CUDA events: as many samples or more, at 3 calls' cost instead of 8 (the paper grid's FA1-style
fwd+bwd cells take up to seconds a call). Whether a call is slow is decided by its timed first
sample, which is kept.

On a machine without a GPU (Triton's interpreter) `bench` times a few calls with the host clock
so that the code path runs; those numbers mean nothing.
"""
from __future__ import annotations

import subprocess
import time

import numpy as np
import torch

CPU_SAMPLES = 3  # host-clock samples per bench call in the interpreter
MATMUL_SIZE = 8192


SLOW_SAMPLES = 2  # timed calls of a slow call


def is_slow(first_ms: float, rep_ms: float) -> bool:
    """do_bench would time at most 2 calls of it (n_repeat = max(1, int(rep / estimate)))."""
    return first_ms >= rep_ms / 2


def bench(fn, *, device: str, warmup_ms: float, rep_ms: float) -> list[float]:
    """Milliseconds of each timed call of fn (warm-up excluded)."""
    if device == "cuda":
        from triton.testing import do_bench

        return cuda_samples(fn, warmup_ms, rep_ms, flushed_call_ms(), do_bench)
    fn()
    samples = []
    for _ in range(CPU_SAMPLES):
        start = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - start) * 1e3)
    return samples


def cuda_samples(fn, warmup_ms: float, rep_ms: float, timed_call, do_bench) -> list[float]:
    """timed_call(fn) -> ms of one call after an L2 flush; do_bench is triton.testing's."""
    fn()  # compiled and warm (the gate ran it); this call settles lazy state of the process
    first = timed_call(fn)
    if is_slow(first, rep_ms):
        return [first] + [timed_call(fn) for _ in range(SLOW_SAMPLES - 1)]
    return [float(t) for t in do_bench(fn, warmup=warmup_ms, rep=rep_ms, return_mode="all")]


def flushed_call_ms():
    """One call timed as do_bench times each of its calls: the L2 cache flushed first, CUDA
    events around the call."""
    from triton import runtime

    di = runtime.driver.active.get_device_interface()
    cache = runtime.driver.active.get_empty_cache_for_benchmark()

    def timed_call(fn) -> float:
        runtime.driver.active.clear_cache(cache)
        start, end = di.Event(enable_timing=True), di.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        di.synchronize()
        return float(start.elapsed_time(end))
    return timed_call


def summary(samples) -> dict:
    """median, quartiles and count of a list of times (ms), or of a list of such lists."""
    values = np.asarray(flatten(samples), dtype=np.float64)
    if values.size == 0:
        return {"median": float("nan"), "q25": float("nan"), "q75": float("nan"), "n": 0}
    q25, median, q75 = np.percentile(values, [25, 50, 75])
    return {"median": float(median), "q25": float(q25), "q75": float(q75), "n": int(values.size)}


def flatten(samples) -> list[float]:
    if samples and isinstance(samples[0], (list, tuple)):
        return [x for run in samples for x in run]
    return list(samples)


def tflops(flops: float, ms: float) -> float:
    return flops / (ms * 1e-3) / 1e12 if ms > 0 else float("nan")


def matmul_samples(dtype, *, device: str, warmup_ms: float, rep_ms: float, size=MATMUL_SIZE):
    """Samples (ms) of a size^3 matmul on random data (zeros run faster on this hardware)."""
    if device != "cuda":
        size = min(size, 256)
    gen = torch.Generator(device=device).manual_seed(0)
    a = torch.randn(size, size, device=device, dtype=dtype, generator=gen)
    b = torch.randn(size, size, device=device, dtype=dtype, generator=gen)
    samples = bench(lambda: torch.matmul(a, b), device=device, warmup_ms=warmup_ms, rep_ms=rep_ms)
    return samples, 2.0 * size ** 3


GPU_QUERY = ("name", "driver_version", "pstate", "clocks.sm", "clocks.mem", "clocks.max.sm",
             "clocks.max.mem", "power.draw", "power.limit", "temperature.gpu",
             "utilization.gpu", "memory.used")
GPU_QUERY_OPTIONAL = ("clocks_event_reasons.active",)


def gpu_state() -> dict:
    """Clocks, power and temperature from nvidia-smi (read only; nothing is changed)."""
    for fields in (GPU_QUERY + GPU_QUERY_OPTIONAL, GPU_QUERY):
        try:
            out = subprocess.run(["nvidia-smi", f"--query-gpu={','.join(fields)}",
                                  "--format=csv,noheader,nounits"],
                                 capture_output=True, text=True, timeout=20)
        except (OSError, subprocess.SubprocessError) as e:
            return {"error": f"{type(e).__name__}: {e}"}
        if out.returncode == 0 and out.stdout.strip():
            values = [v.strip() for v in out.stdout.strip().splitlines()[0].split(",")]
            state = dict(zip(fields, values))
            state["read_at"] = time.strftime("%Y-%m-%dT%H:%M:%S%z")
            return state
    return {"error": (out.stderr or out.stdout).strip()[:200]}
