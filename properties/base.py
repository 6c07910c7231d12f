"""What every property shares: its cases, its result, and the ways it judges numbers.

A property is a module with NAME, CASES = {"quick": (...), "full": (...)} and
`run(impl, variant, case, device) -> PropertyResult`. `impl` is any callable with
flash_attention's signature; `variant` is passed to it (an implementation may ignore it).
A result is made of named `Check`s, each with its numbers: `ratio` = error / allowed where a
tolerance applies (1.0 is the edge of failure), None where the check is exact (bitwise).
A module whose cases call the implementation on more than the case's problem as it is (another
layout, a twin problem, a forward-only call beside the backward) says so in `calls(case)`;
the verify runner compiles the kernels of every declared call before any case runs.
"""
from __future__ import annotations

import contextlib
import inspect
import math
import warnings
from dataclasses import asdict, dataclass, field, replace

import torch

from fa2check.core.checks import Outputs, Reference, run_impl
from fa2check.core.compiling import Call  # noqa: F401 - the properties' calls() return Calls
from fa2check.core.oracle import default_scale, expand_kv, visible_mask
from fa2check.core.passrule import OutputCheck
from fa2check.core.problems import Problem

OUTPUTS = ("o", "lse", "dq", "dk", "dv")


@dataclass(frozen=True)
class Case:
    """One scenario of a property: `kind` says how the property builds or alters the inputs."""
    kind: str
    problem: Problem
    backward: bool = True

    @property
    def id(self) -> str:
        return f"{self.kind}-{self.problem}"

    def with_seed_offset(self, offset: int) -> "Case":
        return replace(self, problem=replace(self.problem, seed=self.problem.seed + offset))

    def as_dict(self) -> dict:
        return {"id": self.id, "kind": self.kind, "backward": self.backward,
                "problem": self.problem.as_dict()}


def calls(module, case: Case) -> tuple[Call, ...]:
    """The calls a property module's case makes: its own `calls(case)`, else the case's
    problem, contiguous, with the case's backward."""
    own = getattr(module, "calls", None)
    return own(case) if own else (Call(case.problem, case.backward),)


@dataclass
class Check:
    name: str
    passed: bool
    ratio: float | None = None  # error / allowed; None for exact checks
    numbers: dict = field(default_factory=dict)

    def __str__(self) -> str:
        ratio = "" if self.ratio is None else f" ratio {self.ratio:.3g}"
        return f"{self.name}: {'ok' if self.passed else 'FAIL'}{ratio}"


@dataclass
class PropertyResult:
    property: str
    case: Case
    status: str  # "pass", "fail", "unsupported" or "error" (the implementation raised)
    checks: list[Check] = field(default_factory=list)
    message: str = ""

    @classmethod
    def judge(cls, name: str, case: Case, checks: list[Check]) -> "PropertyResult":
        failed = [c for c in checks if not c.passed]
        message = "; ".join(str(c) for c in failed) if failed else "ok"
        return cls(name, case, "fail" if failed else "pass", checks, message)

    @property
    def passed(self) -> bool:
        return self.status == "pass"

    @property
    def ratio(self) -> float | None:
        ratios = [c.ratio for c in self.checks if c.ratio is not None]
        return max(ratios) if ratios else None

    def check(self, name: str) -> Check:
        return next(c for c in self.checks if c.name == name)

    def as_dict(self) -> dict:
        return {"property": self.property, "case": self.case.as_dict(), "status": self.status,
                "ratio": self.ratio, "message": self.message,
                "checks": [asdict(c) for c in self.checks]}


# ----------------------------------------------------------------------------- judging

def from_output_checks(name: str, checks: list[OutputCheck]) -> Check:
    """One Check from the pass rule's per-output checks (o, lse, dq, dk, dv)."""
    worst = max((c.ratio if c.nonfinite_match else math.inf) for c in checks)
    return Check(name, all(c.passed for c in checks), worst,
                 {c.output: c.as_dict() for c in checks})


def pass_rule(name: str, reference: Reference, outputs: Outputs) -> Check:
    return from_output_checks(name, reference.judge(outputs))


def allowed_errors(reference: Reference, outputs: Outputs) -> dict[str, float]:
    """The pass rule's allowed error of each output of `reference` (c * baseline + floor)."""
    return {c.output: c.allowed for c in reference.judge(outputs)}


WHERE_SHOWN = 12  # indices listed a dimension, where elements differ


def compare_outputs(a: torch.Tensor, b: torch.Tensor) -> dict:
    """Exact comparison: -inf equals -inf, NaN never equals anything. Where they differ: how
    many elements, how many of those are NaN or inf on one side, the largest finite
    difference, and (a and b of 2 or more dimensions) the indices along their last two
    dimensions that hold a difference (o's rows and columns), the first WHERE_SHOWN of each."""
    a, b = a.detach().cpu().double(), b.detach().cpu().double()
    differ = a != b
    both = torch.isfinite(a) & torch.isfinite(b)
    diff = (a - b).abs()[both]
    numbers = {"equal": not bool(differ.any()), "mismatches": int(differ.sum()),
               "nonfinite_mismatches": int((differ & ~both).sum()),
               "max_abs_diff": float(diff.max()) if diff.numel() else 0.0}
    if differ.any() and differ.dim() >= 2:
        plane = differ.reshape(-1, *differ.shape[-2:]).any(0)  # (rows, columns): any differs
        numbers["where_last_two_dims"] = [plane.any(1 - d).nonzero().flatten()[:WHERE_SHOWN]
                                          .tolist() for d in (0, 1)]
    return numbers


