"""fa2check.ablate on the CPU: the contribution arithmetic, the bootstrap, FLOP counting, the
correctness gate (against test doubles), rendering saved results, and one tiny end-to-end run
through the interpreter (its timings mean nothing; the code path runs)."""
import json
import math
import os
from pathlib import Path

import numpy as np
import pytest
import torch

from fa2check.ablate import contributions as C
from fa2check.core.environment import kernels_sha256
from fa2check.ablate.grids import Cell, custom_grid, paper_grid, parse_modes
from kernels import Variant
from saved_results import synthetic_results, two_runs

PLAYERS = C.FLAGS


def _log_times(rng, players):
    return {s: float(rng.normal(0.0, 1.0)) for s in C.subsets(players)}


# ----------------------------------------------------------------------------- Shapley

@pytest.mark.parametrize("players", [C.FLAGS, C.BACKWARD_PLAYERS], ids=["3 players", "2 players"])
def test_shapley_values_add_up_exactly_to_the_log_total_speedup(players):
    rng = np.random.default_rng(1)
    for _ in range(20):
        log_t = _log_times(rng, players)
        q = C.decompose(log_t, players)
        assert q["total"] == pytest.approx(log_t[frozenset()] - log_t[frozenset(players)], abs=1e-12)
        assert sum(q[f"shapley/{p}"] for p in players) == pytest.approx(q["total"], abs=1e-12)


def test_interactions_complete_the_decomposition():
    rng = np.random.default_rng(2)
    log_t = _log_times(rng, PLAYERS)
    q = C.decompose(log_t, PLAYERS)
    interactions = [k for k in q if k.startswith("interaction/")]
    assert sorted(interactions) == sorted(["interaction/defer_normxseq_parallel",
                                           "interaction/defer_normxsplit_q",
                                           "interaction/seq_parallelxsplit_q",
                                           "interaction/defer_normxseq_parallelxsplit_q"])
    # total = sum of alone effects + every interaction
    assert q["total"] == pytest.approx(sum(q[f"alone/{p}"] for p in PLAYERS)
                                       + sum(q[k] for k in interactions), abs=1e-12)
    # phi_i = alone_i + each interaction containing i shared equally among its members
    for p in PLAYERS:
        shared = sum(q[k] / len(k.split("/")[1].split("x")) for k in interactions if p in k)
        assert q[f"shapley/{p}"] == pytest.approx(q[f"alone/{p}"] + shared, abs=1e-12)


def test_additive_game_has_no_interactions():
    effects = {"defer_norm": 0.05, "seq_parallel": 1.2, "split_q": 0.4}
    log_t = {s: 3.0 - sum(effects[p] for p in s) for s in C.subsets(PLAYERS)}
    q = C.decompose(log_t, PLAYERS)
    for p, a in effects.items():
        for kind in ("alone", "removed", "shapley"):
            assert q[f"{kind}/{p}"] == pytest.approx(a, abs=1e-12)
    assert all(abs(v) < 1e-12 for k, v in q.items() if k.startswith("interaction/"))


def test_pure_interaction_is_shared_by_its_two_members():
    # the speedup c appears only when defer_norm and seq_parallel are both on
    c = 0.7
    log_t = {s: -c if {"defer_norm", "seq_parallel"} <= s else 0.0 for s in C.subsets(PLAYERS)}
    q = C.decompose(log_t, PLAYERS)
    assert q["shapley/defer_norm"] == pytest.approx(c / 2)
    assert q["shapley/seq_parallel"] == pytest.approx(c / 2)
    assert q["shapley/split_q"] == pytest.approx(0.0)
    assert q["alone/defer_norm"] == pytest.approx(0.0)
    assert q["removed/defer_norm"] == pytest.approx(c)
    assert q["interaction/defer_normxseq_parallel"] == pytest.approx(c)
    assert q["interaction/defer_normxseq_parallelxsplit_q"] == pytest.approx(0.0)


def test_backward_game_names_split_q_not_applicable():
    assert C.players_for("bwd") == ("defer_norm", "seq_parallel")
    assert C.players_for("fwd") == C.players_for("fwd+bwd") == C.FLAGS
    # the backward's variants keep split_q on: they are the ones timed
    assert {str(C.variant_for(s, C.BACKWARD_PLAYERS)) for s in C.subsets(C.BACKWARD_PLAYERS)} == {
        str(v) for v in Variant.all() if v.split_q}
    assert "split_q" in C.NOT_APPLICABLE


def test_backward_does_not_depend_on_split_q(device):
    """Why split_q is 'not applicable' in the backward: the same saved tensors give bitwise
    identical gradients for split_q on and off."""
    from kernels.backward import attn_bwd
    from kernels.config import default_config
    from kernels.forward import attn_fwd

    gen = torch.Generator().manual_seed(3)
    q, k, v, do = (torch.randn(1, 2, 40, 16, generator=gen).to(device, torch.bfloat16)
                   for _ in range(4))
    on, off = Variant(True, True, True), Variant(True, True, False)
    config = default_config(16, on_gpu=device == "cuda")
    o, stats, _ = attn_fwd(q, k, v, True, 0.25, on, config)
    grads = [attn_bwd(q, k, v, o, stats, do, None, True, 0.25, variant, config)
             for variant in (on, off)]
    for a, b in zip(*grads):
        assert torch.equal(a, b)


# ----------------------------------------------------------------------------- bootstrap

def _synthetic_samples(rng, effects, repeats=3, n=40, noise=0.01):
    """Per-sweep samples (ms) of each subset's variant: base * exp(-sum of effects), with a
    sweep-level drift and per-sample noise."""
    out = {}
    for s in C.subsets(PLAYERS):
        centre = 2.0 * math.exp(-sum(effects[p] for p in s))
        out[s] = [list(centre * (1 + rng.normal(0, 0.003)) * (1 + rng.normal(0, noise, n)))
                  for _ in range(repeats)]
    return out


def test_bootstrap_separates_a_real_effect_from_none():
    rng = np.random.default_rng(4)
    samples = _synthetic_samples(rng, {"defer_norm": 0.0, "seq_parallel": 0.5, "split_q": 0.1})
    draws = C.repeat_draws(3, 400, rng)
    result = C.analyse(samples, PLAYERS, draws, rng)
    q = C.with_intervals(result["point"], result["draws"])
    assert q["shapley/seq_parallel"]["significant"]
    assert q["shapley/split_q"]["significant"]
    assert not q["shapley/defer_norm"]["significant"]
    assert q["shapley/defer_norm"]["ci_low"] < 1.0 < q["shapley/defer_norm"]["ci_high"]
    assert q["shapley/seq_parallel"]["factor"] == pytest.approx(math.exp(0.5), rel=0.02)
    # every bootstrap draw keeps the efficiency property
    total = result["draws"]["total"]
    assert np.allclose(sum(result["draws"][f"shapley/{p}"] for p in PLAYERS), total, atol=1e-12)


