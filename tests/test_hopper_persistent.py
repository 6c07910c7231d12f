"""The Hopper chassis forward's persistent grid (TileConfig.persistent, kernels/hopper_forward.py,
D98): one program an SM walks row blocks p, p + programs, ... in the order the grid of one
program a row block launches them, its K/V ring, Q buffers and sanitising counts running on
from one row block to the next. Each row's arithmetic does not depend on which program
computes it, so o and the statistics must be bitwise those of one program a row block, NaN
from non-finite V included, and pass the float64 oracle. The chassis runs only on an sm_90 GPU
(Triton's interpreter cannot run Gluon): on the CPU only the grid's choice is checked."""
from dataclasses import replace
from functools import partial

import pytest
import torch

from fa2check.core.checks import Reference
from fa2check.core.problems import Problem
from kernels import TileConfig, Variant, default_config, flash_attention
from kernels.plan.fa1_launch import INTERPRETER_SMS
from kernels.plan.hopper_forward import persistent_programs, static_order_balanced

# more row blocks than the H100's or H200's 132 SMs in all but the second: programs take
# several, causal ones of different lengths
PROBLEMS = [
    # GQA, causal, one row block a program and more: 4 row blocks x 64 (batch, head)s
    Problem(4, 16, 4, 512, 512, 64, "bfloat16", True, seed=51),
    # causal, seqlen_q > seqlen_k: the first row blocks see no key (O = 0, L = -inf)
    Problem(2, 12, 12, 1000, 300, 128, "float16", True, seed=52),
    # full mask, odd lengths: a partial last row block and last tile
    Problem(4, 6, 2, 777, 1100, 128, "bfloat16", False, seed=53),
]
VARIANTS = [Variant(), Variant(defer_norm=False), Variant(split_q=False),
            Variant(defer_norm=False, split_q=False), Variant(pingpong=True),
            Variant(overlap=True), Variant(pingpong=True, overlap=True)]


def test_persistent_programs_one_an_sm_where_the_schedule_allows():
    """One program an SM (the interpreter's stand-in count), no more than the row blocks; none
    unless asked for, nor for FA1's schedule or without the producer warp."""
    on = TileConfig(block_m=128, block_n=128, persistent=True)
    cpu = torch.device("cpu")
    assert persistent_programs(on, Variant(), 64, 4096, 4096, False, cpu) == INTERPRETER_SMS
    assert persistent_programs(on, Variant(pingpong=True), 7, 128, 128, True, cpu) == 7
    assert persistent_programs(on, Variant(split_q=False), 2, 192, 192, False, cpu) == 6
    for off, variant in ((replace(on, persistent=False), Variant()),
                         (on, Variant(seq_parallel=False)), (on, Variant(warp_specialize=False))):
        assert persistent_programs(off, variant, 64, 4096, 4096, False, cpu) == 0


@pytest.mark.parametrize("seqlen, heads, balanced", [
    (512, 512, True), (2048, 128, True), (8192, 32, True), (16384, 32, True),
    (16384, 16, False),  # 128 row blocks a head on 132 programs: measured 0.72x the grid
    (1000, 24, True)])  # seqlen_q > seqlen_k below: the first row blocks see no key
def test_causal_grids_stay_persistent_only_where_the_static_order_balances(seqlen, heads,
                                                                          balanced):
    """The paper grid's causal cells (batch x heads = 16k / seqlen x 16 at d=128, x 32 at
    d=64) on 132 programs: only 16k at d=128, a wave about one head, gives the static order's
    busiest program 1.5x the work of the grid's busiest SM and takes the hardware's grid."""
    seqlen_k = 300 if seqlen == 1000 else seqlen
    assert static_order_balanced(seqlen, seqlen_k, 128, 128, heads, 132) == balanced
    on = TileConfig(block_m=128, block_n=128, persistent=True)
    programs = persistent_programs(on, Variant(), heads, seqlen, seqlen_k, True,
                                   torch.device("cpu"))
    assert programs == (132 if balanced else 0)
    # a full mask is balanced by any order: every row block has the same work
    assert persistent_programs(on, Variant(), heads, seqlen, seqlen_k, False,
                               torch.device("cpu")) == 132


def _bits(t):
    """t's bits as integers: NaN compared by its bits, not skipped."""
    return t.view({2: torch.int16, 4: torch.int32}[t.element_size()])


def _run(q, k, v, problem, variant, persistent):
    config = replace(default_config(problem.head_dim, True, variant, problem.dtype, "hopper",
                                    causal=problem.causal, seqlen_q=problem.seqlen_q,
                                    seqlen_k=problem.seqlen_k), persistent=persistent)
    return config, flash_attention(q, k, v, causal=problem.causal, variant=variant,
                                   return_lse=True, config=config, backend="hopper")


@pytest.mark.gpu
@pytest.mark.parametrize("problem", PROBLEMS, ids=str)
def test_gpu_persistent_grid_matches_one_program_a_row_block_and_passes_the_oracle(problem,
                                                                                    device):
    """Every seq_parallel variant (the FA2 lattice's four and the Hopper switches on FA2): o
    and lse bitwise those of one program a row block, with finite inputs and with NaN and inf
    in V (causal: V's sanitising, whose tiles a program counts across its row blocks), and
    the finite forward passes the float64 oracle."""
    ref = Reference(problem, device, backward=False)
    poisoned = ref.v.clone()
    poisoned[:, :, 5::97] = float("nan")
    poisoned[:, :, 11::131] = float("inf")
    for variant in VARIANTS:
        for v in (ref.v, poisoned):
            _, one = _run(ref.q, ref.k, v, problem, variant, False)
            config, (o, lse) = _run(ref.q, ref.k, v, problem, variant, True)
            assert persistent_programs(config, variant, problem.batch * problem.heads_q,
                                       problem.seqlen_q, problem.seqlen_k, problem.causal,
                                       ref.q.device) > 0, "the grid is not persistent here"
            assert torch.equal(_bits(o), _bits(one[0])), (
                f"{variant}: {int((_bits(o) != _bits(one[0])).sum())} elements of o differ")
            assert torch.equal(_bits(lse), _bits(one[1])), f"{variant}: lse differs"
        checks = ref.check(partial(flash_attention, config=config, backend="hopper"), variant)
        failed = [str(c) for c in checks if not c.passed]
        assert not failed, f"{variant} persistent on {problem}: " + "; ".join(failed)
