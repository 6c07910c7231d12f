"""The causal launch order (kernels/launch_order.py): every (head, program) runs exactly once,
and each head's programs of each kind start longest first."""
import pytest
import torch
import triton
import triton.language as tl

from kernels.launch_order import launch_slot


@triton.jit
def _launch_order(OUT, n_col_blocks, n_dq_blocks, group_size, heads_window):
    off_bh, pid = launch_slot(tl.program_id(0), tl.program_id(1), tl.num_programs(0),
                              tl.num_programs(1), n_col_blocks, n_dq_blocks, group_size,
                              heads_window)
    slot = tl.program_id(1) * tl.num_programs(0) + tl.program_id(0)
    tl.store(OUT + 2 * slot, off_bh)
    tl.store(OUT + 2 * slot + 1, pid)


def launch_order(n_bh, n_col_blocks, n_row_blocks, group_size, heads_window, device):
    """[(kv head, program)] in launch order (program: column blocks first, then the dQ pass's
    row blocks, group head by group head, as _attn_bwd numbers them)."""
    n_dq_blocks = group_size * n_row_blocks
    n_programs = n_col_blocks + n_dq_blocks
    out = torch.full((n_bh * n_programs, 2), -1, dtype=torch.int32, device=device)
    _launch_order[(n_programs, n_bh)](out, n_col_blocks, n_dq_blocks, group_size, heads_window)
    return [tuple(x) for x in out.tolist()]


def length(program, n_col_blocks, n_row_blocks):
    """Steps of a causal program of a square problem, in blocks: column block j walks the rows
    from its diagonal down, dQ row block i the keys up to its diagonal."""
    if program < n_col_blocks:
        return n_col_blocks - program
    return (program - n_col_blocks) % n_row_blocks + 1


@pytest.mark.parametrize("n_bh,n_blocks,group_size,heads_window",
                         [(1, 5, 1, 1), (7, 4, 1, 3), (6, 3, 2, 4), (5, 6, 3, 5), (4, 2, 1, 8)])
def test_every_program_once_and_heaviest_first(n_bh, n_blocks, group_size, heads_window,
                                               device):
    order = launch_order(n_bh, n_blocks, n_blocks, group_size, heads_window, device)
    n_programs = n_blocks * (1 + group_size)
    assert sorted(order) == [(h, p) for h in range(n_bh) for p in range(n_programs)]
    for h in range(n_bh):
        mine = [p for bh, p in order if bh == h]
        columns = [length(p, n_blocks, n_blocks) for p in mine if p < n_blocks]
        rows = [length(p, n_blocks, n_blocks) for p in mine if p >= n_blocks]
        assert columns == sorted(columns, reverse=True)
        assert rows == sorted(rows, reverse=True)
        assert mine[:2] == [0, n_programs - 1 - (group_size - 1) * n_blocks]
    # windows: the slots of a window hold its heads only, each head's rank t before rank t + 1
    for first in range(0, n_bh, heads_window):
        heads = set(range(first, min(first + heads_window, n_bh)))
        window = order[first * n_programs:(first + len(heads)) * n_programs]
        assert {h for h, _ in window} == heads
        assert [h for h, _ in window[:len(heads)]] == sorted(heads)


def test_column_blocks_alone_keep_their_order(device):
    """The backward without the dQ pass: column blocks only, the first the longest."""
    order = launch_order(3, 4, 0, 1, 2, device)
    assert order == [(0, 0), (1, 0), (0, 1), (1, 1), (0, 2), (1, 2), (0, 3), (1, 3),
                     (2, 0), (2, 1), (2, 2), (2, 3)]


def test_row_blocks_alone_start_longest_first(device):
    """The forward's use: row blocks only, each head's last (longest) first."""
    order = launch_order(3, 0, 3, 1, 2, device)
    assert order == [(0, 2), (1, 2), (0, 1), (1, 1), (0, 0), (1, 0), (2, 2), (2, 1), (2, 0)]
