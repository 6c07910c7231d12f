"""fa2check.ablate's rendering of saved results: tables, CSV and plots, the committed results
chosen without a GPU, merged runs, compressed files, the README section, and a render within
120 columns."""
import json
import os
import re
import subprocess
import sys

import pytest
from rich.console import Console

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
    """python -m fa2check.ablate on a machine without a GPU renders the README's run of record
    and the committed runs newer than it: each file's provenance once and its headline tables,
    every line within the terminal's width, no cell cut short, every interval on one line, and
    one note (not one a file) on results of other kernels; --full adds the older runs and the
    per-cell and tile-config tables, at their own width rather than cut."""
    if device != "cpu":
        pytest.skip("with a GPU, python -m fa2check.ablate measures")
    from fa2check import ablate
    from fa2check.ablate.cli import README, other_kernels
    from fa2check.ablate.results import committed, load, readme_runs, run_date

    monkeypatch.setenv("COLUMNS", "120")
    record = readme_runs(README)
    since = max(map(run_date, record))
    newer = [p for p, _ in committed() if run_date(p) > since and p not in record]
    assert ablate.main(["--bootstrap", "200"]) == 0
    lines = capsys.readouterr().out.splitlines()
    # issue 51: the headline tables, not every table of every run: a full paper grid's
    # provenance and headline tables, forward and fwd+bwd, take 108 lines; a run of the
    # Hopper switches (D85) adds its switches' game in fwd, 63 lines; the note on results of
    # other kernels than the tree's (once kernels/ changed after a run), 2 lines
    runs = [load(p) for p in record + newer]
    switch_runs = sum(bool(run["settings"].get("hopper_switches")) for run in runs)
    text = "\n".join(lines)
    ran_other = any(other_kernels(run) for run in runs)
    assert ("ran other kernels than the tree's" in text) == ran_other
    note_lines = 2 if ran_other else 0
    assert len(lines) <= 2 + 110 * (len(record) + len(newer)) + 65 * switch_runs + note_lines
    assert max(map(len, lines)) <= 120 and not [line for line in lines if "…" in line]
    assert text.count("Measured on") == text.count("Rendered from") == len(record) + len(newer)
    assert text.index("Rendered from") == text.index("Rendered from " + os.path.relpath(record[0]))
    assert "contributions over the grid" in text and "relative to torch SDPA" in text
    assert "tile configs" not in text and "time and throughput" not in text
    assert text.count("note: ") <= 1
    broken = [line for line in lines if re.search(r"\d\.\d\dx \[\d+\.\d\d,$", line.rstrip())]
    assert not broken, broken  # an interval cut at its comma, as rich's own wrapping did

    assert ablate.main(["--bootstrap", "200", "--full"]) == 0
    full = capsys.readouterr().out
    assert "tile configs" in full and "time and throughput" in full and "…" not in full
    assert full.count("Measured on") == len({os.path.abspath(p) for p in record}
                                            | {os.path.abspath(p) for p, _ in committed()})


def test_without_a_gpu_the_first_table_is_the_readmes_headline(device, monkeypatch, capsys):
    """The render's first contribution table is the README's first: the same rows, the same
    numbers, each row's intervals on one line at 120 columns."""
    if device != "cpu":
        pytest.skip("with a GPU, python -m fa2check.ablate measures")
    from fa2check import ablate
    from fa2check.ablate.cli import README, README_BEGIN

    monkeypatch.setenv("COLUMNS", "120")
    with open(README) as f:
        readme = f.read()
    section = readme[readme.index(README_BEGIN):]
    section = section[section.index("**"):]
    body = section.split("\n\n")[1].splitlines()[2:]  # the first table's rows
    rows = [[c.strip() for c in row.strip("|").split("|")] for row in body]
    assert ablate.main(["--bootstrap", "1000"]) == 0  # the README's own bootstrap
    out = capsys.readouterr().out
    title = section[2:section.index("**", 2)]
    first = out[out.index(title):]
    first = first[:first.index("Shapley values on log time")]
    lines = first.splitlines()
    assert len(rows) >= 8
    for label, *cells in rows:
        wanted = [cell.split(" (")[0] for cell in cells if cell]  # the interval, one line
        assert any(line.strip().startswith(label.split()[0]) and all(c in line for c in wanted)
                   for line in lines), (label, wanted)


def test_the_readmes_section_is_its_runs_render(monkeypatch):
    """Every line between the README's ablation markers is what `--from RUN --update-readme`
    writes from the runs it names: no number, plot or line typed or removed by hand."""
    from fa2check.ablate import cli
    from fa2check.ablate.results import readme_runs

    with open(cli.README) as f:
        section = f.read().split(cli.README_BEGIN, 1)[1].split(cli.README_END, 1)[0]
    rendered = []
    monkeypatch.setattr(cli, "update_readme", rendered.append)
    args = [a for run in readme_runs(cli.README) for a in ("--from", run)]
    assert args and cli.main(args + ["--update-readme"]) == 0
    assert rendered[0].strip() == section.strip()


