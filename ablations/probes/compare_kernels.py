"""Question: what does a kernel change cost, cell by cell? (most decisions: D03, D25)

A/B timing of kernel versions: the forward (or, with --mode fwd+bwd, forward and backward) of
several copies of the kernels/ package, timed interleaved on the same cells with the same tile
config (the launcher's default for the GPU, or the fields given after a colon on top of it),
with the benchmark's timer (do_bench's calls with the host kept ahead of the GPU, D99) at its
settings (--warmup-ms 5, --rep-ms 20).

    python3 ablations/probes/compare_kernels.py DIR[:FIELD=VALUE,...] [DIR ...] [--json PATH]

e.g. `kernels:block_m=64,block_n=64,num_warps=4,num_stages=3 kernels:...,tma=1` compares one
tile choice within today's kernels.

Each DIR holds a copy of kernels/ (e.g. exported from an older commit with
`git show COMMIT:kernels/forward.py > DIR/forward.py` ...). For docs/decisions.md when a kernel
change must show what it costs; `fa2check.ablate` remains the benchmark of record.
"""
import argparse
import functools
import importlib.util
import itertools
import json
import sys
from dataclasses import replace
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from fa2check.core.environment import describe_environment  # noqa: E402
from fa2check.ablate.grids import FLOP_FACTOR, paper_batch, paper_heads  # noqa: E402
from fa2check.ablate.timing import summary, tflops  # noqa: E402

SEQLENS = (1024, 4096, 16384)
ROUNDS = 3


@functools.cache  # one module a copy, whichever variants run it
def load(directory: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, directory / "__init__.py",
                                                  submodule_search_locations=[str(directory)])
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def rotated(names: list, r: int) -> list:
    """Round r's order: the versions starting from the (r mod n)-th. With a fixed order the
    first version was measured slower than an identical copy in most cells (A/A controls,
    docs/ablation.md, "The A/B harness"), so every version takes each place in turn."""
    r %= len(names)
    return names[r:] + names[:r]


def config_overrides(fields: str, tile_config) -> dict:
    """'field=value,...' -> TileConfig fields: every tile field is an int or a 0/1 choice."""
    overrides = {}
    for item in filter(None, fields.split(",")):
        name, _, value = item.partition("=")
        is_bool = isinstance(getattr(tile_config(16, 16), name), bool)
        overrides[name] = bool(int(value)) if is_bool else int(value)
    return overrides


