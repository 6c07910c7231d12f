"""From raw results (every sample) to the numbers the tables show: per cell and contender the
median, interquartile range, TFLOP/s, percent of the same run's matmul rate and ratios to SDPA's
backends; per cell and over the grid the contributions (fa2check.ablate.contributions).

Everything here is recomputed from the samples, deterministically (seeded bootstrap), so
`--from FILE` on any machine renders the same tables as the run that measured them.
"""
from __future__ import annotations

import numpy as np

from .clocks import median_clock
from .contenders import HOPPER, PEERS, PREFIXED, kernel_backend_of, parse_kernel_name
from .contributions import (NOT_TIMED, SWITCH_VIEW, analyse,
                            game_of, players_for, repeat_draws, subsets, summarise, variant_for,
                            view_of, with_intervals)
from .grids import MODES, Cell
from .timing import flatten, summary, tflops

DEFAULT_DRAWS = 1000


def matmul_rates(results) -> dict:
    rates = {}
    for dtype, record in results.get("matmul", {}).items():
        samples = flatten(record.get("samples", []))
        if samples and record.get("flops"):
            rates[dtype] = tflops(record["flops"], float(np.median(samples)))
    return rates


def contender_stats(cell: Cell, mode: str, samples: dict, matmul: dict,
                    clock: dict | None = None) -> dict:
    """clock: {name: [[MHz, W], ...]} sampled during each contender's timing (fa2check.ablate.clocks);
    adds their medians (sm_mhz, power_w) where a contender has samples."""
    stats = {}
    for name, runs in samples.items():
        if not runs:
            continue
        s = summary(runs)
        rate = tflops(cell.flops(mode), s["median"])
        stats[name] = {**s, "runs": len(runs), "iqr_rel": (s["q75"] - s["q25"]) / s["median"],
                       "tflops": rate,
                       "pct_matmul": 100.0 * rate / matmul[cell.dtype] if cell.dtype in matmul else None}
        if (clock or {}).get(name):
            mhz, watts = median_clock(clock[name])
            stats[name].update(sm_mhz=mhz, power_w=watts, clock_samples=len(clock[name]))
    for name, s in stats.items():
        for b in PEERS:
            if b in stats and b != name:
                s[f"ratio/{b}"] = stats[b]["median"] / s["median"]  # > 1: name is faster than b
    return stats


def views(results: dict) -> list[str]:
    """The modes measured, per kernel backend whose variants were timed: "<mode>" for the
    Triton kernels, "<mode> hopper" for the Hopper chassis's forward (the run's kernels of
    record on sm_90), "<mode> gluon" for the Gluon forward; each has its own contributions.
    A run whose kernels of record are Triton's (settings "kernels", absent in older files)
    always has "<mode>". A mode whose samples include the Hopper switches' variants
    (--hopper-switches) also has "<mode> hopper switches", the second game (D66)."""
    primary = results["settings"].get("kernels", "triton")
    out = []
    for mode in results["settings"]["modes"]:
        names = {name for entry in results["cells"]
                 for name in entry["modes"].get(mode, {}).get("samples", {})
                 if name not in PEERS}
        timed = {kernel_backend_of(name) for name in names}
        out += [mode if b == "triton" else f"{mode} {b}" for b in ("triton",) + PREFIXED
                if b in timed or b == primary]
        if any(parse_kernel_name(n)[1].hopper_switches for n in names
               if kernel_backend_of(n) == HOPPER):
            out.append(f"{mode} {HOPPER} {SWITCH_VIEW}")
    return out


def fa1_grid_of(results: dict) -> str:
    """The grid the run's FA1-style variants ran on (kernels.plan.fa1_launch.FA1_GRIDS): a run saved
    before D90 ran one program per (batch, head)."""
    return results["settings"].get("fa1_grid", "batch-heads")


def analyse_results(results: dict, n_draws: int = DEFAULT_DRAWS, seed: int = 0) -> dict:
    """{"matmul_tflops": {dtype: rate}, "modes": {view: {...}}} (see module docstring); a view
    is a mode, or a mode and a kernel backend ("fwd gluon", see `views`)."""
    matmul = matmul_rates(results)
    repeats = results.get("repeats_done", 0)
    out = {"matmul_tflops": matmul, "modes": {}, "n_draws": n_draws, "seed": seed}
    for view in views(results):
        mode, prefix = view_of(view)
        timed = {name for entry in results["cells"]
                 for name in entry["modes"].get(mode, {}).get("samples", {})}
        players, game_name = players_for(view, timed), game_of(view).name
        # the view's contenders: its game's variants (all of them, timed or not) and the peers
        mine = {prefix + str(variant_for(s, game_of(view).players))
                for s in subsets(game_of(view).players)}
        rng = np.random.default_rng([seed, MODES.index(mode)]
                                    + ([1 + PREFIXED.index(prefix)] if prefix else [])
                                    + ([len(PREFIXED) + 1] if game_name == "switches" else []))
        draws = repeat_draws(max(repeats, 1), n_draws, rng)
        cells, analysed = [], []
        for entry in results["cells"]:
            info = entry["modes"].get(mode)
            if info is None:
                continue
            cell = Cell(**entry["cell"])
            row = {"cell": entry["cell"], "status": info["status"],
                   "excluded": {**entry.get("skipped", {}), **info.get("excluded", {}),
                                **{n: f"error: {e}" for n, e in info.get("errors", {}).items()}},
                   "stats": contender_stats(cell, mode, {
                       n: runs for n, runs in info["samples"].items()
                       if n in PEERS or n in mine},
                       matmul,
                       info.get("clock")),
                   "clock": info.get("clock", {}),
                   "contributions": None}
            game = {s: info["samples"].get(prefix + str(variant_for(s, players)))
                    for s in subsets(players)}
            if repeats and all(runs and len(runs) == repeats for runs in game.values()):
                result = analyse(game, players, draws, rng)
                row["contributions"] = with_intervals(result["point"], result["draws"])
                analysed.append((cell, result))
            cells.append(row)
        by_seqlen = {}
        for s in sorted({c.seqlen for c, _ in analysed}):
            by_seqlen[s] = summarise([r for c, r in analysed if c.seqlen == s])
        out["modes"][view] = {
            "players": list(players),
            "game": game_name,
            "fa1_grid": fa1_grid_of(results),
            "not_applicable": {p: NOT_TIMED[p] for p in game_of(view).players
                               if p not in players},
            "cells": cells,
            "summary": summarise([r for _, r in analysed]) if analysed else None,
            "by_seqlen": by_seqlen,
            "cells_in_summary": len(analysed),
        }
    return out
