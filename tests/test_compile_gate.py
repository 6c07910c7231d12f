"""The sm_90 compile gate (fa2check.compile_gate): every kernel must build for Hopper.

The compiles run in a subprocess without TRITON_INTERPRET: under the interpreter the kernels
are not JITFunctions and cannot be compiled. With an empty Triton cache this file takes about
2 minutes on 2 cores (the split-K variants are the slow ones); with a warm ~/.triton/cache about
40 s. The full gate (768 cases) took 685 s here, so the tests compile a subset.
"""
from __future__ import annotations

import os
import re

import pytest

from compile_cli import ROOT, run_cli
from fa2check.inspect.compile_gate import (DEFAULT_HEAD_DIMS, SPECS, _forward_specialization,
                                           make_case, partition_registers, ptxas_usage,
                                           sync_counts, sync_label)
from kernels import Variant
from kernels.forward import _attn_fwd
from kernels.plan.hopper_forward import shared_bytes

DTYPES = ("float16", "bfloat16", "float32")


def gate(tmp_path, *args, interpret=False):
    """Run `python -m fa2check.compile_gate ARGS`; returns (process, reports from --json)."""
    return run_cli("fa2check.compile_gate", tmp_path, *args, interpret=interpret)


def by_case(reports):
    return {(r["kernel"], r["variant"], r["dtype"], r["head_dim"], r["causal"]): r for r in reports}


@pytest.fixture(scope="module")
def all_variants_bf16_d64(tmp_path_factory):
    # the Hopper chassis has tests of its own (test_hopper_chassis_in_the_gate, and
    # tests/test_hopper_backward.py for its backward)
    kernels = [arg for name in SPECS if name not in ("hopper_attn_fwd", "hopper_attn_bwd")
               for arg in ("--kernel", name)]
    proc, reports = gate(tmp_path_factory.mktemp("gate"), "--dtype", "bfloat16", "--head-dim", "64",
                         *kernels)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return by_case(reports)


@pytest.fixture(scope="module")
def fa2_all_shapes(tmp_path_factory):
    proc, reports = gate(tmp_path_factory.mktemp("gate"), "--kernel", "attn_fwd", "--variant", "fa2",
                         "--causal")
    assert reports, proc.stdout + proc.stderr
    return proc, by_case(reports)


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("variant", Variant.all(), ids=str)
def test_every_variant_compiles_for_sm90(all_variants_bf16_d64, variant, causal):
    r = all_variants_bf16_d64[("attn_fwd", str(variant), "bfloat16", 64, causal)]
    assert r["error"] is None
    assert r["registers"] > 0 and r["shared_bytes"] > 0
    if variant.split_q:
        assert r["wgmma"], "bf16 split-Q should use Hopper's warpgroup MMA"


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("variant", Variant.all(), ids=str)
def test_every_backward_variant_compiles_for_sm90(all_variants_bf16_d64, variant, causal):
    r = all_variants_bf16_d64[("attn_bwd", str(variant), "bfloat16", 64, causal)]
    assert r["error"] is None
    assert r["registers"] > 0 and r["shared_bytes"] > 0 and r["wgmma"]
    # split-K's default backward tiles (kernels/plan/config.py, docs/decisions.md D50) do not spill
    assert variant.split_q or r["spill_stores"] == r["spill_loads"] == 0, r


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("head_dim", DEFAULT_HEAD_DIMS)
def test_fa2_compiles_for_every_head_dim_and_dtype(fa2_all_shapes, dtype, head_dim):
    proc, reports = fa2_all_shapes
    r = reports[("attn_fwd", str(Variant()), dtype, head_dim, True)]
    assert r["error"] is None, proc.stdout
    assert r["registers"] > 0 and r["shared_bytes"] > 0
    if dtype != "float32":
        assert r["wgmma"]


