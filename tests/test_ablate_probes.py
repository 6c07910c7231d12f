"""The probes of ablations/probes/ (scripts, not a package): their parsing and arithmetic on
made-up inputs; the kept patches still apply to the kernels."""
import json
import os
from pathlib import Path

import pytest
import torch

from fa2check.core.environment import kernels_sha256
from saved_results import synthetic_results


def _ablations_script(name: str):
    """A script of ablations/probes/ (not a package), imported as a module."""
    import importlib.util

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    spec = importlib.util.spec_from_file_location(name, os.path.join(root, "ablations",
                                                                     "probes", f"{name}.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_stall_probe_summarizes_a_saved_nsight_compute_csv():
    """ablations/probes/stall_probe.py --summarize on the committed counters of the d=64
    forward (the numbers docs/decisions.md#D14 quotes)."""
    probe = _ablations_script("stall_probe")
    rows = probe.summarize(Path(__file__).resolve().parents[1] / "ablations" / "results"
                           / "20261130-h200-ncu-fwd.csv")
    assert [r["kernel"][:9] for r in rows] == ["_attn_fwd", "_attn_fwd", "void pyto",
                                               "_attn_fwd", "void pyto"]
    assert rows[0]["instructions"] == "574,144,512 inst" and rows[0]["eligible"] == "0.69 warp"
    assert rows[1]["top pipe"] == "Tensor 40.6%" and rows[1]["issue busy"] == "57.21 %"


def test_stall_probe_reads_the_warp_samples_of_each_sass_instruction():
    """--sass-samples on the committed source page of the chassis's FA2 and cuDNN (D79's
    figures): the idle warps' NOPs after the CTA barrier, the wgmma waits, and the consumers'
    `bar.sync N, 128` at 0.5% (a broken opcode split, or samples summed over the wrong column
    or the wrong kernel, fails)."""
    probe = _ablations_script("stall_probe")
    fa2, cudnn = probe.sass_samples(Path(__file__).resolve().parents[1] / "ablations" / "results"
                                    / "20261203-h200-ncu-sass-cd33758.csv.gz", top=400)
    assert fa2["kernel"] == "_hopper_attn_fwd" and cudnn["kernel"].startswith("cudnn_")
    assert (fa2["samples"], cudnn["samples"]) == (207164, 169680)
    assert round(fa2["by_op"]["NOP"], 3) == 0.253 and round(fa2["by_op"]["WARPGROUP"], 3) == 0.224
    assert round(fa2["by_op"]["BRA"], 3) == 0.094  # mostly predicated: @!P0 BRA
    assert round(cudnn["by_op"]["WARPGROUP"], 3) == 0.259
    consumer_barriers = sum(f for f, _, sass in fa2["top"] if sass.startswith("BAR.SYNC")
                            and sass.endswith("0x80"))
    assert 0.004 < consumer_barriers < 0.006


def test_cudnn_targets_take_the_fastest_of_ours_with_fa2s_flags(tmp_path, capsys):
    """ablations/probes/cudnn_targets.py on a made-up run: the fastest of ours is the fastest
    kernel with FA2's three flags, switches included, never the faster FA1-style one; each cell
    under a floor is listed, and a target the run did not time (fwd+bwd) is not printed."""
    probe = _ablations_script("cudnn_targets")
    times = {"hopper+defer+seqpar+splitq": 1.0, "hopper+defer+seqpar+splitq+pingpong": 0.9,
             "hopper-defer-seqpar-splitq": 0.5, "api": 0.95, "sdpa-cudnn": 0.81,
             "sdpa-flash": 1.2}
    cells = [{"cell": {"batch": 2, "heads_q": 16, "heads_kv": 16, "seqlen": seqlen,
                       "head_dim": 128, "dtype": "bfloat16", "causal": False},
              "modes": {"fwd": {"samples": {n: [[t * (seqlen / 2048) ** 2] * 3]
                                            for n, t in times.items()}}}}
             for seqlen in (2048, 8192)]
    path = tmp_path / "run.json"
    path.write_text(json.dumps({"schema": "fa2check.ablate/1", "provenance": {"gpu": "G"},
                                "settings": {"kernels": "hopper"},
                                "cells": cells}))
    assert probe.main([str(path)]) == 0
    out = capsys.readouterr().out
    assert ("forward, the fastest of ours / cuDNN, bf16 from 2k: geometric mean 0.900x (target "
            "1.05x: missed); 0 of 2 cells >= 0.95x") in out
    assert "  miss  seqlen 8192, d=128, bfloat16, full: 0.900x" in out
    flops = 4 * 2 * 16 * 8192 ** 2 * 128
    assert f"d=128 full 8k bf16: {flops / (0.9 * 16e-3) / 1e12:.0f} TFLOP/s" in out
    assert "FA2 of record (hopper+defer+seqpar+splitq) / torch's FlashAttention-2, every " \
           "cell: geometric mean 1.200x; 2 of 2 cells >= 1.0x" in out
    assert "fwd+bwd" not in out


def test_cudnn_targets_split_fwd_bwd_into_forward_and_backward(tmp_path, capsys):
    """With both modes timed, cudnn_targets.py prints the FA2 of record's fwd+bwd against cuDNN
    and its backward (fwd+bwd less fwd) against cuDNN's by cell: here fwd 1.0 / 0.8 ms and
    fwd+bwd 4.0 / 3.6 ms, so fwd+bwd 0.900x and the backward 2.8 / 3.0 = 0.933x (0.9x would be
    the ratio of the sums, 0.8x the forward's)."""
    probe = _ablations_script("cudnn_targets")
    fa2 = "hopper+defer+seqpar+splitq"
    times = {"fwd": {fa2: 1.0, "sdpa-cudnn": 0.8}, "fwd+bwd": {fa2: 4.0, "sdpa-cudnn": 3.6}}
    cell = {"batch": 2, "heads_q": 16, "heads_kv": 16, "seqlen": 4096, "head_dim": 64,
            "dtype": "bfloat16", "causal": True}
    run = {"schema": "fa2check.ablate/1", "provenance": {"gpu": "G"},
           "settings": {"kernels": "hopper"},
           "cells": [{"cell": cell, "modes": {mode: {"samples": {n: [[t] * 3]
                                                                 for n, t in ms.items()}}
                                              for mode, ms in times.items()}}]}
    path = tmp_path / "run.json"
    path.write_text(json.dumps(run))
    assert probe.main([str(path)]) == 0
    out = capsys.readouterr().out
    assert (f"fwd+bwd, the FA2 of record ({fa2}) / cuDNN, bf16 from 2k (what `flash_attention` "
            "gives where the table of fastest kernels picks it): geometric mean 0.900x (target "
            "0.95x: missed); 1 of 1 cells >= 0.85x") in out
    assert "  seqlen 4096, d=64, bfloat16, causal: 0.933x" in out


def test_targets_across_runs_tell_a_shared_miss_from_a_single_runs(tmp_path, capsys):
    """ablations/probes/targets.py --across: each cell that missed in some run, with every run's
    ratio. Synthetic runs: FA2 at about 0.97 ms, sdpa-flash 1.1 ms (1.13x, a miss) in both,
    but 1.4 ms (1.44x) in the second run's first cell."""
    targets = _ablations_script("targets")
    first, second = synthetic_results(modes=("fwd",)), synthetic_results(modes=("fwd",))
    flash = second["cells"][0]["modes"]["fwd"]["samples"]["sdpa-flash"]
    second["cells"][0]["modes"]["fwd"]["samples"]["sdpa-flash"] = [
        [x * 1.4 / 1.1 for x in sweep] for sweep in flash]
    second["cells"][1]["modes"]["fwd"]["clock"] = {"+defer+seqpar+splitq": [[1805, 690]],
                                                   "sdpa-flash": [[1910, 689]]}
    first["provenance"]["kernels_sha256"] = "0" * 64
    second["provenance"]["kernels_sha256"] = kernels_sha256()
    paths = []
    for i, run in enumerate((first, second)):
        paths.append(tmp_path / f"run{i}.json")
        paths[-1].write_text(json.dumps(run))
    assert targets.main([str(p) for p in paths] + ["--across"]) == 0
    out = capsys.readouterr().out
    # which code each file measured: the first is not the tree's kernels, the second is
    assert "run0.json: 2026-11-30T10:00:00+00:00, git abc123, kernels 000000000000: not the " \
           "tree's kernels" in out
    assert f"run1.json: 2026-11-30T10:00:00+00:00, git abc123, kernels {kernels_sha256()[:12]}: " \
           "the tree's kernels" in out
    assert "run0.json: fwd >= 1.3x, seqlen >= 1k: 0 of 2 cells" in out
    assert "run1.json: fwd >= 1.3x, seqlen >= 1k: 1 of 2 cells" in out
    # a miss of a run with clock samples says at which clocks the two were timed
    assert "causal: 1.13" in out and "(FA2 at 1805 MHz, sdpa-flash at 1910 MHz)" in out
    assert out.count("sdpa-flash at") == 1  # the other run has no clock samples
    # each run's misses follow its own count line: the clocked miss is the second run's
    run0, run1 = out.index("run0.json: fwd >= 1.3x"), out.index("run1.json: fwd >= 1.3x")
    assert run0 < out.index("miss") < run1 < out.index("1805 MHz")
    across = out[out.index("across 2 runs"):]
    assert "seqlen 4096, d=64, bfloat16, full: met in 1 of 2 runs (1.13" in across
    assert "seqlen 4096, d=64, bfloat16, causal: met in 0 of 2 runs (1.13" in across


def test_same_gradients_tells_a_changed_kernel_from_an_equal_one(tmp_path):
    """ablations/probes/same_gradients.py: the tree against itself has no difference; a copy whose
    backward scales dK by 1.0001 differs in dk alone; one whose forward's log2(e) is off by
    0.5% differs in o and lse too."""
    import shutil

    same = _ablations_script("same_gradients")
    root = Path(__file__).resolve().parents[1]
    problem = [(1, 2, 1, 17, 20, 16, torch.float16, True)]
    compared, differ = same.compare(root / "kernels", root / "kernels", problem)
    assert compared == 80 and differ == []
    broken = tmp_path / "kernels"
    shutil.copytree(root / "kernels", broken, ignore=shutil.ignore_patterns("__pycache__"))
    source = (broken / "backward.py").read_text()
    assert "    dk *= sm_scale\n" in source
    (broken / "backward.py").write_text(source.replace("    dk *= sm_scale\n",
                                                       "    dk *= sm_scale * 1.0001\n"))
    compared, differ = same.compare(root / "kernels", broken, problem)
    assert compared == 80 and differ and all(line.startswith("dk ") for line in differ)
    forward = (broken / "forward.py").read_text()
    assert "\nLOG2E = 1.4426950408889634" in forward
    (broken / "forward.py").write_text(forward.replace("\nLOG2E = 1.4426950408889634",
                                                       "\nLOG2E = 1.45  # 1.4426950408889634"))
    _, differ = same.compare(root / "kernels", broken, problem)
    assert {line.split()[0] for line in differ} >= {"o", "lse", "dk"}


def test_clock_probe_reads_tiles_and_skips_the_power_ramp():
    """ablations/probes/clock_probe.py's parsing (the probe itself needs a GPU)."""
    probe = _ablations_script("clock_probe")
    assert probe.parse_tile("64,64,4,3,tma", backward=False) == {
        "block_m": 64, "block_n": 64, "num_warps": 4, "num_stages": 3, "tma": True}
    assert probe.parse_tile("32,128,4,3", backward=True) == {
        "bwd_block_m": 32, "bwd_block_n": 128, "bwd_num_warps": 4, "bwd_num_stages": 3,
        "bwd_dq_pass": False}
    samples = [(100.0 + 0.1 * i, 1980 - i, 200 + 100 * i) for i in range(8)]
    assert probe.after_ramp(samples, 100.0) == samples[5:]


def test_sass_loops_reads_control_bits_and_keeps_the_innermost_loops():
    """ablations/probes/sass_loops.py's parsing, on made-up `cuobjdump -sass` lines: the stall
    cycles and wait mask come from the high word's control bits, and of two nested loops that
    issue HGMMA only the inner one is kept; a loop without HGMMA, and a region from a branch
    after a loop back into its body, are dropped."""
    sass_loops = _ablations_script("sass_loops")

    def line(addr, text, stall, wait=0):
        high = (stall << 41) | (wait << 52) | 0x0000000000000a00
        return (f"        /*{addr:04x}*/                   {text} ;   /* 0x0000000000000000 */\n"
                f"                                                 /* 0x{high:016x} */")

    program = "\n".join([
        "	code for sm_90a", "		Function : _attn_fwd",
        line(0x00, "MOV R1, R2", 1),
        line(0x10, "HGMMA.64x64x16.F32.BF16 R24, gdesc[UR4], R24", 2),  # outer loop start
        line(0x20, "FADD R3, R4, R5", 4, wait=0b000010),  # inner loop start
        line(0x30, "HGMMA.64x64x16.F32.BF16 R24, gdesc[UR8], R24", 1),
        line(0x40, "@P0 BRA 0x20", 5),
        line(0x50, "BRA 0x10", 3),
        line(0x60, "IADD3 R6, R6, 0x1, RZ", 2),  # a loop without HGMMA
        line(0x70, "@P1 BRA 0x60", 1),
        line(0x80, "EXIT", 0),
        line(0x90, "BRA 0x30", 1),  # from after the loops back into the inner one: no loop
    ])
    instrs = sass_loops.parse_sass(program)
    assert [x.addr for x in instrs] == list(range(0, 0xa0, 0x10))
    assert [x.stall for x in instrs] == [1, 2, 4, 1, 5, 3, 2, 1, 0, 1]
    assert instrs[2].wait_mask == 0b000010 and instrs[2].opcode == "FADD"
    assert instrs[4].opcode == "BRA"  # the predicate is not the opcode
    loops = sass_loops.inner_loops(instrs)
    assert loops == [(2, 4)]
    summary = sass_loops.summarize(instrs, loops[0])
    assert (summary["start"], summary["instructions"], summary["stall_cycles"],
            summary["waiting"]) == (0x20, 3, 10, 1)


def test_ab_table_names_versions_by_what_differs_and_measures_against_the_first():
    """ablations/probes/ab_table.py: each time's change is against the first version of its
    cell, the shared fields are named once, the dtype comes from the recorded command, and a
    version missing from a cell shows '-' rather than a change."""
    ab_table = _ablations_script("ab_table")
    base, capped = "kernels:block_m=64,num_stages=3", "kernels:block_m=64,num_stages=3,maxreg=96"

    def row(version, seqlen, median):
        return dict(version=version, seqlen=seqlen, head_dim=64, causal=True, median=median)

    dtype = ab_table.dtype_of("python3 ablations/compare_kernels.py A B --dtype float16")
    assert (dtype, ab_table.dtype_of("python3 compare_kernels.py A")) == ("float16", "bfloat16")
    text = ab_table.table([(dtype, [row(base, 1024, 0.5), row(capped, 1024, 0.4),
                                    row(base, 2048, 1.0)])])
    lines = text.splitlines()
    assert lines[0].startswith("Every version: kernels:block_m=64,num_stages=3;")
    assert lines[2] == "| dtype | d | mask | seqlen | (shared only) | maxreg=96 |"
    assert lines[4] == "| float16 | 64 | causal | 1024 | 0.5000 | 0.4000 (-20.0%) |"
    assert lines[5] == "| float16 | 64 | causal | 2048 | 1.0000 | - |"


def test_ab_copy_applies_the_kernels_part_of_a_patch(tmp_path):
    """ablations/probes/ab_copy.sh makes ablations/ab/NAME/kernels from kernels/ and a patch's
    kernels/ hunks only; a patch that changes nothing there, or no patch, is an error; several
    patches go on in order, each on top of the ones before, into ablations/ab/A+B."""
    import difflib
    import shutil
    import subprocess

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    source = open(os.path.join(root, "kernels", "forward.py")).read().splitlines(keepends=True)
    changed = [source[0].rstrip("\n") + "  # patched\n"] + source[1:]
    kernels_part = "".join(difflib.unified_diff(source, changed, "a/kernels/forward.py",
                                                "b/kernels/forward.py"))
    other_part = ("--- a/README.md\n+++ b/README.md\n@@ -1 +1 @@\n-x\n+y\n")
    script = os.path.join(root, "ablations", "probes", "ab_copy.sh")

    twice = [changed[0].rstrip("\n") + " twice\n"] + source[1:]
    on_top = "".join(difflib.unified_diff(changed, twice, "a/kernels/forward.py",
                                          "b/kernels/forward.py"))

    def run(patch_text, name, *more):
        paths = []
        for text, stem in [(patch_text, name), *more]:
            paths.append(tmp_path / f"{stem}.patch")
            paths[-1].write_text(text)
        return subprocess.run(["bash", script, *map(str, paths)], capture_output=True, text=True)

    try:
        made = run(kernels_part + other_part, "ab-copy-test")
        assert made.returncode == 0, made.stderr
        copy = os.path.join(root, made.stdout.strip())
        assert copy.endswith(os.path.join("ablations", "ab", "ab-copy-test", "kernels"))
        assert open(os.path.join(copy, "forward.py")).readline().endswith("  # patched\n")
        assert not open(os.path.join(root, "kernels", "forward.py")).readline().endswith(
            "  # patched\n")
        assert run(other_part, "ab-copy-empty").returncode == 1  # nothing under kernels/
        chained = run(kernels_part, "ab-copy-test", (on_top, "ab-copy-top"))
        assert chained.returncode == 0, chained.stderr
        assert chained.stdout.strip().endswith(os.path.join("ab", "ab-copy-test+ab-copy-top",
                                                            "kernels"))
        assert open(os.path.join(root, chained.stdout.strip(), "forward.py")).readline() \
            .endswith("  # patched twice\n")
        assert run(on_top, "ab-copy-top").returncode != 0  # not on top of kernels/ itself
        missing = subprocess.run(["bash", script, "no-such-patch"], capture_output=True)
        assert missing.returncode == 2
    finally:
        for name in ("ab-copy-test", "ab-copy-empty", "ab-copy-test+ab-copy-top", "ab-copy-top"):
            shutil.rmtree(os.path.join(root, "ablations", "ab", name), ignore_errors=True)


def test_every_kept_patch_applies_to_the_kernels():
    """ablations/patches/ holds kernel changes kept for a later A/B; each must still apply to
    kernels/ as it is (a change to the kernels' context lines means a rebase)."""
    import glob
    import subprocess

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    patches = sorted(glob.glob(os.path.join(root, "ablations", "patches", "*.patch")))
    assert patches
    for patch in patches:
        check = subprocess.run(["git", "apply", "--check", "--include=kernels/*", patch],
                               cwd=root, capture_output=True, text=True)
        assert check.returncode == 0, f"{os.path.basename(patch)}: {check.stderr}"


def test_launch_tail_model_starts_programs_in_order_on_the_first_free_slot():
    """ablations/probes/launch_tail.py: a long program started last runs alone at the end; started
    first, it overlaps the short ones. The heaviest-first launch ranks every head's programs
    alike, the longest first, each kind alternating."""
    tail = _ablations_script("launch_tail")
    assert tail.makespan([1, 1, 1, 3], sms=2, slots=1) == 4
    assert tail.makespan([3, 1, 1, 1], sms=2, slots=1) == 3
    assert tail.makespan([2, 2], sms=1, slots=2, solo=2.0) == 2  # both share the SM
    assert tail.makespan([2], sms=1, slots=2, solo=2.0) == 1
    columns, rows = tail.program_steps("bwd", 256, 32, 128, dq_cost=0.5)
    assert (columns, rows) == ([8, 4], [2.0, 4.0])
    assert tail.launch(columns, rows, heads=3, window=2) == [8, 8, 4, 4, 4, 4, 2, 2] + [8, 4, 4, 2]
    assert tail.launch(columns, rows, heads=2, window=None) == [8, 4, 2.0, 4.0] * 2
    assert tail.program_steps("fwd", 256, 64, 64, 1.0) == ([], [1, 2, 3, 4])
    assert tail.launch([], [1, 2, 3], heads=1, window=1) == [3, 2, 1]
    # the chassis's backward: column blocks only, each window's heads rank by rank
    assert tail.program_steps("hopper-bwd", 256, 64, 128, 1.0) == ([4, 2], [])
    assert tail.launch([4, 2], [], heads=3, window=2) == [4, 4, 2, 2, 4, 2]


def test_compare_kernels_puts_every_version_first_in_turn():
    """ablations/probes/compare_kernels.py rotates the order of the versions each round, so no
    version is always measured first."""
    compare = _ablations_script("compare_kernels")
    names = ["a", "b", "c"]
    orders = [compare.rotated(names, r) for r in range(4)]
    assert orders == [["a", "b", "c"], ["b", "c", "a"], ["c", "a", "b"], ["a", "b", "c"]]
    assert {order[0] for order in orders[:3]} == set(names)


def _head_dims_run(tmp_path):
    """A made-up head_dims.py run: d 96 and 128 at 2k, full, both modes; sdpa-cudnn refuses
    the backward at 96. Times chosen so that a head at 96 costs 0.9 of a head at 128."""
    def cell(d, heads, ms_fa2, ms_flash):
        return dict(cell=dict(batch=8, heads_q=heads, heads_kv=heads, seqlen=2048, head_dim=d,
                              dtype="bfloat16", causal=False),
                    ms={"fa2": {"fwd": ms_fa2, "fwd+bwd": 4 * ms_fa2},
                        "sdpa-flash": {"fwd": ms_flash, "fwd+bwd": 4 * ms_flash},
                        "sdpa-cudnn": {"fwd": ms_flash, "fwd+bwd": None if d == 96 else 1.0}},
                    errors={})
    data = dict(provenance=dict(gpu="NVIDIA H200", torch="2.11", triton="3.6.0", git_commit="abc",
                                date="2026-12-02", command="head_dims.py --out x"),
                matmul_tflops=800.0, modes=["fwd", "fwd+bwd"], budget_s=190.0,
                cells=[cell(128, 16, 1.0, 1.2), cell(96, 21, 0.9 * 21 / 16, 1.0)],
                not_timed=["b2-h16-s8192-d128-bfloat16-full"])
    path = tmp_path / "head_dims.json"
    path.write_text(json.dumps(data))
    return path


def test_head_dims_probe_renders_a_saved_run_and_the_padding_cost(tmp_path, capsys, monkeypatch):
    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[1] / "ablations" / "probes"))
    probe = _ablations_script("head_dims")
    assert probe.main(["--render", str(_head_dims_run(tmp_path))]) == 0
    out = capsys.readouterr().out
    assert out.startswith("Measured on NVIDIA H200") and "bf16 matmul 800 TFLOP/s" in out
    # d=128, 2k, full: 4 * 8 * 16 * 2048^2 * 128 flop in 1 ms; FA2 1.2x sdpa-flash
    assert "| b8-h16-s2048-d128-bfloat16-full | fwd | 275 | 229 | 229 | 1.20x |" in out
    assert "| b8-h21-s2048-d96-bfloat16-full | fwd+bwd |" in out and "| n/a | 0.85x |" in out
    assert "Not timed (budget of 190 s spent): b2-h16-s8192-d128-bfloat16-full." in out
    (fwd, both) = probe.padding_rows(json.loads((tmp_path / "head_dims.json").read_text())["cells"])
    assert (fwd["mode"], both["mode"]) == ("fwd", "fwd+bwd")
    assert abs(fwd["per_head_ratio"] - 0.9) < 1e-12 and fwd["flop_model"] == 0.75
    assert "| 96 | 128 | 2048 | full | fwd | 0.90 | 0.75 | +20% |" in out


