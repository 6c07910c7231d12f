"""fa2check.ablate and the table of tuned tiles: a run takes the tiles flash_attention would
(the table's on a GPU), --retune merges its winners into a table keeping the keys it did not
search, --budget-s bounds the whole command, and runs of the Hopper chassis's variants get
their own contributions.

Shown to fail on broken copies: with Configs.config building from the heuristic (the code
before the table), test_a_run_takes_the_tables_tiles fails; with merge_into writing only the
new entries, test_retune_merges fails on the kept foreign entry; with Budget.allows always
True, the budget test fails (cells gated); with analysis.views ignoring the hopper prefix, the
hopper render test fails (no "fwd hopper" tables); with final_jobs leaving out the API peer's kernel,
the precompile test fails."""
import itertools
import json

import pytest

from fa2check.ablate.grids import Cell
from kernels import Variant
from kernels.plan import tuned_tiles
from saved_results import synthetic_results

FAKE = "Fake GPU 9000"


def test_a_run_takes_the_tables_tiles_as_flash_attention_would(tmp_path, monkeypatch):
    from fa2check.ablate import sweep
    from kernels import default_config

    table = {"schema": tuned_tiles.SCHEMA,
             "bands": {"fwd": {"short": [0, 1024], "": [2048, 4096]},
                       "bwd": {"": [0, 4096], "long": [8192, 16384]}},
             "entries": [{"gpu": FAKE, "backend": "triton", "part": "fwd",
                          "variant": str(Variant()), "head_dim": 64, "causal": False,
                          "dtype": "bfloat16", "band": "", "fields": {"block_m": 32,
                                                                     "block_n": 32}}]}
    path = tmp_path / "tiles.json"
    path.write_text(json.dumps(table))
    monkeypatch.setenv(tuned_tiles.PATH_ENV, str(path))
    tuned_tiles.load.cache_clear()
    tuned_tiles._applied.cache_clear()
    cell = Cell(4, 32, 32, 4096, 64, "bfloat16", False)
    configs = sweep.Configs({}, on_gpu=True, gpu=FAKE)
    got = configs.config(str(Variant()), cell)
    assert (got.block_m, got.block_n) == (32, 32)
    assert got == default_config(64, True, Variant(), "bfloat16", causal=False, seqlen_q=4096,
                                 seqlen_k=4096, gpu=FAKE)
    # a tuned record replaces its part only; the other part stays the table's (or heuristic's)
    key = sweep.key_of("bwd", str(Variant()), cell)
    configs.records[key] = {"fields": {"bwd_block_m": 16}, "source": "tuned on x"}
    both = configs.config(str(Variant()), cell)
    assert (both.block_m, both.bwd_block_m) == (32, 16)
    from fa2check.ablate import tile_table
    rows = tile_table.sources([cell], lambda c: [(str(Variant()), ("fwd", "bwd"))], True, FAKE)
    assert [r["from"] for r in rows] == ["table", "heuristic"]
    tuned_tiles.load.cache_clear()
    tuned_tiles._applied.cache_clear()


def test_a_chunked_head_dim_reads_its_own_entry_else_the_padded_tiles(tmp_path, monkeypatch):
    """d=96 computes 64 + 32 columns in the Triton forward (D60): its forward entry is keyed
    96 and, where the table has none, it runs d=128's; the backward pads, so it reads 128's."""
    from fa2check.ablate import tuning
    from kernels import default_config

    def entry(part, head_dim, fields):
        return {"gpu": FAKE, "backend": "triton", "part": part, "variant": str(Variant()),
                "head_dim": head_dim, "causal": False, "dtype": "bfloat16", "band": "",
                "fields": fields}

    table = {"schema": tuned_tiles.SCHEMA,
             "bands": {"fwd": {"short": [0, 1024], "": [2048, 4096]},
                       "bwd": {"": [0, 4096], "long": [8192, 16384]}},
             "entries": [entry("fwd", 128, {"block_m": 32, "block_n": 32}),
                         entry("bwd", 128, {"bwd_block_m": 16})]}
    path = tmp_path / "tiles.json"

    def tiles(head_dim):
        path.write_text(json.dumps(table))
        tuned_tiles.load.cache_clear()
        tuned_tiles._applied.cache_clear()
        c = default_config(head_dim, True, Variant(), "bfloat16", causal=False, seqlen_q=4096,
                           seqlen_k=4096, gpu=FAKE)
        return c.block_m, c.block_n, c.bwd_block_m

    monkeypatch.setenv(tuned_tiles.PATH_ENV, str(path))
    assert tiles(96) == tiles(128) == (32, 32, 16)  # no entry of its own: 128's
    table["entries"].append(entry("fwd", 96, {"block_m": 64, "block_n": 16}))
    assert tiles(96) == (64, 16, 16) and tiles(128) == (32, 32, 16)
    assert tiles(100) == (32, 32, 16)  # one padded tile of 128 columns: 128's entry
    # the tuner searches a chunked head dim over its padded tile's space
    assert tuning.candidates("fwd", 96, Variant(), True) == \
        tuning.candidates("fwd", 128, Variant(), True)
    tuned_tiles.load.cache_clear()
    tuned_tiles._applied.cache_clear()


