"""The test lattice: variants x causal x dtype, each paired with a shape so that every variant,
every dtype and every masking mode meets every shape (MHA/GQA/MQA, odd and unequal lengths)."""
from fa2check.core.problems import Problem
from kernels import Variant

DTYPES = ("float16", "bfloat16", "float32")
# (heads_q, heads_kv, seqlen_q, seqlen_k): MHA, GQA, MQA; lengths 1, 17, 63, 65, 100, both
# seqlen_q < seqlen_k and seqlen_q > seqlen_k
SHAPES = (
    (2, 2, 17, 63),
    (6, 2, 65, 17),
    (3, 1, 100, 100),
    (2, 2, 1, 65),
    (4, 1, 63, 1),
    (4, 2, 100, 63),
)


def lattice(head_dim=32, batch=2):
    """48 (variant, problem) pairs; for a fixed variant, dtype or causal flag the shape index
    (i_variant + 2 * i_dtype + i_causal) % 6 takes all six values."""
    cases = []
    for i_variant, variant in enumerate(Variant.all()):
        for i_dtype, dtype in enumerate(DTYPES):
            for i_causal, causal in enumerate((False, True)):
                hq, hkv, sq, sk = SHAPES[(i_variant + 2 * i_dtype + i_causal) % len(SHAPES)]
                cases.append((variant, Problem(batch, hq, hkv, sq, sk, head_dim, dtype, causal,
                                               seed=len(cases))))
    return cases
