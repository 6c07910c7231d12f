"""A kernel as its author wrote it (fa2check.core.calling, fa2check.core.hints): no `variant`,
no `return_lse` or lse refused, (batch, seqlen, heads, head_dim), NotImplementedError for what
it cannot run; each is verified on everything that does not need what it lacks, and a call
that fails says what to change."""
import json

import pytest

from doubles import bshd, double, o_only, refusing_lse
from fa2check import Unsupported, verify
from fa2check.core.calling import Adapted, CallError, adapt
from fa2check.core.checks import Reference
from fa2check.core.hints import fix_for
from fa2check.core.implementations import Column, columns
from fa2check.core.problems import Problem
from fa2check.fuzz import fuzzer
from fa2check.verify.runner import Task, run_task
from kernels import Variant
from properties import PROPERTIES
from properties.strategies import Example

FA2 = str(Variant())

attention = o_only("none")  # named by --impl test_calling:attention
refuses_lse = refusing_lse("none")
flashlike = bshd("none")
flashlike_with_lse = bshd("none", lse=True)
flashlike_top_left = bshd("top_left_causal")


def not_for_causal(q, k, v, causal=False, softmax_scale=None):
    if causal:
        raise NotImplementedError("causal is not written yet")
    return double("none")(q, k, v, softmax_scale=softmax_scale)


def crashes(q, k, v, causal=False):
    raise RuntimeError("Input tensors must be on cuda.")


def _record(impl, name, case_index=0, layout="bhsd"):
    case = PROPERTIES[name].CASES["quick"][case_index]
    return run_task(Task(Column(impl, FA2, impl.split(":")[1], layout), name, case), "cpu")


# ----------------------------------------------------------------------------- lse optional

@pytest.mark.parametrize("impl,reason", [("test_calling:attention", "no `return_lse` parameter"),
                                         ("test_calling:refuses_lse", "this kernel keeps no lse"),
                                         ("test_calling:flashlike", "returned o alone")])
def test_without_lse_everything_else_is_checked(impl, reason):
    layout = "bshd" if "flashlike" in impl else "bhsd"
    lse = _record(impl, "lse_bounds", layout=layout)
    assert lse["status"] == "unsupported" and reason in lse["message"]
    for name in ("causal_masking", "gqa_reduction", "memory_safety"):
        record = _record(impl, name, layout=layout)
        assert record["status"] == "pass", record["message"]
        assert reason in record["lse_missing"]
        oracle = next(c for c in record["checks"] if c["name"] == "oracle")
        judged = set(oracle["numbers"])
        assert "lse" not in judged and {"o", "dq", "dk", "dv"} <= judged  # gradients of o


def test_without_lse_the_gradients_are_those_of_o_alone():
    """The oracle's gradients without the lse term: a correct function without lse passes the
    backward; judged against the oracle with lse's term (Reference without `without_lse`) it
    fails by the size of that term."""
    problem = Problem(1, 4, 2, 21, 37, 16, "float32", True, seed=3)
    ref = Reference(problem, "cpu")
    out = ref.run(adapt(attention), None)
    assert out.lse is None and all(c.passed for c in ref.judge(out))
    ref.without_lse = lambda: ref  # planted: the lse term left in the oracle's gradients
    failed = [c.output for c in ref.judge(out) if not c.passed]
    assert "dq" in failed and "dk" in failed


@pytest.mark.parametrize("name,bug,check", [
    ("causal_masking", "hidden_v_leaks", "invisible_nan"),
    ("gqa_reduction", "no_group_reduction", "group_sum"),
    ("extreme_logits", "dtype_scores", "finite"),
])
def test_without_lse_the_checks_still_fail_a_broken_kernel(name, bug, check, monkeypatch):
    import test_calling

    monkeypatch.setattr(test_calling, "broken", o_only(bug), raising=False)
    for index in range(len(PROPERTIES[name].CASES["quick"])):
        record = _record("test_calling:broken", name, index)
        if any(c["name"] == check and not c["passed"] for c in record["checks"]):
            assert record["status"] == "fail" and record["lse_missing"]
            return
    raise AssertionError(f"{bug} without lse fails {check} in no quick case of {name}")


