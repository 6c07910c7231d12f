"""The fuzzing engine behind `python -m fa2check.fuzz`: hypothesis over problems x variants x
input distributions x layouts (properties/strategies.py), each example judged against the float64
oracle and the properties of `make verify`, a failure shrunk to a minimal example.

One example (`check_example`) runs the implementation under test once, forward and backward,
on inputs laid out as the example says (contiguous, or views into NaN-filled buffers) and with
NaN-filled allocations (so a buffer it never writes shows as NaN), and applies the checks:

    oracle               against the float64 oracle: o and lse pass by the pass rule or by
                         properties/extreme_logits.py's element-wise bound, dq, dk, dv by the
                         pass rule plus that bound's first-order allowance for float32 logits;
                         the extreme distributions by the bound alone, forward only (see
                         properties/strategies.py and "Judging" below)
    lse_bounds           max S <= lse <= max S + log n and rows of exp(S - lse) summing to 1
                         (properties/lse_bounds.py)
    rows_without_keys    rows that see no key: o = 0, lse = -inf, dq = 0 exactly
    invisible_random     causal: other random K and V at keys hidden from some rows leave
                         those rows' o and lse bitwise unchanged (properties/causal_masking.py;
                         one more forward call)
    invisible_nan_keys   the same with K = NaN there (a mask added as a bias lets NaN through)
    invisible_1e10       the same with K and V = 1e10 (inf in float16)
    invisible_nan        the same with K and V = NaN (a product P @ V over all of a tile's keys
                         lets 0 * NaN into rows that cannot see the key)
    invisible_inf_values the same with V = +inf in its even columns, K kept (rows that see the
                         key get +inf there, not NaN, where the others would get 0 * inf)
    visible_non_finite   causal, on invisible_inf_values' call: the rows that see the key get
                         a non-finite o in every even column and a finite o in every odd one (a
                         kernel that zeroes hidden non-finite V must put it back for the rows
                         that see it, in the columns that hold it)
    inputs_untouched     q, k, v, dO and the buffers they lie in (the layouts' NaN padding) bitwise
                         unchanged after every call (properties/memory_safety.py)
  not by default (`--check NAME`, or `--check all`):
    gqa_twin             the call against its MHA twin on repeated K/V: o and lse agree, dK/dV
                         are the group sums, every dK/dV head written (properties/gqa_reduction.py;
                         one more call, forward and backward)
    determinism          a second call gives the same bits (dQ under atomics within the
                         determinism property's bound; one more call)
    variant_flips        the variants with one switch flipped agree (properties/
                         variant_equivalence.py; three more calls)
Judging. The pass rule allows twice the error of the same-dtype PyTorch composition (plus a few
float32 ulps). With float32 inputs and large logits that composition's float32 logits are as
inexact as the kernel's, so "twice its error" becomes a toss-up between two summation orders,
and for gradients the baseline is sometimes exact where every FA2 backward is not (it
recomputes P = exp(S - L) from float32 S and L, off by about |S| eps(float32)). The first CPU
campaigns against our kernels found both, with logits near 100 in float32:
+defer+seqpar+splitq:b1-h2/2-q1-k1-d16-float32-full-s1:logits-1e2:contiguous (one key: dK 2.1
times the pass rule's allowed error) and
+defer+seqpar+splitq:b1-h1/1-q64-k16-d256-float32-full-s9:logits-1e2:contiguous (o 1.22, dQ 3.3);
extreme_logits' bound, which accounts for float32 logits explicitly, put them at 0.02 and 0.16.
So o and lse pass by either standard (the pass rule, or the bound: rounding of the output and
of P to the input dtype plus the first-order effect of float32 logits), and gradients get the
pass rule's allowed error plus that first-order effect, element-wise (extreme_logits' own rule
for gradients). A wrong key, mask, scale, head or a missing rescale fails both by orders of
magnitude; tf32 products for float32 inputs still fail (the bound is built on float32's eps).

The two-call checks that use the pass rule's tolerance (gqa_twin, the dq spread of determinism,
variant_flips) are applied to the pass-rule distributions only.

Known-failing checks are left out by default so that a fuzz run hunts for new bugs instead of
rediscovering the open one on the first causal example; `--check invisible_nan` puts one back.

Profiles (`PROFILES`, the one place where they are defined): ci (deterministic: fixed seed,
no example database, a fixed number of examples), dev and nightly (random, with an example
database under .hypothesis/ that replays past failures first, and a time budget).
"""
from __future__ import annotations

