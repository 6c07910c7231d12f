"""The ablation run: configs (tuned, loaded or default), precompiling, the correctness gate, and
the interleaved, repeated timing sweeps. Returns the results as plain data (see `run`).

Order of work:
1. configs: every kernel runs the tiles `kernels.default_config` gives the call (on a GPU the
   table of tuned tiles, kernels/tuned_tiles.json, else the heuristic: what flash_attention
   runs), unless a record was loaded from --configs-from or tuned here (--retune, whose
   winners are merged into the table);
2. with --retune, precompile the tuning candidates (GPU only; worker processes) and tune on the
   representative cells; then precompile every kernel the grid needs (skipping those Triton's
   cache already holds, fa2check.ablate.compile_cache);
3. gate every cell: each contender's outputs there against the oracle (fa2check.ablate.cellcheck); a
   cell where one of our variants fails is reported and not timed; an SDPA backend that cannot
   run a cell (or fails it) is left out of that cell with the reason;
4. sweeps: each sweep times the matmul rate, then every cell, and in each cell every contender
   once (one do_bench call) in an order shuffled per sweep, so the variants are interleaved
   rather than timed in blocks; the whole sweep is repeated `repeats` times.
`budget_s` bounds all of it (fa2check.ablate.budget): tuning stops starting keys, compiling is
cut at the deadline, a cell is gated and timed only if its predicted cost still fits, a sweep
starts only if the last one's time fits; what was skipped is recorded.
"""
from __future__ import annotations

import contextlib
import dataclasses
import os
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from multiprocessing import get_context

import numpy as np
import torch
from rich.console import Console

from ..core.environment import describe_environment
from ..core.problems import DTYPES
from . import plan, tile_table, tuning
from .budget import Budget
from .cellcheck import CellOracle, gate
from .clocks import ClockLog, inside
from .contenders import (API, DEFAULT_PEERS, GLUON, HOPPER, PEERS, Contender, api_kernel,
                         backend, kernel_name, make_inputs, ours, parse_kernel_name, timed_call)
from .timing import bench, gpu_state, matmul_samples

SCHEMA = "fa2check.ablate/1"
PARTS = {"fwd": ("fwd",), "bwd": ("bwd",), "fwd+bwd": ("fwd", "bwd")}
KERNEL_BACKENDS = ("triton", HOPPER)  # --kernels: the forward of our 8 variants


@dataclass
class Settings:
    modes: list = field(default_factory=lambda: ["fwd"])
    repeats: int = 3
    warmup_ms: float = 5.0
    rep_ms: float = 20.0
    tune: bool = False  # --retune: search the tiles (else the table's, or the heuristic)
    retune_keys: tuple = ()  # with tune: only keys matching one of these (retune_key_matches)
    table_out: str | None = None  # with tune: the table file the winners are merged into
    kernels: str = "triton"  # KERNEL_BACKENDS: the forward of our 8 variants
    tune_seqlen: int = tuning.TUNE_SEQLEN
    tune_warmup_ms: float = 2.0
    tune_rep_ms: float = 10.0
    backends: tuple = tuple(DEFAULT_PEERS)
    math_max_seqlen: int = 4096
    budget_s: float | None = None
    workers: int = field(default_factory=tuning.default_workers)
    seed: int = 0
    configs_from: tuple = ()
    gluon: bool = False  # also time the Gluon forward of every variant (fwd mode)
    gluon_max_seqlen: int = 4096
    shards: int = 1  # processes that gate and time disjoint sets of cells, one GPU each
    hopper_switches: bool = False  # also time the Hopper lattice's switch variants (D66, D87)
    # the grid of the FA1-style variants (kernels.plan.fa1_launch.FA1_GRIDS): FA1's launcher, or the
    # (batch, heads) reference grid (D90)
    fa1_grid: str = "fa1"

    def __post_init__(self):
        if self.hopper_switches and self.kernels != HOPPER:
            raise ValueError(f"--hopper-switches times the Hopper chassis's switches "
                             f"(warp_specialize, pingpong, overlap), which only --kernels {HOPPER} "
                             f"has; the run's kernels are "
                             f"{self.kernels!r} (--kernels auto picks {HOPPER} only on sm_90, or "
                             "with --plan, where every cell fits the chassis)")

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)


def variants_for(mode: str):
    """All 8 variants, in every mode (split_q reaches the backward: docs/decisions.md D50)."""
    from kernels import Variant

    return list(Variant.all())


def kernels_for(mode: str, cell, settings: Settings) -> list[str]:
    """Names of our kernels timed in a mode and cell: the Triton variants, and with
    settings.gluon the Gluon forward of every variant (forward only; dtypes and head dims it
    supports, seqlen up to gluon_max_seqlen), a second backend whose split_q is the warp
    partitioning itself; with settings.hopper_switches the switch variants (`switch_names`)."""
    names = primary_names(mode, settings) + switch_names(mode, settings)
    if mode == "fwd" and not gluon_skipped(cell, settings):
        names += [kernel_name(v, GLUON) for v in variants_for(mode)]
    return names


