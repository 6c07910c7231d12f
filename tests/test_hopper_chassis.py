"""kernels/hopper_forward.py, compiled for sm_90 on the CPU (Triton's interpreter cannot run
Gluon; `fa2check.verify --impl hopper` checks its outputs on the GPU): both splits use wgmma
for both products with no spills, split-Q's consumers own their rows and exchange nothing, and
split-K's consumers share the rows, take half of each tile's keys (wgmma N = block_n / 2) and
meet twice a tile through shared memory."""
import re

import pytest

from compile_cli import run_probe

PROBE = """
import json
from fa2check.inspect.compile_gate import ptxas_usage, rerun_ptxas
from kernels import Variant
from kernels.hopper_forward import compile_for_sm90
out = {{}}
for split_q in (True, False):
    k = compile_for_sm90(Variant(True, True, split_q), head_dim={d}, block_n=128)
    ptx, ttgir = k.asm["ptx"], k.asm["ttgir"]
    out[split_q] = dict(ptxas_usage(rerun_ptxas(ptx)), shared=k.metadata.shared,
                        wgmma=ptx.count("wgmma.mma_async"), arrives=ptx.count("mbarrier.arrive"),
                        shared_stores=ptx.count("st.shared"),
                        instr_shapes=sorted(set(re.findall(r"instrShape = \\[(\\d+, \\d+, \\d+)\\]",
                                                           ttgir))))
print(json.dumps(out))
"""


@pytest.mark.parametrize("head_dim", [64, 128])
def test_hopper_splits_compile_as_designed(head_dim):
    split_q, split_k = run_probe("import re\n" + PROBE.format(d=head_dim)).values()
    for usage in (split_q, split_k):
        assert usage["spill_stores"] == usage["spill_loads"] == 0, usage
        assert usage["wgmma"] > 0, usage
    # split-Q: one warpgroup's 64 rows against the whole 128-key tile, and P V over all of D
    assert split_q["instr_shapes"] == sorted({"16, 128, 16", f"16, {head_dim}, 16"}), split_q
    # split-K: S over half the keys (64), P V in halves of D, one per consumer
    assert split_k["instr_shapes"] == sorted({"16, 64, 16", f"16, {head_dim // 2}, 16"}), split_k
    # split-K's two rendezvous a tile: 2 more arrives per consumer's loop than split-Q's, and the
    # partial outputs and statistics stored to shared memory; split-Q stores none in its loop
    assert split_k["arrives"] == split_q["arrives"] + 4, (split_q, split_k)
    assert split_k["shared_stores"] > split_q["shared_stores"], (split_q, split_k)


SANITISE_PROBE = """
import json
from kernels import Variant
from kernels.hopper_forward import compile_for_sm90
out = {{}}
for split_q in (True, False):
    for seq_parallel in (True, False):
        for causal in (True, False):
            k = compile_for_sm90(Variant({defer}, seq_parallel, split_q), head_dim=64,
                                 block_n=128, causal=causal)
            out[f"{{split_q}} {{seq_parallel}} {{causal}}"] = k.asm["ttgir"]
print(json.dumps(out))
"""
# a store of a bf16 register tile of 16 rows into shared memory: only the sanitising pass
# writes V back, 16 keys a pass (FA1's schedule also stages its 64-row output tiles for TMA)
V_STORE = re.compile(r"ttg\.local_store .*: tensor<16x\d+xbf16")
OPENS = lambda op, line: re.match(rf"(%\S+ = )?{op} ", line)  # noqa: E731


def _enclosing_ops(ir: str, line_index: int) -> list[str]:
    """The ops whose regions hold line `line_index` of an MLIR listing, innermost first (by
    indentation: a region's ops are indented deeper than the op that opens it)."""
    lines = ir.splitlines()
    depth = len(lines[line_index]) - len(lines[line_index].lstrip())
    ops = []
    for line in reversed(lines[:line_index]):
        indent = len(line) - len(line.lstrip())
        if line.strip() and indent < depth:
            ops.append(line.strip())
            depth = indent
    return ops


