"""A/B timing of kernel versions: the forward of several copies of the kernels/ package, timed
interleaved on the same cells with the same tile config (the launcher's default for the GPU).

    python3 ablations/compare_kernels.py DIR [DIR ...] [--json PATH]

Each DIR holds a copy of kernels/ (e.g. exported from an older commit with
`git show COMMIT:kernels/forward.py > DIR/forward.py` ...). For use in ablations/NOTES.md when a
kernel change must show what it costs; `fa2check.ablate` remains the benchmark of record.
"""
import argparse
import importlib.util
import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from fa2check.environment import describe_environment  # noqa: E402
from fa2check.timing import summary, tflops  # noqa: E402

CELLS = [(seqlen, d, causal) for d in (64, 128) for causal in (True, False)
         for seqlen in (1024, 4096, 16384)]
CAUSAL_CELLS = [c for c in CELLS if c[2]]
ROUNDS = 3


def load(directory: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, directory / "__init__.py",
                                                  submodule_search_locations=[str(directory)])
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dirs", nargs="+", type=Path)
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--causal-only", action="store_true")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    from triton.testing import do_bench

    versions = {d.name: load(d, f"kernels_ab_{i}") for i, d in enumerate(args.dirs)}
    dtype = getattr(torch, args.dtype)
    rows = []
    for seqlen, d, causal in CAUSAL_CELLS if args.causal_only else CELLS:
        heads, batch = 2048 // d, 16384 // seqlen
        q, k, v = (torch.randn(batch, heads, seqlen, d, device="cuda", dtype=dtype)
                   for _ in range(3))
        flops = 4 * batch * heads * seqlen * seqlen * d / (2 if causal else 1)
        samples = {name: [] for name in versions}
        outputs = {name: m.flash_attention(q, k, v, causal=causal) for name, m in versions.items()}
        base = next(iter(outputs.values()))
        for _ in range(ROUNDS):  # interleaved
            for name, m in versions.items():
                samples[name] += do_bench(lambda: m.flash_attention(q, k, v, causal=causal),
                                          return_mode="all")
        for name in versions:
            s = summary(samples[name])
            rows.append(dict(version=name, seqlen=seqlen, head_dim=d, causal=causal, **s,
                             tflops=tflops(flops, s["median"]),
                             same_output=bool(torch.equal(outputs[name], base))))
            print(f"{name:24s} S={seqlen:5d} d={d:3d} causal={causal!s:5s} "
                  f"{s['median']:.4f} ms [{s['q25']:.4f}, {s['q75']:.4f}] "
                  f"{rows[-1]['tflops']:6.1f} TFLOP/s same_output={rows[-1]['same_output']}",
                  flush=True)
    if args.json:
        args.json.write_text(json.dumps({"environment": describe_environment("cuda"),
                                         "command": " ".join(sys.argv), "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
