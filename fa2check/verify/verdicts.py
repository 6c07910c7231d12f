"""The verdict of a verify run: a property x column table with its legend, failures in words
(what was expected, what came out) with the command that reproduces each.
Every cell comes from the records; nothing is typed."""
from __future__ import annotations

import math
import re
import shlex

from rich.markup import escape
from rich.table import Table
from rich.text import Text

from ..core.explain import format_ratio
from ..core.implementations import FLEX

FAILED = ("fail", "error")


def cell(records: list[dict]) -> tuple[str, str]:
    """(status, text) of one table cell from its records: 'PASS 0.56' (the worst error/allowed
    ratio), 'FAIL 2/3' (cases that failed of those run, with the worst ratio when it is over
    1: '2/3, error 1.6e+06x allowed'), 'ERROR 3/3' (the implementation raised), 'n/a'."""
    if not records:
        return "none", "-"
    unsupported = sum(r["status"] == "unsupported" for r in records)
    if unsupported == len(records):
        return "unsupported", "[dim]n/a[/]"
    ran = len(records) - unsupported
    ratios = [r["ratio"] for r in records if r["ratio"] is not None]
    extra = f" [dim](+{unsupported} n/a)[/]" if unsupported else ""
    if any(r.get("lse_missing") and r["status"] in ("pass", "fail") for r in records):
        extra += " [dim](lse n/a)[/]"
    failed = sum(r["status"] == "fail" for r in records)
    errors = sum(r["status"] == "error" for r in records)
    if failed or errors:
        parts = []
        if failed:
            worst = max(ratios, default=0.0)
            over = (", NaN/inf out of place" if math.isinf(worst) else
                    f", error {format_ratio(worst)}x allowed" if worst > 1 else "")
            parts.append(f"[red]FAIL[/] {failed}/{ran}{over}")
        if errors:
            parts.append(f"[red]ERROR[/] {errors}/{ran}")
        return ("error" if errors and not failed else "fail"), "; ".join(parts) + extra
    worst = f" {format_ratio(max(ratios))}" if ratios else ""
    return "pass", f"[green]PASS{worst}[/]{extra}"


def table(records: list[dict], columns: list, property_names: list[str], title: str):
    t = Table(title=escape(title), min_width=len(title) + 4)
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
    labels = [c["label"] for c in report["columns"]]
    lines = ["| property | " + " | ".join(labels) + " |", "|---" * (len(labels) + 1) + "|"]
    for name in report["properties"]:
        cells = [Text.from_markup(cell([r for r in report["results"]
                                        if r["property"] == name and r["column"] == label])[1]).plain
                 for label in labels]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


LEGEND = ("[dim]PASS and the worst error/allowed ratio over a cell's cases (1.0 is the edge; "
          "exact checks have none); FAIL a/b: a of the b cases run failed a check; ERROR a/b: "
          "the implementation raised; n/a: it does not support the case (it raised "
          "NotImplementedError); lse n/a: it returns no lse.[/]")

# what each property checks, in a few words (the legend's rows line; docs/correctness.md says more)
PROPERTY_WORDS = {
    "lse_bounds": "lse is the natural-log logsumexp, max S <= lse <= max S + log n",
    "extreme_logits": "logits up to 1e5 and down to -5e4 stay finite and accurate",
    "causal_masking": "bottom-right causal mask; keys a row cannot see never reach it, and "
                      "non-finite V reaches the rows that see it, in its own columns",
    "gqa_reduction": "GQA/MQA read the right K/V head and sum dK/dV over each group",
    "variant_equivalence": "flipping one switch leaves the results equal",
    "determinism": "repeated calls give the same bits",
    "memory_safety": "strided and padded inputs give the results of contiguous ones and are "
                     "left unchanged",
}
SWITCH_WORDS = ("defer = defer_norm (divide by the softmax sum once, at the end), "
                "seqpar = seq_parallel (one program per query block), "
                "splitq = split_q (split the queries over warps, not the keys)")


