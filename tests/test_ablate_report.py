"""fa2check.ablate's rendering of saved results: tables, CSV and plots, the committed results
chosen without a GPU, merged runs, compressed files, the README section, and a render within
120 columns."""
import json
import os

import pytest

from saved_results import synthetic_results, two_runs


def test_render_from_saved_results_writes_tables_csv_and_plots(tmp_path):
    from fa2check import ablate

    path = tmp_path / "synthetic.json"
    path.write_text(json.dumps(synthetic_results()))
    md = tmp_path / "tables.md"
    out = tmp_path / "out"
    assert ablate.main(["--from", str(path), "--out", str(out), "--markdown", str(md),
                        "--bootstrap", "200"]) == 0
    text = md.read_text()
    assert "Synthetic GPU" in text and "2026-11-30" in text
    bwd_summary = text[text.index("bwd: contributions over the grid"):]
    # split_q is a player of the backward's game too (D50)
    assert "| split_q | 1.35x" in bwd_summary
    rows = (out / "synthetic.csv").read_text().splitlines()
    assert rows[0].split(",")[:3] == ["mode", "batch", "heads_q"]
    assert any(",contribution,shapley/seq_parallel," in r for r in rows)
    assert any(r.startswith("bwd,") and "shapley/split_q" in r for r in rows)
    for suffix in ("-tflops.png", "-contributions.png"):
        assert (out / f"synthetic{suffix}").stat().st_size > 10_000


def test_contributions_plot_takes_an_interval_that_misses_its_estimate_by_an_ulp(tmp_path):
    """A cell timed once has a one-point bootstrap interval, which the estimate can miss by
    an ulp (seen in a 1-sweep fwd+bwd run): the plot draws it, matplotlib's negative yerr
    error must not stop the render."""
    from fa2check.ablate.analysis import analyse_results
    from fa2check.ablate.plots import contributions_plot

    results = synthetic_results()
    analysis = analyse_results(results, n_draws=20, seed=0)
    row = next(r for d in analysis["modes"].values() for r in d["cells"] if r["contributions"])
    q = row["contributions"]["total"]
    q["ci_low"] = q["ci_high"] = q["factor"] * (1 + 2e-16)
    contributions_plot(results, analysis, str(tmp_path / "c.png"))
    assert (tmp_path / "c.png").stat().st_size > 10_000


def test_gluon_kernels_get_their_own_contributions_beside_tritons(tmp_path):
    from fa2check import ablate

    path = tmp_path / "both.json"
    path.write_text(json.dumps(synthetic_results(modes=("fwd",), gluon=True)))
    md = tmp_path / "tables.md"
    assert ablate.main(["--from", str(path), "--markdown", str(md), "--bootstrap", "200"]) == 0
    text = md.read_text()
    gluon = text[text.index("fwd gluon: contributions over the grid"):]
    assert "| split_q | 1.11x" in gluon  # exp(0.1); the Triton view has exp(0.3) = 1.35x
    assert "| split_q | 1.35x" in text[:text.index("fwd gluon")]
    side = text[text.index("the same run's contributions with each kernel backend"):]
    assert "| all | 1.03x / 1.03x | 2.22x / 2.22x | 1.35x / 1.11x |" in side
    assert "fwd gluon: time and throughput" in text  # the Gluon FA2 per cell


def test_without_a_gpu_the_newest_committed_results_are_chosen(tmp_path):
    from fa2check.ablate.results import committed

    for name, date, modes, device in [("old", "2026-11-01T00:00:00", ("fwd", "bwd"), "cuda"),
                                      ("new", "2026-11-02T00:00:00", ("fwd",), "cuda"),
                                      ("cpu", "2026-11-03T00:00:00", ("fwd", "bwd"), "cpu")]:
        (tmp_path / f"{name}.json").write_text(json.dumps(synthetic_results(date, modes, device)))
    chosen = [(os.path.basename(p), m) for p, m in committed(str(tmp_path))]
    assert chosen == [("new.json", ["fwd"]), ("old.json", ["bwd"])]
    # a newer run on fewer cells with both kernel backends adds its Gluon view only
    (tmp_path / "gluon.json").write_text(json.dumps(synthetic_results(
        "2026-11-04T00:00:00", ("fwd",), "cuda", gluon=True, n_cells=1)))
    (tmp_path / "new.json").write_text(json.dumps(synthetic_results(
        "2026-11-02T00:00:00", ("fwd",), "cuda", n_cells=4)))
    chosen = [(os.path.basename(p), m) for p, m in committed(str(tmp_path))]
    assert chosen == [("new.json", ["fwd"]), ("old.json", ["bwd"]), ("gluon.json", ["fwd gluon"])]


