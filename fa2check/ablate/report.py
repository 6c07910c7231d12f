"""Tables of an ablation's results: rich for the terminal, markdown for the README, and a CSV in
long format. Every number comes from the results file through fa2check.ablate.analysis; nothing is
typed by hand.
"""
from __future__ import annotations

import csv
import math

import numpy as np
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from .clocks import median_clock
from .contenders import HOPPER, PEERS
from .fit import fitted
from .contributions import (BWD_SWITCH_GAME, FA2_GAME, SWITCH_VIEW, game_of, interaction_name,
                            players_for, subsets, variant_for, view_of)
from .grids import Cell
from .paper import fa2_a100_speedups, fa3_reference
from .tuning import band_seqlens

FLAG_SHORT = {"defer_norm": "defer", "seq_parallel": "seqpar", "split_q": "splitq",
              "warp_specialize": "warpspec", "pingpong": "pingpong", "overlap": "overlap"}
BACKEND_LABELS = {"sdpa-flash": "flash", "sdpa-cudnn": "cuDNN", "sdpa-efficient": "efficient",
                  "sdpa-math": "math", "api": "API", "flex": "flex"}


# ----------------------------------------------------------------------------- table model

class Grid:
    """A table as plain strings, rendered by `to_rich` or `to_markdown`."""

    def __init__(self, title: str, headers: list[str], caption: str = ""):
        self.title, self.headers, self.caption, self.rows = title, headers, caption, []
        self.detail = False  # one of the per-cell or config tables (ablate --full), not headline

    def add(self, *cells):
        self.rows.append([str(c) for c in cells])


def to_rich(grid: Grid):
    table = Table(title=grid.title, caption=grid.caption or None, caption_justify="left")
    for i, h in enumerate(grid.headers):
        table.add_column(h, justify="left" if i == 0 else "right")
    for row in grid.rows:
        table.add_row(*[Text(c, style="dim" if _dim(c) else "") for c in row])
    return table


def _dim(cell: str) -> bool:
    """Not significant (ns) or not applicable: greyed out."""
    return "ns" in cell.split() or cell.startswith("n/a")


def to_markdown(grid: Grid) -> str:
    lines = [f"**{grid.title}**", "", "| " + " | ".join(grid.headers) + " |",
             "|" + "|".join(["---"] + ["---:"] * (len(grid.headers) - 1)) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in grid.rows]
    if grid.caption:
        lines += ["", grid.caption]
    return "\n".join(lines) + "\n"


# ----------------------------------------------------------------------------- formatting

def factor(q: dict | None) -> str:
    """'1.23x [1.20, 1.26]', with ' ns' when the interval contains 1."""
    if q is None:
        return "-"
    text = f"{q['factor']:.2f}x [{q['ci_low']:.2f}, {q['ci_high']:.2f}]"
    return text if q["significant"] else text + " ns"


def num(x, fmt="{:.0f}") -> str:
    return "-" if x is None or (isinstance(x, float) and not math.isfinite(x)) else fmt.format(x)


def cell_label(cell: dict) -> list[str]:
    return [str(cell["seqlen"]), str(cell["head_dim"]), "causal" if cell["causal"] else "full",
            cell["dtype"]]


def cell_words(cell: dict) -> str:
    """A cell in a line of text: "seqlen 2048, d=128, bfloat16, causal"."""
    return (f"seqlen {cell['seqlen']}, d={cell['head_dim']}, {cell['dtype']}, "
            f"{'causal' if cell['causal'] else 'full'}")


CELL_HEADERS = ["seqlen", "d", "mask", "dtype"]


# what the FA1-style end of FA2's game is called when it ran on the reference grid (D90)
BATCH_HEADS_LABEL = "FA1-style on the (batch, heads) grid"


def ends(view: str, data: dict) -> tuple[str, str]:
    """(top, base) labels of a view's game: "FA2" and "FA1-style" (FA1's launcher), or the
    reference grid's label where the run's FA1-style variants ran one program per (batch, head)
    (a run saved before D90 did)."""
    top, base = game_of(view).ends(data["players"])
    if game_of(view) is FA2_GAME and data.get("fa1_grid", "batch-heads") == "batch-heads":
        base = BATCH_HEADS_LABEL
    return top, base


