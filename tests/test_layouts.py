"""The layout report (fa2check.layouts): its TTGIR parser, and what split_q changes in the
forward kernel compiled for sm_90.

The compiles run in a subprocess without TRITON_INTERPRET, as in test_compile_gate.py. With a
warm ~/.triton/cache this file takes about 15 s on 2 cores; cold about 30 s (split-K compiles
slowly).
"""
from __future__ import annotations

import textwrap

import pytest

from compile_cli import run_cli
from fa2check.inspect.layouts import LayoutParseError, parse_dots, parse_layout_aliases, parse_reductions


# Lines as Triton 3.6 prints them for the split-K forward, shortened; 8 warps on 64 rows
ALIASES = textwrap.dedent("""\
    #blocked = #ttg.blocked<{sizePerThread = [1, 8], threadsPerWarp = [4, 8], warpsPerCTA = [8, 1], order = [1, 0]}>
    #linear = #ttg.linear<{register = [[0, 0, 1]], lane = [[0, 0, 2]], warp = [[16, 0, 0], [32, 0, 0], [0, 0, 0]], block = []}>
    #loc = loc("forward.py":178:0)
    #mma = #ttg.nvidia_mma<{versionMajor = 3, versionMinor = 0, warpsPerCTA = [8, 1], instrShape = [16, 32, 16]}>
    #mma1 = #ttg.nvidia_mma<{versionMajor = 2, versionMinor = 0, warpsPerCTA = [8, 1, 1], instrShape = [1, 16, 8]}>
    #shared = #ttg.nvmma_shared<{swizzlingByteWidth = 128, transposed = false, elementBitWidth = 16}>
    #smem = #ttg.shared_memory
    """)
BODY = textwrap.dedent("""\
    module attributes {"ttg.num-warps" = 8 : i32} {
      %s = ttng.warp_group_dot %q_51, %kT_150, %cst_9 {isAsync = true} : !ttg.memdesc<64x128xbf16, #shared, #smem> * !ttg.memdesc<128x64xbf16, #shared, #smem, mutable> -> tensor<64x64xf32, #mma> loc(#loc322)
      %s_152:3 = ttng.warp_group_dot_wait %s, %q_51, %kT_150 {pendings = 0 : i32} : tensor<64x64xf32, #mma>, !ttg.memdesc<64x128xbf16, #shared, #smem> loc(#loc322)
      %m_s = "tt.reduce"(%s3) <{axis = 2 : i32}> ({
      ^bb0(%m_s_197: f32 loc(callsite(#loc1 at #loc321)), %m_s_198: f32 loc(callsite(#loc1 at #loc321))):
        %m_s_199 = arith.maxnumf %m_s_197, %m_s_198 : f32 loc(#loc436)
        tt.reduce.return %m_s_199 : f32 loc(#loc413)
      }) : (tensor<64x4x16xf32, #linear>) -> tensor<64x4xf32, #ttg.slice<{dim = 2, parent = #linear}>> loc(#loc413)
      %m_new = "tt.reduce"(%m_s) <{axis = 1 : i32}> ({
      ^bb0(%m_new_197: f32 loc(unknown), %m_new_198: f32 loc(unknown)):
        %m_new_199 = arith.maxnumf %m_new_197, %m_new_198 : f32 loc(#loc438)
        tt.reduce.return %m_new_199 : f32 loc(#loc417)
      }) : (tensor<64x4xf32, #ttg.slice<{dim = 2, parent = #linear}>>) -> tensor<64xf32, #ttg.slice<{dim = 1, parent = #ttg.slice<{dim = 2, parent = #linear}>}>> loc(#loc417)
      %o_s_163 = tt.dot %o_s_161, %v3_162, %cst_10 : tensor<4x64x16xbf16, #ttg.dot_op<{opIdx = 0, parent = #mma1, kWidth = 2}>> * tensor<4x16x128xbf16, #ttg.dot_op<{opIdx = 1, parent = #mma1, kWidth = 2}>> -> tensor<4x64x128xf32, #mma1> loc(#loc334)
      %pv_176 = "tt.reduce"(%pv_175) <{axis = 0 : i32}> ({
      ^bb0(%pv_196: f32 loc(unknown), %pv_197: f32 loc(unknown)):
        %pv_198 = arith.addf %pv_196, %pv_197 : f32 loc(#loc443)
        tt.reduce.return %pv_198 : f32 loc(#loc424)
      }) : (tensor<4x64x128xf32, #mma1>) -> tensor<64x128xf32, #ttg.slice<{dim = 0, parent = #mma1}>> loc(#loc424)
      %s_2 = ttng.warp_group_dot %q_51, %kT_151, %cst_9 {isAsync = true} : !ttg.memdesc<64x128xbf16, #shared, #smem> * !ttg.memdesc<128x64xbf16, #shared, #smem, mutable> -> tensor<64x64xf32, #mma> loc(#loc359)
    }
    """)


