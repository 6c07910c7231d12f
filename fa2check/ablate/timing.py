"""Timing: `triton.testing.do_bench` samples, the statistics the harness reports, the matmul
rate of the same GPU, and the GPU's state (clocks, power) read around a run.

do_bench (GPU): runs fn once, estimates its time from 5 runs, runs `warmup` ms untimed, then
times `rep` ms of calls with CUDA events, zeroing a 256 MB buffer before each call to flush the
L2 cache. With return_mode="all" it returns every timed call (its default returns the mean);
the harness takes the median and interquartile range itself. Its warm-up and estimate runs are
not among the returned samples.

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


def bench(fn, *, device: str, warmup_ms: float, rep_ms: float) -> list[float]:
    """Milliseconds of each timed call of fn (warm-up excluded)."""
    if device == "cuda":
        from triton.testing import do_bench

        return [float(t) for t in do_bench(fn, warmup=warmup_ms, rep=rep_ms, return_mode="all")]
    fn()
    samples = []
    for _ in range(CPU_SAMPLES):
        start = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - start) * 1e3)
    return samples


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
