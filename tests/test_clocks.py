"""fa2check.ablate.clocks: nvidia-smi's samples, credited to the do_bench calls they fall in, and shown
beside the ratios. The GPU path runs nvidia-smi; here a stand-in script prints its lines."""
import json
import sys
import time
from datetime import datetime

from fa2check.ablate import clocks
from fa2check.ablate.sweep import attribute_clocks
from saved_results import synthetic_results, two_runs


def _stamp(t: float) -> str:
    return datetime.fromtimestamp(t).strftime(clocks.TIMESTAMP)[:-3]  # nvidia-smi: milliseconds


def test_lines_parse_to_epoch_seconds_clock_and_power():
    now = round(time.time(), 3)
    t, mhz, watts = clocks.parse_line(f"{_stamp(now)}, 1905, 689.51")
    assert abs(t - now) < 1e-3 and (mhz, watts) == (1905.0, 689.51)
    for line in ("timestamp, clocks.sm [MHz], power.draw.instant [W]",
                 f"{_stamp(now)}, 1905, [N/A]", "", "1905, 689.5"):
        assert clocks.parse_line(line) is None


def _fake_smi(tmp_path, lines):
    """ClockLog's queries and commands: the query "unknown" exits 6 as nvidia-smi does for a
    field it does not know; "known" runs a script that prints `lines` (one every 10 ms)."""
    script = tmp_path / "smi.py"
    script.write_text("import sys, time\n"
                      "loop = sys.argv[1] == 'loop'\n"
                      "for line in sys.argv[2:]:\n"
                      "    print(line, flush=True)\n"
                      "    time.sleep(0.01 if loop else 0)\n")
    bad = [sys.executable, "-c", "import sys; print('Field is not valid'); sys.exit(6)"]

    def make_command(fields, loop):
        return bad if fields == ("unknown",) else [sys.executable, str(script),
                                                   "loop" if loop else "once", *lines]
    return dict(queries=[("unknown",), ("known",)], make_command=make_command)


def test_clock_log_collects_samples_and_falls_back_to_a_query_that_works(tmp_path):
    t0 = time.time()
    lines = [f"{_stamp(t0 + i * 0.05)}, {1980 - i}, {600 + i}.0" for i in range(5)]
    with clocks.ClockLog(**_fake_smi(tmp_path, lines)) as log:
        deadline = time.time() + 10
        while len(log.samples) < 5 and time.time() < deadline:
            time.sleep(0.02)
    assert log.error is None and log.fields == "known" and len(log.samples) == 5
    assert [s[1] for s in log.samples] == [1980.0, 1979.0, 1978.0, 1977.0, 1976.0]
    assert log.record()["samples"] == 5


def test_clock_log_says_why_it_has_no_samples():
    bad = [sys.executable, "-c", "import sys; print('No devices were found'); sys.exit(6)"]
    with clocks.ClockLog(make_command=lambda fields, loop: bad) as log:
        pass
    assert log.samples == [] and "No devices were found" in log.error
    with clocks.ClockLog(make_command=lambda fields, loop: ["/nonexistent/nvidia-smi"]) as log:
        pass
    assert log.samples == [] and "FileNotFoundError" in log.error


def test_samples_are_credited_to_the_contender_whose_call_they_fall_in():
    samples = [(10.0, 1980, 500), (10.5, 1900, 690), (11.2, 1800, 699), (12.0, 1700, 700)]
    entries = [{"modes": {"fwd": {"windows": {"ours": [[10.4, 10.6], [11.9, 12.1]],
                                              "sdpa-flash": [[11.0, 11.5]]}}}}]
    attribute_clocks(entries, samples)
    clock = entries[0]["modes"]["fwd"]["clock"]
    assert clock == {"ours": [[1900, 690], [1700, 700]], "sdpa-flash": [[1800, 699]]}
    assert clocks.median_clock(clock["ours"]) == (1800, 695)
    assert clocks.median_clock([]) == (None, None)


def test_the_report_shows_each_side_s_clock_beside_the_ratios(tmp_path):
    from fa2check import ablate

    results = synthetic_results(modes=("fwd",))
    for entry in results["cells"]:
        entry["modes"]["fwd"]["clock"] = {"+defer+seqpar+splitq": [[1800, 690], [1810, 692]],
                                          "sdpa-flash": [[1900, 688]]}
    path = tmp_path / "clocked.json"
    path.write_text(json.dumps(results))
    md = tmp_path / "tables.md"
    assert ablate.main(["--from", str(path), "--out", str(tmp_path / "out"), "--markdown",
                        str(md), "--bootstrap", "20", "--no-plots"]) == 0
    table = md.read_text().split("FA2 (ours) relative to torch SDPA")[1]
    assert "FA2 MHz / W | flash MHz / W |" in table
    assert "| 1805 / 691 | 1900 / 688 |" in table
    rows = (tmp_path / "out" / "clocked.csv").read_text().splitlines()
    assert any(",+defer+seqpar+splitq,sm_mhz,1805" in r for r in rows)
    # without samples the table has no clock columns
    plain = tmp_path / "plain.json"
    plain.write_text(json.dumps(synthetic_results(modes=("fwd",))))
    assert ablate.main(["--from", str(plain), "--out", str(tmp_path / "out2"), "--markdown",
                        str(md), "--bootstrap", "20", "--no-plots"]) == 0
    assert "MHz" not in md.read_text()


def test_merged_runs_pool_their_clock_samples(tmp_path):
    from fa2check import ablate

    paths = two_runs(tmp_path)
    for index, p in enumerate(paths):
        run = json.loads(p.read_text())
        run["clock_log"] = {"samples": index + 1}
        for entry in run["cells"]:
            entry["modes"]["fwd"]["clock"] = {"sdpa-flash": [[1900 + index, 690]]}
        p.write_text(json.dumps(run))
    assert ablate.main(["--merge", str(paths[0]), "--merge", str(paths[1]), "--no-plots",
                        "--bootstrap", "20"]) == 0
    (merged_path,) = tmp_path.glob("*-merged.json")
    merged = json.loads(merged_path.read_text())
    assert merged["cells"][0]["modes"]["fwd"]["clock"]["sdpa-flash"] == [[1900, 690], [1901, 690]]
    assert "clock_log" not in merged
    assert [r["clock_log"] for r in merged["provenance"]["merged_from"]] == [
        {"samples": 1}, {"samples": 2}]
