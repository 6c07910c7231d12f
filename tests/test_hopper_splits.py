"""FA1's num_splits on the Hopper chassis's FA1 schedule (kernels/hopper_forward.py, D58): grid
(splits, batch * heads), program s taking every splits-th row block of its (batch, head), the
longest first under causal. Each row's arithmetic does not depend on which program computes
it, so o and the statistics must be bitwise those of one program a (batch, head), and pass
the float64 oracle. The chassis runs only on an sm_90 GPU (Triton's interpreter cannot run
Gluon): on the CPU only the choice of splits is checked."""
from dataclasses import replace
from functools import partial

import pytest
import torch

from fa2check.core.checks import Reference
from fa2check.core.problems import Problem
from kernels import Variant, default_config, flash_attention
from kernels.plan.fa1_launch import FA1_MAX_SPLITS, INTERPRETER_SMS, fa1_num_splits
from kernels.plan.hopper_forward import fa1_splits

PROBLEMS = [
    # GQA, causal, seqlen_q > seqlen_k: the first row blocks see no key (O = 0, L = -inf)
    Problem(2, 4, 2, 1000, 300, 64, "bfloat16", True, seed=41),
    # MQA, causal, seqlen_q < seqlen_k, odd lengths: partial last row block and last tile
    Problem(1, 3, 1, 777, 1100, 128, "float16", True, seed=42),
    # full mask, odd lengths
    Problem(2, 2, 2, 900, 333, 128, "bfloat16", False, seed=43),
]
SPLITS = (3, 0)  # three programs a (batch, head); FA1's heuristic
FA1_VARIANTS = [Variant(defer, False, split_q) for defer in (True, False)
                for split_q in (True, False)]


def _config(problem, variant, splits):
    config = default_config(problem.head_dim, True, variant, problem.dtype, "hopper",
                            causal=problem.causal)
    return replace(config, fa1_splits=splits)


def test_fa1_splits_takes_fa1s_heuristic_or_the_count_asked_for():
    """0: FA1's heuristic over the SMs (the interpreter's stand-in count) with one CTA an SM
    (the compile gate's figure for every chassis variant), at most one split a row block;
    a count asked for is kept, at most one a row block."""
    config = default_config(64, True, Variant(seq_parallel=False), "bfloat16", "hopper")
    cpu = torch.device("cpu")
    for batch_heads, row_blocks in ((8, 8), (8, 40), (100, 16), (264, 16)):
        expected = fa1_num_splits(batch_heads, INTERPRETER_SMS, 1,
                                  min(FA1_MAX_SPLITS, row_blocks))
        assert fa1_splits(replace(config, fa1_splits=0), batch_heads, row_blocks,
                          cpu) == expected
    assert fa1_splits(replace(config, fa1_splits=0), 8, 40, cpu) == 16  # 128 of 132 SMs
    assert fa1_splits(replace(config, fa1_splits=0), 264, 16, cpu) == 1  # two whole waves
    assert fa1_splits(replace(config, fa1_splits=5), 8, 40, cpu) == 5
    assert fa1_splits(replace(config, fa1_splits=5), 8, 3, cpu) == 3


@pytest.mark.gpu
@pytest.mark.parametrize("problem", PROBLEMS, ids=str)
def test_gpu_hopper_fa1_splits_match_one_program_and_pass_the_oracle(problem, device):
    """Every FA1-schedule variant of the chassis with three splits and with FA1's heuristic
    (more than one split for these problems): o and the statistics bitwise those of one
    program a (batch, head), and the forward passes the float64 oracle."""
    ref = Reference(problem, device, backward=False)
    q, k, v = ref.q, ref.k, ref.v
    rows = 128  # split-Q's row block; split-K's is 64, so it has at least as many
    row_blocks = -(-problem.seqlen_q // rows)
    assert fa1_splits(_config(problem, FA1_VARIANTS[0], 0), problem.batch * problem.heads_q,
                      row_blocks, q.device) > 1
    for variant in FA1_VARIANTS:
        one = flash_attention(q, k, v, causal=problem.causal, variant=variant, return_lse=True,
                              config=_config(problem, variant, 1), backend="hopper")
        for splits in SPLITS:
            config = _config(problem, variant, splits)
            o, lse = flash_attention(q, k, v, causal=problem.causal, variant=variant,
                                     return_lse=True, config=config, backend="hopper")
            assert torch.equal(o, one[0]), (
                f"{variant} splits={splits}: {int((o != one[0]).sum())} elements of o differ")
            assert torch.equal(lse, one[1]), f"{variant} splits={splits}: lse differs"
            checks = ref.check(partial(flash_attention, config=config, backend="hopper"),
                               variant)
            failed = [str(c) for c in checks if not c.passed]
            assert not failed, f"{variant} splits={splits} on {problem}: " + "; ".join(failed)