@pytest.mark.parametrize("override, message", [
    (["--head-dim", "64", "--block-m", "48"], "arange's range must be a power of 2"),
    (["--head-dim", "128", "--block-n", "256"], "bytes of shared memory"),  # 416 KiB of it
], ids=["block_m=48", "too-much-smem"])
def test_gate_fails_on_a_case_that_cannot_run_on_sm90(tmp_path, override, message):
    # also run with TRITON_INTERPRET=1: the gate must rerun itself without it
    args = ["--kernel", "attn_fwd", "--variant", "fa2", "--dtype", "bfloat16", "--causal", *override]
    proc, reports = gate(tmp_path, *args, interpret=True)
    assert proc.returncode != 0
    assert "FAILED" in proc.stdout and message in proc.stdout
    assert len(reports) == 1 and message in reports[0]["error"]


def test_forward_specialization_matches_the_launcher():
    """Contiguous launches: innermost strides are constexpr 1, pointers 16-byte aligned."""
    case = make_case(Variant(), "bfloat16", 64, True)
    signature, constexprs, attrs = _forward_specialization(_attn_fwd, case)
    assert list(signature) == _attn_fwd.arg_names
    assert signature["Q"] == "*bf16" and signature["LSE"] == "*fp32"
    assert signature["qk_scale"] == "fp32" and signature["seqlen_q"] == "i32"
    assert signature["stride_qd"] == "constexpr" and constexprs["stride_qd"] == 1
    assert constexprs["HEAD_DIM"] == 64 and constexprs["IS_CAUSAL"] is True
    assert attrs[(_attn_fwd.arg_names.index("Q"),)] == [["tt.divisibility", 16]]
    assert (_attn_fwd.arg_names.index("seqlen_k"),) not in attrs


def test_the_launcher_passes_the_register_cap(monkeypatch):
    """attn_fwd hands TileConfig.max_registers to both causal launches as Triton's maxnreg
    (None for no cap), the option the compile gate compiles them with."""
    import torch

    from kernels import TileConfig, forward

    launches = []

    class Recorder:
        def __getitem__(self, grid):
            return lambda *args, **kwargs: launches.append(kwargs)

    monkeypatch.setattr(forward, "_ATTN_FWD", Recorder())  # the launch (kernels/launch_cache.py)
    q = torch.zeros(1, 1, 16, 16)
    for cap, expected in ((128, 128), (0, None)):
        launches.clear()
        forward.attn_fwd(q, q, q, True, 0.25, Variant(), TileConfig(16, 16, max_registers=cap))
        assert [launch["maxnreg"] for launch in launches] == [expected, expected]


def test_hopper_chassis_in_the_gate(tmp_path):
    """The chassis's FA1 schedule (split-Q and split-K, causal, d=64 and 128 bf16) compiles in
    the gate at heuristic_config's hopper tiles with wgmma, no spills (D58; split-Q spilled 76
    bytes here before; at d=128 split-K's 256 keys spilled 20, and without defer_norm split-Q
    24-28, before FA1's step took an opaque K/V slot) but D105's: at d=128 split-K the packed
    test of V before the causal pass spills 12 bytes stored, 20 loaded, outside the row-block
    loop, and the A/B found it faster than the pass it skips; three partitions (the default
    consumer, the other consumer at 232 in both splits, split-K's at 200 before, the
    producer) and one CTA an SM."""
    proc, reports = gate(tmp_path, "--kernel", "hopper_attn_fwd", "--dtype", "bfloat16",
                         "--head-dim", "64,128", "--causal", "--variant=+defer-seqpar+splitq",
                         "--variant=+defer-seqpar-splitq")
    assert proc.returncode == 0 and len(reports) == 4, proc.stdout + proc.stderr
    for r in reports:
        test_first_spill = "-splitq" in r["variant"] and r["head_dim"] == 128  # D105
        stores, loads = (12, 20) if test_first_spill else (0, 0)
        assert r["wgmma"] and r["spill_stores"] <= stores and r["spill_loads"] <= loads, r
        assert r["partition_registers"] == [216, 232, 56], r
        assert r["launch_warps"] == 12 and r["ctas_per_sm"] == 1, r
        # heuristic_config's FA1 tiles: split-K takes FA1's own 256 keys (D67)
        assert r["block_n"] == (128 if "+splitq" in r["variant"] else 256), r
        assert r["num_stages"] == 1, r
        # the tile space's shared-memory model covers the compiled kernel but for barriers and
        # alignment (SHARED_LIMIT's 1024 bytes); causal's scratch was 2-4 KB short before
        v = Variant.parse(r["variant"])
        model = shared_bytes(r["head_dim"], r["block_n"], r["num_stages"], v.split_q,
                             v.seq_parallel, causal=True)
        assert 0 <= r["shared_bytes"] - model <= 1024, (r, model)


