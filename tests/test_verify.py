"""python -m fa2check.verify: columns, cases, the exit status, the JSON report, reproduce
commands, worker processes, and torch SDPA's adapters (on the CPU: flash and math run, cuDNN
and efficient are reported unsupported)."""
import gzip
import json
import shlex

import pytest
import torch

from conftest import DEVICE
from doubles import without_variant
from fa2check import verify
from fa2check.core.checks import Reference
from fa2check.adapters import sdpa_efficient, sdpa_flash, sdpa_math
from fa2check.core.explain import format_ratio
from fa2check.core.implementations import (GLUON, HOPPER, Column, Unsupported, columns,
                                          default_specs, lattice)
from fa2check.core.problems import Problem
from fa2check.verify import verdicts
from fa2check.verify.runner import Task, plan, run_task
from kernels import Variant
from properties import PROPERTIES
from properties.base import Case

LSE_CASE = PROPERTIES["lse_bounds"].CASES["quick"][0]


def test_columns():
    assert [c.label for c in columns(None, None)] == [str(v) for v in Variant.all()]
    assert default_specs("cpu") == ["ours"]  # the interpreter cannot run Gluon
    on_gpu = [c.label for c in columns(default_specs("cuda", (8, 0)), None)]  # not sm_90
    assert on_gpu == [str(v) for v in Variant.all()] + [f"gluon {v}" for v in Variant.all()]
    with_sdpa = [c.label for c in columns(["sdpa"], None)]
    assert with_sdpa[8:] == ["sdpa_flash", "sdpa_cudnn", "sdpa_efficient", "sdpa_math"]
    assert [c.label for c in columns(["sdpa_math"], None)] == ["sdpa_math"]
    assert [c.label for c in columns(["ours"], ["fa1"])] == ["-defer-seqpar-splitq"]
    with pytest.raises(ValueError, match="MODULE:FUNC"):
        columns(["no_such_thing"], None)


def test_default_columns_on_sm90_are_ours_and_the_hopper_chassis(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (9, 0))
    assert default_specs("cuda") == ["ours", "hopper"]
    labels = [c.label for c in columns(default_specs("cuda"), None)]
    assert labels[:8] == [str(v) for v in Variant.all()]
    assert labels[8:] == [f"hopper {v}" for v in lattice(HOPPER)]
    for capability in ((8, 0), (10, 0), (12, 0)):
        monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None,
                            c=capability: c)
        assert default_specs("cuda") == ["ours", "gluon"], capability
    assert default_specs("cpu") == ["ours"]
    assert [c.impl for c in columns(["gluon"], None)] == [GLUON] * 8


def test_plan_selects_cases_and_refuses_unknown_ones():
    ours = columns(None, ["fa2"])
    tasks = plan("quick", ours, ["lse_bounds"], [LSE_CASE.id])
    assert [(t.property, t.case) for t in tasks] == [("lse_bounds", LSE_CASE)]
    shifted = plan("quick", ours, ["lse_bounds"], seed=5)
    assert shifted[0].case.problem.seed == LSE_CASE.problem.seed + 5
    with pytest.raises(ValueError, match="no case"):
        plan("quick", ours, ["lse_bounds"], ["nonexistent"])
    with pytest.raises(ValueError, match="unknown property"):
        plan("quick", ours, ["nonexistent"])


