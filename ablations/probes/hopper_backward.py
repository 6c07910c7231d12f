"""Question: what does FA2's split-Q save in the backward when split-K is at its best on Hopper
(across the chassis's consumer warpgroups, on wgmma: kernels/hopper_backward.py,
docs/decisions.md D61), rather than FA1's 16-row mma.sync steps (D50)?

Two phases, each variant in subprocesses with timeouts (a hang costs that variant):
  1. checks (the 8 variants in parallel: their compiles warm Triton's cache for phase 2): dQ, dK,
     dV (and o, lse) of flash_attention(backend="hopper") against the float64 oracle by the
     pass rule (fa2check.core.passrule), bf16, d = 64 and 128, full and causal, seqlen 1k and
     4k, plus a GQA case and one of odd lengths; each asserts that the Hopper backward took the
     call (kernels.hopper_backward.unsupported is None);
  2. times (one subprocess, one kernel at a time): the backward alone (o and the statistics from
     the chassis's forward, computed once; the preprocess included, as attn_bwd's), median of
     fa2check's do_bench wrapper, for the 8 variants and the Triton FA2 backward
     (kernels.backward.attn_bwd at its default tiles), cells of the paper's grid (batch * seqlen
     = 16k, heads * d = 2048), bf16.
The table (ms, the split_q factor t(split-K) / t(split-Q) per pair of the other flags, and the
Shapley factors of the three flags in log time) is printed last; JSON with provenance goes to
--out.

    python3 ablations/probes/hopper_backward.py --out /tmp/hopper_backward   # ~2.5 min, H200
"""
import argparse
import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from fa2check.ablate.contributions import game, shapley  # noqa: E402
from kernels import Variant  # noqa: E402

FLAGS = ("defer_norm", "seq_parallel", "split_q")
SEQLENS = (1024, 4096)
HEAD_DIMS = (64, 128)
TRITON_FA2 = "triton-fa2"  # the Triton backward (kernels/backward.py) of FA2, for reference


def checks(head_dims=HEAD_DIMS):
    """The problems of phase 1: bf16, each d, full and causal, 1k and 4k; GQA; odd lengths."""
    from fa2check.core.problems import Problem

    out = [Problem(1, 2, 2, n, n, d, "bfloat16", causal, seed=i)
           for i, (d, causal, n) in enumerate((d, c, n) for d in head_dims
                                              for c in (False, True) for n in SEQLENS)]
    out.append(Problem(1, 8, 2, 1000, 1000, head_dims[-1], "bfloat16", True, seed=100))  # GQA
    out.append(Problem(2, 2, 2, 777, 1555, head_dims[0], "bfloat16", True, seed=101))  # odd
    return out


def cells(head_dims=HEAD_DIMS, seqlens=SEQLENS):
    from fa2check.ablate.grids import Cell, paper_batch, paper_heads

    return [Cell(paper_batch(n), paper_heads(d), paper_heads(d), n, d, "bfloat16", causal)
            for d in head_dims for causal in (False, True) for n in seqlens]


def cell_key(cell) -> str:
    return f"d{cell.head_dim} {'causal' if cell.causal else 'full'} {cell.seqlen // 1024}k"


def check_worker(name: str, head_dims) -> dict:
    """Phase 1 in a subprocess: variant `name`'s oracle checks on the hopper backend."""
    from functools import partial

    from fa2check.core.checks import Reference
    from kernels import flash_attention
    from kernels.hopper_backward import unsupported

    variant = Variant.parse(name)
    out = {"name": name, "checks": []}
    for problem in checks(head_dims):
        ref = Reference(problem, "cuda", backward=True)
        why = unsupported(ref.q, ref.k, ref.v)
        if why is not None:
            raise SystemExit(f"{problem}: the Hopper backward does not take it: {why}")
        verdicts = ref.check(partial(flash_attention, backend="hopper"), variant)
        out["checks"].append(dict(problem=str(problem), passed=all(c.passed for c in verdicts),
                                  ratios={c.output: c.ratio for c in verdicts}))
        print(f"{name} {problem}: {'pass' if out['checks'][-1]['passed'] else 'FAIL'} "
              f"{ {c.output: round(c.ratio, 3) for c in verdicts} }", file=sys.stderr, flush=True)
    return out


