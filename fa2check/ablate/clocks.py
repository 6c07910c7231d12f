"""The SM clock and board power while the sweeps time, so that a ratio can be read with the
power state it was measured in. One nvidia-smi process samples every SAMPLE_MS for the whole
sweep phase; afterwards each sample taken inside one of a contender's do_bench calls (its
windows, wall-clock start and end) is credited to that contender. Read only: nothing on the
GPU is changed.

Why: at the H200's 700 W cap the clock falls, and a kernel that does the same work in less
time falls further (docs/ablation.md, the power cap: 1800 MHz for ours against 1910 MHz
for sdpa-flash in the same loop), so a short measurement from a cool GPU and a sustained one
give different ratios. A do_bench call (5 + 20 ms) is about half the sampling period, so a
contender gets a sample in about every other call; the report pools them by seqlen. Samples
nvidia-smi still holds in its output buffer when it is stopped are lost (the last seconds).
"""
from __future__ import annotations

import bisect
import os
import statistics
import subprocess
import threading
from datetime import datetime

SAMPLE_MS = 50
# power.draw is a one-second average on this GPU generation; the instant reading where the
# driver has it
FIELDS = (("timestamp", "clocks.sm", "power.draw.instant"), ("timestamp", "clocks.sm", "power.draw"))
TIMESTAMP = "%Y/%m/%d %H:%M:%S.%f"  # nvidia-smi's, in the host's local time


def parse_line(line: str):
    """'2026/12/01 05:17:05.123, 1905, 689.51' -> (epoch seconds, MHz, W), or None."""
    parts = [p.strip() for p in line.split(",")]
    if len(parts) != 3:
        return None
    try:
        t = datetime.strptime(parts[0], TIMESTAMP).timestamp()
        return (t, float(parts[1]), float(parts[2]))
    except ValueError:  # a header, '[N/A]' or '[Not Supported]'
        return None


def gpu_index() -> str:
    """nvidia-smi's index of the GPU this process uses first (CUDA_VISIBLE_DEVICES' first)."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",")[0].strip()
    return visible if visible.isdigit() else "0"


def command(fields, loop: bool) -> list[str]:
    """nvidia-smi's query of `fields`: one reading, or (loop) one every SAMPLE_MS."""
    return (["nvidia-smi", f"--id={gpu_index()}", f"--query-gpu={','.join(fields)}",
             "--format=csv,noheader,nounits"] + (["-lms", str(SAMPLE_MS)] if loop else []))


class ClockLog:
    """Context manager: samples (epoch s, SM MHz, W) in `samples` while open. Never raises
    for nvidia-smi's sake: `error` says why there are no samples."""

    def __init__(self, queries=FIELDS, make_command=command):
        self.queries, self.make_command = queries, make_command
        self.samples, self.error, self.fields = [], None, None
        self._process = self._reader = None

    def __enter__(self):
        for fields in self.queries:
            try:  # one reading first, so that an unknown field moves on to the next query
                probe = subprocess.run(self.make_command(fields, loop=False),
                                       capture_output=True, text=True, timeout=20)
            except (OSError, subprocess.SubprocessError) as e:
                self.error = f"{type(e).__name__}: {e}"
                return self
            first = probe.stdout.strip().splitlines()[0] if probe.stdout.strip() else ""
            if probe.returncode == 0 and parse_line(first):
                try:
                    self._process = subprocess.Popen(self.make_command(fields, loop=True),
                                                     stdout=subprocess.PIPE,
                                                     stderr=subprocess.DEVNULL, text=True)
                except OSError as e:
                    self.error = f"{type(e).__name__}: {e}"
                    return self
                self.fields, self.error = ",".join(fields), None
                self._reader = threading.Thread(target=self._read, daemon=True)
                self._reader.start()
                return self
            self.error = (probe.stderr or probe.stdout).strip()[:200] or "no reading"
        return self

    def _read(self):
        for line in self._process.stdout:
            sample = parse_line(line)
            if sample:
                self.samples.append(sample)

    def __exit__(self, *exc):
        if self._process:
            self._process.terminate()
            try:
                self._process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._process.kill()
            self._reader.join(timeout=10)
        return False

    def record(self) -> dict:
        return {"sample_ms": SAMPLE_MS, "fields": self.fields, "error": self.error,
                "samples": len(self.samples)}


def inside(samples, windows, times=None) -> list[list[float]]:
    """[MHz, W] of the samples taken inside any of the (start, end) windows. `samples` in time
    order, `times` their times (given when many contenders ask about the same samples)."""
    times = [s[0] for s in samples] if times is None else times
    return [[mhz, watts] for start, end in windows
            for _, mhz, watts in samples[bisect.bisect_left(times, start):
                                         bisect.bisect_right(times, end)]]


def median_clock(pairs) -> tuple[float | None, float | None]:
    """(median MHz, median W) of [MHz, W] pairs, or (None, None) without any."""
    if not pairs:
        return None, None
    return (statistics.median(p[0] for p in pairs), statistics.median(p[1] for p in pairs))
