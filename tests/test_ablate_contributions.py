"""fa2check.ablate's arithmetic: Shapley contributions and interactions of the FA2 switches,
the bootstrap over repeated sweeps, FLOP counting and the paper's grid."""
import math

import numpy as np
import pytest

from fa2check.ablate import contributions as C
from fa2check.ablate.grids import Cell, custom_grid, paper_grid, parse_modes
from kernels import Variant


PLAYERS = C.FLAGS


def _log_times(rng, players):
    return {s: float(rng.normal(0.0, 1.0)) for s in C.subsets(players)}


@pytest.mark.parametrize("players", [C.FLAGS, C.FLAGS[:2]], ids=["3 players", "2 players"])
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


def test_every_mode_has_the_three_players():
    """split_q reaches the backward (docs/decisions.md D50): no mode drops it."""
    for mode in ("fwd", "bwd", "fwd+bwd", "fwd hopper", "bwd hopper"):
        assert C.players_for(mode) == C.FLAGS
    every = {str(v) for v in Variant.all()}
    assert C.players_for("bwd", every) == C.FLAGS
    # a run saved before D50 timed the backward's split_q=True variants only
    assert C.players_for("bwd", {str(v) for v in Variant.all() if v.split_q}) == C.FLAGS[:2]


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
