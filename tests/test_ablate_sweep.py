"""fa2check.ablate's sweep: the correctness gate (against test doubles), which kernels are timed
where, the plan and its budget, sharded runs, and one tiny end-to-end run through the
interpreter (its timings mean nothing; the code path runs)."""
import json

import pytest
import torch

from fa2check.ablate.grids import Cell
from kernels import Variant


class _Double:
    """A contender whose forward is flash_attention with a planted bug."""

    def __init__(self, bug):
        self.name, self.bug, self.ours = f"double-{bug}", bug, True

    def context(self):
        import contextlib

        return contextlib.nullcontext()

    def forward(self, q, k, v, causal, return_lse=False):
        from kernels import flash_attention

        o, lse = flash_attention(q, k, v, causal=causal, return_lse=True)
        if self.bug == "batch-offset":  # the last batch entry gets batch 0's output
            o = torch.cat([o[:-1], o[:1]])
        return (o, lse) if return_lse else o


def test_gate_passes_the_kernel_and_rejects_test_doubles(device):
    from fa2check.ablate.cellcheck import CellOracle, gate, gate_slices
    from fa2check.ablate.contenders import backend, make_inputs, ours

    cell = Cell(2, 4, 2, 40, 16, "bfloat16", True)
    assert gate_slices(cell) == [(0, 0), (1, 1)]
    inputs = make_inputs(cell, device)
    oracle = CellOracle(cell, inputs, backward=True)
    good = gate(ours(Variant(False, False, False), None), cell, inputs, oracle)
    assert good["passed"], good
    assert {c["output"] for c in good["checks"]} == {"o", "lse", "dq", "dk", "dv"}
    assert gate(backend("sdpa-math"), cell, inputs, oracle)["passed"]
    assert gate(backend("api"), cell, inputs, oracle)["passed"]
    bad = gate(_Double("batch-offset"), cell, inputs, oracle)
    assert not bad["passed"]
    assert {(c["batch"], c["output"]) for c in bad["checks"] if not c["passed"]} >= {(1, "o")}


def test_the_api_peer_is_a_plain_flash_attention_call(monkeypatch, device):
    """The api peer passes nothing but causal (and return_lse): the API's own defaults."""
    import kernels
    from fa2check.ablate.contenders import backend, make_inputs

    calls = []
    monkeypatch.setattr(kernels, "flash_attention", lambda *a, **kw: calls.append(kw))
    q, k, v, _ = make_inputs(Cell(1, 2, 2, 16, 16, "bfloat16", True), device)
    backend("api").forward(q, k, v, True)
    assert calls == [{"causal": True, "return_lse": False}]
    with pytest.raises(ValueError, match="unknown peer"):
        backend("sdpa-fast")


def test_gluon_kernels_are_timed_only_where_they_can_run():
    from fa2check.ablate.sweep import Settings, gluon_skipped, kernels_for

    on, off = Settings(gluon=True), Settings()
    cell = Cell(4, 32, 32, 4096, 64, "bfloat16", True)
    assert len(kernels_for("fwd", cell, on)) == 16 and len(kernels_for("fwd", cell, off)) == 8
    assert len(kernels_for("bwd", cell, on)) == 8  # the Gluon kernel is a forward
    for other in (Cell(1, 16, 16, 8192, 128, "bfloat16", True), Cell(4, 32, 32, 4096, 64,
                                                                    "float32", False)):
        assert len(kernels_for("fwd", other, on)) == 8
        assert gluon_skipped(other, on).startswith("skipped")


