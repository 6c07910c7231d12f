"""Every variant's forward and backward against the float64 oracle, by the pass rule."""
import pytest

from fa2check.checks import Reference
from fa2check.problems import Problem
from kernels import Variant, flash_attention
from lattice import lattice


def _assert_passes(checks, variant, problem):
    failed = [str(c) for c in checks if not c.passed]
    assert not failed, f"{variant} on {problem}: " + "; ".join(failed)


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


GPU_PROBLEMS = [
    Problem(2, 8, 8, 1024, 1024, 64, "bfloat16", True),
    Problem(2, 8, 2, 1031, 2048, 128, "float16", True),
    Problem(1, 6, 1, 2048, 777, 128, "bfloat16", False),
    Problem(2, 4, 2, 513, 1024, 256, "float16", False),
    Problem(1, 4, 4, 4096, 4096, 128, "float32", True),
    Problem(1, 10, 2, 333, 4000, 32, "bfloat16", True),
    Problem(1, 4, 4, 1500, 1500, 16, "float16", False),
]


@pytest.mark.gpu
@pytest.mark.parametrize("problem", GPU_PROBLEMS, ids=str)
def test_gpu_larger_shapes_every_variant(problem, device):
    ref = Reference(problem, device)
    for variant in Variant.all():
        _assert_passes(ref.check(flash_attention, variant), variant, problem)
