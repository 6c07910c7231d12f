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
import gzip
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


def sass_samples(path: Path, top: int = 12) -> list[dict]:
    """Per kernel of an ncu source page (SASS; .csv or .csv.gz): its warp samples, their
    fraction by opcode, and the `top` instructions with the most (fraction, address, SASS).
    ncu prints one table a kernel, each after a "Kernel Name" row and its own header row."""
    text = gzip.open(path, "rt").read() if path.suffix == ".gz" else path.read_text()
    kernels, header = [], None
    for row in csv.reader(line for line in text.splitlines() if line.startswith('"')):
        if row[:1] == ["Kernel Name"]:
            kernels.append({"kernel": row[1], "rows": []})
        elif "Source" in row:
            header = row
        elif header and kernels and len(row) >= len(header):
            kernels[-1]["rows"].append(dict(zip(header, row)))
    for k in kernels:
        rows = k.pop("rows")
        col = next(c for c in rows[0] if "Sampling (All Samples)" in c)
        counted = sorted(((float(r[col].replace(",", "") or 0), r) for r in rows),
                         key=lambda cr: -cr[0])
        total = sum(n for n, _ in counted) or 1.0
        by_op = {}
        for n, r in counted:
            words = r["Source"].split() or ["?"]
            op = words[words[0].startswith("@") and len(words) > 1].split(".")[0]  # past @P0
            by_op[op] = by_op.get(op, 0.0) + n / total
        k.update(samples=int(total), by_op=dict(sorted(by_op.items(), key=lambda kv: -kv[1])),
                 top=[(n / total, r["Address"], r["Source"].strip()) for n, r in counted[:top]])
    return kernels


def print_sass_samples(kernels: list[dict]) -> None:
    for k in kernels:
        print(f"{k['kernel'][:60]}: {k['samples']} warp samples")
        print("  " + ", ".join(f"{op} {100 * f:.1f}%" for op, f in list(k["by_op"].items())[:12]))
        for f, address, source in k["top"]:
            print(f"  {100 * f:5.1f}%  {address}  {source[:70]}")


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
                        help="where the warps wait: an ncu --csv --page source --print-source sass file "
                             "(.csv or .csv.gz)")
    args = parser.parse_args()
    if args.sass_samples:
        print_sass_samples(sass_samples(args.sass_samples))
    elif args.summarize:
        print_table(summarize(args.summarize))
    elif args.cases:
        profile(args.cases, args.mode)
    else:
        parser.error("give CASEs to profile (under ncu) or --summarize CSV")


if __name__ == "__main__":
    main()
