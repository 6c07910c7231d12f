"""Question: are two kernel trees' outputs and gradients bitwise equal? (D25, D38)

Are two kernel trees' outputs and gradients bitwise equal? For refactors that must not change
numbers:

    TRITON_INTERPRET=1 python ablations/probes/same_gradients.py kernels ablations/ab/NAME/kernels

Each tree is imported as a package of its own (as compare_kernels.py does). For every problem
below (odd lengths, causal, GQA, one query row, one key, float16/bfloat16/float32), both places
of dQ, with and without a gradient through the returned lse, and every variant the backward
tells apart (split_q does not reach it), o, lse, dq, dk and dv of the two trees are compared
with torch.equal. dq from float32 atomic adds (dQ in the loop with seq_parallel) takes its bits
from the order of the adds: on a GPU that varies from run to run, so it is not compared there;
the interpreter adds in launch order, so a change of the launch order changes it. Prints each
difference and a count; exits 1 if any differ.
"""
import argparse
import itertools
import sys
from dataclasses import replace
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from compare_kernels import load  # noqa: E402  (each tree a package of its own)

# (batch, heads_q, heads_kv, seqlen_q, seqlen_k, head_dim, dtype, causal)
PROBLEMS = [(1, 4, 2, 65, 100, 32, torch.float16, True),
            (1, 2, 1, 100, 63, 32, torch.bfloat16, False),
            (1, 3, 3, 63, 17, 16, torch.float32, True),
            (2, 2, 2, 1, 40, 16, torch.float16, True),
            (1, 2, 2, 40, 1, 16, torch.float16, True)]
_loads = itertools.count()


def outputs(kernels, variant, inputs, causal, dq_pass, use_lse, device):
    """o, lse, dq, dk, dv."""
    q, k, v, do, dlse = inputs
    config = replace(kernels.default_config(q.shape[-1], device == "cuda", None, q.dtype),
                     bwd_dq_pass=dq_pass)
    q, k, v = (t.clone().requires_grad_() for t in (q, k, v))
    o, lse = kernels.flash_attention(q, k, v, causal=causal, variant=variant, config=config,
                                     return_lse=True)
    loss = (o.float() * do.float()).sum() + ((lse * dlse).sum() if use_lse else 0)
    return (o, lse, *torch.autograd.grad(loss, (q, k, v)))


def compare(dir_a: str, dir_b: str, problems=PROBLEMS) -> tuple[int, list[str]]:
    """(outputs and gradients compared, a line for each that differs)."""
    # a fresh name each load: a package's submodules are cached under its name
    trees = [load(Path(d).resolve(), f"kernels_same_gradients_{next(_loads)}")
             for d in (dir_a, dir_b)]
    on_gpu = torch.cuda.is_available() and not trees[0].interface.interpreting()
    device = "cuda" if on_gpu else "cpu"
    compared, differ = 0, []
    for problem, dq_pass, use_lse in itertools.product(problems, (True, False), (False, True)):
        batch, heads_q, heads_kv, seqlen_q, seqlen_k, head_dim, dtype, causal = problem
        g = torch.Generator().manual_seed(seqlen_q * 7 + seqlen_k)
        shapes = [(batch, heads_q, seqlen_q, head_dim), (batch, heads_kv, seqlen_k, head_dim),
                  (batch, heads_kv, seqlen_k, head_dim), (batch, heads_q, seqlen_q, head_dim)]
        inputs = [torch.randn(s, generator=g).to(dtype).to(device) for s in shapes]
        inputs.append(torch.randn(batch, heads_q, seqlen_q, generator=g).to(device))
        for flags in itertools.product((False, True), repeat=2):  # defer_norm, seq_parallel
            results = [outputs(tree, tree.Variant(*flags, split_q=True), inputs, causal,
                                dq_pass, use_lse, device) for tree in trees]
            for name, x, y in zip(("o", "lse", "dq", "dk", "dv"), *results):
                if name == "dq" and device == "cuda" and flags[1] and not dq_pass:
                    continue  # float32 atomic adds: their order, so dq's bits, vary
                compared += 1
                if not torch.equal(x, y):
                    differ.append(f"{name} {problem} dq_pass={dq_pass} lse_grad={use_lse} "
                                  f"defer_norm, seq_parallel={flags}: max |diff| "
                                  f"{(x.float() - y.float()).abs().max().item():.3g}")
    return compared, differ


def main(argv) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("trees", nargs=2, metavar="KERNELS_DIR", help="two copies of kernels/")
    compared, differ = compare(*p.parse_args(argv).trees)
    for line in differ:
        print("differs:", line)
    print(f"{compared} outputs and gradients compared, {len(differ)} differ")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