def test_partition_registers_share_the_launchs_registers():
    """The default partition gets what the workers leave of .maxnreg over .reqntid threads,
    at most 256 (the chassis's seq_parallel split-Q: 216; split-K: 248)."""
    ptx = ".reqntid 384\n.maxnreg 168\n"
    assert partition_registers(ptx, "requestedRegisters = array<i32: 232, 56>") == (216, 232, 56)
    assert partition_registers(ptx, "requestedRegisters = array<i32: 200, 56>") == (248, 200, 56)
    assert partition_registers(ptx, "requestedRegisters = array<i32: 200, 24>") == (256, 200, 24)
    assert partition_registers(ptx, "no warp_specialize") == ()


def test_ptxas_log_parsing():
    log = ("ptxas info    : Function properties for _attn_fwd\n"
           "    208 bytes stack frame, 212 bytes spill stores, 348 bytes spill loads\n"
           "ptxas info    : Used 254 registers, used 1 barriers, 208 bytes cumulative stack size\n")
    assert ptxas_usage(log) == dict(registers=254, spill_stores=212, spill_loads=348,
                                    stack_bytes=208, wgmma_serialized=False)
    # the note as ptxas printed it for a d=128 forward tried with scores ahead (D12)
    note = ("ptxas info    : (C7515) Potential Performance Loss: wgmma.mma_async instructions are "
            "serialized due to non wgmma instructions defining accumulator registers of a wgmma "
            "between start and end of the pipeline stage in the function '_attn_fwd'\n")
    assert ptxas_usage(note + log)["wgmma_serialized"]


def test_sync_counts_read_waits_mbarriers_and_turns_from_ptx():
    """The gate's sync column (issue 36: each switch visible in the compiled code): wgmma waits
    by depth, mbarrier waits and arrives (an expect_tx is the producer's, not an arrive), named
    barriers by id and thread count; turns are those of 256 threads."""
    ptx = """
        wgmma.wait_group.sync.aligned 0;
        wgmma.wait_group.sync.aligned 1;
        wgmma.wait_group.sync.aligned 0;
        mbarrier.try_wait.parity.shared.b64 complete, [%r1], %r2;
        @%p1 mbarrier.arrive.shared::cta.b64 _, [%r3];
        @%p2 mbarrier.arrive.expect_tx.shared.b64 _, [%r4], 32768;
        bar.sync 	0, 128;
        barrier.sync 	1;
        bar.sync 8, 256; mov.u32 %r5, %r6;
        bar.arrive 9, 256; mov.u32 %r7, %r8;
        bar.arrive 9, 256; mov.u32 %r9, %r10;
    """
    counts = sync_counts(ptx)
    assert counts == dict(wgmma_waits={0: 2, 1: 1}, mbarrier_waits=1, mbarrier_arrives=1,
                          named={("bar.sync", 0, 128): 1, ("barrier.sync", 1, None): 1,
                                 ("bar.sync", 8, 256): 1, ("bar.arrive", 9, 256): 2})
    assert sync_label(counts) == "wait0 2 wait1 1, mbar 1/1, turns 3"


