"""The Hopper chassis backward's host planning (kernels/hopper_backward.py runs it): its fixed
tiles and the slots of its Q/dO ring that fit in sm_90's shared memory."""
from .hopper_forward import SHARED_LIMIT

BLOCK_M = 64  # query rows a step: a wgmma's M, and N of S^T and dP^T
BLOCK_N = 128  # keys a program's column block: 64 a consumer
BWD_STAGES = (2, 1)  # the Q/dO ring's slots, the first that fits (`bwd_stages`)
# CTAs an SM holds, for FA1's launcher's occupancy question (fa1_launch): the two consumer
# warpgroups' setmaxnreg of 240 alone take 61,440 of an SM's 65,536 registers
CTAS_PER_SM = 1


def shared_bytes(head_dim: int, stages: int, split_q: bool) -> int:
    """Shared memory of the buffers: the Q/dO ring, K and V, dS^T (2 x 128 x 64 16-bit) and
    dQ's 64 x D/2 float32 tiles: split-Q's staging for the TMA reduction (2 consumers),
    split-K's exchange (2 parities x 2 consumers), which stages too; and each ring slot's row
    statistics (L and D, and 1/l where defer_norm is off: 64 float32 each; the bound takes 3)."""
    rows, keys = BLOCK_M, BLOCK_N
    ring = stages * 2 * rows * head_dim * 2
    kv = 2 * keys * head_dim * 2
    ds = 2 * keys * rows * 2
    dq_tiles = (2 if split_q else 4) * rows * (head_dim // 2) * 4
    stats = stages * 3 * rows * 4
    return ring + kv + ds + dq_tiles + stats


def bwd_stages(head_dim: int, split_q: bool) -> int:
    """The Q/dO ring's slots: 2 where they fit in sm_90's shared memory, else 1."""
    return next(s for s in BWD_STAGES if shared_bytes(head_dim, s, split_q) <= SHARED_LIMIT)
