"""python -m fa2check.verify: every property against every variant, one verdict.

Runs each property (properties/) on its cases for the tier, for each column: our kernels' 8
variants by default (on a GPU also the Hopper chassis's lattice on sm_90, the Gluon forward's 8
variants on any other), or the implementations given with --impl. Prints a table property x
column (PASS/FAIL/ERROR and the worst error ratio) with a legend, each failure in words (what
was expected, what came out) with a command that reproduces just that case, writes every
case's numbers with the seed and the environment to --json, and exits non-zero iff a check
fails (an implementation that cannot run a case is reported n/a).

Tiers: quick (the default without a GPU: tiny problems for Triton's CPU interpreter) and full
(the default with a GPU: sequences up to 16k, every dtype and head_dim).
"""
from __future__ import annotations

import argparse
import os
import sys
import time

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from properties import PROPERTIES

from ..core.environment import describe_environment, select_device
from ..core.hints import fix_for
from ..core.implementations import columns as make_columns
from ..core.implementations import default_specs
from ..core.interrupts import sigterm_as_interrupt
from ..core.results import read_json, write_json
from . import runner, verdicts


def parse_args(argv=None):
    parser = argparse.ArgumentParser(prog="python -m fa2check.verify", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tier", choices=("quick", "full"), default=None,
                        help="default: full with a GPU, quick without")
    parser.add_argument("--impl", action="append", default=None, metavar="MODULE:FUNC",
                        help="implementation to verify (repeatable): MODULE:FUNC with "
                             "flash_attention's signature, 'ours', 'gluon' (ours with the Gluon "
                             "forward), 'hopper' (the sm_90 chassis), 'sdpa' (ours and torch "
                             "SDPA's four backends), 'flex' (torch's flex_attention, compiled) "
                             "or one of sdpa_flash, sdpa_cudnn, sdpa_efficient, sdpa_math; default: ours, "
                             "and on a GPU also hopper on sm_90, gluon on any other")
    parser.add_argument("--layout", choices=("bhsd", "bshd"), default="bhsd",
                        help="the layout of q, k, v and o that the MODULE:FUNC implementations "
                             "take: bhsd (batch, heads, seqlen, head_dim; torch SDPA's) or bshd "
                             "(batch, seqlen, heads, head_dim; flash-attention's); lse is "
                             "(batch, heads, seqlen_q) in both")
    parser.add_argument("--variant", action="append", default=None,
                        help="variant such as +defer+seqpar+splitq, or fa2/fa1 (repeatable; "
                             "default: all 8 for ours, FA2's for other implementations)")
    parser.add_argument("--property", action="append", default=None, help="repeatable")
    parser.add_argument("--case", action="append", default=None, help="case id (repeatable)")
    parser.add_argument("--seed", type=int, default=0, help="added to every case's seed")
    parser.add_argument("--forward-only", action="store_true", help="skip every backward check")
    parser.add_argument("--jobs", type=int, default=None,
                        help="worker processes (default: one per CPU core, up to 16)")
    parser.add_argument("--json", dest="json_path", default=None, help="write every case here")
    parser.add_argument("--commit", help="git commit to record in --json where the checkout has "
                        "no .git or a stale one (as fa2check.ablate --commit)")
    parser.add_argument("--list", action="store_true", help="list the tier's cases and exit")
    parser.add_argument("--from", dest="from_path", default=None, metavar="REPORT",
                        help="print a saved --json report's verdict table as markdown and exit")
    return parser.parse_args(argv)


