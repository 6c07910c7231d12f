"""python -m fa2check.verify: columns, cases, the exit status, the JSON report, reproduce
commands, worker processes, and torch SDPA's adapters (on the CPU: flash and math run, cuDNN
and efficient are reported unsupported)."""
import gzip
import json
import shlex

import pytest

from conftest import DEVICE
from fa2check import verdicts, verify
from fa2check.adapters import sdpa_efficient, sdpa_flash, sdpa_math
from fa2check.implementations import Column, Unsupported, columns, default_specs
from fa2check.problems import Problem
from fa2check.runner import Task, plan, run_task
from kernels import Variant
from properties import PROPERTIES
from properties.base import Case

LSE_CASE = PROPERTIES["lse_bounds"].CASES["quick"][0]


def test_columns():
    assert [c.label for c in columns(None, None)] == [str(v) for v in Variant.all()]
    assert default_specs("cpu") == ["ours"]  # the interpreter cannot run Gluon
    on_gpu = [c.label for c in columns(default_specs("cuda"), None)]
    assert on_gpu == [str(v) for v in Variant.all()] + [f"gluon {v}" for v in Variant.all()]
    with_sdpa = [c.label for c in columns(["sdpa"], None)]
    assert with_sdpa[8:] == ["sdpa_flash", "sdpa_cudnn", "sdpa_efficient", "sdpa_math"]
    assert [c.label for c in columns(["sdpa_math"], None)] == ["sdpa_math"]
    assert [c.label for c in columns(["ours"], ["fa1"])] == ["-defer-seqpar-splitq"]
    with pytest.raises(ValueError, match="MODULE:FUNC"):
        columns(["no_such_thing"], None)


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
    worst = max(r["ratio"] for r in failed)
    assert row == [f"| lse_bounds | FAIL {worst:.2f} {len(failed)}/{len(failed)} |"]
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
    assert status == "fail" and "inf" in text and "1/2" in text and "n/a" in text


# ----------------------------------------------------------------------------- SDPA adapters

def test_sdpa_adapters_on_cpu():
    q, k, v, _ = Problem(1, 4, 2, 9, 13, 16, "float32", True).inputs()
    with pytest.raises(Unsupported, match="top-left"):
        sdpa_flash(q, k, v, causal=True)  # seqlen_q != seqlen_k needs a mask
    with pytest.raises(Unsupported):
        sdpa_efficient(q, k, v, causal=False)  # no efficient kernel on the CPU
    o, lse = sdpa_math(q, k, v, causal=True, return_lse=True)
    assert o.shape == q.shape and lse.shape == q.shape[:3] and lse.dtype.is_floating_point


@pytest.mark.parametrize("name", ["lse_bounds", "causal_masking", "gqa_reduction", "memory_safety"])
def test_sdpa_math_is_judged_like_any_implementation(name):
    case = PROPERTIES[name].CASES["quick"][0]
    result = PROPERTIES[name].run(sdpa_math, None, case, "cpu")
    assert result.status in ("pass", "fail") and result.checks


def test_sdpa_math_passes_bottom_right_causal_with_unequal_lengths():
    case = Case("q<k", Problem(1, 2, 1, 21, 37, 16, "float32", True, seed=1))
    result = PROPERTIES["causal_masking"].run(sdpa_math, None, case, "cpu")
    assert result.check("oracle").passed, result.message