import functools
import math
import multiprocessing
import os
import queue as queue_module
import re
import time
import traceback
import warnings
from collections import Counter
from dataclasses import dataclass, field

import torch
from hypothesis import HealthCheck, Phase, Verbosity
from hypothesis import example as explicit_example
from hypothesis import given, reject
from hypothesis import seed as hypothesis_seed
from hypothesis import settings, target
from hypothesis.database import DirectoryBasedExampleDatabase

from properties import (causal_masking, determinism, extreme_logits, gqa_reduction, lse_bounds,
                        memory_safety, variant_equivalence)
from properties.base import Case, Check, call, from_output_checks, nan_filled_allocations, scores
from properties.memory_safety import nan_view
from properties.strategies import (DISTRIBUTIONS, Example, Space, compiled_class, coverage_keys,
                                   examples)

from ..core.checks import Reference
from ..core.environment import ROOT, select_device
from ..core.explain import explain
from ..core.calling import adapt
from ..core.hints import fix_for
from ..core.implementations import Column, Unsupported, key_tile
from ..core.passrule import FORWARD_OUTPUTS, GRADIENT_OUTPUTS, rounding_floor
from .compile_watch import CompileTally, CompileWatch

CHECKS = {
    "oracle": "o, lse, dq, dk, dv against the float64 oracle (pass rule, extreme_logits' bound)",
    "lse_bounds": "max S <= lse <= max S + log n; rows of exp(S - lse) sum to 1",
    "rows_without_keys": "rows that see no key: o = 0, lse = -inf, dq = 0",
    "invisible_random": "causal: random K/V at hidden keys leave those rows' o, lse bitwise equal",
    "invisible_nan_keys": "causal: K = NaN at hidden keys leaves those rows bitwise equal",
    "invisible_nan": "causal: K = V = NaN at hidden keys leaves those rows bitwise equal",
    "invisible_1e10": "causal: K = V = 1e10 at hidden keys leaves those rows bitwise equal",
    "invisible_inf_values": "causal: V = +inf (even columns) at hidden keys leaves those rows "
                            "bitwise equal",
    "visible_non_finite": "causal: V = +inf (even columns) from a hidden key on reaches the rows "
                          "that see it, in those columns only",
    "inputs_untouched": "q, k, v, dO and the buffers they lie in bitwise unchanged by the calls",
    "gqa_twin": "GQA call vs its MHA twin: o/lse agree, dK/dV group sums, every head written",
    "determinism": "a second call: bitwise equal (dQ under atomics within a bound)",
    "variant_flips": "each switch flipped: seq_parallel bitwise, defer_norm/split_q within the "
                     "pass rule's tolerance; a Hopper switch variant: each switch off, bitwise",
}
# the checks (properties.base.Check) that a fuzz check produces, where their names differ
RESULTS = {
    "lse_bounds": ("bounds", "softmax_rows"),
    "gqa_twin": ("mha_equivalence", "group_sum", "every_head_written"),
    "determinism": ("bitwise_run2", "dq_spread"),
    "variant_flips": variant_equivalence.CHECK_NAMES,
}
DEFAULT_CHECKS = ("oracle", "lse_bounds", "rows_without_keys", "invisible_random",
                  "invisible_nan_keys", "invisible_nan", "invisible_1e10", "invisible_inf_values",
                  "visible_non_finite", "inputs_untouched")