# the prologue of the REPAIR build that ptxas 12.8 got wrong (d=130 fp16, D115), trimmed:
# V's second chunk's descriptors for keys 16-63 came from UR8/UR9, which nothing had written
MISCOMPILED_PROLOGUE = """
        /*0040*/                   ULDC.64 UR4, c[0x0][0x250] ;        /* 0x0000940000047ab9 */
        /*0220*/                   UMOV UR4, 0x400 ;                  /* 0x0000040000047882 */
        /*0260*/                   ULDC UR7, c[0x0][0x290] ;          /* 0x0000a40000077ab9 */
        /*02a0*/                   USHF.L.U32 UR7, UR7, 0x6, URZ ;    /* 0x0000000607077899 */
        /*02e0*/                   UIADD3 UR8, UP0, UR8, 0x20, URZ ;  /* 0x0000002008087890 */
        /*0320*/                   UIADD3.X UR9, UR9, -0x3ffffff0, URZ, UP0, !UPT ;
        /*03e0*/                   UIADD3 UR12, UR4, 0xc000, URZ ;    /* 0x0000c00004127890 */
        /*0b40*/                   UIADD3.X UR7, UR9, URZ, URZ, UP0, !UPT ;
"""


def test_the_sass_check_finds_uniform_registers_read_before_written():
    """The gate's machine-code check (fa2check.inspect.sass): the miscompiled REPAIR prologue
    reads UR8 and UR9 unwritten; written first (ULDC.64, as a sound build loads them), nothing
    is flagged, and neither are reads by other units or of URZ."""
    from fa2check.inspect.sass import uninitialized_uniform_reads

    found = uninitialized_uniform_reads(MISCOMPILED_PROLOGUE)
    assert [(address, reg) for address, _, reg in found] == [("02e0", 8), ("0320", 9)]
    sound = MISCOMPILED_PROLOGUE.replace(
        "/*0040*/                   ULDC.64 UR4, c[0x0][0x250] ;",
        "/*0040*/                   ULDC.64 UR8, c[0x0][0x250] ;\n"
        "        /*0041*/                   ULDC.64 UR4, c[0x0][0x250] ;")
    assert uninitialized_uniform_reads(sound) == []
    others = """
        /*0010*/                   HGMMA.64x16x16.F32 R88, R108, gdesc[UR40].tnspB, R88 ;
        /*0020*/                   LDS.64 R146, [R144+UR40+0x34000] ;
        /*0030*/                   UIADD3 UR5, URZ, 0x1, URZ ;
"""
    assert uninitialized_uniform_reads(others) == []


def test_the_repair_launch_compiles_to_sound_machine_code_where_v_has_two_chunks(tmp_path):
    """The fuzz's GPU-only counterexample (tests/regressions/kernels.flash_attention-de8fdb9e37,
    d=130 fp16, -defer split-Q): REPAIR read keys 16-63 of V's second column chunk through
    descriptors built from unwritten uniform registers. Before D115's change the gate failed
    the REPAIR build of every split-Q variant at each of these head dims (chunks of 32+16,
    64+16, 64+32 and 128+16)."""
    proc, reports = gate(tmp_path, "--kernel", "attn_fwd_repair", "--variant", "fa2",
                         "--variant=-defer+seqpar+splitq", "--dtype", "float16",
                         "--head-dims", "40,72,96,130", "--causal", "--jobs", "2")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert len(reports) == 8 and all(r["error"] is None for r in reports), reports


def test_float32_d128_split_k_fits_when_seqlen_k_is_one(tmp_path):
    """Found by the H200 fuzz campaign: a call with seqlen_k == 1 (compiled as a constant) made
    3 pipeline stages of float32 d=128 tiles need 245760 bytes; float32 d>=128 now uses 2.
    That was seq_parallel off walking row blocks with the K/V tiles inner; since it runs FA1's
    schedule (K/V tiles outer, each loaded once) 3 stages need 147456 bytes there, and the
    case stays to keep the default within an sm_90 block."""
    args = ["--kernel", "attn_fwd", "--variant=-defer-seqpar-splitq", "--dtype", "float32",
            "--head-dim", "128", "--no-causal", "--length-one", "seqlen_k", "--jobs", "1"]
    proc, reports = gate(tmp_path, *args)
    assert proc.returncode == 0 and reports[0]["error"] is None, proc.stdout[-2000:]


