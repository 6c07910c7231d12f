"""Timing: the GPU time of a call, the statistics the harness reports, the matmul rate of the
same GPU, and the GPU's state (clocks, power) read around a run.

`host_ahead_bench` (GPU) is `triton.testing.do_bench` with the host kept ahead of the GPU (D99):
it runs fn once, estimates its time from 5 runs (and its host time from the same runs), runs
`warmup` ms untimed, then times `rep` ms of calls (at most MAX_SAMPLES) with CUDA events,
zeroing a 256 MB buffer before each call to flush the L2 cache, as do_bench does. Before each
flush the GPU sleeps (`torch.cuda._sleep`) HOST_AHEAD times the host time of a flush and a call,
so that the call is enqueued before the GPU reaches it: a sample is the call's GPU time, never
the host's. do_bench alone times the host wherever the host takes longer a call than the GPU (the
flush hides about 80 us): at 512 our launches, with 4 to 20 times torch's host time a call,
spread over 1.5x in the sweeps where torch's stayed within 2% (D99). The host time of each timed
call is kept beside the samples; a call whose host time outlasted its sleep is counted
(`host_bound`).

A slow call (one that takes at least half of `rep` ms) would get at most two timed calls, after
7 untimed ones (its first call, the 5-call estimate, one warm-up). `bench` times such a call
itself: one untimed call, then SLOW_SAMPLES calls each after the same L2 flush, with the same
CUDA events: as many samples or more, at 3 calls' cost instead of 8 (the paper grid's FA1-style
fwd+bwd cells take up to seconds a call). Whether a call is slow is decided by its timed first
sample, which is kept. Its host time is a small part of it and is not held back.

On a machine without a GPU (Triton's interpreter) `bench` times a few calls with the host clock
so that the code path runs; those numbers mean nothing.
"""
from __future__ import annotations

import subprocess
import time
from dataclasses import dataclass, field

import numpy as np
import torch

CPU_SAMPLES = 3  # host-clock samples per bench call in the interpreter
MATMUL_SIZE = 8192


SLOW_SAMPLES = 2  # timed calls of a slow call
HOST_AHEAD = 2.0  # the GPU sleeps this many times a flush's and a call's host time a call
SLEEP_CYCLES_PER_US = 2000  # torch.cuda._sleep counts SM cycles; sm_90 boosts to 1980 MHz
MAX_SLEEP_US = 20_000
MAX_SAMPLES = 100  # timed calls of a fast call: each costs its sleep as well


@dataclass
class Timing:
    """One measurement: ms of each timed call, host us of each, and how many timed calls took
    longer on the host than the GPU slept before them (their samples may hold host time)."""
    samples: list
    host_us: list = field(default_factory=list)
    host_bound: int = 0
    started: float | None = None  # wall clock after the settling call: clock samples count from here


def is_slow(first_ms: float, rep_ms: float) -> bool:
    """do_bench would time at most 2 calls of it (n_repeat = max(1, int(rep / estimate)))."""
    return first_ms >= rep_ms / 2


def bench(fn, *, device: str, warmup_ms: float, rep_ms: float) -> Timing:
    """The timed calls of fn (warm-up excluded)."""
    if device == "cuda":
        return cuda_samples(fn, warmup_ms, rep_ms, flushed_call_ms(), host_ahead_bench)
    fn()
    samples = []
    for _ in range(CPU_SAMPLES):
        start = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - start) * 1e3)
    return Timing(samples)


def cuda_samples(fn, warmup_ms: float, rep_ms: float, timed_call, fast_bench) -> Timing:
    """timed_call(fn) -> ms of one call after an L2 flush; fast_bench: host_ahead_bench."""
    fn()  # compiled and warm (the gate ran it); this call settles lazy state of the process
    # (a load or a compile the gate's shape did not need: 2.1 s of an idle GPU in one window of
    # the 20261206-180901 run, whose power samples then read 129 W), so the window opens after it
    started = time.time()
    first = timed_call(fn)
    if is_slow(first, rep_ms):
        timing = Timing([first] + [timed_call(fn) for _ in range(SLOW_SAMPLES - 1)])
    else:
        timing = fast_bench(fn, warmup_ms, rep_ms)
    timing.started = started
    return timing


def host_ahead_bench(fn, warmup_ms: float, rep_ms: float) -> Timing:
    """do_bench's calls and samples, each call enqueued while the GPU sleeps (module docstring)."""
    from triton import runtime

    di = runtime.driver.active.get_device_interface()
    cache = runtime.driver.active.get_empty_cache_for_benchmark()
    fn()
    di.synchronize()
    start, end = di.Event(enable_timing=True), di.Event(enable_timing=True)
    host = []
    start.record()
    for _ in range(5):
        t0 = time.perf_counter()
        runtime.driver.active.clear_cache(cache)
        fn()
        host.append((time.perf_counter() - t0) * 1e6)
    end.record()
    di.synchronize()
    estimate_ms = start.elapsed_time(end) / 5
    sleep_us = min(MAX_SLEEP_US, HOST_AHEAD * max(host))
    n_repeat = min(MAX_SAMPLES, max(1, int(rep_ms / estimate_ms)))
    for _ in range(max(1, int(warmup_ms / estimate_ms))):
        fn()
    starts = [di.Event(enable_timing=True) for _ in range(n_repeat)]
    ends = [di.Event(enable_timing=True) for _ in range(n_repeat)]
    timing = Timing([])
    for i in range(n_repeat):
        torch.cuda._sleep(int(sleep_us * SLEEP_CYCLES_PER_US))
        t0 = time.perf_counter()
        runtime.driver.active.clear_cache(cache)
        starts[i].record()
        fn()
        ends[i].record()
        timing.host_us.append((time.perf_counter() - t0) * 1e6)
    di.synchronize()
    timing.samples = [float(s.elapsed_time(e)) for s, e in zip(starts, ends)]
    timing.host_bound = sum(h > sleep_us for h in timing.host_us)
    return timing


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
    timing = bench(lambda: torch.matmul(a, b), device=device, warmup_ms=warmup_ms, rep_ms=rep_ms)
    return timing.samples, 2.0 * size ** 3


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
