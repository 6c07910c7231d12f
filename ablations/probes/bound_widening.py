"""Question: how much did a change to extreme_logits' element-wise bound widen the gradients'
allowed error? (D109)

    python ablations/probes/bound_widening.py 22125f2

For each value distribution, dtype and mask on one 97 x 81 problem (d=64, GQA 2, seed 11),
the allowed error of dq, dk and dv (the pass rule's plus the bound's terms) with the tree's
properties/extreme_logits.py against the one at REV: the median and the largest of the
element-wise ratios new / old (CPU, no GPU needed).
"""
import importlib.util
import os
import subprocess
import sys
import tempfile

import torch

sys.path.insert(0, os.getcwd())
from fa2check.core.checks import Reference  # noqa: E402
from fa2check.core.problems import Problem  # noqa: E402
from properties import extreme_logits  # noqa: E402
from properties.base import Case  # noqa: E402
from properties.strategies import make_inputs  # noqa: E402

DISTRIBUTIONS = ("normal", "heavy-tailed", "near-duplicate-keys", "outlier-channels")


def module_at(rev: str):
    """properties/extreme_logits.py as it was at git revision `rev`, imported."""
    text = subprocess.run(["git", "show", f"{rev}:properties/extreme_logits.py"], check=True,
                          capture_output=True, text=True).stdout
    path = os.path.join(tempfile.mkdtemp(), "extreme_logits_at_rev.py")
    with open(path, "w") as f:
        f.write(text)
    spec = importlib.util.spec_from_file_location("properties.extreme_logits_at_rev", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def widening(old, new, problem: Problem, distribution: str) -> dict:
    """{output: (median, largest)} of the allowed errors' element-wise ratios new / old."""
    ref = Reference(problem, "cpu", inputs=make_inputs(problem, distribution))
    rule = {c.output: c for c in ref.judge(ref.oracle)}
    case = Case(distribution, problem)
    before, after = old.allowance(case, ref), new.allowance(case, ref)
    out = {}
    for name in ("dq", "dk", "dv"):
        ratio = (rule[name].allowed + after[name]) / (rule[name].allowed + before[name])
        out[name] = (float(ratio.median()), float(ratio.max()))
    return out


def main(rev: str):
    old = module_at(rev)
    for distribution in DISTRIBUTIONS:
        for dtype in ("bfloat16", "float16"):
            for causal in (False, True):
                problem = Problem(1, 4, 2, 97, 81, 64, dtype, causal, seed=11)
                cells = widening(old, extreme_logits, problem, distribution)
                print(f"{distribution:20s} {dtype:9s} {'causal' if causal else 'full':6s} "
                      + "  ".join(f"{n} median {m:.2f}x max {x:.2f}x"
                                  for n, (m, x) in cells.items()))


if __name__ == "__main__":
    if len(sys.argv) != 2 or sys.argv[1] in ("-h", "--help"):
        print(__doc__)
        sys.exit(0 if sys.argv[1:] in (["-h"], ["--help"]) else 2)
    torch.manual_seed(0)
    main(sys.argv[1])