def fa1_grid_line(settings: dict) -> str:
    """What grid the FA1-style variants ran on (kernels.plan.fa1_launch, D90)."""
    if settings.get("fa1_grid", "batch-heads") == "fa1":
        return ("FA1-style: FA1's own launcher, its forward's num_splits heuristic and its "
                "backward's choice of a column grid (kernels/plan/fa1_launch.py).")
    return ("FA1-style ran on the (batch, heads) grid, one program per (batch, head): a "
            "reference grid, not FA1's launcher, which split the work to fill the GPU (D90).")


def names(view: str, players=None) -> tuple[str, str]:
    """(all players on, none on) contender names for a view: (FA2, FA1-style) for "fwd" or
    "fwd gluon", (FA2 with every switch, FA2 without any) for "fwd hopper switches";
    `players`: those the view played (default: its game's)."""
    players, prefix = players or players_for(view), view_of(view)[1]
    return (prefix + str(variant_for(frozenset(players), players)),
            prefix + str(variant_for(frozenset(), players)))


def host_records(results: dict) -> list:
    """(median host us a call, host-bound timed calls, timed calls) of every bench call that
    recorded them. Runs at 732d209 recorded no count; in them a record is matched with its
    sweep's samples, which holds while no contender changes between a slow call (no record)
    and a fast one from sweep to sweep (their README run had one sweep)."""
    return [(record[0], record[1], record[2] if len(record) > 2 else len(samples))
            for entry in results["cells"] for info in entry["modes"].values()
            for name, records in (info.get("host") or {}).items()
            for record, samples in zip(records, info["samples"][name])]


def timer_name(results: dict) -> str:
    if results["provenance"].get("device") != "cuda":
        return "host clock"
    if host_records(results):
        return "host-ahead timer (D99), L2 flushed"
    return "triton do_bench, L2 flushed (before D99: short calls' samples may hold host time)"


def host_line(results: dict) -> str | None:
    """How many timed calls' host time outlasted the GPU's sleep before them (D99)."""
    records = host_records(results)
    if not records:
        return None
    bound = sum(b for _, b, _ in records)
    calls = sum(n for *_, n in records)
    hosts = [h for h, *_ in records]
    return (f"Host time a call: {min(hosts):.0f}-{max(hosts):.0f} us; timed calls that outlasted "
            f"their sleep on the host: {bound} of {calls}.")


def provenance_lines(results: dict, source: str | None = None) -> list[str]:
    p = results["provenance"]
    settings = results["settings"]
    lines = []
    if p.get("device") != "cuda":
        lines.append(f"CPU INTERPRETER on {p.get('host')}: these timings are meaningless "
                     "(the code path ran; no GPU measured anything).")
    else:
        lines.append(f"Measured on {p.get('gpu')} ({p.get('sms')} SMs), driver {p.get('driver')}, "
                     f"CUDA {p.get('cuda')}, cuDNN {p.get('cudnn')}, torch {p.get('torch')}, "
                     f"triton {p.get('triton')}, on {p.get('date')}.")
    lines.append(f"Code: git {p.get('git_commit')}, kernels sha256 {str(p.get('kernels_sha256'))[:12]}.")
    lines.append(f"Command: {p.get('command')}")
    stopped = " (stopped early by --budget-s)" if results.get("stopped_by_budget") else ""
    lines.append(f"Sweeps: {results.get('repeats_done')} of {settings['repeats']}{stopped}; "
                 f"{timer_name(results)}, warm-up {settings['warmup_ms']} ms, repeat "
                 f"{settings['rep_ms']} ms.")
    if line := host_line(results):
        lines.append(line)
    lines.append(fa1_grid_line(settings))
    if line := tiles_line(results):
        lines.append(line)
    if line := switches_line(settings, results):
        lines.append(line)
    for what in results.get("skipped_by_budget") or []:
        lines.append(f"Skipped by --budget-s: {what}.")
    runs = p.get("merged_from") or []
    if runs:
        lines.append(f"Merged from {len(runs)} runs of the same code, cells and tiles (each gated): "
                     + "; ".join(f"{r['file']} ({r['repeats_done']} of {r['repeats']} sweeps, "
                                 f"{r['date']}, git {r['git_commit']})" for r in runs) + ".")
    if p.get("shards"):
        lines.append(f"Sharded over {len(p['shards'])} processes, one GPU each "
                     f"({', '.join(p['shards'])}); each cell and all its contenders on one of "
                     "them (the cell's `shard`); the matmul samples pooled.")
    for when in ("before", "after"):
        state = p.get(f"gpu_state_{when}")
        if state and "error" not in state:
            lines.append(f"GPU {when}: SM {state.get('clocks.sm')} MHz (max {state.get('clocks.max.sm')}), "
                         f"memory {state.get('clocks.mem')} MHz, power {state.get('power.draw')} W "
                         f"of {state.get('power.limit')} W, {state.get('temperature.gpu')} C, "
                         f"pstate {state.get('pstate')}.")
    if source:
        lines.append(f"Rendered from {source}.")
    return lines