def test_failures_exit_nonzero_and_reproduce(tmp_path, capsys):
    report = tmp_path / "report.json"
    status = verify.main(["--impl", "doubles:lse_log2", "--property", "lse_bounds", "--jobs", "1",
                          "--tier", "quick", "--json", str(report), "--commit", "abc1234"])
    assert status == 1
    data = json.loads(report.read_text())
    assert data["environment"]["device"] == DEVICE and data["tier"] == "quick"
    assert data["environment"]["git_commit"] == "abc1234"  # the device's .git may be stale
    failed = [r for r in data["results"] if r["status"] == "fail"]
    assert len(failed) == len(PROPERTIES["lse_bounds"].CASES["quick"])
    assert all(c["numbers"] for c in failed[0]["checks"])
    command = failed[0]["reproduce"]
    assert "--impl=doubles:lse_log2" in command and command in capsys.readouterr().out
    again = tmp_path / "again.json"
    assert verify.main(shlex.split(command)[3:] + ["--json", str(again)]) == 1
    capsys.readouterr()
    assert verify.main(["--from", str(report)]) == 0  # the saved verdict as markdown
    row = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| lse_b")]
    worst = format_ratio(max(r["ratio"] for r in failed))
    assert row == [f"| lse_bounds | FAIL {len(failed)}/{len(failed)}, error {worst}x allowed |"]
    with gzip.open(str(report) + ".gz", "wt") as f:  # committed older verdicts are compressed
        f.write(report.read_text())
    report.unlink()
    assert verify.main(["--from", str(report)]) == 0
    assert row == [line for line in capsys.readouterr().out.splitlines()
                   if line.startswith("| lse_b")]
    rerun = json.loads(again.read_text())["results"]
    assert [r["case"]["id"] for r in rerun] == [failed[0]["case"]["id"]]


def test_passing_run_exits_zero_in_worker_processes(tmp_path):
    report = tmp_path / "report.json"
    status = verify.main(["--impl", "ours", "--property", "lse_bounds", "--variant", "fa2",
                          "--variant", "fa1", "--tier", "quick", "--jobs", "2", "--json",
                          str(report)])
    assert status == 0
    results = json.loads(report.read_text())["results"]
    assert len(results) == 2 * len(PROPERTIES["lse_bounds"].CASES["quick"])
    assert {r["column"] for r in results} == {str(Variant()), str(Variant(False, False, False))}


def test_an_implementation_that_raises_is_an_error_not_an_abort():
    record = run_task(Task(Column("fa2check.adapters:sdpa_math", "+defer+seqpar+splitq", "m"),
                           "lse_bounds", LSE_CASE), "cpu")
    assert record["status"] == "pass"
    broken = Task(Column("tests_that_do_not_exist:f", "+defer+seqpar+splitq", "b"), "lse_bounds",
                  LSE_CASE)
    record = run_task(broken, "cpu")
    assert record["status"] == "error" and "ModuleNotFoundError" in record["message"]


def test_verdict_cells():
    def rec(status, ratio):
        return {"status": status, "ratio": ratio}
    assert verdicts.cell([rec("pass", 0.5), rec("pass", None)]) == ("pass", "[green]PASS 0.50[/]")
    assert verdicts.cell([rec("unsupported", None)])[0] == "unsupported"
    mixed = [rec("pass", 0.2), rec("fail", float("inf")), rec("unsupported", None)]
    status, text = verdicts.cell(mixed)
    assert status == "fail" and "NaN/inf" in text and "1/2" in text and "n/a" in text
    # a large ratio reads as a number of times the allowed error, not 1560397.74
    status, text = verdicts.cell([rec("fail", 1560397.74), rec("fail", 2.0), rec("pass", 0.1)])
    assert "1560397" not in text and "2/3, error 1.6e+06x allowed" in text
    # a failing exact check does not borrow the ratio of a passing check
    assert "0.30" not in verdicts.cell([rec("fail", 0.3)])[1]
    status, text = verdicts.cell([rec("error", None), rec("error", None)])
    assert status == "error" and "ERROR" in text and "2/2" in text and "FAIL" not in text


# ----------------------------------------------------------------------------- SDPA adapters

def test_sdpa_adapters_on_cpu():
    q, k, v, _ = Problem(1, 4, 2, 9, 13, 16, "float32", True).inputs()
    with pytest.raises(Unsupported, match="top-left"):
        sdpa_flash(q, k, v, causal=True)  # seqlen_q != seqlen_k needs a mask
    with pytest.raises(Unsupported):
        sdpa_efficient(q, k, v, causal=False)  # no efficient kernel on the CPU
    o, lse = sdpa_math(q, k, v, causal=True, return_lse=True)
    assert o.shape == q.shape and lse.shape == q.shape[:3] and lse.dtype.is_floating_point