def switch_names(mode: str, settings: Settings) -> list[str]:
    """With --hopper-switches, the Hopper lattice's variants other than FA2 (FA2 with
    pingpong, overlap, both, and those four without the producer warp:
    "hopper+defer+seqpar+splitq-warpspec+pingpong"); in bwd one of each backward other than
    FA2's (`Variant.backward`: without the producer warp, with overlap, both; D86, D87). Like
    the Gluon kernels they are left out of a cell they fail, not costing it the 8 variants
    (D66)."""
    from kernels import Variant

    if not settings.hopper_switches:
        return []
    variants = [v for v in Variant.hopper() if v.hopper_switches]
    if mode == "bwd":  # pingpong's backward is the kernel without it
        variants = list(dict.fromkeys(v.backward for v in variants if v.backward.hopper_switches))
    return [kernel_name(v, HOPPER) for v in variants]


def primary_names(mode: str, settings: Settings) -> list[str]:
    """Our 8 variants (4 for bwd) on the run's kernel backend, whose times make the
    contributions: "+defer+seqpar+splitq" (Triton) or "hopper+defer+seqpar+splitq" (the Hopper
    chassis; in bwd and fwd+bwd with the chassis's backward where it takes the call, else the
    Triton one, as flash_attention runs)."""
    return [kernel_name(v, settings.kernels) for v in variants_for(mode)]


def retune_key_matches(key: tuning.TuneKey, patterns) -> bool:
    """Whether a key is one --retune-key names: each pattern is comma-separated field=value
    terms (part, variant, head_dim, causal, band), e.g. 'part=fwd,head_dim=128,causal=true';
    a key matches a pattern when every term agrees."""
    def agrees(term):
        field_, _, value = term.partition("=")
        return str(getattr(key, field_.strip())).lower() == value.strip().lower()

    return not patterns or any(all(agrees(t) for t in p.split(",") if t.strip())
                               for p in patterns)


def gluon_skipped(cell, settings: Settings) -> str | None:
    """Why the Gluon kernels are not timed in a cell (None: they are)."""
    from kernels.gluon_forward import unsupported

    if not settings.gluon:
        return "not asked for (--gluon)"
    if why := unsupported(cell.dtype, cell.head_dim):
        return f"skipped: {why}"
    if cell.seqlen > settings.gluon_max_seqlen:
        # its split-K variants without seq_parallel take 40-75 ms a call at 4k on the H200
        return f"skipped: seqlen {cell.seqlen} > --gluon-max-seqlen {settings.gluon_max_seqlen}"
    return None


def backends_for(cell, settings: Settings) -> tuple[list[str], dict]:
    """SDPA backends timed in a cell, and {backend: reason} for those skipped."""
    names, skipped = [], {}
    for name in settings.backends:
        if name == "sdpa-math" and cell.seqlen > settings.math_max_seqlen:
            skipped[name] = f"skipped: seqlen {cell.seqlen} > --math-max-seqlen {settings.math_max_seqlen}"
        else:
            names.append(name)
    return names, skipped


class Configs:
    """Each kernel's tiles in a cell: `kernels.default_config` for the call (the table's
    entry on a GPU, else the heuristic: the tiles flash_attention runs), and where a record
    was loaded or tuned for one of its parts' keys ({TuneKey: {"key", "fields", "source"}}),
    that part's fields from the record."""

    def __init__(self, records: dict, on_gpu: bool, gpu: str | None = None,
                 fa1_grid: str = "fa1"):
        self.records, self.on_gpu, self.fa1_grid = dict(records), on_gpu, fa1_grid
        if gpu is None:  # the table's key: this GPU's name ("" where there is none)
            gpu = torch.cuda.get_device_name() if on_gpu and torch.cuda.is_available() else ""
        self.gpu = gpu

    def fields(self, part, name: str, cell):
        record = self.records.get(key_of(part, name, cell))
        return record["fields"] if record else None

    def config(self, name, cell):
        """The config of one of our kernels (a kernel_name, or a Variant for Triton's) in a
        cell."""
        from kernels import default_config
        from kernels.plan.fa1_launch import with_fa1_grid
        from kernels.plan.hopper_forward import switch_ring
        from kernels.plan.tiles import block_d, tma_fits
        from kernels.plan.tuned_tiles import part_fields

        kernel_backend, variant = parse_kernel_name(str(name))
        width = max(cell.head_dim, cell.dv)  # as flash_attention: the wider of q's and v's
        # a Hopper switch variant runs its FA2 variant's tiles (tuning.part_variant, D66)
        base = default_config(width, self.on_gpu, tuning.part_variant("fwd", variant),
                              cell.dtype, kernel_backend,
                              causal=cell.causal, seqlen_q=cell.seqlen, seqlen_k=cell.seqlen,
                              gpu=self.gpu)
        fwd, bwd = self.fields("fwd", str(name), cell), self.fields("bwd", str(name), cell)
        config = base
        if fwd is not None or bwd is not None:
            tuned = tuning.build_config(width, variant, self.on_gpu, fwd=fwd, bwd=bwd,
                                        kernel_backend=kernel_backend)
            keep = {f: getattr(base, f) for part, record in (("fwd", fwd), ("bwd", bwd))
                    if record is None for f in part_fields(part)}
            config = dataclasses.replace(tuned, **keep).for_variant(variant, self.on_gpu)
        if kernel_backend == "hopper":  # a switch variant: FA2's tiles, a deeper ring (D80)
            config = switch_ring(config, variant, block_d(width), cell.causal)
        # as flash_attention: TMA only where descriptors fit K's and V's rows (D62)
        config = dataclasses.replace(config, tma=config.tma and tma_fits(cell.head_dim, cell.dv,
                                                                         dtype=cell.dtype))
        return with_fa1_grid(config, self.fa1_grid)

    def as_list(self) -> list[dict]:
        return [self.records[k] for k in sorted(self.records, key=lambda k: tuple(map(str, k.as_dict().values())))]


