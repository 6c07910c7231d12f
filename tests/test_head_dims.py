"""Any head_dim from 1 to 256: the tiles pad it to block_d(head_dim) columns and mask the rest
(kernels/forward.py, kernels/backward.py), or (the forward, D60) carry it in two column chunks
of tile widths (kernels.plan.tiles.head_chunks). Every variant, forward and backward, against the
float64 oracle at head dims that are not tile widths, with small lengths (the interpreter).
v may have a head dimension of its own (head_dim_v, o's too): decisions D56."""
from dataclasses import replace

import pytest
import torch

from fa2check.core.checks import Reference
from fa2check.core.problems import Problem
from kernels import TILE_HEAD_DIMS, TileConfig, Variant, flash_attention
from kernels.plan.tiles import MIN_DOT_DIM, block_d, head_chunks, tile_columns, tma_fits
from lattice import DTYPES, SHAPES

ODD_HEAD_DIMS = (1, 40, 59, 80, 96, 111, 160)
# (head_dim, head_dim_v): v wider and narrower than q and k, padded or not
VALUE_HEAD_DIMS = ((40, 96), (96, 40), (32, 16), (17, 7))


def _problem(head_dim, i):
    """Shape, dtype and mask turn with i, so each head_dim meets several of each."""
    hq, hkv, sq, sk = SHAPES[i % len(SHAPES)]
    return Problem(1, hq, hkv, min(sq, 33), min(sk, 33), head_dim, DTYPES[i % len(DTYPES)],
                   i % 2 == 1, seed=head_dim * 8 + i)


def _assert_passes(problem, variant, device, config=None, backward=True):
    ref = Reference(problem, device, backward=backward)
    fn = flash_attention if config is None else (
        lambda *a, **kw: flash_attention(*a, config=config, **kw))
    failed = [str(c) for c in ref.check(fn, variant) if not c.passed]
    assert not failed, f"{variant} on {problem}: " + "; ".join(failed)


def test_block_d_pads_to_a_tile_width():
    assert [block_d(d) for d in (1, 15, 16, 17, 40, 64, 65, 96, 160, 255, 256)] == \
        [16, 16, 16, 32, 64, 64, 128, 128, 256, 256, 256]
    assert {block_d(d) for d in range(1, 257)} == set(TILE_HEAD_DIMS)


def test_head_chunks_are_tile_widths_that_waste_fewest_columns():
    assert {d: head_chunks(d) for d in (1, 17, 40, 80, 96, 112, 160, 192, 200)} == {
        1: (16, 0), 17: (32, 0), 40: (32, 16), 80: (64, 16), 96: (64, 32), 112: (128, 0),
        160: (128, 32), 192: (128, 64), 200: (256, 0)}
    for d in range(1, 257):
        d0, d1 = head_chunks(d)
        assert d0 in TILE_HEAD_DIMS and d1 in (0, *TILE_HEAD_DIMS)
        assert d0 + d1 >= d and (d1 == 0) == (d0 >= d)  # a second chunk only past a first
        assert d1 == 0 or d0 < d <= d0 + d1 < block_d(d)  # chunks only where they save columns
        # the fewest columns of either layout (ties: one padded tile, one dot)
        first = 1 << (d.bit_length() - 1)  # the largest power of two <= d
        split = first + block_d(d - first) if MIN_DOT_DIM <= first < d else block_d(d)
        assert tile_columns(d) == min(block_d(d), split)


# every variant at a chunked head dim, and v's own chunks (192/128: q's chunks, v's one tile)
CHUNKED_HEAD_DIMS = ((96, 96), (192, 128), (40, 80))


@pytest.mark.parametrize("head_dim, head_dim_v", CHUNKED_HEAD_DIMS,
                         ids=[f"d{d}-dv{dv}" for d, dv in CHUNKED_HEAD_DIMS])
