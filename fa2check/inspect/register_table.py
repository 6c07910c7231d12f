"""The compile gate's registers and spills as a markdown table, a row per head_dim and variant.

    python -m fa2check.compile_gate --dtype bfloat16 --head-dims 40,80,96,160,192 --json gate.json
    python -m fa2check.inspect.register_table gate.json

A column per kernel and mask (attn_fwd, attn_fwd causal, ..., attn_bwd causal); a cell is the
registers per thread, then the blocks one SM can hold (an occupancy bound from the compile
facts, `compile_gate.ctas_per_sm`) where the report has it, the spill bytes stored/loaded where
ptxas spilled, and "no wgmma" where the PTX has no Hopper warpgroup MMA. Every kernel reads
split_q (the backward since docs/decisions.md D50), so each row shows its own variant's kernels.
"""
from __future__ import annotations

import argparse
import json
import sys


KERNEL_ORDER = ("attn_fwd", "attn_fwd_repair", "attn_fwd_grad", "attn_bwd", "gluon_attn_fwd",
                "hopper_attn_fwd")


def cell(report: dict | None) -> str:
    """'184, 2 CTAs/SM', '255, 1 CTA/SM, 204/324 spilled', '250, no wgmma', 'failed' or ''
    (no such case)."""
    if report is None:
        return ""
    if report.get("error"):
        return "failed"
    text = str(report.get("registers"))
    if report.get("ctas_per_sm") is not None:  # None: not known (older JSON, setmaxnreg)
        ctas = report["ctas_per_sm"]
        text += f", {ctas} CTA{'' if ctas == 1 else 's'}/SM"
    if report.get("spill_stores") or report.get("spill_loads"):
        text += f", {report['spill_stores']}/{report['spill_loads']} spilled"
    if report.get("wgmma") is False:  # None: not known
        text += ", no wgmma"
    return text


def markdown(reports: list[dict]) -> str:
    """The table (see the module docstring); one dtype per table, so the dtype goes in its title
    when there are several."""
    cases = {(r["kernel"], r["variant"], r["dtype"], _dims(r), r["causal"]): r for r in reports}
    columns = sorted({(r["kernel"], r["causal"]) for r in reports},
                     key=lambda c: (KERNEL_ORDER.index(c[0]) if c[0] in KERNEL_ORDER else 99,
                                    c[0], c[1]))
    variants = list(dict.fromkeys(r["variant"] for r in reports))  # the order the gate used
    lines = []
    for dtype in dict.fromkeys(r["dtype"] for r in reports):
        header = ["D", "variant"] + [f"{k}{' causal' if causal else ''}" for k, causal in columns]
        lines += [f"{dtype}: registers per thread, CTAs per SM (occupancy bound), "
                  "spill bytes stored/loaded", "",
                  "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
        for head_dim in sorted({_dims(r) for r in reports if r["dtype"] == dtype}):
            for variant in variants:
                cells = []
                for kernel, causal in columns:
                    found = cases.get((kernel, variant, dtype, head_dim, causal))
                    cells.append(cell(found))
                if any(cells):
                    label = "/".join(str(d) for d in dict.fromkeys(head_dim))
                    lines.append("| " + " | ".join([label, variant] + cells) + " |")
        lines.append("")
    return "\n".join(lines).rstrip() + "\n"


def _dims(report: dict) -> tuple[int, int]:
    """(q's head dim, v's): a row's key; v's is q's where the report has none."""
    return report["head_dim"], report.get("head_dim_v") or report["head_dim"]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m fa2check.inspect.register_table",
                                description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("json", help="the file the compile gate wrote with --json")
    args = p.parse_args(argv)
    with open(args.json) as f:
        reports = json.load(f)
    print(markdown(reports), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())

