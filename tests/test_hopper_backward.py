"""kernels/hopper_backward.py, compiled for sm_90 on the CPU (Triton's interpreter cannot run
Gluon; ablations/probes/hopper_backward.py checks its gradients on the GPU).

What the two settings of SPLIT_Q must be, read from the TTGIR and the PTX of one build each
(FA2's other flags on; 7 builds, about 40 s with an empty Triton cache):
  - every product on wgmma: S^T and dP^T (64 keys x R queries, K = D, both operands in shared
    memory), dV and dK (A, P^T or dS^T, from registers, 64 x D), and dQ (R x D/2 from shared
    memory: K = 128 keys under split-Q, two of K = 64 under split-K); no mma.sync anywhere; R,
    the query rows a step, is 128 for split-Q at d=64 (FlashAttention-3's tile there), else 64;
  - split-K's exchange: its consumers store float32 partials of dQ (R x D/2) to shared memory
    and load the other's; split-Q loads no float32 tile. Both meet once a step (one
    rendezvous: split-Q's consumers read each other's dS^T half, split-K's each other's partial);
  - dQ reaches global memory by TMA reductions only (one a consumer), no atomic (D108);
  - the row statistics reach shared memory by TMA, no thread loads global memory (D110);
  - no spills, the FA1 baseline (split-K without defer_norm and seq_parallel) at d=128
    included, full and causal (16-28 bytes before its dS^T store took an opaque buffer index:
    D61).

Each assertion is shown to fail where it should (`test_the_checks_fail_on_the_wrong_build`):
the split-Q checks on the split-K build and the reverse (the constexpr flipped), and the spill
check on a split-Q build starved of registers. The switches' compile test failed with OVERLAP
not passed to the build (no wait_group 1).
"""
import re
from functools import partial

import pytest
import torch

from compile_cli import run_probe
from fa2check.core.checks import Reference
from fa2check.core.problems import Problem
from kernels import Variant, default_config, flash_attention
from kernels.plan.hopper_backward import bwd_rows

PROBE = """
import json
import re
from fa2check.inspect.compile_gate import ptxas_usage, rerun_ptxas
from kernels import Variant
from kernels.hopper_backward import compile_for_sm90
out = {}
for split_q, d, causal in ((True, 64, True), (False, 64, True), (True, 128, False),
                           (False, 128, False)):
    k = compile_for_sm90(Variant(True, True, split_q), head_dim=d, causal=causal)
    ptx = k.asm["ptx"]
    out[f"{split_q} {d}"] = dict(ptxas_usage(rerun_ptxas(ptx)), ttgir=k.asm["ttgir"],
                                 mma_sync=ptx.count("mma.sync"),
                                 arrives=ptx.count("mbarrier.arrive"),
                                 atomics=ptx.count("atom.global") + ptx.count("red.global"),
                                 reductions=ptx.count("cp.reduce.async.bulk.tensor"),
                                 global_loads=ptx.count("ld.global"),
                                 stat_copies=ptx.count("cp.async.bulk.tensor.3d"),
                                 stores={w: len(re.findall(rf"st\\.global\\.{w}\\b", ptx))
                                         for w in ("b16", "b32", "v2.b32", "v4.b32")})
# the FA1 baseline at d=128, full and causal (it spilled 16-28 bytes), and split-Q
# starved of registers (the worker consumer at 200): the spill check must reject the latter
for key, variant, regs, causal in (("fa1 128", Variant(False, False, False), 240, False),
                                   ("fa1 128 causal", Variant(False, False, False), 240, True),
                                   ("starved 128", Variant(True, True, True), 200, False)):
    k = compile_for_sm90(variant, head_dim=128, causal=causal, consumer_registers=regs)
    out[key] = ptxas_usage(rerun_ptxas(k.asm["ptx"]))
print(json.dumps(out))
"""
# a wgmma in TTGIR: A (registers: a tensor, or shared memory: a memdesc) x B (shared) -> acc
DOT = re.compile(r"ttng\.warp_group_dot .*: (tensor|!ttg\.memdesc)<(\d+)x(\d+)x\w+[,>].*"
                 r" \* !ttg\.memdesc<(\d+)x(\d+)x\w+[,>].* -> tensor<(\d+)x(\d+)xf32")
F32_TILE = re.compile(r"ttg\.local_(store|load) .*<(\d+)x(\d+)xf32")


