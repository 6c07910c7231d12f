"""Launching a Triton kernel again through the compiled kernel Triton chose for the same
specialization, without Triton's per-call argument binding.

Triton's launcher (`JITFunction.run`) binds and specializes every argument at every call (one
C call an argument, then a cache key built from all of them and the options). For our kernels,
with 20-40 arguments, that is most of a launch's host time, which short calls feel
(docs/decisions.md D28). `CachedLaunch` wraps a jit function: its first launch for a given key
goes through Triton's own path, which compiles or finds the kernel; later launches with the
same key call that compiled kernel directly.

The key holds, for each argument, everything Triton specializes on, so a hit is the kernel
Triton itself would have picked (tests/test_launch_cache.py checks the key against Triton's
own specialization function):
- tensors: dtype and whether data_ptr is 16-byte aligned;
- ints: the value (Triton specializes on == 1, divisibility by 16 and the width);
- floats: only that they are floats; None, bools and constexprs: the value;
- tensor descriptors: the dtype, the block shape and the padding; Gluon's also the shared
  layout;
- the launch options (num_warps, num_stages, maxnreg), the device, and the order of the
  keyword arguments (another order is only a miss).
Launch hooks (profilers set them) and the interpreter always take Triton's path. Triton's check
that the globals a kernel read have not changed since it compiled runs at each key's first
launch only; the kernels' globals are constants.
"""
from __future__ import annotations

import os

import triton
from triton import knobs
from triton.runtime import driver
from triton.experimental.gluon.nvidia.hopper import TensorDescriptor as GluonDescriptor
from triton.tools.tensor_descriptor import TensorDescriptor

MAX_ENTRIES = 1024  # kernels kept per jit function; the cache starts over when full


def enabled_by_default(version: str, environ) -> bool:
    """On unless FA2CHECK_LAUNCH_CACHE=0, for the Triton whose launcher arguments this passes
    (3.6: CompiledKernel.run(grid, stream, function, metadata, hooks, *parameters))."""
    return version.startswith("3.6.") and environ.get("FA2CHECK_LAUNCH_CACHE", "1") != "0"


# off: every launch takes Triton's path (and an A/B of this module's host time)
enabled = enabled_by_default(triton.__version__, os.environ)


def _argument_key(a):
    cls = a.__class__
    if cls is int or a is None:
        return a
    if hasattr(a, "data_ptr"):
        return a.dtype, a.data_ptr() & 15 == 0
    if cls is float:
        return float
    if cls is TensorDescriptor:
        return cls, a.base.dtype, tuple(a.block_shape), a.padding
    if cls is GluonDescriptor:
        return cls, a.base.dtype, tuple(a.block_shape), a.layout, a.padding
    return cls, a  # bool (True == 1, but Triton specializes them apart), str, ...


def _hooked(hook) -> bool:
    """Whether a launch hook would run: a function, or a HookChain with functions in it."""
    return hook is not None and bool(getattr(hook, "calls", True))


class CachedLaunch:
    """`CachedLaunch(jit_fn)[grid](*args, **kwargs)` launches as `jit_fn[grid](...)` does.
    Positional arguments are the kernel's leading parameters; keyword arguments the rest
    (constexprs) and the launch options."""

    def __init__(self, fn):
        self.fn = fn
        self.jit = isinstance(fn, triton.runtime.JITFunction)  # not under the interpreter
        self.compiled = {}  # key -> (CompiledKernel, the trailing parameters' names)

    def __getitem__(self, grid):
        return lambda *args, **kwargs: self.launch(grid, args, kwargs)

    def launch(self, grid, args, kwargs):
        runtime = knobs.runtime
        if not (enabled and self.jit) or callable(grid) or self.fn.pre_run_hooks or _hooked(
                runtime.launch_enter_hook) or _hooked(runtime.launch_exit_hook):
            return self.fn[grid](*args, **kwargs)
        device = driver.active.get_current_device()
        key = (device, tuple([_argument_key(a) for a in args]), tuple(kwargs.items()),
               tuple(map(type, kwargs.values())), runtime.debug,
               knobs.compilation.instrumentation_mode)
        entry = self.compiled.get(key)
        if entry is None:
            kernel = self.fn[grid](*args, **kwargs)
            if hasattr(kernel, "result"):  # compiled asynchronously
                kernel = kernel.result()
            trailing = self.fn.arg_names[len(args):]
            if all(name in kwargs for name in trailing):  # else (defaults) Triton's path always
                if len(self.compiled) >= MAX_ENTRIES:
                    self.compiled.clear()
                self.compiled[key] = kernel, trailing
            return kernel
        kernel, trailing = entry
        # the launcher takes every parameter in order, constexprs included, as Triton's does;
        # no launch metadata or hooks: there are none to call
        kernel.run(grid[0], grid[1] if len(grid) > 1 else 1, grid[2] if len(grid) > 2 else 1,
                   driver.active.get_current_stream(device), kernel.function,
                   kernel.packed_metadata, None, None, None, *args,
                   *[kwargs[name] for name in trailing])
        return kernel