def switches_line(settings: dict, results: dict | None = None) -> str | None:
    """What --hopper-switches timed (settings as saved; with the results, what their bwd
    samples show a run saved before D87 timed there: the producer warp alone)."""
    if not settings.get("hopper_switches"):
        return None
    parts = []
    if with_forward := [m for m in settings["modes"] if m != "bwd"]:
        parts.append("FA2 with each combination of warp_specialize, pingpong and overlap timed "
                     f"in {', '.join(with_forward)}, on FA2's tiles (with pingpong or overlap "
                     "one K/V stage more, D80)")
    if "bwd" in settings["modes"]:
        players = BWD_SWITCH_GAME.players
        if results is not None:
            timed = {n for e in results["cells"] for n in e["modes"].get("bwd", {}).get(
                "samples", {})}
            players = players_for(f"bwd {HOPPER} {SWITCH_VIEW}", timed)
        parts.append("in bwd FA2 with each combination of warp_specialize and overlap "
                     "(pingpong is the forward's, D87)" if len(players) == 2 else
                     "in bwd FA2 with and without its producer warp (the run predates overlap "
                     "in the backward, D87)")
    return "--hopper-switches: " + "; ".join(parts) + "."


# ----------------------------------------------------------------------------- tables

def performance_table(mode: str, data: dict, matmul: dict) -> Grid:
    fa2, fa1 = names(mode, data["players"])
    top, base = ends(mode, data)
    backends = [b for b in PEERS if any(b in row["stats"] for row in data["cells"])]
    headers = CELL_HEADERS + [f"{top} ms", "IQR", f"{top} TFLOP/s", "% matmul",
                              f"{base} TFLOP/s"]
    headers += [f"{BACKEND_LABELS[b]} TFLOP/s" for b in backends]
    headers += [f"{top} / {BACKEND_LABELS[b]}" for b in backends]
    rates = ", ".join(f"{d} {r:.0f} TFLOP/s" for d, r in sorted(matmul.items()))
    grid = Grid(f"{mode}: time and throughput (paper FLOP count)", headers,
                f"matmul rate measured in the same run: {rates}. Ratio > 1: {top} is faster.")
    for row in data["cells"]:
        stats = row["stats"]
        if fa2 not in stats:
            grid.add(*cell_label(row["cell"]), row["status"], *[""] * (len(headers) - 5))
            continue
        s = stats[fa2]
        values = [num(s["median"], "{:.3f}"), f"{100 * s['iqr_rel']:.1f}%", num(s["tflops"]),
                  num(s["pct_matmul"], "{:.0f}%"), num(stats.get(fa1, {}).get("tflops"))]
        values += [num(stats.get(b, {}).get("tflops")) if b in stats
                   else _why(row, b) for b in backends]
        values += [num(s.get(f"ratio/{b}"), "{:.2f}") for b in backends]
        grid.add(*cell_label(row["cell"]), *values)
    return grid


def _why(row, name) -> str:
    reason = row["excluded"].get(name, "")
    return "skipped" if reason.startswith("skipped") else ("n/a" if reason else "-")


def short_factor(q: dict | None) -> str:
    """'1.05x', with ' ns' when the 95% interval contains 1."""
    if q is None:
        return "-"
    return f"{q['factor']:.2f}x" + ("" if q["significant"] else " ns")