def test_bootstrap_interval_narrows_with_less_noise():
    widths = []
    for noise in (0.05, 0.005):
        rng = np.random.default_rng(5)
        samples = _synthetic_samples(rng, {"defer_norm": 0.02, "seq_parallel": 0.0, "split_q": 0.0},
                                     noise=noise)
        result = C.analyse(samples, PLAYERS, C.repeat_draws(3, 300, rng), rng)
        low, high = C.interval(result["draws"]["shapley/defer_norm"])
        widths.append(high - low)
    assert widths[1] < widths[0] / 3


def test_bootstrap_medians_are_medians_of_resampled_sweeps():
    rng = np.random.default_rng(6)
    runs = [[1.0] * 5, [2.0] * 7, [3.0] * 3]
    draws = np.array([[0, 0, 0], [1, 1, 1], [2, 2, 2], [0, 1, 1], [2, 2, 1]])
    assert list(C.bootstrap_medians(runs, draws, rng)) == [1.0, 2.0, 3.0, 2.0, 2.0]
    with pytest.raises(ValueError):
        C.bootstrap_medians(runs[:2], draws, rng)


# ----------------------------------------------------------------------------- grids and FLOPs

def test_flop_counting_follows_the_paper():
    cell = Cell(batch=2, heads_q=16, heads_kv=16, seqlen=1024, head_dim=128, dtype="bfloat16",
                causal=False)
    fwd = 4 * 2 * 16 * 1024 * 1024 * 128
    assert cell.flops("fwd") == fwd
    assert cell.flops("bwd") == 2.5 * fwd
    assert cell.flops("fwd+bwd") == 3.5 * fwd
    causal = Cell(2, 16, 16, 1024, 128, "bfloat16", True)
    assert causal.flops("fwd") == fwd / 2


def test_paper_grid_is_the_papers_benchmark():
    cells = paper_grid()
    assert len(cells) == 6 * 2 * 2 * 2
    for c in cells:
        assert c.batch * c.seqlen == 16384
        assert c.heads_q * c.head_dim == 2048 and c.heads_kv == c.heads_q
    assert {c.seqlen for c in cells} == {512, 1024, 2048, 4096, 8192, 16384}
    assert {(c.dtype, c.causal) for c in cells} == {(d, m) for d in ("bfloat16", "float16")
                                                   for m in (False, True)}
    assert custom_grid([4096], [128], [True])[0] == Cell(4, 16, 16, 4096, 128, "bfloat16", True)
    assert parse_modes(["fwd,bwd", "fwd+bwd", "fwd"]) == ["fwd", "bwd", "fwd+bwd"]
    with pytest.raises(ValueError):
        parse_modes(["forward"])


def test_tuning_space_keeps_split_k_honest():
    from fa2check.ablate import tuning

    for d in (64, 128):
        split_k = tuning.candidates("fwd", d, Variant(True, True, False), on_gpu=True)
        split_q = tuning.candidates("fwd", d, Variant(), on_gpu=True)
        assert split_k and all(c["block_n"] >= 64 for c in split_k)
        four = [c for c in split_k if "key_slices" not in c]
        two = [c for c in split_k if "key_slices" in c]
        assert all(c in split_q for c in four)  # the same space, less what it cannot use
        assert two and all(c["key_slices"] == 2 for c in two)  # and 2 slices, named
        for c in split_k:  # a candidate keeps the slices it names, else FA1's 4
            config = tuning.build_config(d, Variant(True, True, False), True, fwd=c)
            assert config.key_slices == c.get("key_slices", 4)
        # seq_parallel off also has FA1's 16-row query steps, and 64-row ones
        serial = tuning.candidates("fwd", d, Variant(seq_parallel=False), on_gpu=True)
        assert {16, 64} <= {c["block_m"] for c in serial}
        assert 16 not in {c["block_m"] for c in split_q}
    assert tuning.warm_seqlen(16384) == 256 and tuning.warm_seqlen(1000) == 257
    assert tuning.warm_seqlen(1) == 1 and tuning.warm_seqlen(100) == 100


def test_causal_keys_alone_try_the_first_row_repair_check():
    from fa2check.ablate import report, tuning

    for d in (64, 128):
        full = tuning.candidates("fwd", d, Variant(), on_gpu=True)
        causal = tuning.candidates("fwd", d, Variant(), on_gpu=True, causal=True)
        extra = [c for c in causal if c not in full]
        assert all(c["nan_flags"] is False for c in extra)
        assert not any("nan_flags" in c for c in full)
        assert len(extra) == len(tuning.CAUSAL_FWD_NAN_FLAGS_OFF.get(d, []))
        # each is the twin of a tile of the space
        assert all({k: v for k, v in c.items() if k != "nan_flags"} in full for c in extra)
    assert extra  # d=128 has some
    assert not any("nan_flags" in c for c in tuning.candidates("fwd", 128, Variant(),
                                                                on_gpu=False, causal=True))
    records = [{"key": {"part": "fwd", "variant": "v", "head_dim": 128, "causal": True},
                "fields": {**extra[0], "block_m": 64}},
               {"key": {"part": "fwd", "variant": "v", "head_dim": 128, "causal": True},
                "fields": {"block_m": 64, "tma": True}}]
    choices = [row[9] for row in report.configs_table({"configs": records}).rows]
    assert choices[0].endswith("NaN check in REPAIR") and choices[1] == "TMA loads"


def test_each_seqlen_band_has_its_own_winner_tuned_on_its_cells():
    from fa2check.ablate import sweep, tuning

    cells = paper_grid()
    keys = sweep.needed_keys(cells, ["fwd+bwd"], sweep.Settings(backends=()))
    fa2 = [k for k in keys if k.variant == str(Variant()) and k.head_dim == 128 and k.causal]
    assert sorted((k.part, k.band) for k in fa2) == [("bwd", ""), ("bwd", "long"),
                                                      ("fwd", ""), ("fwd", "short")]
    tuned_on = {(k.part, k.band): tuning.representative(cells, k).seqlen for k in fa2}
    assert tuned_on == {("bwd", ""): 4096, ("bwd", "long"): 16384, ("fwd", "short"): 1024,
                        ("fwd", ""): 4096}
    # each cell reads the winner of its own band
    configs = sweep.Configs({k: {"key": k.as_dict(), "fields": {
        f"{'bwd_' if k.part == 'bwd' else ''}block_m": 16 * (1 + sorted(
            tuning.TUNE_BANDS[k.part]).index(k.band))}} for k in fa2}, on_gpu=True)
    chosen = {c.seqlen: (configs.config(str(Variant()), c).block_m,
                         configs.config(str(Variant()), c).bwd_block_m)
              for c in cells if c.head_dim == 128 and c.causal and c.dtype == "bfloat16"}
    assert chosen == {512: (32, 16), 1024: (32, 16), 2048: (16, 16), 4096: (16, 16),
                      8192: (16, 32), 16384: (16, 32)}