def test_merged_runs_keep_every_sweep_and_each_runs_provenance(tmp_path):
    from fa2check import ablate
    from fa2check.ablate.results import committed

    first, second = two_runs(tmp_path)
    assert ablate.main(["--merge", str(first), "--merge", str(second), "--no-plots",
                        "--bootstrap", "20"]) == 0
    (path,) = tmp_path.glob("*-merged.json")
    merged = json.loads(path.read_text())
    assert merged["repeats_done"] == 2
    # what the merged file holds is complete; each run's planned sweeps stay in merged_from
    assert merged["settings"]["repeats"] == 2 and not merged["stopped_by_budget"]
    assert [r["repeats"] for r in merged["provenance"]["merged_from"]] == [
        json.loads(p.read_text())["settings"]["repeats"] for p in (first, second)]
    samples = merged["cells"][0]["modes"]["fwd"]["samples"]["sdpa-flash"]
    assert samples == [[1.0] * 4, [2.0] * 4]  # the first run's sweep, then the second's
    assert [r["date"][11:13] for r in merged["provenance"]["merged_from"]] == ["10", "11"]
    assert "Merged from 2 runs" in path.with_suffix(".md").read_text()
    # the merged file has its last run's date: chosen over that run for having more sweeps
    assert [os.path.basename(p) for p, _ in committed(str(tmp_path))] == [path.name]


def test_runs_of_different_code_are_not_merged(tmp_path):
    from fa2check import ablate

    first, second = two_runs(tmp_path, kernels_sha256="other")
    with pytest.raises(SystemExit, match="differs .* in provenance kernels_sha256"):
        ablate.main(["--merge", str(first), "--merge", str(second), "--no-plots"])
    run = json.loads(second.read_text())
    run["provenance"].pop("kernels_sha256")
    run["cells"][1]["configs"] = {"+defer+seqpar+splitq": {"block_m": 64}}
    second.write_text(json.dumps(run))
    with pytest.raises(SystemExit, match="tile configs of cell"):
        ablate.main(["--merge", str(first), "--merge", str(second), "--no-plots"])
    assert not list(tmp_path.glob("*-merged.json"))


def test_update_readme_replaces_only_its_section(tmp_path):
    from fa2check.ablate.cli import README_BEGIN, README_END, update_readme

    readme = tmp_path / "README.md"
    readme.write_text(f"intro\n{README_BEGIN}\nold\n{README_END}\noutro\n")
    update_readme("new tables", str(readme))
    assert readme.read_text() == f"intro\n{README_BEGIN}\nnew tables\n{README_END}\noutro\n"


def test_a_compressed_results_file_is_read_under_its_first_name(tmp_path):
    """Older results are committed as X.json.gz; --from/--configs-from X.json, tuning's config
    loader and the committed-results finder read them as if they were X.json."""
    import gzip

    from fa2check import ablate
    from fa2check.ablate import tuning
    from fa2check.ablate.results import committed, load

    data = synthetic_results("2026-11-02T00:00:00", ("fwd",), "cuda")
    data["configs"] = [{"key": {"part": "fwd", "variant": "+defer+seqpar+splitq",
                                "head_dim": 64, "causal": False}, "config": {}}]
    with gzip.open(tmp_path / "old.json.gz", "wt") as f:
        json.dump(data, f)
    plain = str(tmp_path / "old.json")
    assert load(plain)["provenance"] == data["provenance"]
    assert len(tuning.load_configs([plain])) == 1
    assert ablate.parse_args(["--configs-from", plain, "--plan"]).configs_from == [plain]
    assert [(os.path.basename(p), m) for p, m in committed(str(tmp_path))] == [
        ("old.json.gz", ["fwd"])]


