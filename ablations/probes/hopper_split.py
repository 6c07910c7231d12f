"""Question: what is each of FA2's changes worth when every variant runs on Hopper's own
machinery (kernels/hopper_forward.py: wgmma, TMA ring, warp-specialised producer, two consumer
warpgroups), split-K splitting the keys across the warpgroups and seq_parallel off following
FA1's schedule? Tunes block_n x stages per variant, head_dim and mask, then times the cells
(`--check` first compares every variant with the float64 oracle on small shapes: slow).

Cost model, written before the first measurement (per program and K/V tile of BN keys, head
dim D, 64 query rows under split-K):
  tensor-core work of the tile    4 * 64 * BN * D flop   at 4096 flop/clock/SM (dense bf16)
                                  -> BN * D / 16 clocks
  split-K's exchange              each consumer writes its other half of P V (64 x D/2 fp32)
                                  and reads the other's: 2 * 2 * 64 * (D/2) * 4 = 512 * D bytes
                                  through shared memory at 128 B/clock -> 4 * D clocks
                                  (+ 1 KB of row maxima and sums)
  so r = (4 D) / (BN D / 16) = 64 / BN of the tile's tensor time, plus two rendezvous a tile
  that put both consumers in lockstep (split-Q's consumers drift apart, so one's softmax runs
  under the other's products; split-K's cannot). Predicted split-Q / split-K time ratio
  ~ 1 + r (1 - overlap): 1.25-1.5x at BN = 128, 1.5-2x at BN = 64; the lockstep may add.
  FA1's schedule (seq_parallel off: one program per (batch, head), K/V tiles outer, each row
  block's fp32 output and statistics read from and written to HBM at every K/V tile): per
  head about 10 N^2 D / BN bytes (N = 1k, D = 128, BN = 128: 10 MB a head, 2.7 GB for the 256
  heads, 0.55 ms at 4.8 TB/s; the 1k cell's 137 GFLOP over 0.55 ms is ~245 TFLOP/s, ~30% of
  matmul: the DRAM roofline. [Written first as "55-65 TFLOP/s (7-8%)", an arithmetic slip;
  measured 18% with pointer loads of the state, 22% with the TMA prefetch of D55.]
  Everything else is the same per row: K/V bytes through wgmma (split-Q reads each tile twice
  for 128 rows, split-K once for 64), and deferred normalisation moves only O(rows) work per tile.

    python3 ablations/probes/hopper_split.py --out DIR [--seqlens 1024,...] [--dtypes ...]
    ncu --clock-control none -k regex:_hopper_attn_fwd --launch-skip 1 --launch-count 1 \
        --metrics smsp__sass_data_bytes_mem_shared_op_ld.sum,smsp__sass_data_bytes_mem_shared_op_st.sum \
        python3 ablations/probes/hopper_split.py --ncu-cell VARIANT   # one cell's exchange bytes
"""
import argparse
import itertools
import json
import math
import os
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from fa2check.ablate.grids import Cell, paper_batch, paper_heads  # noqa: E402
from fa2check.core.oracle import reference  # noqa: E402
from fa2check.core.sdpa_backends import forced, sdpa  # noqa: E402
from fa2check.ablate.timing import tflops  # noqa: E402
from kernels import Variant, flash_attention  # noqa: E402
from probe_run import cell_inputs, header, matmul_tflops, provenance, time_ms  # noqa: E402
from kernels import TileConfig, default_config  # noqa: E402
from kernels.plan.hopper_forward import SHARED_LIMIT, STAGES, shared_bytes  # noqa: E402

HOPPER_VARIANTS = Variant.all()  # FA2 first, FA1-style (all off) last
TILES = [(128, 2), (128, 3), (64, 2), (128, 1)]  # 1 stage: FA1's schedule only (D55)
NCU_CELL = (2048, 128, False, 128, 2)  # seqlen, head_dim, causal, block_n, stages


