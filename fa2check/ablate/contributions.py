"""What each improvement is worth: Shapley values on log time, interactions, bootstrap intervals.

The game. The players are the improvements (defer_norm, seq_parallel, split_q). For a set S of
improvements switched on over the FA1-style baseline (all off), its value is the log speedup

    v(S) = log t(baseline) - log t(S on, the rest off),       v({}) = 0,

so v(all) is the log of FA2's total speedup over the baseline. Reported for each improvement i:
- alone:   v({i})                   (i switched on in the baseline)
- removed: v(all) - v(all minus i)  (what FA2 loses without i)
- Shapley: phi_i = sum over S not containing i of |S|!(n-|S|-1)!/n! * (v(S+i) - v(S)),
  the average of i's marginal gain over every order of switching the improvements on. The phi_i
  add up exactly to v(all) (efficiency), so exp(phi_i) multiply to the total speedup.
- interactions: the Moebius (Harsanyi) dividends d(T) = sum over S within T of
  (-1)^(|T|-|S|) v(S) for |T| >= 2; v(all) = sum of alone effects + sum of dividends, and
  phi_i = alone_i + sum over T containing i, |T|>=2, of d(T)/|T|.

A second game, over the Hopper chassis (docs/decisions.md D59, D66, D85): the players are
FlashAttention-3's three ideas (warp_specialize, pingpong, overlap), the baseline is FA2 all
on without them (no producer warp: a consumer loads) and the top is FA2 with all three; "alone"
is a switch on that baseline, "removed" what all-on loses without it. In bwd warp_specialize
and overlap play (pingpong is the forward's; D86, D87); fwd+bwd has all three. Runs saved
before D85 timed no variant without the producer warp: their game has two players (pingpong,
overlap) on FA2. The same code plays every game (`Game`, `game_of`).

Every mode has the three players: split_q off is split-K in the forward (keys over warps or
warpgroups) and in the backward (FA1's split of the dQ products' keys, docs/decisions.md D50).

Intervals. Times are the median of every sample of an implementation in a cell. The bootstrap
resamples the sweeps (the repeats of the whole grid, the experimental unit: paired across
implementations and cells, since one sweep times them all close together) and, inside each
chosen sweep, that sweep's samples; it recomputes every quantity from the resampled medians.
95% intervals are the 2.5 and 97.5 percentiles; a quantity whose interval contains 0 (a factor
of 1.0x) is marked not significant.
"""
from __future__ import annotations

import itertools
import math
from collections import defaultdict
from dataclasses import dataclass
from typing import Mapping, Sequence

import numpy as np

FLAGS = ("defer_norm", "seq_parallel", "split_q")
SWITCHES = ("warp_specialize", "pingpong", "overlap")  # the Hopper lattice's (Variant.hopper)
CONFIDENCE = 0.95


@dataclass(frozen=True)
class Game:
    """Who plays, and what the tables call every player on (`top`) and none on (`base`): FA2's
    game names its own; a switch game's names follow the players a view played (`ends`)."""
    name: str
    players: tuple
    top: str = ""
    base: str = ""

    def ends(self, players) -> tuple[str, str]:
        """(top, base) names for the players a view played: a switch game's top is FA2 with
        them on (warp_specialize is FA2's default), its base FA2 with none ("FA2 - warpspec"
        where warp_specialize played)."""
        if self.top:
            return self.top, self.base
        return ("FA2" + "".join(f" + {p}" for p in players if p != "warp_specialize"),
                "FA2 - warpspec" if "warp_specialize" in players else "FA2")


FA2_GAME = Game("fa2", FLAGS, "FA2", "FA1-style")
SWITCH_GAME = Game("switches", SWITCHES)
# the backward's: pingpong exists in the forward only (Variant.backward, D86, D87)
BWD_SWITCH_GAME = Game("switches", ("warp_specialize", "overlap"))
SWITCH_VIEW = "switches"  # the last word of a view of the switch game: "fwd hopper switches"


