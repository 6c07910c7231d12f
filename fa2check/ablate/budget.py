"""--budget-s for the whole command: every phase (precompiling, tuning, the gate, the sweeps)
asks before it starts a piece of work whether the predicted cost still fits, and what did not
fit is recorded in words (results["skipped_by_budget"]), never silently dropped."""
from __future__ import annotations

import math
import os
import time

RESERVE_S = 15.0  # kept free at the end for analysis, plots and files


class Budget:
    def __init__(self, budget_s: float | None, started: float):
        self.budget_s, self.started = budget_s, started
        self.skipped: list[str] = []

    def elapsed(self) -> float:
        return time.perf_counter() - self.started

    def left(self) -> float:
        """Seconds left before the reserve (inf without a budget)."""
        if not self.budget_s:
            return math.inf
        return self.budget_s - RESERVE_S - self.elapsed()

    def allows(self, cost_s: float) -> bool:
        return cost_s <= self.left()

    def deadline(self) -> float | None:
        """The perf_counter time by which work must stop (None without a budget)."""
        return None if not self.budget_s else self.started + self.budget_s - RESERVE_S

    def skip(self, what: str):
        self.skipped.append(what)


def command_started() -> float:
    """time.perf_counter() at the process's start (Linux: /proc), so that --budget-s and the
    timeline count the interpreter's start and the imports too; now where that is unknown."""
    now = time.perf_counter()
    try:
        with open("/proc/self/stat") as f:
            start_ticks = int(f.read().rsplit(")", 1)[1].split()[19])
        with open("/proc/uptime") as f:
            uptime = float(f.read().split()[0])
        return now - max(0.0, uptime - start_ticks / os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError):
        return now
