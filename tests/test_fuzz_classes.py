"""The GPU fuzzer's compiled classes (fa2check/fuzz/classes.py): every (variant, dtype, mask)
planned, every example drawn from a planned class, and two problems of one class launching the
same kernel specialisations (which is what makes compiling them ahead pay)."""
import json

import pytest
from hypothesis import Phase, given, settings
from hypothesis import seed as hypothesis_seed

from fa2check.core.implementations import HOPPER, OURS
from fa2check.fuzz import classes
from fa2check.fuzz import cli as fuzz
from kernels import Variant, flash_attention, launch_cache
from properties.strategies import (ONE, SPECIALISED, Example, KernelClass, ShapeClass, Space,
                                   compiled_class, examples)


def _draw(space, n, seed=1):
    drawn = []

    @hypothesis_seed(seed)
    @settings(max_examples=n, database=None, deadline=None, phases=(Phase.generate,))
    @given(examples(space))
    def collect(example):
        drawn.append(example)
    collect()
    return drawn


@pytest.mark.parametrize("impl", [OURS, HOPPER])
def test_the_plan_covers_every_variant_dtype_and_mask(impl):
    space = Space.for_device(True, impl)
    planned = classes.plan(space, shapes=3, seed=5)
    kernels = {c.kernel for c in planned}
    assert {(k.variant, k.dtype, k.causal) for k in kernels} == {
        (v, d, c) for v in space.variants for d in space.dtypes for c in space.causal}
    assert {k.head_dim for k in kernels} <= set(space.head_dims)
    assert len(planned) == 3 * len(kernels)  # seeded shapes, none repeated
    assert classes.plan(space, shapes=3, seed=5) == planned != classes.plan(space, shapes=3,
                                                                            seed=6)
    if impl == HOPPER:  # its domain: TMA-ready layouts, v's head dim q's
        assert {c.shape.layout for c in planned} <= {"contiguous", "padded"}
        assert all(k.head_dim_v == k.head_dim for k in kernels)


def test_examples_are_drawn_from_the_compiled_classes_only():
    space = classes.with_classes(Space.for_device(False), 4, 2, seed=3)
    drawn = _draw(space, 60)
    assert {compiled_class(e) for e in drawn} <= set(space.classes)
    assert len({compiled_class(e) for e in drawn}) > 1
    for e in drawn:  # the lengths: 16 k + residue, or 1
        shape = compiled_class(e).shape
        for n, residue in ((e.problem.seqlen_q, shape.q_residue),
                           (e.problem.seqlen_k, shape.k_residue)):
            assert n == 1 if residue == ONE else (n % SPECIALISED == residue and n > 1)
    assert all(space.contains(e) for e in drawn)
    outside = Example(drawn[0].variant, drawn[0].problem, drawn[0].distribution, "bshd-strided")
    assert space.contains(outside) == (compiled_class(outside) in space.classes)


_LAUNCH = launch_cache.CachedLaunch.launch  # before any test patches it


class _Launches:
    """Records the specialisation of every kernel launch from now on (until another _Launches
    records them), as Triton takes it: integers' classes (== 1, divisible by 16, other),
    tensors' dtype and alignment, the constexprs."""

    def __init__(self, monkeypatch):
        self.keys = []
        launch = _LAUNCH

        def record(fn_self, grid, args, kwargs):
            fn = fn_self.fn  # a JITFunction, or under the interpreter its kwargs keep the list
            skip = set(getattr(fn, "do_not_specialize", None)
                       or getattr(fn, "kwargs", {}).get("do_not_specialize") or ())
            names = fn.arg_names
            self.keys.append((names[0], tuple(
                "x" if names[i] in skip else
                ("1" if a == 1 else "16" if a % 16 == 0 else "n") if type(a) is int else
                (str(a.dtype), a.data_ptr() % 16 == 0) if hasattr(a, "data_ptr") else
                str(type(a)) for i, a in enumerate(args)),
                tuple(sorted((k, str(v)) for k, v in kwargs.items()))))
            return launch(fn_self, grid, args, kwargs)
        monkeypatch.setattr(launch_cache.CachedLaunch, "launch", record)


