"""The outputs every forward launcher allocates alike (the Triton, Gluon and Hopper forwards), in
the layout the backward reads them: o, and the row statistics, lse or m and l."""


def empty_outputs(q, defer_norm: bool, head_dim_v: int | None = None):
    """Every forward launcher's outputs: o (q's shape with v's head dimension head_dim_v, q's by
    default; contiguous, q's dtype), the statistics
    the backward takes, float32 (B, Hq, Sq): (lse,) with defer_norm, else (m, l), and the
    three pointers a kernel takes, (LSE, M, L), those it does not write aliased to one it does."""
    import torch

    o = torch.empty(q.shape[:3] + (head_dim_v or q.shape[3],), device=q.device, dtype=q.dtype)
    stats = tuple(torch.empty(q.shape[:3], device=q.device, dtype=torch.float32)
                  for _ in range(1 if defer_norm else 2))
    pointers = (stats[0],) * 3 if defer_norm else (stats[0], *stats)
    return o, stats, pointers