def test_without_a_gpu_the_render_fits_a_120_column_terminal(device, monkeypatch, capsys):
    """python -m fa2check.ablate on a machine without a GPU renders the committed results: by
    default each file's provenance once and its headline tables, every line within the
    terminal's width and no cell cut short; --full adds the per-cell and tile-config tables,
    at their own width rather than cut."""
    if device != "cpu":
        pytest.skip("with a GPU, python -m fa2check.ablate measures")
    from fa2check import ablate
    from fa2check.ablate.results import committed

    monkeypatch.setenv("COLUMNS", "120")
    chosen = committed()
    files, views = len(chosen), sum(len(names) for _, names in chosen)
    assert ablate.main(["--bootstrap", "200"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert max(map(len, lines)) <= 120 and not [line for line in lines if "…" in line]
    assert len(lines) <= 70 * views, len(lines)  # a view's headline tables: 70 lines at most
    text = "\n".join(lines)
    assert text.count("Measured on") == text.count("Rendered from") == files
    assert "contributions over the grid" in text and "relative to torch SDPA" in text
    assert "tile configs" not in text and "time and throughput" not in text

    assert ablate.main(["--bootstrap", "200", "--full"]) == 0
    full = capsys.readouterr().out
    assert "tile configs" in full and "time and throughput" in full and "…" not in full
    assert full.count("Measured on") == files


def test_a_render_says_when_the_results_ran_other_kernels_than_the_trees(tmp_path, capsys):
    from fa2check import ablate
    from fa2check.core.environment import kernels_sha256

    for sha, says in ((kernels_sha256(), False), ("0" * 64, True)):
        run = synthetic_results(modes=("fwd",))
        run["provenance"]["kernels_sha256"] = sha
        path = tmp_path / "run.json"
        path.write_text(json.dumps(run))
        assert ablate.main(["--from", str(path), "--no-plots", "--bootstrap", "50"]) == 0
        assert ("not the tree's" in capsys.readouterr().out) == says


def test_the_fwdbwd_by_seqlen_table_shows_both_ends_percent_of_matmul_and_the_a100_figure(
        tmp_path):
    """Issue 31's table: FA2's and FA1-style's % of the matmul rate by seqlen, and in fwd+bwd
    the FA2 paper's A100 figure 4 beside FA2 / FA1-style (at 1k its legible cells are d=64
    and d=128 causal: 119/70 and 133/62 TFLOP/s, geometric mean 1.91x)."""
    from fa2check import ablate
    from fa2check.ablate.report import BATCH_HEADS_LABEL
    from fa2check.core.environment import ROOT

    run = os.path.join(ROOT, "ablations", "results",
                       "20261203-142817-nvidia-h200-paper-fwd-fwdbwd.json")
    md = tmp_path / "tables.md"
    assert ablate.main(["--from", run, "--markdown", str(md), "--bootstrap", "200",
                        "--out", str(tmp_path)]) == 0
    text = md.read_text()
    fwdbwd = text[text.index("**fwd+bwd hopper: contributions by seqlen"):]
    header, _, *rows = fwdbwd.split("\n\n")[1].splitlines()
    columns = [c.strip() for c in header.strip("|").split("|")]
    # a run saved before D90: its FA1-style ran one program per (batch, head), labelled so
    assert columns[-3:] == ["FA2 % matmul", f"{BATCH_HEADS_LABEL} % matmul",
                            "A100 FA2 / FA1 (paper)"]
    assert f"total FA2 / {BATCH_HEADS_LABEL}" in text
    row_1k = next(r for r in rows if r.startswith("| 1024 "))
    row_1k = [c.strip() for c in row_1k.strip("|").split("|")]
    assert row_1k[-1] == f"{(119 / 70 * 133 / 62) ** 0.5:.2f}x"  # the bar labels, not our table
    assert all(cell.endswith("%") for cell in row_1k[-3:-1])
    fwd = text[text.index("**fwd hopper: contributions by seqlen"):]
    assert "A100" not in fwd.split("\n\n")[1]  # the figure is forward + backward only