@dataclass(frozen=True)
class Profile:
    """Hypothesis settings and the time budget of one kind of run."""
    description: str
    max_examples: int
    seconds: float | None  # generation time budget; None: max_examples alone bounds the run
    seed: int | None  # None: random
    database: bool  # keep an example database under .hypothesis/ (replays past failures first)
    target: bool  # hill-climb on the worst error/allowed ratio (hypothesis.target)


# Targeting pays only with thousands of examples: below 1000, hypothesis spends half of the
# budget hill-climbing around the example with the highest ratio, which measured (40 seeds,
# planted bugs) delays finding a bug of another kind, such as a group size of 5, several-fold.
PROFILES = {
    "ci": Profile("deterministic: seed 0, no database, 200 examples", 200, None, 0, False, False),
    "dev": Profile("random, database, up to 500 examples or 10 minutes", 500, 600, None, True,
                   False),
    "nightly": Profile("random, database, targets the worst ratio, up to 20000 examples or "
                       "4 hours", 20000, 4 * 3600, None, True, True),
}
SHRINK_SECONDS = 120  # after a counterexample: shrinking stops this long after generation would
DATABASE_DIR = os.path.join(ROOT, ".hypothesis", "fa2check-fuzz")


def _register_profiles():
    # examples are slow and large by design; the names differ between hypothesis versions
    slow = [getattr(HealthCheck, name) for name in ("too_slow", "data_too_large", "filter_too_much",
                                                   "large_base_example", "differing_executors")
            if hasattr(HealthCheck, name)]
    common = dict(deadline=None, print_blob=False, verbosity=Verbosity.quiet,
                  report_multiple_bugs=False, suppress_health_check=slow)
    for name, profile in PROFILES.items():
        phases = (Phase.explicit, Phase.reuse, Phase.generate) + (
            (Phase.target,) if profile.target else ()) + (Phase.shrink,)
        settings.register_profile(f"fa2check-{name}", max_examples=profile.max_examples,
                                  derandomize=profile.seed is not None, database=None,
                                  phases=phases, **common)


_register_profiles()


def hypothesis_settings(profile: str, max_examples: int | None = None, database=None) -> settings:
    """The profile's hypothesis settings; `database` a directory (None: the profile's own)."""
    chosen = PROFILES[profile]
    changes = {}
    if max_examples is not None:
        changes["max_examples"] = max_examples
    if chosen.database or database:
        changes["database"] = DirectoryBasedExampleDatabase(database or DATABASE_DIR)
    return settings(settings.get_profile(f"fa2check-{profile}"), **changes)


# ----------------------------------------------------------------------------- one example

@dataclass
class ExampleReport:
    example: Example
    checks: list[Check]
    seconds: float
    error: str | None = None  # the implementation (or a check on its outputs) raised
    traceback: str | None = None
    lse_missing: str | None = None  # why the implementation returned no lse (fa2check.core.calling)
    fix: str | None = None  # what to change, where it raised (fa2check.core.hints)

    @property
    def passed(self) -> bool:
        return self.error is None and all(c.passed for c in self.checks)

    @property
    def failed(self) -> list[str]:
        """The names of the failed results ('runs' when it raised)."""
        return (["runs"] if self.error else []) + [c.name for c in self.checks if not c.passed]

    @property
    def failed_checks(self) -> list[str]:
        """The fuzz checks (names of CHECKS) whose results failed."""
        return list(dict.fromkeys(check_of(name) for name in self.failed))

    @property
    def ratio(self) -> float | None:
        ratios = [c.ratio for c in self.checks if c.ratio is not None]
        return max(ratios) if ratios else None

    @property
    def message(self) -> str:
        if self.error:
            return f"raised {self.error}"
        return "; ".join(describe(c) for c in self.checks if not c.passed) or "ok"


