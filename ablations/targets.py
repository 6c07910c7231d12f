"""Issue 7's performance targets, checked against saved ablation results (no GPU needed):

    python ablations/targets.py ablations/results/A.json [B.json ...]

For every file and every mode it holds, FA2 (all three changes on) against torch SDPA's flash
backend in the same run, cell by cell: forward >= 1.3x at seqlen >= 1k and >= 1.5x at
head_dim 128, seqlen >= 4k; forward + backward >= 1.2x at seqlen >= 1k. Prints each miss and a
count per target.
"""
import os
import sys

sys.path.insert(0, os.getcwd())
from fa2check.analysis import analyse_results  # noqa: E402
from fa2check.results import load  # noqa: E402

FA2 = "+defer+seqpar+splitq"
# (mode, name, cell filter, required ratio to sdpa-flash)
TARGETS = [
    ("fwd", "fwd >= 1.3x, seqlen >= 1k", lambda c: c["seqlen"] >= 1024, 1.3),
    ("fwd", "fwd >= 1.5x, d=128, seqlen >= 4k",
     lambda c: c["head_dim"] == 128 and c["seqlen"] >= 4096, 1.5),
    ("fwd+bwd", "fwd+bwd >= 1.2x, seqlen >= 1k", lambda c: c["seqlen"] >= 1024, 1.2),
]


def check(path: str) -> None:
    analysis = analyse_results(load(path), n_draws=10, seed=0)  # ratios only: no bootstrap
    for mode, name, wanted, required in TARGETS:
        if mode not in analysis["modes"]:
            continue
        cells = [row for row in analysis["modes"][mode]["cells"] if wanted(row["cell"])]
        met = 0
        for row in cells:
            c = row["cell"]
            ratio = row["stats"].get(FA2, {}).get("ratio/sdpa-flash")
            if ratio is not None and ratio >= required:
                met += 1
                continue
            shown = "not timed" if ratio is None else f"{ratio:.3f}x"
            print(f"  miss  {name}: seqlen {c['seqlen']}, d={c['head_dim']}, {c['dtype']}, "
                  f"{'causal' if c['causal'] else 'full'}: {shown}")
        print(f"{os.path.basename(path)}: {name}: {met} of {len(cells)} cells")


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    for p in sys.argv[1:]:
        check(p)