def bitwise(name: str, a: Outputs, b: Outputs, outputs=("o", "lse"), rows=None) -> Check:
    """a and b bitwise equal in `outputs` (optionally only query rows `rows` of o and lse)."""
    numbers = {}
    for output in outputs:
        x, y = getattr(a, output), getattr(b, output)
        if x is None or y is None:
            continue
        if rows is not None:
            x, y = x[:, :, rows], y[:, :, rows]
        numbers[output] = compare_outputs(x, y)
    return Check(name, all(n["equal"] for n in numbers.values()), None, numbers)


def within(name: str, a: Outputs, b: Outputs, allowed: dict[str, float], outputs=OUTPUTS) -> Check:
    """max|a - b| <= allowed[output] for each output, non-finite values equal and in the same
    places (NaN never is)."""
    numbers, worst = {}, 0.0
    for output in outputs:
        x, y = getattr(a, output), getattr(b, output)
        if x is None or y is None:
            continue
        x, y = x.detach().cpu().double(), y.detach().cpu().double()
        fx, fy = torch.isfinite(x), torch.isfinite(y)
        same_nonfinite = torch.equal(fx, fy) and torch.equal(x[~fx], y[~fy])
        n = compare_outputs(x, y)
        ratio = n["max_abs_diff"] / allowed[output] if same_nonfinite else math.inf
        numbers[output] = {**n, "allowed": allowed[output], "ratio": ratio}
        worst = max(worst, ratio)
    return Check(name, worst <= 1.0, worst, numbers)


# ----------------------------------------------------------------------------- helpers

def scores(q, k, causal: bool, softmax_scale=None) -> torch.Tensor:
    """float64 scores (B, Hq, Sq, Sk) with -inf where a query cannot see a key."""
    scale = default_scale(q.shape[-1]) if softmax_scale is None else softmax_scale
    s = (q.double() @ expand_kv(k.double(), q.shape[1]).transpose(-1, -2)) * scale
    return s.masked_fill(~visible_mask(q.shape[2], k.shape[2], causal, q.device), float("-inf"))


def visible_counts(problem: Problem, device="cpu") -> torch.Tensor:
    """(Sq,) number of keys each query row sees."""
    return visible_mask(problem.seqlen_q, problem.seqlen_k, problem.causal, device).sum(-1)


def call(impl, variant, reference: Reference, q=None, k=None, v=None, backward=None) -> Outputs:
    """Run `impl` on the reference's inputs, or on replacements of some of them."""
    q = reference.q if q is None else q
    k = reference.k if k is None else k
    v = reference.v if v is None else v
    backward = reference.backward if backward is None else backward
    return run_impl(impl, q, k, v, reference.do, reference.dlse, backward,
                    causal=reference.problem.causal, softmax_scale=None, variant=variant,
                    return_lse=True)


@contextlib.contextmanager
def nan_filled_allocations():
    """torch.empty and friends return NaN-filled float memory inside this block, so a buffer
    that an implementation allocates but never writes (a gradient head, say) shows as NaN.

    This is torch's deterministic mode with `fill_uninitialized_memory`; warn_only keeps ops
    that have no deterministic implementation running (their warnings are silenced here)."""
    was_on = torch.are_deterministic_algorithms_enabled()
    was_warn = torch.is_deterministic_algorithms_warn_only_enabled()
    was_fill = torch.utils.deterministic.fill_uninitialized_memory
    torch.use_deterministic_algorithms(True, warn_only=True)
    torch.utils.deterministic.fill_uninitialized_memory = True
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        torch.utils.deterministic.fill_uninitialized_memory = was_fill
        torch.use_deterministic_algorithms(was_on, warn_only=was_warn)


def dq_may_vary(impl, variant, problem: Problem, device: str) -> bool:
    """Whether dQ may differ between identical calls. Our kernels sum dQ with float32 atomic
    adds only when seq_parallel is on and the config keeps dQ in the dK/dV loop (otherwise one
    program owns each dQ row); any other implementation is assumed to use atomics, and is held
    to the determinism property's bound."""
    from kernels import default_config, flash_attention

    if inspect.unwrap(impl) is not flash_attention or variant is None:
        return True
    config = default_config(problem.head_dim, device == "cuda", variant, problem.dtype,
                            causal=problem.causal, seqlen_q=problem.seqlen_q,
                            seqlen_k=problem.seqlen_k)  # the tiles flash_attention picks
    return config.dq_atomics(variant)


def seeded_rows(problem: Problem, count: int, salt: int) -> list[int]:
    gen = torch.Generator().manual_seed(problem.seed * 7919 + salt)
    return sorted(set(torch.randint(0, problem.seqlen_q, (count,), generator=gen).tolist()))
