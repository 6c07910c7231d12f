"""Question: what do FlashAttention-3's ping-pong and intra-warpgroup overlap (arXiv 2407.08608,
sections 3.1-3.2) add to FA2 on the Hopper chassis (docs/decisions.md D59), and how far is FA2
with them from sdpa's cuDNN backend?

Each combination of `Variant.hopper()` runs in a subprocess of its own with a timeout (a hang
costs that combination, not the run): it first checks the chassis against the float64 oracle
by the pass rule on three small shapes (full; causal GQA with queries < keys; causal with rows
that see no key; lengths not a multiple of the tile), then times the cells: d = 64 and 128,
bf16, full and causal, 2k and 8k (batch * seqlen = 16k, heads * d = 2048: the paper's grid),
every combination on its own default tiles for the cell (`default_config`: FA2's, a switch's
on a K/V ring one stage deeper where it fits, D80; `--stages N` puts every one on N). sdpa
flash and cudnn are timed in a subprocess too, with the matmul rate. The table (TFLOP/s, all-on / cudnn, the two
switches' Shapley factors in log time) is printed last; JSON with provenance goes to --out.

    python3 ablations/probes/hopper_switches.py --out /tmp/hopper_switches   # ~4 min, H200
"""
import argparse
import json
import math
import os
import subprocess
import sys
import time
from dataclasses import replace
from functools import partial
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from fa2check.ablate.contributions import game, shapley  # noqa: E402
from kernels import Variant  # noqa: E402

SWITCHES = ("pingpong", "overlap")
SEQLENS = (2048, 8192)
HEAD_DIMS = (64, 128)
SDPA = ("sdpa-flash", "sdpa-cudnn")
# lengths multiples of 16 (the launcher's integer specialisations of the timed cells), not of
# the tiles; heads as the cells' (32 at d=64, 16 at d=128), GQA's group 16
CHECKS = (dict(batch=1, heads_q=16, heads_kv=16, seqlen_q=1040, seqlen_k=1040, head_dim=128,
               causal=False),
          dict(batch=1, heads_q=32, heads_kv=2, seqlen_q=784, seqlen_k=1296, head_dim=64,
               causal=True),
          dict(batch=1, heads_q=16, heads_kv=16, seqlen_q=1296, seqlen_k=528, head_dim=128,
               causal=True))


def cells(head_dims=HEAD_DIMS, seqlens=SEQLENS):
    from fa2check.ablate.grids import Cell, paper_batch, paper_heads

    return [Cell(paper_batch(n), paper_heads(d), paper_heads(d), n, d, "bfloat16", causal)
            for d in head_dims for causal in (False, True) for n in seqlens]


def cell_key(cell) -> str:
    return f"d{cell.head_dim} {'causal' if cell.causal else 'full'} {cell.seqlen // 1024}k"


def worker(name: str, grid: list, stages: int | None = None) -> dict:
    """In the subprocess: `name` is a variant (its oracle checks, then its times) or 'sdpa';
    stages: the K/V ring's depth for every cell (None: each variant's default's)."""
    import torch

    from fa2check.ablate.timing import tflops
    from fa2check.core.sdpa_backends import forced, sdpa
    from kernels import default_config, flash_attention
    from probe_run import cell_inputs, matmul_tflops, time_ms

    out = {"name": name, "checks": [], "cells": {}}
    if name == "sdpa":
        out["matmul_tflops"] = matmul_tflops()
        for cell in grid:
            q, k, v = cell_inputs(cell)
            for backend in SDPA:
                with forced(backend):
                    ms = time_ms(lambda: sdpa(q, k, v, cell.causal))
                out["cells"].setdefault(cell_key(cell), {})[backend] = dict(
                    ms=ms, tflops=tflops(cell.flops("fwd"), ms))
        return out
    from fa2check.core.checks import Reference
    from fa2check.core.problems import Problem

    variant = Variant.parse(name)
    hopper = partial(flash_attention, backend="hopper")
    for fields in CHECKS:
        problem = Problem(**fields, dtype="bfloat16", seed=len(out["checks"]))
        verdicts = Reference(problem, "cuda", backward=False).check(hopper, variant)
        out["checks"].append(dict(problem=str(problem), passed=all(c.passed for c in verdicts),
                                  worst_ratio=max(c.ratio for c in verdicts)))
        print(f"{name} {problem}: {'pass' if out['checks'][-1]['passed'] else 'FAIL'}",
              flush=True)
    for cell in grid:
        q, k, v = cell_inputs(cell)
        config = default_config(cell.head_dim, True, variant, "bfloat16", "hopper",
                                causal=cell.causal, seqlen_q=cell.seqlen, seqlen_k=cell.seqlen)
        config = replace(config, num_stages=stages or config.num_stages)
        try:
            ms = time_ms(lambda: flash_attention(q, k, v, causal=cell.causal, variant=variant,
                                                 config=config, backend="hopper"))
        except ValueError as e:  # a tile that does not fit (--stages): the cell is left out
            print(f"{name} {cell_key(cell)}: {e}", file=sys.stderr, flush=True)
            continue
        out["cells"][cell_key(cell)] = dict(ms=ms, tflops=tflops(cell.flops("fwd"), ms),
                                            block_n=config.block_n, stages=config.num_stages)
        torch.cuda.synchronize()
    return out


