"""fa2check.ablate --hopper-switches (docs/decisions.md D66, D85, D86): the Hopper lattice's
switch variants (FA2 with and without its producer warp, each with pingpong, overlap, both)
timed beside the 8 FA2 variants, and a second game over the three switches, with FA2 without
its producer warp as its baseline (a run saved before D85: two switches on FA2; in bwd
warp_specialize and overlap, the backward's two, D87; before D87 the producer warp alone).

Each test was shown to fail on a broken copy of the code, then the code restored:
- the exact Shapley values: reversing SWITCH_GAME's players changes no value (each is keyed
  by its name; the test still passed), so the break used was contributions.variant_for
  turning every switch on whatever `on` says: every factor came out 1.0x and the test failed;
  with analysis.views not adding the switch view, it failed (no view);
- the report: with report.tables skipping the FA3 reference table, it failed; with the plots'
  colours indexed in Variant.all() alone (the code before), tflops_plot raised ValueError;
  with analysis keeping every hopper name in the switch view's stats, it failed;
- the plan: with sweep.switch_names returning [] (the option ignored), it failed (18 and 16
  instead of 24 and 22);
- the refusal: with Settings.__post_init__'s check removed, it failed (no error);
- the backward's game (D86, D87): with switch_names timing every switch variant in bwd, with
  Variant.backward dropping warp_specialize or overlap, or with game_of giving bwd the
  three-player game, the bwd tests failed; with the FA3 reference table in every mode, the
  report test failed (3 tables); with players_for keeping overlap in a run that timed none,
  the pre-D87 test failed (no contributions);
- the tiles: with tuning.part_variant returning the variant itself, it failed (the switch
  variants' own keys); with switch_ring's room check dropped (256 keys on 3 stages) or
  sweep.Configs not applying it, the deeper-ring test failed;
- verify's hopper columns: with implementations.lattice ignoring `impl`, it failed (8
  columns);
- the fuzzer's space: with Space.for_device not taking `impl`'s lattice, it failed (no switch
  variant drawn); the flips: with flip_checks flipping the FA2 flags of a switch variant, it
  failed (ValueError: built on FA2)."""
import math

import pytest
from hypothesis import find

from fa2check.ablate import contributions as C
from fa2check.ablate.analysis import analyse_results
from fa2check.ablate.grids import Cell
from fa2check.ablate.paper import fa3_reference
from kernels import Variant
from saved_results import synthetic_results

WS, PP, OV = frozenset({"warp_specialize"}), frozenset({"pingpong"}), frozenset({"overlap"})
# log speedups over none on (FA2 without its producer warp): warp_specialize alone 0.2 (FA2),
# pingpong alone 0.1, overlap alone -0.05, pingpong and overlap 0.07 (their interaction 0.02),
# warp_specialize adding 0.2 to every set: Shapley warp_specialize 0.2, pingpong 0.1 + 0.01,
# overlap -0.05 + 0.01
SWITCHES = {WS: 0.2, PP: 0.1, OV: -0.05, PP | OV: 0.07, WS | PP: 0.3, WS | OV: 0.15,
            WS | PP | OV: 0.27}
BEFORE_D85 = {PP: 0.1, OV: -0.05, PP | OV: 0.07}  # over FA2, every variant with its producer
SWITCH_VIEW = "fwd hopper switches"
SWITCH_VARIANTS = [v for v in Variant.hopper() if v.hopper_switches]  # all but FA2


def _switch_results(switches=SWITCHES, modes=("fwd", "bwd"), **kwargs):
    return synthetic_results(modes=modes, kernels="hopper", switches=switches, n_cells=4,
                             **kwargs)


def test_the_switch_game_recovers_the_built_in_factors_exactly():
    analysis = analyse_results(_switch_results(), n_draws=50)
    assert list(analysis["modes"]) == ["fwd hopper", SWITCH_VIEW, "bwd hopper",
                                      "bwd hopper switches"]
    data = analysis["modes"][SWITCH_VIEW]
    assert data["players"] == list(C.SWITCHES) and data["game"] == "switches"
    assert data["not_applicable"] == {}
    expected = {"shapley/warp_specialize": 0.2, "shapley/pingpong": 0.11,
                "shapley/overlap": -0.04, "alone/warp_specialize": 0.2, "alone/pingpong": 0.1,
                "alone/overlap": -0.05, "removed/warp_specialize": 0.2,
                "removed/pingpong": 0.12, "removed/overlap": -0.03,
                "interaction/pingpongxoverlap": 0.02, "interaction/warp_specializexpingpong": 0.0,
                "total": 0.27}
    for summary in [data["summary"], *data["by_seqlen"].values()]:
        for name, log in expected.items():
            assert summary[name]["factor"] == pytest.approx(math.exp(log), rel=1e-9), name
    assert data["cells_in_summary"] == 4 and sorted(data["by_seqlen"]) == [4096, 8192]
    for row in data["cells"]:
        assert row["contributions"]["shapley/pingpong"]["significant"]
    # the FA2 game of the same run keeps its three flags
    assert analysis["modes"]["fwd hopper"]["players"] == list(C.FLAGS)