def test_tiny_end_to_end_run_in_the_interpreter(tmp_path, device):
    if device != "cpu":
        pytest.skip("the GPU runs the real grid")
    from fa2check import ablate

    status = ablate.main(["--seqlen", "16", "--head-dim", "16", "--heads", "2", "--heads-kv", "1",
                          "--batch", "2", "--causal", "true", "--mode", "fwd,bwd",
                          "--repeats", "1", "--retune", "--bootstrap", "100",
                          "--table-out", str(tmp_path / "tiles.table"),
                          "--backends", "sdpa-math,sdpa-efficient", "--gluon", "--out",
                          str(tmp_path)])
    assert status == 0
    (path,) = tmp_path.glob("*.json")
    results = json.loads(path.read_text())
    assert results["provenance"]["device"] == "cpu"
    assert results["repeats_done"] == 1 and not results["stopped_by_budget"]
    (entry,) = results["cells"]
    assert all(entry["gate"][str(v)]["passed"] for v in Variant.all())
    fwd, bwd = entry["modes"]["fwd"], entry["modes"]["bwd"]
    assert set(fwd["timed"]) == {str(v) for v in Variant.all()} | {"sdpa-math"}
    assert set(bwd["timed"]) == {str(v) for v in Variant.all()} | {"sdpa-math"}
    assert fwd["excluded"]["sdpa-efficient"].startswith("unavailable")
    # the Gluon kernels are gated like any contender; the interpreter cannot run them
    gluon = [f"gluon{v}" for v in Variant.all()]
    assert all("needs a CUDA GPU" in fwd["excluded"][n] for n in gluon)
    assert not any(n in bwd["excluded"] for n in gluon)  # forward only
    assert all(len(runs) == 1 and runs[0] for runs in fwd["samples"].values())
    assert {r["key"]["part"] for r in results["configs"]} == {"fwd", "bwd"}
    triton = [r for r in results["configs"] if not r["key"]["variant"].startswith("gluon")]
    assert all(r["source"].startswith("tuned on") for r in triton)
    analysis = results["analysis"]["modes"]
    assert analysis["bwd"]["players"] == ["defer_norm", "seq_parallel", "split_q"]
    assert "shapley/split_q" in analysis["fwd"]["cells"][0]["contributions"]
    for suffix in (".csv", ".md", "-tflops.png", "-contributions.png"):
        assert path.with_name(path.stem + suffix).exists()


def test_split_by_cost_balances_groups_and_keeps_order():
    from fa2check.ablate.plan import split_by_cost

    groups = split_by_cost([5.0, 1.0, 4.0, 2.0, 3.0, 1.0], 2)
    assert sorted(i for g in groups for i in g) == list(range(6))
    assert all(g == sorted(g) for g in groups)
    totals = [sum([5.0, 1.0, 4.0, 2.0, 3.0, 1.0][i] for i in g) for g in groups]
    assert totals == [8.0, 8.0]
    assert split_by_cost([1.0], 3) == [[0], [], []]


def test_plan_counts_the_repair_kernel_of_a_causal_forward():
    from fa2check.ablate import plan
    from fa2check.ablate.sweep import Settings

    def precompile_s(*jobs):
        return plan.estimate([], ["fwd"], lambda c, m: [], Settings(), list(jobs), [], [],
                             1)["precompile_tuning_s"] - plan.WORKER_START_S

    fwd = {"part": "fwd", "variant": "+defer+seqpar+splitq", "causal": False}
    assert precompile_s({**fwd, "causal": True}) == 2 * precompile_s(fwd)
    bwd = {**fwd, "part": "bwd"}
    assert precompile_s({**bwd, "causal": True}) == precompile_s(bwd)


def test_sharded_run_keeps_every_cell_in_grid_order(tmp_path, device, monkeypatch):
    if device != "cpu":
        pytest.skip("the GPU runs the real grid")
    from fa2check import ablate
    from fa2check.ablate import results as results_io

    saved, save = [], results_io.save
    monkeypatch.setattr(results_io, "save", lambda results, path: (
        saved.append(json.loads(json.dumps(results))), save(results, path)))
    status = ablate.main(["--seqlen", "16", "--seqlen", "32", "--head-dim", "16", "--heads", "2",
                          "--batch", "1", "--causal", "false", "--mode", "fwd",
                          "--repeats", "1", "--bootstrap", "20", "--backends", "sdpa-math",
                          "--shards", "2", "--no-plots", "--out", str(tmp_path)])
    assert status == 0
    (path,) = tmp_path.glob("*.json")
    results = json.loads(path.read_text())
    assert [e["cell"]["seqlen"] for e in results["cells"]] == [16, 32]
    assert sorted(e["shard"] for e in results["cells"]) == [0, 1]
    assert len(results["provenance"]["shards"]) == 2
    assert len(results["matmul"]["bfloat16"]["samples"]) == 2  # one sweep on each shard
    assert results["repeats_done"] == 1
    for entry in results["cells"]:
        assert all(runs for runs in entry["modes"]["fwd"]["samples"].values())
    # where the tiles came from is on disk before any cell is measured: a run cut later keeps it
    assert saved[0]["tile_sources"] and not saved[0]["cells"]


