"""kernels/launch_cache.py: a cached launch is the kernel Triton itself would pick, and its
launcher gets exactly the arguments Triton's path passes."""
from types import SimpleNamespace

import pytest
import torch
from triton.backends.compiler import GPUTarget
from triton.compiler import make_backend
from triton.runtime.jit import native_specialize_impl
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.nvidia.hopper import TensorDescriptor as GluonDescriptor
from triton.tools.tensor_descriptor import TensorDescriptor

from fa2check.core.problems import Problem
import kernels.launch_cache as launch_cache
from kernels.launch_cache import CachedLaunch, _argument_key

CUDA = make_backend(GPUTarget("cuda", 90, 32))  # Triton's specialization rules for sm_90


def _values():
    ints = [0, 1, 2, 15, 16, 17, 32, -1, -16, 2**31 - 1, 2**31, 2**31 + 16, 2**32, 2**63 - 1,
            2**63]
    tensors = []
    for dtype in (torch.bfloat16, torch.float16, torch.float32, torch.int32):
        t = torch.zeros(64, dtype=dtype)
        tensors += [t, t[1:], t[8:]]  # aligned, misaligned, and (for 2-byte types) aligned again
    k = torch.zeros(1, 2, 64, 64, dtype=torch.bfloat16)
    descriptors = [TensorDescriptor(t, list(t.shape), list(t.stride()), [1, 1, rows, 64])
                   for t in (k, k.half()) for rows in (32, 64)]
    layouts = [gl.NVMMASharedLayout(swizzle_byte_width=width, element_bitwidth=16, rank=4)
               for width in (64, 128)]  # the Hopper chassis's boxes (kernels/hopper_*.py)
    descriptors += [GluonDescriptor(t, list(t.shape), list(t.stride()), [1, 1, rows, 64], layout)
                    for t in (k, k.half()) for rows in (32, 64) for layout in layouts]
    return ints + [True, False, 0.5, 1.0, -2.0, None] + tensors + descriptors


def unsound_pairs(key):
    """Pairs of arguments that `key` files under one key while Triton specializes them apart."""
    values = _values()
    specs = [native_specialize_impl(CUDA, v, False, True, True) for v in values]
    keys = [key(v) for v in values]
    return [(values[i], values[j]) for i in range(len(values)) for j in range(i)
            if keys[i] == keys[j] and specs[i] != specs[j]]


def test_the_key_tells_apart_whatever_triton_specializes_on():
    assert unsound_pairs(_argument_key) == []


@pytest.mark.parametrize("broken", ["ignores alignment", "bool as int", "ignores block shape",
                                    "ignores the shared layout"])
def test_a_coarser_key_is_caught(broken):
    def key(a):
        if broken == "ignores alignment" and isinstance(a, torch.Tensor):
            return a.dtype
        if broken == "bool as int" and isinstance(a, bool):
            return a
        if broken == "ignores block shape" and isinstance(a, TensorDescriptor):
            return a.base.dtype
        if broken == "ignores the shared layout" and isinstance(a, GluonDescriptor):
            return a.base.dtype, tuple(a.block_shape)
        return _argument_key(a)

    assert unsound_pairs(key)


class _FakeKernel:
    function, packed_metadata = "function", "metadata"

    def __init__(self):
        self.launches = []

    def run(self, *args):
        self.launches.append(args)


class _FakeJit:
    """A jit function's launch surface: fn[grid](*args, **kwargs) returns the compiled kernel."""
    arg_names = ["X", "n", "scale", "BLOCK", "FLAG"]
    pre_run_hooks = []

    def __init__(self):
        self.kernel, self.triton_launches = _FakeKernel(), 0

    def __getitem__(self, grid):
        def launch(*args, **kwargs):
            self.triton_launches += 1
            return self.kernel
        return launch


@pytest.fixture
def fake(monkeypatch):
    monkeypatch.setattr(launch_cache, "driver", SimpleNamespace(active=SimpleNamespace(
        get_current_device=lambda: 0, get_current_stream=lambda device: 777)))
    fn = _FakeJit()
    launcher = CachedLaunch(fn)
    launcher.jit = True
    return fn, launcher


