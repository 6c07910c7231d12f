"""Question: with the "off" switches rebuilt after FA1 (seq_parallel off: K/V blocks outer, the
fp32 partial output round-tripping through HBM, one program per (batch, head); defer_norm
off: P scaled by 1/l_new before P V), what does each Triton variant reach, as a share of the
matmul rate measured in the same run, and what does FA1's num_splits heuristic add?

Prediction, written before the run: at d=128 bf16 1k-2k the (batch, head) grid has 256 and
128 programs for 132 SMs, so the FA1 schedule's extra HBM traffic (per head about
10 N^2 D / Bc bytes: Q read and the fp32 output read and written once per K/V block) is the
cost: at N = 2k, D = 128, Bc = 64 that is 10.7 GB for the 128 heads, about 2.5 ms at
4.3 TB/s, against 0.3-0.4 ms for FA2, so -seqpar variants several times slower than FA2
even where the grid fills the GPU; the heuristic cannot help there (128 programs already
fill one wave). From 8k (16 programs) the grid leaves most SMs idle, and the heuristic's
splits should recover a large part of that.

With --backend hopper the same rows for the Hopper chassis (kernels/hopper_forward.py), whose
FA1 schedule takes FA1's num_splits since D58: `+h` is then the labelled reference of FA1
with its splits (the variant of record since D90), beside one program a (batch, head).
Prediction for it, written before the run: as above, no change where the grid already fills
the SMs (d=128 1k-2k: 256 and 128 programs, one CTA an SM), and the splits recover most of the
idle SMs from 8k on.

    python3 ablations/probes/fa1_schedule.py --out DIR [--backend hopper]
    python3 ablations/probes/fa1_schedule.py --ncu-cell   # one launch, for Nsight Compute
"""
import argparse
import itertools
import json
import os
import sys
from dataclasses import replace
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from fa2check.ablate.grids import Cell, paper_batch, paper_heads  # noqa: E402
from fa2check.ablate.timing import tflops  # noqa: E402
from kernels import Variant, default_config, flash_attention  # noqa: E402
from kernels.plan.fa1_launch import with_fa1_grid  # noqa: E402
from probe_run import cell_inputs, header, matmul_tflops, provenance, time_ms  # noqa: E402

NCU_CELL = (2048, 128, False)  # seqlen, head_dim, causal