def key_of(part: str, name: str, cell) -> tuning.TuneKey:
    """The key whose winner a kernel's part uses in a cell (the backward's is Triton's; a
    Hopper switch variant's is its FA2 variant's, tuning.part_variant)."""
    kernel_backend, variant = parse_kernel_name(name)
    tiles_of = tuning.part_variant(part, variant)
    variant = kernel_name(tiles_of, kernel_backend) if part == "fwd" else str(tiles_of)
    return tuning.TuneKey(part, variant, cell.head_dim, cell.causal,
                          tuning.band_of(part, cell.seqlen))


def needed_keys(cells, modes, settings: Settings) -> list[tuning.TuneKey]:
    keys = []
    for mode in modes:
        for cell in cells:
            for name in kernels_for(mode, cell, settings):
                for part in PARTS[mode]:
                    key = key_of(part, name, cell)
                    if key not in keys:
                        keys.append(key)
    return keys


def tuning_jobs(keys, cells, settings, on_gpu) -> list[tuple[tuning.TuneKey, object, dict, dict]]:
    """(key, representative cell, candidate fields, job) for every candidate of every key."""
    out = []
    for key in keys:
        kernel_backend, variant = parse_kernel_name(key.variant)
        cell = tuning.representative(cells, key, settings.tune_seqlen)
        for fields in tuning.candidates(key.part, key.head_dim, variant, on_gpu, kernel_backend,
                                        key.causal):
            config = tuning.build_config(key.head_dim, variant, on_gpu,
                                         fwd=fields if key.part == "fwd" else None,
                                         bwd=fields if key.part == "bwd" else None,
                                         kernel_backend=kernel_backend)
            out.append((key, cell, fields, tuning.make_job(key.part, key.variant, config, cell)))
    return out


def forward_of_backward_jobs(candidates) -> list[dict]:
    """The forwards that backward candidates run first, as forward jobs, so that they are
    compiled once before the backward jobs start rather than by each of them at once."""
    return [{**job, "part": "fwd"} for _, _, _, job in candidates if job["part"] == "bwd"]


def final_jobs(cells, modes, configs: Configs, settings: Settings) -> list[dict]:
    """The kernels the grid runs, with the API peer's (contenders.api_kernel on its default
    tiles, which a run may not time otherwise: left to the gate, its compiles took 0.7-1.8 s a
    cell, most of the gate's time)."""
    jobs = []
    for cell in cells:
        for mode in modes:
            api = [api_kernel(cell, mode, configs.gpu)] if API in settings.backends else []
            for name in dict.fromkeys(kernels_for(mode, cell, settings) + api):
                config = configs.config(name, cell)
                for part in ("fwd",) + (("bwd",) if "bwd" in PARTS[mode] else ()):
                    jobs.append(tuning.make_job(part, name, config, cell))
    return jobs