def test_head_dims_probe_arguments(monkeypatch):
    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[1] / "ablations" / "probes"))
    probe = _ablations_script("head_dims")
    args = probe.parse_args([])
    assert args.head_dims == ((128, 128), (96, 96), (192, 128), (256, 256), (192, 192))
    assert args.seqlens == (4096, 8192) and args.modes == ("fwd",) and args.budget_s == 190
    quick = probe.parse_args(["--quick", "--seqlens", "4096"])
    assert (quick.head_dims, quick.seqlens, quick.modes) == (((128, 128), (96, 96)), (2048,),
                                                             ("fwd",))
    assert probe.parse_args(["--head-dims", "40,192/128", "--modes", "fwd,fwd+bwd"]).head_dims == (
        (40, 40), (192, 128))
    cells = probe.cells(((96, 96),), (2048, 8192))
    assert [str(c) for c in cells] == ["b8-h21-s2048-d96-bfloat16-full",
                                       "b8-h21-s2048-d96-bfloat16-causal",
                                       "b2-h21-s8192-d96-bfloat16-full",
                                       "b2-h21-s8192-d96-bfloat16-causal"]
    (mla, _) = probe.cells(((192, 128),), (4096,))
    assert str(mla) == "b4-h10-s4096-d192/128-bfloat16-full" and mla.dv == 128
    assert mla.flops("fwd") == 2.0 * 4 * 10 * 4096 ** 2 * (192 + 128)
    for bad in (["--modes", "bwd"], ["--head-dims", "512"], ["--head-dims", "64/300"]):
        with pytest.raises(SystemExit):
            probe.parse_args(bad)