def test_dq_atomics_in_the_loop_are_relaxed(tmp_path):
    """dQ in the loop with seq_parallel adds into a float32 buffer from many programs; each add
    must be a plain reduction (relaxed), not Triton's default acq_rel atomic, which puts a
    GPU-wide fence and an L1 invalidation around every add (seen in the sm_90 SASS)."""
    proc, reports = gate(tmp_path, "--kernel", "attn_bwd", "--dtype", "bfloat16", "--head-dim",
                         "64", "--causal", "--no-bwd-dq-pass", "--variant", "fa2",
                         "--variant=-defer-seqpar+splitq")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    atomics = {r["variant"]: r["atomics"] for r in reports}
    assert atomics == {"+defer+seqpar+splitq": "relaxed",
                       "-defer-seqpar+splitq": ""}  # one program owns a head's rows: no atomics


def test_causal_forward_without_nan_flags_compiles_lean(tmp_path):
    """nan_flags off: the main launch drops its epilogue's NaN reduction and REPAIR reads first
    output rows; both launches must still build for sm_90, the main one without spills, for
    the d=128 causal tiles tuning tries it on (tuning.CAUSAL_FWD_NAN_FLAGS_OFF)."""
    args = ["--variant", "fa2", "--dtype", "bfloat16", "--head-dim", "128", "--causal",
            "--block-m", "64", "--block-n", "64", "--num-warps", "4", "--num-stages", "3",
            "--tma", "--no-nan-flags"]
    proc, reports = gate(tmp_path, "--kernel", "attn_fwd", "--kernel", "attn_fwd_repair", *args)
    assert proc.returncode == 0, proc.stdout[-2000:]
    found = {r["kernel"]: r for r in reports}
    assert set(found) == {"attn_fwd", "attn_fwd_repair"}
    assert found["attn_fwd"]["choices"] == "tma,no-nan-flags"
    assert found["attn_fwd"]["spill_stores"] == 0


def test_a_register_cap_reaches_ptxas(tmp_path):
    """TileConfig.max_registers: FA2's d=64 causal TMA tile uses more than 96 registers
    (112 when measured), capped at 96 (tuning.REGISTER_CAPPED_FWD) it uses at most 96 in the
    main and the REPAIR launch, and the main launch spills nothing."""
    args = ["--kernel", "attn_fwd", "--kernel", "attn_fwd_repair", "--variant", "fa2",
            "--dtype", "bfloat16", "--head-dim", "64", "--causal", "--block-m", "64",
            "--block-n", "64", "--num-warps", "4", "--num-stages", "2", "--tma"]
    _, plain = gate(tmp_path, *args)
    proc, capped = gate(tmp_path, *args, "--max-registers", "96")
    assert proc.returncode == 0, proc.stdout[-2000:]
    plain = {r["kernel"]: r for r in plain}
    capped = {r["kernel"]: r for r in capped}
    assert plain["attn_fwd"]["registers"] > 96 and plain["attn_fwd"]["choices"] == "tma"
    for kernel in ("attn_fwd", "attn_fwd_repair"):
        assert capped[kernel]["registers"] <= 96
        assert capped[kernel]["choices"] == "tma,max-registers=96"
    assert capped["attn_fwd"]["spill_stores"] == 0


def test_a_run_into_a_log_shows_its_progress(fa2_all_shapes):
    """Not a terminal (CI, a device call): a line at each tenth of the cases, the last at N/N,
    where a progress bar would print nothing until the end."""
    proc, cases = fa2_all_shapes
    counts = [tuple(map(int, m.groups())) for m in
              re.finditer(r"compiling for sm_90: (\d+)/(\d+) in \d+ s", proc.stdout)]
    assert counts[-1] == (len(cases), len(cases)), proc.stdout[:2000]
    assert len(counts) == min(10, len(cases)) and counts == sorted(counts)


