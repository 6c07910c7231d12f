"""A planning estimate of an ablation run (printed before it starts, and by `--plan` alone).

The model is deliberately simple and is written down so that a run can be compared with it:
- compiling: each distinct kernel specialisation once, COMPILE_S seconds on one core (measured
  on the development machine with the compile gate: 0.6-1.0 s for split-Q forwards, 6-9.5 s for
  split-K forwards, whose default tiles spill), spread over the worker processes, plus
  WORKER_START_S for each of the two precompile phases;
- one timed measurement (fa2check.ablate.timing.bench): two calls that decide whether the call
  is slow, then host_ahead_bench's first call and 5-call estimate, its warm-up and its repeat
  time: warmup_ms + rep_ms + 9 * t, where t is the call's predicted time, and its sleeps: n
  timed calls (rep_ms / t, at most MAX_SAMPLES) each after HOST_AHEAD times HOST_MS[mode]; a
  slow call (t >= rep_ms / 2) is timed by `bench` itself in 1 + SLOW_SAMPLES calls;
- the gate: two calls of each contender a cell, and FIRST_CALL_S for each contender's first
  call in a kernel class (its compiled kernels loaded into the process);
- t from the paper's FLOP count over a predicted rate: SDPA's backends at the rates measured on
  this H200 (shared/anchors: bf16 medians over the paper grid); our FA2 at about sdpa-flash's
  rate; seq_parallel off: FA1's launcher (D90) fills the GPU, its forward's schedule at
  FA1_SCHEDULE_COST, its backward at FA2's rate; on the (batch, heads) reference grid the rate
  is divided by the fraction of the 132 SMs that batch * heads programs can fill (2 per SM);
  split-K and FA1's normalisation cost factors SPLIT_K_COST and DEFER_OFF_COST.
This is a budgeting model, on the slow side on purpose so that a run fits its time; the
physical predictions that the measurements are compared with are in docs/decisions.md.
"""
from __future__ import annotations

from .timing import HOST_AHEAD, MAX_SAMPLES, SLOW_SAMPLES, is_slow
from .tuning import FINAL_ROUNDS, FINALISTS

SMS = 132
PROGRAMS_PER_SM = 2
# Calibrated on the first H200 run (20261130-100200-*-paper-fwd.log, in git history: see
# ablations/results/MANIFEST.md): the first model (1.5 / 7.0 / 2.0 s, split-K 1.8x slower, ours at
# 300/260 forward and 200/170 backward) predicted 76 s of precompiling where 168 s were measured,
# and a 55 s sweep where 116 s were measured; split-K ran about 15x slower than split-Q, and the
# backward (default tiles, quick grid) at about 95 TFLOP/s. Recalibrated on the first tuned backward
# with the dQ pass (docs/decisions.md#D30, results/20261130-153348-*): FA2 bwd 246-392 TFLOP/s
# non-causal, 145-358 causal; at 95/85 the plan predicted a 366 s bwd,fwd+bwd sweep where 197 s were
# measured.
COMPILE_S = {"split_q": 3.2, "split_k": 15.0, "bwd": 4.0,
             "hopper": 6.0}  # a prediction: the chassis's compile was not timed alone yet