@pytest.mark.parametrize("defer_norm", [True, False])
def test_hopper_causal_tiles_sanitise_values_only_where_a_key_is_hidden(defer_norm):
    """Causal: V of a tile that hides a key from the program's first row is written back to
    shared memory with its non-finite values zeroed before the P V wgmma (docs/decisions.md
    D53), under a runtime branch taken on those tiles only: every such store sits inside an
    `scf.if` in the K/V loop, and is followed by the async-proxy fence. Without causal there is
    no such store. (Removing `_sanitise_values`' store, or running it on every tile, fails.)"""
    for key, ttgir in run_probe(SANITISE_PROBE.format(defer=defer_norm)).items():
        split_q, seq_parallel, causal = (word == "True" for word in key.split())
        lines = ttgir.splitlines()
        stores = [i for i, line in enumerate(lines) if V_STORE.search(line)]
        if not causal:
            assert not stores, f"{key}: V stored back without causal masking"
            continue
        # each consumer: its half of the keys, 16 rows a pass, in every part of V's columns
        assert len(stores) == 2 * 64 // 16 * (1 if split_q else 2), (key, len(stores))
        for i in stores:
            ops = _enclosing_ops(ttgir, i)
            assert OPENS("scf.if", ops[0]), (key, ops[:2])  # the masked tiles' branch
            assert any(OPENS("scf.for", op) for op in ops), (key, ops)  # in the K/V loop
        assert "ttng.fence_async_shared" in ttgir, key


FA1_PROBE = """
import json
from fa2check.inspect.compile_gate import ptxas_usage, rerun_ptxas
from kernels import Variant
from kernels.hopper_forward import compile_for_sm90
out = {{}}
for split_q in (True, False):
    k = compile_for_sm90(Variant(False, False, split_q), head_dim={d}, block_n=128, stages=1)
    ptx = k.asm["ptx"]
    out[split_q] = dict(ptxas_usage(rerun_ptxas(ptx)),
                        tma_loads=ptx.count("cp.async.bulk.tensor.3d.shared::cluster.global"),
                        tma_stores=ptx.count("cp.async.bulk.tensor.3d.global.shared::cta"),
                        global_loads=ptx.count("ld.global"),
                        complete_waits=len(re.findall(r"cp\\.async\\.bulk\\.wait_group 0", ptx)))
print(json.dumps(out))
"""


@pytest.mark.parametrize("head_dim", [64, 128])
def test_fa1_schedule_moves_its_partial_state_by_tma(head_dim):
    """FA1's schedule (seq_parallel off, D55): the partial output and m, l arrive by TMA loads
    (the producer's prefetch) and leave by TMA stores whose completion in global memory is
    waited for (the non-.read wait_group) before the producer may load them again; no pointer
    loads of the scratch."""
    for usage in run_probe("import re\n" + FA1_PROBE.format(d=head_dim)).values():
        assert usage["tma_loads"] >= 2 and usage["tma_stores"] >= 2, usage  # O_TMP, STATS_TMP
        assert usage["global_loads"] == 0, usage
        assert usage["complete_waits"] >= 1, usage


FA1_WIDE_PROBE = """
import json, re
from fa2check.inspect.compile_gate import ptxas_usage, rerun_ptxas
from kernels import Variant
from kernels.hopper_forward import compile_for_sm90
k = compile_for_sm90(Variant(False, False, False), head_dim=128, block_n={n}, stages=1)
print(json.dumps(dict(ptxas_usage(rerun_ptxas(k.asm["ptx"])), shared=k.metadata.shared,
                      instr_shapes=sorted(set(re.findall(r"instrShape = \\[(\\d+, \\d+, \\d+)\\]",
                                                         k.asm["ttgir"]))))))
"""


@pytest.mark.parametrize("block_n", [256, pytest.param(128, marks=pytest.mark.xfail(
    strict=True, reason="planted: at 128 keys a consumer's S is 64 keys wide"))])
def test_fa1_split_k_takes_fa1s_256_keys_128_a_consumer(block_n):
    """D67: FA1's split-K at its own 256-key tile (d=128, FA1's schedule): each consumer's S
    is 64 rows x 128 keys, P V in halves of D, no spills, within sm_90's 227 KB."""
    usage = run_probe(FA1_WIDE_PROBE.format(n=block_n))
    assert usage["instr_shapes"] == ["16, 128, 16", "16, 64, 16"], usage
    assert usage["spill_stores"] == usage["spill_loads"] == 0, usage
    assert usage["shared"] <= 232448, usage