def test_parser_reads_each_product_once_with_its_layout():
    s, pv = parse_dots(ALIASES + BODY)  # the second S (the masked loop's) is the same product
    assert (s.role, s.op, s.shape, s.element) == ("S", "ttng.warp_group_dot", [64, 64], "f32")
    assert (s.kind, s.mma_version, s.warps_per_cta, s.instr_shape) == \
        ("nvidia_mma", 3, [8, 1], [16, 32, 16])
    assert s.copies == 2  # 8 warps of 16 rows on 64 rows
    assert (pv.role, pv.name, pv.shape, pv.mma_version, pv.warps_per_cta) == \
        ("PV", "o_s", [4, 64, 128], 2, [8, 1, 1])
    assert pv.summary() == "PV: mma v2 warps [8,1,1] instr [1,16,8] 4x64x128 x2 copies"


def test_parser_reads_reductions_and_the_warps_along_their_axis():
    found = {r.name: r for r in parse_reductions(ALIASES + BODY)}
    assert list(found) == ["m_s", "m_new", "pv"]
    assert (found["m_s"].combine, found["m_s"].axis, found["m_s"].warps_on_axis) == \
        ("arith.maxnumf", 2, 1)
    # a slice of a slice: the rows keep the linear layout's 4 distinct warps, the slices none
    assert found["m_new"].shape == [64, 4] and found["m_new"].warps_on_axis == 1
    assert found["m_new"].layout.startswith("slice(2) of linear")
    assert (found["pv"].combine, found["pv"].axis, found["pv"].warps_on_axis) == \
        ("arith.addf", 0, 4)  # 8 warps on 4 slices: 4 distinct


def test_parser_finds_no_product_where_there_is_none():
    body = BODY.splitlines()
    no_dots = "\n".join(line for line in body if "dot" not in line)
    assert parse_dots(ALIASES + no_dots) == []
    assert parse_reductions(ALIASES + no_dots)  # still read


@pytest.mark.parametrize("bad, message", [
    ("#mma = #ttg.nvidia_mma<{versionMajor = 3, versionMinor = 0, warpsPerCTA = [4, }>",
     "no readable warpsPerCTA"),
    ("#mma = #ttg.nvidia_mma<{versionMajor = 3, warpsPerCTA = [4, 1]", "malformed layout alias"),
], ids=["bad-list", "unclosed"])
def test_malformed_alias_is_an_error(bad, message):
    with pytest.raises(LayoutParseError, match=message):
        parse_layout_aliases(ALIASES.replace(ALIASES.splitlines()[3], bad))


def test_unknown_layout_alias_is_an_error():
    with pytest.raises(LayoutParseError, match="unknown layout alias #mma7"):
        parse_dots(ALIASES + BODY.replace("#mma1>", "#mma7>"))


def layouts_cli(tmp_path, *args, interpret=False):
    """Run `python -m fa2check.layouts ARGS --json`; returns (process, reports)."""
    return run_cli("fa2check.layouts", tmp_path, *args, interpret=interpret)


