"""Question (issue 32, item 5): does `flash_attention(q, k, v)` with no config run at the speed of
the ablation's row of the kernel it runs (kernels.fastest's choice for the cell, on
`fa2check.ablate`'s tiles for it), within 3%?

Both calls are timed in alternating rounds on the same inputs (do_bench, L2 flushed), so drift
of clocks and power falls on both alike; the ratio is the median over rounds of
time(API) / time(FA2 row), with its quartiles. The tiles each call runs are printed too: equal
tiles and a ratio near 1 say the API is the table's kernel; equal tiles and a ratio away from 1
would point at the call path (host time), different tiles at the config lookup.

    python3 ablations/probes/api_vs_table.py --out DIR [--rounds 8] [--commit HASH]
"""
import argparse
import json
import os
import statistics
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from fa2check.ablate.grids import Cell, paper_batch, paper_heads  # noqa: E402
from fa2check.ablate.contenders import api_kernel, parse_kernel_name  # noqa: E402
from fa2check.ablate.sweep import Configs  # noqa: E402
from kernels import default_config, flash_attention  # noqa: E402
from probe_run import cell_inputs, provenance, time_ms  # noqa: E402

CELLS = [Cell(paper_batch(8192), paper_heads(128), paper_heads(128), 8192, 128, "bfloat16", c)
         for c in (False, True)]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--out", default=os.environ.get("OUT", "out"))
    p.add_argument("--rounds", type=int, default=8)
    p.add_argument("--commit")
    args = p.parse_args()
    configs = Configs({}, on_gpu=True)
    rows = []
    for cell in CELLS:
        q, k, v = cell_inputs(cell)
        kernel = api_kernel(cell, "fwd", configs.gpu)
        backend, variant = parse_kernel_name(kernel)
        table = configs.config(kernel, cell)
        api = default_config(128, True, variant, q.dtype, backend, causal=cell.causal,
                             seqlen_q=cell.seqlen, seqlen_k=cell.seqlen)
        calls = {"api": lambda: flash_attention(q, k, v, causal=cell.causal),
                 "table": lambda: flash_attention(q, k, v, causal=cell.causal, variant=variant,
                                                  config=table, backend=backend)}
        for fn in calls.values():  # compile
            fn()
        times = {name: [] for name in calls}
        for r in range(args.rounds):
            for name in (("api", "table") if r % 2 == 0 else ("table", "api")):
                times[name].append(time_ms(calls[name]))
        ratios = sorted(a / t for a, t in zip(times["api"], times["table"]))
        q1, _, q3 = statistics.quantiles(ratios, n=4) if len(ratios) > 1 else ratios * 3
        rows.append({"cell": str(cell), "kernel": kernel, "api_ms": times["api"], "table_ms": times["table"],
                     "ratio_median": statistics.median(ratios), "ratio_q25": q1,
                     "ratio_q75": q3, "same_tiles": api == table,
                     "api_config": api.__dict__, "table_config": table.__dict__})
        print(f"{cell}: API / {kernel} row {statistics.median(ratios):.3f} [{q1:.3f}, {q3:.3f}] over "
              f"{args.rounds} rounds; same tiles: {api == table}", flush=True)
    os.makedirs(args.out, exist_ok=True)
    path = Path(args.out) / "api_vs_table.json"
    path.write_text(json.dumps({"provenance": provenance(args.commit), "rows": rows}, indent=1))
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
