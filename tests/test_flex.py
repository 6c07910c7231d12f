"""torch's flex_attention as an implementation (fa2check.core.flex, `--impl flex`) and as the
ablation's opt-in peer `flex`.

On the CPU (torch 2.11) flex_attention has no backward, and compiled it runs inference only,
without lse (its first compile of a tiny shape took 11-18 s here): the CPU tests judge the
adapter's semantics through its eager path (`flex_eager`, the same mask, GQA, scale and lse
code), forward only, and the compiled path's refusals; its numbers are judged by the `gpu`
tests.

Shown to fail (each edit made by hand, then restored): with the block mask top-left aligned
(`offset = 0` in `causal_block_mask`), test_flex_eager_passes_the_oracle fails its 4 causal
cases with seqlen_q != seqlen_k and test_flex_eager_is_judged_by_the_properties fails
(causal_masking's oracle check); with the lse returned in base 2 (`aux.lse / ln 2` in
`flex_call`), all 5 oracle cases fail their lse check and the properties test fails
(lse_bounds); with the NotImplementedError -> Unsupported mapping switched off,
test_what_flex_cannot_run_is_unsupported_with_torchs_reason fails; without FLEX_COMPILE_S added
to the gate's cost, test_the_plan_counts_flexs_compile_in_the_gate fails; with fullgraph=False
in compiled_flex_attention, test_compiled_flex_does_not_fall_back_to_eager_after_a_refusal fails.
"""
from dataclasses import replace

import pytest

from conftest import ON_GPU
from fa2check.ablate import cli as ablate_cli
from fa2check.ablate import plan
from fa2check.ablate.contenders import DEFAULT_PEERS, FLEX, PEERS, backend
from fa2check.adapters import flex, flex_eager
from fa2check.core.checks import Reference
from fa2check.core.flex import _not_implemented, causal_block_mask
from fa2check.core.implementations import FLEX as FLEX_IMPL
from fa2check.core.implementations import Column, Unsupported, columns
from fa2check.core.problems import Problem
from fa2check.verify import verdicts
from fa2check.verify.runner import Task, run_task
from properties import PROPERTIES
from properties.base import Case

PROBLEMS = [  # bottom-right causal both ways (q > k: rows that see no key), GQA, MQA, Dv != D
    Problem(1, 4, 2, 21, 37, 16, "float32", True, seed=1),
    Problem(1, 4, 2, 37, 21, 16, "float32", True, seed=2, head_dim_v=8),
    Problem(2, 4, 1, 45, 29, 32, "bfloat16", True, seed=3),
    Problem(1, 2, 1, 13, 70, 24, "float16", True, seed=4, head_dim_v=40),
    Problem(1, 2, 2, 9, 13, 40, "float16", False, seed=5, head_dim_v=24),
]


@pytest.mark.parametrize("problem", PROBLEMS, ids=str)
def test_flex_eager_passes_the_oracle(problem):
    """o and lse (float32, natural log) within the pass rule; lse -inf exactly where a row sees
    no key (the pass rule's NaN/Inf placement), and o there within the rule of the oracle's 0."""
    reference = Reference(problem, "cpu", backward=False)
    failed = [str(c) for c in reference.check(flex_eager, None) if not c.passed]
    assert failed == []


def test_flex_eager_is_judged_by_the_properties():
    """Two properties' quick cases (causal_masking's q < k and q > k), forward only (no backward
    on the CPU), as the verify runner runs them (PROPERTIES[name].run). lse_bounds passes;
    causal_masking's oracle check (the bottom-right alignment) and rows_without_keys pass. Its
    invisible_* checks are flex's own verdict, not the adapter's, and are not asserted: eager
    flex_attention lets non-finite V of hidden keys into its rows (0 * inf in P @ V), and
    `--impl flex` reports that as a failure."""
    for case in PROPERTIES["lse_bounds"].CASES["quick"]:
        result = PROPERTIES["lse_bounds"].run(flex_eager, None, case, "cpu")
        assert result.status == "pass", f"{case.id}: {result.message}"
    for case in PROPERTIES["causal_masking"].CASES["quick"][0:3:2]:  # q < k, q > k
        result = PROPERTIES["causal_masking"].run(flex_eager, None, replace(case, backward=False),
                                                  "cpu")
        semantic = [c for c in result.checks if c.name in ("oracle", "rows_without_keys")]
        assert semantic and all(c.passed for c in semantic), f"{case.id}: {result.message}"


def test_the_causal_block_mask_is_built_once_per_shape():
    assert causal_block_mask(21, 37, "cpu") is causal_block_mask(21, 37, "cpu")
    assert causal_block_mask(21, 37, "cpu") is not causal_block_mask(37, 21, "cpu")