def test_configs_of_older_files_load_into_the_band_they_were_tuned_for(tmp_path):
    """Before bands, every winner was tuned at 4k (the band ""); then the backward's keys had
    `long`."""
    import json

    from fa2check.ablate import report, tuning

    records = [{"key": {"part": "fwd", "variant": "v", "head_dim": 64, "causal": False},
                "fields": {}},
               {"key": {"part": "bwd", "variant": "v", "head_dim": 64, "causal": False,
                        "long": True}, "fields": {}},
               {"key": {"part": "fwd", "variant": "v", "head_dim": 64, "causal": True,
                        "long": False}, "fields": {}}]
    path = tmp_path / "old.json"
    path.write_text(json.dumps({"configs": records}))
    assert sorted((k.part, k.band) for k in tuning.load_configs([path])) == [
        ("bwd", "long"), ("fwd", ""), ("fwd", "")]
    seqlens = [row[4] for row in report.configs_table({"configs": records}).rows]
    assert seqlens == ["all", ">= 8192", "all"]
    assert [tuning.band_seqlens(p, b) for p, b in [("fwd", "short"), ("fwd", ""), ("bwd", ""),
                                                   ("bwd", "long")]] == [
        "< 2048", ">= 2048", "< 8192", ">= 8192"]


def test_a_middle_band_covers_the_seqlens_between_its_neighbours(monkeypatch):
    from fa2check.ablate import tuning

    monkeypatch.setitem(tuning.TUNE_BANDS, "fwd", {"short": (0, 1024), "": (2048, 4096),
                                                   "long": (8192, 16384)})
    assert [tuning.band_seqlens("fwd", b) for b in ("short", "", "long")] == [
        "< 2048", "2048-8191", ">= 8192"]
    assert [tuning.band_of("fwd", s) for s in (2047, 2048, 8191, 8192)] == [
        "short", "", "", "long"]


def test_tuning_keeps_the_finalist_fastest_in_interleaved_rounds(monkeypatch):
    """The first pass ranks; the finalists' rounds decide (a one-pass lead of 1% is noise)."""
    import contextlib

    from fa2check.ablate import sweep, tuning

    first = {16: 1.00, 32: 1.01, 48: 1.02, 64: 2.0}  # block_m -> first-pass ms
    final = {16: 1.10, 32: 1.00, 48: 1.05}  # ... and in the final rounds
    timed = []

    def bench(config, **_):
        timed.append(config.block_m)
        seen = timed.count(config.block_m)
        return [first[config.block_m] if seen == 1 else final[config.block_m]] * 5

    monkeypatch.setattr(sweep, "bench", bench)
    monkeypatch.setattr(sweep, "ours", lambda variant, config, backend: config)
    monkeypatch.setattr(sweep, "timed_call", lambda c, *_: contextlib.nullcontext(c))
    monkeypatch.setattr(sweep, "make_inputs", lambda *_: None)
    cell = Cell(1, 2, 2, 64, 16, "bfloat16", False)
    key = tuning.TuneKey("fwd", str(Variant()), 16, False)
    mine = [({"block_m": m, "block_n": 16}, tuning.make_job(
        "fwd", Variant(), tuning.build_config(16, Variant(), False, fwd={"block_m": m}), cell))
        for m in first]
    record = sweep.tune(key, cell, mine, "cpu", sweep.Settings(backends=()), {})
    assert record["fields"]["block_m"] == 32
    assert timed == [16, 32, 48, 64] + [16, 32, 48] * tuning.FINAL_ROUNDS
    finals = {c["fields"]["block_m"]: c.get("final_median_ms") for c in record["candidates"]}
    assert finals == {16: 1.10, 32: 1.00, 48: 1.05, 64: None}

    # a finalist that raises in the final rounds is dropped, as in the first pass
    def flaky(config, **kwargs):
        if config.block_m == 32 and timed.count(32) >= 1:
            timed.append(32)
            raise RuntimeError("out of resources")
        return bench(config, **kwargs)

    timed.clear()
    monkeypatch.setattr(sweep, "bench", flaky)
    record = sweep.tune(key, cell, mine, "cpu", sweep.Settings(backends=()), {})
    assert record["fields"]["block_m"] == 48
    dropped = next(c for c in record["candidates"] if c["fields"]["block_m"] == 32)
    assert "final rounds: RuntimeError" in dropped["error"] and "final_median_ms" not in dropped


def test_precompile_runs_each_distinct_job_once_in_workers(device):
    """The worker pool runs each distinct job and returns its error or None (without CUDA
    every job fails, and says why)."""
    from fa2check.ablate import tuning

    cell = Cell(1, 2, 2, 64, 16, "bfloat16", False)
    config = tuning.build_config(16, Variant(), on_gpu=device == "cuda")
    jobs = [tuning.make_job("fwd", Variant(), config, cell)] * 2 + [
        tuning.make_job("bwd", Variant(), config, cell)]
    results = tuning.precompile(jobs, workers=2)
    assert len(results) == 2
    for error in results.values():
        assert (error is None) if device == "cuda" else ("CUDA" in error or "Torch" in error)


def test_d64_tries_register_capped_tiles_in_every_variant_and_mask():
    """tuning.REGISTER_CAPPED_FWD: at d=64 every variant's forward space (both masks) has the
    capped tiles, and a capped candidate's config carries the cap; other head dims have none;
    the configs table names the cap."""
    from fa2check.ablate import report, tuning

    for causal in (False, True):
        for variant in Variant.all():
            space = tuning.candidates("fwd", 64, variant, on_gpu=True, causal=causal)
            capped = [c for c in space if c.get("max_registers")]
            assert len(capped) == len(tuning.REGISTER_CAPPED_FWD[64])
            config = tuning.build_config(64, variant, True, fwd=capped[0])
            assert config.max_registers == capped[0]["max_registers"] > 0
        assert not any("max_registers" in c for c in tuning.candidates(
            "fwd", 128, Variant(), on_gpu=True, causal=causal))
    records = [{"key": {"part": "fwd", "variant": "v", "head_dim": 64, "causal": True},
                "fields": {"block_m": 64, "block_n": 64, "num_warps": 4, "num_stages": 3,
                           "tma": False, "max_registers": 128}, "source": "test"}]
    row = report.configs_table({"configs": records}).rows[0]
    assert "registers <= 128" in row


