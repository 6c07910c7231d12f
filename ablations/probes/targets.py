"""Question: which cells meet issue 7's performance targets? (D16, D22, D23)

Issue 7's performance targets, checked against saved ablation results (no GPU needed):

    python ablations/probes/targets.py ablations/results/A.json [B.json ...] [--across]

For every file and every mode it holds, FA2 (all three changes on) against torch SDPA's flash
backend in the same run, cell by cell: forward >= 1.3x at seqlen >= 1k and >= 1.5x at
head_dim 128, seqlen >= 4k; forward + backward >= 1.2x at seqlen >= 1k. Prints each miss and a
count per target; where the run sampled clocks (fa2check.ablate.clocks), a miss shows FA2's and
sdpa-flash's SM clock while they were timed; each file's first line says whether its
kernels (sha256 of kernels/*.py) are the tree's. --across: then, per target, every cell that
missed in some run, with its ratio in each run that timed it, to tell a miss every run shares
from one a single run had (two runs of the same kernels and tiles differ by a few percent a
cell).
"""
import os
import sys

sys.path.insert(0, os.getcwd())
from fa2check.ablate.analysis import analyse_results  # noqa: E402
from fa2check.core.environment import kernels_sha256  # noqa: E402
from fa2check.ablate.report import cell_words as describe  # noqa: E402
from fa2check.ablate.results import load  # noqa: E402

FA2 = "+defer+seqpar+splitq"
# (mode, name, cell filter, required ratio to sdpa-flash)
TARGETS = [
    ("fwd", "fwd >= 1.3x, seqlen >= 1k", lambda c: c["seqlen"] >= 1024, 1.3),
    ("fwd", "fwd >= 1.5x, d=128, seqlen >= 4k",
     lambda c: c["head_dim"] == 128 and c["seqlen"] >= 4096, 1.5),
    ("fwd+bwd", "fwd+bwd >= 1.2x, seqlen >= 1k", lambda c: c["seqlen"] >= 1024, 1.2),
]


def provenance_line(path: str, results: dict) -> str:
    """Which code a file measured, and whether it is the tree's kernels."""
    p = results.get("provenance", {})
    sha, tree = p.get("kernels_sha256", ""), kernels_sha256()
    which = ("the tree's kernels" if sha == tree else
             f"not the tree's kernels ({tree[:12]})" if sha else "kernels not recorded")
    return (f"{os.path.basename(path)}: {p.get('date', '?')}, git {p.get('git_commit', '?')}, "
            f"kernels {sha[:12] or '?'}: {which}")


def ratios(results: dict) -> tuple[dict, dict]:
    """({target name: {cell description: FA2 / sdpa-flash or None}} for the targets whose mode
    the results hold, {(target name, cell description): clock text} for the cells whose run
    has clock samples of both)."""
    analysis = analyse_results(results, n_draws=10, seed=0)  # ratios only: no bootstrap
    found, clocks = {}, {}
    for mode, name, wanted, _ in TARGETS:
        if mode in analysis["modes"]:
            rows = [row for row in analysis["modes"][mode]["cells"] if wanted(row["cell"])]
            found[name] = {describe(row["cell"]): row["stats"].get(FA2, {}).get("ratio/sdpa-flash")
                           for row in rows}
            for row in rows:
                mhz = [row["stats"].get(n, {}).get("sm_mhz") for n in (FA2, "sdpa-flash")]
                if None not in mhz:
                    clocks[name, describe(row["cell"])] = (f"FA2 at {mhz[0]:.0f} MHz, "
                                                           f"sdpa-flash at {mhz[1]:.0f} MHz")
    return found, clocks


def check(path: str, found: dict, clocks: dict) -> None:
    for _, name, _, required in TARGETS:
        cells = found.get(name)
        if cells is None:
            continue
        met = sum(r is not None and r >= required for r in cells.values())
        print(f"{os.path.basename(path)}: {name}: {met} of {len(cells)} cells")
        for cell, ratio in cells.items():  # under their file's count, where they belong
            if ratio is None or ratio < required:
                shown = "not timed" if ratio is None else f"{ratio:.3f}x"
                clock = clocks.get((name, cell))
                print(f"  miss  {cell}: {shown}" + (f" ({clock})" if clock else ""))


def across(runs: dict) -> None:
    """runs: {path: ratios(path)[0]}."""
    for _, name, _, required in TARGETS:
        per_run = {p: r[name] for p, r in runs.items() if name in r}
        if len(per_run) < 2:
            continue
        cells = dict.fromkeys(c for r in per_run.values() for c in r)
        missed = [c for c in cells if any(r.get(c) is None or r[c] < required
                                          for r in per_run.values() if c in r)]
        print(f"{name}, across {len(per_run)} runs: {len(missed)} cells missed in some run")
        for cell in missed:
            shown = [r[cell] for r in per_run.values() if cell in r]
            met = sum(x is not None and x >= required for x in shown)
            text = " ".join("-" if x is None else f"{x:.3f}" for x in shown)
            print(f"  {cell}: met in {met} of {len(shown)} runs ({text})")


def main(argv) -> int:
    paths = [a for a in argv if a != "--across"]
    if not paths or any(a.startswith("-") for a in paths):
        print(__doc__)
        return 0 if {"-h", "--help"} & set(argv) else 2
    runs = {}
    for p in paths:
        results = load(p)
        print(provenance_line(p, results))
        runs[p], clocks = ratios(results)
        check(p, runs[p], clocks)
    if "--across" in argv:
        across(runs)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