# A causal forward compiles two kernels, the main launch and REPAIR (kernels/forward.py): the d=128
# causal tuning with nan_flags twins (D04) precompiled 136 such jobs in about 190 s where one kernel
# a job predicted 94 s; with both counted, 160 jobs were planned at 203 s and took 194 s.
CAUSAL_FWD_KERNELS = 2
WORKER_START_S = 15.0
# flex (torch's flex_attention) compiles in its gate call, once per cell and grad mode: a
# prediction (D63), not yet timed on the GPU; its rate is taken as ours (RATES)
FLEX_COMPILE_S = 20.0
OVERHEAD_MS = 3.0  # host work around each measurement
# a contender's first gate call in each kernel class (head dim, dtype, mask) loads its compiled
# kernels (precompiled by other processes) into this one: in the paper grid after D113 on an H100
# (20261207-143220-*), each class's first cell took 13.6-18.4 s for 13 contenders, its later cells
# 0.4-0.7 s; the gate took 168 s where 36 were planned without this term
FIRST_CALL_S = 1.1
# host ms a call before each timed call's sleep (timing.host_ahead_bench sleeps twice the largest
# of its estimate's 5 calls): the 90th percentile of the timing calls' host medians in D99's paper
# run on the H100's host, 0.41 forward and 1.55 forward and backward (medians 0.28 and 1.18); the
# backward alone as the forward and backward. That run's sweep took 108 s; this plans 96 s for it
HOST_MS = {"fwd": 0.4, "bwd": 1.5, "fwd+bwd": 1.5}
SPLIT_K_COST = 15.0
# the Hopper chassis (README, 2026-12-02): split-K took 1.48-1.65x FA2's time; FA2 itself ran
# 324-546 TFLOP/s forward (bf16, 1k-8k), about "ours" below
HOPPER_SPLIT_K_COST = 1.7
# the backward's split-K (FA1's 16-row dQ key split on mma.sync, D50): the paper grid's fwd+bwd
# on the H200 (20261202-133644-*) took 8.7x FA2's time without split_q, where the forward's
# chassis split-K costs 1.56x; with the forward at 1.7x that puts the backward's at about 10x
BWD_SPLIT_K_COST = 10.0
# the chassis's own backward (kernels/hopper_backward.py, D61), d=64 bf16 1k-4k on the H200
# (9a7d03e): split-K 1.01-1.08x its split-Q's time; its FA2 backward 1.1-1.2x the Triton FA2's
HOPPER_BWD_SPLIT_K_COST = 1.1
HOPPER_BWD_SLOWER = 1.2
DEFER_OFF_COST = 1.06
# FA1's forward schedule on FA1's launcher (the chassis, d=128 bf16 full on the H200, issue 56):
# 218-223 TFLOP/s from 2k to 16k against FA2's 515-550
FA1_SCHEDULE_COST = 2.4
# forward, backward TFLOP/s (non-causal, causal) measured for our FA2 and for SDPA
RATES = {
    "ours": {"fwd": (420.0, 360.0), "bwd": (300.0, 260.0)},
    "sdpa-flash": {"fwd": (320.0, 280.0), "bwd": (280.0, 240.0)},
    "sdpa-cudnn": {"fwd": (520.0, 450.0), "bwd": (440.0, 380.0)},
    "sdpa-efficient": {"fwd": (150.0, 135.0), "bwd": (115.0, 95.0)},
    "sdpa-math": {"fwd": (20.0, 9.0), "bwd": (40.0, 20.0)},
}


def predicted_ms(cell, mode: str, name: str, variant=None, fa1_grid: str = "fa1") -> float:
    rates = RATES.get("ours" if variant is not None else name, RATES["ours"])  # api, flex: ours
    total = 0.0
    for part in ("fwd", "bwd"):
        if part not in mode.split("+"):
            continue
        rate = rates[part][1 if cell.causal else 0]
        if variant is not None:
            if not variant.seq_parallel and fa1_grid == "batch-heads":
                programs = cell.batch * (cell.heads_q if part == "fwd" else cell.heads_kv)
                rate *= min(1.0, programs / (SMS * PROGRAMS_PER_SM))
            elif not variant.seq_parallel and part == "fwd":
                rate /= FA1_SCHEDULE_COST
            hopper = name.startswith("hopper")
            if hopper and part == "bwd":
                rate /= HOPPER_BWD_SLOWER
            if not variant.split_q:
                rate /= ((HOPPER_BWD_SPLIT_K_COST if hopper else BWD_SPLIT_K_COST)
                         if part == "bwd" else HOPPER_SPLIT_K_COST if hopper else SPLIT_K_COST)
            if not variant.defer_norm:
                rate /= DEFER_OFF_COST
        total += cell.flops(part) / (rate * 1e12) * 1e3
    return total


def measurement_s(ms: float, warmup_ms: float, rep_ms: float, mode: str = "fwd") -> float:
    if is_slow(ms, rep_ms):
        return ((1 + SLOW_SAMPLES) * ms + OVERHEAD_MS) / 1e3
    sleeps = min(MAX_SAMPLES, max(1, int(rep_ms / ms))) * HOST_AHEAD * HOST_MS[mode]
    return (warmup_ms + rep_ms + 9 * ms + sleeps + OVERHEAD_MS) / 1e3