def check_of(result: str) -> str:
    """The fuzz check (a name of CHECKS) that produces the result `result` ('runs': a crash)."""
    return next((check for check, names in RESULTS.items() if result in names), result)


def describe(check: Check) -> str:
    """One line: the check, what it expected and what came out (fa2check.core.explain.explain)."""
    return explain(check)


def check_example(impl, example: Example, device: str, checks=DEFAULT_CHECKS,
                  layout: str = "bhsd") -> ExampleReport:
    """Run `impl` on the example and apply `checks` (names of CHECKS). Raises Unsupported when
    the implementation cannot run it (it raised NotImplementedError). `impl` is called through
    fa2check.core.calling.adapt(impl, layout): it may omit variant and return_lse (then the lse
    checks are left out, and the report's lse_missing says why)."""
    unknown = set(checks) - set(CHECKS)
    if unknown:
        raise ValueError(f"unknown checks {sorted(unknown)}; expected some of {list(CHECKS)}")
    impl = adapt(impl, layout)
    started = time.perf_counter()
    try:
        ref = Reference(example.problem, device, backward=example.backward,
                        inputs=example.inputs(device))
        with warnings.catch_warnings():
            # NaN inputs (the NaN-filled layouts, invisible_nan) are deliberate; the
            # interpreter's numpy warnings about them are noise
            warnings.filterwarnings("ignore", category=RuntimeWarning, module=r"triton\.")
            results = _run_checks(impl, example, ref, device, checks)
    except Unsupported:
        raise
    except NotImplementedError as error:  # the implementation cannot run it: in its words
        raise Unsupported(str(error) or type(error).__name__) from error
    except Exception as error:  # noqa: BLE001 - a crash is a failure; the traceback says whose
        return ExampleReport(example, [], time.perf_counter() - started,
                             error=f"{type(error).__name__}: {error}".splitlines()[0],
                             traceback=traceback.format_exc(), lse_missing=impl.lse_missing,
                             fix=fix_for(error, "", layout))
    return ExampleReport(example, results, time.perf_counter() - started,
                         lse_missing=impl.lse_missing)


def _run_checks(impl, example: Example, ref: Reference, device: str, checks) -> list[Check]:
    p, variant = example.problem, example.variant
    dist = DISTRIBUTIONS[example.distribution]
    inputs = memory_safety.input_buffers(ref)
    before = {name: buffer.clone() for name, buffer in inputs.items()}
    with nan_filled_allocations():
        out = call(impl, variant, ref)
    # a changed input is put back at once, so that the checks below judge the example's inputs
    first_call = memory_safety.untouched(inputs, before)
    ref = ref.for_outputs(out)  # without lse: the gradients of o alone, the oracle's too
    extreme = dist.judge == "extreme"
    case = Case(dist.extreme_kind or example.distribution, p, backward=example.backward)
    rule = ref.judge(out)
    # extreme_logits' allowance (B, H, Sq, Sk, D work): needed for the extreme distributions,
    # otherwise only where the pass rule alone fails (the bound only ever adds to it)
    terms = functools.lru_cache(maxsize=1)(lambda: extreme_logits.allowance(case, ref))
    results = []
    if "oracle" in checks:
        passed = not extreme and all(c.passed for c in rule)
        results.append(from_output_checks("oracle", rule) if passed
                       else _oracle(case, ref, out, terms(), extreme))
    if "lse_bounds" in checks and out.lse is not None:  # no lse: nothing to bound
        # lse's allowed error: the pass rule's, or where that is not enough (or meaningless)
        # the bound's largest (the oracle check accepts either)
        s = scores(ref.q, ref.k, p.causal)
        lse = out.lse.detach().double().to(s.device)
        allowed = 0.0 if extreme else next(c.allowed for c in rule if c.output == "lse")
        rows = lse_bounds.row_checks(s, lse, allowed) if not extreme else []
        if extreme or not all(c.passed for c in rows):
            floor = rounding_floor("lse", ref.oracle.lse, torch.float32)
            allowed = max(allowed, float((floor + terms()["lse"]).max()))
            rows = lse_bounds.row_checks(s, lse, allowed)
        results += rows
    if "rows_without_keys" in checks:
        results.append(causal_masking.rows_without_keys(case, out, device))
    if p.causal and _something_hidden(p):  # K/V altered at keys hidden from some rows
        view = None if example.layout == "contiguous" else (lambda t: nan_view(t, example.layout))
        results += causal_masking.hidden_key_checks(impl, variant, ref, out, checks, view)
    if "gqa_twin" in checks and not extreme and p.heads_q != p.heads_kv:
        mha_ref = gqa_reduction.mha_twin(ref, device)
        with nan_filled_allocations():
            mha = call(impl, variant, mha_ref)
        results += gqa_reduction.twin_checks(ref, mha_ref, out, mha)
    if "determinism" in checks:
        with nan_filled_allocations():
            again = call(impl, variant, ref)
        runs = determinism.compare_runs(impl, variant, ref, [out, again])
        results += [c for c in runs if not (extreme and c.name == "dq_spread")]
    if "variant_flips" in checks and not extreme:
        results += variant_equivalence.flip_checks(
            ref, variant, out, lambda other: call(impl, other, ref),
            lambda v: key_tile(impl, v, ref.q, ref.k, ref.v, p.causal))
    if "inputs_untouched" in checks:  # after the first call, and after the others
        later = memory_safety.untouched(inputs, before).numbers["changed_elements"]
        changed = first_call.numbers["changed_elements"] | {
            f"{name} (a later call)": n for name, n in later.items()}
        results.append(Check("inputs_untouched", not changed, None,
                             {"changed_elements": changed}))
    return results


