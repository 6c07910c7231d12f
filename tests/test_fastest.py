"""kernels/fastest.py and fa2check/ablate/fastest_table.py: a call that names no backend,
variant or config runs the table's fastest kernel for its key (the entry of the largest
measured seqlen at or below its seqlen_k), Triton's FA2 where the table has none or the chosen
backend cannot take the call; the table's rule picks a kernel only with a clear lead; the
committed table is exactly what the writer makes of the committed runs; the ablation's API peer
precompiles and records the kernel the API runs.

Shown to fail on broken copies: with choose taking the first row instead of the last at or
below seqlen_k, test_lookup_steps_down_to_the_largest_measured_seqlen fails; with parse's key
type check removed, test_a_malformed_table_says_where fails; with choose_for's
hopper check removed, test_a_choice_the_backend_cannot_take_falls_back fails; with the rule's
percentile condition removed, test_the_rule_wants_a_clear_lead fails (the noisy candidate is
chosen); with cell_choice accepting non-FA2 variants, the same test fails (the faster FA1-style
row); with final_jobs' api_kernel replaced by Triton's FA2, the ablation test fails."""
import inspect
import json
import os

import pytest
import torch

from fa2check.ablate import fastest_table
from fa2check.core.environment import ROOT
from fa2check.ablate.grids import Cell
from kernels import Variant, fastest, flash_attention

FAKE = "Fake GPU 9000"
PINGPONG = Variant(pingpong=True)


def row(seqlen, backend="hopper", variant=PINGPONG, part="fwd", head_dim=128, causal=False,
        dtype="bfloat16"):
    return {"gpu": FAKE, "part": part, "head_dim": head_dim, "causal": causal, "dtype": dtype,
            "seqlen": seqlen, "backend": backend, "variant": str(variant)}


@pytest.fixture
def table(tmp_path, monkeypatch):
    def make(entries):
        path = tmp_path / "fastest.json"
        path.write_text(json.dumps({"schema": fastest.SCHEMA, "entries": entries}))
        monkeypatch.setenv(fastest.PATH_ENV, str(path))
        fastest.load.cache_clear()
        return str(path)
    yield make
    fastest.load.cache_clear()


def test_lookup_steps_down_to_the_largest_measured_seqlen(table):
    path = table([row(1024, "triton", Variant()), row(4096), row(16384, variant=Variant(overlap=True))])
    pick = lambda s: fastest.choose(path, FAKE, "fwd", 128, False, "bfloat16", s)  # noqa: E731
    assert pick(512) == ("triton", Variant())  # below the smallest: the smallest
    assert pick(2048) == ("triton", Variant())
    assert pick(4096) == pick(8000) == ("hopper", PINGPONG)
    assert pick(20000) == ("hopper", Variant(overlap=True))
    assert fastest.choose(path, "Other GPU", "fwd", 128, False, "bfloat16", 4096) == fastest.DEFAULT
    assert fastest.choose(path, FAKE, "fwd+bwd", 128, False, "bfloat16", 4096) == fastest.DEFAULT


def test_a_choice_the_backend_cannot_take_falls_back(table):
    table([row(0), row(0, dtype="float32")])
    assert fastest.choose_for(FAKE, False, 128, 128, False, torch.bfloat16, 8192) == ("hopper", PINGPONG)
    assert fastest.choose_for(FAKE, False, 128, 64, False, torch.bfloat16, 8192) == fastest.DEFAULT
    assert fastest.choose_for(FAKE, False, 128, 128, False, torch.float32, 8192) == fastest.DEFAULT
    assert fastest.choose_for(FAKE, True, 128, 128, False, torch.bfloat16, 8192) == fastest.DEFAULT


def test_a_malformed_table_says_where(table):
    for bad, says in ((row(1024, variant="+defer"), "cannot parse variant"),
                      ({**row(1024), "causal": "false"}, "causal must be a bool")):
        table([row(0), bad])
        with pytest.raises(fastest.FastestTableError, match=r"entries\[1\]: " + says):
            fastest.choose_for(FAKE, False, 128, 128, False, "bfloat16", 4096)


def test_the_api_defaults_resolve_and_the_interpreter_runs_triton(device):
    params = inspect.signature(flash_attention).parameters
    assert params["backend"].default is None and params["variant"].default is None
    if device != "cpu":
        pytest.skip("the interpreter's resolution")
    q = torch.randn(1, 2, 40, 64)
    with pytest.raises(ValueError, match="hopper backend needs a CUDA GPU"):
        flash_attention(q, q, q, variant=PINGPONG)  # a switch variant names its backend
    torch.testing.assert_close(flash_attention(q, q, q),
                               flash_attention(q, q, q, variant=Variant(), backend="triton"),
                               rtol=0, atol=0)


def _cell_entry(samples: dict, mode="fwd") -> dict:
    return {"cell": {"batch": 1, "heads_q": 1, "heads_kv": 1, "seqlen": 4096, "head_dim": 128,
                     "dtype": "bfloat16", "causal": False},
            "modes": {mode: {"status": "timed", "timed": list(samples),
                             "samples": {n: [s] for n, s in samples.items()}}}}


