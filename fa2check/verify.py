"""python -m fa2check.verify: every variant's forward and backward against the float64 oracle.

Prints a table variant x output (worst error ratio, pass/fail), writes every case's numbers with
the environment to --json, and exits non-zero iff a check fails. Each failure is printed with a
command that reproduces just that case.
"""
from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
import time

from .environment import describe_environment, select_device

QUICK_SHAPES = (  # (batch, heads_q, heads_kv, seqlen_q, seqlen_k, head_dim): CPU interpreter
    (1, 4, 2, 65, 100, 32),
    (2, 3, 1, 100, 17, 16),
    (1, 2, 2, 1, 63, 64),
)
FULL_SHAPES = (  # GPU
    (2, 8, 2, 1024, 1024, 64),
    (1, 8, 8, 2048, 1031, 128),
    (1, 6, 1, 777, 4096, 128),
    (2, 4, 2, 513, 1024, 256),
    (1, 4, 4, 4096, 4096, 32),
    (2, 10, 2, 1500, 1500, 16),
)
DTYPES = ("float16", "bfloat16", "float32")


def problems(tier: str):
    from .problems import Problem

    shapes = QUICK_SHAPES if tier == "quick" else FULL_SHAPES
    seed = 0
    for shape in shapes:
        for dtype in DTYPES:
            for causal in (False, True):
                yield Problem(*shape, dtype=dtype, causal=causal, seed=seed)
                seed += 1


def parse_args(argv=None):
    parser = argparse.ArgumentParser(prog="python -m fa2check.verify", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tier", choices=("quick", "full"), default=None,
                        help="quick: small CPU-interpreter shapes; full: GPU shapes "
                             "(default: full with a GPU, quick without)")
    parser.add_argument("--variant", action="append", default=None,
                        help="variant name such as +defer+seqpar+splitq, or fa2/fa1; repeatable")
    parser.add_argument("--problem", default=None,
                        help="run one problem, given as JSON (printed with each failure)")
    parser.add_argument("--forward-only", action="store_true", help="skip the backward checks")
    parser.add_argument("--json", dest="json_path", default=None, help="write every case here")
    return parser.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    device = select_device()  # sets TRITON_INTERPRET before triton is imported
    from rich.console import Console
    from rich.progress import Progress
    from rich.table import Table

    from kernels import Variant, flash_attention

    from .checks import Reference
    from .problems import Problem

    console = Console()
    tier = args.tier or ("full" if device == "cuda" else "quick")
    variants = [Variant.parse(v) for v in args.variant] if args.variant else Variant.all()
    todo = [Problem(**json.loads(args.problem))] if args.problem else list(problems(tier))
    cases, worst = [], {}
    started = time.time()
    with Progress(console=console, transient=True) as progress:
        task = progress.add_task(f"verify ({tier}, {device})", total=len(todo) * len(variants))
        for problem in todo:
            reference = Reference(problem, device, backward=not args.forward_only)
            for variant in variants:
                checks = reference.check(flash_attention, variant)
                cases.append({"variant": str(variant), "problem": problem.as_dict(),
                              "checks": [c.as_dict() for c in checks],
                              "passed": all(c.passed for c in checks)})
                for c in checks:
                    key = (str(variant), c.output)
                    ratio, ok = worst.get(key, (0.0, True))
                    worst[key] = (max(ratio, c.ratio), ok and c.passed)
                progress.advance(task)

    outputs = sorted({o for _, o in worst}, key=["o", "lse", "dq", "dk", "dv"].index)
    table = Table(title=f"worst error / allowed over {len(todo)} problems ({tier} tier, {device})")
    table.add_column("variant")
    for output in outputs:
        table.add_column(output, justify="right")
    for variant in variants:
        cells = []
        for output in outputs:
            ratio, ok = worst[(str(variant), output)]
            cells.append(f"[green]{ratio:.2f}[/]" if ok else f"[red]FAIL {ratio:.2f}[/]")
        table.add_row(f"{variant} ({variant.label})", *cells)
    console.print(table)

    failures = [c for c in cases if not c["passed"]]
    for case in failures:
        bad = "; ".join(f"{c['output']} ratio {c['ratio']:.2f}" for c in case["checks"] if not c["passed"])
        command = (f"python -m fa2check.verify --variant={shlex.quote(case['variant'])} "
                   f"--problem {shlex.quote(json.dumps(case['problem']))}")
        console.print(f"[red]FAIL[/] {case['variant']} {Problem(**case['problem'])}: {bad}\n  {command}",
                      soft_wrap=True)
    elapsed = time.time() - started
    console.print(f"{len(cases) - len(failures)} passed, {len(failures)} failed ({elapsed:.0f} s)")
    if args.json_path:
        report = {"environment": describe_environment(device), "tier": tier,
                  "command": " ".join([sys.executable, "-m", "fa2check.verify", *(argv or sys.argv[1:])]),
                  "seconds": elapsed, "cases": cases}
        os.makedirs(os.path.dirname(os.path.abspath(args.json_path)), exist_ok=True)
        with open(args.json_path, "w") as f:
            json.dump(report, f, indent=1, allow_nan=True)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