def exchange_model_bytes(cell, block_n, split_q):
    """Split-K's shared-memory traffic through loads and stores (the model above): per program
    (64 rows) and K/V tile, each consumer stores its other half of P V (64 x D/2 float32), its
    64 row maxima and 64 row sums, and loads the other's: 2 * 2 * (64 * D/2 + 2 * 64) * 4
    bytes, split evenly between loads and stores. Split-Q exchanges nothing: wgmma reads K, V
    from shared memory by descriptor and TMA writes them, neither of which is a load or store
    instruction. Full mask only (causal tiles vary per row block)."""
    if split_q or cell.causal:
        return 0
    programs = cell.batch * cell.heads_q * -(-cell.seqlen // 64)
    tiles = -(-cell.seqlen // block_n)
    return programs * tiles * 2 * 2 * (64 * cell.head_dim // 2 + 2 * 64) * 4


def hopper_config(head_dim, block_n, stages):
    return TileConfig(block_m=64, block_n=block_n, num_warps=4, num_stages=stages,
                      **{f: getattr(default_config(head_dim, True), f) for f in
                         ("bwd_block_m", "bwd_block_n", "bwd_num_warps", "bwd_num_stages",
                          "bwd_dq_pass")})


def check(out):
    """Every Hopper variant against the float64 oracle on small odd shapes (o, lse). Slow on
    the GPU (every shape, tile and variant compiles): `fa2check.verify --impl hopper` is the
    full check; this one is for a quick look at one tile's numbers."""
    rows = []
    shapes = [(2, 4, 2, 333, 333), (1, 2, 1, 200, 517), (1, 2, 2, 517, 200), (1, 4, 1, 64, 64),
              (1, 1, 1, 1, 130)]
    for (b, hq, hkv, sq, sk), d, dtype, causal, v in itertools.product(
            shapes, (64, 128), (torch.bfloat16, torch.float16), (False, True), HOPPER_VARIANTS):
        gen = torch.Generator(device="cuda").manual_seed(b * 1000 + sq + sk + d)
        q = torch.randn(b, hq, sq, d, device="cuda", dtype=dtype, generator=gen)
        k = torch.randn(b, hkv, sk, d, device="cuda", dtype=dtype, generator=gen)
        vv = torch.randn(b, hkv, sk, d, device="cuda", dtype=dtype, generator=gen)
        for bn, st in TILES:
            if (st not in STAGES[v.seq_parallel]
                    or shared_bytes(d, bn, st, v.split_q, v.seq_parallel, causal=causal) > SHARED_LIMIT):
                continue
            o, lse = flash_attention(q, k, vv, causal=causal, variant=v, return_lse=True,
                                     config=hopper_config(d, bn, st), backend="hopper")
            o_ref, lse_ref = reference(q, k, vv, causal=causal)
            o_t = flash_attention(q, k, vv, causal=causal, variant=Variant())  # same dtype
            err = (o.double() - o_ref).abs().max().item()
            err_triton = (o_t.double() - o_ref).abs().max().item()
            fin = torch.isfinite(lse_ref)
            lse_ok = bool(((lse == float("-inf")) == ~fin).all())
            lse_err = (lse[fin].double() - lse_ref[fin]).abs().max().item() if fin.any() else 0.0
            ok = err <= 2 * err_triton + 1e-3 and lse_err <= 1e-3 and lse_ok
            rows.append(dict(shape=[b, hq, hkv, sq, sk], d=d, dtype=str(dtype), causal=causal,
                             variant=str(v), block_n=bn, stages=st, err=err,
                             err_triton=err_triton, lse_err=lse_err, ok=ok))
    bad = [r for r in rows if not r["ok"]]
    (out / "check.json").write_text(json.dumps(rows, indent=1))
    print(f"oracle check: {len(rows) - len(bad)} of {len(rows)} ok", flush=True)
    for r in bad[:20]:
        print("  FAIL", r, flush=True)
    return not bad



def render(path) -> str:
    """A saved run as markdown: TFLOP/s and % of the run's matmul rate of FA2 and the
    FA1-style baseline, FA2 / FA1-style, and each switch's Shapley factor in each cell (on log
    time over the 8 variants, fa2check.ablate.contributions; one sweep, so no intervals)."""
    from fa2check.ablate.contributions import FLAGS, decompose, subsets, variant_for

    data = json.loads(Path(path).read_text())
    matmul = data["matmul_tflops"]
    lines = [header(data) + " TFLOP/s (% of matmul); every variant on its own tiles (block_n, "
             "stages), tuned at 4k.", "",
             "| cell | FA2 | FA1-style | FA2 / FA1-style | Shapley defer_norm | Shapley "
             "seq_parallel | Shapley split_q |",
             "|---|---:|---:|---:|---:|---:|---:|"]
    fa2, fa1 = "hopper" + str(Variant()), "hopper" + str(Variant(False, False, False))
    logs = []  # per cell: log FA2 / FA1-style and each flag's Shapley value
    for row in data["cells"]:
        t, ms = row["tflops"], row["ms"]
        log_time = {on: math.log(ms["hopper" + str(variant_for(on, FLAGS))])
                    for on in subsets(FLAGS)}
        phi = decompose(log_time, FLAGS)
        logs.append([phi["total"]] + [phi[f"shapley/{f}"] for f in FLAGS])
        factors = " | ".join(f"{math.exp(x):.2f}x" for x in logs[-1])
        lines.append(f"| {Cell(**row['cell'])} | {t[fa2]:.0f} ({100 * t[fa2] / matmul:.0f}%) | "
                     f"{t[fa1]:.0f} ({100 * t[fa1] / matmul:.0f}%) | {factors} |")
    mean = [math.exp(sum(col) / len(col)) for col in zip(*logs)]
    lines.append("| geometric mean | | | " + " | ".join(f"**{x:.2f}x**" for x in mean) + " |")
    return "\n".join(lines)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default=os.environ.get("OUT", "out"))
    p.add_argument("--commit", help="the git commit to record (the device's copy has a stale .git)")
    p.add_argument("--seqlens", default="1024,2048,4096,8192,16384")
    p.add_argument("--dtypes", default="bfloat16")
    p.add_argument("--tune-seqlen", type=int, default=4096)
    p.add_argument("--check", action="store_true", help="first compare with the oracle (slow)")
    p.add_argument("--render", metavar="JSON", help="print a saved run as markdown and exit")
    p.add_argument("--ncu-cell", metavar="VARIANT", help="run VARIANT on the chassis at "
                   f"{NCU_CELL} twice (profile the second launch with ncu) and print the model's "
                   "shared-memory exchange bytes")
    args = p.parse_args()
    if args.render:
        print(render(args.render))
        return 0
    if args.ncu_cell:
        n, d, causal, bn, st = NCU_CELL
        var = Variant.parse(args.ncu_cell)
        cell = Cell(paper_batch(n), paper_heads(d), paper_heads(d), n, d, "bfloat16", causal)
        q, k, v = cell_inputs(cell)
        for _ in range(2):
            flash_attention(q, k, v, causal=causal, variant=var, config=hopper_config(d, bn, st),
                            backend="hopper")
        torch.cuda.synchronize()
        print(json.dumps(dict(cell=str(cell), variant=str(var), block_n=bn, stages=st,
                              model_exchange_bytes=exchange_model_bytes(cell, bn, var.split_q))))
        return 0
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    run_provenance = provenance(args.commit)
    ok = check(out) if args.check else True

    matmul = matmul_tflops()
    print(f"matmul bf16 8192^3: {matmul:.0f} TFLOP/s", flush=True)


    results, tiles = [], {}
    for dtype, d in itertools.product(args.dtypes.split(","), (64, 128)):
        for causal in (False, True):  # tune at one length, per variant, head_dim and mask
            n = args.tune_seqlen
            cell = Cell(paper_batch(n), paper_heads(d), paper_heads(d), n, d, dtype, causal)
            q, k, v = cell_inputs(cell)
            for var in HOPPER_VARIANTS:
                best = None
                for bn, st in TILES:
                    if (st not in STAGES[var.seq_parallel] or shared_bytes(
                            d, bn, st, var.split_q, var.seq_parallel, causal=causal) > SHARED_LIMIT):
                        continue
                    cfg = hopper_config(d, bn, st)
                    try:
                        ms = time_ms(lambda: flash_attention(q, k, v, causal=causal, variant=var,
                                                             config=cfg, backend="hopper"))
                    except Exception as e:  # shared memory over the limit, say
                        print(f"  tile {bn}x{st} {var} d={d}: {type(e).__name__}", flush=True)
                        continue
                    if best is None or ms < best[0]:
                        best = (ms, bn, st)
                tiles[(dtype, d, causal, str(var))] = best[1:]
                print(f"  tuned {dtype} d={d} causal={causal} {var}: block_n {best[1]}, "
                      f"{best[2]} stages, {best[0]:.3f} ms at {n}", flush=True)
            del q, k, v
        for causal, n in itertools.product((False, True), map(int, args.seqlens.split(","))):
            cell = Cell(paper_batch(n), paper_heads(d), paper_heads(d), n, d, dtype, causal)
            q, k, v = cell_inputs(cell)
            row = dict(cell=cell.as_dict(), ms={}, tiles={})
            for var in HOPPER_VARIANTS:
                bn, st = tiles[(dtype, d, causal, str(var))]
                cfg = hopper_config(d, bn, st)
                row["ms"]["hopper" + str(var)] = time_ms(lambda: flash_attention(
                    q, k, v, causal=causal, variant=var, config=cfg, backend="hopper"))
                row["tiles"]["hopper" + str(var)] = [bn, st]
            row["ms"]["triton+defer+seqpar+splitq (default tiles)"] = time_ms(
                lambda: flash_attention(q, k, v, causal=causal, variant=Variant()))
            with forced("sdpa-flash"):
                row["ms"]["sdpa-flash"] = time_ms(lambda: sdpa(q, k, v, causal))
            row["tflops"] = {name: tflops(cell.flops("fwd"), ms) for name, ms in row["ms"].items()}
            results.append(row)
            print(f"  timed {cell}", flush=True)
            del q, k, v
    (out / "hopper_split.json").write_text(json.dumps(
        dict(provenance=run_provenance, matmul_tflops=matmul, oracle_ok=ok, cells=results),
        indent=1))
    names = ["hopper" + str(v) for v in HOPPER_VARIANTS]
    print("\nTFLOP/s: " + ", ".join(f"{i}={v}" for i, v in enumerate(HOPPER_VARIANTS)))
    print(f"{'cell':42s} " + " ".join(f"{i:>5d}" for i in range(len(names))) + "   tri  sdpa")
    for row in results:
        t = row["tflops"]
        print(f"{str(Cell(**row['cell'])):42s} " + " ".join(f"{t[n]:5.0f}" for n in names) +
              f" {t['triton+defer+seqpar+splitq (default tiles)']:5.0f} {t['sdpa-flash']:5.0f}")
    print("tiles (block_n, stages):", {" ".join(map(str, k)): v for k, v in tiles.items()})
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