def view_of(view: str) -> tuple[str, str]:
    """An analysis view, "fwd", "fwd gluon" or "fwd hopper switches", as (mode, kernel backend
    prefix of its names)."""
    mode, _, rest = view.partition(" ")
    return mode, rest.partition(" ")[0]


def game_of(view: str) -> Game:
    """The game a view plays: the switches' for "<mode> hopper switches" (in bwd without
    pingpong), else FA2's flags."""
    if view.split(" ")[-1] != SWITCH_VIEW:
        return FA2_GAME
    return BWD_SWITCH_GAME if view_of(view)[0] == "bwd" else SWITCH_GAME


# why a player of a saved run's game is missing: it predates the player
NOT_TIMED = {"split_q": "not timed: the run predates split_q in the backward (D50)",
             "warp_specialize": "not timed: the run predates the switch (D85)",
             "overlap": "not timed: the run predates overlap in the backward (D87)"}


def players_for(view: str, timed: set | None = None) -> tuple[str, ...]:
    """The game's players, less those a saved run (`timed`: its kernel names) predates: for a
    backward run that timed only the split_q=True variants, defer_norm and seq_parallel; in
    the switch game, warp_specialize for a run that timed no variant without the producer warp
    (D85), and in bwd overlap for one that timed none with it (D87)."""
    mode, prefix = view_of(view)
    game = game_of(view)
    if game is not FA2_GAME:
        players = game.players
        if timed is None:
            return players
        if prefix + str(variant_for(frozenset(), players)) not in timed:
            players = players[1:]  # no base without the producer warp: FA2 is the base
        return tuple(p for p in players
                     if prefix + str(variant_for(frozenset({p}), players)) in timed)
    if mode == "bwd" and timed is not None and not any(
            (prefix + str(variant_for(s, FLAGS))) in timed for s in subsets(FLAGS)
            if "split_q" not in s):
        return FLAGS[:2]
    return FLAGS


def subsets(players: Sequence[str]) -> list[frozenset]:
    return [frozenset(c) for r in range(len(players) + 1) for c in itertools.combinations(players, r)]


def variant_for(on: frozenset, players: Sequence[str]):
    """The Variant with exactly `on` switched on among `players`; non-players keep Variant's
    defaults (FA2's flags on, the Hopper switches off)."""
    from kernels import Variant

    return Variant(**{f: f in on for f in players})


def game(log_time: Mapping[frozenset, object], players: Sequence[str]) -> dict[frozenset, object]:
    """v(S) = log t({}) - log t(S); values may be floats or numpy arrays (bootstrap draws)."""
    base = log_time[frozenset()]
    return {s: base - log_time[s] for s in subsets(players)}


def shapley(v: Mapping[frozenset, object], players: Sequence[str]) -> dict[str, object]:
    n = len(players)
    phi = {}
    for i in players:
        total = 0.0
        for s in subsets([p for p in players if p != i]):
            weight = math.factorial(len(s)) * math.factorial(n - len(s) - 1) / math.factorial(n)
            total = total + weight * (v[s | {i}] - v[s])
        phi[i] = total
    return phi


def dividends(v: Mapping[frozenset, object], players: Sequence[str]) -> dict[frozenset, object]:
    """Moebius dividends d(T) for every non-empty T (singletons are the alone effects)."""
    out = {}
    for t in subsets(players):
        if t:
            out[t] = sum((-1) ** (len(t) - len(s)) * v[s] for s in subsets(sorted(t)))
    return out


def interaction_name(t: frozenset) -> str:
    return "x".join(f for f in FLAGS + SWITCHES if f in t)