def time_worker(names: list, grid: list, partial_path: str) -> dict:
    """Phase 2 in a subprocess: the backward alone of each kernel on each cell; what is done is
    written to partial_path after each cell (a timeout keeps it)."""
    import torch

    from kernels import default_config
    from kernels.backward import attn_bwd
    from kernels.hopper_backward import hopper_attn_bwd
    from kernels.hopper_forward import hopper_attn_fwd
    from probe_run import cell_inputs, time_ms

    out = {}
    for cell in grid:
        q, k, v = cell_inputs(cell)
        do = torch.randn_like(q)
        scale = cell.head_dim ** -0.5
        row = out.setdefault(cell_key(cell), {})
        for name in names:
            variant = Variant() if name == TRITON_FA2 else Variant.parse(name)
            backend = "triton" if name == TRITON_FA2 else "hopper"
            config = default_config(cell.head_dim, True, variant, "bfloat16", backend,
                                    causal=cell.causal, seqlen_q=cell.seqlen,
                                    seqlen_k=cell.seqlen)
            fwd_config = default_config(cell.head_dim, True, variant, "bfloat16", "hopper",
                                        causal=cell.causal, seqlen_q=cell.seqlen,
                                        seqlen_k=cell.seqlen)
            o, stats, _ = hopper_attn_fwd(q, k, v, cell.causal, scale, variant, fwd_config)
            bwd = attn_bwd if name == TRITON_FA2 else hopper_attn_bwd
            ms = time_ms(lambda: bwd(q, k, v, o, stats, do, None, cell.causal, scale, variant,
                                     config))
            row[name] = dict(ms=ms)
            torch.cuda.synchronize()
        print(f"{cell_key(cell)}: " + " ".join(f"{n} {r['ms']:.3f}" for n, r in row.items()),
              file=sys.stderr, flush=True)
        Path(partial_path).write_text(json.dumps(out))
    return out


def run(cmd: list, timeout: float) -> dict:
    """A worker subprocess's JSON (its last stdout line), or what went wrong."""
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                              cwd=Path(__file__).resolve().parents[2])
    except subprocess.TimeoutExpired as e:
        log = e.stderr.decode(errors="replace") if isinstance(e.stderr, bytes) else ""
        return dict(error=f"timed out after {timeout:.0f} s (a hang?)", log=log[-3000:])
    lines = proc.stdout.strip().splitlines()
    if proc.returncode or not lines or not lines[-1].startswith("{"):
        return dict(error=f"exit {proc.returncode}", log=proc.stderr[-3000:])
    return dict(json.loads(lines[-1]), log=proc.stderr[-3000:])


