"""kernels/hopper_forward.py's launcher on the CPU (the launch recorded, not run): every
tensor and descriptor it passes has the type the kernel's sm_90 signature (`sm90_signature`,
which the compile gate and the CPU compile tests build) says, in every variant, so the kernel
those tests check is the kernel the launcher gets; and seq_parallel's unused state
descriptors are made once."""
import pytest
import torch
from triton.backends.compiler import GPUTarget
from triton.compiler import make_backend
from triton.runtime.jit import native_specialize_impl

import kernels.hopper_forward as chassis
from kernels import TileConfig
from kernels.variant import Variant

CUDA = make_backend(GPUTarget("cuda", 90, 32))


class Recorder:
    def __init__(self):
        self.launches = []

    def __getitem__(self, grid):
        return lambda *args, **kwargs: self.launches.append((grid, args, kwargs))


def launch_types(variant, dtype, head_dim, causal, o_residual, monkeypatch, persistent=False):
    """The types (as Triton specializes them) of the tensors and descriptors one
    hopper_attn_fwd call launches with, by parameter name, its keyword arguments and grid."""
    recorder = Recorder()
    monkeypatch.setattr(chassis, "_HOPPER_ATTN_FWD", recorder)
    q, k, v = (torch.zeros(2, 2, 192, head_dim, dtype=dtype) for _ in range(3))
    config = TileConfig(block_m=128, block_n=128, num_stages=stages(variant),
                        persistent=persistent)
    chassis.hopper_attn_fwd(q, k, v, causal, 0.1, variant, config, o_residual=o_residual)
    (grid, args, kwargs), = recorder.launches
    names = chassis._hopper_attn_fwd.arg_names
    return {name: native_specialize_impl(CUDA, a, False, True, True)[0].replace(" ", "")
            for name, a in zip(names, args) if hasattr(a, "dtype") or hasattr(a, "base")
            }, kwargs, grid


def stages(variant):
    return 2 if variant.seq_parallel else 1  # FA1's schedule's split-Q d=128: one fits


VARIANTS = [Variant(d, s, q) for d in (True, False) for s in (True, False) for q in (True, False)]


@pytest.mark.parametrize("variant", VARIANTS, ids=str)
@pytest.mark.parametrize("o_residual", [False, True])
@pytest.mark.parametrize("persistent", [False, True])
def test_the_launch_matches_the_sm90_signature(variant, o_residual, persistent, monkeypatch):
    """Types and constexprs; a persistent grid (seq_parallel only) launches one program a
    row block here (2 x 2 heads x 2 or 3 row blocks of 128 or 64 rows: fewer than the SMs) on
    one grid axis, with two Q buffers."""
    for dtype, head_dim, causal in ((torch.bfloat16, 128, True), (torch.float16, 64, False)):
        types, kwargs, grid = launch_types(variant, dtype, head_dim, causal, o_residual,
                                           monkeypatch, persistent)
        signature, constexprs = chassis.sm90_signature(
            variant, str(dtype)[6:], head_dim, 128, stages(variant), causal, o_residual,
            persistent)
        expected = {name: signature[name].replace(" ", "") for name in types}
        assert types == expected
        assert {name: kwargs[name] for name in constexprs} == constexprs
        on = persistent and variant.seq_parallel
        assert kwargs["PERSISTENT"] == on
        if variant.seq_parallel:
            row_blocks = 2 if variant.split_q else 3
            assert grid == ((4 * row_blocks, 1) if on else (row_blocks, 4))
            assert kwargs["Q_SLOTS"] == (2 if on else 1)


def test_seq_parallels_unused_state_descriptors_are_made_once(monkeypatch):
    recorder = Recorder()
    monkeypatch.setattr(chassis, "_HOPPER_ATTN_FWD", recorder)
    q = torch.zeros(1, 2, 128, 64, dtype=torch.bfloat16)
    config = TileConfig(block_m=128, block_n=128, num_stages=2)
    for variant in (Variant(), Variant(), Variant(seq_parallel=False)):
        chassis.hopper_attn_fwd(q, q, q, False, 0.1, variant, config)
    first, again, fa1 = (args[8:12] for _, args, _ in recorder.launches)
    assert all(a is b for a, b in zip(first, again))
    assert not any(a is b for a, b in zip(first, fa1))  # FA1's schedule: its own state