LOG_EVERY_S = 15


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.from_path:
        print(verdicts.markdown(read_json(args.from_path)))  # X.json or its compressed X.json.gz
        return 0
    device = select_device()  # sets TRITON_INTERPRET before triton is imported

    console = Console(width=None if sys.stdout.isatty() else 200)
    tier = args.tier or ("full" if device == "cuda" else "quick")
    if args.list:
        for name in args.property or PROPERTIES:
            for case in PROPERTIES[name].CASES[tier]:
                console.print(f"{name}  {case.with_seed_offset(args.seed).id}", soft_wrap=True)
        return 0
    columns = load_columns(args.impl or default_specs(device), args.variant, args.layout)
    names = args.property or list(PROPERTIES)
    tasks = runner.plan(tier, columns, names, args.case, args.seed, args.forward_only)
    jobs = args.jobs or min(os.cpu_count() or 1, 16)

    started, records, timeline = time.time(), [], {}
    sigterm_as_interrupt()  # `timeout` and job schedulers send SIGTERM
    interrupted = False
    logged = [started]  # without a terminal (a log file), a line every LOG_EVERY_S instead
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                  TimeElapsedColumn(), console=console, transient=True) as progress:
        bar = progress.add_task(f"verify ({tier}, {device}, {jobs} jobs)", total=len(tasks))

        def advance(record):
            record["reproduce"] = verdicts.reproduce(record, tier, args.seed, args.forward_only)
            records.append(record)
            progress.advance(bar)
            if not console.is_terminal and time.time() - logged[0] >= LOG_EVERY_S:
                logged[0] = time.time()
                console.print(f"verify: {len(records)} of {len(tasks)} cases, "
                              f"{logged[0] - started:.0f} s")

        try:
            runner.execute(tasks, device, jobs, advance, timeline)
        except KeyboardInterrupt:
            interrupted = True
    elapsed = time.time() - started
    if interrupted:
        console.print(f"[red]interrupted after {elapsed:.0f} s: {len(records)} of {len(tasks)} "
                      "cases ran; the verdict below covers only those[/]")

    title = f"fa2check verify: {tier} tier on {device}, {len(tasks)} cases, {elapsed:.0f} s"
    console.print(verdicts.table(records, columns, names, title))
    for line in verdicts.legend(columns, names):
        console.print(line, soft_wrap=True)
    console.print(verdicts.LEGEND, soft_wrap=True)
    for line in verdicts.lse_lines(records) + verdicts.failure_lines(records):
        console.print(line, soft_wrap=True)
    counts = {status: sum(r["status"] == status for r in records)
              for status in ("pass", "fail", "error", "unsupported")}
    console.print(", ".join(f"{n} {s}" for s, n in counts.items() if n) + f" ({elapsed:.0f} s)")
    if timeline.get("precompile_jobs"):
        console.print(f"precompile: {timeline['precompile_jobs']} jobs, the last done at "
                      f"{timeline['precompile_s']:.0f} s; the cases beside them until "
                      f"{timeline['cases_s']:.0f} s")
        slowest = timeline.get("precompile", [])[:3]
        if slowest:
            console.print("slowest compile jobs: " + "; ".join(map(_job_words, slowest)),
                          soft_wrap=True)
    if timeline.get("gpu_budget"):
        budget = timeline["gpu_budget"]
        console.print(f"GPU memory budget: {budget['budget_bytes'] / 2**30:.1f} GiB for "
                      f"{budget['workers']} workers", soft_wrap=True)
    if args.json_path:
        write_json(args.json_path, {
            "environment": describe_environment(device, commit=args.commit), "tier": tier,
            "seed": args.seed,
            "command": " ".join([os.path.basename(sys.executable), "-m", "fa2check.verify",
                                 *(sys.argv[1:] if argv is None else argv)]),
            "jobs": jobs, "seconds": elapsed, "timeline": timeline, "columns": [c.__dict__ for c in columns],
            "properties": names, "counts": counts, "interrupted": interrupted,
            "results": records})
        console.print(f"wrote {args.json_path}")
    return 1 if counts["fail"] or counts["error"] or interrupted else 0


def load_columns(specs, variants, layout):
    """The run's columns; an --impl that does not load exits with what to change."""
    try:
        return make_columns(specs, variants, layout)
    except (ImportError, AttributeError) as error:
        spec = next((s for s in specs if ":" in s and s.partition(":")[0] in str(error)),
                    next((s for s in specs if ":" in s), ""))
        fix = fix_for(error, spec)
        raise SystemExit(f"--impl {spec}: {type(error).__name__}: {error}"
                         + (f"\n  fix: {fix}" if fix else "")) from None


def _job_words(job: dict) -> str:
    """A precompile job of the timeline (fa2check.core.compiling.summary) in one phrase."""
    dims = (f"d{job['head_dim']}" if job["head_dim_v"] == job["head_dim"]
            else f"d{job['head_dim']}/{job['head_dim_v']}")
    return (f"{job['seconds']:.0f} s {'+'.join(job['impls'])} {job['variant']} {job['dtype']} "
            f"{dims} {'causal' if job['causal'] else 'full'}"
            f"{' with backward' if job['backward'] else ''}")

