"""Cells that `fa2check.ablate` times: the FA2 paper's benchmark grid, a quick subset, and custom
cells from the command line; and the paper's FLOP convention.

A cell is one attention problem (batch, heads, seqlen, head_dim, dtype, causal) with
seqlen_q == seqlen_k, so torch SDPA's top-left causal mask equals ours (bottom-right).
"""
from __future__ import annotations

from dataclasses import asdict, dataclass

from ..core.problems import DTYPES

MODES = ("fwd", "bwd", "fwd+bwd")
# The paper's convention: backward = 2.5 forward (two matmuls forward, five backward).
FLOP_FACTOR = {"fwd": 1.0, "bwd": 2.5, "fwd+bwd": 3.5}

PAPER_HIDDEN = 2048  # head_dim 64 -> 32 heads, 128 -> 16 heads
PAPER_TOKENS = 16384  # batch * seqlen
PAPER_SEQLENS = (512, 1024, 2048, 4096, 8192, 16384)
PAPER_HEAD_DIMS = (64, 128)
PAPER_DTYPES = ("bfloat16", "float16")
# one short (many programs), one longer (64 (batch, head) programs at d=128, 128 at d=64: FA1's
# schedule leaves SMs idle); 8k would add FA1-style calls of 10-30 ms to every sweep
QUICK_SEQLENS = (1024, 4096)


@dataclass(frozen=True)
class Cell:
    batch: int
    heads_q: int
    heads_kv: int
    seqlen: int  # seqlen_q == seqlen_k
    head_dim: int
    dtype: str  # "bfloat16", "float16" or "float32"
    causal: bool
    head_dim_v: int | None = None  # v's (and o's) head dim; None: head_dim

    @property
    def dv(self) -> int:
        return self.head_dim if self.head_dim_v is None else self.head_dim_v

    def __post_init__(self):
        if min(self.batch, self.heads_q, self.heads_kv, self.seqlen, self.head_dim, self.dv) < 1:
            raise ValueError(f"cell dimensions must be positive: {self}")
        if self.heads_q % self.heads_kv:
            raise ValueError(f"heads_q ({self.heads_q}) must be a multiple of heads_kv ({self.heads_kv})")

    def __str__(self) -> str:
        heads = f"h{self.heads_q}" + (f"/{self.heads_kv}" if self.heads_kv != self.heads_q else "")
        dims = f"{self.head_dim}" + (f"/{self.dv}" if self.dv != self.head_dim else "")
        return (f"b{self.batch}-{heads}-s{self.seqlen}-d{dims}-{self.dtype}-"
                f"{'causal' if self.causal else 'full'}")

    def as_dict(self) -> dict:
        d = asdict(self)
        if self.head_dim_v is None:  # the key only where v has a head dim of its own
            del d["head_dim_v"]
        return d

    @property
    def torch_dtype(self):
        return DTYPES[self.dtype]

    def flops(self, mode: str) -> float:
        """The paper's count: forward 4*B*H*Sq*Sk*d (2*B*H*Sq*Sk*(d + dv) where v has its own
        head dim dv: Q K^T and P V), halved when causal; backward 2.5x."""
        fwd = 2.0 * self.batch * self.heads_q * self.seqlen * self.seqlen * (self.head_dim
                                                                           + self.dv)
        return fwd * (0.5 if self.causal else 1.0) * FLOP_FACTOR[mode]


def paper_heads(head_dim: int) -> int:
    return max(1, PAPER_HIDDEN // head_dim)


def paper_batch(seqlen: int) -> int:
    return max(1, PAPER_TOKENS // seqlen)


def paper_grid() -> list[Cell]:
    """The FA2 paper's benchmark: hidden 2048, batch * seqlen = 16k tokens."""
    return [Cell(paper_batch(s), paper_heads(d), paper_heads(d), s, d, dtype, causal)
            for dtype in PAPER_DTYPES for d in PAPER_HEAD_DIMS for causal in (False, True)
            for s in PAPER_SEQLENS]


def quick_grid() -> list[Cell]:
    return [Cell(paper_batch(s), paper_heads(d), paper_heads(d), s, d, "bfloat16", causal)
            for d in PAPER_HEAD_DIMS for causal in (False, True) for s in QUICK_SEQLENS]


GRIDS = {"paper": paper_grid, "quick": quick_grid}
# the modes a grid runs unless --mode says: quick is the forward alone, to finish in about two
# minutes on one H200 with a cold Triton cache (plan.py's estimate, printed at the start)
GRID_MODES = {"quick": "fwd"}


def custom_grid(seqlens, head_dims=(64,), causals=(False, True), dtypes=("bfloat16",),
                batch=None, heads=None, heads_kv=None) -> list[Cell]:
    """Every combination of the given values; batch defaults to 16k tokens / seqlen and heads
    to 2048 / head_dim, as in the paper."""
    cells = []
    for dtype in dtypes:
        for d in head_dims:
            for causal in causals:
                for s in seqlens:
                    hq = heads or paper_heads(d)
                    cells.append(Cell(batch or paper_batch(s), hq, heads_kv or hq, s, d, dtype,
                                      causal))
    return cells


def filter_grid(cells, seqlens=None, head_dims=None, causals=None, dtypes=None) -> list[Cell]:
    """Keep the cells of a preset grid that match every given list (None keeps all)."""
    return [c for c in cells
            if (seqlens is None or c.seqlen in seqlens)
            and (head_dims is None or c.head_dim in head_dims)
            and (causals is None or c.causal in causals)
            and (dtypes is None or c.dtype in dtypes)]


def parse_modes(values) -> list[str]:
    """'fwd,bwd' or repeated --mode values -> ordered unique list of modes."""
    modes = []
    for value in values:
        for mode in str(value).split(","):
            mode = mode.strip()
            if mode not in MODES:
                raise ValueError(f"unknown mode {mode!r}; expected one of {', '.join(MODES)}")
            if mode not in modes:
                modes.append(mode)
    return modes
