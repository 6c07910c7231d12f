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


def run_impl(fn, q, k, v, do, dlse, backward: bool, **kwargs) -> Outputs:
    """Call fn(q, k, v, **kwargs) -> (o, lse) and, with `backward`, differentiate
    sum(o * dO) + sum(lse * dlse) (lse terms only where lse is finite). dO is handed to the
    backward as it is, strides included."""
    q, k, v = (t.detach().requires_grad_(backward) for t in (q, k, v))
    o, lse = fn(q, k, v, **kwargs)
    if not backward:
        return Outputs(o.detach(), lse.detach())
    outputs, grads = [o], [do.to(o.dtype)]
    if lse.requires_grad:
        outputs.append(lse)
        grads.append(torch.where(torch.isfinite(lse.detach()), dlse.to(lse.dtype), 0.0))
    dq, dk, dv = torch.autograd.grad(outputs, (q, k, v), grad_outputs=grads)
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
        # float64 leaves: gradients of lower-precision leaves would be rounded to their dtype
        self.oracle = run_impl(lambda q, k, v: reference(q, k, v, causal=causal),
                               self.q.double(), self.k.double(), self.v.double(),
                               self.do.double(), self.dlse.double(), backward)
        self.baseline = run_impl(lambda q, k, v: same_dtype_attention(q, k, v, causal=causal),
                             self.q, self.k, self.v, self.do, self.dlse, backward)

    def run(self, impl, variant) -> Outputs:
        def call(q, k, v):
            return impl(q, k, v, causal=self.problem.causal, softmax_scale=None, variant=variant,
                        return_lse=True)
        return run_impl(call, self.q, self.k, self.v, self.do, self.dlse, self.backward)

    def judge(self, outputs: Outputs) -> list[OutputCheck]:
        names = FORWARD_OUTPUTS + (GRADIENT_OUTPUTS if self.backward else ())
        dtype = self.problem.torch_dtype
        return [check_output(name, getattr(outputs, name), getattr(self.oracle, name),
                             getattr(self.baseline, name), torch.float32 if name == "lse" else dtype)
                for name in names]

    def check(self, impl, variant) -> list[OutputCheck]:
        return self.judge(self.run(impl, variant))