def contributions_table(mode: str, data: dict) -> Grid:
    players, game = data["players"], game_of(mode)
    top, base = ends(mode, data)
    headers = CELL_HEADERS + [f"{top} / {base}"]
    for f in game.players:
        short = FLAG_SHORT[f]
        headers += [f"{short} alone", f"{short} removed", f"{short} Shapley"]
    grid = Grid(f"{mode}: what each improvement is worth, per cell (speedup factors; total and "
                "Shapley with 95% CI)", headers,
                _game_caption(mode, data) + f" alone: switched on in {base}; removed: "
                f"what {top} loses without it.")
    for row in data["cells"]:
        c = row["contributions"]
        if c is None:
            grid.add(*cell_label(row["cell"]), row["status"], *["-"] * (3 * len(game.players)))
            continue
        values = [factor(c["total"])]
        for f in game.players:
            if f in players:
                values += [short_factor(c[f"alone/{f}"]), short_factor(c[f"removed/{f}"]),
                           factor(c[f"shapley/{f}"])]
            else:
                values += ["n/a"] * 3
        grid.add(*cell_label(row["cell"]), *values)
    return grid


def _game_caption(mode: str, data: dict) -> str:
    game = game_of(mode)
    top, base = ends(mode, data)
    text = (f"Shapley values on log time: the factors multiply to {top} / {base} "
            "exactly. ns: the 95% bootstrap interval contains 1.")
    for flag, why in data.get("not_applicable", {}).items():
        text += f" {flag}: {why}."
    return text


def summary_table(mode: str, data: dict) -> Grid:
    s, game = data["summary"], game_of(mode)
    top, base = ends(mode, data)
    grid = Grid(f"{mode}: contributions over the grid ({data['cells_in_summary']} cells, "
                "geometric mean of factors, 95% CI)",
                ["improvement", f"alone on {base}", f"removed from {top}", "Shapley"],
                _game_caption(mode, data))
    for flag in game.players:
        if flag in data["players"]:
            grid.add(flag, factor(s[f"alone/{flag}"]), factor(s[f"removed/{flag}"]),
                     factor(s[f"shapley/{flag}"]))
        else:
            grid.add(flag, "n/a", "n/a", "n/a")
    players = data["players"]
    for t in subsets(players):
        if len(t) >= 2:
            name = interaction_name(t)
            grid.add(f"interaction {name.replace('x', ' x ')}", "", "", factor(s[f"interaction/{name}"]))
    product = math.exp(sum(s[f"shapley/{f}"]["log"] for f in players))
    grid.add(f"total {top} / {base}", "", "",
             factor(s["total"]) + f" (Shapley product {product:.2f}x)")
    return grid


def by_seqlen_table(mode: str, data: dict) -> Grid:
    """Contributions by seqlen; for FA2's game also both ends' % of the matmul rate and, in
    fwd+bwd, the FA2 paper's A100 figure (FA2 / FA1) over the same kinds of cells."""
    game = game_of(mode)
    top, base = ends(mode, data)
    fa2, fa1 = names(mode, data["players"])
    fa2_game = game is FA2_GAME
    paper = fa2_game and view_of(mode)[0] == "fwd+bwd"
    headers = ["seqlen", f"{top} / {base}"] + [f"Shapley {f}" for f in game.players]
    caption = _game_caption(mode, data)
    if fa2_game:
        headers += [f"{top} % matmul", f"{base} % matmul"]
    if paper:
        a100 = fa2_a100_speedups()
        headers.append("A100 FA2 / FA1 (paper)")
        caption += (" A100: the FA2 paper's figure 4 (A100 80GB, forward + backward, FA2 / FA1 "
                    "from its bar labels; ablations/paper/fa2-a100-fwdbwd.json), geometric mean "
                    "over its legible cells of this seqlen and this run's head dims and masks.")
    grid = Grid(f"{mode}: contributions by seqlen (geometric mean over head_dim, mask, dtype)",
                headers, caption)
    for seqlen, s in data["by_seqlen"].items():
        values = [factor(s["total"])] + [factor(s[f"shapley/{f}"]) if f in data["players"]
                                         else "n/a" for f in game.players]
        rows = [r for r in data["cells"] if r["cell"]["seqlen"] == int(seqlen)]
        if fa2_game:
            values += [num(_geomean([r["stats"].get(name, {}).get("pct_matmul") for r in rows]),
                           "{:.0f}%") for name in (fa2, fa1)]
        if paper:
            kinds = {(r["cell"]["head_dim"], r["cell"]["causal"]) for r in rows}
            values.append(num(_geomean([a100[kind].get(int(seqlen)) for kind in kinds
                                        if kind in a100]), "{:.2f}x"))
        grid.add(seqlen, *values)
    return grid