def run_parallel(cmds: dict, timeout: float) -> dict:
    """{name: JSON} of subprocesses run all at once, each with `timeout` seconds."""
    root = Path(__file__).resolve().parents[2]
    procs = {n: subprocess.Popen(c, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                 cwd=root) for n, c in cmds.items()}
    out, deadline = {}, time.monotonic() + timeout
    for name, proc in procs.items():
        try:
            stdout, stderr = proc.communicate(timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.kill()
            stdout, stderr = proc.communicate()
            out[name] = dict(error=f"timed out after {timeout:.0f} s", log=stderr[-3000:])
            continue
        lines = stdout.strip().splitlines()
        if proc.returncode or not lines or not lines[-1].startswith("{"):
            out[name] = dict(error=f"exit {proc.returncode}", log=stderr[-3000:])
        else:
            out[name] = dict(json.loads(lines[-1]), log=stderr[-3000:])
    return out


def split_q_factors(times: dict) -> dict:
    """t(split-K) / t(split-Q) for each setting of the other two flags ("+defer+seqpar": ...)."""
    out = {}
    for v in Variant.all():
        if v.split_q:
            off = Variant(v.defer_norm, v.seq_parallel, False)
            if str(v) in times and str(off) in times:
                out[str(v).removesuffix("+splitq")] = times[str(off)] / times[str(v)]
    return out


def shapley_factors(times: dict) -> dict:
    """The flags' Shapley values of v(S) = log t(none) - log t(S), as speed-up factors."""
    log_time = {frozenset(f for f in FLAGS if getattr(Variant.parse(n), f)): math.log(ms)
                for n, ms in times.items() if n != TRITON_FA2}
    if len(log_time) < 8:
        return {}
    return {f: math.exp(phi) for f, phi in shapley(game(log_time, FLAGS), FLAGS).items()}


def table(timing: dict) -> list[str]:
    names = [str(v) for v in Variant.all()] + [TRITON_FA2]
    lines = [f"{'cell':14s}" + "".join(f"{n:>22s}" for n in names)
             + f"{'split_q x (defer,seqpar pairs)':>40s}{'shapley d/s/q':>22s}"]
    for key, row in timing.items():
        times = {n: r["ms"] for n, r in row.items()}
        sq = split_q_factors(times)
        sh = shapley_factors(times)
        lines.append(f"{key:14s}" + "".join(f"{times[n]:22.3f}" if n in times else f"{'-':>22s}"
                                            for n in names)
                     + f"{' '.join(f'{f:.2f}' for f in sq.values()):>40s}"
                     + f"{' '.join(f'{f:.2f}' for f in sh.values()):>22s}")
    every = [f for row in timing.values() for f in split_q_factors(
        {n: r["ms"] for n, r in row.items()}).values()]
    if every:
        lines.append(f"split_q factor in the backward, geomean over cells and pairs: "
                     f"{math.exp(sum(map(math.log, every)) / len(every)):.3f}x "
                     f"(min {min(every):.2f}, max {max(every):.2f})")
    return lines


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", help="directory for the JSON")
    p.add_argument("--commit", help="the git commit to record")
    p.add_argument("--head-dims", default=",".join(map(str, HEAD_DIMS)))
    p.add_argument("--seqlens", default=",".join(map(str, SEQLENS)), help="of the timed cells")
    p.add_argument("--check-timeout", type=float, default=100.0,
                   help="seconds for phase 1 (all variants at once)")
    p.add_argument("--time-timeout", type=float, default=100.0, help="seconds for phase 2")
    p.add_argument("--no-checks", action="store_true", help="phase 2 only")
    p.add_argument("--worker", help=argparse.SUPPRESS)
    p.add_argument("--timer", help=argparse.SUPPRESS)  # the partial results' path
    args = p.parse_args(argv)
    head_dims = tuple(int(x) for x in args.head_dims.split(","))
    grid = cells(head_dims, tuple(int(x) for x in args.seqlens.split(",")))
    names = [str(v) for v in Variant.all()]
    if args.worker:
        print(json.dumps(check_worker(args.worker, head_dims)))
        return 0
    if args.timer:
        print(json.dumps(time_worker(names + [TRITON_FA2], grid, args.timer)))
        return 0
    if not args.out:
        p.error("--out is required")
    from probe_run import provenance

    me = [sys.executable, __file__, "--head-dims", args.head_dims, "--seqlens", args.seqlens]
    start = time.monotonic()
    checked = {} if args.no_checks else run_parallel(
        {n: me + [f"--worker={n}"] for n in names}, args.check_timeout)  # names may start with "-"
    for n, r in checked.items():
        status = r.get("error") or " ".join("pass" if c["passed"] else "FAIL"
                                            for c in r["checks"])
        print(f"{n}: {status}", flush=True)
    print(f"checks: {time.monotonic() - start:.0f} s", flush=True)
    os.makedirs(args.out, exist_ok=True)
    partial_path = Path(args.out) / "timing.partial.json"
    timed = run(me + ["--timer", str(partial_path)], args.time_timeout)
    print(f"times: {timed.get('error', 'done')} ({time.monotonic() - start:.0f} s)", flush=True)
    path = Path(args.out) / "hopper_backward.json"
    timing = {k: v for k, v in timed.items() if k not in ("error", "log")}
    if timed.get("error") and partial_path.exists():  # the cells timed before it stopped
        timing = json.loads(partial_path.read_text())
    path.write_text(json.dumps(dict(provenance=provenance(args.commit), checks=checked,
                                    timing=timing, timing_error=timed.get("error"),
                                    timing_log=timed.get("log")), indent=1))
    print(f"wrote {path}")
    failed = [n for n, r in checked.items()
              if r.get("error") or not all(c["passed"] for c in r["checks"])]
    if failed:
        print("FAILED or missing: " + ", ".join(failed))
        for n in failed:
            print(f"--- {n}\n{checked[n].get('log', '')[-1500:]}")
    if timed.get("error"):
        print(f"timing: {timed['error']}\n{timed.get('log', '')[-1500:]}")
    print("\n".join(table(timing)))
    return 1 if failed or timed.get("error") else 0


if __name__ == "__main__":
    sys.exit(main())
