"""The verdict of a verify run: a property x column table, failures with the command that
reproduces each, and the JSON report. Every cell comes from the records; nothing is typed."""
from __future__ import annotations

import json
import math
import os
import shlex

FAILED = ("fail", "error")


def cell(records: list[dict]) -> tuple[str, str]:
    """(status, text) of one table cell from its records."""
    if not records:
        return "none", "-"
    unsupported = sum(r["status"] == "unsupported" for r in records)
    if unsupported == len(records):
        return "unsupported", "[dim]n/a[/]"
    ratios = [r["ratio"] for r in records if r["ratio"] is not None]
    worst = f" {_ratio(max(ratios))}" if ratios else ""
    extra = f" [dim](+{unsupported} n/a)[/]" if unsupported else ""
    failed = sum(r["status"] in FAILED for r in records)
    if failed:
        return "fail", f"[red]FAIL{worst}[/] [dim]{failed}/{len(records) - unsupported}[/]{extra}"
    return "pass", f"[green]PASS{worst}[/]{extra}"


def _ratio(value: float) -> str:
    return "inf" if math.isinf(value) else f"{value:.2f}"


def table(records: list[dict], columns: list, property_names: list[str], title: str):
    from rich.markup import escape
    from rich.table import Table

    t = Table(title=escape(title))
    t.add_column("property")
    for column in columns:
        t.add_column(escape(_header(column.label)), justify="right")
    for name in property_names:
        cells = [cell([r for r in records if r["property"] == name and r["column"] == c.label])[1]
                 for c in columns]
        t.add_row(name, *cells)
    return t


def markdown(report: dict) -> str:
    """The verdict table of a saved --json report as markdown (for the README)."""
    from rich.text import Text

    labels = [c["label"] for c in report["columns"]]
    lines = ["| property | " + " | ".join(labels) + " |", "|---" * (len(labels) + 1) + "|"]
    for name in report["properties"]:
        cells = [Text.from_markup(cell([r for r in report["results"]
                                        if r["property"] == name and r["column"] == label])[1]).plain
                 for label in labels]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


LEGEND = ("[dim]PASS/FAIL and the worst error/allowed ratio over a cell's cases (1.0 is the edge; "
          "exact checks have none); FAIL a/b: a of b cases failed; n/a: the implementation "
          "does not support the case.[/]")


def _header(label: str) -> str:
    """'+defer-seqpar+splitq' -> three lines, so that eight variants fit side by side."""
    for flag in ("+seqpar", "-seqpar", "+splitq", "-splitq"):
        label = label.replace(flag, "\n" + flag)
    return label


def reproduce(record: dict, tier: str, seed: int, forward_only: bool) -> str:
    args = ["python", "-m", "fa2check.verify", f"--tier={tier}", f"--property={record['property']}"]
    if record["impl"] != "kernels:flash_attention":
        args.append(f"--impl={record['impl']}")
    args += [f"--variant={record['variant']}", f"--case={record['case']['id']}"]
    if seed:
        args.append(f"--seed={seed}")
    if forward_only:
        args.append("--forward-only")
    return " ".join(shlex.quote(a) for a in args)


def failure_lines(records: list[dict]) -> list[str]:
    from rich.markup import escape

    lines = []
    for r in records:
        if r["status"] in FAILED:
            text = (f"{r['property']} [{r['column']}] {r['case']['id']}: {r['message']}\n"
                    f"  {r['reproduce']}")
            lines.append(f"[red]{r['status'].upper()}[/] " + escape(text))
    return lines


def write_json(path: str, report: dict):
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w") as f:
        json.dump(report, f, indent=1, allow_nan=True, default=str)