def test_every_variant_at_chunked_head_dims(head_dim, head_dim_v, device):
    """The forward's two column chunks against the oracle, all 8 variants, forward and
    backward (padded), several K/V tiles and row blocks, both masks (D60)."""
    assert head_chunks(head_dim)[1] > 0
    for i, variant in enumerate(Variant.all()):
        problem = Problem(1, 2, 1, 21, 35, head_dim, DTYPES[i % len(DTYPES)], i % 2 == 1,
                          seed=head_dim + i, head_dim_v=head_dim_v)
        config = TileConfig(16, 16, num_stages=1, bwd_block_m=16, bwd_block_n=16,
                            bwd_num_stages=1)
        _assert_passes(problem, variant, device, config)


@pytest.mark.parametrize("head_dim", ODD_HEAD_DIMS)
def test_every_variant_at_odd_head_dims(head_dim, device):
    """All 8 variants (both schedules of seq_parallel), forward and backward, each on its own
    shape, dtype and mask."""
    for i, variant in enumerate(Variant.all()):
        _assert_passes(_problem(head_dim, i + head_dim), variant, device)


@pytest.mark.parametrize("head_dim, head_dim_v", VALUE_HEAD_DIMS,
                         ids=[f"d{d}-dv{dv}" for d, dv in VALUE_HEAD_DIMS])
def test_every_variant_with_a_value_head_dim_of_its_own(head_dim, head_dim_v, device):
    """All 8 variants, forward (o has v's head dim, softmax_scale q's) and backward (dv has v's
    head dim, Delta = rowsum(dO * O) over it), each on its own shape (GQA, MQA, ragged
    lengths), dtype and mask."""
    for i, variant in enumerate(Variant.all()):
        problem = replace(_problem(head_dim, i + head_dim_v), head_dim_v=head_dim_v)
        _assert_passes(problem, variant, device)


@pytest.mark.parametrize("dq_pass", (False, True), ids=("dq-in-loop", "dq-pass"))
@pytest.mark.parametrize("head_dim, head_dim_v", ((40, 96), (96, 40)),
                         ids=("d40-dv96", "d96-dv40"))
def test_value_head_dim_over_several_tiles(head_dim, head_dim_v, dq_pass, device):
    """Several K/V tiles (FA1's schedule keeps its float32 scratch, v's head dim wide, between
    them), row blocks and column blocks; dQ in the dK/dV loop and in its own pass."""
    problem = Problem(1, 4, 2, 45, 37, head_dim, "float16", True, seed=head_dim,
                      head_dim_v=head_dim_v)
    config = TileConfig(16, 16, num_stages=1, bwd_block_m=16, bwd_block_n=16, bwd_num_stages=1,
                        bwd_dq_pass=dq_pass)
    for variant in Variant.all():
        _assert_passes(problem, variant, device, config)


@pytest.mark.parametrize("dq_pass", (False, True), ids=("dq-in-loop", "dq-pass"))
@pytest.mark.parametrize("head_dim", (40, 111))
def test_backward_both_places_of_dq_at_odd_head_dims(head_dim, dq_pass, device):
    """dQ summed in the dK/dV loop (atomics with seq_parallel, read-modify-write without) and in
    its own pass; several column and row blocks."""
    problem = Problem(1, 4, 2, 45, 37, head_dim, "float16", True, seed=head_dim)
    config = TileConfig(32, 16, num_stages=1, bwd_block_m=16, bwd_block_n=16, bwd_num_stages=1,
                        bwd_dq_pass=dq_pass)
    for variant in Variant.all():
        _assert_passes(problem, variant, device, config)


def test_tma_fits_rows_of_whole_16_byte_units():
    """TMA per column chunk (D62): a descriptor a chunk, each box at least 16 columns, so
    what TMA cannot carry is a row stride that is not a multiple of 16 bytes."""
    assert [d for d in range(1, 257) if tma_fits(d, dtype="bfloat16")] == list(range(8, 257, 8))
    assert [d for d in range(1, 257) if tma_fits(d, dtype=torch.float16)] == \
        list(range(8, 257, 8))
    assert [d for d in range(1, 257) if tma_fits(d, dtype="float32")] == list(range(4, 257, 4))
    assert tma_fits(40, 80, 96, 160, 192, dtype="bfloat16")
    assert not tma_fits(96, 100, dtype="bfloat16")  # v's 200-byte rows


