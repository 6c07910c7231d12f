"""fa2check: check and explain FlashAttention-2 kernels, in layers that import one way only
(pyproject.toml's import-linter contract, run by `make test`):

    verify | fuzz | ablate | inspect   the front ends, independent of each other
    properties                         (a sibling package) what verify and fuzz check
    fa2check.core                      problems, oracle, pass rule, checks, implementations and
                                       SDPA adapters, results and provenance helpers
    kernels                            the Triton kernels

Imports sit at the top of modules, with one exception: `kernels` and `triton`, and what imports
them at once (properties.strategies, the fuzzer, the corpus), are imported inside the functions
that need them, after the command has chosen the device: Triton and kernels' interpreter fixes
read TRITON_INTERPRET when they are first imported, and
fa2check.core.environment.select_device sets it (the CPU interpreter on a machine without a
GPU). matplotlib is imported where a plot is drawn, after choosing its Agg backend.

`fa2check.adapters`, `fa2check.compile_gate` and `fa2check.layouts` are the documented paths of
modules that live in fa2check.core and fa2check.inspect. `fa2check.Unsupported` is what an
implementation raises (as any NotImplementedError) for a call it cannot run: that case is
reported n/a with its words.
"""
from .core.implementations import Unsupported  # noqa: E402

__all__ = ["Unsupported"]