def dram_model_bytes(cell, config):
    """FA1 schedule's DRAM bytes (kernels/forward.py's model): K, V read and O written once; Q
    read and the fp32 partial output read and written once per K/V block after the first."""
    n, d, heads = cell.seqlen, cell.head_dim, cell.batch * cell.heads_q
    blocks = -(-n // config.block_n)
    per_head = 3 * n * d * 2 + blocks * n * d * 2 + 2 * (blocks - 1) * n * d * 4
    return heads * per_head


def render(path) -> str:
    """A saved run as markdown: % of the run's matmul rate per variant and cell."""
    data = json.loads(Path(path).read_text())
    names = list(data["cells"][0]["ms"])
    lines = [header(data) + " % of it, default tiles (`+h`: FA1's num_splits heuristic).", "",
             "| cell | " + " | ".join(n.replace(" fa1-heuristic-splits", " +h") for n in names)
             + " |", "|---|" + "---:|" * len(names)]
    for row in data["cells"]:
        pct = row["pct_of_matmul"]
        lines.append(f"| {Cell(**row['cell'])} | " + " | ".join(
            "error" if pct[n] is None else f"{pct[n]:.1f}%" for n in names) + " |")
    return "\n".join(lines)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default=os.environ.get("OUT", "out"))
    p.add_argument("--commit", help="the git commit to record (the device's copy has a stale .git)")
    p.add_argument("--seqlens", default="1024,2048,8192")
    p.add_argument("--head-dims", default="128,64")
    p.add_argument("--backend", choices=("triton", "hopper"), default="triton",
                   help="whose kernels: Triton's, or the Hopper chassis's forward")
    p.add_argument("--block-ns", default="",
                   help="with --backend hopper: also time the FA1-schedule variants at these K/V "
                        "tile widths (comma-separated, e.g. 128,256), labelled `bn=N`, where the "
                        "variant takes them and they differ from the default's")
    p.add_argument("--ncu-cell", action="store_true", help="run the FA1-schedule forward of "
                   f"{NCU_CELL} once (profile it with ncu) and print its model bytes")
    p.add_argument("--render", metavar="JSON", help="print a saved run as markdown and exit")
    args = p.parse_args()
    if args.render:
        print(render(args.render))
        return 0
    variant = Variant(False, False, True)
    if args.ncu_cell:
        n, d, causal = NCU_CELL
        cell = Cell(paper_batch(n), paper_heads(d), paper_heads(d), n, d, "bfloat16", causal)
        config = default_config(d, True, variant, torch.bfloat16)
        q, k, v = cell_inputs(cell)
        flash_attention(q, k, v, causal=causal, variant=variant, config=config)
        torch.cuda.synchronize()
        print(json.dumps(dict(cell=str(cell), config=str(config),
                              model_bytes=dram_model_bytes(cell, config))))
        return 0
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    run_provenance = provenance(args.commit)
    matmul = matmul_tflops()
    print(f"matmul bf16 8192^3: {matmul:.0f} TFLOP/s", flush=True)
    rows = []
    for d, causal, n in itertools.product(map(int, args.head_dims.split(",")), (False, True),
                                          map(int, args.seqlens.split(","))):
        cell = Cell(paper_batch(n), paper_heads(d), paper_heads(d), n, d, "bfloat16", causal)
        q, k, v = cell_inputs(cell)
        row = dict(cell=cell.as_dict(), ms={}, configs={})
        prefix = "" if args.backend == "triton" else args.backend
        # the (batch, heads) grid; `+h`: FA1's launcher, the default since D90
        runs = [(prefix + str(var), var, with_fa1_grid(default_config(
                    d, True, var, torch.bfloat16, args.backend, causal=causal), "batch-heads"))
                for var in Variant.all()]
        runs += [(name + " fa1-heuristic-splits", var, replace(config, fa1_splits=0))
                 for name, var, config in runs if not var.seq_parallel]
        if args.block_ns:
            from kernels.plan.hopper_forward import block_ns

            runs += [(f"{name} bn={n}", var, replace(config, block_n=n))
                     for n in map(int, args.block_ns.split(","))
                     for name, var, config in runs[:len(Variant.all())]
                     if not var.seq_parallel and n in block_ns(var) and n != config.block_n]
        for name, var, config in runs:
            try:
                row["ms"][name] = time_ms(lambda: flash_attention(
                    q, k, v, causal=causal, variant=var, config=config, backend=args.backend))
                row["configs"][name] = str(config)
            except Exception as e:  # noqa: BLE001 - a row that cannot run is reported
                row["ms"][name] = None
                row["configs"][name] = f"{type(e).__name__}: {str(e)[:200]}"
        row["pct_of_matmul"] = {name: (None if ms is None else
                                       100 * tflops(cell.flops("fwd"), ms) / matmul)
                                for name, ms in row["ms"].items()}
        rows.append(row)
        print(f"  timed {cell}", flush=True)
        del q, k, v
        name = "fa1_schedule" + ("" if args.backend == "triton" else "-" + args.backend)
        (out / f"{name}.json").write_text(json.dumps(  # after every cell: nothing lost
            dict(provenance=run_provenance, matmul_tflops=matmul, cells=rows), indent=1))
    names = list(rows[0]["ms"])
    print("\n% of matmul (bf16 forward, default tiles):")
    print(f"{'cell':38s} " + " ".join(f"{n.replace(' fa1-heuristic-splits', '+h'):>21s}"
                                      for n in names))
    for row in rows:
        pct = row["pct_of_matmul"]
        print(f"{str(Cell(**row['cell'])):38s} " + " ".join(
            f"{pct[n]:21.1f}" if pct[n] is not None else f"{'error':>21s}" for n in names))
    return 0


if __name__ == "__main__":
    sys.exit(main())
