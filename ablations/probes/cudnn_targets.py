"""Question: where does a run stand against issue 52's targets? (D105, D106)

Issue 52's targets, checked against saved ablation results (no GPU needed):

    python ablations/probes/cudnn_targets.py ablations/results/A.json [B.json ...]

Each cell's times are the medians of its samples, every sweep pooled. For every file:
- forward, the fastest of ours (any of our kernels with FA2's three flags, switches included,
  and `api`) against torch SDPA's cuDNN backend, bf16 from 2k: geometric mean >= 1.05x, no
  cell below 0.95x; and d=128 full 8k >= 680 TFLOP/s;
- fwd+bwd through `flash_attention` (`api`) against cuDNN, bf16 from 2k: geometric mean >=
  0.95x, no cell below 0.85x; and the same for the FA2 of record, which the API runs where the
  table of fastest kernels picks it (a run timed with the previous table has its API lag it);
- the FA2 of record (the lattice's FA2: the chassis's where the run timed it) against torch
  SDPA's FlashAttention-2 (`sdpa-flash`), every cell, forward and fwd+bwd: >= 1.0x.
A target whose contenders the run did not time is not printed; each miss is listed under it.
Then, where the run timed both modes, the FA2 of record's backward against cuDNN's by cell (bf16
from 2k), each backward taken as the cell's fwd+bwd median less its forward median: where the
fwd+bwd gap is, in the forward or the backward.
"""
import math
import os
import sys

sys.path.insert(0, os.getcwd())
from fa2check.ablate.contenders import API, PEERS, parse_kernel_name  # noqa: E402
from fa2check.ablate.grids import Cell  # noqa: E402
from fa2check.ablate.report import cell_words as describe  # noqa: E402
from fa2check.ablate.results import load  # noqa: E402
from fa2check.ablate.timing import summary, tflops  # noqa: E402

CUDNN, FLASH = "sdpa-cudnn", "sdpa-flash"


def medians(results: dict) -> dict:
    """{(mode, cell as a dict's items): {contender: median ms}} (every sweep pooled, as the
    tables' medians)."""
    return {(mode, tuple(entry["cell"].items())): {
                name: summary(sweeps)["median"]
                for name, sweeps in info.get("samples", {}).items() if any(sweeps)}
            for entry in results["cells"] for mode, info in entry["modes"].items()}


def ours_fa2(name: str) -> bool:
    """One of our kernels with FA2's three flags (any Hopper switches), or the API's call."""
    from kernels import Variant

    return name == API or name not in PEERS and parse_kernel_name(name)[1].fa2 == Variant()


def against(times: dict, mode: str, ours, peer: str, wanted) -> dict:
    """{cell description: peer's time / ours'} over the cells of `mode` that `wanted` keeps and
    that timed both (ours: a contender's name, or a function of the cell's times)."""
    found = {}
    for (m, items), t in times.items():
        cell = dict(items)
        mine = ours(t) if callable(ours) else t.get(ours)
        if m == mode and wanted(cell) and mine and peer in t:
            found[describe(cell)] = t[peer] / mine
    return found


def report(name: str, ratios: dict, floor: float, mean: float | None = None) -> None:
    if not ratios:
        return
    gm = math.exp(sum(map(math.log, ratios.values())) / len(ratios))
    misses = {c: r for c, r in ratios.items() if r < floor}
    head = f"geometric mean {gm:.3f}x" + (f" (target {mean}x: {'met' if gm >= mean else 'missed'})"
                                          if mean else "")
    print(f"{name}: {head}; {len(ratios) - len(misses)} of {len(ratios)} cells >= {floor}x")
    for cell, r in sorted(misses.items(), key=lambda item: item[1]):
        print(f"  miss  {cell}: {r:.3f}x")


def check(results: dict) -> None:
    times = medians(results)
    bf16_from_2k = lambda c: c["dtype"] == "bfloat16" and c["seqlen"] >= 2048  # noqa: E731
    fastest = lambda t: min((ms for n, ms in t.items() if ours_fa2(n)), default=None)  # noqa: E731
    report("forward, the fastest of ours / cuDNN, bf16 from 2k",
           against(times, "fwd", fastest, CUDNN, bf16_from_2k), 0.95, 1.05)
    for (mode, items), t in times.items():
        cell = dict(items)
        if (mode == "fwd" and cell["head_dim"] == 128 and not cell["causal"]
                and cell["seqlen"] == 8192 and cell["dtype"] == "bfloat16" and fastest(t)):
            rate = tflops(Cell(**cell).flops("fwd"), fastest(t))
            print(f"forward, the fastest of ours, d=128 full 8k bf16: {rate:.0f} "
                  f"TFLOP/s (target 680: {'met' if rate >= 680 else 'missed'})")
    report("fwd+bwd, flash_attention (api) / cuDNN, bf16 from 2k",
           against(times, "fwd+bwd", API, CUDNN, bf16_from_2k), 0.85, 0.95)
    fa2 = ("hopper" if results.get("settings", {}).get("kernels") == "hopper" else "") + \
        "+defer+seqpar+splitq"
    report(f"fwd+bwd, the FA2 of record ({fa2}) / cuDNN, bf16 from 2k (what `flash_attention` "
           "gives where the table of fastest kernels picks it)",
           against(times, "fwd+bwd", fa2, CUDNN, bf16_from_2k), 0.85, 0.95)
    backward = {}
    for (mode, items), t in times.items():
        cell = dict(items)
        forward = times.get(("fwd", items), {})
        if mode == "fwd+bwd" and bf16_from_2k(cell) and all(
                name in t and name in forward for name in (fa2, CUDNN)):
            backward[describe(cell)] = ((t[CUDNN] - forward[CUDNN])
                                        / (t[fa2] - forward[fa2]))
    if backward:
        print("backward (fwd+bwd less fwd), the FA2 of record / cuDNN, bf16 from 2k, by cell:")
        for cell, r in sorted(backward.items(), key=lambda item: item[1]):
            print(f"  {cell}: {r:.3f}x")
    for mode in ("fwd", "fwd+bwd"):
        report(f"{mode}, the FA2 of record ({fa2}) / torch's FlashAttention-2, every cell",
               against(times, mode, fa2, FLASH, lambda c: True), 1.0)


def main(argv) -> int:
    if not argv or any(a.startswith("-") for a in argv):
        print(__doc__)
        return 0 if {"-h", "--help"} & set(argv) else 2
    for path in argv:
        results = load(path)
        p = results.get("provenance", {})
        print(f"{os.path.basename(path)}: {p.get('gpu', '?')}, {p.get('date', '?')}, "
              f"git {p.get('git_commit', '?')}")
        check(results)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