def test_retune_merges_its_winners_into_the_table_and_keeps_the_rest(tmp_path, device):
    if device != "cpu":
        pytest.skip("the GPU runs the real grid")
    from fa2check import ablate
    from fa2check.ablate import tile_table

    out = tmp_path / "tiles.json"
    foreign = tuned_tiles.TileKey(FAKE, "triton", "fwd", str(Variant()), 128, True, "float16", "")
    tile_table.merge_into(str(out), {foreign: {"fields": {"block_m": 64}, "provenance": {}}},
                          4096)
    status = ablate.main(["--seqlen", "16", "--head-dim", "16", "--heads", "2", "--batch", "1",
                          "--causal", "false", "--mode", "fwd", "--repeats", "1", "--retune",
                          "--retune-key", "variant=+defer+seqpar+splitq", "--backends", "",
                          "--bootstrap", "50", "--no-plots", "--table-out", str(out),
                          "--out", str(tmp_path / "run")])
    assert status == 0
    table = tuned_tiles.load(str(out))
    assert foreign in table.entries  # a key not searched is kept
    new = [k for k in table.entries if k != foreign]
    assert [(k.part, k.variant, k.head_dim, k.band) for k in new] == [
        ("fwd", str(Variant()), 16, "short")]  # --retune-key: FA2's forward key alone
    provenance = table.entries[new[0]]["provenance"]
    assert provenance["tuned_on"] == "b1-h2-s16-d16-bfloat16-full" and provenance["commit"]


def test_the_budget_bounds_the_gate_and_the_sweeps_and_says_what_it_skipped(tmp_path, device):
    if device != "cpu":
        pytest.skip("the GPU runs the real grid")
    from fa2check import ablate

    status = ablate.main(["--seqlen", "16", "--head-dim", "16", "--heads", "2", "--batch", "1",
                          "--causal", "false", "--mode", "fwd", "--repeats", "3", "--budget-s",
                          "1", "--backends", "", "--no-plots", "--out", str(tmp_path)])
    assert status == 0  # skipped is not failed
    (path,) = tmp_path.glob("*.json")
    results = json.loads(path.read_text())
    (entry,) = results["cells"]
    assert entry["gate"] == {} and entry["modes"]["fwd"]["status"].startswith("skipped: --budget-s")
    assert results["repeats_done"] == 0
    assert any("gating and timing 1 of 1 cells" in s for s in results["skipped_by_budget"])


def test_hopper_kernels_of_record_get_the_contributions_and_the_report(tmp_path):
    from fa2check import ablate

    path = tmp_path / "hopper.json"
    path.write_text(json.dumps(synthetic_results(modes=("fwd", "fwd+bwd"), kernels="hopper")))
    md = tmp_path / "tables.md"
    assert ablate.main(["--from", str(path), "--markdown", str(md), "--bootstrap", "200"]) == 0
    text = md.read_text()
    hopper = text[text.index("fwd hopper: contributions over the grid"):]
    assert "| split_q | 1.35x" in hopper  # exp(0.3), as the synthetic times were made
    assert "fwd+bwd hopper: contributions over the grid" in text
    assert "**fwd: contributions" not in text  # no Triton view: none was timed


def test_kernel_names_and_the_hopper_tile_space():
    from fa2check.ablate import sweep, tuning
    from fa2check.ablate.contenders import kernel_name, parse_kernel_name
    from kernels.plan.hopper_forward import SHARED_LIMIT, STAGES, block_ns, shared_bytes

    for backend in ("triton", "gluon", "hopper"):
        for v in Variant.all():
            assert parse_kernel_name(kernel_name(v, backend)) == (backend, v)
    assert kernel_name(Variant(), "hopper") == "hopper+defer+seqpar+splitq"
    for v, causal in itertools.product(Variant.all(), (False, True)):
        space = tuning.candidates("fwd", 128, v, True, "hopper", causal=causal)
        assert space and all(c["block_m"] == 64 and c["block_n"] in block_ns(v)
                             and c["num_stages"] in STAGES[v.seq_parallel] for c in space)
        # FA1's 256-key split-K tile (D67): in the space where it fits, FA1's schedule
        assert any(c["block_n"] == 256 for c in space) == (not v.split_q and not v.seq_parallel)
        assert all(shared_bytes(128, c["block_n"], c["num_stages"], v.split_q, v.seq_parallel,
                                causal=causal) <= SHARED_LIMIT for c in space)
    # causal split-Q at 128 keys and 3 stages: 235,640 bytes compiled, out of the space, until
    # D83 took the sanitising pass's reduction scratch away (231,816 of sm_90's 232,448)
    assert any(c["block_n"] == 128 and c["num_stages"] == 3
               for c in tuning.candidates("fwd", 128, Variant(), True, "hopper", causal=True))
    key = tuning.TuneKey("fwd", str(Variant()), 128, True, "")
    assert sweep.retune_key_matches(key, ["part=fwd,head_dim=128,causal=true"])
    assert not sweep.retune_key_matches(key, ["part=bwd"])
    assert sweep.retune_key_matches(key, [])