def test_what_flex_cannot_run_is_unsupported_with_torchs_reason():
    """No backward on the CPU: the verify runner records 'unsupported' with torch's words, not
    an error and not a pass. Fails without the NotImplementedError -> Unsupported mapping."""
    q, k, v, _ = PROBLEMS[0].inputs()
    with pytest.raises(Unsupported, match="backward on CPU"):
        flex_eager(q.requires_grad_(True), k, v, causal=True)
    if not ON_GPU:
        case = Case("q<k", PROBLEMS[0])
        record = run_task(Task(Column(FLEX_IMPL, "+defer+seqpar+splitq", "flex"),
                               "causal_masking", case), "cpu")
        assert record["status"] == "unsupported" and "backward on CPU" in record["message"]


def test_compiled_flex_does_not_fall_back_to_eager_after_a_refusal():
    """The compiled path on the CPU: a call that requires grad is refused while dynamo traces
    it; a later call asking for lse must still be refused (inductor's CPU path returns none),
    not answered by flex_attention run uncompiled under flex's name. Fails with fullgraph=False
    in compiled_flex_attention (the second call returns o and lse). About 6 s: a trace each."""
    if ON_GPU:
        pytest.skip("the CPU's refusals; the GPU runs both calls")
    q, k, v, _ = Problem(1, 2, 2, 33, 40, 16, "float32", False, seed=6).inputs()
    with pytest.raises(Unsupported, match="backward on CPU"):
        flex(q.clone().requires_grad_(True), k, v)
    with pytest.raises(Unsupported, match="return_lse"):
        flex(q, k, v, return_lse=True)


def test_not_implemented_is_found_wrapped_and_in_words():
    try:
        try:
            raise NotImplementedError("no such head dim\nmore")
        except NotImplementedError as inner:
            raise RuntimeError("lowering failed") from inner
    except RuntimeError as outer:
        assert _not_implemented(outer) == "no such head dim"
    assert _not_implemented(RuntimeError("LoweringException: NotImplementedError: on CPU\nx")) \
        == "on CPU"
    dynamo = RuntimeError("Observed exception")
    dynamo.__cause__ = RuntimeError("raised exception NotImplementedError('no backward here')")
    assert _not_implemented(dynamo) == "no backward here"
    assert _not_implemented(RuntimeError("an ordinary failure")) is None


def test_bad_input_is_refused_in_words():
    q, k, v, _ = Problem(1, 3, 2, 9, 9, 16, "float32", False).inputs()
    with pytest.raises(ValueError, match="multiple of heads_kv"):
        flex_eager(q, k, v)
    with pytest.raises(ValueError, match="4-D"):
        flex_eager(q[0], k[0], v[0])


def test_flex_is_a_column_and_an_opt_in_peer():
    (column,) = columns(["flex"], None)
    assert (column.impl, column.label) == (FLEX_IMPL, "flex") and column.load() is flex
    assert "flex: torch's flex_attention under torch.compile" in verdicts.legend([column], [])[0]
    assert FLEX in PEERS and FLEX not in DEFAULT_PEERS and backend(FLEX).backend is None
    assert FLEX not in ablate_cli.parse_args([]).backends.split(",")
    assert ablate_cli.parse_args(["--backends", "sdpa-flash,flex"]).backends == "sdpa-flash,flex"


def test_the_plan_counts_flexs_compile_in_the_gate():
    from fa2check.ablate.grids import Cell

    cell = Cell(4, 16, 16, 1024, 128, "bfloat16", False)
    settings = type("S", (), {"warmup_ms": 5.0, "rep_ms": 20.0, "fa1_grid": "fa1"})()
    without = plan.cell_cost_s(cell, ["fwd"], lambda c, m: [("sdpa-flash", None)], settings)
    with_flex = plan.cell_cost_s(cell, ["fwd"], lambda c, m: [("sdpa-flash", None),
                                                              ("flex", None)], settings)
    assert with_flex[1] - without[1] >= plan.FLEX_COMPILE_S


# ----------------------------------------------------------------------------- the GPU

GPU_PROBLEMS = [
    Problem(2, 8, 2, 300, 517, 64, "bfloat16", True, seed=11),
    Problem(1, 4, 1, 517, 300, 128, "float16", True, seed=12),
    Problem(1, 4, 4, 256, 256, 128, "bfloat16", False, seed=13, head_dim_v=64),
    Problem(1, 2, 1, 129, 200, 64, "float32", True, seed=14),
]


@pytest.mark.gpu
@pytest.mark.parametrize("problem", GPU_PROBLEMS, ids=str)
def test_compiled_flex_on_the_gpu(problem):
    """The compiled path, forward and backward (lse's gradient included) against the oracle:
    a failing output is flex_attention's failure, as for any implementation; what it cannot
    run is Unsupported and skipped here with torch's reason."""
    reference = Reference(problem, "cuda")
    try:
        checks = reference.check(flex, None)
    except Unsupported as why:
        pytest.skip(f"flex_attention cannot run {problem}: {why}")
    assert [str(c) for c in checks if not c.passed] == []