def test_fa1_dram_model_and_its_comparison_with_nsight_computes_raw_page(tmp_path):
    """ablations/probes/fa1_dram.py: D48's model with FA1's splits (each split reads K and V
    once) and its table against a made-up ncu raw page (base units, a units row, another
    kernel between)."""
    probe = _ablations_script("fa1_dram")
    n, d, bc = 2048, 128, 256
    tiles = n // bc
    one_split = 4 * n * d + 2 * n * d * tiles + 2 * (tiles - 1) * (4 * n * d + 16 * n) + 2 * n * d
    assert probe.model_bytes(n, d, 1, bc, 1) == one_split
    assert probe.model_bytes(n, d, 3, bc, 2) - 3 * one_split == 3 * 4 * n * d  # K, V again
    model = tmp_path / "model.json"
    model.write_text(json.dumps([{"cell": "c1", "block_n": bc, "splits": 1,
                                  "model_bytes": 2_000_000_000},
                                 {"cell": "c2", "block_n": bc, "splits": 8,
                                  "model_bytes": 4_000_000_000}]))
    page = tmp_path / "ncu.csv"
    page.write_text("\n".join([
        "==PROF== Connected to process",
        '"ID","Kernel Name","dram__bytes_read.sum","dram__bytes_write.sum"',
        '"","","byte","byte"',
        '"0","_hopper_attn_fwd","1,500,000,000","600,000,000"',
        '"1","void at::native::vectorized_elementwise_kernel","5","5"',
        '"2","_hopper_attn_fwd","3,000,000,000","1,000,000,000"']))
    assert probe.measured(page) == [2_100_000_000, 4_000_000_000]
    table = probe.compare(page, model).splitlines()
    assert table[2].endswith("| 2.00 | 2.10 | 1.05 |") and table[3].endswith("| 1.00 |")