def legend(columns: list, property_names: list[str]) -> list[str]:
    """Two lines under the table: what the column names and the property names mean."""
    kinds = []
    if any(c.ours for c in columns):
        kinds.append(f"+ on, - off: {SWITCH_WORDS}; +defer+seqpar+splitq is FA2, "
                     "-defer-seqpar-splitq the FA1-style baseline")
    labels = [c.label for c in columns]
    if any(label.startswith("gluon ") for label in labels):
        kinds.append("gluon: our forward written in Gluon")
    if any(label.startswith("hopper ") for label in labels):
        kinds.append("hopper: the wgmma/TMA chassis for sm_90 (forward; backward where it "
                     "takes the call)" + ("; -warpspec, +pingpong, +overlap: FA2 without its "
                                          "producer warp / with FlashAttention-3's ping-pong "
                                          "turns (forward only) / softmax under the previous "
                                          "P V, in the backward P under dP (D59, D85-D87)"
                                          if any(s in c.variant for c in columns for s in
                                                 ("-warpspec", "+pingpong", "+overlap"))
                                          else ""))
    if any(label.startswith("sdpa_") for label in labels):
        kinds.append("sdpa_*: torch SDPA's backend of that name, forced alone")
    if any(c.impl == FLEX for c in columns):
        kinds.append("flex: torch's flex_attention under torch.compile")
    others = [f"{c.label} = {c.impl}" + (f" in layout {c.layout}" if c.layout != "bhsd" else "")
              for c in columns
              if not c.ours and not c.label.startswith("sdpa_") and c.impl != FLEX]
    if others:
        kinds.append(", ".join(dict.fromkeys(others)) + " (given with --impl)")
    rows = "; ".join(f"{name}: {PROPERTY_WORDS.get(name, 'see properties/' + name + '.py')}"
                     for name in property_names)
    return [f"[dim]columns: {'; '.join(kinds)}.[/]", f"[dim]rows: {rows}.[/]"]


def _header(label: str) -> str:
    """'+defer-seqpar+splitq' -> three lines, so that eight variants fit side by side."""
    for flag in ("+seqpar", "-seqpar", "+splitq", "-splitq"):
        label = label.replace(flag, "\n" + flag)
    return label


def reproduce(record: dict, tier: str, seed: int, forward_only: bool) -> str:
    args = ["python", "-m", "fa2check.verify", f"--tier={tier}", f"--property={record['property']}"]
    if record["impl"] != "kernels:flash_attention":
        args.append(f"--impl={record['impl']}")
    if record.get("layout", "bhsd") != "bhsd":
        args.append(f"--layout={record['layout']}")
    if record.get("variant") is not None:  # None: the implementation takes no variant
        args.append(f"--variant={record['variant']}")
    args.append(f"--case={record['case']['id']}")
    if seed:
        args.append(f"--seed={seed}")
    if forward_only:
        args.append("--forward-only")
    return " ".join(shlex.quote(a) for a in args)


def lse_lines(records: list[dict]) -> list[str]:
    """A line for each column whose implementation returned no lse: why, and what was not
    checked (fa2check.core.calling)."""
    why = {}
    for r in records:
        if r.get("lse_missing"):
            why.setdefault(r["column"], r["lse_missing"])
    return ["[yellow]no lse[/] " + escape(f"[{column}] {reason}: lse_bounds and the lse parts "
                                          "of the other checks are n/a; o and its gradients "
                                          "are checked (to have lse checked too, return "
                                          "(o, lse) when called with return_lse=True)")
            for column, reason in why.items()]


def failure_lines(records: list[dict]) -> list[str]:
    """Each failed case with what was expected and what came out, and its command; an
    implementation that raised is shown once per (column, message), with how many cases and
    the line saying what to change (`fix`) where there is one."""
    lines, raised = [], {}
    for r in records:
        if r["status"] == "error":  # one line per kind of error: shapes and numbers aside
            raised.setdefault((r["column"], re.sub(r"\d+", "N", r["message"])), []).append(r)
        elif r["status"] == "fail":
            text = (f"{r['property']} [{r['column']}] {r['case']['id']}: {r['message']}\n"
                    f"  {r['reproduce']}")
            lines.append("[red]FAIL[/] " + escape(text))
    for (column, _), group in raised.items():
        n = len(group)
        cases = "1 case" if n == 1 else f"{n} cases"
        first = group[0]
        message = first["message"] + (" (shapes vary)" if len({g["message"] for g in group}) > 1
                                      else "")
        fix = f"\n  fix: {first['fix']}" if first.get("fix") else ""
        text = (f"[{column}] raised in {cases} ({', '.join(sorted({g['property'] for g in group}))}"
                f"): {message}{fix}\n  first: {first['reproduce']}")
        lines.append("[red]ERROR[/] " + escape(text))
    return lines