def test_fa1_schedule_state_buffers_and_tile_widths():
    """D67: split-K alone takes 256 keys; at 256 keys and d=128 one state buffer fits beside
    two Q buffers, at 128 keys two state buffers; the heuristic gives FA1's split-K 256."""
    from kernels import TileConfig, Variant
    from kernels.plan.config import heuristic_config
    from kernels.plan.hopper_forward import (SHARED_LIMIT, block_ns, q_buffers, shared_bytes,
                                             state_slots)

    fa1_k, fa1_q = Variant(False, False, False), Variant(False, False, True)
    assert 256 in block_ns(fa1_k) and 256 not in block_ns(fa1_q)
    assert (state_slots(128, 256, 1, False, False, False), q_buffers(128, 256, 1, False, False,
                                                                      False)) == (1, 2)
    assert state_slots(128, 128, 1, False, False, False) == 2
    for n in (128, 256):
        assert shared_bytes(128, n, 1, False, False, causal=False) <= SHARED_LIMIT
    assert heuristic_config(128, True, fa1_k, "bfloat16", "hopper", causal=False).block_n == 256
    assert heuristic_config(128, True, Variant(), "bfloat16", "hopper", causal=False).block_n == 128
    assert isinstance(heuristic_config(64, True, fa1_k, "bfloat16", "hopper"), TileConfig)


RESIDUAL_PROBE = """
import json
from kernels import Variant
from kernels.hopper_forward import compile_for_sm90
out = {}
for variant in (Variant(), Variant(False, False, False)):
    for residual in (False, True):
        ptx = compile_for_sm90(variant, head_dim=64, o_residual=residual).asm["ptx"]
        out[f"{variant} {residual}"] = [ptx.count("st.global"),
                                        ptx.count("cp.async.bulk.tensor.4d.global.shared")]
print(json.dumps(out))
"""


def test_hopper_forward_stores_os_residual_only_for_a_backward():
    """D91: with o_residual the chassis also stores O - float(o), the way it stores O: a second
    set of global stores in the row-block epilogue (as many as O's), a second TMA store in FA1's
    schedule; without it the kernel is the kernel of record (no more stores)."""
    counts = run_probe(RESIDUAL_PROBE)
    fa2, fa1 = "+defer+seqpar+splitq", "-defer-seqpar-splitq"
    (o_fa2, _), (both_fa2, _) = counts[f"{fa2} False"], counts[f"{fa2} True"]
    (_, tma_fa1), (_, tma_both) = counts[f"{fa1} False"], counts[f"{fa1} True"]
    statistics = 4  # the LSE store's (one consumer's rows)
    assert both_fa2 - o_fa2 == o_fa2 - statistics, counts
    assert tma_both == 2 * tma_fa1 > 0, counts


STORES_PROBE = """
import json, re
from kernels import Variant
from kernels.hopper_forward import compile_for_sm90
out = {}
for split_q in (True, False):
    for d in (64, 128):
        k = compile_for_sm90(Variant(True, True, split_q), head_dim=d, persistent=True)
        out[f"{split_q} {d}"] = {w: len(re.findall(rf"st\\.global\\.{w}\\b", k.asm["ptx"]))
                                 for w in ("b16", "b32", "v4.b32")}
print(json.dumps(out))
"""


def test_o_leaves_in_16_byte_stores():
    """The row-block epilogue passes O through Q's buffer (read already, released after;
    split-Q a consumer's own box, split-K half of the shared box's bytes) to rows of 8 values a
    thread: 16-byte stores, not the wgmma layout's 4-byte pairs (D112);
    the 4-byte stores left are the LSE's (split-K: one consumer's). Fails on the build that
    stores from the wgmma layout ({"b32": 68, "v4.b32": 0} at d=128, split-Q)."""
    counts = run_probe(STORES_PROBE)
    # a row block's O (2-byte values; split-Q 128 rows, split-K 64) stored by both consumers'
    # code, each of 128 threads, 16 bytes a store
    for split_q, rows, lse in ((True, 128, 4), (False, 64, 2)):
        for d in (64, 128):
            stores = rows * d * 2 // 128 // 16
            assert counts[f"{split_q} {d}"] == {"b16": 0, "b32": lse, "v4.b32": stores}, counts
