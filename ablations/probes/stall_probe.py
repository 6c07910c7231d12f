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
    args = parser.parse_args()
    if args.summarize:
        print_table(summarize(args.summarize))
    elif args.cases:
        profile(args.cases, args.mode)
    else:
        parser.error("give CASEs to profile (under ncu) or --summarize CSV")


if __name__ == "__main__":
    main()