def test_a_repeated_launch_calls_the_compiled_kernel_with_every_parameter(fake):
    fn, launcher = fake
    x = torch.zeros(16)
    launcher[(3, 2)](x, 48, 0.5, BLOCK=64, FLAG=True, num_warps=4)
    assert fn.triton_launches == 1 and fn.kernel.launches == []
    y = torch.ones(16)  # another tensor, same dtype and alignment; another float
    launcher[(5,)](y, 48, 0.25, BLOCK=64, FLAG=True, num_warps=4)
    assert fn.triton_launches == 1
    assert fn.kernel.launches == [(5, 1, 1, 777, "function", "metadata", None, None, None,
                                   y, 48, 0.25, 64, True)]


@pytest.mark.parametrize("change", [
    dict(n=1), dict(n=49), dict(x="misaligned"), dict(BLOCK=128), dict(FLAG=1), dict(num_warps=8),
])
def test_a_launch_that_triton_could_specialize_differently_takes_tritons_path(fake, change):
    fn, launcher = fake
    x = torch.zeros(16)
    base = dict(x=x, n=48, BLOCK=64, FLAG=True, num_warps=4)
    launcher[(1,)](base["x"], base["n"], 0.5, BLOCK=64, FLAG=True, num_warps=4)
    args = {**base, **change}
    if args["x"] == "misaligned":
        args["x"] = x[1:]
    launcher[(1,)](args["x"], args["n"], 0.5, BLOCK=args["BLOCK"], FLAG=args["FLAG"],
                   num_warps=args["num_warps"])
    assert fn.triton_launches == 2 and fn.kernel.launches == []


def test_launch_hooks_and_the_switch_take_tritons_path(fake, monkeypatch):
    fn, launcher = fake
    x = torch.zeros(16)
    launcher[(1,)](x, 48, 0.5, BLOCK=64, FLAG=True)
    with monkeypatch.context() as patch:
        patch.setattr(launch_cache.knobs.runtime, "launch_enter_hook", print)
        launcher[(1,)](x, 48, 0.5, BLOCK=64, FLAG=True)
    with monkeypatch.context() as patch:
        patch.setattr(launch_cache, "enabled", False)
        launcher[(1,)](x, 48, 0.5, BLOCK=64, FLAG=True)
    assert fn.triton_launches == 3 and fn.kernel.launches == []
    launcher[(1,)](x, 48, 0.5, BLOCK=64, FLAG=True)
    assert len(fn.kernel.launches) == 1


@pytest.mark.gpu
@pytest.mark.parametrize("problem", [Problem(2, 4, 2, 77, 130, 64, "bfloat16", True, seed=3),
                                     Problem(1, 2, 2, 256, 256, 128, "bfloat16", False, seed=3),
                                     Problem(1, 3, 1, 200, 64, 64, "bfloat16", True, seed=3)],
                         ids=str)
@pytest.mark.parametrize("backend", [None, "hopper", "gluon"])  # None: the call's default
def test_gpu_cached_launches_give_the_bits_of_tritons_path(problem, backend, device,
                                                           monkeypatch):
    from kernels import Variant, flash_attention

    q, k, v, do = problem.inputs(device)
    causal = problem.causal
    chosen = {} if backend is None else dict(backend=backend, variant=Variant())

    def outputs():
        leaves = [t.detach().requires_grad_(True) for t in (q, k, v)]
        o, lse = flash_attention(*leaves, causal=causal, return_lse=True, **chosen)
        return (o, lse, *torch.autograd.grad(o, leaves, do))

    first, cached = outputs(), outputs()  # the second call's launches hit the cache
    monkeypatch.setattr(launch_cache, "enabled", False)
    for got, want in zip(cached, outputs()):
        assert torch.equal(got, want)
    for got, want in zip(first, cached):
        assert torch.equal(got, want)


def test_the_cache_is_on_only_for_triton_3_6_and_can_be_turned_off():
    from kernels.launch_cache import enabled_by_default

    assert enabled_by_default("3.6.0", {}) and enabled_by_default("3.6.0", {
        "FA2CHECK_LAUNCH_CACHE": "1"})
    assert not enabled_by_default("3.6.0", {"FA2CHECK_LAUNCH_CACHE": "0"})
    assert not enabled_by_default("3.7.0", {}) and not enabled_by_default("3.5.1", {})
