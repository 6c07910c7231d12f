"""`Problem`: one attention call's shapes, dtype and masking, and its seeded inputs."""
from __future__ import annotations

import re
from dataclasses import asdict, dataclass

import torch

DTYPES = {"float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32}


@dataclass(frozen=True)
class Problem:
    batch: int
    heads_q: int
    heads_kv: int
    seqlen_q: int
    seqlen_k: int
    head_dim: int
    dtype: str = "float16"
    causal: bool = False
    seed: int = 0
    head_dim_v: int | None = None  # v's (and o's) head dimension; None: head_dim

    def __post_init__(self):
        if self.head_dim_v is None:
            object.__setattr__(self, "head_dim_v", self.head_dim)

    def __str__(self) -> str:
        mask = "causal" if self.causal else "full"
        dims = (f"{self.head_dim}" if self.head_dim_v == self.head_dim
                else f"{self.head_dim}/{self.head_dim_v}")
        return (f"b{self.batch}-h{self.heads_q}/{self.heads_kv}-q{self.seqlen_q}-k{self.seqlen_k}"
                f"-d{dims}-{self.dtype}-{mask}-s{self.seed}")

    @classmethod
    def parse(cls, text: str) -> "Problem":
        """Inverse of `str`: 'b1-h4/2-q17-k33-d16-float16-causal-s0' -> Problem; v's own head
        dim follows q's: 'd192/128'."""
        match = _PATTERN.fullmatch(text.strip())
        if not match or match["dtype"] not in DTYPES:
            raise ValueError(f"cannot parse problem {text!r}; expected e.g. "
                             f"{str(cls(1, 4, 2, 17, 33, 16, 'float16', True))!r}")
        ints = {name: int(match[name]) for name in ("batch", "heads_q", "heads_kv", "seqlen_q",
                                                     "seqlen_k", "head_dim", "seed")}
        return cls(**ints, dtype=match["dtype"], causal=match["mask"] == "causal",
                   head_dim_v=int(match["head_dim_v"]) if match["head_dim_v"] else None)

    @property
    def torch_dtype(self) -> torch.dtype:
        return DTYPES[self.dtype]

    def as_dict(self) -> dict:
        return asdict(self)

    def inputs(self, device="cpu", scale: float = 1.0):
        """q, k, v (standard normal times `scale`) and an upstream gradient dO (o's shape, v's
        head dim), all seeded."""
        gen = torch.Generator().manual_seed(self.seed)
        shape_q = (self.batch, self.heads_q, self.seqlen_q, self.head_dim)
        shape_k = (self.batch, self.heads_kv, self.seqlen_k, self.head_dim)
        shape_v = shape_k[:3] + (self.head_dim_v,)
        shape_o = shape_q[:3] + (self.head_dim_v,)
        q, k, v, do = (torch.randn(s, generator=gen) * (scale if i < 3 else 1.0)
                       for i, s in enumerate((shape_q, shape_k, shape_v, shape_o)))
        return tuple(t.to(device=device, dtype=self.torch_dtype) for t in (q, k, v, do))


_PATTERN = re.compile(r"b(?P<batch>\d+)-h(?P<heads_q>\d+)/(?P<heads_kv>\d+)-q(?P<seqlen_q>\d+)"
                      r"-k(?P<seqlen_k>\d+)-d(?P<head_dim>\d+)(?:/(?P<head_dim_v>\d+))?"
                      r"-(?P<dtype>\w+)-(?P<mask>causal|full)-s(?P<seed>\d+)")