def fa3_reference_table(mode: str, data: dict) -> Grid:
    """The switch game's "removed from all-on" in this run's cells like FA3's ablation cell
    (d=128, 8k, full; geometric mean over dtypes) beside FA3's on the H100
    (ablations/paper/fa3-h100-fwd.json, fa2check.ablate.paper), labelled as a reference."""
    ref = fa3_reference()
    like = ref["cell"]
    top, _ = names(mode, data["players"])
    rows = [r for r in data["cells"] if r["contributions"] is not None
            and (r["cell"]["head_dim"], r["cell"]["seqlen"], r["cell"]["causal"])
            == (like["head_dim"], like["seqlen"], like["causal"])]
    where = (f"d={like['head_dim']} {like['seqlen'] // 1024}k "
             f"{'causal' if like['causal'] else 'full'}")
    grid = Grid(f"{mode}: the switches against FlashAttention-3's ablation (reference: "
                f"{ref['gpu']}, another GPU and kernel)",
                ["switch", "FA3 technique", f"ours: removed from all-on, {where}",
                 "FA3: all-on / without", "mapping"],
                f"Reference: {ref['source']} (ablations/paper/fa3-h100-fwd.json). Ours: the "
                f"geometric mean over this run's {len(rows)} {where} cell(s), point estimate"
                + ("" if rows else " (none in this run)") + ".")
    for switch in data["players"]:
        ours = _geomean([r["contributions"][f"removed/{switch}"]["factor"] for r in rows])
        fa3 = ref["without"].get(switch)  # FA3 ablated no ping-pong on its own
        grid.add(switch, fa3["fa3"] if fa3 else "-", num(ours, "{:.3f}x"),
                 f"{ref['removed'][switch]:.3f}x" if fa3 else "-",
                 fa3["mapping"] if fa3 else "no FA3 row")
    mine = _geomean([r["stats"][top]["tflops"] for r in rows if top in r["stats"]])
    grid.add("all on, TFLOP/s", "", num(mine), f"{ref['all_on_tflops']:.0f}", "")
    return grid


def backends_table(view: str, triton: dict, gluon: dict) -> Grid:
    """The Shapley values of one run measured with both kernel backends, side by side: the
    Triton kernels (split_q: split-K's data flow, warps as Triton lays them out) and the Gluon
    kernel (split_q: the warp partitioning itself)."""
    mode = view_of(view)[0]
    players = players_for(mode)
    headers = ["seqlen"] + [f"{f}: triton / gluon" for f in players] + ["FA2 / FA1-style"]
    grid = Grid(f"{mode}: the same run's contributions with each kernel backend (Shapley, "
                "geometric mean over the cells)", headers,
                "triton: kernels/forward.py, where split_q=False is split-K's data flow laid out "
                "by Triton (wgmma for S, mma.sync for the per-slice P V); gluon: kernels/"
                "gluon_forward.py, mma.sync with the warps on the query rows (split-Q) or on "
                "the key slices (split-K), stated in the kernel.")
    rows = [("all", triton["summary"], gluon["summary"])]
    rows += [(s, t, gluon["by_seqlen"].get(s)) for s, t in triton["by_seqlen"].items()]
    for seqlen, t, g in rows:
        if t is None or g is None:
            continue
        grid.add(seqlen, *[f"{short_factor(t[f'shapley/{f}'])} / {short_factor(g[f'shapley/{f}'])}"
                           for f in players],
                 f"{short_factor(t['total'])} / {short_factor(g['total'])}")
    return grid


CLOCK_CAPTION = ("MHz / W: SM clock and board power, medians of the nvidia-smi samples taken "
                 "during that contender's timing in this seqlen's cells (fa2check.ablate.clocks). In "
                 "5 s loops at the H200's 700 W cap, our kernels ran 105-123 MHz below "
                 "sdpa-flash in the two cells probed (docs/ablation.md, the power cap).")