def _launch_keys(problem, layout, variant, monkeypatch):
    """Every launch's specialisation (_Launches) of a call, forward and backward."""
    from properties.strategies import make_inputs

    launches = _Launches(monkeypatch)
    q, k, v, do = (t.detach().requires_grad_(True) for t in make_inputs(problem, "normal",
                                                                         layout))
    o = flash_attention(q, k, v, causal=problem.causal, variant=variant)
    o.backward(do)
    monkeypatch.undo()
    return launches.keys


@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
def test_a_class_jobs_compile_every_kernel_its_examples_launch(dtype, monkeypatch):
    """The precompile jobs of a class (representatives) launch every specialisation that an
    example of the class launches, its extreme distributions' forward-only calls and the
    causal checks' second forward included: without the forward-only call, the forward that
    stores no residual of o (STORE_O_RES) is compiled by the examples themselves (float32
    stores none); the forward-only call alone misses the backward's kernels."""
    from fa2check.core.compiling import compile_job
    from fa2check.core.problems import Problem
    from fa2check.fuzz.fuzzer import check_example
    from properties.strategies import CompiledClass

    space = Space.for_device(False)
    kernel = KernelClass(Variant(), dtype, 16, 16, True)
    compiled = CompiledClass(kernel, ShapeClass(1, 2, 1, 3, 3, "contiguous"))
    jobs = classes.representatives(compiled, OURS, space)
    assert len(jobs) == (1 if dtype == "float32" else 2)
    pairs = [pair for job in jobs for pair in job]

    def launches(calls):
        recorded = _Launches(monkeypatch)
        calls()
        return set(recorded.keys)

    def examples():
        for distribution in ("normal", "logits-1e5"):
            report = check_example(flash_attention, Example(
                kernel.variant, Problem(1, 2, 1, 19, 35, 16, dtype, True, seed=3),
                distribution), "cpu")
            assert report.error is None, report.error

    def job(backward):
        return lambda: compile_job([pair for pair in pairs if pair[1].backward in backward],
                                   "cpu")

    ran = launches(examples)
    assert ran and ran <= launches(job((True, False)))
    assert (ran <= launches(job((True,)))) == (dtype == "float32")
    assert not ran <= launches(job((False,)))


@pytest.mark.parametrize("shape", [
    ShapeClass(1, 4, 2, 1, 1, "contiguous"),
    ShapeClass(2, 3, 1, 15, 0, "padded"),
    ShapeClass(1, 2, 2, 7, 7, "padded-bshd-strided"),
    ShapeClass(2, 4, 2, 15, 15, "contiguous"),  # n_blocks 2 x 4 x 1 and 2 x 4 x 2 row blocks
], ids=str)
def test_two_problems_of_a_class_launch_the_same_kernels(shape, monkeypatch):
    """Lengths 16 k + residue for two k: every launch's specialisation is the same (the
    forward's n_blocks, batch x heads x row blocks, crossed classes with k until D96). A
    residue dropped from the class (lengths 17 and 32 drawn as one) is caught."""
    from fa2check.core.problems import Problem

    kernel = KernelClass(Variant(False, True, False), "float16", 40, 40, True)
    lengths = [[1 if r == ONE else SPECIALISED * k + r for r in (shape.q_residue,
                                                               shape.k_residue)]
               for k in (1, 2)]
    keys = [_launch_keys(Problem(shape.batch, shape.heads_q, shape.heads_kv, sq, sk,
                                 kernel.head_dim, kernel.dtype, kernel.causal, seed=1),
                         shape.layout, kernel.variant, monkeypatch) for sq, sk in lengths]
    assert keys[0] == keys[1]
    moved = [_launch_keys(Problem(shape.batch, shape.heads_q, shape.heads_kv, n, n,
                                  kernel.head_dim, kernel.dtype, kernel.causal, seed=1),
                          shape.layout, kernel.variant, monkeypatch) for n in (17, 32)]
    assert moved[0] != moved[1]


def test_fa1_schedule_launches_one_kernel_for_one_key_tile_and_several(monkeypatch):
    """FA1's schedule (seq_parallel off) passes float32 partial-state buffers where the keys span
    several tiles; with one tile its stand-in must be float32 too, or a class's examples
    compile a forward of their own (o's dtype in the pointer: 31 of 3,214 GPU examples at
    5d1b7ff), as did its m and l buffers' alignment. Lengths 5 and 5 + 16 k fall in one class.
    (The backward's grid is FA1's launcher's choice by the shape, D90: its kernels may differ.)"""
    from fa2check.core.problems import Problem

    forwards = [_launch_keys(Problem(1, 2, 1, 5, seqlen_k, 16, "bfloat16", False, seed=1),
                             "contiguous", Variant(True, False, True), monkeypatch)[0]
                for seqlen_k in (5, 5 + SPECIALISED * 8)]  # a call's first launch: the forward
    assert forwards[0] == forwards[1]