def test_the_run_of_record_is_the_one_the_readme_was_rendered_from(tmp_path, capsys):
    """Data, not a file name: the README's markers name the run; a newer run follows it and an
    older one waits for --full."""
    from fa2check.ablate.cli import README_BEGIN, README_END, parse_args, render_committed

    paths = {}
    for name, date, mode in (("old", "2026-01-01T00:00:00", "bwd"),
                             ("record", "2026-02-01T00:00:00", "fwd"),
                             ("new", "2026-03-01T00:00:00", "fwd")):
        run = synthetic_results(date=date, modes=(mode,))
        paths[name] = tmp_path / f"{name}.json"
        paths[name].write_text(json.dumps(run))
    readme = tmp_path / "README.md"
    readme.write_text(f"{README_BEGIN}\n> Rendered from {paths['record'].name}.\n{README_END}\n")
    console = Console(width=120, record=True)
    assert render_committed(parse_args(["--bootstrap", "50"]), console, str(readme),
                            str(tmp_path)) == 0
    text = console.export_text()
    order = [text.index(f"Rendered from {os.path.relpath(paths[n])}") for n in ("record", "new")]
    assert order == sorted(order) and os.path.relpath(paths["old"]) not in text
    assert "1 older one(s) with --full" in text
    console = Console(width=120, record=True)
    render_committed(parse_args(["--bootstrap", "50", "--full"]), console, str(readme),
                     str(tmp_path))
    assert os.path.relpath(paths["old"]) in console.export_text()


def test_a_closed_pipe_is_not_an_error(device):
    if device != "cpu":
        pytest.skip("with a GPU, python -m fa2check.ablate measures")
    from fa2check.core.environment import ROOT

    run = subprocess.run(f"{sys.executable} -m fa2check.ablate --bootstrap 50 | head -3",
                         shell=True, cwd=ROOT, capture_output=True, text=True,
                         executable="/bin/bash", env={**os.environ, "COLUMNS": "120"})
    assert run.stderr == "" and run.stdout.count("\n") == 3
    status = subprocess.run(f"set -o pipefail; {sys.executable} -m fa2check.ablate "
                            "--bootstrap 50 | head -3 > /dev/null", shell=True, cwd=ROOT,
                            executable="/bin/bash", env={**os.environ, "COLUMNS": "120"})
    assert status.returncode == 0


def test_fitting_keeps_intervals_whole_and_splits_what_cannot_fit():
    """fa2check.ablate.fit against rich's own shrinking (to_rich), which breaks an interval at
    its comma: at 60 columns rich's table cuts one, the fitted tables do not; too wide for one
    table, the columns are split, each part with the first column."""
    from fa2check.ablate.fit import fitted
    from fa2check.ablate.report import Grid, to_rich

    grid = Grid("t", ["seqlen", "a factor", "b factor", "c factor"])
    grid.add("512", "1.23x [1.16, 1.24]", "1.01x [0.99, 1.02] ns", "13.27x [13.07, 13.32]")

    def lines(*tables):
        console = Console(width=60, record=True)
        for table in tables:
            console.print(table)
        return console.export_text().splitlines()

    cut = [line for line in lines(to_rich(grid)) if re.search(r"\[\d+\.\d+,\s*[│┃]?\s*$", line)]
    assert cut, "rich's own shrinking no longer breaks intervals: this test shows nothing"
    tables = fitted(grid.title, grid.headers, grid.rows, "", 60, lambda c: False)
    assert len(tables) == 2 and all(t.columns[0].header == "seqlen" for t in tables)
    text = lines(*tables)
    assert max(map(len, text)) <= 60
    for cell in grid.rows[0][1:]:
        assert any(cell in line for line in text), cell


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


def test_the_timer_is_named_from_what_the_run_recorded_and_host_bound_calls_are_counted():
    from fa2check.ablate.report import provenance_lines

    results = synthetic_results(modes=("fwd",), n_cells=2)
    before = "\n".join(provenance_lines(results))
    assert "before D99" in before and "outlasted" not in before
    info = results["cells"][0]["modes"]["fwd"]
    name = next(iter(info["samples"]))
    info["host"] = {name: [[120.0, 2], [80.5, 0], [300.0, 5]]}  # one record per sweep's call
    after = "\n".join(provenance_lines(results))
    assert "host-ahead timer (D99)" in after
    assert "80-300 us" in after and "7 of 90" in after  # 3 calls of 30 timed calls each
    info["host"] = {name: [[120.0, 2, 40], [80.5, 0, 12]]}  # since: each call's own count
    assert "2 of 52" in "\n".join(provenance_lines(results))
