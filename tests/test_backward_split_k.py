"""split_q off in the backward (kernels/backward.py): FA1's split-K, the keys of every
dQ_i += dS_ij K_j product cut into bwd_key_slices slices whose partial dQ are summed at every
step; dK and dV are the split-Q code.

Shown to fail on broken copies of kernels/backward.py: with the merge summing the slices'
partials by tl.max instead of tl.sum, the oracle and the dK/dV/dQ comparison fail; with
SPLIT_Q ignored in _attn_bwd_kv_step (the 2-D product always) the layout test fails (no 3-D
product, no reduction across slices, as few shared stores as split-Q) while the numbers pass;
with the launcher passing SPLIT_Q=True whatever the variant, the dQ comparison fails (bitwise
equal to split-Q's)."""
import dataclasses
import re

import pytest
import torch

from compile_cli import run_probe
from fa2check.core.checks import Reference
from fa2check.core.problems import Problem
from kernels import TileConfig, Variant, flash_attention
from kernels.backward import attn_bwd
from kernels.forward import attn_fwd

SPLIT_K = [v for v in Variant.all() if not v.split_q]

# --- the layout on sm_90 -------------------------------------------------------------------------

PROBE = """
import json
from fa2check.inspect.compile_gate import compile_kernel_for_sm90
from kernels import Variant, default_config
off = Variant(True, True, False)
config = default_config({d}, True, off, "bfloat16")  # split-K's tiles for both
out = {{"slices": config.bwd_key_slices}}
for variant in (off, Variant()):
    _, k = compile_kernel_for_sm90("attn_bwd", variant, "bfloat16", {d}, False, config)
    out[str(variant.split_q)] = dict(ttgir=k.asm["ttgir"],
                                     shared_stores=k.asm["ptx"].count("st.shared"))
print(json.dumps(out))
"""


def innermost_loop_bodies(ttgir: str) -> list[str]:
    """The bodies of the scf.for loops that hold no other loop (the query-row loops)."""
    lines = ttgir.splitlines()
    bodies = []
    for i, line in enumerate(lines):
        if "scf.for" not in line or not line.rstrip().endswith("{"):
            continue
        indent = len(line) - len(line.lstrip())
        body = []
        for inner in lines[i + 1:]:
            if inner.strip() and len(inner) - len(inner.lstrip()) <= indent:
                break
            body.append(inner)
        if not any("scf.for" in b for b in body):
            bodies.append("\n".join(body))
    return bodies


def warps_per_cta(ttgir: str, layout: str) -> list[int]:
    found = re.search(rf"^{re.escape(layout)} = .*?warpsPerCTA = \[([\d, ]+)\]", ttgir, re.M)
    return [int(w) for w in found.group(1).split(",")]


def slice_products(body: str, slices: int) -> list[tuple[str, str]]:
    """(result, layout) of each 3-D tt.dot over `slices` slices in a loop body."""
    return re.findall(rf"(%\w+) = tt\.dot .*-> tensor<{slices}x\d+x\d+xf32, (#\w+)>", body)


@pytest.mark.parametrize("head_dim", [64, 128])
def test_split_k_backward_sums_key_slices_across_warps_every_step(head_dim):
    out = run_probe(PROBE.format(d=head_dim))
    slices, split_k, split_q = out["slices"], out["False"], out["True"]
    assert slices > 1

    bodies = innermost_loop_bodies(split_k["ttgir"])
    assert len(bodies) == 2, "a masked and an unmasked loop over the query rows"
    for body in bodies:
        products = slice_products(body, slices)
        assert len(products) == 1, body  # the partial dQ of every slice, in one product
        result, layout = products[0]
        # the merge: a sum over the slice axis of that product, every step, across warps
        assert re.search(rf'"tt\.reduce"\({result}\) <{{axis = 0 : i32}}>', body), body
        assert warps_per_cta(split_k["ttgir"], layout)[0] > 1  # slices on different warps
    # and through shared memory (Triton's cross-warp reduction)
    assert split_k["shared_stores"] > split_q["shared_stores"], (split_k, split_q)

    for body in innermost_loop_bodies(split_q["ttgir"]):
        assert not slice_products(body, slices) and "tt.reduce" not in body, body


