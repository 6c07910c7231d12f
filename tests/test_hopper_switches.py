"""The Hopper-era switches (docs/decisions.md D59, D85): FlashAttention-3's warp specialisation
(a producer warp; on by default), ping-pong and intra-warpgroup overlap as constexprs of the
Hopper chassis, on top of FA2 all on.

CPU: their names and lattice, the refusals, and the sm_90 compile of every combination (its
PTX shows each switch: OVERLAP's wait for S_j that leaves P V in flight, PINGPONG's turns,
WARP_SPECIALIZE's producer warp: 12 warps, 3 of them padding, against the consumers' 8).
GPU (marker gpu): every combination against the float64 oracle, and bit for bit against FA2's
chassis (the same operations in the same order, only issued differently)."""
from functools import partial

import pytest
import torch

from compile_cli import run_probe
from fa2check.core.checks import Reference
from fa2check.core.problems import Problem
from kernels import Variant, flash_attention

FA2 = Variant()
SWITCH_VARIANTS = [v for v in Variant.hopper() if v.hopper_switches]  # the lattice less FA2


def test_hopper_lattice_names_round_trip_and_keep_the_fa2_names():
    assert [str(v) for v in Variant.all()][0] == "+defer+seqpar+splitq"  # FA2's name unchanged
    assert len(Variant.all()) == 8 and not any(v.hopper_switches for v in Variant.all())
    names = [str(v) for v in Variant.hopper()]
    fa3 = ["", "+overlap", "+pingpong", "+pingpong+overlap"]
    assert names == (["+defer+seqpar+splitq-warpspec" + s for s in fa3]
                     + ["+defer+seqpar+splitq" + s for s in fa3])
    assert [Variant.parse(n) for n in names] == Variant.hopper()
    assert Variant.parse("+defer+seqpar+splitq-pingpong") == FA2  # a switch named at its default
    assert Variant.parse("+defer+seqpar+splitq+warpspec") == FA2
    assert Variant(pingpong=True, overlap=True, warp_specialize=False).fa2 == FA2
    assert Variant(pingpong=True).label == "FA2 with pingpong"
    assert Variant(warp_specialize=False, overlap=True).label == (
        "FA2 without warp_specialize, with overlap")
    with pytest.raises(ValueError, match="cannot parse"):
        Variant.parse("+defer+splitq+pingpong")  # an FA2 flag missing
    with pytest.raises(ValueError, match="cannot parse"):
        Variant.parse("+defer+seqpar+splitq+pingpong+pingpong")


@pytest.mark.parametrize("fa2_flags", [f for f in [(False, True, True), (True, False, True),
                                                    (True, True, False)]])
@pytest.mark.parametrize("switch, name", [("pingpong", "+pingpong"), ("overlap", "+overlap"),
                                          ("warp_specialize", "-warpspec")])
def test_hopper_switches_are_refused_off_fa2(fa2_flags, switch, name):
    with pytest.raises(ValueError, match="built on FA2 with all three changes on"):
        Variant(*fa2_flags, **{switch: name.startswith("+")})
    with pytest.raises(ValueError, match="built on FA2"):
        Variant.parse(str(Variant(*fa2_flags)) + name)


@pytest.mark.parametrize("backend", ["triton", "gluon"])
def test_other_backends_refuse_the_hopper_switches(backend, device):
    q = torch.randn(1, 2, 8, 16, device=device, dtype=torch.float16)
    for variant in SWITCH_VARIANTS:
        with pytest.raises(ValueError, match="on backend 'hopper' only"):
            flash_attention(q, q, q, variant=variant, backend=backend)


PROBE = """
import json
from fa2check.inspect.compile_gate import ptxas_usage, rerun_ptxas, sync_counts
from kernels import Variant
from kernels.hopper_forward import compile_for_sm90
out = {}
for v in Variant.hopper():
    kernel = compile_for_sm90(v, head_dim=128, block_n=128, stages=2, causal=True)
    ptx = kernel.asm["ptx"]
    sync = sync_counts(ptx)
    out[str(v)] = dict(ptxas_usage(rerun_ptxas(ptx)), wgmma=ptx.count("wgmma.mma_async"),
                       warps=kernel.metadata.num_warps,
                       wait_1=sync["wgmma_waits"].get(1, 0), waits=sync["mbarrier_waits"],
                       arrives=sync["mbarrier_arrives"],
                       named=[[*key, n] for key, n in sync["named"].items()])
print(json.dumps(out))
"""


