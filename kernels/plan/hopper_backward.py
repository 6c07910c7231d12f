"""The Hopper chassis backward's host planning (kernels/hopper_backward.py runs it): its tiles
(128 keys a program, the query rows of a step) and the slots of its Q/dO ring that fit in
sm_90's shared memory."""
from .hopper_forward import SHARED_LIMIT

BLOCK_N = 128  # keys a program's column block: 64 a consumer
BWD_STAGES = (2, 1)  # the Q/dO ring's slots, the first that fits (`bwd_stages`)
# CTAs an SM holds, for FA1's launcher's occupancy question (fa1_launch): the two consumer
# warpgroups' setmaxnreg of 240 alone take 61,440 of an SM's 65,536 registers
CTAS_PER_SM = 1


def bwd_rows(head_dim: int, variant) -> int:
    """Query rows a step (N of S^T and dP^T, M of dQ's product). 128 at head_dim 64 with
    split-Q and without overlap, as FlashAttention-3's sm_90 backward tiles head_dim 64
    (128 x 128): a step's products are then 64 keys x 128 rows x 64, not 64 x 64 x 64. 64
    elsewhere: at 128 rows split-K's exchange (4 float32 tiles of 128 x 32) leaves the ring
    one slot and spills 80-88 bytes, overlap's dP^T in flight 144-172 (sm_90 builds of
    this kernel); at head_dim 128, S^T, dP^T, dK_c and dV_c already hold 192 of a consumer's
    240 registers."""
    return 128 if head_dim == 64 and variant.split_q and not variant.overlap else 64


def shared_bytes(head_dim: int, stages: int, split_q: bool, rows: int) -> int:
    """Shared memory of the buffers: the Q/dO ring, K and V, dS^T (2 x 128 keys x rows 16-bit)
    and dQ's rows x D/2 float32 tiles: split-Q's staging for the TMA reduction (2 consumers),
    split-K's exchange (2 parities x 2 consumers), which stages too; and each ring slot's row
    statistics (L and D, and 1/l where defer_norm is off: a float32 a row each; the bound
    takes 3)."""
    keys = BLOCK_N
    ring = stages * 2 * rows * head_dim * 2
    kv = 2 * keys * head_dim * 2
    ds = 2 * keys * rows * 2
    dq_tiles = (2 if split_q else 4) * rows * (head_dim // 2) * 4
    stats = stages * 3 * rows * 4
    return ring + kv + ds + dq_tiles + stats


def bwd_stages(head_dim: int, split_q: bool, rows: int) -> int:
    """The Q/dO ring's slots: 2 where they fit in sm_90's shared memory, else 1."""
    return next(s for s in BWD_STAGES
                if shared_bytes(head_dim, s, split_q, rows) <= SHARED_LIMIT)
