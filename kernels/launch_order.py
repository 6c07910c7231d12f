"""Causal launch order: the longest programs first.

Causal programs differ in length: a query row block i (the forward's, the dQ pass's) walks the
keys up to i's diagonal, the backward's column block j walks the query rows from j's diagonal
down. The GPU starts programs in launch order, so with every head's programs in index order the
last heads' longest row blocks start last and end alone: a tail of about 3-8% of a causal
launch in ablations/probes/launch_tail.py's model. The causal forward uses it from
LONGEST_FIRST_MIN_KEYS keys (docs/decisions.md D25, D26); the backward's use (column blocks and
dQ row blocks) is ablations/patches/heaviest-first-bwd.patch, measured faster and not yet
adopted (D39).
"""
import triton
import triton.language as tl

# Windows of heads whose tensors that many programs read again (the forward: K and V; the
# backward: Q, dO, K and V) take about this many bytes in 2-byte types: a window's data stays in
# the 50 MB L2, and a window holds enough work that its longest programs, started first, end
# with the rest (docs/decisions.md D25).
WINDOW_BYTES = tl.constexpr(32 << 20)

# Below this many keys the causal forward runs in index order: at 1k keys longest first was
# 4% slower in an A/B (d=128 bf16) and 5-8% in the forward tables; at 2k it was as fast
# (d=128) or 3% faster (d=64) (docs/decisions.md D26).
LONGEST_FIRST_MIN_KEYS = tl.constexpr(2048)


@triton.jit
def heaviest_first(n_col_blocks, n_row_blocks, group_size, seqlen, HEAD_DIM: tl.constexpr,
                   REREAD: tl.constexpr):
    """(head, program) that this program of a (programs, heads) grid runs instead, in windows
    of heads with REREAD (seqlen, HEAD_DIM) tensors in WINDOW_BYTES; see launch_slot."""
    n_heads = tl.num_programs(1)
    window = tl.minimum(n_heads, tl.cdiv(WINDOW_BYTES // (REREAD * 2 * HEAD_DIM), seqlen))
    return launch_slot(tl.program_id(0), tl.program_id(1), tl.num_programs(0), n_heads,
                       n_col_blocks, n_row_blocks, group_size, window)


@triton.jit
def launch_slot(pid, off_h, n_programs, n_heads, n_col_blocks, n_row_blocks, group_size, window):
    """(head, program) for launch slot (pid, off_h) of a grid whose programs of a head are
    n_col_blocks column blocks (the first the longest), then n_row_blocks row blocks: those of
    each of group_size query heads in turn, the last of each the longest.

    The launch goes through windows of `window` heads; inside a window, every head's rank t
    comes before rank t + 1, and the ranks alternate column blocks from the first and row
    blocks from the last (each query head's in turn), so each kind starts longest first."""
    lin = off_h * n_programs + pid
    first = lin // (window * n_programs) * window
    width = tl.minimum(window, n_heads - first)  # the last window may be narrower
    local = lin - first * n_programs
    t = local // width  # 0: the longest
    both = tl.minimum(n_col_blocks, n_row_blocks)
    alternating = t < 2 * both
    idx = tl.where(alternating, t // 2, t - both)
    is_col = tl.where(alternating, t % 2 == 0, n_col_blocks > n_row_blocks)
    per_head = n_row_blocks // group_size
    row = n_col_blocks + (idx % group_size) * per_head + per_head - 1 - idx // group_size
    return first + local % width, tl.where(is_col, idx, row)