def decompose(log_time: Mapping[frozenset, object], players: Sequence[str]) -> dict[str, object]:
    """Every reported quantity, as a log speedup, keyed 'total', 'alone/<flag>',
    'removed/<flag>', 'shapley/<flag>', 'interaction/<flag>x<flag>[x<flag>]'."""
    v = game(log_time, players)
    everything = frozenset(players)
    out = {"total": v[everything]}
    for i in players:
        out[f"alone/{i}"] = v[frozenset({i})]
        out[f"removed/{i}"] = v[everything] - v[everything - {i}]
    for i, phi in shapley(v, players).items():
        out[f"shapley/{i}"] = phi
    for t, d in dividends(v, players).items():
        if len(t) >= 2:
            out[f"interaction/{interaction_name(t)}"] = d
    return out


def repeat_draws(n_repeats: int, n_draws: int, rng: np.random.Generator) -> np.ndarray:
    """(n_draws, n_repeats) sweep indices drawn with replacement, shared by every cell of a mode."""
    return rng.integers(0, n_repeats, size=(n_draws, n_repeats))


def bootstrap_medians(runs: Sequence[Sequence[float]], draws: np.ndarray,
                      rng: np.random.Generator) -> np.ndarray:
    """Median of the pooled resampled samples for each draw (row of `draws`).

    runs[r] are the samples of sweep r; a draw picks sweeps (with replacement) and resamples
    each picked sweep's samples (with replacement, as many as it has)."""
    runs = [np.asarray(r, dtype=np.float64) for r in runs]
    if draws.size and draws.max() >= len(runs):
        raise ValueError(f"draws index sweep {draws.max()} but only {len(runs)} sweeps were timed")
    out = np.empty(len(draws))
    groups = defaultdict(list)  # the pooled median depends only on the multiset of sweeps
    for row, picked in enumerate(draws):
        groups[tuple(sorted(picked))].append(row)
    for picked, rows in groups.items():
        pooled = [runs[r][rng.integers(0, len(runs[r]), size=(len(rows), len(runs[r])))]
                  for r in picked]
        out[rows] = np.median(np.concatenate(pooled, axis=1), axis=1)
    return out


def interval(draws: np.ndarray) -> tuple[float, float]:
    tail = (1.0 - CONFIDENCE) / 2 * 100
    low, high = np.percentile(np.asarray(draws, dtype=np.float64), [tail, 100 - tail])
    return float(low), float(high)


def significant(low: float, high: float) -> bool:
    """The interval excludes 0 (no change in log time)."""
    return low > 0.0 or high < 0.0


def analyse(samples: Mapping[frozenset, Sequence[Sequence[float]]], players: Sequence[str],
            draws: np.ndarray, rng: np.random.Generator) -> dict:
    """Point estimates and bootstrap draws of every quantity of one cell.

    samples[S] = per-sweep samples (ms) of the variant with improvements S switched on.
    Returns {"point": {name: float}, "draws": {name: ndarray}}."""
    point_log = {s: math.log(np.median(np.concatenate([np.asarray(r, float) for r in samples[s]])))
                 for s in subsets(players)}
    draw_log = {s: np.log(bootstrap_medians(samples[s], draws, rng)) for s in subsets(players)}
    return {"point": {k: float(x) for k, x in decompose(point_log, players).items()},
            "draws": decompose(draw_log, players)}


def with_intervals(point: Mapping[str, float], draws: Mapping[str, np.ndarray]) -> dict:
    """{name: {"log": x, "factor": exp(x), "ci_low", "ci_high" (factors), "significant"}}."""
    out = {}
    for name, x in point.items():
        low, high = interval(draws[name])
        out[name] = {"log": x, "factor": math.exp(x), "ci_low": math.exp(low),
                     "ci_high": math.exp(high), "significant": significant(low, high)}
    return out


def summarise(cells: Sequence[dict]) -> dict:
    """Mean over cells of every log quantity (the geometric mean of the factors), with the
    interval from the same draws averaged over cells. `cells` are `analyse` results."""
    names = cells[0]["point"].keys()
    point = {n: float(np.mean([c["point"][n] for c in cells])) for n in names}
    draws = {n: np.mean([c["draws"][n] for c in cells], axis=0) for n in names}
    return with_intervals(point, draws)