@pytest.fixture(scope="module")
def fa2_and_split_k(tmp_path_factory):
    """The FA2 forward and the same with split_q off (split-K), bf16, d=64, non-causal."""
    proc, reports = layouts_cli(tmp_path_factory.mktemp("layouts"), "--backend", "triton",
                                "--variant", "fa2",
                                "--variant=+defer+seqpar-splitq", "--dtype", "bfloat16",
                                "--head-dim", "64", "--no-causal", "--jobs", "2")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    by_variant = {r["compile"]["variant"]: r for r in reports}
    return proc, by_variant["+defer+seqpar+splitq"], by_variant["+defer+seqpar-splitq"]


def products(report):
    return {d["name"]: d for d in report["dots"]}


def test_split_q_keeps_the_layout_of_s(fa2_and_split_k):
    _, split_q, split_k = fa2_and_split_k
    s = products(split_q)["s"]
    warps = split_q["compile"]["num_warps"]
    assert s["kind"] == "nvidia_mma" and s["mma_version"] == 3  # Hopper's wgmma
    assert s["shape"] == [128, 64] and s["warps_per_cta"] == [warps, 1]  # warps split the rows
    assert products(split_k)["s"] == s


def test_split_k_computes_p_v_as_a_batched_mma_v2_with_the_warps_on_the_key_slices(
        fa2_and_split_k):
    _, split_q, split_k = fa2_and_split_k
    warps, slices = split_k["compile"]["num_warps"], split_k["compile"]["key_slices"]
    pv = products(split_q)["pv"]  # split-Q: one (BLOCK_M, D) wgmma accumulator, rows split
    assert (pv["shape"], pv["mma_version"], pv["warps_per_cta"]) == ([128, 64], 3, [warps, 1])
    o_s = products(split_k)["o_s"]  # split-K: (KEY_SLICES, BLOCK_M, D), no wgmma for 3-D dots
    assert (o_s["shape"], o_s["mma_version"]) == ([slices, 128, 64], 2)
    assert o_s["warps_per_cta"] == [warps, 1, 1]  # one warp per key slice, as FA1's split-K
    assert "pv" not in products(split_k)


def test_only_split_k_reduces_across_warps(fa2_and_split_k):
    _, split_q, split_k = fa2_and_split_k
    in_q = {r["name"]: r for r in split_q["reductions"]}
    in_k = {r["name"]: r for r in split_k["reductions"]}
    # the row max and row sum stay inside a warp either way
    assert in_q["m_new"]["warps_on_axis"] == in_q["l_tile"]["warps_on_axis"] == 1
    assert in_k["m_new"]["warps_on_axis"] == in_k["l_tile"]["warps_on_axis"] == 1
    assert all(r["warps_on_axis"] == 1 for r in split_q["reductions"])
    merge = in_k["pv"]  # the merge of the slices' partial outputs
    assert merge["axis"] == 0 and merge["warps_on_axis"] == split_k["compile"]["key_slices"]


def test_cli_says_what_split_q_changes(fa2_and_split_k):
    proc, split_q, _ = fa2_and_split_k
    s, warps = products(split_q)["s"], split_q["compile"]["num_warps"]
    assert f"S: the same with and without split_q: {s['layout']}" in proc.stdout
    assert f"PV: warpsPerCTA [{warps},1] with split_q, [{warps},1,1] without" in proc.stdout
    assert "2/2 compiled for sm_90" in proc.stdout


