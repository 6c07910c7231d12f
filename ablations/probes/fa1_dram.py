"""Question: does FA1's schedule on FA1's launcher move the DRAM bytes D48's model says, at 2k,
8k and 16k (issue 56; D90)?

The model, per (batch, head) of N = seqlen_q = seqlen_k keys, head dim D, K/V tiles of Bc keys
(T = N / Bc tiles), S splits (FA1's num_splits), 2-byte inputs: each split reads K and V once
(4 N D S); each tile reads every row block's Q again (2 N D T); between tiles each row block's
float32 partial output and its statistics (the chassis keeps m and l for each consumer: 4
floats a row) go to HBM and back (2 (T - 1) (4 N D + 16 N)); O is written once (2 N D). Its
FLOPs grow as N^2 D too, so the schedule's share of the matmul rate should not fall with N
once the launcher fills the GPU.

    # on the GPU: one profiled launch a cell, then predicted against measured
    ncu --clock-control none --profile-from-start off --csv --page raw \
        --metrics dram__bytes_read.sum,dram__bytes_write.sum \
        python3 ablations/probes/fa1_dram.py --cells 2048,8192,16384 --model model.json > ncu.csv
    python3 ablations/probes/fa1_dram.py --compare ncu.csv --model model.json
"""
import argparse
import csv
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

VARIANT = "-defer-seqpar-splitq"  # the FA1-style end of the table of record


def model_bytes(n: int, d: int, heads: int, block_n: int, splits: int) -> int:
    """The module docstring's model for `heads` (batch, head) pairs."""
    tiles = -(-n // block_n)
    per_head = (4 * n * d * splits + 2 * n * d * tiles
                + 2 * (tiles - 1) * (4 * n * d + 16 * n) + 2 * n * d)
    return heads * per_head


def run_cells(cells, head_dim: int, out: Path):
    """One profiled FA1-style chassis forward a cell (bf16, full, the paper grid's shapes),
    each after a warm-up call; the model's bytes for each, written to `out`."""
    import torch
    import triton

    from fa2check.ablate.grids import Cell, paper_batch, paper_heads
    from kernels import Variant, default_config, flash_attention
    from kernels.plan.hopper_forward import ROWS_PER_WARPGROUP, fa1_splits

    variant = Variant.parse(VARIANT)
    rows = []
    for n in cells:
        cell = Cell(paper_batch(n), paper_heads(head_dim), paper_heads(head_dim), n, head_dim,
                    "bfloat16", False)
        config = default_config(head_dim, True, variant, "bfloat16", "hopper", causal=False,
                                seqlen_q=n, seqlen_k=n)
        q, k, v = (torch.randn(cell.batch, cell.heads_q, n, head_dim, device="cuda",
                               dtype=torch.bfloat16) for _ in range(3))
        heads = cell.batch * cell.heads_q
        rows_a_block = ROWS_PER_WARPGROUP * (2 if variant.split_q else 1)
        splits = fa1_splits(config, heads, triton.cdiv(n, rows_a_block), q.device)

        def call():
            return flash_attention(q, k, v, variant=variant, config=config, backend="hopper")
        call()
        torch.cuda.synchronize()
        torch.cuda.cudart().cudaProfilerStart()
        call()
        torch.cuda.synchronize()
        torch.cuda.cudart().cudaProfilerStop()
        rows.append(dict(cell=str(cell), seqlen=n, block_n=config.block_n, splits=splits,
                         model_bytes=model_bytes(n, head_dim, heads, config.block_n, splits)))
        print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
        del q, k, v
    out.write_text(json.dumps(rows, indent=1))


def measured(csv_path: Path) -> list[int]:
    """DRAM bytes (read + written) of each profiled forward kernel, in launch order, from ncu's
    raw page (one row a kernel, one column a metric)."""
    lines = [line for line in csv_path.read_text().splitlines() if line.startswith('"')]
    out = []
    for record in csv.DictReader(lines):
        if "attn_fwd" not in record.get("Kernel Name", ""):
            continue
        try:
            read = float(record["dram__bytes_read.sum"].replace(",", ""))
            write = float(record["dram__bytes_write.sum"].replace(",", ""))
        except (KeyError, ValueError):  # the units row
            continue
        out.append(int(read + write))  # --print-units base: bytes
    return out


def compare(csv_path: Path, model_path: Path) -> str:
    rows = json.loads(model_path.read_text())
    lines = ["| cell | block_n | splits | model GB | measured GB | measured / model |",
             "|---|---:|---:|---:|---:|---:|"]
    for row, got in zip(rows, measured(csv_path)):
        lines.append(f"| {row['cell']} | {row['block_n']} | {row['splits']} | "
                     f"{row['model_bytes'] / 1e9:.2f} | {got / 1e9:.2f} | "
                     f"{got / row['model_bytes']:.2f} |")
    return "\n".join(lines)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--cells", default="2048,8192,16384", help="seqlens (the paper grid's cells)")
    p.add_argument("--head-dim", type=int, default=128)
    p.add_argument("--model", default="model.json", help="where the model's bytes go (or come "
                   "from, with --compare)")
    p.add_argument("--compare", metavar="NCU_CSV", help="no GPU: predicted against measured")
    args = p.parse_args()
    if args.compare:
        print(compare(Path(args.compare), Path(args.model)))
        return 0
    run_cells([int(n) for n in args.cells.split(",")], args.head_dim, Path(args.model))
    return 0


if __name__ == "__main__":
    sys.exit(main())
