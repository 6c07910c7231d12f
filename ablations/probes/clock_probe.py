"""Question: what clock and power do ours and sdpa-flash get at the 700 W cap? (D20)

SM clock and board power (fa2check.ablate.clocks: nvidia-smi every 50 ms) while FA2 calls run, to
tell a kernel's speed from the clock the GPU gives it (the H200 caps the board at 700 W).

    python3 ablations/probes/clock_probe.py --mode fwd|fwd+bwd [--head-dim 64] [--seqlen 1024]
        [--causal] [--dtype bfloat16 --dtype float16] [--tile 64,64,4,3,tma]
        [--bwd-tile 32,128,4,3,dqpass] [--rep-ms 20 --rep-ms 100] [--loop-s 6]
        [--subject ours --subject sdpa-flash] [--json PATH]

On the GPU, from the repository root. The cell is the paper grid's (16k tokens, hidden 2048).
For each dtype and each regime the call is timed while nvidia-smi samples: do_bench with
5 ms warm-up and each --rep-ms (the benchmark times 20 ms a contender, the A/B tool once timed
100), then back-to-back calls for --loop-s seconds (sustained use).
Prints ms a call and the mean clock and power of each (over the samples after the first
RAMP_S seconds); --json keeps the samples. --subject sdpa-flash (or another
fa2check.core.sdpa_backends name) times that SDPA backend the same way, for a ratio under
sustained use. A do_bench regime shorter than RAMP_S gets no samples (printed as nan).

Written for two questions: does fp16 trail bf16 at the same tiles because its clock is lower
at the power limit, and do d=64 forward tiles rank differently under a 100 ms load than under
20 ms because of the clock? (docs/ablation.md, "The power cap").
"""
import argparse
import itertools
import json
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from fa2check.ablate import clocks, tuning  # noqa: E402
from fa2check.core import sdpa_backends  # noqa: E402
from fa2check.ablate.grids import paper_batch, paper_heads  # noqa: E402

# the power takes ~0.5 s to reach the 700 W cap (213 -> 513 -> 693 W in the
# measured loops): means skip that ramp
RAMP_S = 0.5


def parse_tile(text: str, backward: bool) -> dict:
    """'64,64,4,3,tma' -> forward TileConfig fields; '32,128,4,3,dqpass' -> backward ones
    (tuning's field order; the flag is on when its word is given)."""
    *numbers, flag = (tuning.BWD_FIELDS if backward else tuning.FWD_FIELDS)
    parts = text.split(",")
    return {**dict(zip(numbers, map(int, parts[:4]))),
            flag: ("dqpass" if backward else "tma") in parts[4:]}


def after_ramp(samples, start: float) -> list:
    """fa2check.ablate.clocks samples (epoch s, MHz, W) from RAMP_S seconds after `start` on."""
    return [s for s in samples if s[0] >= start + RAMP_S]


def sampled(run):
    """run() while fa2check.ablate.clocks samples; (run's result, samples after the ramp)."""
    with clocks.ClockLog() as log:
        start = time.time()
        result = run()
    if log.error:
        print(f"no clock samples: {log.error}", flush=True)
    return result, after_ramp(log.samples, start)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    # required: a default of fwd+bwd once timed forward tiles as fwd+bwd calls unnoticed
    p.add_argument("--mode", choices=("fwd", "fwd+bwd"), required=True)
    p.add_argument("--head-dim", type=int, default=64)
    p.add_argument("--seqlen", type=int, default=16384)
    p.add_argument("--causal", action="store_true")
    p.add_argument("--dtype", action="append", choices=("bfloat16", "float16"))
    p.add_argument("--tile", default="64,64,4,3", help="forward: BM,BN,WARPS,STAGES[,tma]")
    p.add_argument("--bwd-tile", default="32,128,4,3,dqpass",
                   help="backward: BM,BN,WARPS,STAGES[,dqpass]")
    p.add_argument("--rep-ms", type=float, action="append", help="do_bench regimes; default 20, 100")
    p.add_argument("--loop-s", type=float, default=6.0, help="back-to-back calls; 0: skip")
    p.add_argument("--subject", action="append", choices=("ours", *sdpa_backends.BACKENDS),
                   help="repeatable; default ours")
    p.add_argument("--json", type=Path)
    args = p.parse_args(argv)

    import torch
    from triton.testing import do_bench

    from kernels import default_config, flash_attention

    d, n = args.head_dim, args.seqlen
    shape = (paper_batch(n), paper_heads(d), n, d)
    backward = args.mode == "fwd+bwd"
    rows = []
    for subject, dtype_name in itertools.product(args.subject or ["ours"],
                                                 args.dtype or ["bfloat16", "float16"]):
        dtype = getattr(torch, dtype_name)
        config = replace(default_config(d, True, None, dtype), **parse_tile(args.tile, False),
                         **parse_tile(args.bwd_tile, True))
        q, k, v = (torch.randn(shape, device="cuda", dtype=dtype, requires_grad=backward)
                   for _ in range(3))
        do = torch.randn_like(q)

        def call():
            if subject == "ours":
                o = flash_attention(q, k, v, causal=args.causal, config=config)
            else:
                with sdpa_backends.forced(subject):
                    o = sdpa_backends.sdpa(q, k, v, args.causal)
            return torch.autograd.grad(o, (q, k, v), do) if backward else o

        def loop():
            calls, start = 0, time.perf_counter()
            while time.perf_counter() - start < args.loop_s:
                call()
                calls += 1
            torch.cuda.synchronize()
            return (time.perf_counter() - start) / calls * 1e3

        call()
        torch.cuda.synchronize()
        regimes = [(f"do_bench {rep:g} ms",
                    lambda rep=rep: statistics.median(do_bench(call, warmup=5, rep=rep,
                                                               return_mode="all")))
                   for rep in args.rep_ms or [20.0, 100.0]]
        if args.loop_s > 0:
            regimes.append((f"loop {args.loop_s:g} s", loop))
        for name, run in regimes:
            ms, samples = sampled(run)
            mhz, watts = (statistics.fmean(s[i] for s in samples) if samples else float("nan")
                          for i in (1, 2))
            rows.append({"subject": subject, "dtype": dtype_name, "regime": name, "ms": ms,
                         "sm_mhz": mhz, "power_w": watts, "samples": samples})
            print(f"{subject:10s} {dtype_name:9s} {name:18s} {ms:8.4f} ms a call; "
                  f"SM {mhz:5.0f} MHz, {watts:4.0f} W ({len(samples)} samples)", flush=True)
    if args.json:
        args.json.write_text(json.dumps({"argv": sys.argv, "shape": shape, "mode": args.mode,
                                         "causal": args.causal, "tile": args.tile,
                                         "bwd_tile": args.bwd_tile, "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
