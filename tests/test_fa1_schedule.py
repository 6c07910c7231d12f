"""seq_parallel off runs FA1's schedule (kernels/forward.py): K/V tiles outer, query row blocks
inner, each row block's (acc, m, l) through an HBM scratch between tiles, grid (batch * heads,
splits) with split s owning row blocks s, s + splits, ... Checked against the float64 oracle by
the pass rule and bitwise against the row-block-outer schedule (seq_parallel on), whose
arithmetic per row is the same. 16-row blocks and 16-key tiles, so that every problem has
several tiles and several row blocks per split."""
from dataclasses import replace
from functools import partial

import pytest
import torch

import kernels.forward
from fa2check.core.checks import Reference
from fa2check.core.problems import Problem
from kernels import TileConfig, Variant, default_config, flash_attention
from kernels.plan.fa1_launch import (FA1_MAX_SPLITS, INTERPRETER_SMS, bwd_column_parallel,
                                     fa1_bwd_column_parallel, fa1_num_splits)
from properties.causal_masking import first_hidden_key

BLOCK = 16
PROBLEMS = [
    # GQA, causal, seqlen_q > seqlen_k: rows 0-34 see no key, whole row blocks among them
    Problem(2, 4, 2, 100, 65, 32, "bfloat16", True, seed=31),
    # MQA, causal, seqlen_q < seqlen_k, odd lengths: partial last row block and last tile
    Problem(1, 3, 1, 63, 100, 16, "float16", True, seed=32),
    # full mask, odd lengths, float32
    Problem(2, 2, 2, 17, 63, 32, "float32", False, seed=33),
    # one key: a single tile, no scratch; causal rows 0-98 see nothing
    Problem(1, 2, 1, 100, 1, 16, "float16", True, seed=34),
]
SPLITS = (1, 3, 0)  # one program per (batch, head); three; FA1's heuristic
VARIANTS = [Variant(defer, False, split_q) for defer in (True, False) for split_q in (True, False)]


def _config(problem, splits, bwd_splits=None):
    """FA1's schedule on 16-row blocks with `splits` (the backward on one program per (batch,
    head) with one split, unless bwd_splits says otherwise)."""
    base = default_config(problem.head_dim, False, None, problem.dtype)
    return replace(base, block_m=BLOCK, block_n=BLOCK, key_slices=2, fa1_splits=splits,
                   fa1_bwd_splits=(1 if splits == 1 else 0) if bwd_splits is None else bwd_splits)


