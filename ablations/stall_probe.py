"""What holds a kernel back, read from the hardware counters: run under Nsight Compute, which
profiles only the one call of each case made between cudaProfilerStart and Stop.

    ncu --clock-control none --profile-from-start off --section SpeedOfLight \
        --section ComputeWorkloadAnalysis --section SchedulerStats --section WarpStateStats \
        --section Occupancy --csv --page details \
        python3 ablations/stall_probe.py CASE ... [--mode fwd|fwd+bwd] > stalls.csv

CASE as in launch_cost_probe.py (`SEQLEN,D,causal|full,fa2[:field=value,...]` or an SDPA
backend). Each case's call runs twice first (compiling, warming), then once profiled.
`--clock-control none` leaves the GPU's clocks as they are (never lock them on our machines).
"""
import argparse
import contextlib
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from launch_cost_probe import make_case  # noqa: E402
from fa2check.sdpa_backends import forced  # noqa: E402


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("cases", nargs="+")
    parser.add_argument("--mode", choices=("fwd", "fwd+bwd"), default="fwd")
    args = parser.parse_args()
    for spec in args.cases:
        call, backend = make_case(spec, args.mode)
        with forced(backend) if backend else contextlib.nullcontext():
            call()
            call()
            torch.cuda.synchronize()
            torch.cuda.profiler.start()
            call()
            torch.cuda.synchronize()
            torch.cuda.profiler.stop()
        print(f"profiled {spec} ({args.mode})", file=sys.stderr, flush=True)


if __name__ == "__main__":
    main()