def _something_hidden(p) -> bool:
    try:
        causal_masking.first_hidden_key(p)
    except ValueError:  # every row sees every key
        return False
    return True


def _oracle(case: Case, ref: Reference, out, terms, extreme: bool) -> Check:
    """The 'oracle' check (see the module docstring), one entry per output in its numbers."""
    bound = extreme_logits.judge(case, ref, out, terms)  # finite, o, lse (, dq, dk, dv)
    if extreme:
        parts = bound
    else:
        by_name = {c.name: c for c in bound}
        parts = [c for c in bound if c.name in GRADIENT_OUTPUTS]
        for rule in ref.judge(out):
            if rule.output in FORWARD_OUTPUTS:
                other = by_name[rule.output]
                passed = rule.passed or (other.passed and by_name["finite"].passed)
                ratio = min(rule.ratio if rule.nonfinite_match else math.inf, other.ratio)
                parts.append(Check(rule.output, passed, ratio,
                                   {"pass_rule": rule.as_dict(), "bound": other.numbers}))
    ratios = [c.ratio for c in parts if c.ratio is not None]
    numbers = {c.name: {**c.numbers, "passed": c.passed, "ratio": c.ratio} for c in parts}
    return Check("oracle", all(c.passed for c in parts), max(ratios) if ratios else None, numbers)


# ----------------------------------------------------------------------------- a campaign

@dataclass(frozen=True)
class Tick:
    """What the progress display and the coverage summary learn from one example."""
    example: Example
    passed: bool
    ratio: float | None
    seconds: float
    phase: str  # "generate" (before any failure) or "shrink"
    # the first example of its compiled class in this process: its seconds include compiling
    # (or loading from Triton's cache) the kernels it runs
    first_of_class: bool = False
    at: float = 0.0  # time.monotonic() when it finished
    compiled: tuple = ()  # the kernels it compiled, not loaded (compile_watch.Compiled)