def parse_version(spec: str, index: int, backend: str = "triton", variant: str | None = None):
    """'DIR[:field=value,...]' -> (name, flash_attention with those config fields, on
    `backend`, running `variant` (a Variant's name; None: FA2))."""
    directory, _, fields = spec.partition(":")
    module = load(Path(directory), f"kernels_ab_{index}")
    overrides = config_overrides(fields, module.TileConfig)
    chosen = module.Variant.parse(variant) if variant else module.Variant()

    configs = {}  # built once per (head_dim, dtype): no config work inside the timed calls

    def attention(q, k, v, causal):
        key = q.shape[-1], q.dtype
        if key not in configs:
            fa2 = chosen.fa2 if variant else None  # None: the launcher's default, as before
            configs[key] = replace(module.default_config(q.shape[-1], True, fa2, q.dtype,
                                                         backend), **overrides)
        return module.flash_attention(q, k, v, causal=causal, config=configs[key],
                                      variant=chosen, backend=backend)

    return f"{directory}:{fields}" if fields else directory, attention


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("versions", nargs="+", metavar="DIR[:FIELD=VALUE,...]")
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--backend", default="triton", help="flash_attention's backend for every "
                                                            "version (e.g. hopper)")
    parser.add_argument("--variant", action="append",
                        help="repeatable: the Variants every version runs, each timed on its own "
                             "(default: FA2)")
    parser.add_argument("--causal-only", action="store_true")
    parser.add_argument("--full-only", action="store_true")
    parser.add_argument("--seqlen", type=int, action="append",
                        help="repeatable; default 1024, 4096, 16384")
    parser.add_argument("--head-dim", type=int, action="append", help="repeatable; default 64, 128")
    parser.add_argument("--mode", choices=("fwd", "fwd+bwd"), default="fwd",
                        help="fwd+bwd: the forward and torch.autograd.grad of q, k, v")
    # the benchmark's own do_bench settings (python -m fa2check.ablate's defaults); early A/Bs
    # ran do_bench's defaults (25 ms warm-up, 100 ms timed), a longer load under which the
    # tiles of a cell can rank differently (docs/ablation.md, "The A/B harness")
    parser.add_argument("--warmup-ms", type=float, default=5.0)
    parser.add_argument("--rep-ms", type=float, default=20.0)
    parser.add_argument("--rounds", type=int, default=ROUNDS,
                        help=f"interleaved rounds of every version a cell (default {ROUNDS})")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--commit", help="git commit to record: the device's copy of the tree "
                                         "may carry a stale .git (as fa2check.ablate --commit)")
    args = parser.parse_args()
    from fa2check.ablate.timing import host_ahead_bench

    if args.rounds < 1:
        parser.error(f"--rounds must be at least 1, got {args.rounds}")
    if len(set(args.versions)) < len(args.versions):
        parser.error("a version is given twice: each DIR[:FIELDS] must differ")
    variants = args.variant or [None]
    if len(set(variants)) < len(variants):
        parser.error("a --variant is given twice")
    by_variant = {variant: dict(parse_version(spec, i, args.backend, variant)
                                for i, spec in enumerate(args.versions))
                  for variant in variants}
    dtype = getattr(torch, args.dtype)
    rows = []
    cells = [(seqlen, d, causal) for d in args.head_dim or (64, 128) for causal in (True, False)
             for seqlen in args.seqlen or SEQLENS
             if not (args.causal_only and not causal or args.full_only and causal)]
    for (seqlen, d, causal), variant in itertools.product(cells, variants):
        versions = by_variant[variant]
        heads, batch = paper_heads(d), paper_batch(seqlen)
        backward = args.mode == "fwd+bwd"
        q, k, v = (torch.randn(batch, heads, seqlen, d, device="cuda", dtype=dtype,
                               requires_grad=backward) for _ in range(3))
        do = torch.randn_like(q)
        flops = (4 * batch * heads * seqlen * seqlen * d / (2 if causal else 1)
                 * FLOP_FACTOR[args.mode])

        def call(attend):
            o = attend(q, k, v, causal)
            return torch.cat([g.flatten() for g in torch.autograd.grad(o, (q, k, v), do)]
                             ) if backward else o

        samples = {name: [] for name in versions}
        outputs = {name: call(attend) for name, attend in versions.items()}
        base = next(iter(outputs.values()))
        for r in range(args.rounds):  # interleaved, each version first in turn
            for name in rotated(list(versions), r):
                attend = versions[name]
                samples[name] += host_ahead_bench(lambda: call(attend), args.warmup_ms,
                                                  args.rep_ms).samples
        for name in versions:
            s = summary(samples[name])
            rows.append(dict(version=name, variant=variant or "FA2", seqlen=seqlen, head_dim=d,
                             causal=causal, **s,
                             tflops=tflops(flops, s["median"]),
                             same_output=bool(torch.equal(outputs[name], base)),
                             max_abs_diff=float((outputs[name].float() - base.float()).abs().max())))
            print(f"{name:24s} {variant or 'FA2':20s} S={seqlen:5d} d={d:3d} causal={causal!s:5s} "
                  f"{s['median']:.4f} ms [{s['q25']:.4f}, {s['q75']:.4f}] "
                  f"{rows[-1]['tflops']:6.1f} TFLOP/s same_output={rows[-1]['same_output']} "
                  f"max|diff| to the first {rows[-1]['max_abs_diff']:.2e}",
                  flush=True)
    if args.json:
        environment = describe_environment("cuda", commit=args.commit)
        args.json.write_text(json.dumps({"environment": environment,
                                         "command": " ".join(sys.argv),
                                         "warmup_ms": args.warmup_ms, "rep_ms": args.rep_ms,
                                         "rounds": args.rounds,
                                         "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