def test_lse_of_the_wrong_shape_says_so():
    q, k, v, _ = Problem(1, 2, 1, 9, 13, 16, "float32", False).inputs()

    def swapped(q, k, v, causal=False, return_lse=False):
        o, lse = double("none")(q, k, v, causal=causal, return_lse=True)
        return (o, lse.transpose(1, 2)) if return_lse else o

    with pytest.raises(CallError, match=r"lse is \(1, 9, 2\), expected shape \(1, 2, 9\)"):
        adapt(swapped)(q, k, v, return_lse=True)


# ----------------------------------------------------------------------------- n/a and errors

def test_not_implemented_is_na_in_the_functions_words_and_anything_else_an_error():
    causal = _record("test_calling:not_for_causal", "causal_masking")
    assert causal["status"] == "unsupported" and causal["message"] == "causal is not written yet"
    full = _record("test_calling:not_for_causal", "lse_bounds")  # a full-mask case
    assert full["status"] == "unsupported" and "return_lse" in full["message"]
    crashed = _record("test_calling:crashes", "lse_bounds")
    assert crashed["status"] == "error" and "needs a CUDA tensor" in crashed["fix"]
    assert issubclass(Unsupported, NotImplementedError)


def test_causal_without_a_causal_parameter_is_na():
    def full_only(q, k, v):
        return double("none")(q, k, v)

    q, k, v, _ = Problem(1, 2, 1, 9, 13, 16, "float32", True).inputs()
    with pytest.raises(Unsupported, match="no `causal` parameter"):
        adapt(full_only)(q, k, v, causal=True)
    assert adapt(full_only)(q, k, v).shape == q.shape


# ----------------------------------------------------------------------------- layouts

def test_bshd_takes_and_returns_batch_seqlen_heads():
    assert _record("test_calling:flashlike_with_lse", "lse_bounds", layout="bshd")["status"] \
        == "pass"
    record = _record("test_calling:flashlike", "causal_masking", 2, layout="bshd")
    assert record["status"] == "pass", record["message"]
    wrong = _record("test_calling:flashlike", "gqa_reduction", layout="bhsd")  # not told
    assert wrong["status"] == "error"
    assert "--layout bshd" in wrong["message"] + wrong.get("fix", "")
    top_left = _record("test_calling:flashlike_top_left", "causal_masking", 0, layout="bshd")
    assert top_left["status"] == "fail"  # the checks still fail a broken kernel in its layout


def test_bshd_keeps_a_views_strides_and_copies_contiguous_inputs():
    seen = []

    def records(q, k, v, causal=False):
        seen.append(q.is_contiguous())
        return q[..., :v.shape[-1]] * 0 + v.mean()

    q, k, v, _ = Problem(1, 2, 2, 9, 9, 16, "float32", False).inputs()
    adapt(records, "bshd")(q, k, v)
    adapt(records, "bshd")(q.transpose(2, 3).contiguous().transpose(2, 3), k, v)  # a view
    assert seen == [True, False]


def test_o_in_the_other_layout_names_the_option():
    q, k, v, _ = Problem(1, 2, 1, 9, 13, 16, "float32", False).inputs()
    with pytest.raises(CallError, match="run with --layout bshd"):
        adapt(lambda q, k, v, causal=False: q.transpose(1, 2))(q, k, v)
    with pytest.raises(CallError, match="run with --layout bhsd"):
        adapt(lambda q, k, v, causal=False: q.transpose(1, 2), "bshd")(q, k, v)


def test_columns_take_the_layout_for_the_users_implementations_only():
    cols = columns(["sdpa", "test_calling:flashlike"], None, "bshd")
    assert {c.label: c.layout for c in cols}["flashlike"] == "bshd"
    assert all(c.layout == "bhsd" for c in cols if c.label != "flashlike")
    (column,) = [c for c in cols if c.label == "flashlike"]
    assert "--layout=bshd" in column.cli_args() and isinstance(column.implementation(), Adapted)


# ----------------------------------------------------------------------------- the commands