def test_jobs_that_compile_different_kernels_have_different_keys():
    """Precompiling runs one job per key: a tile choice that changes the forward's code
    (nan_flags, key_slices) must change the key, or its kernels compile lazily while tuning
    times them (D04's nan_flags twins did); backward fields must not."""
    from dataclasses import replace

    from fa2check.ablate import tuning

    cell = Cell(1, 2, 2, 64, 64, "bfloat16", True)
    config = tuning.build_config(64, Variant(), on_gpu=True)
    key = tuning.job_key(tuning.make_job("fwd", Variant(), config, cell))
    for change in ({"nan_flags": False}, {"key_slices": 2}, {"tma": True}, {"max_registers": 128}):
        assert tuning.job_key(tuning.make_job("fwd", Variant(), replace(config, **change),
                                              cell)) != key
        bwd = [tuning.job_key(tuning.make_job("bwd", Variant(), c, cell))
               for c in (config, replace(config, **change))]
        assert bwd[0] != bwd[1]  # the backward's job runs that forward first
    assert tuning.job_key(tuning.make_job("fwd", Variant(), replace(config, bwd_block_m=16),
                                          cell)) == key


# ----------------------------------------------------------------------------- the gate

class _Double:
    """A contender whose forward is flash_attention with a planted bug."""

    def __init__(self, bug):
        self.name, self.bug, self.ours = f"double-{bug}", bug, True

    def context(self):
        import contextlib

        return contextlib.nullcontext()

    def forward(self, q, k, v, causal, return_lse=False):
        from kernels import flash_attention

        o, lse = flash_attention(q, k, v, causal=causal, return_lse=True)
        if self.bug == "batch-offset":  # the last batch entry gets batch 0's output
            o = torch.cat([o[:-1], o[:1]])
        return (o, lse) if return_lse else o


def test_gate_passes_the_kernel_and_rejects_test_doubles(device):
    from fa2check.ablate.cellcheck import CellOracle, gate, gate_slices
    from fa2check.ablate.contenders import backend, make_inputs, ours

    cell = Cell(2, 4, 2, 40, 16, "bfloat16", True)
    assert gate_slices(cell) == [(0, 0), (1, 1)]
    inputs = make_inputs(cell, device)
    oracle = CellOracle(cell, inputs, backward=True)
    good = gate(ours(Variant(False, False, False), None), cell, inputs, oracle)
    assert good["passed"], good
    assert {c["output"] for c in good["checks"]} == {"o", "lse", "dq", "dk", "dv"}
    assert gate(backend("sdpa-math"), cell, inputs, oracle)["passed"]
    bad = gate(_Double("batch-offset"), cell, inputs, oracle)
    assert not bad["passed"]
    assert {(c["batch"], c["output"]) for c in bad["checks"] if not c["passed"]} >= {(1, "o")}


# ----------------------------------------------------------------------------- saved results

def test_render_from_saved_results_writes_tables_csv_and_plots(tmp_path):
    from fa2check import ablate

    path = tmp_path / "synthetic.json"
    path.write_text(json.dumps(synthetic_results()))
    md = tmp_path / "tables.md"
    out = tmp_path / "out"
    assert ablate.main(["--from", str(path), "--out", str(out), "--markdown", str(md),
                        "--bootstrap", "200"]) == 0
    text = md.read_text()
    assert "Synthetic GPU" in text and "2026-11-30" in text
    assert "split_q: not applicable" in text
    bwd_summary = text[text.index("bwd: contributions over the grid"):]
    assert "| split_q | n/a | n/a | n/a |" in bwd_summary
    rows = (out / "synthetic.csv").read_text().splitlines()
    assert rows[0].split(",")[:3] == ["mode", "batch", "heads_q"]
    assert any(",contribution,shapley/seq_parallel," in r for r in rows)
    assert not any(r.startswith("bwd,") and "shapley/split_q" in r for r in rows)
    for suffix in ("-tflops.png", "-contributions.png"):
        assert (out / f"synthetic{suffix}").stat().st_size > 10_000


def test_contributions_plot_takes_an_interval_that_misses_its_estimate_by_an_ulp(tmp_path):
    """A cell timed once has a one-point bootstrap interval, which the estimate can miss by
    an ulp (seen in a 1-sweep fwd+bwd run): the plot draws it, matplotlib's negative yerr
    error must not stop the render."""
    from fa2check.ablate.analysis import analyse_results
    from fa2check.ablate.plots import contributions_plot

    results = synthetic_results()
    analysis = analyse_results(results, n_draws=20, seed=0)
    row = next(r for d in analysis["modes"].values() for r in d["cells"] if r["contributions"])
    q = row["contributions"]["total"]
    q["ci_low"] = q["ci_high"] = q["factor"] * (1 + 2e-16)
    contributions_plot(results, analysis, str(tmp_path / "c.png"))
    assert (tmp_path / "c.png").stat().st_size > 10_000


def test_gluon_kernels_get_their_own_contributions_beside_tritons(tmp_path):
    from fa2check import ablate

    path = tmp_path / "both.json"
    path.write_text(json.dumps(synthetic_results(modes=("fwd",), gluon=True)))
    md = tmp_path / "tables.md"
    assert ablate.main(["--from", str(path), "--markdown", str(md), "--bootstrap", "200"]) == 0
    text = md.read_text()
    gluon = text[text.index("fwd gluon: contributions over the grid"):]
    assert "| split_q | 1.11x" in gluon  # exp(0.1); the Triton view has exp(0.3) = 1.35x
    assert "| split_q | 1.35x" in text[:text.index("fwd gluon")]
    side = text[text.index("the same run's contributions with each kernel backend"):]
    assert "| all | 1.03x / 1.03x | 2.22x / 2.22x | 1.35x / 1.11x |" in side
    assert "fwd gluon: time and throughput" in text  # the Gluon FA2 per cell


def test_gluon_kernels_are_timed_only_where_they_can_run():
    from fa2check.ablate.sweep import Settings, gluon_skipped, kernels_for

    on, off = Settings(gluon=True), Settings()
    cell = Cell(4, 32, 32, 4096, 64, "bfloat16", True)
    assert len(kernels_for("fwd", cell, on)) == 16 and len(kernels_for("fwd", cell, off)) == 8
    assert len(kernels_for("bwd", cell, on)) == 4  # the Gluon kernel is a forward
    for other in (Cell(1, 16, 16, 8192, 128, "bfloat16", True), Cell(4, 32, 32, 4096, 64,
                                                                    "float32", False)):
        assert len(kernels_for("fwd", other, on)) == 8
        assert gluon_skipped(other, on).startswith("skipped")