def test_cli_draws_from_compiled_classes(tmp_path):
    report = tmp_path / "fuzz.json"
    status = fuzz.main(["--profile", "ci", "--max-examples", "6", "--no-corpus-first",
                        "--classes", "2", "--shapes", "2", "--head-dim", "16",
                        "--out", str(tmp_path / "found"), "--json", str(report)])
    data = json.loads(report.read_text())
    assert status == 0 and data["examples"] == 6
    assert data["compiled_classes"]["classes"] == 4  # 2 kernel classes x 2 shapes
    assert data["compiled_classes"]["jobs_done"] == 0  # the interpreter compiles nothing
    assert len(data["coverage"]["variant"]) <= 2 and data["first_of_class_examples"] >= 1


def test_cli_fuzzes_several_implementations_in_turn(tmp_path):
    """--impl A,B: a campaign each, the examples shared out, one record with both."""
    report = tmp_path / "fuzz.json"
    status = fuzz.main(["--profile", "ci", "--max-examples", "6", "--no-corpus-first",
                        "--impl", "ours,sdpa_math", "--head-dim", "16",
                        "--out", str(tmp_path / "found"), "--json", str(report)])
    data = json.loads(report.read_text())
    assert status == 0
    assert [c["impl"] for c in data["campaigns"]] == ["kernels:flash_attention",
                                                      "fa2check.adapters:sdpa_math"]
    assert [c["examples"] for c in data["campaigns"]] == [3, 3] and data["examples"] == 6
    assert data["counterexamples"] == 0


def test_workers_end_at_one_deadline():
    """A worker that starts late still ends at the campaign's deadline (deadline_at, a
    system-wide monotonic time), not `seconds` after its own start."""
    import time

    from fa2check.fuzz.fuzzer import fuzz as run_fuzz

    outcome = run_fuzz(flash_attention, OURS, space=Space.for_device(False), device="cpu",
                       profile="ci", seconds=600, deadline_at=time.monotonic() - 1)
    assert outcome.stopped == "time" and outcome.tally.examples == 0


def test_seconds_alone_bound_a_campaign(tmp_path):
    """--seconds without --max-examples: the time decides, not the profile's examples (the dev
    profile's 500 shared by three implementations stopped a 10-minute gpu-check campaign of
    the chassis at 170 examples)."""
    report = tmp_path / "fuzz.json"
    status = fuzz.main(["--profile", "ci", "--seconds", "4", "--no-corpus-first", "--jobs", "1",
                        "--impl", "sdpa_math", "--causal", "false", "--head-dim", "16",
                        "--max-seqlen", "16",
                        "--out", str(tmp_path / "found"), "--json", str(report)])
    data = json.loads(report.read_text())
    assert status == 0 and data["stopped"] == "time" and data["examples"] > 0


@pytest.mark.parametrize("impl", [OURS, HOPPER])
def test_every_campaign_fuzzes_the_headlines_kernels(impl):
    """A GPU campaign's 12 kernel classes always hold FA2 with each mask and the FA1-style
    baseline, and on the chassis FA3's switches all on, causal; drawn freely from the chassis's
    60 (variant, dtype, mask) combinations they held no FA2 in 41% of seeds (the H100 gate at
    14b43f1 drew FA2 on the chassis twice in 837 examples, both from the corpus). Fails on the
    free draw (seed 0 on the chassis)."""
    space = Space.for_device(True, impl)
    assert (str(classes.FA2), str(classes.FA1_STYLE)) == ("+defer+seqpar+splitq",
                                                          "-defer-seqpar-splitq")
    for seed in range(40):
        kernels = {c.kernel for c in classes.plan(space, classes.KERNEL_CLASSES, 2, seed)}
        assert {k.causal for k in kernels if k.variant == classes.FA2} == {False, True}, seed
        assert any(k.variant == classes.FA1_STYLE for k in kernels), seed
        # the chassis: FA3's switches all on, causal (D114's gate drew no pingpong or overlap)
        assert any(k.variant == classes.FA3_ALL and k.causal for k in kernels) == (
            impl == HOPPER), seed