@pytest.mark.parametrize("call_ms, slow", [(3.0, False), (10.0, True), (400.0, True)])
def test_a_slow_call_is_timed_in_three_calls_not_eight(call_ms, slow):
    """timing.cuda_samples with a fake clock: a call of at least rep/2 ms is timed by bench
    itself (1 untimed + SLOW_SAMPLES timed calls, its first timed sample kept), a faster one
    by the host-ahead bench; the plan charges each what it costs. With is_slow always False the
    slow cases fail (the fast bench is called); with the first sample dropped, the sample count
    fails."""
    from fa2check.ablate import plan
    from fa2check.ablate.timing import SLOW_SAMPLES, Timing, cuda_samples

    calls, benched = [], []

    def fn():
        calls.append(1)

    def timed_call(f):
        f()
        return call_ms

    def fast_bench(f, warmup, rep):
        benched.append((warmup, rep))
        return Timing([call_ms] * 3, [50.0] * 3)

    timing = cuda_samples(fn, 5.0, 20.0, timed_call, fast_bench)
    if slow:
        assert not benched and timing.samples == [call_ms] * SLOW_SAMPLES
        assert len(calls) == 1 + SLOW_SAMPLES
        assert plan.measurement_s(call_ms, 5.0, 20.0) == pytest.approx(
            (len(calls) * call_ms + plan.OVERHEAD_MS) / 1e3)
    else:
        assert benched == [(5.0, 20.0)] and timing.samples == [call_ms] * 3
        assert plan.measurement_s(call_ms, 5.0, 20.0) > (5.0 + 20.0) / 1e3


def test_the_clock_window_opens_after_the_settling_call():
    """A first call that loads or compiles (the GPU idle meanwhile) is left out of the window
    whose nvidia-smi samples are credited to the contender: with `started` taken before it,
    this fails."""
    import time

    from fa2check.ablate.timing import Timing, cuda_samples

    calls = []

    def fn():
        if not calls:
            time.sleep(0.2)  # the settling call
        calls.append(time.time())

    before = time.time()
    timing = cuda_samples(fn, 5.0, 20.0, lambda f: f() or 1.0, lambda f, w, r: Timing([1.0]))
    assert timing.started >= before + 0.2 and timing.started <= calls[1]


@pytest.mark.gpu
def test_the_host_ahead_bench_times_the_gpu_not_the_host():
    """A call that spends 2 ms on the host before a short kernel: triton's do_bench times the
    host's 2 ms (the GPU waits for the launch), host_ahead_bench only the kernel, because the
    GPU sleeps while the host enqueues it (D99). Without its sleep the second assertion fails."""
    import statistics
    import time

    from triton.testing import do_bench

    from fa2check.ablate.timing import host_ahead_bench

    x = torch.zeros(1 << 20, device="cuda")

    def slow_host_call():
        time.sleep(0.002)
        x.add_(1)

    plain = statistics.median(do_bench(slow_host_call, warmup=5, rep=20, return_mode="all"))
    ahead = host_ahead_bench(slow_host_call, 5.0, 20.0)
    assert plain > 1.5
    assert statistics.median(ahead.samples) < 0.5 and ahead.host_bound == 0
    assert min(ahead.host_us) > 2000


def test_plan_counts_each_contenders_first_call_in_a_kernel_class_once():
    """The gate's first call of a contender in each (head dim, dtype, mask) loads its kernels:
    a second cell of the same class adds only its own calls, a cell of another class its first
    calls too. (Counting first calls per cell, or per contender alone, fails.)"""
    from dataclasses import replace

    from fa2check.ablate import plan
    from fa2check.ablate.grids import Cell
    from fa2check.ablate.sweep import Settings

    def gate(*cells):
        return plan.estimate(list(cells), ["fwd"], lambda c, m: [("a", None), ("b", None)],
                             Settings(), [], [], [], 1)["gate_s"]

    one = Cell(1, 2, 2, 256, 64, "bfloat16", False)
    same_class, other_class = replace(one, seqlen=512), replace(one, causal=True)
    first = 2 * plan.FIRST_CALL_S  # two contenders

    def own(cell):  # the cell's own calls, check and oracle
        return gate(cell) - first

    assert own(one) > 0
    assert gate(one, same_class) == pytest.approx(own(one) + own(same_class) + first)
    assert gate(one, other_class) == pytest.approx(own(one) + own(other_class) + 2 * first)