def test_a_run_saved_before_the_warp_specialize_switch_plays_two_switches_on_fa2():
    from fa2check.ablate import report

    results = _switch_results(BEFORE_D85, head_dim=128)
    analysis = analyse_results(results, n_draws=50)
    data = analysis["modes"][SWITCH_VIEW]
    assert data["players"] == ["pingpong", "overlap"]
    assert "warp_specialize" in data["not_applicable"]
    for name, log in {"shapley/pingpong": 0.11, "removed/overlap": -0.03, "total": 0.07}.items():
        assert data["summary"][name]["factor"] == pytest.approx(math.exp(log), rel=1e-9), name
    text = report.markdown(results, analysis)
    assert "| improvement | alone on FA2 | removed from FA2 + pingpong + overlap | Shapley |" in text
    assert "| warp_specialize | n/a | n/a | n/a |" in text


def test_the_report_shows_the_switch_game_beside_fa3s_ablation(tmp_path):
    from fa2check.ablate import report

    results = _switch_results(head_dim=128)
    analysis = analyse_results(results, n_draws=50)
    text = report.markdown(results, analysis)
    assert "fwd hopper switches: contributions over the grid" in text
    assert ("| improvement | alone on FA2 - warpspec | removed from FA2 + pingpong + overlap "
            "| Shapley |") in text
    assert "total FA2 + pingpong + overlap / FA2 - warpspec" in text
    assert f"{math.exp(0.11):.2f}x" in text and "interaction pingpong x overlap" in text
    ref = fa3_reference()
    assert ref["removed"]["overlap"] == pytest.approx(661 / 582)  # the file as the paper prints it
    assert ref["removed"]["warp_specialize"] == pytest.approx(661 / 570)
    # FA3's factors (from the file) beside ours at d=128 8k full (removed from all-on)
    row = next(line for line in text.splitlines() if line.startswith("| overlap | GEMM-softmax"))
    assert f"| {math.exp(-0.03):.3f}x | {ref['removed']['overlap']:.3f}x |" in row
    row = next(line for line in text.splitlines()
               if line.startswith("| warp_specialize | warp specialization"))
    assert f"| {math.exp(0.2):.3f}x | {ref['removed']['warp_specialize']:.3f}x |" in row
    assert "| pingpong | - |" in text  # FA3 has no row of its own for it
    assert "--hopper-switches: FA2 with each combination of warp_specialize" in text
    assert "in bwd FA2 with each combination of warp_specialize and overlap" in text
    from fa2check.ablate.plots import contributions_plot, tflops_plot

    tflops_plot(results, analysis, str(tmp_path / "tflops.png"))
    contributions_plot(results, analysis, str(tmp_path / "contributions.png"))
    switch_view = analysis["modes"][SWITCH_VIEW]["cells"][0]["stats"]
    assert sorted(n for n in switch_view if n.startswith("hopper")) == sorted(
        "hopper" + str(v) for v in Variant.hopper())  # the game's 8, not the FA2 lattice's


def _plan(switches: bool):
    from fa2check.ablate.sweep import Settings, plan_estimate

    cells = [Cell(1, 16, 16, 8192, 128, "bfloat16", c) for c in (False, True)]
    return plan_estimate(cells, Settings(modes=["fwd"], kernels="hopper", backends=(),
                                         hopper_switches=switches, workers=15))


def test_the_plan_counts_the_switch_variants_at_about_fa2s_cost():
    from fa2check.ablate import plan

    with_switches, without = _plan(True), _plan(False)
    assert without["measurements_per_sweep"] == 16
    assert with_switches["measurements_per_sweep"] == 16 + 2 * 7
    assert with_switches["compile_jobs"][1] == without["compile_jobs"][1] + 2 * 7
    fa2 = sum(plan.measurement_s(plan.predicted_ms(Cell(1, 16, 16, 8192, 128, "bfloat16", c),
                                                   "fwd", "hopper" + str(Variant()), Variant()),
                                 5.0, 20.0) for c in (False, True))
    assert with_switches["sweep_s"] - without["sweep_s"] == pytest.approx(7 * fa2)
    assert with_switches["precompile_final_s"] > without["precompile_final_s"]