@pytest.mark.parametrize("causal", [False, True])
def test_sdpa_math_passes_with_v_of_its_own_head_dim(causal):
    """torch's math backend takes Ev != E: o, lse, dq, dk, dv at head dims 40/24 (GQA, unequal
    lengths) against the oracle within the pass rule. Fails with the adapter's default scale
    taken from v's head dim (v.shape[-1] for q.shape[-1] in adapters._adapter)."""
    problem = Problem(1, 4, 2, 9, 13, 40, "float32", causal, seed=3, head_dim_v=24)
    failed = [str(c) for c in Reference(problem, "cpu").check(sdpa_math, None) if not c.passed]
    assert failed == []


def test_a_backend_refusing_v_of_its_own_head_dim_is_unsupported():
    """The CPU's flash backend refuses Ev != E (full mask, equal lengths: nothing else to
    refuse): Unsupported with torch's reason, not its RuntimeError. Fails with NO_KERNEL
    emptied in adapters.py (the RuntimeError escapes)."""
    q, k, v, _ = Problem(1, 2, 2, 9, 9, 40, "float32", False, head_dim_v=24).inputs()
    with pytest.raises(Unsupported, match="same last dimension"):
        sdpa_flash(q, k, v, causal=False)


@pytest.mark.parametrize("name", ["lse_bounds", "causal_masking", "gqa_reduction", "memory_safety"])
def test_sdpa_math_is_judged_like_any_implementation(name):
    case = PROPERTIES[name].CASES["quick"][0]
    result = PROPERTIES[name].run(sdpa_math, None, case, "cpu")
    assert result.status in ("pass", "fail") and result.checks


def test_sdpa_math_passes_bottom_right_causal_with_unequal_lengths():
    case = Case("q<k", Problem(1, 2, 1, 21, 37, 16, "float32", True, seed=1))
    result = PROPERTIES["causal_masking"].run(sdpa_math, None, case, "cpu")
    assert result.check("oracle").passed, result.message


# ----------------------------------------------------------------------------- a user's function

attention = without_variant("none")  # a user's implementation, as --impl names it
attention_in_log2 = without_variant("lse_log2")


def attention_that_raises(q, k, v, causal=False, softmax_scale=None, return_lse=False):
    raise RuntimeError("no kernel for this head_dim")


def test_a_function_without_variant_is_verified(tmp_path, capsys):
    report = tmp_path / "report.json"
    status = verify.main(["--impl", "test_verify:attention", "--impl",
                          "test_verify:attention_in_log2", "--property", "lse_bounds",
                          "--jobs", "1", "--json", str(report)])
    out = capsys.readouterr().out
    assert status == 1  # the log2 one fails; the other passes, with nothing raised
    results = json.loads(report.read_text())["results"]
    mine = [r for r in results if r["impl"] == "test_verify:attention"]
    assert mine and all(r["status"] == "pass" and r["variant"] is None for r in mine)
    failed = [r for r in results if r["status"] == "fail"]
    assert failed and "variant" not in out.replace("`variant`", "")
    for r in failed:  # its commands select the implementation and the case, no variant
        assert "--variant" not in r["reproduce"] and r["reproduce"] in out
        args = verify.parse_args(shlex.split(r["reproduce"])[3:])
        assert args.impl == ["test_verify:attention_in_log2"] and args.variant is None


def test_an_implementation_that_raises_is_an_error_shown_once(tmp_path, capsys):
    report = tmp_path / "report.json"
    status = verify.main(["--impl", "test_verify:attention_that_raises", "--property",
                          "lse_bounds", "--jobs", "1", "--json", str(report)])
    out = capsys.readouterr().out
    assert status == 1
    results = json.loads(report.read_text())["results"]
    n = len(PROPERTIES["lse_bounds"].CASES["quick"])
    assert [r["status"] for r in results] == ["error"] * n
    (row,) = [line for line in out.splitlines() if line.startswith("│ lse_bounds")]
    assert f"ERROR {n}/{n}" in row and "FAIL" not in row
    assert out.count("RuntimeError: no kernel for this head_dim") == 1
    assert f"raised in {n} cases" in out and out.count("python -m fa2check.verify") == 1