PROBES = Path(__file__).resolve().parents[1] / "ablations" / "probes"


@pytest.mark.parametrize("name", sorted(p.name for p in PROBES.iterdir() if p.is_file()))
def test_every_probe_still_runs(name):
    """Every file of ablations/probes/ runs: a script prints its usage with --help and exits 0
    (a shell script parses under `bash -n` first); a module without a main, a library of the
    probes, imports and is imported by one of them. So a probe whose imports or arguments went
    stale fails here, not on the device."""
    import subprocess
    import sys

    path = PROBES / name
    assert path.suffix in (".py", ".sh"), f"{name}: a probe is a Python or shell script"
    source = path.read_text()
    env = dict(os.environ, TRITON_INTERPRET="1")
    if path.suffix == ".sh":
        assert subprocess.run(["bash", "-n", str(path)]).returncode == 0
        command = ["bash", str(path), "--help"]
    elif 'if __name__ == "__main__":' in source:
        command = [sys.executable, str(path), "--help"]
    else:
        _ablations_script(path.stem)
        users = [p.name for p in PROBES.glob("*.py")
                 if f"from {path.stem} import" in p.read_text()]
        assert users, f"{name} has no main and no probe imports it"
        return
    run = subprocess.run(command, capture_output=True, text=True, timeout=120, env=env,
                         cwd=PROBES.parents[1])
    assert run.returncode == 0, f"{name} --help: {run.stderr[-2000:]}"
    assert "usage" in run.stdout.lower() or run.stdout.startswith("Question"), run.stdout[:500]


def test_bound_widening_compares_the_allowed_errors_of_two_bounds():
    """ablations/probes/bound_widening.py (D109): a bound against itself widens nothing; against
    one without terms (the pass rule alone) it widens, never narrows."""
    from fa2check.core.problems import Problem
    from properties import extreme_logits

    probe = _ablations_script("bound_widening")
    problem = Problem(1, 2, 1, 9, 7, 16, "bfloat16", True, seed=1)
    same = probe.widening(extreme_logits, extreme_logits, problem, "near-duplicate-keys")
    assert same == {name: (1.0, 1.0) for name in ("dq", "dk", "dv")}

    class PassRuleOnly:
        @staticmethod
        def allowance(case, ref):
            return {name: 0.0 for name in ("dq", "dk", "dv")}
    wider = probe.widening(PassRuleOnly, extreme_logits, problem, "near-duplicate-keys")
    assert all(1.0 <= median <= largest and largest > 1.0 for median, largest in wider.values())