def versus_sdpa_table(mode: str, data: dict) -> Grid:
    """Geometric mean over cells of each seqlen of FA2's speed relative to each backend; with
    clock samples (fa2check.ablate.clocks), FA2's and sdpa-flash's clock and power while timed."""
    fa2, _ = names(mode)
    backends = [b for b in PEERS if any(b in row["stats"] for row in data["cells"])]
    clocked = [n for n in (fa2, "sdpa-flash") if any(row.get("clock", {}).get(n)
                                                     for row in data["cells"])]
    grid = Grid(f"{mode}: FA2 (ours) relative to torch SDPA's backends, by seqlen "
                "(geometric mean; > 1: ours faster)",
                ["seqlen", "FA2 TFLOP/s", "FA2 % matmul"] + [f"FA2 / {BACKEND_LABELS[b]}" for b in backends]
                + [f"{'FA2' if n == fa2 else BACKEND_LABELS[n]} MHz / W" for n in clocked],
                CLOCK_CAPTION if clocked else "")
    seqlens = sorted({row["cell"]["seqlen"] for row in data["cells"]})
    for seqlen in seqlens:
        rows = [r for r in data["cells"] if r["cell"]["seqlen"] == seqlen and fa2 in r["stats"]]
        if not rows:
            continue
        cells = [_geomean([r["stats"][fa2]["tflops"] for r in rows]),
                 _geomean([r["stats"][fa2]["pct_matmul"] for r in rows if r["stats"][fa2]["pct_matmul"]])]
        for b in backends:
            cells.append(_geomean([r["stats"][fa2][f"ratio/{b}"] for r in rows
                                   if f"ratio/{b}" in r["stats"][fa2]]))
        clocks = []
        for n in clocked:
            mhz, watts = median_clock([p for r in rows for p in r.get("clock", {}).get(n, [])])
            clocks.append(f"{num(mhz)} / {num(watts)}" if mhz is not None else "-")
        grid.add(seqlen, num(cells[0]), num(cells[1], "{:.0f}%"), *[num(x, "{:.2f}") for x in cells[2:]],
                 *clocks)
    return grid


def _geomean(values):
    values = [v for v in values if v is not None and v > 0]
    return float(np.exp(np.mean(np.log(values)))) if values else None


TILE_FIELDS = ("block_m", "block_n", "num_warps", "num_stages")  # with a bwd_ prefix for bwd
# tile choices shown when they differ from TileConfig's default: field -> (label, shown value)
CHOICES = {"tma": ("TMA loads", True), "bwd_dq_pass": ("dQ pass", True),
           "nan_flags": ("NaN check in REPAIR", False), "key_slices": ("2 key slices", 2)}


def configs_table(results: dict) -> Grid:
    grid = Grid("tile configs (each variant tuned from the same search space)",
                ["part", "variant", "d", "mask", "seqlens", "block_m", "block_n", "warps",
                 "stages", "choices", "source"])
    for record in results.get("configs", []):
        key, fields = record["key"], record["fields"] or {}
        # the first runs had one winner for all seqlens; then the backward's had `long`
        if "band" in key:
            seqlens = band_seqlens(key["part"], key["band"])
        elif "long" in key and key["part"] == "bwd":
            seqlens = band_seqlens("bwd", "long" if key["long"] else "")
        else:
            seqlens = "all"
        prefix = "bwd_" if key["part"] == "bwd" else ""
        tiles = [fields.get(prefix + f, "") for f in TILE_FIELDS]
        choices = [label for f, (label, shown) in CHOICES.items()
                   if f in fields and fields[f] == shown]
        if fields.get("max_registers"):
            choices.append(f"registers <= {fields['max_registers']}")
        choices = ", ".join(choices)
        grid.add(key["part"], key["variant"], key["head_dim"], "causal" if key["causal"] else "full",
                 seqlens, *tiles, choices, record.get("source", ""))
    return grid


