"""`Variant`: which of FlashAttention-2's three implementation changes are switched on.

One `Variant` is the single source of truth for names: kernels, tests, the CLI and result files
all use `str(variant)`, and `Variant.parse(str(v)) == v`.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass, fields

_FLAG_NAMES = {"defer_norm": "defer", "seq_parallel": "seqpar", "split_q": "splitq"}


@dataclass(frozen=True)
class Variant:
    """The three switches of the FA2 paper (arXiv 2307.08691, sections 3.1-3.3).

    - defer_norm: keep the output unnormalised inside the K/V loop and divide by the softmax sum
      once at the end, storing one logsumexp per row (off: FA1's per-tile renormalisation,
      storing m and l).
    - seq_parallel: one program per query row block, looping over the K/V tiles (off: FA1's
      schedule, one program per (batch, head) looping over the K/V tiles and, inside, over
      the row blocks, whose partial outputs wait in HBM between tiles; kernels/forward.py).
    - split_q: each program's rows own their whole softmax (off: split-K, every K/V tile is cut
      into key slices whose partial max, sum and output are merged).
    """

    defer_norm: bool = True
    seq_parallel: bool = True
    split_q: bool = True

    def __post_init__(self):
        for f in fields(self):
            if not isinstance(getattr(self, f.name), bool):
                raise TypeError(f"Variant.{f.name} must be a bool, got {getattr(self, f.name)!r}")

    @classmethod
    def all(cls) -> list["Variant"]:
        """The 8 combinations, FA2 (all on) first and the FA1-style baseline (all off) last."""
        return [cls(*flags) for flags in itertools.product((True, False), repeat=3)]

    def __str__(self) -> str:
        return "".join(("+" if getattr(self, f) else "-") + short for f, short in _FLAG_NAMES.items())

    @classmethod
    def parse(cls, text: str) -> "Variant":
        """Inverse of `str` ('+defer-seqpar+splitq'); also accepts the aliases 'fa2' (all on) and 'fa1' (all off)."""
        text = text.strip()
        if text == "fa2":
            return cls()
        if text == "fa1":
            return cls(False, False, False)
        flags = {}
        for part in _split_signed(text):
            sign, short = part[:1], part[1:]
            names = [f for f, s in _FLAG_NAMES.items() if s == short]
            if sign not in "+-" or len(names) != 1 or names[0] in flags:
                raise ValueError(f"cannot parse variant {text!r}; expected e.g. {str(cls())!r}")
            flags[names[0]] = sign == "+"
        if len(flags) != 3:
            raise ValueError(f"cannot parse variant {text!r}; expected e.g. {str(cls())!r}")
        return cls(**flags)

    @property
    def label(self) -> str:
        """Short human label: FA2, FA1-style, or the flags that differ from FA2."""
        if self == Variant():
            return "FA2"
        if self == Variant(False, False, False):
            return "FA1-style"
        return "FA2 without " + ", ".join(f for f in _FLAG_NAMES if not getattr(self, f))


def _split_signed(text: str) -> list[str]:
    """Split '+defer-seqpar+splitq' style text into ['+defer', '-seqpar', '+splitq']."""
    parts, current = [], ""
    for ch in text:
        if ch in "+-" and current:
            parts.append(current)
            current = ""
        current += ch
    parts.append(current)
    return parts
