"""make gpu-check (python -m fa2check.gpucheck) on the CPU with stand-in steps: verify first,
then the tests and the fuzz campaign side by side within the budget; a step that fails or runs
past its limit makes the verdict FAIL; the record keeps every step."""
import json
import sys

import pytest

from fa2check.gpucheck import cli


def _stand_ins(verify, tests, fuzz):
    def plan(args, out):
        steps = [cli.Step(name, [sys.executable, "-c", code], f"{out}/{name}.log", limit)
                 for name, code, limit in (("verify", verify, 30), ("tests", tests, 8),
                                           ("fuzz", fuzz, 0))]
        return steps[:2], steps[2]
    return plan


def _main(monkeypatch, tmp_path, plan, minutes=0.6, min_examples=0):
    monkeypatch.setattr(cli, "plan", plan)
    monkeypatch.setattr(cli, "select_device", lambda: "cuda")
    monkeypatch.setattr(cli, "describe_environment", lambda device, commit=None: {})
    monkeypatch.setattr(cli, "triton_cache_entries", lambda: cli.WARM_ENTRIES)
    status = cli.main(["--minutes", str(minutes), "--out", str(tmp_path),
                       "--min-examples", str(min_examples)])
    return status, json.loads((tmp_path / "gpu-check.json").read_text())


def test_every_step_passing_is_a_pass(monkeypatch, tmp_path):
    status, record = _main(monkeypatch, tmp_path, _stand_ins("print(1)", "print(2)", "print(3)"))
    assert status == 0 and record["verdict"] == "PASS"
    assert [s["name"] for s in record["steps"]] == ["verify", "tests", "fuzz"]
    (tmp_path / "verify.json").write_text('{"counts": {"pass": 3}, "seconds":')  # cut short
    assert cli.details(cli.Step("verify", [], str(tmp_path / "verify.log"), 1),
                       str(tmp_path)) == {"last_lines": ["1"]}
    assert all(s["returncode"] == 0 for s in record["steps"])


@pytest.mark.parametrize("failing", ["verify", "tests", "fuzz"])
def test_one_failing_step_fails_the_check(monkeypatch, tmp_path, failing):
    codes = {name: "raise SystemExit(1)" if name == failing else "print(0)"
             for name in ("verify", "tests", "fuzz")}
    status, record = _main(monkeypatch, tmp_path, _stand_ins(**codes))
    assert status == 1 and record["verdict"] == "FAIL"
    assert {s["name"]: s["returncode"] for s in record["steps"]}[failing] == 1


def test_a_step_past_its_limit_is_stopped_and_fails(monkeypatch, tmp_path):
    """verify and the tests run side by side within their limit, the fuzz campaign in what they
    leave of the budget; one that runs on is interrupted (SIGINT, then SIGKILL) and the check
    fails."""
    status, record = _main(monkeypatch, tmp_path, _stand_ins(
        "print(1)", "import time; time.sleep(120)", "print(3)"), minutes=0.4)
    steps = {s["name"]: s for s in record["steps"]}
    assert status == 1 and steps["tests"]["returncode"] != 0
    assert steps["tests"]["seconds"] < 8 + 25  # its limit, and the grace


def _fuzz_writing(tmp_path, *per_backend, found=None):
    """A stand-in fuzz step that writes a record of its campaigns' examples and exits 0, or
    (found: backend1's counterexample) 1."""
    record = {"examples": sum(per_backend), "counterexamples": int(found is not None),
              "campaigns": [{"impl": f"backend{i}", "examples": n,
                             "counterexample": {"example": found} if found and i == 1
                             else None}
                            for i, n in enumerate(per_backend)]}
    return (f"import json; json.dump({record!r}, "
            f"open({str(tmp_path / 'fuzz.json')!r}, 'w')); raise SystemExit({int(bool(found))})")


@pytest.mark.parametrize("per_backend, verdict", [
    ((1200, 1100, 900), "PASS"),
    ((170, 170, 174), "FAIL"),  # 14328ab's campaign: every step exited 0
    ((2900, 200, 100), "FAIL"),  # enough in all, one backend barely fuzzed
])
def test_a_campaign_with_too_few_examples_fails(monkeypatch, tmp_path, per_backend, verdict):
    status, record = _main(monkeypatch, tmp_path, _stand_ins(
        "print(1)", "print(2)", _fuzz_writing(tmp_path, *per_backend)), min_examples=3000)
    assert record["verdict"] == verdict and status == (verdict == "FAIL")
    assert all(s["returncode"] == 0 for s in record["steps"])
    assert (record["shortfall"] is None) == (verdict == "PASS")


def test_the_verdict_names_a_counterexample_first_not_the_few_examples_it_left(monkeypatch,
                                                                               tmp_path):
    """D114's cold gate: a campaign stopped by its counterexample after 128 examples; the verdict
    said only "too few examples". The counterexample leads, and its campaign is not short."""
    example = "-defer+seqpar+splitq:b3-h6/2-q17-k29-d130-float16-causal-s0:normal:contiguous"
    status, record = _main(monkeypatch, tmp_path, _stand_ins(
        "raise SystemExit(1)", "print(2)", _fuzz_writing(tmp_path, 4673, 128, 4764,
                                                         found=example)), min_examples=3000)
    assert status == 1 and record["verdict"] == "FAIL" and record["shortfall"] is None
    first, then, *rest = record["reasons"]
    assert first == f"counterexample in backend1: {example}"
    assert then.startswith("verify exited 1") and rest == []
    _, passing = _main(monkeypatch, tmp_path, _stand_ins(
        "print(1)", "print(2)", _fuzz_writing(tmp_path, 1200, 1100, 900)), min_examples=3000)
    assert passing["verdict"] == "PASS" and passing["reasons"] == []


def test_a_budget_too_short_for_a_cold_cache_is_refused_before_any_step(monkeypatch, tmp_path):
    def no_plan(args, out):
        raise AssertionError("a step was planned")
    monkeypatch.setattr(cli, "plan", no_plan)
    monkeypatch.setattr(cli, "select_device", lambda: "cuda")
    monkeypatch.setattr(cli, "triton_cache_entries", lambda: 0)
    with pytest.raises(SystemExit, match="cold"):
        cli.main(["--minutes", "4.7", "--out", str(tmp_path)])
    assert cli.too_short_when_cold(cli.COLD_MINUTES, 0) is None
    assert cli.too_short_when_cold(4.7, cli.WARM_ENTRIES) is None
    with pytest.raises(AssertionError, match="planned"):  # --cold-ok goes on to the steps
        cli.main(["--minutes", "4.7", "--out", str(tmp_path), "--cold-ok"])
