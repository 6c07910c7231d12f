"""fa2check: check and explain FlashAttention-2 kernels, in layers that import one way only
(pyproject.toml's import-linter contract, run by `make test`):

    verify | fuzz | ablate | inspect   the front ends, independent of each other
    properties                         (a sibling package) what verify and fuzz check
    fa2check.core                      problems, oracle, pass rule, checks, implementations and
                                       SDPA adapters, results and provenance helpers
    kernels                            the Triton kernels

Imports sit at the top of modules, with one exception: a module that a command imports before
it has chosen the device imports `kernels` and `triton` inside the functions that need them,
because Triton reads TRITON_INTERPRET when it is first imported and
fa2check.core.environment.select_device sets it (the CPU interpreter on a machine without a GPU).

`fa2check.adapters`, `fa2check.compile_gate` and `fa2check.layouts` are the documented paths of
modules that live in fa2check.core and fa2check.inspect.
"""
