"""o, lse, dK and dV are bitwise identical over repeated runs; dQ is too without atomics
(seq_parallel off, or dQ in a pass of its own), and under atomics (seq_parallel on, dQ in the
dK/dV loop) it varies only within a bound that the
GPU run measures and records. The checks are the determinism property's
(properties/determinism.py); tests/test_properties.py shows them failing on test doubles."""
from dataclasses import replace
from functools import partial

import pytest

from fa2check.core.problems import Problem
from kernels import Variant, default_config, flash_attention
from properties import determinism
from properties.base import Case


@pytest.mark.parametrize("variant", Variant.all(), ids=str)
def test_repeated_runs_are_bitwise_identical(variant, device):
    case = Case("repeat", Problem(1, 4, 2, 70, 45, 16, "bfloat16", causal=True, seed=11))
    result = determinism.run(flash_attention, variant, case, device, repeats=2)
    assert result.passed, result.message
    exact = set(result.check("bitwise_run2").numbers)
    atomics = default_config(16, device == "cuda", variant, "bfloat16").dq_atomics(variant)
    assert exact == {"o", "lse", "dk", "dv"} | (set() if atomics else {"dq"})


@pytest.mark.gpu
@pytest.mark.parametrize("variant", [v for v in Variant.all() if v.seq_parallel], ids=str)
def test_gpu_dq_atomic_spread_is_bounded(variant, device, record_property):
    # float32, so that no rounding to a narrower dtype hides the atomics' different orders;
    # dQ in the dK/dV loop, the configuration that sums it with atomics
    case = Case("repeat", Problem(2, 8, 2, 2048, 2048, 128, "float32", causal=True, seed=5))
    config = replace(default_config(128, True, variant, "float32"), bwd_dq_pass=False)
    result = determinism.run(partial(flash_attention, config=config), variant, case, device,
                             repeats=5)
    spread = result.check("dq_spread").numbers
    record_property("dq_spread", spread["spread"])
    record_property("dq_spread_relative_to_max", spread["spread_relative_to_max_dq"])
    record_property("dq_allowed", spread["allowed_dq"])
    assert result.passed, result.message