def tiles_line(results: dict) -> str | None:
    """Where the run's tiles came from, in one line (results["tile_sources"]: runs that took
    them from kernels.default_config, the table of tuned tiles or the heuristic)."""
    rows = results.get("tile_sources")
    if not rows:
        return None
    tuned = [r for r in results.get("configs", []) if "tuned on" in str(r.get("source", ""))]
    table = [r for r in rows if r["from"] == "table"]
    commits = sorted({r["source"].split(",")[0].removeprefix("table (") for r in table})
    text = (f"Tiles: {len(table)} of {len(rows)} (part, kernel, head_dim, mask, dtype, band) keys "
            f"from the table of tuned tiles" + (f" ({', '.join(commits)})" if commits else "")
            + f", {len(rows) - len(table)} from default_config's heuristic")
    if tuned:
        text += f"; {len(tuned)} keys tuned in this run (--retune) replace theirs"
    return text + " (ablate --full lists each)."


def tile_sources_table(results: dict) -> Grid:
    grid = Grid("where each tile came from (kernels.default_config: the table of tuned tiles, "
                "kernels/tuned_tiles.json, else the heuristic)",
                ["part", "kernel", "d", "mask", "dtype", "seqlens", "from", "source"])
    for r in results.get("tile_sources", []):
        grid.add(r["part"], r["kernel"], r["head_dim"], "causal" if r["causal"] else "full",
                 r["dtype"], band_seqlens(r["part"], r["band"]), r["from"], r["source"])
    return grid


def problems(results: dict, analysis: dict) -> list[str]:
    """Cells not timed, wrong results, and (grouped) backends that could not run a cell."""
    lines, unavailable = [], {}
    for mode, data in analysis["modes"].items():
        for row in data["cells"]:
            if row["status"] != "timed":
                lines.append(f"{mode} {Cell(**row['cell'])}: {row['status']}")
            for name, reason in row["excluded"].items():
                if reason.startswith("error"):
                    lines.append(f"{mode} {Cell(**row['cell'])}: {name} {reason}")
    for entry in results["cells"]:
        for name, g in entry["gate"].items():
            if g["passed"]:
                continue
            if g.get("error"):
                reason = g["error"].splitlines()[0][:120]
                unavailable.setdefault((name, reason), []).append(str(Cell(**entry["cell"])))
                continue
            bad = [f"{c['output']}@b{c['batch']}h{c['kv_head']} ratio {c['ratio']:.2f}"
                   for c in g.get("checks", []) if not c["passed"]]
            lines.append(f"gate FAILED {Cell(**entry['cell'])} {name}: "
                         + ("not finite; " if g.get("finite") is False else "") + "; ".join(bad))
    for (name, reason), cells in unavailable.items():
        lines.append(f"{name} could not run {len(cells)} cell(s) (e.g. {cells[0]}): {reason}")
    return lines


def gate_line(results: dict) -> str:
    worst = {}
    for entry in results["cells"]:
        for name, g in entry["gate"].items():
            if g.get("worst_ratio") is not None:
                worst[name] = max(worst.get(name, 0.0), g["worst_ratio"])
    passed = sum(g["passed"] for e in results["cells"] for g in e["gate"].values())
    total = sum(len(e["gate"]) for e in results["cells"])
    top = max(worst.items(), key=lambda kv: kv[1]) if worst else ("-", float("nan"))
    return (f"Correctness gate: {passed}/{total} (cell, contender) pairs passed the pass rule on "
            f"the checked slices; worst error/allowed ratio {top[1]:.2f} ({top[0]}).")


def tables(results: dict, analysis: dict, detail: bool = True, headline_last: bool = False):
    """The headline tables (contributions over the grid and by seqlen, FA2 against SDPA) and,
    with detail, the per-cell tables and the configs. headline_last puts the headline at the
    end (a terminal's or log's tail shows it)."""
    headline, details = [], []
    same_run = analysis.get("same_run", analysis["modes"])  # every view, before any selection
    for mode, data in analysis["modes"].items():
        fa2_game = game_of(mode) is FA2_GAME
        if data["summary"] is not None:
            headline.append(summary_table(mode, data))
            headline.append(by_seqlen_table(mode, data))
            base = same_run.get(view_of(mode)[0])
            if fa2_game and view_of(mode)[1] and base and base["summary"] is not None:
                headline.append(backends_table(mode, base, data))
            if not fa2_game and view_of(mode)[0] == "fwd":  # FA3 ablated its forward
                headline.append(fa3_reference_table(mode, data))
        if fa2_game:  # the switch game's view has the same peers as its FA2 view
            headline.append(versus_sdpa_table(mode, data))
        details.append(performance_table(mode, data, analysis["matmul_tflops"]))
        details.append(contributions_table(mode, data))
    if results.get("tile_sources"):
        details.append(tile_sources_table(results))
    if results.get("configs"):
        details.append(configs_table(results))
    for grid in details:
        grid.detail = True
    if not detail:
        return headline
    return details + headline if headline_last else headline + details