def test_without_a_gpu_the_newest_committed_results_are_chosen(tmp_path):
    from fa2check.ablate.results import committed

    for name, date, modes, device in [("old", "2026-11-01T00:00:00", ("fwd", "bwd"), "cuda"),
                                      ("new", "2026-11-02T00:00:00", ("fwd",), "cuda"),
                                      ("cpu", "2026-11-03T00:00:00", ("fwd", "bwd"), "cpu")]:
        (tmp_path / f"{name}.json").write_text(json.dumps(synthetic_results(date, modes, device)))
    chosen = [(os.path.basename(p), m) for p, m in committed(str(tmp_path))]
    assert chosen == [("new.json", ["fwd"]), ("old.json", ["bwd"])]
    # a newer run on fewer cells with both kernel backends adds its Gluon view only
    (tmp_path / "gluon.json").write_text(json.dumps(synthetic_results(
        "2026-11-04T00:00:00", ("fwd",), "cuda", gluon=True, n_cells=1)))
    (tmp_path / "new.json").write_text(json.dumps(synthetic_results(
        "2026-11-02T00:00:00", ("fwd",), "cuda", n_cells=4)))
    chosen = [(os.path.basename(p), m) for p, m in committed(str(tmp_path))]
    assert chosen == [("new.json", ["fwd"]), ("old.json", ["bwd"]), ("gluon.json", ["fwd gluon"])]


def test_merged_runs_keep_every_sweep_and_each_runs_provenance(tmp_path):
    from fa2check import ablate
    from fa2check.ablate.results import committed

    first, second = two_runs(tmp_path)
    assert ablate.main(["--merge", str(first), "--merge", str(second), "--no-plots",
                        "--bootstrap", "20"]) == 0
    (path,) = tmp_path.glob("*-merged.json")
    merged = json.loads(path.read_text())
    assert merged["repeats_done"] == 2
    # what the merged file holds is complete; each run's planned sweeps stay in merged_from
    assert merged["settings"]["repeats"] == 2 and not merged["stopped_by_budget"]
    assert [r["repeats"] for r in merged["provenance"]["merged_from"]] == [
        json.loads(p.read_text())["settings"]["repeats"] for p in (first, second)]
    samples = merged["cells"][0]["modes"]["fwd"]["samples"]["sdpa-flash"]
    assert samples == [[1.0] * 4, [2.0] * 4]  # the first run's sweep, then the second's
    assert [r["date"][11:13] for r in merged["provenance"]["merged_from"]] == ["10", "11"]
    assert "Merged from 2 runs" in path.with_suffix(".md").read_text()
    # the merged file has its last run's date: chosen over that run for having more sweeps
    assert [os.path.basename(p) for p, _ in committed(str(tmp_path))] == [path.name]


def test_runs_of_different_code_are_not_merged(tmp_path):
    from fa2check import ablate

    first, second = two_runs(tmp_path, kernels_sha256="other")
    with pytest.raises(SystemExit, match="differs .* in provenance kernels_sha256"):
        ablate.main(["--merge", str(first), "--merge", str(second), "--no-plots"])
    run = json.loads(second.read_text())
    run["provenance"].pop("kernels_sha256")
    run["cells"][1]["configs"] = {"+defer+seqpar+splitq": {"block_m": 64}}
    second.write_text(json.dumps(run))
    with pytest.raises(SystemExit, match="tile configs of cell"):
        ablate.main(["--merge", str(first), "--merge", str(second), "--no-plots"])
    assert not list(tmp_path.glob("*-merged.json"))


def test_update_readme_replaces_only_its_section(tmp_path):
    from fa2check.ablate.cli import README_BEGIN, README_END, update_readme

    readme = tmp_path / "README.md"
    readme.write_text(f"intro\n{README_BEGIN}\nold\n{README_END}\noutro\n")
    update_readme("new tables", str(readme))
    assert readme.read_text() == f"intro\n{README_BEGIN}\nnew tables\n{README_END}\noutro\n"


# ----------------------------------------------------------------------------- end to end

def test_tiny_end_to_end_run_in_the_interpreter(tmp_path, device):
    if device != "cpu":
        pytest.skip("the GPU runs the real grid")
    from fa2check import ablate

    status = ablate.main(["--seqlen", "16", "--head-dim", "16", "--heads", "2", "--heads-kv", "1",
                          "--batch", "2", "--causal", "true", "--mode", "fwd,bwd",
                          "--repeats", "3", "--budget-s", "0.001", "--bootstrap", "100",
                          "--backends", "sdpa-math,sdpa-efficient", "--gluon", "--out",
                          str(tmp_path)])
    assert status == 0
    (path,) = tmp_path.glob("*.json")
    results = json.loads(path.read_text())
    assert results["provenance"]["device"] == "cpu"
    assert results["repeats_done"] == 1 and results["stopped_by_budget"]
    (entry,) = results["cells"]
    assert all(entry["gate"][str(v)]["passed"] for v in Variant.all())
    fwd, bwd = entry["modes"]["fwd"], entry["modes"]["bwd"]
    assert set(fwd["timed"]) == {str(v) for v in Variant.all()} | {"sdpa-math"}
    assert set(bwd["timed"]) == {str(v) for v in Variant.all() if v.split_q} | {"sdpa-math"}
    assert fwd["excluded"]["sdpa-efficient"].startswith("unavailable")
    # the Gluon kernels are gated like any contender; the interpreter cannot run them
    gluon = [f"gluon{v}" for v in Variant.all()]
    assert all("needs a CUDA GPU" in fwd["excluded"][n] for n in gluon)
    assert not any(n in bwd["excluded"] for n in gluon)  # forward only
    assert all(len(runs) == 1 and runs[0] for runs in fwd["samples"].values())
    assert {r["key"]["part"] for r in results["configs"]} == {"fwd", "bwd"}
    triton = [r for r in results["configs"] if not r["key"]["variant"].startswith("gluon")]
    assert all(r["source"].startswith("tuned on") for r in triton)
    analysis = results["analysis"]["modes"]
    assert analysis["bwd"]["players"] == ["defer_norm", "seq_parallel"]
    assert "shapley/split_q" in analysis["fwd"]["cells"][0]["contributions"]
    for suffix in (".csv", ".md", "-tflops.png", "-contributions.png"):
        assert path.with_name(path.stem + suffix).exists()


def test_split_by_cost_balances_groups_and_keeps_order():
    from fa2check.ablate.plan import split_by_cost

    groups = split_by_cost([5.0, 1.0, 4.0, 2.0, 3.0, 1.0], 2)
    assert sorted(i for g in groups for i in g) == list(range(6))
    assert all(g == sorted(g) for g in groups)
    totals = [sum([5.0, 1.0, 4.0, 2.0, 3.0, 1.0][i] for i in g) for g in groups]
    assert totals == [8.0, 8.0]
    assert split_by_cost([1.0], 3) == [[0], [], []]