def test_every_hopper_combination_compiles_for_sm90_and_shows_its_switches():
    """bf16, head_dim 128, causal (V's sanitising included), block_n 128, 2 stages: no spills
    (on the 3 stages pingpong and overlap run, V's sanitising spills 52 bytes of addresses,
    kept: D88),
    wgmma not serialised by ptxas; OVERLAP waits for S_j with P V still in flight (wait_group
    1), nothing else does; PINGPONG's turns are named barriers 8 and 9 of 256 threads, no
    mbarrier: a `bar.sync` on its own turn per section site (first, loop, last) and consumer,
    a `bar.arrive` on the other's at each site but consumer 1's last, which opens instead;
    Triton's own barriers keep to ids below 8; WARP_SPECIALIZE's producer warp takes the CTA to
    12 warps (the consumers' 8, padded), without it 8. (Ignoring any constexpr in the kernel,
    or an unbalanced turn, fails.)"""
    out = run_probe(PROBE)
    for name, usage in out.items():
        assert usage["spill_stores"] == usage["spill_loads"] == 0, (name, usage)
        assert not usage["wgmma_serialized"], (name, usage)
        v = Variant.parse(name)
        assert (usage["wait_1"] > 0) == v.overlap, (name, usage)
        turns = {(op, i): n for op, i, threads, n in usage["named"] if threads == 256}
        others = [i for op, i, threads, n in usage["named"] if threads != 256]
        assert max(others) < 8, (name, others)
        expected = {("bar.sync", 8): 3, ("bar.sync", 9): 3, ("bar.arrive", 9): 3,
                    ("bar.arrive", 8): 3} if v.pingpong else {}
        assert turns == expected, (name, turns)
        assert usage["warps"] == (12 if v.warp_specialize else 8), (name, usage)
    plain, pingpong = out[str(Variant(overlap=True))], out[str(Variant(pingpong=True,
                                                                       overlap=True))]
    assert (pingpong["waits"], pingpong["arrives"]) == (plain["waits"], plain["arrives"])


PIPELINED_D64 = """
import json
from fa2check.inspect.compile_gate import ptxas_usage, rerun_ptxas
from kernels import Variant
from kernels.hopper_forward import compile_for_sm90
out = {}
for v in (Variant(overlap=True), Variant(pingpong=True, overlap=True)):
    kernel = compile_for_sm90(v, head_dim=64, block_n=128, stages=3, causal=True)
    out[str(v)] = ptxas_usage(rerun_ptxas(kernel.asm["ptx"]))
print(json.dumps(out))
"""


def test_the_pipelined_loop_tests_v_first_at_head_dim_64_without_spills():
    """D114: at head_dim 64 FA3's pipelined loop tests V before the causal pass and skips the
    NaN put-back where no row sees one; on the 3-stage ring the switches get there
    (switch_ring) that spills nothing (at 128 it spilled, and the loop keeps the whole pass)."""
    for name, usage in run_probe(PIPELINED_D64).items():
        assert usage["spill_stores"] == usage["spill_loads"] == 0, (name, usage)


GPU_PROBLEMS = [
    Problem(2, 4, 4, 1000, 1000, 128, "bfloat16", False, seed=1),
    Problem(1, 8, 2, 777, 1500, 64, "float16", True, seed=2),  # GQA, q < k, ragged
    Problem(2, 4, 1, 1031, 513, 128, "float16", True, seed=3),  # MQA, rows that see no key
    Problem(1, 6, 3, 2048, 2048, 64, "bfloat16", True, seed=4),
    Problem(1, 2, 2, 65, 300, 128, "bfloat16", False, seed=5),  # one row block, partial tile
    Problem(1, 2, 1, 300, 100, 64, "bfloat16", False, seed=6),  # one K/V tile
]


def _same_bits(a, b):
    """Equal, NaN where NaN (NaN's payload aside), inf where inf."""
    nan = torch.isnan(a)
    return torch.equal(nan, torch.isnan(b)) and torch.equal(a[~nan], b[~nan])


@pytest.mark.gpu
@pytest.mark.parametrize("problem", GPU_PROBLEMS, ids=str)
def test_gpu_hopper_switches_pass_and_match_fa2_bit_for_bit(problem, device):
    ref = Reference(problem, device, backward=False)
    hopper = partial(flash_attention, backend="hopper")
    fa2 = ref.run(hopper, FA2)
    for variant in SWITCH_VARIANTS:
        out = ref.run(hopper, variant)
        failed = [str(c) for c in ref.judge(out) if not c.passed]
        assert not failed, f"{variant} on {problem}: " + "; ".join(failed)
        assert _same_bits(out.o, fa2.o) and _same_bits(out.lse, fa2.lse), (variant, problem)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("head_dim", [64, 128])
def test_gpu_hopper_switches_keep_non_finite_values_where_fa2_does(dtype, head_dim):
    """Causal, non-finite V at keys some rows do not see (D53's sanitising and NaN put-back,
    which the pipelined loop applies before P_j V_j rather than after; at head_dim 64 after
    testing V first, D114): the same output as FA2's chassis, NaN and inf included, and finite
    in the rows that see none of them."""
    gen = torch.Generator(device="cuda").manual_seed(7)
    q, k, v = (torch.randn(1, 2, 300, head_dim, device="cuda", dtype=dtype, generator=gen)
               for _ in range(3))
    v[:, :, 201, 3] = float("nan")
    v[:, :, 150, 5] = float("inf")
    fa2 = flash_attention(q, k, v, causal=True, backend="hopper")
    assert torch.isfinite(fa2[:, :, :150]).all()
    for variant in SWITCH_VARIANTS:
        o = flash_attention(q, k, v, causal=True, variant=variant, backend="hopper")
        assert _same_bits(o, fa2), variant
