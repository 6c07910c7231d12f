"""Every variant's forward and backward against the float64 oracle, by the pass rule."""
from dataclasses import replace
from functools import partial

import pytest

from fa2check.core.checks import Reference
from fa2check.core.problems import Problem
from kernels import Variant, default_config, flash_attention
from kernels.launch_order import LONGEST_FIRST_MIN_KEYS
from lattice import lattice


def _assert_passes(checks, variant, problem):
    failed = [str(c) for c in checks if not c.passed]
    assert not failed, f"{variant} on {problem}: " + "; ".join(failed)


def _assert_passes_with_tiles(problem, device, variants, backward=True, **fields):
    """Each of `variants` on `problem` with the launcher's default tiles changed in `fields`."""
    ref = Reference(problem, device, backward=backward)
    config = replace(default_config(problem.head_dim, device == "cuda", None, problem.dtype),
                     **fields)
    for variant in variants:  # split-K's slices fitted to the tiles, as default_config does
        fitted = config.for_variant(variant, device == "cuda")
        _assert_passes(ref.check(partial(flash_attention, config=fitted), variant), variant,
                       problem)


@pytest.mark.parametrize("variant,problem", lattice(), ids=lambda x: str(x))
def test_forward_backward_lattice(variant, problem, device):
    ref = Reference(problem, device)
    _assert_passes(ref.check(flash_attention, variant), variant, problem)


LENGTHS = ((1, 1), (1, 100), (100, 1), (17, 63), (63, 17), (65, 100), (100, 65))


@pytest.mark.parametrize("causal", (False, True), ids=("full", "causal"))
@pytest.mark.parametrize("seqlen_q,seqlen_k", LENGTHS)
def test_forward_every_variant_odd_lengths(seqlen_q, seqlen_k, causal, device):
    problem = Problem(1, 4, 2, seqlen_q, seqlen_k, 16, "float16", causal, seed=seqlen_q * seqlen_k)
    ref = Reference(problem, device, backward=False)
    for variant in Variant.all():
        _assert_passes(ref.check(flash_attention, variant), variant, problem)


BACKWARD_PROBLEMS = [Problem(2, 6, 2, 65, 100, 32, "float16", True, seed=1),
                     Problem(1, 4, 1, 100, 63, 32, "bfloat16", False, seed=2),
                     Problem(1, 3, 1, 63, 17, 16, "float32", True, seed=3)]


@pytest.mark.parametrize("dq_pass", (False, True), ids=("dq-in-loop", "dq-pass"))
@pytest.mark.parametrize("problem", BACKWARD_PROBLEMS, ids=str)
def test_backward_both_places_of_dq(problem, dq_pass, device):
    """dQ in the dK/dV loop and in its own pass, every variant (split_q off: split-K dQ);
    odd lengths so that partial row and column blocks meet the causal diagonal."""
    _assert_passes_with_tiles(problem, device, Variant.all(), bwd_dq_pass=dq_pass)


@pytest.mark.parametrize("problem", BACKWARD_PROBLEMS[:2], ids=str)
def test_forward_through_tensor_descriptors(problem, device):
    """TileConfig.tma: K/V tiles through tensor descriptors (zeros past the keys' end instead
    of masked loads), every variant, forward and backward."""
    _assert_passes_with_tiles(problem, device, Variant.all(), tma=True)


@pytest.mark.parametrize("seqlen_k", (LONGEST_FIRST_MIN_KEYS.value - 1,
                                      LONGEST_FIRST_MIN_KEYS.value))
def test_causal_forward_both_launch_orders(seqlen_k, device):
    """The causal forward runs its programs in index order below LONGEST_FIRST_MIN_KEYS keys
    and longest first from there (kernels/launch_order.py): both orders cover every row block
    once."""
    problem = Problem(1, 3, 1, 100, seqlen_k, 16, "float16", True, seed=seqlen_k)
    # wide key tiles: the interpreter's cost grows with the number of tile steps
    _assert_passes_with_tiles(problem, device, [v for v in Variant.all() if v.seq_parallel],
                              backward=False, block_m=32, block_n=128)


GPU_PROBLEMS = [
    Problem(2, 8, 8, 1024, 1024, 64, "bfloat16", True),
    Problem(2, 8, 2, 1031, 2048, 128, "float16", True),
    Problem(1, 6, 1, 2048, 777, 128, "bfloat16", False),
    Problem(2, 4, 2, 513, 1024, 256, "float16", False),
    # float32 runs on the CUDA cores, and the variants without seq_parallel put a whole head
    # in one program: at 4096^2 this case alone did not finish in 225 s on the H200; at
    # 2048^2 it passed alone in 243 s on a fresh device (compiles included, D09)
    Problem(1, 4, 4, 2048, 2048, 128, "float32", True),
    Problem(1, 10, 2, 333, 4000, 32, "bfloat16", True),
    Problem(1, 4, 4, 1500, 1500, 16, "float16", False),
]


@pytest.mark.gpu
@pytest.mark.parametrize("problem", GPU_PROBLEMS, ids=str)
def test_gpu_larger_shapes_every_variant(problem, device):
    ref = Reference(problem, device)
    for variant in Variant.all():
        _assert_passes(ref.check(flash_attention, variant), variant, problem)