def test_plan_counts_the_repair_kernel_of_a_causal_forward():
    from fa2check.ablate import plan
    from fa2check.ablate.sweep import Settings

    def precompile_s(*jobs):
        return plan.estimate([], ["fwd"], lambda c, m: [], Settings(), list(jobs), [], [],
                             1)["precompile_tuning_s"] - plan.WORKER_START_S

    fwd = {"part": "fwd", "variant": "+defer+seqpar+splitq", "causal": False}
    assert precompile_s({**fwd, "causal": True}) == 2 * precompile_s(fwd)
    bwd = {**fwd, "part": "bwd"}
    assert precompile_s({**bwd, "causal": True}) == precompile_s(bwd)


def test_sharded_run_keeps_every_cell_in_grid_order(tmp_path, device, monkeypatch):
    if device != "cpu":
        pytest.skip("the GPU runs the real grid")
    from fa2check import ablate
    from fa2check.ablate import results as results_io

    saved, save = [], results_io.save
    monkeypatch.setattr(results_io, "save", lambda results, path: (
        saved.append(json.loads(json.dumps(results))), save(results, path)))
    status = ablate.main(["--seqlen", "16", "--seqlen", "32", "--head-dim", "16", "--heads", "2",
                          "--batch", "1", "--causal", "false", "--mode", "fwd", "--no-tune",
                          "--repeats", "1", "--bootstrap", "20", "--backends", "sdpa-math",
                          "--shards", "2", "--no-plots", "--out", str(tmp_path)])
    assert status == 0
    (path,) = tmp_path.glob("*.json")
    results = json.loads(path.read_text())
    assert [e["cell"]["seqlen"] for e in results["cells"]] == [16, 32]
    assert sorted(e["shard"] for e in results["cells"]) == [0, 1]
    assert len(results["provenance"]["shards"]) == 2
    assert len(results["matmul"]["bfloat16"]["samples"]) == 2  # one sweep on each shard
    assert results["repeats_done"] == 1
    for entry in results["cells"]:
        assert all(runs for runs in entry["modes"]["fwd"]["samples"].values())
    # the configs are on disk before any cell is measured: a run cut later keeps them
    assert saved[0]["configs"] and not saved[0]["cells"]