def tune(key, cell, candidates, device, settings, precompiled) -> dict:
    """Time every candidate of one key on its representative cell, then the fastest few
    again in interleaved rounds (tuning.FINALISTS, tuning.FINAL_ROUNDS); keep the lowest
    median of those rounds."""
    from kernels.plan.fa1_launch import with_fa1_grid

    kernel_backend, variant = parse_kernel_name(key.variant)
    inputs = make_inputs(cell, device, settings.seed)

    def samples_of(fields):
        config = with_fa1_grid(tuning.build_config(key.head_dim, variant, device == "cuda",
                                                   fwd=fields if key.part == "fwd" else None,
                                                   bwd=fields if key.part == "bwd" else None,
                                                   kernel_backend=kernel_backend),
                               settings.fa1_grid)
        with timed_call(ours(variant, config, kernel_backend), key.part, inputs,
                        cell.causal) as fn:
            return bench(fn, device=device, warmup_ms=settings.tune_warmup_ms,
                         rep_ms=settings.tune_rep_ms).samples

    tried = []
    for fields, job in candidates:
        error = precompiled.get(tuning.job_key(job))
        entry = {"fields": fields, "median_ms": None, "error": error}
        if error is None:
            try:
                entry["median_ms"] = float(np.median(samples_of(fields)))
            except Exception as e:  # noqa: BLE001 - a candidate that cannot run is dropped
                entry["error"] = f"{type(e).__name__}: {e}"[:500]
        tried.append(entry)
    timed = sorted((t for t in tried if t["median_ms"] is not None),
                   key=lambda t: t["median_ms"])
    record = {"key": key.as_dict(), "tuned_on": cell.as_dict(), "candidates": tried,
              "tune_warmup_ms": settings.tune_warmup_ms, "tune_rep_ms": settings.tune_rep_ms,
              "final_rounds": tuning.FINAL_ROUNDS}
    if not timed:
        return {**record, "fields": None, "source": "tuning failed: no candidate ran"}
    finalists = timed[:tuning.FINALISTS]
    final = {id(t): [] for t in finalists}
    for _ in range(tuning.FINAL_ROUNDS):
        for t in finalists:
            if t["error"] is None:
                try:
                    final[id(t)] += samples_of(t["fields"])
                except Exception as e:  # noqa: BLE001 - dropped, as in the first pass
                    t["error"] = f"final rounds: {type(e).__name__}: {e}"[:500]
    for t in finalists:
        if t["error"] is None:
            t["final_median_ms"] = float(np.median(final[id(t)]))
    finalists = [t for t in finalists if t["error"] is None]
    if not finalists:
        return {**record, "fields": None, "source": "tuning failed: every finalist raised"}
    best = min(finalists, key=lambda t: t["final_median_ms"])
    return {**record, "fields": best["fields"],
            "source": f"tuned on {cell} ({len(timed)} of {len(tried)} candidates ran; the "
                      f"best {len(finalists)} timed again in {tuning.FINAL_ROUNDS} rounds)"}


class Log:
    """Timestamped progress lines (they survive in a captured log, unlike a live bar)."""

    def __init__(self, console, started: float, prefix: str = ""):
        self.console, self.started, self.prefix = console, started, prefix

    def __call__(self, message: str):
        if self.console is not None:
            self.console.print(f"[{time.perf_counter() - self.started:6.0f} s] {self.prefix}{message}",
                               highlight=False, markup=False)