def run_worker(name: str, timeout: float, grid_args: list) -> dict:
    """`name`'s worker in a subprocess; on a timeout or a crash, what went wrong."""
    cmd = [sys.executable, __file__, "--worker", name, *grid_args]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                              cwd=Path(__file__).resolve().parents[2])
    except subprocess.TimeoutExpired as e:  # its stdout comes as bytes, text=True or not
        log = e.stdout.decode(errors="replace") if isinstance(e.stdout, bytes) else ""
        return dict(name=name, error=f"timed out after {timeout:.0f} s (a hang?)",
                    log=log[-2000:])
    lines = proc.stdout.strip().splitlines()
    if proc.returncode or not lines or not lines[-1].startswith("{"):
        return dict(name=name, error=f"exit {proc.returncode}", log=proc.stderr[-2000:])
    return json.loads(lines[-1])


def shapley_factors(times: dict) -> dict:
    """The switches' Shapley values of the game v(S) = log t(FA2) - log t(S), as speed-up
    factors (exp): times maps the variant names of Variant.hopper() to ms."""
    log_time = {frozenset(s for s in SWITCHES if getattr(Variant.parse(n), s)): math.log(ms)
                for n, ms in times.items()}
    return {s: math.exp(phi) for s, phi in shapley(game(log_time, SWITCHES), SWITCHES).items()}


def table(runs: dict, grid: list) -> list[str]:
    names = [str(v) for v in Variant.hopper()]
    short = {n: n[len(str(Variant())):] or "fa2" for n in names}
    head = (f"{'cell':16s}" + "".join(f"{b:>11s}" for b in SDPA)
            + "".join(f"{short[n]:>18s}" for n in names) + f"{'all/cudnn':>10s}"
            + "".join(f"{'x ' + s:>11s}" for s in SWITCHES))
    lines = [head]
    ratios = {n: [] for n in names}
    for cell in grid:
        key = cell_key(cell)
        sd = runs.get("sdpa", {}).get("cells", {}).get(key, {})
        ours = {n: runs.get(n, {}).get("cells", {}).get(key) for n in names}
        row = f"{key:16s}" + "".join(f"{sd[b]['tflops']:11.0f}" if b in sd else f"{'-':>11s}"
                                     for b in SDPA)
        row += "".join(f"{ours[n]['tflops']:18.0f}" if ours[n] else f"{'-':>18s}"
                       for n in names)
        cudnn = sd.get("sdpa-cudnn")
        for n in names:
            if ours[n] and cudnn:
                ratios[n].append(cudnn["ms"] / ours[n]["ms"])
        row += (f"{cudnn['ms'] / ours[names[-1]]['ms']:10.2f}" if cudnn and ours[names[-1]]
                else f"{'-':>10s}")
        if all(ours.values()):
            row += "".join(f"{f:11.3f}" for f in shapley_factors(
                {n: ours[n]["ms"] for n in names}).values())
        lines.append(row)
    lines.append("geomean vs cudnn: " + ", ".join(
        f"{short[n]} {math.exp(sum(map(math.log, r)) / len(r)):.2f}x" for n, r in ratios.items()
        if r))
    return lines


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", help="directory for the JSON")
    p.add_argument("--timeout", type=float, default=60.0, help="seconds per subprocess")
    p.add_argument("--budget", type=float, default=235.0,
                   help="seconds for the whole run: later subprocesses are skipped past it")
    p.add_argument("--head-dims", default=",".join(map(str, HEAD_DIMS)))
    p.add_argument("--seqlens", default=",".join(map(str, SEQLENS)))
    p.add_argument("--stages", type=int, help="K/V stages for every combination and cell "
                                              "(default: each one's default_config's)")
    p.add_argument("--commit", help="the git commit to record")
    p.add_argument("--worker", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    grid = cells(*(tuple(int(x) for x in text.split(",")) for text in (args.head_dims,
                                                                       args.seqlens)))
    grid_args = ["--head-dims", args.head_dims, "--seqlens", args.seqlens,
                 *(["--stages", str(args.stages)] if args.stages else [])]
    if args.worker:
        print(json.dumps(worker(args.worker, grid, args.stages)))
        return 0
    if not args.out:
        p.error("--out is required")
    from probe_run import provenance

    start, runs = time.monotonic(), {}
    for name in ["sdpa"] + [str(v) for v in Variant.hopper()]:
        left = args.budget - (time.monotonic() - start)
        if left < 20:
            runs[name] = dict(name=name, error="skipped: the run's budget is spent")
            continue
        runs[name] = run_worker(name, min(args.timeout, left), grid_args)
        status = runs[name].get("error") or " ".join(
            "pass" if c["passed"] else "FAIL" for c in runs[name]["checks"]) or "timed"
        print(f"{name}: {status} ({time.monotonic() - start:.0f} s)", flush=True)
    os.makedirs(args.out, exist_ok=True)
    path = Path(args.out) / "hopper_switches.json"
    data = dict(provenance=provenance(args.commit), stages=args.stages,
                matmul_tflops=runs["sdpa"].get("matmul_tflops"),
                runs=runs)
    path.write_text(json.dumps(data, indent=1))
    print(f"wrote {path}")
    print("\n".join(table(runs, grid)))
    failed = [n for n, r in runs.items() if r.get("error")
              or not all(c["passed"] for c in r.get("checks", []))]
    if failed:
        print("FAILED or missing: " + ", ".join(failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