def test_the_option_is_refused_without_the_chassis():
    from fa2check.ablate import main
    from fa2check.ablate.sweep import Settings

    with pytest.raises(ValueError, match="only --kernels hopper has"):
        Settings(modes=["fwd"], kernels="triton", hopper_switches=True)
    with pytest.raises(SystemExit, match="only --kernels hopper has"):
        main(["--plan", "--kernels", "triton", "--hopper-switches", "--seqlen", "8192"])
    Settings(modes=["bwd", "fwd+bwd"], kernels="hopper", hopper_switches=True)  # D86: taken


def test_the_backward_times_the_switches_it_has():
    """D86, D87: fwd+bwd times every switch variant (the forward's switches and the
    backward's); bwd one of each backward other than FA2's (`Variant.backward`: without the
    producer warp, with overlap, both); its game has warp_specialize and overlap."""
    from fa2check.ablate.sweep import Settings, switch_names

    settings = Settings(modes=["fwd", "fwd+bwd", "bwd"], kernels="hopper", hopper_switches=True)
    every = ["hopper" + str(v) for v in SWITCH_VARIANTS]
    assert switch_names("fwd", settings) == switch_names("fwd+bwd", settings) == every
    assert switch_names("bwd", settings) == [
        "hopper+defer+seqpar+splitq-warpspec", "hopper+defer+seqpar+splitq-warpspec+overlap",
        "hopper+defer+seqpar+splitq+overlap"]
    assert Variant(warp_specialize=False, pingpong=True).backward == Variant(warp_specialize=False)
    assert Variant(pingpong=True, overlap=True).backward == Variant(overlap=True)
    bwd = C.BWD_SWITCH_GAME
    assert C.game_of("bwd hopper switches") is bwd
    assert bwd.players == ("warp_specialize", "overlap")
    assert C.game_of("fwd+bwd hopper switches") is C.SWITCH_GAME
    assert bwd.ends(bwd.players) == ("FA2 + overlap", "FA2 - warpspec")


def test_a_backward_switch_game_recovers_its_factors(tmp_path):
    from fa2check.ablate import report

    results = _switch_results(modes=("fwd", "fwd+bwd", "bwd"), head_dim=128)
    analysis = analyse_results(results, n_draws=50)
    assert [v for v in analysis["modes"] if v.endswith("switches")] == [
        SWITCH_VIEW, "fwd+bwd hopper switches", "bwd hopper switches"]
    bwd = analysis["modes"]["bwd hopper switches"]
    assert bwd["players"] == ["warp_specialize", "overlap"] and bwd["not_applicable"] == {}
    # over none on: warp_specialize 0.2, overlap -0.05, both 0.15: no interaction
    for name, log in {"shapley/warp_specialize": 0.2, "shapley/overlap": -0.05,
                      "removed/overlap": -0.05, "total": 0.15}.items():
        assert bwd["summary"][name]["factor"] == pytest.approx(math.exp(log), rel=1e-9), name
    both = analysis["modes"]["fwd+bwd hopper switches"]["summary"]
    assert both["shapley/pingpong"]["factor"] == pytest.approx(math.exp(0.11), rel=1e-9)
    text = report.markdown(results, analysis)
    assert "| improvement | alone on FA2 - warpspec | removed from FA2 + overlap | Shapley |" in text
    assert text.count("FA3 technique") == 1  # FA3's ablation is of its forward: fwd's view only


def test_a_run_saved_before_the_backwards_overlap_plays_the_producer_warp_alone():
    """The bwd samples of a run made before D87 hold FA2 with and without its producer warp
    only: its game is warp_specialize's alone, on FA2, and the report says why overlap has no
    value."""
    from fa2check.ablate import report

    results = _switch_results(modes=("fwd", "bwd"), head_dim=128)
    for entry in results["cells"]:
        samples = entry["modes"]["bwd"]["samples"]
        for name in [n for n in samples if "overlap" in n]:
            del samples[name]
    analysis = analyse_results(results, n_draws=50)
    bwd = analysis["modes"]["bwd hopper switches"]
    assert bwd["players"] == ["warp_specialize"] and "overlap" in bwd["not_applicable"]
    assert bwd["summary"]["total"]["factor"] == pytest.approx(math.exp(0.2), rel=1e-9)
    text = report.markdown(results, analysis)
    assert "| improvement | alone on FA2 - warpspec | removed from FA2 | Shapley |" in text
    assert "| overlap | n/a | n/a | n/a |" in text
    assert "predates overlap in the backward" in text