def render(results: dict, analysis: dict, console, source: str | None = None, detail=False):
    """The provenance once, then the headline tables fitted to the console's width with every
    interval on one row (fa2check.ablate.fit: a table too wide is split by columns), the gate
    and any problems. With detail (ablate --full) the per-cell and tile-config tables come
    first, each at its own width where that is wider than the console (a terminal wraps those
    lines; `less -S` scrolls them)."""
    console.print(Panel("\n".join(provenance_lines(results, source)), title="fa2check.ablate",
                        expand=False))
    for grid in tables(results, analysis, detail, headline_last=True):
        if not grid.detail:
            for table in fitted(grid.title, grid.headers, grid.rows, grid.caption,
                                console.width, _dim):
                console.print(table)
            continue
        table = to_rich(grid)
        width = console.measure(table, options=console.options.update_width(100_000)).maximum
        if not grid.detail or width <= console.width:
            console.print(table)  # fitted: rich wraps the cells at spaces
            continue
        narrow = console.width
        console.width = width
        try:
            console.print(table)
        finally:
            console.width = narrow
    console.print(gate_line(results), highlight=False)
    for line in problems(results, analysis):
        console.print(line, style="yellow", highlight=False, markup=False)


def markdown(results: dict, analysis: dict, source: str | None = None, detail=True,
             images=()) -> str:
    parts = ["\n".join(f"> {line}" for line in provenance_lines(results, source)), ""]
    for grid in tables(results, analysis, detail):
        parts.append(to_markdown(grid))
    for alt, path in images:
        parts.append(f"![{alt}]({path})\n")
    parts.append(gate_line(results) + "\n")
    return "\n".join(parts)


# ----------------------------------------------------------------------------- CSV

CSV_COLUMNS = ["mode", "batch", "heads_q", "heads_kv", "seqlen", "head_dim", "dtype", "causal",
               "subject", "metric", "value", "ci_low", "ci_high", "significant"]


def write_csv(results: dict, analysis: dict, path: str):
    """Long format: one row per (cell, subject, metric); summaries have empty cell fields."""
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(CSV_COLUMNS)
        for dtype, rate in analysis["matmul_tflops"].items():
            w.writerow(["", "", "", "", "", "", dtype, "", "matmul", "tflops", rate, "", "", ""])
        for mode, data in analysis["modes"].items():
            for row in data["cells"]:
                c = row["cell"]
                key = [mode, c["batch"], c["heads_q"], c["heads_kv"], c["seqlen"], c["head_dim"],
                       c["dtype"], c["causal"]]
                for name, stats in row["stats"].items():
                    for metric in ("median", "q25", "q75"):
                        w.writerow(key + [name, f"{metric}_ms", stats[metric], "", "", ""])
                    for metric in (["n", "tflops", "pct_matmul"]
                                   + [m for m in stats if m.startswith("ratio/")]
                                   + [m for m in ("sm_mhz", "power_w", "clock_samples")
                                      if m in stats]):
                        w.writerow(key + [name, metric, stats[metric], "", "", ""])
                for name, q in (row["contributions"] or {}).items():
                    w.writerow(key + ["contribution", name, q["factor"], q["ci_low"], q["ci_high"],
                                      q["significant"]])
                for name, reason in row["excluded"].items():
                    w.writerow(key + [name, "excluded", reason, "", "", ""])
            groups = [("all", data["summary"])] + [(s, v) for s, v in data["by_seqlen"].items()]
            for seqlen, summary in groups:
                for name, q in (summary or {}).items():
                    w.writerow([mode, "", "", "", seqlen, "", "", "", "contribution (geomean)", name,
                                q["factor"], q["ci_low"], q["ci_high"], q["significant"]])