def _heuristic_splits(problem):
    row_blocks = -(-problem.seqlen_q // BLOCK)
    return fa1_num_splits(problem.batch * problem.heads_q, INTERPRETER_SMS, 1,
                          min(FA1_MAX_SPLITS, row_blocks))


@pytest.mark.parametrize("problem", PROBLEMS, ids=str)
def test_fa1_schedule_passes_the_oracle(problem, device):
    """Every seq_parallel-off variant, with one program per (batch, head) (forward and
    backward), three splits and FA1's heuristic (which picks more than one split for these
    problems) against the float64 oracle."""
    assert _heuristic_splits(problem) > 1
    # the backward reads the forward's o and statistics, which do not depend on the splits
    refs = {True: Reference(problem, device), False: Reference(problem, device, backward=False)}
    for splits in SPLITS:
        ref = refs[splits == 1]
        # the splits only share out row blocks: split-K is checked with one program a head
        for variant in VARIANTS if splits == 1 else [v for v in VARIANTS if v.split_q]:
            checks = ref.check(partial(flash_attention, config=_config(problem, splits)), variant)
            failed = [str(c) for c in checks if not c.passed]
            assert not failed, f"{variant} splits={splits} on {problem}: " + "; ".join(failed)


@pytest.mark.parametrize("problem", PROBLEMS, ids=str)
def test_fa1_schedule_bitwise_equals_row_block_schedule(problem, device):
    """o and lse equal the seq_parallel-on kernel's bit for bit, for each number of splits:
    the schedules differ in which program folds which (row block, tile) and where the state
    waits between tiles (HBM or registers), not in any row's arithmetic."""
    q, k, v, _ = problem.inputs(device)
    for variant in VARIANTS:
        on = replace(variant, seq_parallel=True)
        o_on, lse_on = flash_attention(q, k, v, causal=problem.causal, variant=on,
                                       return_lse=True, config=_config(problem, 1))
        for splits in SPLITS:
            o, lse = flash_attention(q, k, v, causal=problem.causal, variant=variant,
                                     return_lse=True, config=_config(problem, splits))
            assert torch.equal(o, o_on) and torch.equal(lse, lse_on), (
                f"{variant} splits={splits} on {problem}: max |o - o_on| "
                f"{(o.float() - o_on.float()).abs().max().item()}")


def test_fa1_schedule_rows_that_see_no_key(device):
    """Causal with seqlen_q > seqlen_k: rows that see no key get o = 0 and lse = -inf (the
    defer_norm-off kernel stores m = -inf and l = 0, from which lse is -inf), whether or not
    their whole row block sees nothing."""
    problem = PROBLEMS[0]
    q, k, v, _ = problem.inputs(device)
    blind = problem.seqlen_q - problem.seqlen_k  # rows 0 .. blind - 1 see no key
    for variant in VARIANTS:
        for splits in SPLITS:
            o, lse = flash_attention(q, k, v, causal=True, variant=variant, return_lse=True,
                                     config=_config(problem, splits))
            assert torch.all(o[:, :, :blind] == 0), f"{variant} splits={splits}"
            assert torch.all(lse[:, :, :blind] == float("-inf")), f"{variant} splits={splits}"
            assert torch.all(torch.isfinite(lse[:, :, blind:])), f"{variant} splits={splits}"



class _WithoutRepair:
    """kernels.forward's launcher with every REPAIR launch dropped (and counted)."""

    def __init__(self, launch):
        self.launch, self.repairs = launch, 0

    def __getitem__(self, grid):
        def run(*args, **kwargs):
            if kwargs["REPAIR"]:
                self.repairs += 1
            else:
                self.launch[grid](*args, **kwargs)
        return run


# verify's full-tier causal_masking case in small: causal, seqlen_q > seqlen_k, float32, d=32
HIDDEN_V_PROBLEM = Problem(1, 2, 1, 1000, 200, 32, "float32", True, seed=302)


# FA1's schedule, and float32 split-K on the row-block schedule (kernels.forward.sanitises_masked_tiles)
MAIN_LAUNCH_SANITISES = VARIANTS + [Variant(defer, True, False) for defer in (True, False)]


@pytest.mark.filterwarnings("ignore:All-NaN slice:RuntimeWarning")  # the interpreter's row max
@pytest.mark.parametrize("variant", MAIN_LAUNCH_SANITISES, ids=str)
def test_the_main_launch_keeps_hidden_non_finite_values_out(variant, device, monkeypatch):
    """With K and V from a key c on set to NaN, or V to +inf, the rows that cannot see c come
    out bitwise as without, from the main launch alone (REPAIR dropped), on the GPU's default
    tiles (128-row blocks: the block holding the first row that sees c holds rows that do not).
    REPAIR recomputed such a block with a kernel of its own, whose float32 split-K bits the
    H200 compiled 1 ulp apart from the main launch's (decisions D53 for FA1's schedule, D64 for
    the row-block schedule); the masked tiles now sanitise V in the main launch, so one
    compiled code serves both calls. Rows that see c get NaN. With the row-block schedule's
    REPAIR launch back for float32 split-K, its two cases fail (leaked NaN, 1 REPAIR)."""
    problem = HIDDEN_V_PROBLEM
    config = default_config(problem.head_dim, True, variant, problem.dtype)
    launcher = _WithoutRepair(kernels.forward._ATTN_FWD)
    monkeypatch.setattr(kernels.forward, "_ATTN_FWD", launcher)
    q, k, v, _ = problem.inputs(device)
    c, rows = first_hidden_key(problem)
    assert rows % config.block_m, "the row block holding row `rows` must hold both kinds"
    o, lse = flash_attention(q, k, v, causal=True, variant=variant, return_lse=True,
                             config=config)
    for fill_k, fill_v in ((float("nan"), float("nan")), (None, float("inf"))):
        k2, v2 = k.clone(), v.clone()
        if fill_k is not None:
            k2[:, :, c:] = fill_k
        v2[:, :, c:] = fill_v
        o2, lse2 = flash_attention(q, k2, v2, causal=True, variant=variant, return_lse=True,
                                   config=config)
        hidden = slice(0, rows)
        assert torch.equal(o2[:, :, hidden], o[:, :, hidden]), (
            f"{variant}, K/V from key {c} = {fill_k}/{fill_v}: "
            f"{int((o2[:, :, hidden] != o[:, :, hidden]).sum())} elements of o differ")
        assert torch.equal(lse2[:, :, hidden], lse[:, :, hidden])
        assert torch.isnan(o2[:, :, rows:]).all()
    assert launcher.repairs == 0


def test_fa1_num_splits_is_fa1s_heuristic():
    """fmha_fwd_launch_template.h: the smallest split count within 95% of the best wave
    efficiency batch_heads * n / (sms * ctas) / ceil(...)."""
    # 48 (batch, head)s on 108 SMs: 2 splits fill 0.89 of one wave, 3 splits 0.67 of two;
    # up to 8 splits 0.89 is the best, so 2; up to 30, 9 splits fill 4 waves exactly
    assert fa1_num_splits(48, 108, 1, 8) == 2
    assert fa1_num_splits(48, 108, 1, 30) == 9
    assert fa1_num_splits(264, 132, 1, 30) == 1  # two whole waves already
    # 100 on an H200's 132 SMs: 29 splits would fill 0.999, 9 fill 0.974, within 95% of it
    assert fa1_num_splits(100, 132, 1, 30) == 9
    assert fa1_num_splits(16, 132, 2, 30) == 16  # 256 of 264 slots: 0.97
    assert fa1_num_splits(16, 132, 2, 1) == 1


def test_fa1_splits_must_be_a_count():
    q = torch.randn(1, 2, 33, 16, dtype=torch.float16)
    for field in ("fa1_splits", "fa1_bwd_splits"):
        for bad in (-1, True, 1.5):
            with pytest.raises(ValueError, match=field):
                flash_attention(q, q, q, variant=Variant(seq_parallel=False),
                                config=replace(TileConfig(16, 16), **{field: bad}))


def test_fa1s_launcher_is_the_default():
    """A config's FA1 grids are FA1's launcher's heuristics unless asked otherwise (D90)."""
    config = default_config(64, False, Variant(seq_parallel=False), "bfloat16")
    assert (config.fa1_splits, config.fa1_bwd_splits) == (0, 0)


def test_fa1_bwd_column_parallel_is_fa1s_heuristic():
    """fmha_bwd_launch_template.h: the column grid where its wave efficiency, discounted by
    1 + block_n / seqlen_k (half that causal), beats one program per (batch, head); causal from
    10 column blocks always."""
    H200 = lambda: (132, 1)  # noqa: E731 - 132 SMs, one CTA each
    # the paper grid at d=128 on 132 SMs: 512 (b, h) at 512 keys fill 0.97 of 4 waves, the
    # 2048 column programs 0.97 too, discounted by 1.25: one program a (batch, head)
    assert not fa1_bwd_column_parallel(512, H200, 512, 128, False)
    # 64 (b, h) at 4k: 0.48 of a wave against 2048 columns' 0.97 / (1 + 1/32)
    assert fa1_bwd_column_parallel(64, H200, 4096, 128, False)
    # causal at 1k: 8 blocks, 0.97 against 0.97 / (1 + 0.5 / 8); from 10 blocks always
    assert not fa1_bwd_column_parallel(256, H200, 1024, 128, True)
    assert fa1_bwd_column_parallel(256, H200, 1280, 128, True)
    # seqlen_k rounded up to whole blocks: 65 keys are two blocks of 64, one key is one
    assert fa1_bwd_column_parallel(4, H200, 65, 64, False)
    assert not fa1_bwd_column_parallel(4, H200, 1, 64, False)
    # fa1_bwd_splits: 1 never, more always, seq_parallel always; the occupancy asked lazily
    off, on = Variant(seq_parallel=False), Variant()
    never_asked = lambda: pytest.fail("occupancy asked")  # noqa: E731
    assert not bwd_column_parallel(off, 1, 64, 4096, 128, False, never_asked)
    assert bwd_column_parallel(off, 2, 512, 512, 128, False, never_asked)
    assert bwd_column_parallel(on, 1, 512, 512, 128, False, never_asked)
    assert bwd_column_parallel(off, 0, 256, 1280, 128, True, never_asked)
    assert not bwd_column_parallel(off, 0, 4, 100, 128, False, never_asked)  # one block
    assert bwd_column_parallel(off, 0, 64, 4096, 128, False, lambda: (132, 1))
    assert not bwd_column_parallel(off, 0, 64, 4096, 128, False, lambda: (33, 1))


@pytest.mark.parametrize("problem", PROBLEMS[:3], ids=str)
def test_fa1_backward_on_both_of_its_grids(problem, device):
    """seq_parallel off's backward on one program per (batch, head) and on FA1's column grid
    (one program per 16-key column block, dQ by atomic adds) against the float64 oracle; dK
    and dV are the same sums in the same order on both grids, bit for bit."""
    ref = Reference(problem, device)
    for variant in VARIANTS:
        grads = {}
        for bwd_splits in (1, 2):
            config = _config(problem, 1, bwd_splits)
            checks = ref.check(partial(flash_attention, config=config), variant)
            failed = [str(c) for c in checks if not c.passed]
            assert not failed, f"{variant} fa1_bwd_splits={bwd_splits}: " + "; ".join(failed)
            q, k, v, do = (t.detach().requires_grad_(True) for t in problem.inputs(device))
            o = flash_attention(q, k, v, causal=problem.causal, variant=variant, config=config)
            grads[bwd_splits] = torch.autograd.grad(o, (k, v), do)
        assert all(torch.equal(a, b) for a, b in zip(grads[1], grads[2])), variant
