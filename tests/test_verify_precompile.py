"""fa2check.verify.precompile: the calls each property declares are the calls it makes, and the
compile jobs cover each (column, call) of the full tier once, costliest first; a job reports
its compile class and seconds."""
import dataclasses
import time

import pytest
import torch

from fa2check.core.implementations import OURS, columns, default_specs
from fa2check.core import compiling
from fa2check.verify import precompile
from fa2check.verify.runner import plan
from kernels import Variant
from properties import PROPERTIES, gqa_reduction
from properties.base import calls


def _signature(q, k, v, backward):
    return tuple((tuple(t.shape), t.stride(), t.storage_offset(), t.dtype) for t in (q, k, v)), \
        backward


def _undeclared(name, case):
    """Signatures of q, k, v (and whether the backward ran) of calls the property made on `case`
    that none of its declared calls' inputs has."""
    made = set()

    def recording(q, k, v, *, causal, softmax_scale, variant, return_lse):
        made.add(_signature(q, k, v, q.requires_grad))
        touch = (q.flatten()[0] + k.flatten()[0] + v.flatten()[0]) * 0  # for autograd
        o = torch.zeros(q.shape[:3] + v.shape[3:], dtype=q.dtype) + touch.to(q.dtype)
        return o, torch.zeros(q.shape[:3]) + touch.float()

    module = PROPERTIES[name]
    module.run(recording, Variant(), case, "cpu")
    declared = {_signature(*compiling.inputs(c, "cpu")[:3], c.backward)
                for c in calls(module, case)}
    return made - declared


@pytest.mark.parametrize("name", list(PROPERTIES))
def test_declared_calls_are_the_calls_made(name):
    for case in PROPERTIES[name].CASES["quick"]:
        assert not _undeclared(name, case), case.id


def test_a_missing_declaration_is_found(monkeypatch):
    case = gqa_reduction.CASES["quick"][1]
    declared = gqa_reduction.calls
    monkeypatch.setattr(gqa_reduction, "calls", lambda case: declared(case)[:1])
    assert len(_undeclared("gqa_reduction", case)) == 1  # the MHA twin


def test_full_tier_jobs_cover_each_call_once_costliest_first():
    tasks = plan("full", columns(default_specs("cuda"), None))
    jobs = precompile.jobs(tasks)
    pairs = [pair for job in jobs for pair in job]
    assert len(pairs) == len(set(pairs))
    assert set(pairs) == {(t.column, c) for t in tasks
                          for c in calls(PROPERTIES[t.property], t.case)}
    split_k = str(Variant(split_q=False))
    assert jobs[0][0][0].variant == split_k and jobs[-1][0][0].variant != split_k
    for job in jobs:  # one variant a job, ours (whose backward Gluon's calls share) first
        assert len({column.variant for column, _ in job}) == 1
        impls = [column.impl for column, _ in job]
        assert impls == sorted(impls, key=lambda impl: impl != OURS)
        ours_backward = [call.backward for column, call in job if column.impl == OURS]
        assert ours_backward == sorted(ours_backward, reverse=True)  # the forward alone: a hit
    # a layout of its own is a class of its own; a group of 1 (gqa_reduction's MHA twin) is
    # one for the Hopper chassis only: our Triton kernels do not specialise the group (D70)
    ours, hopper = columns(["ours", "hopper"], None)[0], columns(["hopper"], None)[0]
    twins = calls(PROPERTIES["gqa_reduction"], PROPERTIES["gqa_reduction"].CASES["full"][1])
    layouts = calls(PROPERTIES["memory_safety"], PROPERTIES["memory_safety"].CASES["full"][1])
    for column, pair, apart in ((ours, layouts, True), (ours, twins, False),
                                (hopper, twins, True)):
        classes = [compiling.compile_class(column, call) for call in pair]
        assert (classes[0] != classes[1]) == apart, (column.label, pair)
    # a forward alone compiles nothing its call with the backward does not in our float32
    # Triton kernels (no residual of o); elsewhere the residual is compiled in (STORE_O_RES)
    with_backward = layouts[0]
    assert with_backward.backward
    for column, dtype, apart in ((ours, "float32", False), (ours, "bfloat16", True),
                                 (hopper, "float32", True)):
        both = dataclasses.replace(with_backward, problem=dataclasses.replace(
            with_backward.problem, dtype=dtype))
        alone = dataclasses.replace(both, backward=False)
        classes = [compiling.compile_class(column, call) for call in (both, alone)]
        assert (classes[0] != classes[1]) == apart, (column.label, dtype)


def test_a_job_calls_the_implementation_with_each_call(monkeypatch):
    seen = []
    monkeypatch.setattr(compiling, "run_impl",
                        lambda fn, q, k, v, do, dlse, backward, **kw: seen.append(
                            (q.stride(), do.stride(), backward, kw["variant"])))
    case = PROPERTIES["memory_safety"].CASES["quick"][1]  # bshd-strided
    declared = calls(PROPERTIES["memory_safety"], case)
    compiling.compile_job([(columns(None, ["fa2"])[0], c) for c in declared], "cpu")
    expected = []
    for c in declared:
        q, _, _, do = compiling.inputs(c, "cpu")
        expected.append((q.stride(), do.stride(), case.backward, Variant()))
    assert seen == expected and expected[0] != expected[1]


def test_a_compile_job_reports_its_class_and_seconds(monkeypatch):
    monkeypatch.setattr(compiling, "run_impl", lambda *args, **kwargs: time.sleep(0.01))
    case = PROPERTIES["memory_safety"].CASES["quick"][1]
    declared = calls(PROPERTIES["memory_safety"], case)
    job = [(columns(None, ["fa2"])[0], c) for c in declared]
    summary = compiling.compile_job(job, "cpu")
    p = case.problem
    assert {k: summary[k] for k in ("variant", "dtype", "head_dim", "causal", "backward",
                                    "impls")} == {
        "variant": str(Variant()), "dtype": p.dtype, "head_dim": p.head_dim,
        "causal": p.causal, "backward": declared[0].backward, "impls": ["triton"]}
    assert [c["layout"] for c in summary["calls"]] == [c.layout for c in declared]
    assert summary["seconds"] >= sum(c["seconds"] for c in summary["calls"]) >= 0.02
