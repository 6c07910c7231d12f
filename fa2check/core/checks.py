"""Run an implementation on a `Problem` and judge each output with the pass rule.

An implementation is any callable with flash_attention's signature:
    impl(q, k, v, *, causal, softmax_scale, variant, return_lse) -> o or (o, lse)
A user's function reaches it through fa2check.core.calling, which returns (o, None) where the
function gives no lse: then lse is not judged, and the gradients are those of o alone (the
oracle's too: `Reference.without_lse`).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from .oracle import reference, same_dtype_attention
from .passrule import FORWARD_OUTPUTS, GRADIENT_OUTPUTS, OutputCheck, check_output
from .problems import Problem


@dataclass
class Outputs:
    """o, lse (None: the implementation gives none) and (when backward ran) dq, dk, dv of one
    call."""
    o: torch.Tensor
    lse: torch.Tensor | None
    dq: torch.Tensor | None = None
    dk: torch.Tensor | None = None
    dv: torch.Tensor | None = None


def run_impl(fn, q, k, v, do, dlse, backward: bool, **kwargs) -> Outputs:
    """Call fn(q, k, v, **kwargs) -> (o, lse) and, with `backward`, differentiate
    sum(o * dO) + sum(lse * dlse) (lse terms only where lse is finite; none when lse is None).
    dO is handed to the backward as it is, strides included."""
    q, k, v = (t.detach().requires_grad_(backward) for t in (q, k, v))
    o, lse = fn(q, k, v, **kwargs)
    if not backward:
        return Outputs(o.detach(), None if lse is None else lse.detach())
    outputs, grads = [o], [do.to(o.dtype)]
    if lse is not None and lse.requires_grad:
        outputs.append(lse)
        grads.append(torch.where(torch.isfinite(lse.detach()), dlse.to(lse.dtype), 0.0))
    dq, dk, dv = torch.autograd.grad(outputs, (q, k, v), grad_outputs=grads)
    return Outputs(o.detach(), None if lse is None else lse.detach(), dq, dk, dv)


class Reference:
    """Oracle and same-dtype baseline of one problem, computed once and shared by variants."""

    def __init__(self, problem: Problem, device="cpu", backward: bool = True, inputs=None,
                 dlse=None):
        self.problem = problem
        self.q, self.k, self.v, self.do = inputs if inputs is not None else problem.inputs(device)
        if dlse is None:
            gen = torch.Generator().manual_seed(problem.seed + 1)
            dlse = torch.randn(problem.batch, problem.heads_q, problem.seqlen_q,
                               generator=gen).to(device)
        self.dlse = dlse
        self.backward = backward
        self._without_lse = None
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

    def without_lse(self) -> "Reference":
        """This reference for an implementation that returns no lse: the same inputs, and
        gradients of sum(o * dO) alone (dlse = 0). Itself when there is no backward."""
        if not self.backward:
            return self
        if self._without_lse is None:
            self._without_lse = Reference(self.problem, self.q.device, True,
                                          (self.q, self.k, self.v, self.do),
                                          torch.zeros_like(self.dlse))
        return self._without_lse

    def for_outputs(self, outputs: Outputs) -> "Reference":
        """The reference that `outputs` are judged against: `without_lse` when they have none."""
        return self.without_lse() if outputs.lse is None else self

    def judge(self, outputs: Outputs) -> list[OutputCheck]:
        """The pass rule on each output; lse only when the implementation returned one."""
        ref = self.for_outputs(outputs)
        names = FORWARD_OUTPUTS + (GRADIENT_OUTPUTS if self.backward else ())
        dtype = self.problem.torch_dtype
        return [check_output(name, getattr(outputs, name), getattr(ref.oracle, name),
                             getattr(ref.baseline, name), torch.float32 if name == "lse" else dtype)
                for name in names if getattr(outputs, name) is not None]

    def check(self, impl, variant) -> list[OutputCheck]:
        return self.judge(self.run(impl, variant))