def run(cells, settings: Settings, device: str, *, console=None, started=None, command="",
        provenance=None, on_sweep=None, progress_factory=None, plan_s=None) -> dict:
    """Measure `cells` for `settings.modes`. Returns the results dict (schema SCHEMA);
    `provenance` entries are added to (or override) the environment's; on_sweep(results) is
    called once the configs are settled (tuned or loaded), after the gate and after each
    completed sweep, to save partial results. progress_factory(label, total) -> a bar with
    advance() and stop(), for compiling and timing. plan_s: the planning estimate printed at
    the start (plan.estimate), kept beside the timeline for the comparison at the end."""
    started = time.perf_counter() if started is None else started
    log = Log(console, started)
    budget = Budget(settings.budget_s, started)
    on_gpu = device == "cuda"
    modes = list(settings.modes)
    environment = describe_environment(device)
    if on_gpu:
        environment["cudnn"] = torch.backends.cudnn.version()
        environment["gpu_state_before"] = gpu_state()
    results = {"schema": SCHEMA, "provenance": {**environment, "command": command, **(provenance or {})},
               "settings": settings.as_dict(), "cells": [], "configs": [], "matmul": {},
               "timeline": {}, "repeats_done": 0, "stopped_by_budget": False,
               "skipped_by_budget": budget.skipped, "plan": plan_s}
    timeline = results["timeline"]
    gpu = environment.get("gpu")

    # 1-2. configs: the table's (or the heuristic's), loaded, or tuned (with precompiling)
    t0 = time.perf_counter()
    loaded = tuning.load_configs(settings.configs_from)
    keys = needed_keys(cells, modes, settings)
    configs = Configs({k: loaded[k] for k in keys if k in loaded}, on_gpu, gpu,
                      settings.fa1_grid)
    to_tune = ([k for k in keys if k not in configs.records
                and retune_key_matches(k, settings.retune_keys)] if settings.tune else [])
    candidates = tuning_jobs(to_tune, cells, settings, on_gpu)
    precompiled = {}
    if on_gpu and candidates:
        jobs = [j for *_, j in candidates] + forward_of_backward_jobs(candidates)
        precompiled.update(compile_jobs(jobs, "for tuning", settings, budget, log,
                                        progress_factory))
    timeline["precompile_tuning_s"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    tuned_s = []
    for i, key in enumerate(to_tune):
        if tuned_s and not budget.allows(max(tuned_s)):
            budget.skip(f"tuning of {len(to_tune) - i} keys (they run the table's tiles or the "
                        "heuristic's)")
            log(budget.skipped[-1])
            break
        t1 = time.perf_counter()
        mine = [(fields, job) for k, _, fields, job in candidates if k == key]
        cell = next(c for k, c, *_ in candidates if k == key)
        record = tune(key, cell, mine, device, settings, precompiled)
        tuned_s.append(time.perf_counter() - t1)
        if record["fields"] is None:
            log(f"{key}: {record['source']}; its tiles stay the table's or the heuristic's")
            continue
        configs.records[key] = record
        log(f"tuned {key.part} {key.variant} d={key.head_dim} causal={key.causal} "
            f"band {key.band!r}: {record['fields']}")
    results["configs"] = configs.as_list()
    results["tile_sources"] = tile_table.sources(
        cells, lambda c: [(n, PARTS[m]) for m in modes for n in kernels_for(m, c, settings)],
        on_gpu, gpu)
    if settings.tune and (on_gpu or settings.table_out):
        from kernels.plan.tuned_tiles import PATH

        entries = tile_table.entries_from(configs.records, cells, configs, results["provenance"])
        path = settings.table_out or PATH
        if entries:
            tile_table.merge_into(path, entries, settings.tune_seqlen)
            log(f"wrote {len(entries)} entries of tuned tiles into {path}")
        results["table_written"] = {"path": path, "entries": len(entries)}
    timeline["tune_s"] = time.perf_counter() - t0
    if on_sweep:  # the tuned configs are kept even if the run is cut later (--configs-from)
        on_sweep(results)

    t0 = time.perf_counter()
    not_compiled = set()
    if on_gpu:
        done = set(precompiled)
        jobs = [j for j in final_jobs(cells, modes, configs, settings)
                if tuning.job_key(j) not in done]
        for k, error in compile_jobs(jobs, "for the grid", settings, budget, log,
                                     progress_factory).items():
            if error == tuning.NOT_COMPILED:
                not_compiled.add(k)
            elif error:
                log(f"precompile failed for {k}: {error}")
    timeline["precompile_final_s"] = time.perf_counter() - t0

    # 3-4. the gate and the sweeps, in this process or in one process per GPU
    if settings.shards > 1:
        measure_sharded(cells, modes, configs, settings, device, log, results, started)
    else:
        gate_and_sweep(cells, modes, configs, settings, device, log, results, started,
                       on_sweep, progress_factory, budget, not_compiled)
    if on_gpu:
        results["provenance"]["gpu_state_after"] = gpu_state()
    timeline["total_s"] = time.perf_counter() - started
    return results


def compile_jobs(jobs, why: str, settings: Settings, budget: Budget, log,
                 progress_factory=None) -> dict:
    """tuning.precompile with the budget's deadline, Triton's cache index and a progress bar
    of kernels compiled / left."""
    keys = {tuning.job_key(j) for j in jobs}
    if not keys:
        return {}
    log(f"compiling {len(keys)} kernels {why} on {settings.workers} worker processes (those in "
        "Triton's cache are loaded)")
    bar = progress_factory(f"compiling {why}", len(keys)) if progress_factory else None
    out = tuning.precompile(jobs, settings.workers, progress=(lambda k, e: bar.advance())
                            if bar else None, deadline=budget.deadline(), use_cache=True)
    if bar:
        bar.stop()
    cut = sum(e == tuning.NOT_COMPILED for e in out.values())
    if cut:
        budget.skip(f"compiling {cut} of {len(keys)} kernels {why}; cells that need them are "
                    "not gated or timed")
        log(budget.skipped[-1])
    return out


def gate_and_sweep(cells, modes, configs, settings: Settings, device: str, log, results: dict,
                   started: float, on_sweep=None, progress_factory=None, budget=None,
                   not_compiled=frozenset()):
    """Gate every cell, then time them in sweeps; fills results' cells, matmul, timeline
    (gate_s, sweeps_s), repeats_done and stopped_by_budget. A cell is gated only if its kernels
    compiled and the budget still fits its gate and one sweep of it (plan.cell_cost_s)."""
    budget = budget or Budget(settings.budget_s, started)
    timeline = results["timeline"]
    t0 = time.perf_counter()
    costs = [plan.cell_cost_s(cell, modes, lambda c, m: contenders_for(c, m, settings), settings)
             for cell in cells]
    entries, unaffordable = [], 0
    for cell, (sweep_s, gate_s) in zip(cells, costs):
        missing = not_compiled and any(tuning.job_key(j) in not_compiled
                                       for j in final_jobs([cell], modes, configs, settings))
        if missing or unaffordable or not budget.allows(gate_s + sweep_s):
            why = ("skipped: its kernels were not compiled within --budget-s" if missing
                   else "skipped: --budget-s left no time to gate and time it")
            unaffordable += not missing
            entries.append(skipped_cell(cell, modes, why))
            continue
        entries.append(gate_cell(cell, modes, configs, settings, device, log))
    if unaffordable:
        budget.skip(f"gating and timing {unaffordable} of {len(cells)} cells")
        log(budget.skipped[-1])
    results["cells"] = entries
    timeline["gate_s"] = time.perf_counter() - t0
    if on_sweep:
        on_sweep(results)  # configs and gate results are kept even if no sweep completes

    # sweeps
    dtypes = sorted({c.dtype for c in cells})
    results["matmul"] = {d: {"flops": None, "samples": []} for d in dtypes}
    timeline["sweeps_s"] = []
    total = sum(len(e["modes"][m]["timed"]) for e in entries for m in modes)
    progress = progress_factory("timing", total * settings.repeats) if progress_factory else None
    sweep_costs = [s for s, _ in costs]
    with ClockLog() if device == "cuda" else contextlib.nullcontext() as clock_log:
        for r in range(settings.repeats if total else 0):  # nothing gated: nothing to time
            if r and not budget.allows(1.1 * timeline["sweeps_s"][-1]):
                results["stopped_by_budget"] = True
                budget.skip(f"sweeps {r + 1}-{settings.repeats} (another would pass --budget-s "
                            f"{settings.budget_s:.0f}; {budget.elapsed():.0f} s used)")
                log(budget.skipped[-1])
                break
            t0 = time.perf_counter()
            complete = sweep(r, cells, entries, modes, configs, settings, device, results,
                             progress, budget if r == 0 else None, sweep_costs)
            timeline["sweeps_s"].append(time.perf_counter() - t0)
            results["repeats_done"] = r + 1
            log(f"sweep {r + 1}/{settings.repeats} done in {timeline['sweeps_s'][-1]:.0f} s")
            if clock_log:
                attribute_clocks(entries, clock_log.samples)
            if on_sweep:
                on_sweep(results)
            if not complete:
                results["stopped_by_budget"] = True
                break
    if clock_log:  # the samples that arrived after the last sweep's attribution
        attribute_clocks(entries, clock_log.samples)
        results["clock_log"] = clock_log.record()
        if clock_log.error:
            log(f"no SM clock samples ({clock_log.error})")
    if progress:
        progress.stop()


def skipped_cell(cell, modes, why: str) -> dict:
    """The results entry of a cell the budget left out: nothing gated or timed, and why."""
    return {"cell": cell.as_dict(), "gate": {}, "skipped": {}, "configs": {}, "gate_s": 0.0,
            "modes": {m: {"status": why, "timed": [], "excluded": {}, "samples": {},
                          "errors": {}} for m in modes}}


def attribute_clocks(entries, samples):
    """Each contender's clock samples: those inside its do_bench calls (fa2check.ablate.clocks)."""
    samples = sorted(samples)
    times = [s[0] for s in samples]
    for entry in entries:
        for info in entry["modes"].values():
            info["clock"] = {name: inside(samples, windows, times)
                             for name, windows in info.get("windows", {}).items()}


def measure_sharded(cells, modes, configs, settings: Settings, device: str, log, results: dict,
                    started: float):
    """gate_and_sweep over `settings.shards` processes, each on its own GPU
    (CUDA_VISIBLE_DEVICES) and its own cells, split by the planning model's cost so that the
    groups take about as long. A cell and all of its contenders stay on one GPU, so every
    ratio inside a cell is measured on one device; the matmul rate is measured on each GPU
    and the samples pooled. Merged into `results` in the grid's order. Unlike the single
    process run, no gate or sweep result is saved before every shard has finished (the
    configs are, before this; --budget-s applies to each shard)."""
    def contenders(cell, mode):
        return contenders_for(cell, mode, settings)

    costs = [sum(plan.cell_cost_s(cell, modes, contenders, settings)) for cell in cells]
    groups = [g for g in plan.split_by_cost(costs, settings.shards) if g]
    log(f"gate and sweeps on {len(groups)} shards (one GPU each): "
        + ", ".join(f"{len(g)} cells" for g in groups))
    # one task per process (max_tasks_per_child), so each sets its own CUDA_VISIBLE_DEVICES
    # before its first CUDA call
    with ProcessPoolExecutor(len(groups), mp_context=get_context("spawn"),
                             max_tasks_per_child=1) as pool:
        futures = [pool.submit(_shard, index, [cells[i] for i in group], modes, configs,
                               settings, device, started) for index, group in enumerate(groups)]
        parts = [f.result() for f in futures]
    by_cell = {}
    for group, part in zip(groups, parts):
        for i, entry in zip(group, part["cells"]):
            by_cell[i] = {**entry, "shard": part["shard"]}
    results["cells"] = [by_cell[i] for i in range(len(cells))]
    results["matmul"] = {}
    for part in parts:
        for dtype, record in part["matmul"].items():
            merged = results["matmul"].setdefault(dtype, {"flops": record["flops"], "samples": []})
            merged["samples"] += record["samples"]
    results["repeats_done"] = min(p["repeats_done"] for p in parts)
    results["stopped_by_budget"] = any(p["stopped_by_budget"] for p in parts)
    results["timeline"]["gate_s"] = max(p["timeline"]["gate_s"] for p in parts)
    results["timeline"]["shards"] = [{"shard": p["shard"], "device": p["device"],
                                      "cells": len(p["cells"]), **p["timeline"]} for p in parts]
    results["provenance"]["shards"] = [p["device"] for p in parts]
    results["clock_log"] = [p.get("clock_log") for p in parts]


def _shard(index: int, cells, modes, configs, settings: Settings, device: str, started: float):
    """One shard's gate_and_sweep, in a fresh process on GPU `index`."""
    if device == "cuda":  # the index-th of the GPUs this run was given
        visible = os.environ.get("CUDA_VISIBLE_DEVICES")
        os.environ["CUDA_VISIBLE_DEVICES"] = (visible.split(",")[index].strip() if visible
                                              else str(index))

    console = Console(width=240)
    log = Log(console, started, prefix=f"shard {index}: ")
    part = {"timeline": {}, "repeats_done": 0, "stopped_by_budget": False}
    gate_and_sweep(cells, modes, configs, settings, device, log, part, started)
    gpu = describe_environment(device).get("gpu", device)
    return {**part, "shard": index, "device": f"{gpu} #{index}" if device == "cuda" else device}


def gate_cell(cell, modes, configs: Configs, settings: Settings, device: str, log) -> dict:
    """Gate one cell for every contender any mode times; returns the cell's results entry."""
    t0 = time.perf_counter()
    kernels = list(dict.fromkeys(n for m in modes for n in kernels_for(m, cell, settings)))
    names, skipped = backends_for(cell, settings)
    contenders = [by_name(n, cell, configs) for n in kernels + names]
    backward = any("bwd" in PARTS[m] for m in modes)
    inputs = make_inputs(cell, device, settings.seed)
    if settings.gluon and "fwd" in modes and gluon_skipped(cell, settings):
        skipped.update({kernel_name(v, GLUON): gluon_skipped(cell, settings)
                        for v in variants_for("fwd")})
    entry = {"cell": cell.as_dict(), "gate": {}, "skipped": dict(skipped), "modes": {},
             "configs": {c.name: dataclasses.asdict(c.config) for c in contenders if c.ours}}
    if API in names:  # what flash_attention(q, k, v) ran here (kernels.fastest's choice)
        entry["api_kernel"] = {m: api_kernel(cell, m, configs.gpu) for m in modes}
    try:
        oracle = CellOracle(cell, inputs, backward)
    except Exception as e:  # noqa: BLE001
        oracle, entry["gate_error"] = None, f"oracle failed: {type(e).__name__}: {e}"[:500]
    entry["oracle_s"] = time.perf_counter() - t0
    for contender in contenders:
        if oracle is None:
            entry["gate"][contender.name] = {"passed": False, "error": entry["gate_error"], "checks": []}
            continue
        entry["gate"][contender.name] = gate(contender, cell, inputs, oracle)
    del oracle, inputs
    entry["gate_s"] = time.perf_counter() - t0
    passed = sum(g["passed"] for g in entry["gate"].values())
    slowest = max(entry["gate"].items(), key=lambda kv: kv[1].get("seconds", 0))
    log(f"gate {cell}: {passed}/{len(entry['gate'])} contenders passed ({entry['gate_s']:.1f} s; "
        f"oracle {entry['oracle_s']:.1f} s, slowest {slowest[0]} {slowest[1].get('seconds', 0):.1f} s)")
    for mode in modes:
        ours_needed = primary_names(mode, settings)
        failed = [n for n in ours_needed if not entry["gate"][n]["passed"]]
        passing_backends, excluded = [], {}
        # the Gluon kernels, like SDPA's backends, are left out of a cell they fail (reported),
        # rather than costing the cell the Triton variants' timings
        for name in [n for n in kernels_for(mode, cell, settings) if n not in ours_needed] + names:
            result = entry["gate"][name]
            if result["passed"]:
                passing_backends.append(name)
            else:
                excluded[name] = (f"unavailable: {result['error']}" if result.get("error")
                                  else "failed the gate")
        timed = [] if failed else ours_needed + passing_backends
        status = "timed" if not failed else "failed gate: " + ", ".join(failed)
        entry["modes"][mode] = {"status": status, "timed": timed, "excluded": excluded,
                                "samples": {n: [] for n in timed}, "errors": {}}
        if failed:
            log(f"{cell} {mode}: FAILED the gate ({', '.join(failed)}); not timed")
    return entry


def sweep(r, cells, entries, modes, configs, settings, device, results, progress, budget=None,
          costs=None) -> bool:
    """One pass over the matmul rate and every cell, contenders interleaved. With a budget
    (the first sweep), a cell starts only if its predicted cost (costs[i]) fits; the cells it
    leaves are marked skipped and False is returned."""
    for dtype, record in results["matmul"].items():
        samples, flops = matmul_samples(DTYPES[dtype], device=device,
                                        warmup_ms=settings.warmup_ms, rep_ms=settings.rep_ms)
        record["flops"] = flops
        record["samples"].append(samples)
    rng = np.random.default_rng([settings.seed, r])
    for i, (cell, entry) in enumerate(zip(cells, entries)):
        if not any(entry["modes"][m]["timed"] for m in modes):
            continue
        if budget is not None and not budget.allows(costs[i]):
            left = [e for e in entries[i:] if any(e["modes"][m]["timed"] for m in modes)]
            for e in left:
                for m in modes:
                    if e["modes"][m]["timed"]:
                        e["modes"][m]["status"] = "skipped: gated, but --budget-s ran out before it was timed"
            budget.skip(f"timing {len(left)} gated cells in the first sweep")
            return False
        inputs = make_inputs(cell, device, settings.seed)
        for mode in modes:
            info = entry["modes"][mode]
            for i in rng.permutation(len(info["timed"])):
                name = info["timed"][i]
                if name in info["errors"]:
                    continue
                contender = by_name(name, cell, configs)
                try:
                    with timed_call(contender, mode, inputs, cell.causal) as fn:
                        start = time.time()  # wall clock, as nvidia-smi's timestamps
                        timing = bench(fn, device=device, warmup_ms=settings.warmup_ms,
                                       rep_ms=settings.rep_ms)
                        info.setdefault("windows", {}).setdefault(name, []).append(
                            [timing.started or start, time.time()])
                    info["samples"][name].append([round(s, 6) for s in timing.samples])
                    if timing.host_us:  # median host us a call, timed calls outlasting the
                        # sleep, timed calls (a slow call records none: report.host_records)
                        info.setdefault("host", {}).setdefault(name, []).append(
                            [round(float(np.median(timing.host_us)), 1), timing.host_bound,
                             len(timing.host_us)])
                except Exception as e:  # noqa: BLE001 - recorded; the contender is dropped
                    info["errors"][name] = f"sweep {r}: {type(e).__name__}: {e}"[:500]
                if progress:
                    progress.advance()
        del inputs
        if device == "cuda":
            torch.cuda.empty_cache()
    return True


def by_name(name: str, cell, configs: Configs) -> Contender:
    if name in PEERS:
        return backend(name)
    kernel_backend, variant = parse_kernel_name(name)
    return ours(variant, configs.config(name, cell), kernel_backend)


def contenders_for(cell, mode: str, settings: Settings) -> list[tuple[str, object]]:
    return ([(n, parse_kernel_name(n)[1]) for n in kernels_for(mode, cell, settings)]
            + [(name, None) for name in backends_for(cell, settings)[0]])


PLANNED_GPU = "NVIDIA H200"  # whose table entries a plan made without a GPU assumes


def plan_estimate(cells, settings: Settings) -> dict:
    """The planning estimate of a GPU run of `cells` (fa2check.ablate.plan), without running it."""
    from . import compile_cache

    keys = needed_keys(cells, settings.modes, settings)
    loaded = tuning.load_configs(settings.configs_from)
    gpu = torch.cuda.get_device_name() if torch.cuda.is_available() else PLANNED_GPU
    configs = Configs({k: loaded[k] for k in keys if k in loaded}, on_gpu=True, gpu=gpu,
                      fa1_grid=settings.fa1_grid)
    to_tune = ([k for k in keys if k not in configs.records
                and retune_key_matches(k, settings.retune_keys)] if settings.tune else [])
    candidates = tuning_jobs(to_tune, cells, settings, on_gpu=True)
    phase1 = {tuning.job_key(j): j for j in [j for *_, j in candidates]
              + forward_of_backward_jobs(candidates)}
    phase2 = {}
    for job in final_jobs(cells, settings.modes, configs, settings):
        if tuning.job_key(job) not in phase1:
            phase2.setdefault(tuning.job_key(job), job)
    for key in compile_cache.cached(set(phase1) | set(phase2)):  # loaded, not compiled
        phase1.pop(key, None)
        phase2.pop(key, None)
    timed = [(k.part, tuning.variant_of(k), cell) for k, cell, _, _ in candidates]
    return plan.estimate(cells, settings.modes, lambda c, m: contenders_for(c, m, settings),
                         settings, list(phase1.values()), list(phase2.values()), timed,
                         settings.workers)
