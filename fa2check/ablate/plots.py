"""PNG plots of an ablation: TFLOP/s against seqlen for every variant beside SDPA's backends,
and the Shapley contributions with their 95% intervals. One row of panels per (mode, head_dim),
one column per (mask, dtype)."""
from __future__ import annotations

import math

from .contenders import PEERS, parse_kernel_name
from .contributions import game_of
from .report import BACKEND_LABELS, ends, names

BACKEND_STYLE = {"sdpa-flash": ("tab:gray", "-"), "sdpa-cudnn": ("black", "-"),
                 "sdpa-efficient": ("tab:gray", "--"), "sdpa-math": ("tab:gray", ":"),
                 "api": ("tab:cyan", "-."), "flex": ("tab:gray", "-.")}
VARIANT_COLOURS = ["tab:blue", "tab:orange", "tab:green", "tab:red", "tab:purple", "tab:brown",
                   "tab:pink", "tab:olive", "tab:gray", "teal", "indigo", "crimson",
                   "tab:cyan", "darkgoldenrod", "black"]
# in Variant.all() order (FA2 first, FA1-style last), then the Hopper switches' (D66)
FLAG_COLOURS = {"defer_norm": "tab:blue", "seq_parallel": "tab:orange", "split_q": "tab:green",
                "warp_specialize": "tab:brown", "pingpong": "tab:purple", "overlap": "tab:red"}


def _lattice():
    from kernels import Variant

    return Variant.all() + [v for v in Variant.hopper() if v.hopper_switches]


def _facets(analysis):
    rows, cols = [], []
    for mode, data in analysis["modes"].items():
        for row in data["cells"]:
            c = row["cell"]
            if (mode, c["head_dim"]) not in rows:
                rows.append((mode, c["head_dim"]))
            if (c["causal"], c["dtype"]) not in cols:
                cols.append((c["causal"], c["dtype"]))
    return rows, cols


def _figure(rows, cols):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(len(rows), len(cols), figsize=(4.2 * len(cols), 3.4 * len(rows) + 0.8),
                             squeeze=False)
    return plt, fig, axes


def _title(fig, results, what):
    p = results["provenance"]
    where = (f"{p.get('gpu')}, {p.get('date')}" if p.get("device") == "cuda"
             else "CPU INTERPRETER - timings meaningless")
    fig.suptitle(f"fa2check.ablate: {what}\n{where}; git {str(p.get('git_commit'))[:12]}",
                 fontsize=10)


def _cells(analysis, mode, head_dim, causal, dtype):
    data = analysis["modes"][mode]
    return sorted((r for r in data["cells"] if r["cell"]["head_dim"] == head_dim
                   and r["cell"]["causal"] == causal and r["cell"]["dtype"] == dtype),
                  key=lambda r: r["cell"]["seqlen"])


def tflops_plot(results, analysis, path):
    rows, cols = _facets(analysis)
    plt, fig, axes = _figure(rows, cols)
    for i, (mode, head_dim) in enumerate(rows):
        (fa2, fa1), (top, base) = names(mode), ends(mode, analysis["modes"][mode])
        for j, (causal, dtype) in enumerate(cols):
            ax = axes[i][j]
            cells = _cells(analysis, mode, head_dim, causal, dtype)
            contenders = []
            for r in cells:
                contenders += [n for n in r["stats"] if n not in contenders]
            for name in contenders:
                points = [(r["cell"]["seqlen"], r["stats"][name]["tflops"]) for r in cells
                          if name in r["stats"]]
                xs, ys = zip(*points)
                if name in PEERS:
                    colour, style = BACKEND_STYLE[name]
                    ax.plot(xs, ys, style, color=colour, marker=".", label=BACKEND_LABELS[name])
                else:
                    variant = parse_kernel_name(name)[1]
                    label = name + (f" {top}" if name == fa2 else
                                    f" {base}" if name == fa1 else "")
                    width = 2.5 if name in (fa2, fa1) else 1.0
                    style = "--" if not variant.seq_parallel else "-"
                    ax.plot(xs, ys, style, linewidth=width, marker="o", markersize=3, label=label,
                            color=VARIANT_COLOURS[_lattice().index(variant)])
            ax.set_xscale("log", base=2)
            ax.set_xticks([r["cell"]["seqlen"] for r in cells], [str(r["cell"]["seqlen"]) for r in cells],
                          fontsize=7)
            ax.minorticks_off()
            ax.set_title(f"{mode}, d={head_dim}, {'causal' if causal else 'full'}, {dtype}", fontsize=9)
            ax.set_xlabel("seqlen")
            ax.set_ylabel("TFLOP/s")
            ax.grid(alpha=0.3)
            if j == len(cols) - 1:
                ax.legend(fontsize=6, loc="center left", bbox_to_anchor=(1.0, 0.5))
    _title(fig, results, "TFLOP/s by seqlen, every variant beside torch SDPA's backends")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def contributions_plot(results, analysis, path):
    rows, cols = _facets(analysis)
    plt, fig, axes = _figure(rows, cols)
    for i, (mode, head_dim) in enumerate(rows):
        players, game = analysis["modes"][mode]["players"], game_of(mode)
        top, base = ends(mode, analysis["modes"][mode])
        flags = game.players
        for j, (causal, dtype) in enumerate(cols):
            ax = axes[i][j]
            cells = [r for r in _cells(analysis, mode, head_dim, causal, dtype) if r["contributions"]]
            width = 0.8 / (len(flags) + 1)
            for x, r in enumerate(cells):
                c = r["contributions"]
                for k, name in enumerate(["total"] + [f"shapley/{f}" for f in flags]):
                    flag = name.split("/")[-1]
                    if name != "total" and flag not in players:
                        continue
                    q = c[name]
                    pos = x + (k - len(flags) / 2) * width
                    ax.bar(pos, math.log2(q["factor"]), width, color=FLAG_COLOURS.get(flag, "black"),
                           alpha=1.0 if q["significant"] else 0.35,
                           label=(flag if name != "total" else f"total {top} / {base}")
                           if x == 0 else None)
                    # max(0, .): a cell timed once has an interval of one point, which the
                    # estimate, computed another way, can miss by an ulp
                    ax.errorbar(pos, math.log2(q["factor"]),
                                yerr=[[max(0.0, math.log2(q["factor"] / q["ci_low"]))],
                                      [max(0.0, math.log2(q["ci_high"] / q["factor"]))]],
                                color="black", capsize=2, linewidth=0.8)
            ax.axhline(0, color="black", linewidth=0.6)
            ax.set_xticks(range(len(cells)), [str(r["cell"]["seqlen"]) for r in cells], fontsize=7)
            ax.set_title(f"{mode}, d={head_dim}, {'causal' if causal else 'full'}, {dtype}"
                         + (" (split_q n/a)" if "split_q" in flags and "split_q" not in players
                            else ""), fontsize=9)
            ax.set_xlabel("seqlen")
            ax.set_ylabel("log2 speedup")
            ax.grid(alpha=0.3, axis="y")
            if j == len(cols) - 1 and (i == 0 or game_of(rows[i - 1][0]) is not game):
                ax.legend(fontsize=6, loc="center left", bbox_to_anchor=(1.0, 0.5))  # each game's
    _title(fig, results, "Shapley contributions (log2 speedup; faded: 95% CI contains 0)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)