def _ablations_script(name: str):
    """A script of ablations/probes/ (not a package), imported as a module."""
    import importlib.util

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    spec = importlib.util.spec_from_file_location(name, os.path.join(root, "ablations",
                                                                     "probes", f"{name}.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_stall_probe_summarizes_a_saved_nsight_compute_csv():
    """ablations/probes/stall_probe.py --summarize on the committed counters of the d=64
    forward (the numbers docs/decisions.md#D14 quotes)."""
    probe = _ablations_script("stall_probe")
    rows = probe.summarize(Path(__file__).resolve().parents[1] / "ablations" / "results"
                           / "20261130-h200-ncu-fwd.csv")
    assert [r["kernel"][:9] for r in rows] == ["_attn_fwd", "_attn_fwd", "void pyto",
                                               "_attn_fwd", "void pyto"]
    assert rows[0]["instructions"] == "574,144,512 inst" and rows[0]["eligible"] == "0.69 warp"
    assert rows[1]["top pipe"] == "Tensor 40.6%" and rows[1]["issue busy"] == "57.21 %"


def test_targets_across_runs_tell_a_shared_miss_from_a_single_runs(tmp_path, capsys):
    """ablations/probes/targets.py --across: each cell that missed in some run, with every run's
    ratio. Synthetic runs: FA2 at about 0.97 ms, sdpa-flash 1.1 ms (1.13x, a miss) in both,
    but 1.4 ms (1.44x) in the second run's first cell."""
    targets = _ablations_script("targets")
    first, second = synthetic_results(modes=("fwd",)), synthetic_results(modes=("fwd",))
    flash = second["cells"][0]["modes"]["fwd"]["samples"]["sdpa-flash"]
    second["cells"][0]["modes"]["fwd"]["samples"]["sdpa-flash"] = [
        [x * 1.4 / 1.1 for x in sweep] for sweep in flash]
    second["cells"][1]["modes"]["fwd"]["clock"] = {"+defer+seqpar+splitq": [[1805, 690]],
                                                   "sdpa-flash": [[1910, 689]]}
    first["provenance"]["kernels_sha256"] = "0" * 64
    second["provenance"]["kernels_sha256"] = kernels_sha256()
    paths = []
    for i, run in enumerate((first, second)):
        paths.append(tmp_path / f"run{i}.json")
        paths[-1].write_text(json.dumps(run))
    assert targets.main([str(p) for p in paths] + ["--across"]) == 0
    out = capsys.readouterr().out
    # which code each file measured: the first is not the tree's kernels, the second is
    assert "run0.json: 2026-11-30T10:00:00+00:00, git abc123, kernels 000000000000: not the " \
           "tree's kernels" in out
    assert f"run1.json: 2026-11-30T10:00:00+00:00, git abc123, kernels {kernels_sha256()[:12]}: " \
           "the tree's kernels" in out
    assert "run0.json: fwd >= 1.3x, seqlen >= 1k: 0 of 2 cells" in out
    assert "run1.json: fwd >= 1.3x, seqlen >= 1k: 1 of 2 cells" in out
    # a miss of a run with clock samples says at which clocks the two were timed
    assert "causal: 1.13" in out and "(FA2 at 1805 MHz, sdpa-flash at 1910 MHz)" in out
    assert out.count("sdpa-flash at") == 1  # the other run has no clock samples
    # each run's misses follow its own count line: the clocked miss is the second run's
    run0, run1 = out.index("run0.json: fwd >= 1.3x"), out.index("run1.json: fwd >= 1.3x")
    assert run0 < out.index("miss") < run1 < out.index("1805 MHz")
    across = out[out.index("across 2 runs"):]
    assert "seqlen 4096, d=64, bfloat16, full: met in 1 of 2 runs (1.13" in across
    assert "seqlen 4096, d=64, bfloat16, causal: met in 0 of 2 runs (1.13" in across


def test_same_gradients_tells_a_changed_kernel_from_an_equal_one(tmp_path):
    """ablations/probes/same_gradients.py: the tree against itself has no difference; a copy whose
    backward scales dK by 1.0001 differs in dk alone; one whose forward's log2(e) is off by
    0.5% differs in o and lse too."""
    import shutil

    same = _ablations_script("same_gradients")
    root = Path(__file__).resolve().parents[1]
    problem = [(1, 2, 1, 17, 20, 16, torch.float16, True)]
    compared, differ = same.compare(root / "kernels", root / "kernels", problem)
    assert compared == 80 and differ == []
    broken = tmp_path / "kernels"
    shutil.copytree(root / "kernels", broken, ignore=shutil.ignore_patterns("__pycache__"))
    source = (broken / "backward.py").read_text()
    assert "    dk *= sm_scale\n" in source
    (broken / "backward.py").write_text(source.replace("    dk *= sm_scale\n",
                                                       "    dk *= sm_scale * 1.0001\n"))
    compared, differ = same.compare(root / "kernels", broken, problem)
    assert compared == 80 and differ and all(line.startswith("dk ") for line in differ)
    forward = (broken / "forward.py").read_text()
    assert "\nLOG2E = 1.4426950408889634" in forward
    (broken / "forward.py").write_text(forward.replace("\nLOG2E = 1.4426950408889634",
                                                       "\nLOG2E = 1.45  # 1.4426950408889634"))
    _, differ = same.compare(root / "kernels", broken, problem)
    assert {line.split()[0] for line in differ} >= {"o", "lse", "dk"}


def test_clock_probe_reads_tiles_and_skips_the_power_ramp():
    """ablations/probes/clock_probe.py's parsing (the probe itself needs a GPU)."""
    probe = _ablations_script("clock_probe")
    assert probe.parse_tile("64,64,4,3,tma", backward=False) == {
        "block_m": 64, "block_n": 64, "num_warps": 4, "num_stages": 3, "tma": True}
    assert probe.parse_tile("32,128,4,3", backward=True) == {
        "bwd_block_m": 32, "bwd_block_n": 128, "bwd_num_warps": 4, "bwd_num_stages": 3,
        "bwd_dq_pass": False}
    samples = [(100.0 + 0.1 * i, 1980 - i, 200 + 100 * i) for i in range(8)]
    assert probe.after_ramp(samples, 100.0) == samples[5:]


@pytest.mark.parametrize("option", ["--configs-from", "--from", "--merge"])
def test_a_missing_input_file_is_named_not_traced(option, tmp_path, capsys):
    from fa2check import ablate

    missing = tmp_path / "none.json"
    with pytest.raises(SystemExit):
        ablate.main([option, str(missing), "--plan"])
    assert f"{option} {missing}: no such file" in capsys.readouterr().err


def test_an_unknown_backend_is_named_before_any_work(capsys):
    from fa2check import ablate

    with pytest.raises(SystemExit):
        ablate.main(["--backends", "sdpa-flash,flash", "--plan"])
    assert "--backends flash: not one of sdpa-flash," in capsys.readouterr().err


def test_a_compressed_results_file_is_read_under_its_first_name(tmp_path):
    """Older results are committed as X.json.gz; --from/--configs-from X.json, tuning's config
    loader and the committed-results finder read them as if they were X.json."""
    import gzip

    from fa2check import ablate
    from fa2check.ablate import tuning
    from fa2check.ablate.results import committed, load

    data = synthetic_results("2026-11-02T00:00:00", ("fwd",), "cuda")
    data["configs"] = [{"key": {"part": "fwd", "variant": "+defer+seqpar+splitq",
                                "head_dim": 64, "causal": False}, "config": {}}]
    with gzip.open(tmp_path / "old.json.gz", "wt") as f:
        json.dump(data, f)
    plain = str(tmp_path / "old.json")
    assert load(plain)["provenance"] == data["provenance"]
    assert len(tuning.load_configs([plain])) == 1
    assert ablate.parse_args(["--configs-from", plain, "--plan"]).configs_from == [plain]
    assert [(os.path.basename(p), m) for p, m in committed(str(tmp_path))] == [
        ("old.json.gz", ["fwd"])]


def test_sass_loops_reads_control_bits_and_keeps_the_innermost_loops():
    """ablations/probes/sass_loops.py's parsing, on made-up `cuobjdump -sass` lines: the stall
    cycles and wait mask come from the high word's control bits, and of two nested loops that
    issue HGMMA only the inner one is kept; a loop without HGMMA, and a region from a branch
    after a loop back into its body, are dropped."""
    sass_loops = _ablations_script("sass_loops")

    def line(addr, text, stall, wait=0):
        high = (stall << 41) | (wait << 52) | 0x0000000000000a00
        return (f"        /*{addr:04x}*/                   {text} ;   /* 0x0000000000000000 */\n"
                f"                                                 /* 0x{high:016x} */")

    program = "\n".join([
        "	code for sm_90a", "		Function : _attn_fwd",
        line(0x00, "MOV R1, R2", 1),
        line(0x10, "HGMMA.64x64x16.F32.BF16 R24, gdesc[UR4], R24", 2),  # outer loop start
        line(0x20, "FADD R3, R4, R5", 4, wait=0b000010),  # inner loop start
        line(0x30, "HGMMA.64x64x16.F32.BF16 R24, gdesc[UR8], R24", 1),
        line(0x40, "@P0 BRA 0x20", 5),
        line(0x50, "BRA 0x10", 3),
        line(0x60, "IADD3 R6, R6, 0x1, RZ", 2),  # a loop without HGMMA
        line(0x70, "@P1 BRA 0x60", 1),
        line(0x80, "EXIT", 0),
        line(0x90, "BRA 0x30", 1),  # from after the loops back into the inner one: no loop
    ])
    instrs = sass_loops.parse_sass(program)
    assert [x.addr for x in instrs] == list(range(0, 0xa0, 0x10))
    assert [x.stall for x in instrs] == [1, 2, 4, 1, 5, 3, 2, 1, 0, 1]
    assert instrs[2].wait_mask == 0b000010 and instrs[2].opcode == "FADD"
    assert instrs[4].opcode == "BRA"  # the predicate is not the opcode
    loops = sass_loops.inner_loops(instrs)
    assert loops == [(2, 4)]
    summary = sass_loops.summarize(instrs, loops[0])
    assert (summary["start"], summary["instructions"], summary["stall_cycles"],
            summary["waiting"]) == (0x20, 3, 10, 1)


def test_ab_table_names_versions_by_what_differs_and_measures_against_the_first():
    """ablations/probes/ab_table.py: each time's change is against the first version of its
    cell, the shared fields are named once, the dtype comes from the recorded command, and a
    version missing from a cell shows '-' rather than a change."""
    ab_table = _ablations_script("ab_table")
    base, capped = "kernels:block_m=64,num_stages=3", "kernels:block_m=64,num_stages=3,maxreg=96"

    def row(version, seqlen, median):
        return dict(version=version, seqlen=seqlen, head_dim=64, causal=True, median=median)

    dtype = ab_table.dtype_of("python3 ablations/compare_kernels.py A B --dtype float16")
    assert (dtype, ab_table.dtype_of("python3 compare_kernels.py A")) == ("float16", "bfloat16")
    text = ab_table.table([(dtype, [row(base, 1024, 0.5), row(capped, 1024, 0.4),
                                    row(base, 2048, 1.0)])])
    lines = text.splitlines()
    assert lines[0].startswith("Every version: kernels:block_m=64,num_stages=3;")
    assert lines[2] == "| dtype | d | mask | seqlen | (shared only) | maxreg=96 |"
    assert lines[4] == "| float16 | 64 | causal | 1024 | 0.5000 | 0.4000 (-20.0%) |"
    assert lines[5] == "| float16 | 64 | causal | 2048 | 1.0000 | - |"


def test_ab_copy_applies_the_kernels_part_of_a_patch(tmp_path):
    """ablations/probes/ab_copy.sh makes ablations/ab/NAME/kernels from kernels/ and a patch's
    kernels/ hunks only; a patch that changes nothing there, or no patch, is an error; several
    patches go on in order, each on top of the ones before, into ablations/ab/A+B."""
    import difflib
    import shutil
    import subprocess

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    source = open(os.path.join(root, "kernels", "forward.py")).read().splitlines(keepends=True)
    changed = [source[0].rstrip("\n") + "  # patched\n"] + source[1:]
    kernels_part = "".join(difflib.unified_diff(source, changed, "a/kernels/forward.py",
                                                "b/kernels/forward.py"))
    other_part = ("--- a/README.md\n+++ b/README.md\n@@ -1 +1 @@\n-x\n+y\n")
    script = os.path.join(root, "ablations", "probes", "ab_copy.sh")

    twice = [changed[0].rstrip("\n") + " twice\n"] + source[1:]
    on_top = "".join(difflib.unified_diff(changed, twice, "a/kernels/forward.py",
                                          "b/kernels/forward.py"))

    def run(patch_text, name, *more):
        paths = []
        for text, stem in [(patch_text, name), *more]:
            paths.append(tmp_path / f"{stem}.patch")
            paths[-1].write_text(text)
        return subprocess.run(["bash", script, *map(str, paths)], capture_output=True, text=True)

    try:
        made = run(kernels_part + other_part, "ab-copy-test")
        assert made.returncode == 0, made.stderr
        copy = os.path.join(root, made.stdout.strip())
        assert copy.endswith(os.path.join("ablations", "ab", "ab-copy-test", "kernels"))
        assert open(os.path.join(copy, "forward.py")).readline().endswith("  # patched\n")
        assert not open(os.path.join(root, "kernels", "forward.py")).readline().endswith(
            "  # patched\n")
        assert run(other_part, "ab-copy-empty").returncode == 1  # nothing under kernels/
        chained = run(kernels_part, "ab-copy-test", (on_top, "ab-copy-top"))
        assert chained.returncode == 0, chained.stderr
        assert chained.stdout.strip().endswith(os.path.join("ab", "ab-copy-test+ab-copy-top",
                                                            "kernels"))
        assert open(os.path.join(root, chained.stdout.strip(), "forward.py")).readline() \
            .endswith("  # patched twice\n")
        assert run(on_top, "ab-copy-top").returncode != 0  # not on top of kernels/ itself
        missing = subprocess.run(["bash", script, "no-such-patch"], capture_output=True)
        assert missing.returncode == 2
    finally:
        for name in ("ab-copy-test", "ab-copy-empty", "ab-copy-test+ab-copy-top", "ab-copy-top"):
            shutil.rmtree(os.path.join(root, "ablations", "ab", name), ignore_errors=True)


def test_every_kept_patch_applies_to_the_kernels():
    """ablations/patches/ holds kernel changes kept for a later A/B; each must still apply to
    kernels/ as it is (a change to the kernels' context lines means a rebase)."""
    import glob
    import subprocess

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    patches = sorted(glob.glob(os.path.join(root, "ablations", "patches", "*.patch")))
    assert patches
    for patch in patches:
        check = subprocess.run(["git", "apply", "--check", "--include=kernels/*", patch],
                               cwd=root, capture_output=True, text=True)
        assert check.returncode == 0, f"{os.path.basename(patch)}: {check.stderr}"


def test_launch_tail_model_starts_programs_in_order_on_the_first_free_slot():
    """ablations/probes/launch_tail.py: a long program started last runs alone at the end; started
    first, it overlaps the short ones. The heaviest-first launch ranks every head's programs
    alike, the longest first, each kind alternating."""
    tail = _ablations_script("launch_tail")
    assert tail.makespan([1, 1, 1, 3], sms=2, slots=1) == 4
    assert tail.makespan([3, 1, 1, 1], sms=2, slots=1) == 3
    assert tail.makespan([2, 2], sms=1, slots=2, solo=2.0) == 2  # both share the SM
    assert tail.makespan([2], sms=1, slots=2, solo=2.0) == 1
    columns, rows = tail.program_steps("bwd", 256, 32, 128, dq_cost=0.5)
    assert (columns, rows) == ([8, 4], [2.0, 4.0])
    assert tail.launch(columns, rows, heads=3, window=2) == [8, 8, 4, 4, 4, 4, 2, 2] + [8, 4, 4, 2]
    assert tail.launch(columns, rows, heads=2, window=None) == [8, 4, 2.0, 4.0] * 2
    assert tail.program_steps("fwd", 256, 64, 64, 1.0) == ([], [1, 2, 3, 4])
    assert tail.launch([], [1, 2, 3], heads=1, window=1) == [3, 2, 1]


def test_compare_kernels_puts_every_version_first_in_turn():
    """ablations/probes/compare_kernels.py rotates the order of the versions each round, so no
    version is always measured first."""
    compare = _ablations_script("compare_kernels")
    names = ["a", "b", "c"]
    orders = [compare.rotated(names, r) for r in range(4)]
    assert orders == [["a", "b", "c"], ["b", "c", "a"], ["c", "a", "b"], ["a", "b", "c"]]
    assert {order[0] for order in orders[:3]} == set(names)


def test_without_a_gpu_the_render_fits_a_120_column_terminal(device, monkeypatch, capsys):
    """python -m fa2check.ablate on a machine without a GPU renders the committed results: by
    default each file's provenance once and its headline tables, every line within the
    terminal's width and no cell cut short; --full adds the per-cell and tile-config tables,
    at their own width rather than cut."""
    if device != "cpu":
        pytest.skip("with a GPU, python -m fa2check.ablate measures")
    from fa2check import ablate
    from fa2check.ablate.results import committed

    monkeypatch.setenv("COLUMNS", "120")
    files = len(committed())
    assert ablate.main(["--bootstrap", "200"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert max(map(len, lines)) <= 120 and not [line for line in lines if "…" in line]
    assert len(lines) <= 70 * files, len(lines)
    text = "\n".join(lines)
    assert text.count("Measured on") == text.count("Rendered from") == files
    assert "contributions over the grid" in text and "relative to torch SDPA" in text
    assert "tile configs" not in text and "time and throughput" not in text

    assert ablate.main(["--bootstrap", "200", "--full"]) == 0
    full = capsys.readouterr().out
    assert "tile configs" in full and "time and throughput" in full and "…" not in full
    assert full.count("Measured on") == files
