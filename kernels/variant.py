"""`Variant`: which of FlashAttention-2's three implementation changes are switched on, and,
on top of FA2 all on, which of the Hopper-era schedules that came after it (the Hopper chassis
only, kernels/hopper_forward.py; docs/decisions.md D59).

One `Variant` is the single source of truth for names: kernels, tests, the CLI and result files
all use `str(variant)`, and `Variant.parse(str(v)) == v`. A Hopper switch at its default adds
nothing to the name (`+pingpong` when on, `-warpspec` when off), so the 8 FA2 names are those of
the FA2 lattice alone.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass, fields

_FLAG_NAMES = {"defer_norm": "defer", "seq_parallel": "seqpar", "split_q": "splitq"}
# the second lattice's switches, named only away from their default ('-warpspec+pingpong');
# warp_specialize is on by default: the chassis's FA2 lattice loads through a producer warp
_HOPPER_NAMES = {"warp_specialize": "warpspec", "pingpong": "pingpong", "overlap": "overlap"}
_HOPPER_DEFAULTS = {"warp_specialize": True, "pingpong": False, "overlap": False}


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

    FlashAttention-3's schedules (arXiv 2407.08608), each on top of FA2 all on and only on the
    Hopper chassis (off: its free-running consumer warpgroups, one product at a time):
    - warp_specialize (FA3 section 3.1, on by default: the chassis's own design): a producer
      warp issues the TMA loads into the K/V ring and the consumer warpgroups only compute
      (off: one of the consumers issues them between its products).
    - pingpong (FA3 section 3.1): the two consumer warpgroups take turns at the tensor cores,
      one's softmax under the other's products.
    - overlap (FA3 section 3.2): within a warpgroup, S_j = Q K_j^T is issued before
      P_{j-1} V_{j-1}, so the softmax of tile j runs under the product of tile j - 1; in the
      backward, dP^T = V dO^T is issued with S^T = K Q^T, so P^T's exponentials run under it
      (FA3's backward).
    """

    defer_norm: bool = True
    seq_parallel: bool = True
    split_q: bool = True
    pingpong: bool = False
    overlap: bool = False
    warp_specialize: bool = True

    def __post_init__(self):
        for f in fields(self):
            if not isinstance(getattr(self, f.name), bool):
                raise TypeError(f"Variant.{f.name} must be a bool, got {getattr(self, f.name)!r}")
        if self.hopper_switches and not (self.defer_norm and self.seq_parallel and self.split_q):
            raise ValueError(f"the Hopper-era switches ({', '.join(self.hopper_switches)}) are "
                             f"built on FA2 with all three changes on, got {str(self.fa2)!r}")

    @classmethod
    def all(cls) -> list["Variant"]:
        """The 8 combinations, FA2 (all on) first and the FA1-style baseline (all off) last."""
        return [cls(*flags) for flags in itertools.product((True, False), repeat=3)]

    @classmethod
    def hopper(cls) -> list["Variant"]:
        """The second lattice: FA2 all on with each combination of the Hopper-era switches,
        every switch off first (no producer warp either) and every switch on last."""
        return [cls(**dict(zip(_HOPPER_NAMES, flags)))
                for flags in itertools.product((False, True), repeat=len(_HOPPER_NAMES))]

    @property
    def hopper_switches(self) -> tuple[str, ...]:
        """The Hopper-era switches away from their default: what sets this variant apart from
        its place in the FA2 lattice (empty there)."""
        return tuple(f for f, on in _HOPPER_DEFAULTS.items() if getattr(self, f) != on)

    @property
    def fa2(self) -> "Variant":
        """This variant with the Hopper-era switches at their defaults: its place in the FA2
        lattice."""
        return Variant(self.defer_norm, self.seq_parallel, self.split_q)

    @property
    def backward(self) -> "Variant":
        """The variant the backward runs: the FA2 flags, warp_specialize and overlap (the
        chassis's backward has a producer warp, D86, and issues dP^T beside S^T, D87);
        pingpong exists in the forward only."""
        return Variant(self.defer_norm, self.seq_parallel, self.split_q,
                       warp_specialize=self.warp_specialize, overlap=self.overlap)

    def __str__(self) -> str:
        fa2 = "".join(("+" if getattr(self, f) else "-") + short for f, short in _FLAG_NAMES.items())
        return fa2 + "".join(("+" if getattr(self, f) else "-") + _HOPPER_NAMES[f]
                             for f in self.hopper_switches)

    @classmethod
    def parse(cls, text: str) -> "Variant":
        """Inverse of `str` ('+defer-seqpar+splitq', '+defer+seqpar+splitq-warpspec+pingpong');
        also accepts the aliases 'fa2' (all on) and 'fa1' (all off). The three FA2 flags are
        always named; a Hopper-era switch only when given (its default otherwise)."""
        text = text.strip()
        if text == "fa2":
            return cls()
        if text == "fa1":
            return cls(False, False, False)
        flags = {}
        for part in _split_signed(text):
            sign, short = part[:1], part[1:]
            names = [f for f, s in {**_FLAG_NAMES, **_HOPPER_NAMES}.items() if s == short]
            if sign not in "+-" or len(names) != 1 or names[0] in flags:
                raise ValueError(f"cannot parse variant {text!r}; expected e.g. {str(cls())!r}")
            flags[names[0]] = sign == "+"
        if not set(_FLAG_NAMES) <= set(flags):
            raise ValueError(f"cannot parse variant {text!r}; expected e.g. {str(cls())!r}")
        return cls(**flags)

    @property
    def label(self) -> str:
        """Short human label: FA2, FA1-style, the flags that differ from FA2, or FA2 with and
        without the Hopper-era switches away from their defaults."""
        if self.hopper_switches:
            off = [f for f in self.hopper_switches if not getattr(self, f)]
            on = [f for f in self.hopper_switches if getattr(self, f)]
            return "FA2 " + ", ".join(f"{word} {', '.join(fs)}" for word, fs in
                                      (("without", off), ("with", on)) if fs)
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