def test_cli_one_case_under_the_interpreter_writes_json(tmp_path, fa2_and_split_k):
    proc, reports = layouts_cli(tmp_path, "--variant", "fa2", "--head-dim", "64", "--jobs", "1",
                                interpret=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    report, gluon = reports  # both backends' forwards by default
    assert gluon["backend"] == "gluon" and gluon["compile"]["error"] is None
    assert report["backend"] == "triton" and report["compile"]["error"] is None
    assert report["compile"]["registers"] > 0 and report["compile"]["shared_bytes"] > 0
    assert [d["name"] for d in report["dots"]] == ["s", "pv"]
    assert "S: mma v3 warps [4,1]" in proc.stdout


def test_cli_fails_on_a_case_that_does_not_compile(tmp_path):
    # every head_dim up to 256 compiles (docs/decisions.md D49); at 2048 the forward's tiles need
    # more shared memory than an sm_90 block may have (the Gluon backend does not take 2048)
    proc, reports = layouts_cli(tmp_path, "--variant", "fa2", "--head-dim", "2048", "--jobs", "1")
    assert proc.returncode != 0 and "FAILED" in proc.stdout
    assert len(reports) == 1 and "shared memory" in reports[0]["compile"]["error"]


@pytest.fixture(scope="module")
def gluon_fa2_and_split_k(tmp_path_factory):
    """The Gluon forward, FA2 and split-K (split_q off), bf16, d=64, causal."""
    proc, reports = layouts_cli(tmp_path_factory.mktemp("gluon"), "--backend", "gluon",
                                "--variant", "fa2", "--variant=+defer+seqpar-splitq",
                                "--head-dim", "64", "--causal", "--jobs", "2")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    by_variant = {r["compile"]["variant"]: r for r in reports}
    return proc, by_variant["+defer+seqpar+splitq"], by_variant["+defer+seqpar-splitq"]


def test_gluon_split_q_puts_the_warps_on_the_rows_and_split_k_on_the_keys(
        gluon_fa2_and_split_k):
    _, split_q, split_k = gluon_fa2_and_split_k
    warps = split_q["compile"]["num_warps"]
    for report, stated in ((split_q, [1, warps, 1]), (split_k, [warps, 1, 1])):
        assert report["backend"] == "gluon"
        for role in ("s", "pv_s"):  # (slices, rows, keys per slice or D)
            dot = products(report)[role]
            assert (dot["mma_version"], dot["warps_per_cta"]) == (2, stated)
    assert products(split_k)["s"]["shape"][0] == split_k["compile"]["num_warps"]  # a slice each


def test_gluon_split_k_reduces_the_statistics_and_outputs_across_warps(gluon_fa2_and_split_k):
    _, split_q, split_k = gluon_fa2_and_split_k
    softmax = ("m_new", "l_tile", "pv")
    assert all(r["warps_on_axis"] == 1 for r in split_q["reductions"] if r["name"] in softmax)
    across = {r["name"] for r in split_k["reductions"]
              if r["warps_on_axis"] > 1 and r["name"] in softmax}
    assert across == {"m_new", "l_tile", "pv"}  # row max, row sum, partial outputs
    assert all(r["axis"] == 0 for r in split_k["reductions"] if r["warps_on_axis"] > 1
               and r["name"] in softmax)  # the slice axis: one slice per warp


def test_warp_partition_tells_the_splits_apart(gluon_fa2_and_split_k, fa2_and_split_k):
    from fa2check.inspect.layouts import DotLayout, LayoutReport, ReductionLayout, warp_partition

    def rebuilt(report):
        return LayoutReport(report["backend"], None, [DotLayout(**d) for d in report["dots"]],
                            [ReductionLayout(**r) for r in report["reductions"]])

    proc, gluon_q, gluon_k = gluon_fa2_and_split_k
    assert warp_partition(rebuilt(gluon_q)) == "rows"
    assert warp_partition(rebuilt(gluon_k)) == "keys"
    assert "gluon +defer+seqpar-splitq bfloat16 D=64: the warps split S along its keys" in proc.stdout
    # plain Triton's split-K keeps S on the rows: the check is not fooled by the flag's name
    _, triton_q, triton_k = fa2_and_split_k
    assert warp_partition(rebuilt(triton_q)) == "rows"
    assert warp_partition(rebuilt(triton_k)) == "mixed"