def test_the_legend_says_what_columns_and_properties_mean(tmp_path, capsys):
    assert verify.main(["--property", "lse_bounds", "--variant", "fa2", "--jobs", "1",
                        "--case", LSE_CASE.id]) == 0
    out = capsys.readouterr().out
    legend = out[out.index("columns:"):]
    columns_line, rows_line = legend.splitlines()[:2]
    for words in ("defer_norm", "seq_parallel", "split_q", "+defer+seqpar+splitq is FA2",
                  "-defer-seqpar-splitq the FA1-style baseline"):
        assert words in columns_line
    assert rows_line.startswith("rows: lse_bounds: lse is the natural-log logsumexp")
    # every property has its words, and every kind of column its line
    lines = verdicts.legend(columns(["sdpa", "gluon", "test_verify:attention"], None),
                            list(PROPERTIES))
    assert len(lines) == 2
    for name in PROPERTIES:
        assert f"{name}: {verdicts.PROPERTY_WORDS[name]}" in lines[1]
    for words in ("gluon:", "sdpa_*:", "attention = test_verify:attention"):
        assert words in lines[0]


# ----------------------------------------------------------------------------- failures in words

FAILURES = [  # (property, double, a check it fails): together every kind of check fails once
    ("lse_bounds", "lse_log2", "natural_log"),  # and bounds, softmax_rows, lse_oracle, lse_mpmath
    ("lse_bounds", "finite_sentinel", "bounds"),  # rows without keys
    ("causal_masking", "finite_sentinel", "rows_without_keys"),  # oracle (non-finite), invisible_*
    ("causal_masking", "hidden_v_leaks", "invisible_nan"),  # differences only in NaN
    ("causal_masking", "nan_not_restored", "visible_non_finite"),
    ("extreme_logits", "dtype_scores", "finite"),  # and o, lse by extreme_logits' bound
    ("gqa_reduction", "no_group_reduction", "group_sum"),
    ("gqa_reduction", "unwritten_head", "every_head_written"),
    ("variant_equivalence", "seqpar_changes_bits", "seq_parallel_bitwise"),
    ("variant_equivalence", "splitk_drops_key", "split_q_agree"),
    ("determinism", "nondeterministic", "bitwise_run2"),
    ("determinism", "dq_noise", "dq_spread"),
    ("memory_safety", "ignores_strides", "same_as_contiguous"),
]
RAW = ("those_rows_have_-inf", "o_zero", "lse_minus_inf", "max_abs_diff", "nonfinite_match",
       ": FAIL")


def _first_failing(name, bug, check):
    """The record of the first quick case of `name` in which double `bug` fails `check`."""
    for case in PROPERTIES[name].CASES["quick"]:
        record = run_task(Task(Column(f"doubles:{bug}", str(Variant()), bug), name, case), "cpu")
        if any(c["name"] == check and not c["passed"] for c in record["checks"]):
            return record
    raise AssertionError(f"{bug} fails {check} in no quick case of {name}")


def test_each_failure_says_what_was_expected_and_what_came_out():
    seen = {}
    for name, bug, check_name in FAILURES:
        record = _first_failing(name, bug, check_name)
        assert record["status"] == "fail"
        failed = [c for c in record["checks"] if not c["passed"]]
        assert record["message"] == "; ".join(c["explanation"] for c in failed)
        for check in failed:
            text = check["explanation"]
            assert text.startswith(check["name"] + ": ") and "expected " in text, text
            assert ", got " in text or "; got " in text, text
            assert "expected it to hold" not in text, text  # no check without its own words
            assert not any(raw in text for raw in RAW), text
            seen[check["name"]] = text
    assert {"bounds", "softmax_rows", "lse_oracle", "lse_mpmath", "natural_log", "oracle",
            "rows_without_keys", "invisible_nan", "finite", "group_sum", "every_head_written",
            "seq_parallel_bitwise", "split_q_agree", "bitwise_run2", "dq_spread",
            "same_as_contiguous"} <= set(seen)
    assert seen["rows_without_keys"].endswith("got o is not 0 and lse is not -inf")
    assert seen["bounds"].endswith("got lse is not -inf on rows that see no key")
    assert "every one NaN or inf on one side (no finite difference)" in seen["invisible_nan"]