def test_configs_drop_a_tuned_tiles_tma_where_rows_are_not_16_byte_units():
    """The table's d=128 tiles use TMA; d=96 and 80 take them (block_d 128) with a descriptor
    a column chunk (D62); where a row of K or V is not a multiple of 16 bytes (bf16 d=100, or
    v's 100 beside q's 96) the ablation's tiles drop it, as flash_attention does."""
    from fa2check.ablate.grids import Cell
    from fa2check.ablate.sweep import Configs

    configs = Configs({}, on_gpu=True, gpu="NVIDIA H200")
    tiles = {dims: configs.config(Variant(), Cell(2, 16, 16, 8192, dims[0], "bfloat16", False,
                                                   head_dim_v=dims[1])).tma
             for dims in ((128, None), (96, None), (80, None), (100, None), (96, 100))}
    assert tiles == {(128, None): True, (96, None): True, (80, None): True, (100, None): False,
                     (96, 100): False}


def test_the_api_peers_kernels_are_precompiled_with_the_grid():
    """The API peer runs flash_attention's defaults (Triton FA2 on a GPU the table of fastest
    kernels does not name); on the Hopper chassis no variant of the grid is that kernel, and
    left to the gate its compiles took most of the gate's time on the H200 (0.7-1.8 s a cell)."""
    from fa2check.ablate import sweep
    from fa2check.ablate.contenders import API, kernel_name

    API_KERNEL = kernel_name(Variant(), "triton")  # no table entry for FAKE: Triton's FA2
    cell = Cell(4, 16, 16, 4096, 128, "bfloat16", True)
    configs = sweep.Configs({}, on_gpu=True, gpu=FAKE)

    def names(backends, kernels="hopper"):
        settings = sweep.Settings(modes=["fwd+bwd"], kernels=kernels, backends=backends)
        return [(j["part"], j["variant"]) for j in
                sweep.final_jobs([cell], ["fwd+bwd"], configs, settings)]

    with_api, without = names((API,)), names(())
    assert set(with_api) - set(without) == {("fwd", API_KERNEL), ("bwd", API_KERNEL)}
    assert len(names((API,), "triton")) == len(names((), "triton"))  # one kernel, compiled once


def test_fa1_style_runs_fa1s_launcher_unless_the_reference_grid_is_asked_for():
    """D90: the FA1-style variants' configs carry FA1's launcher's heuristics (fa1_splits and
    fa1_bwd_splits 0) by default and one program per (batch, head) with --fa1-grid batch-heads;
    a run on the reference grid (or saved before D90) is labelled so in its tables."""
    from fa2check.ablate import report
    from fa2check.ablate.sweep import Configs

    cell = Cell(2, 16, 16, 8192, 128, "bfloat16", False)
    fa1 = Variant(False, False, False)
    for grid, fields in (("fa1", (0, 0)), ("batch-heads", (1, 1))):
        config = Configs({}, on_gpu=True, gpu="NVIDIA H200", fa1_grid=grid).config(
            "hopper" + str(fa1), cell)
        assert (config.fa1_splits, config.fa1_bwd_splits) == fields
    from fa2check.ablate import cli

    assert cli.settings_from(cli.parse_args(["--grid", "quick"])).fa1_grid == "fa1"
    reference = cli.parse_args(["--grid", "quick", "--fa1-grid", "batch-heads"])
    assert cli.settings_from(reference).fa1_grid == "batch-heads"
    data = {"players": ["defer_norm", "seq_parallel", "split_q"]}
    assert report.ends("fwd hopper", {**data, "fa1_grid": "fa1"}) == ("FA2", "FA1-style")
    for saved in ({**data, "fa1_grid": "batch-heads"}, data):  # data: saved before D90
        assert report.ends("fwd hopper", saved) == ("FA2", report.BATCH_HEADS_LABEL)
    assert "not FA1's launcher" in report.fa1_grid_line({})
    assert "FA1's own launcher" in report.fa1_grid_line({"fa1_grid": "fa1"})
