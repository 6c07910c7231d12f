"""Run an implementation on a `Problem` and judge each output with the pass rule.

An implementation is any callable with flash_attention's signature:
    impl(q, k, v, *, causal, softmax_scale, variant, return_lse) -> o or (o, lse)
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from .oracle import reference, same_dtype_attention
from .passrule import FORWARD_OUTPUTS, GRADIENT_OUTPUTS, OutputCheck, check_output
from .problems import Problem


@dataclass
class Outputs:
    """o, lse and (when backward ran) dq, dk, dv of one call."""
    o: torch.Tensor
    lse: torch.Tensor
    dq: torch.Tensor | None = None
    dk: torch.Tensor | None = None
    dv: torch.Tensor | None = None


def _run(fn, q, k, v, do, dlse, backward: bool, **kwargs) -> Outputs:
    q, k, v = (t.detach().requires_grad_(backward) for t in (q, k, v))
    o, lse = fn(q, k, v, **kwargs)
    if not backward:
        return Outputs(o.detach(), lse.detach())
    finite = torch.isfinite(lse)
    loss = (o.float() * do.float()).sum() + (torch.where(finite, lse, 0.0) * dlse).sum()
    dq, dk, dv = torch.autograd.grad(loss, (q, k, v))
    return Outputs(o.detach(), lse.detach(), dq, dk, dv)


class Reference:
    """Oracle and same-dtype baseline of one problem, computed once and shared by variants."""

    def __init__(self, problem: Problem, device="cpu", backward: bool = True, inputs=None):
        self.problem = problem
        self.q, self.k, self.v, self.do = inputs if inputs is not None else problem.inputs(device)
        gen = torch.Generator().manual_seed(problem.seed + 1)
        self.dlse = torch.randn(problem.batch, problem.heads_q, problem.seqlen_q,
                                generator=gen).to(device)
        self.backward = backward
        causal = problem.causal
        self.oracle = _run(lambda q, k, v: reference(q, k, v, causal=causal),
                           self.q, self.k, self.v, self.do.double(), self.dlse.double(), backward)
        self.baseline = _run(lambda q, k, v: same_dtype_attention(q, k, v, causal=causal),
                             self.q, self.k, self.v, self.do, self.dlse, backward)

    def run(self, impl, variant) -> Outputs:
        def call(q, k, v):
            return impl(q, k, v, causal=self.problem.causal, softmax_scale=None, variant=variant,
                        return_lse=True)
        return _run(call, self.q, self.k, self.v, self.do, self.dlse, self.backward)

    def judge(self, outputs: Outputs) -> list[OutputCheck]:
        names = FORWARD_OUTPUTS + (GRADIENT_OUTPUTS if self.backward else ())
        dtype = self.problem.torch_dtype
        return [check_output(name, getattr(outputs, name), getattr(self.oracle, name),
                             getattr(self.baseline, name), torch.float32 if name == "lse" else dtype)
                for name in names]

    def check(self, impl, variant) -> list[OutputCheck]:
        return self.judge(self.run(impl, variant))