def test_sass_loops_finds_the_forwards_k_v_loops_in_real_sass():
    """ablations/probes/sass_loops.py on kernels compiled for sm_90: the forward's main launch has
    two inner loops that issue HGMMA, the unmasked key tiles and then the masked ones (the
    diagonal when causal, the ragged key tail either way), the masked one longer by its
    compares and selects, and ptxas wrote stall cycles into both."""
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    tile = "block_m=64,block_n=64,num_warps=4,num_stages=2"
    for mask in ([], ["--full"]):
        proc = subprocess.run([sys.executable, "ablations/probes/sass_loops.py", tile, *mask],
                              cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
        assert proc.returncode == 0, proc.stderr[-2000:]
        found = [(int(n), int(stall)) for n, stall in re.findall(
            r"loop at 0x[0-9a-f]+: (\d+) instructions, (\d+) stall cycles", proc.stdout)]
        assert len(found) == 2, proc.stdout
        (unmasked, unmasked_stalls), (masked, masked_stalls) = found
        assert masked > unmasked and unmasked_stalls > 0 and masked_stalls > 0, proc.stdout


def test_head_dims_are_given_as_a_list_or_one_by_one():
    from fa2check.inspect.compile_gate import parse_args

    assert parse_args(["--head-dims", "40,80,96", "--head-dim", "160"]).head_dim == [40, 80, 96, 160]
    for bad in ("40,x", "0"):
        with pytest.raises(SystemExit):
            parse_args(["--head-dims", bad])


def test_an_odd_head_dim_compiles_forward_and_backward_and_tabulates(tmp_path):
    """d=96 (padded to 128): FA2's forward and backward build for sm_90, and the register
    table shows both on FA2's row and the split-K row (the same backward)."""
    from fa2check.inspect.register_table import markdown

    proc, reports = gate(tmp_path, "--kernel", "attn_fwd", "--kernel", "attn_bwd", "--variant",
                         "fa2", "--dtype", "bfloat16", "--head-dims", "96", "--no-causal")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    cases = by_case(reports)
    fwd = cases[("attn_fwd", str(Variant()), "bfloat16", 96, False)]
    bwd = cases[("attn_bwd", str(Variant()), "bfloat16", 96, False)]
    assert fwd["registers"] > 0 and bwd["registers"] > 0 and fwd["wgmma"] and bwd["wgmma"]
    table = markdown(reports)
    assert f"| 96 | {Variant()} | {fwd['registers']}" in table, table


def test_v_with_its_own_head_dim_compiles_and_tabulates(tmp_path):
    """--head-dims 192/128: FA2's forward builds for sm_90 with q's head dim 192 and v's 128, and
    the register table's row is 192/128. Fails with gate_cases dropping v's head dim (the case
    then compiles at 192 alone and the row reads 192)."""
    from fa2check.inspect.register_table import markdown

    proc, reports = gate(tmp_path, "--kernel", "attn_fwd", "--variant", "fa2", "--dtype",
                         "bfloat16", "--head-dims", "192/128", "--no-causal")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (fwd,) = reports
    assert (fwd["head_dim"], fwd["head_dim_v"]) == (192, 128) and fwd["registers"] > 0
    # heuristic_config's chunked tile loads K through a descriptor a chunk (D62: boxes 128 and
    # 64 wide) and V through one; a box signature unlike the kernel's would not compile
    assert fwd["choices"] == "tma" and fwd["spill_stores"] == 0
    assert f"| 192/128 | {Variant()} | {fwd['registers']}" in markdown(reports)
    # the occupancy bound from this case's own compile facts, in the JSON and the console table
    from fa2check.inspect.compile_gate import ctas_per_sm
    assert fwd["ctas_per_sm"] == ctas_per_sm(fwd["registers"], fwd["num_warps"],
                                             fwd["shared_bytes"]) >= 1
    assert "CTAs/SM" in proc.stdout, proc.stdout


def test_register_table_names_spills_failures_and_each_variants_own_kernels():
    from fa2check.inspect.register_table import markdown

    def report(kernel, variant, registers, spills=0, error=None):
        return dict(kernel=kernel, variant=variant, dtype="bfloat16", head_dim=40, causal=False,
                    registers=registers, spill_stores=spills, spill_loads=2 * spills,
                    error=error)
    fa2, split_k = str(Variant()), str(Variant(split_q=False))
    table = markdown([report("attn_fwd", fa2, 255, 204), report("attn_fwd", split_k, 0, 0, "x"),
                      dict(report("attn_bwd", fa2, 168), wgmma=False),
                      report("attn_bwd", split_k, 240)])
    assert "| D | variant | attn_fwd | attn_bwd |" in table
    assert f"| 40 | {fa2} | 255, 204/408 spilled | 168, no wgmma |" in table
    assert f"| 40 | {split_k} | failed | 240 |" in table  # split-K's own backward (D50)



@pytest.mark.parametrize("registers, num_warps, shared_kib, expected, limiter", [
    (255, 8, 0, 1, "registers"),  # 255 -> 256 per thread: 8192 per warp, 8 warps per SM
    (128, 4, 40, 4, "registers"),  # 16 warps by registers; 228 // (40 + 1) = 5 by shared memory
    (64, 4, 100, 2, "shared"),  # 228 // (100 + 1) = 2; 8 by registers
    (169, 4, 0, 2, "registers"),  # 169 -> 176: 65536 // 5632 = 11 warps (unrounded 12: 3 blocks)
    (85, 4, 0, 5, "registers"),  # 85 -> 88: 65536 // 2816 = 23 warps (unrounded 24: 6 blocks)
    (64, 4, 57, 3, "shared"),  # 228 // (57 + 1) = 3 (without the 1 KiB reserve 228 // 57 = 4)
    (64, 4, 114, 1, "shared"),  # 228 // 115 = 1 (without the reserve 2)
    (72, 4, 113, 2, "shared"),  # 228 // 114 = 2 (with 227 KiB per SM rather than 228: 1)
    (24, 4, 0, 16, "threads"),  # 2048 threads / 128; 21 blocks by registers
    (16, 1, 0, 32, "blocks"),  # 64 blocks' worth of threads, but at most 32 blocks
    (255, 2, 227, 1, "shared"),  # one block may have 227 KiB: with its reserve, all of 228 KiB
    (64, 4, 228, 0, "shared"),  # more than one block may have: the gate fails such a case
    (255, 16, 0, 0, "registers"),  # 512 threads x 256 registers > 65536: cannot launch
])
def test_ctas_per_sm_takes_the_least_of_sm90s_limits(registers, num_warps, shared_kib, expected,
                                                     limiter):
    """Occupancy bounds worked out by hand from sm_90's limits. Fails without the round-up to
    8 registers per thread (the 169 and 85 rows), without the 1 KiB reserved per block (57 and
    114 KiB) or with 227 KiB per SM (113 KiB)."""
    from fa2check.inspect.compile_gate import ctas_per_sm, occupancy_limiter
    assert ctas_per_sm(registers, num_warps, shared_kib * 1024) == expected
    assert occupancy_limiter(registers, num_warps, shared_kib * 1024) == limiter


def test_register_table_shows_ctas_per_sm_where_known():
    """A cell reads '184, 2 CTAs/SM'; a report without the field (older JSON) just '184'.
    Fails with the cell ignoring ctas_per_sm."""
    from fa2check.inspect.register_table import cell
    assert cell(dict(registers=184, ctas_per_sm=2, spill_stores=0)) == "184, 2 CTAs/SM"
    assert cell(dict(registers=255, ctas_per_sm=1, spill_stores=8, spill_loads=16)) == \
        "255, 1 CTA/SM, 8/16 spilled"
    assert cell(dict(registers=184, ctas_per_sm=None)) == "184"


def test_register_table_runs_as_a_module(tmp_path):
    """`python -m fa2check.inspect.register_table FILE` prints the table. Fails with a helper the
    table needs defined below the module's `sys.exit(main())` (a NameError when run as a
    module, where the in-process tests that import `markdown` pass)."""
    import json
    import subprocess
    import sys
    path = tmp_path / "gate.json"
    path.write_text(json.dumps([dict(kernel="attn_fwd", variant="fa2", dtype="bfloat16",
                                     head_dim=64, causal=False, registers=184, ctas_per_sm=2)]))
    proc = subprocess.run([sys.executable, "-m", "fa2check.inspect.register_table", str(path)],
                          capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    assert "| 64 | fa2 | 184, 2 CTAs/SM |" in proc.stdout, proc.stdout