def test_tma_is_refused_where_rows_are_not_16_byte_units(device):
    q = torch.randn(1, 2, 8, 44, device=device, dtype=torch.float16)  # 88-byte rows
    with pytest.raises(ValueError, match="config.tma needs k's rows a multiple of 16 bytes"):
        flash_attention(q, q, q, config=TileConfig(32, 16, tma=True))


# TMA per chunk (D62): 96 = 64 + 32, both chunks whole; 40 = 32 + 16 of which 8 are K's (the
# box reaches past K's columns and reads zeros there) with v's 80 = 64 + 16
TMA_CHUNKED_HEAD_DIMS = ((96, 96), (40, 80))


@pytest.mark.parametrize("head_dim, head_dim_v", TMA_CHUNKED_HEAD_DIMS,
                         ids=[f"d{d}-dv{dv}" for d, dv in TMA_CHUNKED_HEAD_DIMS])
def test_every_variant_through_a_descriptor_per_chunk(head_dim, head_dim_v, device):
    """K and V through tensor descriptors, one a column chunk, against the oracle: all 8
    variants (FA2's K/V-inner loop and FA1's K/V-outer schedule), both masks, several K/V
    tiles and row blocks, each dtype in turn."""
    assert head_chunks(head_dim)[1] > 0 and head_chunks(head_dim_v)[1] > 0
    for i, variant in enumerate(Variant.all()):
        dtype = DTYPES[i % len(DTYPES)]
        assert tma_fits(head_dim, head_dim_v, dtype=dtype)
        problem = Problem(1, 2, 1, 21, 35, head_dim, dtype, i % 2 == 1, seed=head_dim + i,
                          head_dim_v=head_dim_v)
        config = TileConfig(16, 16, num_stages=1, tma=True)
        _assert_passes(problem, variant, device, config, backward=False)


@pytest.mark.parametrize("head_dim, head_dim_v", TMA_CHUNKED_HEAD_DIMS + ((192, 128), (24, 24)),
                         ids=lambda d: str(d))
def test_descriptors_read_the_columns_pointers_read(head_dim, head_dim_v, device):
    """Each chunk's descriptor covers its chunk's columns and no other: o and lse through
    descriptors are those through pointers (the same products of the same values) to float32
    rounding, in both schedules and masks, where a box at another column or of another width
    moves them by far more; 24 is one padded tile (16 + 16 would save no column), its box
    past K's 24 columns. (Not bitwise: the interpreter's products of a transposed K tile round
    differently, one ulp of lse at d=64 too.)"""
    gen = torch.Generator().manual_seed(head_dim)
    q = torch.randn(1, 2, 21, head_dim, generator=gen).to(device, torch.bfloat16)
    k = torch.randn(1, 1, 35, head_dim, generator=gen).to(device, torch.bfloat16)
    v = torch.randn(1, 1, 35, head_dim_v, generator=gen).to(device, torch.bfloat16)
    for variant in (Variant(), Variant(seq_parallel=False)):
        for causal in (False, True):
            (o_ptr, lse_ptr), (o_tma, lse_tma) = (
                flash_attention(q, k, v, causal=causal, variant=variant, return_lse=True,
                                config=TileConfig(16, 16, num_stages=1, tma=tma))
                for tma in (False, True))
            where = f"{variant} causal={causal}"
            torch.testing.assert_close(lse_tma, lse_ptr, rtol=0, atol=1e-5, msg=where)
            # o to about a bfloat16 rounding step
            torch.testing.assert_close(o_tma.float(), o_ptr.float(), rtol=2**-7, atol=2**-9,
                                       msg=where)


