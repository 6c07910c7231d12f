"""Question: what holds a kernel back, by the hardware counters? (D14)

What holds a kernel back, read from the hardware counters: run under Nsight Compute, which
profiles only the one call of each case made between cudaProfilerStart and Stop.

    ncu --clock-control none --profile-from-start off --section SpeedOfLight \
        --section ComputeWorkloadAnalysis --section SchedulerStats --section WarpStateStats \
        --section Occupancy --section InstructionStats --csv --page details \
        python3 ablations/probes/stall_probe.py CASE ... [--mode fwd|fwd+bwd] > stalls.csv
    python3 ablations/probes/stall_probe.py --summarize stalls.csv      # one line per kernel

CASE as in launch_cost_probe.py (`SEQLEN,D,causal|full,fa2[:field=value,...]` or an SDPA
backend). Each case's call runs twice first (compiling, warming), then once profiled.
`--clock-control none` leaves the GPU's clocks as they are (never lock them on our machines).
--summarize needs no GPU: per kernel, duration, executed instructions, issue-slot use, warps
a scheduler holds and how many of them could issue, and the busiest pipe as ncu names it.
--sass-samples reads the SourceCounters section's per-instruction warp samples (`ncu -i REP
--csv --page source --print-source sass`): where each kernel's warps wait, by SASS opcode
(BAR: a named barrier, SYNCS: an mbarrier, WARPGROUP: a wgmma wait, ...), and its busiest
instructions.
"""
import argparse
import contextlib
import csv
import re
import sys
from pathlib import Path

COLUMNS = {  # ncu metric name -> column
    "Duration": "duration",
    "Executed Instructions": "instructions",
    "Issue Slots Busy": "issue busy",
    "Active Warps Per Scheduler": "warps/sched",
    "Eligible Warps Per Scheduler": "eligible",
}


def summarize(path: Path) -> list[dict]:
    """One row per profiled kernel, in profiling order."""
    lines = [line for line in path.read_text().splitlines() if line.startswith('"')]
    kernels = {}
    for record in csv.DictReader(lines):
        row = kernels.setdefault(record["ID"], {"kernel": record["Kernel Name"][:40]})
        name = COLUMNS.get(record["Metric Name"])
        if name:
            row[name] = f"{record['Metric Value']} {record['Metric Unit']}".strip()
        if record["Rule Name"] == "HighPipeUtilization":  # "X is the highest-utilized pipeline (p%)"
            found = re.match(r"(\w[\w ]*?) is the highest-utilized pipeline \(([\d.]+%)\)",
                             record["Rule Description"])
            if found:
                row["top pipe"] = f"{found.group(1)} {found.group(2)}"
    return list(kernels.values())


def sass_samples(path: Path, top: int = 12) -> None:
    """Per kernel in an ncu source page (SASS), the warp samples by opcode and the instructions
    with the most samples. ncu prints one table a kernel, each under its own header row."""
    rows = list(csv.reader(line for line in path.read_text().splitlines() if line.startswith('"')))
    tables, header = [], None
    for row in rows:
        if "Source" in row and any("Sampling" in c for c in row):
            header = row
            tables.append([])
        elif header and len(row) == len(header):
            tables[-1].append(dict(zip(header, row)))
    for n, table in enumerate(tables, 1):
        sample_cols = [c for c in table[0] if "Sampling" in c] if table else []
        if not sample_cols:
            continue
        col = sample_cols[0]  # all samples: issued and not
        count = lambda r: float(r[col].replace(",", "") or 0)  # noqa: E731
        total = sum(map(count, table)) or 1.0
        by_op = {}
        for r in table:
            words = r["Source"].split() or ["?"]
            op = words[words[0].startswith("@") and len(words) > 1].split(".")[0]  # past @P0
            by_op[op] = by_op.get(op, 0.0) + count(r)
        print(f"kernel {n}: {int(total)} samples ({col})")
        print("  " + ", ".join(f"{op} {100 * v / total:.1f}%" for op, v in
                               sorted(by_op.items(), key=lambda kv: -kv[1])[:12]))
        for r in sorted(table, key=count, reverse=True)[:top]:
            print(f"  {100 * count(r) / total:5.1f}%  {r.get('Address', '')}  {r['Source'][:70]}")


def print_table(rows: list[dict]) -> None:
    columns = ["kernel", *COLUMNS.values(), "top pipe"]
    widths = {c: max(len(c), *(len(r.get(c, "")) for r in rows)) for c in columns}
    print("  ".join(c.ljust(widths[c]) for c in columns))
    for row in rows:
        print("  ".join(row.get(c, "").ljust(widths[c]) for c in columns))


def profile(cases: list[str], mode: str) -> None:
    import torch

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from launch_cost_probe import make_case
    from fa2check.core.sdpa_backends import forced

    for spec in cases:
        call, backend = make_case(spec, mode)
        with forced(backend) if backend else contextlib.nullcontext():
            call()
            call()
            torch.cuda.synchronize()
            torch.cuda.profiler.start()
            call()
            torch.cuda.synchronize()
            torch.cuda.profiler.stop()
        print(f"profiled {spec} ({mode})", file=sys.stderr, flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("cases", nargs="*")
    parser.add_argument("--mode", choices=("fwd", "fwd+bwd"), default="fwd")
    parser.add_argument("--summarize", type=Path, metavar="CSV",
                        help="print one line per kernel of an ncu --csv --page details file")
    parser.add_argument("--sass-samples", type=Path, metavar="CSV",
                        help="where the warps wait: an ncu --csv --page source --print-source sass file")
    args = parser.parse_args()
    if args.sass_samples:
        sass_samples(args.sass_samples)
    elif args.summarize:
        print_table(summarize(args.summarize))
    elif args.cases:
        profile(args.cases, args.mode)
    else:
        parser.error("give CASEs to profile (under ncu) or --summarize CSV")


if __name__ == "__main__":
    main()