@pytest.fixture(scope="module")
def builds():
    return run_probe(PROBE, timeout=900)


def products(ttgir: str) -> set:
    """The wgmmas as (A in "tensor" or "!ttg.memdesc", A's shape, B's shape, the result's)."""
    return {(a, (int(m), int(k)), (int(kb), int(n)), (int(rm), int(rn)))
            for a, m, k, kb, n, rm, rn in DOT.findall(ttgir)}


def rows(split_q: bool, d: int) -> int:
    """The query rows of a step of the build (FA2's other flags on)."""
    return bwd_rows(d, Variant(True, True, split_q))


def check_products(build: dict, split_q: bool, d: int):
    """All five products on wgmma, of the shapes the design says; no mma.sync."""
    found = products(build["ttgir"])
    assert build["mma_sync"] == 0, "a product left wgmma"
    r = rows(split_q, d)
    s_dp = ("!ttg.memdesc", (64, d), (d, r), (64, r))  # S^T = K_c Q_i^T, dP^T = V_c dO_i^T
    dv_dk = ("tensor", (64, r), (r, d), (64, d))  # dV += P^T dO_i, dK += dS^T Q_i
    keys = 128 if split_q else 64  # dQ: over the whole block's keys, or over mine
    dq = ("!ttg.memdesc", (r, keys), (keys, d // 2), (r, d // 2))
    assert found == {s_dp, dv_dk, dq}, found


def check_exchange(build: dict, split_q: bool, d: int):
    """split-K's float32 partials through shared memory (a store and a load of R x D/2 in each
    consumer), none under split-Q; both store the step's R x D/2 dQ for its TMA reduction
    (one store a consumer)."""
    tiles = sorted(F32_TILE.findall(build["ttgir"]))
    tile = (str(rows(split_q, d)), str(d // 2))
    staging = [("store", *tile)] * 2
    exchange = [] if split_q else [("load", *tile)] * 2 + [("store", *tile)] * 2
    assert tiles == sorted(staging + exchange), tiles


def check_no_spills(build: dict):
    assert build["spill_stores"] == build["spill_loads"] == 0, build


CASES = [(True, 64), (False, 64), (True, 128), (False, 128)]


@pytest.mark.parametrize("split_q, d", CASES, ids=lambda x: str(x))
def test_every_product_is_a_wgmma(builds, split_q, d):
    check_products(builds[f"{split_q} {d}"], split_q, d)


@pytest.mark.parametrize("split_q, d", CASES, ids=lambda x: str(x))
def test_only_split_k_exchanges_partial_dq(builds, split_q, d):
    check_exchange(builds[f"{split_q} {d}"], split_q, d)


@pytest.mark.parametrize("split_q, d", CASES, ids=lambda x: str(x))
def test_dq_leaves_by_tma_reductions(builds, split_q, d):
    """D108: each consumer adds its dQ columns by one TMA reduction a step, not by atomics.
    Fails on the build before D108 ((atomics, reductions) = (32, 0) at d=64, (64, 0) at
    d=128)."""
    build = builds[f"{split_q} {d}"]
    assert (build["atomics"], build["reductions"]) == (0, 2), build


@pytest.mark.parametrize("split_q, d", CASES, ids=lambda x: str(x))
def test_row_statistics_arrive_by_tma(builds, split_q, d):
    """D110: L and D reach the ring by two TMA copies a step (3-d boxes), and nothing is loaded
    from global memory by the threads. Fails on the build before D110 ((global loads, copies)
    = (64, 0))."""
    build = builds[f"{split_q} {d}"]
    assert (build["global_loads"], build["stat_copies"]) == (0, 2), build


@pytest.mark.parametrize("split_q, d", CASES, ids=lambda x: str(x))
def test_dk_dv_leave_in_16_byte_stores(builds, split_q, d):
    """dK and dV reach global memory 16 bytes a store (through the x_dq staging buffer), not
    in the wgmma layout's 4-byte pairs: each consumer's 64 x D of each, 8 values a store.
    Fails on the build that stores from the wgmma layout ({"b32": 128} at d=128)."""
    per_thread = 2 * 2 * 64 * d // 128 // 8  # 2 consumers x (dK, dV) over 128 threads each
    assert builds[f"{split_q} {d}"]["stores"] == {"b16": 0, "b32": 0, "v2.b32": 0,
                                                  "v4.b32": per_thread}


def test_one_rendezvous_a_step_in_both(builds):
    """Split-Q's rendezvous (dS^T halves) and split-K's (the partials) are one each: the same
    mbarrier arrives in the PTX (the exchange is split-K's extra cost, not a second meeting)."""
    for d in (64, 128):
        assert builds[f"True {d}"]["arrives"] == builds[f"False {d}"]["arrives"], d


@pytest.mark.parametrize("split_q, d", CASES, ids=lambda x: str(x))
def test_no_spills(builds, split_q, d):
    check_no_spills(builds[f"{split_q} {d}"])


@pytest.mark.parametrize("key", ["fa1 128", "fa1 128 causal"])
def test_split_k_d128_fa1_no_spills(builds, key):
    """The FA1 baseline (-defer-seqpar-splitq) at d=128, FA1's schedule: no spills."""
    check_no_spills(builds[key])


def test_the_checks_fail_on_the_wrong_build(builds):
    """Each check rejects a build it should: SPLIT_Q flipped (the other setting's build) fails
    the products' and the exchange's checks, and split-Q at d=128 with its worker consumer
    starved to 200 registers fails the spill check."""
    for split_q, d in CASES:
        wrong = builds[f"{not split_q} {d}"]
        with pytest.raises(AssertionError):
            check_products(wrong, split_q, d)
        with pytest.raises(AssertionError):
            check_exchange(wrong, split_q, d)
    with pytest.raises(AssertionError):
        check_no_spills(builds["starved 128"])


# GPU: the gradients of the hopper backend (the chassis's forward and this backward)
GPU_PROBLEMS = [
    # GQA, causal, seqlen_q > seqlen_k: the first rows see no key (dQ = 0 there)
    Problem(2, 4, 2, 1000, 300, 64, "bfloat16", True, seed=51),
    # MQA, causal, seqlen_q < seqlen_k, odd lengths: partial last row block and column block
    # (bf16 like the probe's checks, whose compiles this test then finds in Triton's cache)
    Problem(1, 3, 1, 777, 1100, 128, "bfloat16", True, seed=52),
    # full mask, odd lengths
    Problem(2, 2, 2, 900, 333, 128, "bfloat16", False, seed=53),
    # d=64 full, GQA, odd lengths: split-Q's 128-row steps with a partial last one
    Problem(2, 4, 2, 555, 700, 64, "bfloat16", False, seed=54),
]


@pytest.mark.gpu
@pytest.mark.parametrize("problem", GPU_PROBLEMS, ids=str)
def test_gpu_hopper_backward_passes_the_oracle(problem, device):
    """Every variant's dQ, dK, dV (the lse gradient included: Reference differentiates it) on
    the hopper backend pass the float64 oracle by the pass rule, and the Hopper backward took
    the call. dK and dV do not depend on how dQ is partitioned: from the same o and statistics
    split-Q's and split-K's are bitwise equal."""
    from kernels.hopper_backward import hopper_attn_bwd, unsupported
    from kernels.hopper_forward import hopper_attn_fwd

    ref = Reference(problem, device, backward=True)
    assert unsupported(ref.q, ref.k, ref.v) is None
    for variant in Variant.all():
        checks = ref.check(partial(flash_attention, backend="hopper"), variant)
        failed = [str(c) for c in checks if not c.passed]
        assert not failed, f"{variant} on {problem}: " + "; ".join(failed)
    scale = problem.head_dim ** -0.5
    for defer, seq_parallel in ((True, True), (False, False)):
        fa2ish = Variant(defer, seq_parallel, True)
        config = default_config(problem.head_dim, True, fa2ish, problem.dtype, "hopper",
                                causal=problem.causal)
        o, stats, _ = hopper_attn_fwd(ref.q, ref.k, ref.v, problem.causal, scale, fa2ish, config)
        grads = [hopper_attn_bwd(ref.q, ref.k, ref.v, o, stats, ref.do, None, problem.causal,
                                 scale, Variant(defer, seq_parallel, split_q), config)
                 for split_q in (True, False)]
        assert torch.equal(grads[0][1], grads[1][1]), f"{fa2ish}: dK differs by the split"
        assert torch.equal(grads[0][2], grads[1][2]), f"{fa2ish}: dV differs by the split"


@pytest.mark.gpu
def test_gpu_causal_windows_run_every_column_block(device):
    """Causal column blocks launch longest first in windows of kv heads (_longest_first): here
    the window holds 8 of the 9 kv heads (Q, dO and dQ rows of 2 query heads at 2k, d=128), so
    a full window and a narrower last one. A block run twice or never leaves dK, dV (torch.empty)
    and dQ wrong: FA2's and FA1-style's gradients pass the oracle."""
    problem = Problem(3, 6, 3, 2048, 2048, 128, "bfloat16", True, seed=55)
    ref = Reference(problem, device, backward=True)
    for variant in (Variant(), Variant(False, False, False)):
        checks = ref.check(partial(flash_attention, backend="hopper"), variant)
        failed = [str(c) for c in checks if not c.passed]
        assert not failed, f"{variant} on {problem}: " + "; ".join(failed)


BACKWARD_SWITCHES = [Variant(warp_specialize=False), Variant(overlap=True),
                     Variant(warp_specialize=False, overlap=True)]


@pytest.mark.gpu
@pytest.mark.parametrize("switched", BACKWARD_SWITCHES, ids=str)
@pytest.mark.parametrize("problem", GPU_PROBLEMS, ids=str)
def test_gpu_hopper_backward_switches(problem, switched, device):
    """The backward's switches: warp_specialize off (D86: consumer 1 loads K, V and every
    step's Q and dO itself) and overlap (D87: dP^T issued with S^T). Their gradients pass the
    oracle (the call's forward with the same switches), and from the same o and statistics
    their dK and dV are FA2's bit for bit (dQ's reductions may sum in another order)."""
    from kernels.hopper_backward import hopper_attn_bwd
    from kernels.hopper_forward import hopper_attn_fwd

    ref = Reference(problem, device, backward=True)
    checks = ref.check(partial(flash_attention, backend="hopper"), switched)
    failed = [str(c) for c in checks if not c.passed]
    assert not failed, f"{switched} on {problem}: " + "; ".join(failed)
    scale = problem.head_dim ** -0.5
    config = default_config(problem.head_dim, True, Variant(), problem.dtype, "hopper",
                            causal=problem.causal)
    o, stats, _ = hopper_attn_fwd(ref.q, ref.k, ref.v, problem.causal, scale, Variant(), config)
    grads = [hopper_attn_bwd(ref.q, ref.k, ref.v, o, stats, ref.do, None, problem.causal, scale,
                             variant, config) for variant in (Variant(), switched)]
    assert torch.equal(grads[0][1], grads[1][1]) and torch.equal(grads[0][2], grads[1][2])


def test_the_backwards_switches_show_in_its_compiled_code():
    """D86: warp_specialize off drops the load warp (8 warps, not 12 with Triton's padding).
    D87: overlap waits for S^T with dP^T in flight (wait_group 1), nothing else does. No spills
    at d=128 causal (D108 spilled 8 bytes with the producer warp and overlap until the row
    statistics came by TMA, D110); the FA1-style flags refuse both switches (a Variant cannot
    be built)."""
    probe = """
import json
from fa2check.inspect.compile_gate import ptxas_usage, rerun_ptxas, sync_counts
from kernels import Variant
from kernels.hopper_backward import compile_for_sm90
out = {}
for ws in (True, False):
    for overlap in (False, True):
        k = compile_for_sm90(Variant(warp_specialize=ws, overlap=overlap), head_dim=128,
                             causal=True)
        ptx = k.asm["ptx"]
        out[f"{ws} {overlap}"] = dict(ptxas_usage(rerun_ptxas(ptx)), warps=k.metadata.num_warps,
                                      wait_1=sync_counts(ptx)["wgmma_waits"].get(1, 0))
print(json.dumps(out))
"""
    for key, usage in run_probe(probe, timeout=900).items():
        ws, overlap = (flag == "True" for flag in key.split())
        assert usage["warps"] == (12 if ws else 8), (key, usage)
        assert (usage["wait_1"] > 0) == overlap, (key, usage)
        assert usage["spill_stores"] == usage["spill_loads"] == 0, (key, usage)
    for flags in ((False, True, True), (True, False, True), (True, True, False)):
        for switch in ({"warp_specialize": False}, {"overlap": True}):
            with pytest.raises(ValueError, match="built on FA2"):
                Variant(*flags, **switch)