def test_other_backends_keep_their_head_dims():
    from kernels.gluon_forward import check_gluon_call
    from kernels.hopper_forward import unsupported

    with pytest.raises(ValueError, match="head_dim in"):
        check_gluon_call(torch.bfloat16, 40, Variant(), TileConfig(64, 32))
    assert "head_dim in" in unsupported(torch.bfloat16, 96)
    assert "takes v with q's head_dim (128), got head_dim_v 64" in unsupported(
        torch.bfloat16, 128, 64)
    assert unsupported(torch.bfloat16, 128, 128) is None


# compiled on the GPU: long enough for several K/V tiles and row blocks, unequal lengths,
# GQA and MQA, both masks, bfloat16 and float32 (float32 at d = 96 and 160 takes the padded
# tile's float32 configuration)
GPU_PROBLEMS = [
    Problem(2, 8, 2, 777, 1031, 40, "bfloat16", True),
    Problem(1, 6, 1, 1024, 1024, 96, "bfloat16", False),
    Problem(1, 4, 2, 513, 700, 96, "float32", True),
    Problem(1, 6, 3, 1000, 517, 160, "bfloat16", True),
    Problem(1, 2, 1, 300, 641, 160, "float32", False),
]
# v's own head dim: DeepSeek's MLA (192/128) and an odd pair
GPU_VALUE_PROBLEMS = [
    Problem(2, 8, 2, 777, 1031, 192, "bfloat16", True, head_dim_v=128),
    Problem(1, 6, 3, 1000, 517, 192, "bfloat16", False, head_dim_v=128),
    Problem(1, 4, 1, 513, 700, 40, "bfloat16", True, head_dim_v=96),
    Problem(1, 4, 2, 300, 641, 40, "float32", False, head_dim_v=96),
]


@pytest.mark.gpu
@pytest.mark.parametrize("problem", GPU_PROBLEMS, ids=str)
def test_gpu_odd_head_dims_forward_and_backward(problem, device):
    """FA2's forward (o, lse) and backward (dq, dk, dv) against the float64 oracle by the pass
    rule, compiled, at head dims the tiles pad (40 -> 64, 96 -> 128, 160 -> 256)."""
    _assert_passes(problem, Variant(), device)


@pytest.mark.gpu
@pytest.mark.parametrize("problem", GPU_VALUE_PROBLEMS, ids=str)
def test_gpu_value_head_dim_of_its_own(problem, device):
    """FA2 and FA1's schedule (its scratch v's head dim wide), forward and backward, against
    the float64 oracle by the pass rule, compiled, with head_dim_v != head_dim."""
    for variant in (Variant(), Variant(seq_parallel=False)):
        _assert_passes(problem, variant, device)


def test_chunked_tiles_only_where_they_fit():
    """head_dim 128's forward tiles at 160 and 192 columns in chunks (D60) are for split-Q with
    seq_parallel only: FA1's schedule needs more shared memory than sm_90 has on them, split-K
    spills; those, and float32, keep head_dim 256's."""
    from kernels.plan.config import heuristic_config

    def block_m(variant, dtype="bfloat16", head_dim=192):
        return heuristic_config(head_dim, True, variant, dtype).block_m

    assert block_m(Variant()) == block_m(Variant(defer_norm=False)) == 128
    assert block_m(Variant(), head_dim=160) == 128
    assert block_m(Variant(seq_parallel=False)) == block_m(Variant(split_q=False)) == 64
    assert block_m(Variant(), "float32") == 64 and block_m(Variant(), head_dim=256) == 64
    # with a descriptor a column chunk (D62), on the tiles that have them
    assert heuristic_config(192, True, Variant(), "bfloat16").tma
    assert heuristic_config(160, True, Variant(), "float16").tma
    assert not heuristic_config(192, True, Variant(seq_parallel=False), "bfloat16").tma
    assert not heuristic_config(192, True, Variant(), "float32").tma
