"""Made-up results files, as fa2check.ablate.sweep.run writes them, for the tests that render,
merge and check saved results (tests/test_ablate.py, tests/test_clocks.py)."""
import json
import math

import numpy as np

from fa2check.ablate import contributions as C
from fa2check.ablate.grids import Cell


def synthetic_results(date="2026-11-30T10:00:00+00:00", modes=("fwd", "bwd"), device="cuda",
                       gluon=False, n_cells=2, kernels="triton", switches=None, head_dim=64):
    """A results file as fa2check.ablate.sweep.run writes it, with made-up timings; gluon: the fwd
    mode also has Gluon kernels, whose split_q is worth less (0.1 instead of 0.3 on log time);
    kernels "hopper": our 8 variants are the Hopper chassis's ("hopper+defer+seqpar+splitq").
    switches ({frozenset of switches on: log speedup over none on}, kernels "hopper"): every
    mode also has the switch variants (--hopper-switches), each sample the base's same sample
    divided by exp(its log speedup), so every median's ratio to the base's is that factor
    exactly. The base (no producer warp, FA2 all on) is FA2's sample times exp(the speedup of
    {"warp_specialize"}). bwd has the sets without pingpong only (D87). Where no set
    names warp_specialize, a run saved before D85 (fwd only): the sets are relative to FA2 and
    every variant keeps its producer warp."""
    rng = np.random.default_rng(7)
    effects = {"defer_norm": 0.03, "seq_parallel": 0.8, "split_q": 0.3}
    gluon_effects = {**effects, "split_q": 0.1}
    cells = [Cell(4, 32, 32, seqlen, head_dim, "bfloat16", c)
             for seqlen in (4096, 8192)[:max(1, n_cells // 2)] for c in (False, True)]
    entries = []
    for cell in cells:
        entry = {"cell": cell.as_dict(), "gate": {}, "skipped": {"sdpa-math": "skipped: test"},
                 "modes": {}, "configs": {}}
        for mode in modes:
            players = C.players_for(mode)
            samples = {}
            backends = [("" if kernels == "triton" else kernels, effects)] + ([("gluon", gluon_effects)] if gluon and mode == "fwd" else [])
            for prefix, sizes in backends:
                for s in C.subsets(players):
                    centre = 3.0 * math.exp(-sum(sizes[p] for p in s))
                    samples[prefix + str(C.variant_for(s, players))] = [
                        list(centre * (1 + rng.normal(0, 0.01, 30))) for _ in range(3)]
            ws = frozenset({"warp_specialize"})
            before_d85 = switches and not any(ws <= on for on in switches)
            if switches and (mode == "fwd" or not before_d85):
                fa2 = samples[f"{kernels}{C.variant_for(frozenset(C.FLAGS), C.FLAGS)}"]
                base = [[x * math.exp(switches.get(ws, 0.0)) for x in run] for run in fa2]
                sets = {**switches, **({} if before_d85 else {frozenset(): 0.0})}
                if mode == "bwd":  # the backward has no pingpong (D87)
                    sets = {on: speedup for on, speedup in sets.items() if "pingpong" not in on}
                for on, speedup in sets.items():
                    name = f"{kernels}{C.variant_for(on | ws if before_d85 else on, C.SWITCHES)}"
                    samples.setdefault(name, [[x / math.exp(speedup) for x in run] for run in base])
            samples["sdpa-flash"] = [list(1.1 * (1 + rng.normal(0, 0.01, 30))) for _ in range(3)]
            for name in samples:
                entry["gate"][name] = {"passed": True, "worst_ratio": 0.3, "checks": [], "error": None}
            entry["modes"][mode] = {"status": "timed", "timed": list(samples), "excluded": {},
                                    "samples": samples, "errors": {}}
        entries.append(entry)
    return {"schema": "fa2check.ablate/1",
            "provenance": {"device": device, "gpu": "Synthetic GPU", "sms": 132, "date": date,
                           "git_commit": "abc123", "torch": "x", "triton": "y", "command": "test"},
            "settings": {"modes": list(modes), "repeats": 3, "warmup_ms": 5, "rep_ms": 20,
                         **({} if kernels == "triton" else {"kernels": kernels}),
                         **({"hopper_switches": True} if switches else {})},
            "cells": entries, "configs": [], "repeats_done": 3, "stopped_by_budget": False,
            "matmul": {"bfloat16": {"flops": 2 * 8192 ** 3, "samples": [[1.4] * 5] * 3}}}


def two_runs(tmp_path, **second):
    """Two synthetic runs of the same code and cells, one sweep each; `second` edits the
    second run's provenance."""
    paths = []
    for index, date in enumerate(("2026-11-30T10:00:00+00:00", "2026-11-30T11:00:00+00:00")):
        run = synthetic_results(date, ("fwd",))
        run["repeats_done"] = 1
        for entry in run["cells"]:
            for data in entry["modes"].values():
                data["samples"] = {n: [[float(index + 1)] * 4] for n in data["samples"]}
        if index:
            run["provenance"].update(second)
        paths.append(tmp_path / f"run{index}.json")
        paths[-1].write_text(json.dumps(run))
    return paths