def test_verify_a_function_without_lse_from_the_command_line(tmp_path, capsys):
    report = tmp_path / "r.json"
    status = verify.main(["--impl", "test_calling:flashlike", "--layout", "bshd", "--property",
                          "lse_bounds", "--property", "causal_masking", "--jobs", "1",
                          "--json", str(report)])
    out = capsys.readouterr().out
    assert status == 0
    results = json.loads(report.read_text())["results"]
    assert {r["status"] for r in results if r["property"] == "lse_bounds"} == {"unsupported"}
    assert {r["status"] for r in results if r["property"] == "causal_masking"} == {"pass"}
    assert "no lse [flashlike] it returned o alone" in out and "(lse n/a)" in out
    assert all(r["layout"] == "bshd" for r in results)


def test_verify_an_implementation_that_does_not_import_says_what_to_change():
    with pytest.raises(SystemExit, match=r"No module named 'my_kernel_module'.*\n  fix: make "
                                         r"my_kernel_module importable: .*PYTHONPATH"):
        verify.main(["--impl", "my_kernel_module:attention"])


def test_a_failing_call_says_what_to_change(tmp_path, capsys):
    verify.main(["--impl", "test_calling:crashes", "--property", "lse_bounds", "--jobs", "1"])
    out = capsys.readouterr().out
    assert "\n  fix: it needs a CUDA tensor" in out


@pytest.mark.parametrize("error,words", [
    (ModuleNotFoundError("No module named 'mymod'", name="mymod"), "make mymod importable"),
    (AttributeError("module 'mymod' has no attribute 'attention'"), "mymod has no attention"),
    (TypeError("attention() got an unexpected keyword argument 'causal'"),
     "give the function a `causal` keyword parameter"),
    (TypeError("attention() missing 1 required positional argument: 'cu_seqlens'"),
     "every other parameter needs a default"),
    (RuntimeError("expected all tensors on cuda"), "needs a CUDA tensor"),
    (RuntimeError("illegal memory access"), "raise NotImplementedError"),
])
def test_each_kind_of_error_has_its_fix(error, words):
    assert words in fix_for(error, "mymod:attention")


def test_fuzz_checks_a_function_without_lse_in_its_layout():
    example = Example.parse(f"{FA2}:b1-h4/2-q21-k37-d16-float16-causal-s1:normal:contiguous")
    report = fuzzer.check_example(flashlike, example, "cpu", layout="bshd")
    assert report.passed, report.message
    assert "returned o alone" in report.lse_missing
    assert not any(c.name in ("bounds", "softmax_rows") for c in report.checks)
    leaky = fuzzer.check_example(bshd("hidden_v_leaks"), example, "cpu", layout="bshd")
    assert "invisible_nan" in leaky.failed
    with pytest.raises(Unsupported, match="causal is not written yet"):
        fuzzer.check_example(not_for_causal, example, "cpu")


def test_fuzz_command_takes_the_layout(tmp_path, capsys):
    from fa2check import fuzz

    status = fuzz.main(["--impl", "test_calling:flashlike", "--layout", "bshd", "--profile", "ci",
                        "--max-examples", "3", "--no-corpus-first", "--json",
                        str(tmp_path / "f.json")])
    out = capsys.readouterr().out
    assert status == 0 and "no lse: test_calling:flashlike it returned o alone" in out
    data = json.loads((tmp_path / "f.json").read_text())
    assert data["layout"] == "bshd" and data["jobs"] == 1 and data["lse_missing"]


def test_make_fuzz_uses_the_cores_and_fits_the_terminal(monkeypatch):
    """Issue 57: on 2 cores `make fuzz` (the dev profile) runs 2 jobs; the ci profile one; in
    a log or a pipe the tables wrap to COLUMNS, else to 120 columns (they were 200 wide)."""
    from fa2check.fuzz import cli

    monkeypatch.setattr("os.cpu_count", lambda: 2)
    assert cli.default_jobs("dev") == 2 and cli.default_jobs("nightly") == 2
    assert cli.default_jobs("ci") == 1
    monkeypatch.delenv("COLUMNS", raising=False)
    assert cli.console_width() == 120
    monkeypatch.setenv("COLUMNS", "100")
    assert cli.console_width() == 100