def coverage_label(key: str, value: str) -> str:
    """A length class in words: '64k+1' (properties.strategies.length_class) is 'multiple of
    64 plus 1', not 64,001; '1' is 'length 1'."""
    if key not in ("seqlen_q", "seqlen_k"):
        return value
    if value == "1":
        return "length 1"
    match = re.fullmatch(r"(\d+)k([+-]1)?", value)
    if match is None:
        return value
    tile, offset = match.groups()
    return f"multiple of {tile}" + {None: "", "+1": " plus 1", "-1": " minus 1"}[offset]


@dataclass
class Tally:
    """Examples run, by phase, with their coverage and the closest call (highest ratio of a
    passing example)."""
    on_gpu: bool = False
    examples: int = 0
    shrink_examples: int = 0
    rejected: int = 0
    example_seconds: float = 0.0
    first_examples: int = 0  # the first of their compiled class in their process
    first_seconds: float = 0.0
    coverage: dict = field(default_factory=dict)  # dimension -> Counter
    closest: tuple | None = None  # (ratio, example id)
    compiles: CompileTally = field(default_factory=CompileTally)  # examples that compiled
    finished_at: list = field(default_factory=list)  # each example's Tick.at

    def add(self, tick: Tick):
        if tick.phase == "shrink":
            self.shrink_examples += 1
            return
        self.examples += 1
        self.example_seconds += tick.seconds
        self.finished_at.append(tick.at)
        if tick.first_of_class:
            self.first_examples += 1
            self.first_seconds += tick.seconds
        self.compiles.add(tick.compiled)
        for key, value in coverage_keys(tick.example, self.on_gpu).items():
            self.coverage.setdefault(key, Counter())[coverage_label(key, value)] += 1
        if tick.passed and tick.ratio is not None and math.isfinite(tick.ratio):
            if self.closest is None or tick.ratio > self.closest[0]:
                self.closest = (tick.ratio, str(tick.example))

    def merge(self, other: "Tally"):
        self.examples += other.examples
        self.shrink_examples += other.shrink_examples
        self.rejected += other.rejected
        self.example_seconds += other.example_seconds
        self.first_examples += other.first_examples
        self.first_seconds += other.first_seconds
        self.finished_at = sorted(self.finished_at + other.finished_at)
        self.compiles.merge(other.compiles)
        for key, counter in other.coverage.items():
            self.coverage.setdefault(key, Counter()).update(counter)
        if other.closest and (self.closest is None or other.closest[0] > self.closest[0]):
            self.closest = other.closest

    def steady_rate(self) -> float | None:
        """Examples a second over the later half of the run (by when they finished): the rate
        once the kernels a campaign draws are compiled; None under 20 examples."""
        times = sorted(self.finished_at)
        if len(times) < 20:
            return None
        start = times[0] + (times[-1] - times[0]) / 2
        late = [t for t in times if t >= start]
        return (len(late) - 1) / (late[-1] - late[0]) if late[-1] > late[0] else None

    def as_dict(self) -> dict:
        steady = self.steady_rate()
        return {"examples": self.examples, "shrink_examples": self.shrink_examples,
                "rejected": self.rejected, "example_seconds": round(self.example_seconds, 3),
                "first_of_class_examples": self.first_examples,
                "first_of_class_seconds": round(self.first_seconds, 3),
                "steady_examples_per_second": None if steady is None else round(steady, 2),
                "compiled_in_examples": self.compiles.as_dict(),
                "coverage": {k: dict(v.most_common()) for k, v in self.coverage.items()},
                "closest_call": ({"ratio": self.closest[0], "example": self.closest[1]}
                                 if self.closest else None)}


@dataclass
class Outcome:
    impl: str
    tally: Tally
    seconds: float
    stopped: str  # "done" (max_examples), "time", "counterexample", "stopped"
    failure: ExampleReport | None = None
    seed: int | None = None  # the hypothesis seed (of the first worker with --jobs)
    lse_missing: str | None = None  # why the implementation gave no lse (its checks left out)

    @property
    def examples_per_second(self) -> float:
        return self.tally.examples / self.seconds if self.seconds > 0 else 0.0