# --- the numbers, in the interpreter -------------------------------------------------------------

PROBLEMS = [Problem(1, 4, 2, 37, 45, 64, "float16", True, seed=1),    # GQA, causal
            Problem(1, 2, 2, 45, 29, 40, "bfloat16", False, seed=2),  # odd head_dim
            Problem(2, 3, 1, 29, 51, 40, "float32", True, seed=3)]    # MQA, causal


@pytest.mark.parametrize("dq_pass", (False, True), ids=("dq-in-loop", "dq-pass"))
@pytest.mark.parametrize("problem", PROBLEMS, ids=str)
def test_split_k_backward_against_the_oracle(problem, dq_pass, device):
    """Every split-K variant (atomics, read-modify-write and the dQ pass), lengths that are
    not multiples of the tiles (16 and 32 rows, 32 and 16 keys, 4 key slices)."""
    config = TileConfig(32, 16, num_stages=1, bwd_block_m=16, bwd_block_n=32, bwd_num_stages=1,
                        bwd_dq_pass=dq_pass, bwd_key_slices=4)
    ref = Reference(problem, device)
    for variant in SPLIT_K:
        failed = [str(c) for c in ref.check(
            lambda *a, **kw: flash_attention(*a, config=config, **kw), variant) if not c.passed]
        assert not failed, f"{variant} on {problem}: " + "; ".join(failed)


@pytest.mark.parametrize("dq_pass", (False, True), ids=("dq-in-loop", "dq-pass"))
@pytest.mark.parametrize("causal", (False, True), ids=("full", "causal"))
def test_split_k_changes_only_the_order_of_dq_sums(causal, dq_pass, device):
    """From one forward's outputs: dK and dV bitwise those of split-Q (the same code), dQ the
    same sums over the keys in another order (float32, within a few ulps, not bitwise)."""
    gen = torch.Generator().manual_seed(7)
    q, k, v, do = (torch.randn(shape, generator=gen).to(device) for shape in
                   [(1, 4, 37, 40), (1, 2, 45, 40), (1, 2, 45, 40), (1, 4, 37, 40)])
    config = TileConfig(32, 16, num_stages=1, bwd_block_m=16, bwd_block_n=32, bwd_num_stages=1,
                        bwd_dq_pass=dq_pass, bwd_key_slices=4)
    scale = 40 ** -0.5
    grads = {}
    for split_q in (True, False):
        variant = dataclasses.replace(Variant(), split_q=split_q)
        o, stats, _ = attn_fwd(q, k, v, causal, scale, Variant(), config)
        grads[split_q] = attn_bwd(q, k, v, o, stats, do, None, causal, scale, variant, config)
    (dq_on, dk_on, dv_on), (dq_off, dk_off, dv_off) = grads[True], grads[False]
    assert torch.equal(dk_on, dk_off) and torch.equal(dv_on, dv_off)
    assert (dq_on - dq_off).abs().max() <= 1e-5 * dq_on.abs().max()
    assert not torch.equal(dq_on, dq_off), "split_q=False did not reach the backward"


@pytest.mark.parametrize("backend", ["gluon", "hopper"])
def test_every_backend_takes_the_triton_backwards_tiles(backend):
    """The gluon and hopper backends' gradients come from the Triton backward, so their configs
    carry its backward tiles for the variant: FA1's split-K tiles (D50) for split_q off. The
    gluon backend once took the variant-free tiles there (dQ pass, 4 key slices of 8 keys):
    refused at d=64 and out of shared memory at d=128 on the H200 (verify, D64's run)."""
    from kernels.plan.config import heuristic_config

    bwd = [f.name for f in dataclasses.fields(TileConfig) if f.name.startswith("bwd_")]
    for variant in Variant.all():
        for head_dim in (64, 128):
            for dtype in ("bfloat16", "float16"):
                ours = heuristic_config(head_dim, True, variant, dtype, backend)
                triton = heuristic_config(head_dim, True, variant, dtype)
                assert [getattr(ours, f) for f in bwd] == [getattr(triton, f) for f in bwd], (
                    backend, str(variant), head_dim, dtype)
