"""The few problem shapes that every property's full-tier (GPU) cases are drawn from.

Triton compiles a kernel per (variant, dtype, head_dim, causal) and per specialization of its
integer arguments (a length divisible by 16 or not, a GQA group of 1 or more, a kv head count
of 1), and on the H200 machine's host a split-K forward takes 10-45 s to compile (head_dim 256
the longest). So the full tier uses five shape classes, one per (dtype, head_dim, causal), and a
property that needs another shape changes only what keeps the specialization (batch, head counts
other than 1 and multiples of 16, lengths with the same divisibility by 16). Between them the
classes cover every dtype, head dims from 16 to 256 (40: not a tile width), both masks,
seqlen_q below, equal to and above seqlen_k, MHA, GQA (groups 3, 4, 5) and MQA, and sequences
of 16k queries and of 16k keys.
"""
from dataclasses import replace

from fa2check.core.problems import Problem

GQA_BF16_D64 = Problem(2, 8, 2, 2048, 2048, 64, "bfloat16", causal=True)  # equal lengths
LONG_KEYS_FP16_D128 = Problem(1, 4, 4, 1031, 16384, 128, "float16", causal=True)  # Sq < Sk, MHA
# Sq > Sk, MQA, a head_dim that is not a tile width (the kernels pad it)
LONG_QUERIES_FP32_D40 = Problem(1, 4, 1, 16384, 1000, 40, "float32", causal=True)
WIDE_BF16_D256 = Problem(2, 6, 2, 513, 1000, 256, "bfloat16", causal=False)
NARROW_FP16_D16 = Problem(1, 10, 2, 4096, 4096, 16, "float16", causal=False)


def like(base: Problem, seed: int, **changes) -> Problem:
    """`base` with another seed and changes that keep its compile class (see above)."""
    problem = replace(base, seed=seed, **changes)
    for name in ("seqlen_q", "seqlen_k"):
        if (getattr(problem, name) % 16 == 0) != (getattr(base, name) % 16 == 0):
            raise ValueError(f"{name} {getattr(problem, name)} changes the compile class of {base}")
    return problem