def test_switch_variants_run_their_fa2_variants_tiles():
    from fa2check.ablate.sweep import key_of

    cell = Cell(1, 16, 16, 8192, 128, "bfloat16", True)
    fa2 = key_of("fwd", "hopper" + str(Variant()), cell)
    for v in SWITCH_VARIANTS:
        assert key_of("fwd", "hopper" + str(v), cell) == fa2
        assert key_of("bwd", "hopper" + str(v), cell) == key_of("bwd", "hopper" + str(Variant()),
                                                                 cell)


def test_switch_variants_run_fa2s_tiles_on_a_deeper_ring_where_it_fits():
    """D80: the ablation and the API give a variant with pingpong or overlap FA2's tiles with
    one K/V stage more (2 -> 3) where the ring fits in shared memory: d=128 and d=64, both
    masks (d=128 causal since D83); a ring that does not fit stays as it is. FA2's own tiles
    do not change, nor those of FA2 without its producer warp (FA2's loop, D85)."""
    from dataclasses import replace

    from fa2check.ablate.sweep import Configs
    from kernels import default_config
    from kernels.plan.hopper_forward import switch_ring

    configs = Configs({}, on_gpu=True, gpu="NVIDIA H200")
    wide = replace(configs.config("hopper" + str(Variant()), Cell(1, 16, 16, 8192, 128,
                                                                  "bfloat16", True)), block_n=256)
    assert switch_ring(wide, Variant(pingpong=True), 128, True) == wide  # 3 x 128 KB: no room
    for d, causal, stages in ((128, False, 3), (128, True, 3), (64, False, 3), (64, True, 3)):
        cell = Cell(1, 16, 16, 8192, d, "bfloat16", causal)
        fa2 = configs.config("hopper" + str(Variant()), cell)
        assert fa2.num_stages == 2
        for v in SWITCH_VARIANTS:
            ablated = configs.config("hopper" + str(v), cell)
            api = default_config(d, True, v, "bfloat16", "hopper", causal=causal, seqlen_q=8192,
                                 seqlen_k=8192, gpu="NVIDIA H200")
            deeper = stages if v.pingpong or v.overlap else 2
            assert ablated == api == replace(fa2, num_stages=deeper), (str(v), d, causal)


def test_verify_hopper_columns_are_both_lattices():
    from fa2check.core.implementations import columns

    hopper = [c.variant for c in columns(["hopper"], None)]
    assert hopper == [str(v) for v in Variant.all() + SWITCH_VARIANTS]
    assert [c.variant for c in columns(["ours"], None)] == [str(v) for v in Variant.all()]
    assert [c.variant for c in columns(["gluon"], None)] == [str(v) for v in Variant.all()]


def test_the_fuzzer_draws_the_switch_variants_for_the_hopper_chassis_on_a_gpu():
    from fa2check.core.implementations import HOPPER, OURS
    from properties.strategies import Space, variants

    space = Space.for_device(True, impl=HOPPER)
    for wanted in (lambda v: v.pingpong and v.overlap, lambda v: not v.warp_specialize):
        drawn = find(variants(space), wanted)  # a draw with it exists (which one: the shrink's)
        assert wanted(drawn) and drawn in Variant.hopper()
    assert set(space.variants) == set(Variant.all() + Variant.hopper())
    assert space.describe().startswith("everything")  # the chassis's lattice is its whole space
    for on_gpu, impl in ((True, OURS), (False, HOPPER), (False, OURS)):
        assert not any(v.hopper_switches for v in Space.for_device(on_gpu, impl=impl).variants)


def test_a_switch_variants_flips_turn_each_switch_off_bitwise():
    import torch

    from fa2check.core.checks import Outputs
    from properties.variant_equivalence import flip_checks

    o = torch.zeros(1, 1, 4, 8)
    mine = Outputs(o=o, lse=torch.zeros(1, 1, 4))
    seen = []

    def outputs_of(other):
        seen.append(other)
        return Outputs(o=o + (other == Variant()), lse=mine.lse)  # FA2's o differs

    checks = flip_checks(None, Variant(pingpong=True, overlap=True), mine, outputs_of)
    assert [c.name for c in checks] == ["pingpong_bitwise", "overlap_bitwise"]
    assert seen == [Variant(overlap=True), Variant(pingpong=True)]
    assert all(c.passed for c in checks)
    [check] = flip_checks(None, Variant(pingpong=True), mine, outputs_of)
    assert not check.passed and check.numbers["other_variant"] == str(Variant())
    seen.clear()  # without the producer warp, the flip puts it back
    checks = flip_checks(None, Variant(warp_specialize=False, pingpong=True), mine, outputs_of)
    assert [c.name for c in checks] == ["warp_specialize_bitwise", "pingpong_bitwise"]
    assert seen == [Variant(pingpong=True), Variant(warp_specialize=False)]