def test_the_rule_wants_a_clear_lead():
    tight = [1.00, 1.00, 1.01, 1.01]
    lead = [0.90, 0.90, 0.91, 0.91]
    noisy = [0.80, 0.85, 0.90, 1.20, 1.30]  # median 0.90, but its q75 is above Triton's q25
    small = [0.98, 0.98, 0.99, 0.99]  # under 3%
    choice = fastest_table.cell_choice(_cell_entry(
        {"api": tight, "hopper+defer+seqpar+splitq+pingpong": lead}), "fwd")
    assert (choice["backend"], choice["variant"]) == ("hopper", str(PINGPONG))
    assert choice["speedup"] == pytest.approx(1.005 / 0.905, rel=1e-3)
    for other in (noisy, small):
        choice = fastest_table.cell_choice(_cell_entry(
            {"api": tight, "hopper+defer+seqpar+splitq+pingpong": other}), "fwd")
        assert choice["backend"] == "triton", other
    choice = fastest_table.cell_choice(_cell_entry(
        {"+defer+seqpar+splitq": tight, "-defer+seqpar+splitq": lead, "sdpa-cudnn": lead}), "fwd")
    assert choice["backend"] == "triton"  # an FA1-style flag or a peer is never the API's kernel
    entry = _cell_entry({"api": lead, "hopper+defer+seqpar+splitq+pingpong": lead})
    entry["api_kernel"] = {"fwd": "hopper" + str(PINGPONG)}  # the API ran a hopper kernel:
    assert fastest_table.cell_choice(entry, "fwd") is None  # no Triton FA2 reference


def test_the_committed_table_is_the_writers_output_from_the_committed_runs():
    path = os.path.join(ROOT, "kernels", "fastest.json")
    with open(path) as f:
        committed = json.load(f)
    runs = [(s["part"], os.path.join(ROOT, "ablations", "results", s["file"]))
            for s in committed["sources"]]
    assert fastest_table.build(runs) == committed
    fastest.parse(committed, path)  # and the reader takes it


def test_extend_starts_from_the_tables_own_sources(tmp_path, capsys):
    """--extend TABLE with no new run writes TABLE again (the GPU step appends its run)."""
    path = os.path.join(ROOT, "kernels", "fastest.json")
    out = tmp_path / "fastest.json"
    assert fastest_table.main(["--extend", path, "--out", str(out)]) == 0
    with open(path) as f:
        assert out.read_text() == f.read()


def test_the_ablation_precompiles_and_records_what_the_api_runs(table):
    from fa2check.ablate import sweep
    from fa2check.ablate.contenders import API, api_kernel

    table([row(2048)])
    cell = Cell(4, 16, 16, 4096, 128, "bfloat16", False)
    assert api_kernel(cell, "fwd", FAKE) == "hopper" + str(PINGPONG)
    assert api_kernel(cell, "fwd+bwd", FAKE) == str(Variant())  # no fwd+bwd entry: Triton's FA2
    assert api_kernel(cell, "fwd", "") == str(Variant())
    configs = sweep.Configs({}, on_gpu=True, gpu=FAKE)
    settings = sweep.Settings(modes=["fwd"], kernels="triton", backends=(API,))
    jobs = {(j["part"], j["variant"]) for j in sweep.final_jobs([cell], ["fwd"], configs, settings)}
    assert ("fwd", "hopper" + str(PINGPONG)) in jobs


@pytest.mark.gpu
@pytest.mark.parametrize("needs_grad", [False, True])
def test_gpu_the_default_call_runs_the_tables_kernel_and_passes(needs_grad, monkeypatch):
    """d=128 full bf16 at 2k: the committed table's forward is the chassis's FA2 + pingpong
    (fwd+bwd: Triton's FA2); the call that names nothing runs it and passes the pass rule."""
    from fa2check.core.checks import Reference
    from fa2check.core.problems import Problem
    from kernels import interface

    monkeypatch.delenv(fastest.PATH_ENV, raising=False)
    chosen = []
    resolve = interface._fastest
    monkeypatch.setattr(interface, "_fastest", lambda *a: chosen.append(resolve(*a)) or chosen[-1])
    problem = Problem(1, 8, 8, 2048, 2048, 128, "bfloat16", False, seed=3)
    ref = Reference(problem, "cuda", backward=needs_grad)
    out = ref.run(lambda q, k, v, causal, softmax_scale, variant, return_lse:
                  flash_attention(q, k, v, causal=causal, return_lse=return_lse), None)
    expected = fastest.choose_for(torch.cuda.get_device_name(), needs_grad, 128, 128, False,
                                  torch.bfloat16, 2048)
    assert chosen and set(chosen) == {expected}
    if torch.cuda.get_device_name() == "NVIDIA H200":
        assert expected == (("triton", Variant()) if needs_grad else ("hopper", PINGPONG))
    failed = [str(c) for c in ref.judge(out) if not c.passed]
    assert not failed, failed


def test_a_later_run_of_a_part_replaces_an_earlier_runs_cells():
    """The committed fwd+bwd part on the H200 comes from the 48-cell run and two
    re-measurements after the backward's overlap (D87): their cells win, in the order given;
    the other order keeps the first run's. (With the first run winning, as a `setdefault`
    would, this failed.)"""
    names = [s["file"] for s in json.load(open(os.path.join(ROOT, "kernels", "fastest.json")))[
        "sources"] if s["part"] == "fwd+bwd" and "-h200-" in s["file"]]
    runs = [("fwd+bwd", os.path.join(ROOT, "ablations", "results", n)) for n in names]
    assert len(runs) == 3
    by_source = lambda table: {e["seqlen"]: e["source"] for e in table["entries"]}  # noqa: E731
    newest = by_source(fastest_table.build(runs))
    assert newest[16384] == names[2] and newest[4096] == newest[8192] == names[1]
    assert newest[2048] == names[0]
    assert set(by_source(fastest_table.build(runs[::-1])).values()) == {names[0]}
