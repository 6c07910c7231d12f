"""The ablation run: configs (tuned, loaded or default), precompiling, the correctness gate, and
the interleaved, repeated timing sweeps. Returns the results as plain data (see `run`).

Order of work:
1. configs: every (part, variant, head_dim, causal) gets a record: loaded from --configs-from,
   tuned here, or default_config;
2. precompile the tuning candidates (GPU only; worker processes), tune on the representative
   cells, then precompile every kernel the grid needs with the winners;
3. gate every cell: each contender's outputs there against the oracle (fa2check.ablate.cellcheck); a
   cell where one of our variants fails is reported and not timed; an SDPA backend that cannot
   run a cell (or fails it) is left out of that cell with the reason;
4. sweeps: each sweep times the matmul rate, then every cell, and in each cell every contender
   once (one do_bench call) in an order shuffled per sweep, so the variants are interleaved
   rather than timed in blocks; the whole sweep is repeated `repeats` times, or fewer when
   `budget_s` would be exceeded by the next one.
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
from ..core.sdpa_backends import BACKENDS
from . import plan, tuning
from .cellcheck import CellOracle, gate
from .clocks import ClockLog, inside
from .contenders import (GLUON, Contender, backend, kernel_name, make_inputs, ours,
                         parse_kernel_name, timed_call)
from .timing import bench, gpu_state, matmul_samples

SCHEMA = "fa2check.ablate/1"
PARTS = {"fwd": ("fwd",), "bwd": ("bwd",), "fwd+bwd": ("fwd", "bwd")}
RESERVE_S = 30.0  # kept free at the end of a budget for analysis, plots and files


@dataclass
class Settings:
    modes: list = field(default_factory=lambda: ["fwd"])
    repeats: int = 3
    warmup_ms: float = 5.0
    rep_ms: float = 20.0
    tune: bool = True
    tune_seqlen: int = tuning.TUNE_SEQLEN
    tune_warmup_ms: float = 2.0
    tune_rep_ms: float = 10.0
    backends: tuple = tuple(BACKENDS)
    math_max_seqlen: int = 4096
    budget_s: float | None = None
    workers: int = field(default_factory=tuning.default_workers)
    seed: int = 0
    configs_from: tuple = ()
    gluon: bool = False  # also time the Gluon forward of every variant (fwd mode)
    gluon_max_seqlen: int = 4096
    shards: int = 1  # processes that gate and time disjoint sets of cells, one GPU each

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)


def variants_for(mode: str):
    """All 8 variants; the backward alone only the 4 split_q=True ones (split_q does not
    change the backward, see fa2check.ablate.contributions)."""
    from kernels import Variant

    return [v for v in Variant.all() if mode != "bwd" or v.split_q]


def kernels_for(mode: str, cell, settings: Settings) -> list[str]:
    """Names of our kernels timed in a mode and cell: the Triton variants, and with
    settings.gluon the Gluon forward of every variant (forward only; dtypes and head dims it
    supports, seqlen up to gluon_max_seqlen), a second backend whose split_q is the warp
    partitioning itself."""
    names = [str(v) for v in variants_for(mode)]
    if mode == "fwd" and not gluon_skipped(cell, settings):
        names += [kernel_name(v, GLUON) for v in variants_for(mode)]
    return names


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
    """One record per TuneKey: {"key", "fields", "source", ...}."""

    def __init__(self, records: dict, on_gpu: bool):
        self.records, self.on_gpu = dict(records), on_gpu

    def fields(self, part, name: str, cell):
        record = self.records.get(key_of(part, name, cell))
        return record["fields"] if record else None

    def config(self, name, cell):
        """The config of one of our kernels (a kernel_name, or a Variant for Triton's) in a
        cell."""
        kernel_backend, variant = parse_kernel_name(str(name))
        return tuning.build_config(cell.head_dim, variant, self.on_gpu,
                                   fwd=self.fields("fwd", str(name), cell),
                                   bwd=self.fields("bwd", str(name), cell),
                                   kernel_backend=kernel_backend)

    def default_record(self, key: tuning.TuneKey) -> dict:
        from kernels import default_config

        kernel_backend, variant = parse_kernel_name(key.variant)
        config = default_config(key.head_dim, self.on_gpu, variant, backend=kernel_backend)
        return {"key": key.as_dict(), "fields": tuning.fields_of(config, key.part),
                "source": "default_config"}

    def as_list(self) -> list[dict]:
        return [self.records[k] for k in sorted(self.records, key=lambda k: tuple(map(str, k.as_dict().values())))]


def key_of(part: str, name: str, cell) -> tuning.TuneKey:
    """The key whose winner a kernel's part uses in a cell (the backward's is split_q=True's)."""
    variant = name if part == "fwd" else str(tuning.part_variant(part,
                                                                 parse_kernel_name(name)[1]))
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
    jobs = []
    for cell in cells:
        for mode in modes:
            for name in kernels_for(mode, cell, settings):
                config = configs.config(name, cell)
                for part in ("fwd",) + (("bwd",) if "bwd" in PARTS[mode] else ()):
                    jobs.append(tuning.make_job(part, name, config, cell))
    return jobs


def tune(key, cell, candidates, device, settings, precompiled) -> dict:
    """Time every candidate of one key on its representative cell, then the fastest few
    again in interleaved rounds (tuning.FINALISTS, tuning.FINAL_ROUNDS); keep the lowest
    median of those rounds."""
    kernel_backend, variant = parse_kernel_name(key.variant)
    inputs = make_inputs(cell, device, settings.seed)

    def samples_of(fields):
        config = tuning.build_config(key.head_dim, variant, device == "cuda",
                                     fwd=fields if key.part == "fwd" else None,
                                     bwd=fields if key.part == "bwd" else None,
                                     kernel_backend=kernel_backend)
        with timed_call(ours(variant, config, kernel_backend), key.part, inputs,
                        cell.causal) as fn:
            return list(bench(fn, device=device, warmup_ms=settings.tune_warmup_ms,
                              rep_ms=settings.tune_rep_ms))

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
        provenance=None, on_sweep=None, progress_factory=None) -> dict:
    """Measure `cells` for `settings.modes`. Returns the results dict (schema SCHEMA);
    `provenance` entries are added to (or override) the environment's; on_sweep(results) is
    called once the configs are settled (tuned or loaded), after the gate and after each
    completed sweep, to save partial results."""
    started = time.perf_counter() if started is None else started
    log = Log(console, started)
    on_gpu = device == "cuda"
    modes = list(settings.modes)
    environment = describe_environment(device)
    if on_gpu:
        environment["cudnn"] = torch.backends.cudnn.version()
        environment["gpu_state_before"] = gpu_state()
    results = {"schema": SCHEMA, "provenance": {**environment, "command": command, **(provenance or {})},
               "settings": settings.as_dict(), "cells": [], "configs": [], "matmul": {},
               "timeline": {}, "repeats_done": 0, "stopped_by_budget": False}
    timeline = results["timeline"]

    # 1-2. configs: loaded, tuned (with precompiling) or default
    t0 = time.perf_counter()
    loaded = tuning.load_configs(settings.configs_from)
    keys = needed_keys(cells, modes, settings)
    configs = Configs({k: loaded[k] for k in keys if k in loaded}, on_gpu)
    to_tune = [k for k in keys if k not in configs.records] if settings.tune else []
    candidates = tuning_jobs(to_tune, cells, settings, on_gpu)
    precompiled = {}
    if on_gpu and candidates:
        jobs = [j for *_, j in candidates] + forward_of_backward_jobs(candidates)
        log(f"precompiling {len({tuning.job_key(j) for j in jobs})} kernels for tuning "
            f"on {settings.workers} worker processes")
        precompiled.update(tuning.precompile(jobs, settings.workers))
    timeline["precompile_tuning_s"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    for key in to_tune:
        mine = [(fields, job) for k, _, fields, job in candidates if k == key]
        cell = next(c for k, c, *_ in candidates if k == key)
        record = tune(key, cell, mine, device, settings, precompiled)
        if record["fields"] is None:
            default = configs.default_record(key)
            record = {**record, "fields": default["fields"],
                      "source": record["source"] + "; default_config used"}
        configs.records[key] = record
        log(f"tuned {key.part} {key.variant} d={key.head_dim} causal={key.causal}: "
            f"{record['fields']}")
    for key in keys:
        configs.records.setdefault(key, configs.default_record(key))
    results["configs"] = configs.as_list()
    timeline["tune_s"] = time.perf_counter() - t0
    if on_sweep:  # the tuned configs are kept even if the run is cut later (--configs-from)
        on_sweep(results)

    t0 = time.perf_counter()
    if on_gpu:
        done = set(precompiled)
        jobs = [j for j in final_jobs(cells, modes, configs, settings)
                if tuning.job_key(j) not in done]
        if jobs:
            log(f"precompiling {len({tuning.job_key(j) for j in jobs})} kernels for the grid")
            for k, error in tuning.precompile(jobs, settings.workers).items():
                if error:
                    log(f"precompile failed for {k}: {error}")
    timeline["precompile_final_s"] = time.perf_counter() - t0

    # 3-4. the gate and the sweeps, in this process or in one process per GPU
    if settings.shards > 1:
        measure_sharded(cells, modes, configs, settings, device, log, results, started)
    else:
        gate_and_sweep(cells, modes, configs, settings, device, log, results, started,
                       on_sweep, progress_factory)
    if on_gpu:
        results["provenance"]["gpu_state_after"] = gpu_state()
    timeline["total_s"] = time.perf_counter() - started
    return results


def gate_and_sweep(cells, modes, configs, settings: Settings, device: str, log, results: dict,
                   started: float, on_sweep=None, progress_factory=None):
    """Gate every cell, then time them in sweeps; fills results' cells, matmul, timeline
    (gate_s, sweeps_s), repeats_done and stopped_by_budget."""
    timeline = results["timeline"]
    t0 = time.perf_counter()
    entries = []
    for cell in cells:
        entries.append(gate_cell(cell, modes, configs, settings, device, log))
    results["cells"] = entries
    timeline["gate_s"] = time.perf_counter() - t0
    if on_sweep:
        on_sweep(results)  # configs and gate results are kept even if no sweep completes

    # sweeps
    dtypes = sorted({c.dtype for c in cells})
    results["matmul"] = {d: {"flops": None, "samples": []} for d in dtypes}
    timeline["sweeps_s"] = []
    total = sum(len(e["modes"][m]["timed"]) for e in entries for m in modes)
    progress = progress_factory(total * settings.repeats) if progress_factory else None
    with ClockLog() if device == "cuda" else contextlib.nullcontext() as clock_log:
        for r in range(settings.repeats):
            t0 = time.perf_counter()
            sweep(r, cells, entries, modes, configs, settings, device, results, progress)
            timeline["sweeps_s"].append(time.perf_counter() - t0)
            results["repeats_done"] = r + 1
            log(f"sweep {r + 1}/{settings.repeats} done in {timeline['sweeps_s'][-1]:.0f} s")
            if clock_log:
                attribute_clocks(entries, clock_log.samples)
            if on_sweep:
                on_sweep(results)
            if settings.budget_s and r + 1 < settings.repeats:
                elapsed = time.perf_counter() - started
                if elapsed + 1.1 * timeline["sweeps_s"][-1] + RESERVE_S > settings.budget_s:
                    results["stopped_by_budget"] = True
                    log(f"stopping after {r + 1} sweeps: another would pass --budget-s "
                        f"{settings.budget_s:.0f} ({elapsed:.0f} s used)")
                    break
    if clock_log:  # the samples that arrived after the last sweep's attribution
        attribute_clocks(entries, clock_log.samples)
        results["clock_log"] = clock_log.record()
        if clock_log.error:
            log(f"no SM clock samples ({clock_log.error})")
    if progress:
        progress.stop()


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
    try:
        oracle = CellOracle(cell, inputs, backward)
    except Exception as e:  # noqa: BLE001
        oracle, entry["gate_error"] = None, f"oracle failed: {type(e).__name__}: {e}"[:500]
    for contender in contenders:
        if oracle is None:
            entry["gate"][contender.name] = {"passed": False, "error": entry["gate_error"], "checks": []}
            continue
        entry["gate"][contender.name] = gate(contender, cell, inputs, oracle)
    del oracle, inputs
    entry["gate_s"] = time.perf_counter() - t0
    passed = sum(g["passed"] for g in entry["gate"].values())
    log(f"gate {cell}: {passed}/{len(entry['gate'])} contenders passed ({entry['gate_s']:.1f} s)")
    for mode in modes:
        ours_needed = [str(v) for v in variants_for(mode)]
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


def sweep(r, cells, entries, modes, configs, settings, device, results, progress):
    """One pass over the matmul rate and every cell, contenders interleaved."""
    for dtype, record in results["matmul"].items():
        samples, flops = matmul_samples(DTYPES[dtype], device=device,
                                        warmup_ms=settings.warmup_ms, rep_ms=settings.rep_ms)
        record["flops"] = flops
        record["samples"].append(samples)
    rng = np.random.default_rng([settings.seed, r])
    for cell, entry in zip(cells, entries):
        if not any(entry["modes"][m]["timed"] for m in modes):
            continue
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
                        samples = bench(fn, device=device, warmup_ms=settings.warmup_ms,
                                        rep_ms=settings.rep_ms)
                        info.setdefault("windows", {}).setdefault(name, []).append(
                            [start, time.time()])
                    info["samples"][name].append([round(s, 6) for s in samples])
                except Exception as e:  # noqa: BLE001 - recorded; the contender is dropped
                    info["errors"][name] = f"sweep {r}: {type(e).__name__}: {e}"[:500]
                if progress:
                    progress.advance()
        del inputs
        if device == "cuda":
            torch.cuda.empty_cache()


def by_name(name: str, cell, configs: Configs) -> Contender:
    if name in BACKENDS:
        return backend(name)
    kernel_backend, variant = parse_kernel_name(name)
    return ours(variant, configs.config(name, cell), kernel_backend)


def contenders_for(cell, mode: str, settings: Settings) -> list[tuple[str, object]]:
    return ([(n, parse_kernel_name(n)[1]) for n in kernels_for(mode, cell, settings)]
            + [(name, None) for name in backends_for(cell, settings)[0]])


def plan_estimate(cells, settings: Settings) -> dict:
    """The planning estimate of a GPU run of `cells` (fa2check.ablate.plan), without running it."""
    keys = needed_keys(cells, settings.modes, settings)
    loaded = tuning.load_configs(settings.configs_from)
    configs = Configs({k: loaded[k] for k in keys if k in loaded}, on_gpu=True)
    to_tune = [k for k in keys if k not in configs.records] if settings.tune else []
    candidates = tuning_jobs(to_tune, cells, settings, on_gpu=True)
    phase1 = {tuning.job_key(j): j for j in [j for *_, j in candidates]
              + forward_of_backward_jobs(candidates)}
    for key in keys:
        configs.records.setdefault(key, configs.default_record(key))
    phase2 = {}
    for job in final_jobs(cells, settings.modes, configs, settings):
        if tuning.job_key(job) not in phase1:
            phase2.setdefault(tuning.job_key(job), job)
    timed = [(k.part, tuning.variant_of(k), cell) for k, cell, _, _ in candidates]
    return plan.estimate(cells, settings.modes, lambda c, m: contenders_for(c, m, settings),
                         settings, list(phase1.values()), list(phase2.values()), timed,
                         settings.workers)