class CounterExample(AssertionError):
    """Raised inside the hypothesis test for a failing example (hypothesis then shrinks it)."""


class _Stop(BaseException):
    """Ends a run without a failure (time budget spent, or another worker found one): a
    BaseException, so hypothesis neither catches nor shrinks it."""


def fuzz(impl, impl_name: str, *, space: Space, device: str, profile: str = "dev",
         checks=DEFAULT_CHECKS, max_examples: int | None = None, seconds: float | None = None,
         seed: int | None = None, database: str | None = None, explicit=(), on_tick=None,
         stop=None, shrink_seconds: float = SHRINK_SECONDS, layout: str = "bhsd",
         deadline_at: float | None = None) -> Outcome:
    """Fuzz `impl` over `space`. Returns the Outcome; `failure` is the minimal counterexample
    (or, when shrinking ran out of time, the smallest one found by then).

    `explicit`: examples run first (the regression corpus). `on_tick(Tick)` after every example.
    `stop`: an Event that ends the run early (another worker found a counterexample).
    `layout`: the layout `impl` takes (fa2check.core.calling). `deadline_at`: a time.monotonic()
    (system-wide) by which generating ends, instead of `seconds` from this call's start, so that
    workers that started late end with the others."""
    chosen = PROFILES[profile]
    seconds = chosen.seconds if seconds is None else seconds
    seed = _seed(profile, seed)
    tally = Tally(on_gpu=space.on_gpu)
    state = {"failure": None, "stopped": "done", "lse_missing": None}
    seen = set()  # the compiled classes this process has run (properties.strategies)
    watch = CompileWatch().install() if device == "cuda" else None  # the interpreter compiles
    # nothing
    started = time.monotonic()
    deadline = deadline_at or (started + seconds if seconds else math.inf)

    def body(example):
        now = time.monotonic()
        if state["failure"] is None:
            if stop is not None and stop.is_set():
                state["stopped"] = "stopped"
                raise _Stop
            if now > deadline:
                state["stopped"] = "time"
                raise _Stop
        elif now > max(deadline, state["failed_at"]) + shrink_seconds:
            state["stopped"] = "counterexample"  # shrinking cut short: report the best so far
            raise _Stop
        if watch is not None:
            watch.take()  # what compiled between examples is not this example's
        try:
            report = check_example(impl, example, device, checks, layout)
        except Unsupported:
            tally.rejected += 1
            reject()
        state["lse_missing"] = state["lse_missing"] or report.lse_missing
        compiled = compiled_class(example)
        tick = Tick(example, report.passed, report.ratio, report.seconds,
                    "shrink" if state["failure"] is not None else "generate",
                    first_of_class=compiled not in seen, at=time.monotonic(),
                    compiled=watch.take() if watch is not None else ())
        seen.add(compiled)
        tally.add(tick)
        if on_tick is not None:
            on_tick(tick)
        if not report.passed:
            if state["failure"] is None:
                state["failed_at"] = time.monotonic()
            state["failure"] = report
            raise CounterExample(f"{example}: {report.message}")
        if report.ratio is not None and math.isfinite(report.ratio):
            target(min(report.ratio, 1e6), label="worst error / allowed")

    body._hypothesis_internal_add_digest = impl_name.encode()  # a database key per implementation
    test = given(examples(space))(body)
    for past in reversed(list(explicit)):
        test = explicit_example(past)(test)
    test = settings(hypothesis_settings(profile, max_examples, database))(test)
    test = hypothesis_seed(seed)(test)
    try:
        test()
    except _Stop:
        pass
    except Exception:  # CounterExample, or hypothesis's report that it did not reproduce
        if state["failure"] is None:
            raise  # not the implementation's failure: a fault of the harness
    finally:
        if watch is not None:
            watch.uninstall()
    if state["failure"] is not None:
        state["stopped"] = "counterexample"
    return Outcome(impl_name, tally, time.monotonic() - started, state["stopped"],
                   state["failure"], seed, state["lse_missing"])