def cell_cost_s(cell, modes, contenders_for, settings) -> tuple[float, float]:
    """(one sweep, the gate) of one cell, in seconds."""
    sweep, slowest = 0.0, {}
    for mode in modes:
        for name, variant in contenders_for(cell, mode):
            ms = predicted_ms(cell, mode, name, variant, settings.fa1_grid)
            sweep += measurement_s(ms, settings.warmup_ms, settings.rep_ms, mode)
            slowest[name] = max(slowest.get(name, 0.0), predicted_ms(cell, "fwd+bwd", name,
                                                                     variant, settings.fa1_grid))
    gate = sum(2 * ms for ms in slowest.values()) / 1e3 + 0.5  # first call, check, oracle
    gate += FLEX_COMPILE_S * ("flex" in slowest)
    return sweep, gate


def split_by_cost(costs: list[float], n: int) -> list[list[int]]:
    """Indices of `costs` in n groups of near-equal total: the most expensive first, each to
    the group with the least so far (LPT). Each group keeps its indices in their order."""
    groups, totals = [[] for _ in range(n)], [0.0] * n
    for i in sorted(range(len(costs)), key=lambda i: -costs[i]):
        g = totals.index(min(totals))
        groups[g].append(i)
        totals[g] += costs[i]
    return [sorted(g) for g in groups]


def estimate(cells, modes, contenders_for, settings, phase1: list, phase2: list, tuning: list,
             workers: int) -> dict:
    """Seconds per phase. contenders_for(cell, mode) -> [(name, variant or None)]; phase1 and
    phase2: precompile jobs (tuning.make_job dicts); tuning: (part, variant, cell) per timed
    candidate."""
    def compile_s(jobs):
        if not jobs:
            return 0.0
        cost = sum(COMPILE_S["bwd"] if j["part"] == "bwd"
                   else COMPILE_S["hopper"] if j["variant"].startswith("hopper")
                   else COMPILE_S["split_q" if "+splitq" in j["variant"] else "split_k"]
                   * (CAUSAL_FWD_KERNELS if j["causal"] else 1)
                   for j in jobs)
        return WORKER_START_S + cost / max(1, workers)

    costs = [cell_cost_s(cell, modes, contenders_for, settings) for cell in cells]
    # with shards, the gate and the sweeps run in parallel: the largest group decides
    groups = split_by_cost([sweep + gate for sweep, gate in costs], settings.shards)
    sweep = max(sum(costs[i][0] for i in g) for g in groups)

    def gate_s(group):  # each shard loads the kernels of the classes it gates
        first_calls = {(cells[i].head_dim, cells[i].dtype, cells[i].causal, name)
                       for i in group for mode in modes
                       for name, _ in contenders_for(cells[i], mode)}
        return sum(costs[i][1] for i in group) + FIRST_CALL_S * len(first_calls)

    gate = max(gate_s(g) for g in groups)
    if settings.shards > 1:
        gate += WORKER_START_S  # the shard processes start (torch, triton, the kernel cache)
    per_key = {}  # a key's candidates share its (part, variant, representative cell)
    for part, variant, cell in tuning:
        per_key.setdefault((part, str(variant), cell), []).append(measurement_s(
            predicted_ms(cell, part, "ours", variant, settings.fa1_grid), settings.tune_warmup_ms,
            settings.tune_rep_ms, part))
    # then the FINALISTS of each key again, in FINAL_ROUNDS rounds (sweep.tune)
    tune = sum(sum(t) * (1 + min(FINALISTS, len(t)) * FINAL_ROUNDS / len(t))
               for t in per_key.values())
    phases = {
        "precompile_tuning_s": compile_s(phase1),
        "tune_s": tune,
        "precompile_final_s": compile_s(phase2),
        "gate_s": gate,
        "sweep_s": sweep,
    }
    phases["total_s"] = (sum(phases.values()) - sweep + settings.repeats * sweep
                         + 20.0)  # + analysis, plots and files
    phases["compile_jobs"] = (len(phase1), len(phase2))
    phases["measurements_per_sweep"] = sum(len(contenders_for(c, m)) for c in cells for m in modes)
    return phases