def _seed(profile: str, seed: int | None) -> int:
    """The seed given, else the profile's, else a random one (recorded, so that a campaign can
    be run again)."""
    if seed is None:
        seed = PROFILES[profile].seed
    return int.from_bytes(os.urandom(4), "little") if seed is None else seed


# ----------------------------------------------------------------------------- in parallel

def fuzz_parallel(impl_name: str, jobs: int, *, on_tick=None, **kwargs) -> list[Outcome]:
    """`jobs` worker processes, each fuzzing with seed + i (a random seed when none) and
    max_examples / jobs; the first counterexample stops the others. On the GPU the workers
    compile different kernel specializations at once and share Triton's on-disk cache."""
    context = multiprocessing.get_context("spawn")  # CUDA and Triton need a fresh process
    events, stop = context.Queue(), context.Event()
    base_seed = _seed(kwargs.get("profile", "dev"), kwargs.pop("seed", None))
    if kwargs.get("max_examples") is None:
        kwargs["max_examples"] = PROFILES[kwargs.get("profile", "dev")].max_examples
    kwargs["max_examples"] = max(1, math.ceil(kwargs["max_examples"] / jobs))
    threads = max(1, (os.cpu_count() or 1) // jobs)
    explicit = kwargs.pop("explicit", ())  # the corpus: run once, by the first worker
    if kwargs.get("seconds"):  # one deadline for all, however long a worker takes to start
        kwargs["deadline_at"] = time.monotonic() + kwargs["seconds"]
    workers = [context.Process(target=_worker, daemon=True,
                               args=(impl_name, base_seed + i, threads,
                                     {**kwargs, "explicit": explicit if i == 0 else ()}, events,
                                     stop))
               for i in range(jobs)]
    for worker in workers:
        worker.start()
    outcomes = []
    try:
        while len(outcomes) < jobs:
            try:
                kind, payload = events.get(timeout=1.0)
            except queue_module.Empty:
                if not any(w.is_alive() for w in workers):
                    raise RuntimeError("a fuzz worker died without reporting") from None
                continue
            if kind == "tick" and on_tick is not None:
                on_tick(payload)
            elif kind == "outcome":
                outcomes.append(payload)
                if payload.failure is not None:
                    stop.set()
            elif kind == "error":
                raise RuntimeError(f"a fuzz worker failed:\n{payload}")
    except BaseException:
        stop.set()
        for worker in workers:
            worker.join(timeout=10)
            if worker.is_alive():
                worker.terminate()
        raise
    for worker in workers:
        worker.join()
    return outcomes


def _worker(impl_name, seed, threads, kwargs, events, stop):
    select_device()  # TRITON_INTERPRET comes from the parent's environment
    torch.set_num_threads(threads)
    try:
        impl = Column(impl_name, "", impl_name).load()
        outcome = fuzz(impl, impl_name, seed=seed, stop=stop,
                       on_tick=lambda tick: events.put(("tick", tick)), **kwargs)
        events.put(("outcome", outcome))
    except BaseException:  # noqa: BLE001 - reported to the parent, which stops the others
        events.put(("error", traceback.format_exc()))


def merge(outcomes: list[Outcome], seconds: float) -> Outcome:
    """One Outcome from the workers': the tallies summed, the first counterexample kept."""
    tally = Tally(on_gpu=outcomes[0].tally.on_gpu)
    for outcome in outcomes:
        tally.merge(outcome.tally)
    failures = [o for o in outcomes if o.failure is not None]
    stopped = ("counterexample" if failures else
               "time" if any(o.stopped == "time" for o in outcomes) else "done")
    first = failures[0] if failures else outcomes[0]
    return Outcome(first.impl, tally, seconds, stopped, first.failure, first.seed,
                   next((o.lse_missing for o in outcomes if o.lse_missing), None))
