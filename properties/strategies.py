"""Hypothesis strategies for `python -m fa2check.fuzz`: problems, variants, input distributions.

One fuzz step runs an `Example`: a variant, a `Problem` (whose seed seeds the inputs), an input
value distribution and a memory layout. Tensors are never drawn element by element: hypothesis
draws a seed and a distribution name and the tensors come from a seeded torch.Generator, so an
example shrinks in a few steps and prints in one line (`str(example)`, read back by
`Example.parse`).

What the strategies favour:
- heads: a group size of 1 to 8 (MHA, 2, powers of two and not), then heads_kv 1, 2 or 3 as
  far as the largest heads_q allows (MQA when it is 1).
- lengths: 1, multiples of a tile size and one either side (k * tile - 1, k * tile, k * tile + 1),
  primes and any length, seqlen_k independent of seqlen_q or near it (equal, or off by one or by
  a tile and one, so the causal diagonal crosses tiles at every offset). The tile sizes are the
  device's own: `kernels.default_config` for the head_dim and variant (forward query and key
  tiles, backward tiles, and split-K's key slices), never hard-coded.
- head_dim: any from 1 to 256 (or those asked for), a tile width (16, 32, ..., 256) half the
  time and any other head_dim (which the kernels pad to a tile width and mask) the other half,
  in one choice (`head_dims`); v's head dim (head_dim_v) another of them a quarter of the time,
  otherwise head_dim (`head_dims_v`).
- dtype, causal: every supported value (or those asked for).
- values (`DISTRIBUTIONS`): see each entry. The "extreme" ones (logits of 1e3 and more, rows
  below -5e4, one dominant key, lse below -88.7) are judged like properties/extreme_logits.py
  judges them (the same-dtype baseline of the pass rule means nothing there), forward only except
  lse-below-88.7 in float32, and drawn half as often as the others (whose gradients are judged;
  fa2check/fuzz/fuzzer.py says how). NaN and inf inputs are never drawn: the oracle would be NaN
  too.
- layouts: contiguous, or the NaN-surrounded views of properties/memory_safety.py, so every
  example also checks that nothing outside the tensors' extent is read.
Every choice shrinks towards the first option: FA2, float16, head_dim 16, not causal, batch 1,
MHA, length 1, normal values, contiguous, seed 0, v's head dim equal to q's.
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field, replace

import torch
from hypothesis import strategies as st

from fa2check.core.implementations import GLUON, HOPPER, OURS, lattice
from fa2check.core.problems import DTYPES, Problem
from kernels import SUPPORTED_HEAD_DIMS, TILE_HEAD_DIMS, Variant, default_config
from kernels.gluon_forward import GLUON_DTYPES, GLUON_HEAD_DIMS
from kernels.hopper_forward import HOPPER_DTYPES, HOPPER_HEAD_DIMS
from kernels.plan.tiles import block_d

from .base import Case
from .extreme_logits import extreme_inputs
from .memory_safety import nan_view

HEADS_KV = (1, 2, 3)
GROUPS = (1, 2, 3, 4, 5, 6, 7, 8)
LAYOUTS = ("contiguous", "padded", "bshd-strided", "padded-bshd-strided")
# (kind, weight): how a sequence length is drawn; "near" (seqlen_k only) is seqlen_q + offset
LENGTH_KINDS = (("one", 2), ("tile", 5), ("prime", 2), ("any", 3))
KEY_LENGTH_KINDS = LENGTH_KINDS + (("near", 5),)
# our other backends' domains (v's head dim q's): what the fuzzer draws for them (the chassis
# reads q, k, v through TMA: a unit stride along head_dim and 16-byte aligned strides)
DOMAINS = {HOPPER: dict(dtypes=HOPPER_DTYPES, head_dims=HOPPER_HEAD_DIMS,
                        layouts=("contiguous", "padded")),
           GLUON: dict(dtypes=GLUON_DTYPES, head_dims=GLUON_HEAD_DIMS)}
# (kind, weight): v's head dim equal to q's, or drawn on its own (head_dims_v)
HEAD_DIM_V_KINDS = (("same", 3), ("own", 1))


# ----------------------------------------------------------------------------- distributions

@dataclass(frozen=True)
class Distribution:
    """How q, k and v are made (dO is always standard normal, o's shape). `judge` is "pass_rule" or
    "extreme" (properties/extreme_logits.py's element-wise bound); the gradients are judged for
    the dtypes in `backward_dtypes`."""
    name: str
    description: str
    judge: str = "pass_rule"
    backward_dtypes: tuple[str, ...] = tuple(DTYPES)
    extreme_kind: str | None = None  # built by extreme_logits.extreme_inputs


def _shapes(p: Problem):
    """The shapes of q, k and v (v with its own head dim)."""
    return ((p.batch, p.heads_q, p.seqlen_q, p.head_dim),
            (p.batch, p.heads_kv, p.seqlen_k, p.head_dim),
            (p.batch, p.heads_kv, p.seqlen_k, p.head_dim_v))


def _randn(shape, gen):
    return torch.randn(shape, generator=gen, dtype=torch.float64)


def _uniform_values(p, gen):
    # unit variance: U(-sqrt 3, sqrt 3)
    sq, skv, sv = _shapes(p)
    return tuple((torch.rand(s, generator=gen, dtype=torch.float64) * 2 - 1) * math.sqrt(3)
                 for s in (sq, skv, sv))


def _heavy_tailed(p, gen):
    # Student's t with 3 degrees of freedom, scaled to unit variance: a few entries of 10-20
    sq, skv, sv = _shapes(p)

    def t3(shape):
        chi2 = sum(_randn(shape, gen) ** 2 for _ in range(3))
        return _randn(shape, gen) / torch.sqrt(chi2 / 3) / math.sqrt(3)
    return t3(sq), t3(skv), t3(sv)


def _logit_scale(top: float):
    """q and k scaled so that logits have standard deviation top / 4 (largest about `top`)."""
    def make(p, gen):
        sq, skv, sv = _shapes(p)
        a = math.sqrt(top / 4)
        return _randn(sq, gen) * a, _randn(skv, gen) * a, _randn(sv, gen)
    return make


def _near_duplicate_keys(p, gen):
    # every key of a kv head within 1% of its first key: many equal after rounding to 16 bits
    sq, skv, sv = _shapes(p)
    k = _randn(skv, gen)
    k = k[:, :, :1] + 0.01 * k
    return _randn(sq, gen), k, _randn(sv, gen)


def _low_rank_keys(p, gen):
    # keys of rank 1 or 2 (picked by the seed): scores are a sum of one or two outer products
    sq, skv, sv = _shapes(p)
    rank = 1 + p.seed % 2
    a = _randn(skv[:3] + (rank,), gen)
    b = _randn(skv[:2] + (rank, p.head_dim), gen)
    return _randn(sq, gen), (a @ b) / math.sqrt(rank), _randn(sv, gen)


def _outlier_channels(p, gen):
    # two head_dim channels of q and k ten times larger (activation outliers of large models)
    sq, skv, sv = _shapes(p)
    q, k = _randn(sq, gen), _randn(skv, gen)
    channels = torch.randperm(p.head_dim, generator=gen)[:2]
    q[..., channels] *= 10
    k[..., channels] *= 10
    return q, k, _randn(sv, gen)


_MAKERS = {
    "uniform": _uniform_values, "heavy-tailed": _heavy_tailed, "logits-1e2": _logit_scale(1e2),
    "logits-1e3": _logit_scale(1e3), "logits-1e4": _logit_scale(1e4),
    "near-duplicate-keys": _near_duplicate_keys, "low-rank-keys": _low_rank_keys,
    "outlier-channels": _outlier_channels,
}

_FORWARD_ONLY = ()
DISTRIBUTIONS = {d.name: d for d in (
    Distribution("normal", "standard normal q, k, v (Problem.inputs)"),
    Distribution("uniform", "uniform, unit variance"),
    Distribution("heavy-tailed", "Student's t (3 degrees of freedom), unit variance"),
    Distribution("logits-1e2", "q, k scaled: logits up to about 100"),
    Distribution("ties", "even keys equal key 0, odd keys its negation; q x 4 (extreme_logits)",
                 extreme_kind="ties"),
    Distribution("near-duplicate-keys", "every key within 1% of its head's first key"),
    Distribution("low-rank-keys", "keys of rank 1 or 2"),
    Distribution("outlier-channels", "two channels of q and k x 10"),
    Distribution("logits-1e3", "logits up to about 1e3", "extreme", _FORWARD_ONLY),
    Distribution("logits-1e4", "logits up to about 1e4", "extreme", _FORWARD_ONLY),
    Distribution("logits-1e5", "q, k x 158: logits up to about 1e5 (extreme_logits)", "extreme",
                 _FORWARD_ONLY, "logits-1e5"),
    Distribution("below-5e4", "every odd row's logits below -5e4 (extreme_logits)", "extreme",
                 _FORWARD_ONLY, "below-5e4"),
    Distribution("dominant-last-key", "the last key scores 1e4 above the rest (extreme_logits)",
                 "extreme", _FORWARD_ONLY, "dominant-last-key"),
    Distribution("lse-below-88.7", "all logits near -200: exp(lse) underflows float32 "
                 "(extreme_logits)", "extreme", ("float32",), "lse-below-88.7"),
)}


def make_inputs(problem: Problem, distribution: str, layout: str = "contiguous", device="cpu"):
    """q, k, v, dO of the problem's dtype on `device`, seeded by problem.seed, laid out as
    `layout` (see LAYOUTS)."""
    dist = DISTRIBUTIONS[distribution]
    if distribution == "normal":
        inputs = problem.inputs(device)
    elif dist.extreme_kind is not None:
        inputs = extreme_inputs(Case(dist.extreme_kind, problem), device)
    else:
        gen = torch.Generator().manual_seed(problem.seed)
        q, k, v = _MAKERS[distribution](problem, gen)
        do = _randn(q.shape[:3] + (problem.head_dim_v,), gen)  # o's shape: v's head dim
        inputs = tuple(t.to(device=device, dtype=problem.torch_dtype) for t in (q, k, v, do))
    if layout == "contiguous":
        return inputs
    return tuple(nan_view(t, layout) for t in inputs)


# ----------------------------------------------------------------------------- examples

@dataclass(frozen=True)
class Example:
    """What one fuzz step runs. `str(example)` (variant:problem:distribution:layout) is its
    one-line name; `Example.parse` reads it back."""
    variant: Variant
    problem: Problem
    distribution: str = "normal"
    layout: str = "contiguous"

    def __str__(self) -> str:
        return f"{self.variant}:{self.problem}:{self.distribution}:{self.layout}"

    @classmethod
    def parse(cls, text: str) -> "Example":
        parts = text.strip().split(":")
        if len(parts) != 4:
            raise ValueError(f"cannot parse example {text!r}; expected VARIANT:PROBLEM:"
                             "DISTRIBUTION:LAYOUT, e.g. +defer+seqpar+splitq:b1-h2/1-q17-k33-d16-"
                             "float16-causal-s0:normal:contiguous")
        variant, problem, distribution, layout = parts
        if distribution not in DISTRIBUTIONS:
            raise ValueError(f"unknown distribution {distribution!r}; expected one of "
                             f"{list(DISTRIBUTIONS)}")
        if layout not in LAYOUTS:
            raise ValueError(f"unknown layout {layout!r}; expected one of {list(LAYOUTS)}")
        return cls(Variant.parse(variant), Problem.parse(problem), distribution, layout)

    @property
    def backward(self) -> bool:
        """Whether the gradients are judged (see Distribution.backward_dtypes)."""
        return self.problem.dtype in DISTRIBUTIONS[self.distribution].backward_dtypes

    def inputs(self, device="cpu"):
        return make_inputs(self.problem, self.distribution, self.layout, device)

    def as_dict(self) -> dict:
        return {"id": str(self), "variant": str(self.variant), "problem": self.problem.as_dict(),
                "distribution": self.distribution, "layout": self.layout}

    @classmethod
    def from_dict(cls, data: dict) -> "Example":
        return cls(Variant.parse(data["variant"]), Problem(**data["problem"]),
                   data["distribution"], data["layout"])


def tile_sizes(head_dim: int, on_gpu: bool, variants) -> tuple[int, ...]:
    """Every tile size the kernels use for this head_dim and these variants on the device:
    forward query and key tiles, backward query and key tiles, and split-K's key slices
    (forward, and the backward's dQ products)."""
    sizes = set()
    for variant in variants:
        config = default_config(head_dim, on_gpu, variant)
        sizes |= {config.block_m, config.block_n, config.bwd_block_m, config.bwd_block_n}
        if not variant.split_q:
            sizes.add(config.block_n // config.key_slices)
            sizes.add(config.bwd_dq_keys() // config.bwd_key_slices)
    return tuple(sorted(sizes))


def primes_up_to(n: int) -> tuple[int, ...]:
    return tuple(p for p in range(2, n + 1) if all(p % d for d in range(2, math.isqrt(p) + 1)))


@dataclass(frozen=True)
class KernelClass:
    """What a kernel is compiled for, less the shapes and strides: the variant, dtype, head
    dims and mask."""
    variant: Variant
    dtype: str
    head_dim: int
    head_dim_v: int
    causal: bool

    def __str__(self) -> str:
        dims = f"{self.head_dim}" + (f"/{self.head_dim_v}" if self.head_dim_v != self.head_dim
                                     else "")
        return f"{self.variant}:d{dims}-{self.dtype}-{'causal' if self.causal else 'full'}"


SPECIALISED = 16  # Triton specialises an integer argument on == 1 and on divisibility by 16
ONE = -1  # a ShapeClass residue: the length is 1


@dataclass(frozen=True)
class ShapeClass:
    """What Triton specialises a kernel on in a problem's shapes and strides, for a fixed kernel
    class: batch, heads, layout, and each length's residue modulo 16 (ONE: the length 1).
    Lengths 16 k + residue for any k share the compiled kernels: every stride and length falls
    in the same classes (== 1, divisible by 16, other), which is all Triton looks at."""
    batch: int
    heads_q: int
    heads_kv: int
    q_residue: int
    k_residue: int
    layout: str = "contiguous"


@dataclass(frozen=True)
class CompiledClass:
    """A kernel class with one shape class: the unit the GPU fuzzer compiles ahead and draws
    many problems from (fa2check/fuzz/classes.py)."""
    kernel: KernelClass
    shape: ShapeClass

    def __str__(self) -> str:
        s = self.shape
        return (f"{self.kernel}:b{s.batch}-h{s.heads_q}/{s.heads_kv}-q%16={s.q_residue}-"
                f"k%16={s.k_residue}:{s.layout}")


@dataclass(frozen=True)
class Space:
    """What the fuzzer may draw (the command line narrows it). With `classes`, each example is
    one of those compiled classes (variant, dtype, head dims, mask, batch, heads, layout and the
    lengths' residues modulo 16); its lengths' multiples of 16, seed and values are drawn."""
    variants: tuple = field(default_factory=lambda: tuple(Variant.all()))
    dtypes: tuple[str, ...] = tuple(DTYPES)
    # the tile widths first, so that a head_dim shrinks towards 16
    head_dims: tuple[int, ...] = TILE_HEAD_DIMS + tuple(d for d in SUPPORTED_HEAD_DIMS
                                                        if d not in TILE_HEAD_DIMS)
    causal: tuple[bool, ...] = (False, True)
    distributions: tuple[str, ...] = tuple(DISTRIBUTIONS)
    layouts: tuple[str, ...] = LAYOUTS
    on_gpu: bool = False
    max_batch: int = 2
    max_heads_q: int = 10
    max_seqlen: int | None = None  # None: twice the largest tile, plus one
    impl: str = OURS  # whose lattice the variants are drawn from (GPU)
    own_head_dim_v: bool = True  # v's head dim may differ from q's (not the Hopper chassis's)
    classes: tuple = ()  # CompiledClass: the only kernels and shapes drawn (the GPU's)

    @classmethod
    def for_device(cls, on_gpu: bool, impl: str | None = None, **changes) -> "Space":
        """The interpreter's space (tiny problems) or the GPU's (a bit larger). On the GPU the
        variants are every one `impl` takes (fa2check.core.implementations.lattice: for the
        Hopper chassis also FA2 with its switches, D66); the interpreter draws the 8 FA2
        variants (no Hopper chassis runs there)."""
        impl = impl or OURS
        base = (cls(on_gpu=True, max_batch=3, max_heads_q=16, impl=impl,
                    variants=tuple(lattice(impl))) if on_gpu else cls(impl=impl))
        if impl in DOMAINS:  # a backend's domain: nothing drawn that it would refuse
            base = replace(base, own_head_dim_v=False, **DOMAINS[impl])
        return replace(base, **{k: v for k, v in changes.items() if v is not None})

    def tiles(self) -> tuple[int, ...]:
        """Every tile size of the space's variants and head_dims on its device."""
        return tuple(sorted({t for d in self.head_dims
                             for t in tile_sizes(d, self.on_gpu, self.variants)}))

    def seqlen_limit(self, tiles) -> int:
        return self.max_seqlen or 2 * max(tiles) + 1

    def contains(self, example: Example) -> bool:
        p = example.problem
        return (example.variant in self.variants and p.dtype in self.dtypes
                and {p.head_dim, p.head_dim_v} <= set(self.head_dims) and p.causal in self.causal
                and (self.own_head_dim_v or p.head_dim_v == p.head_dim)
                and example.distribution in self.distributions and example.layout in self.layouts
                and (not self.classes or compiled_class(example) in self.classes))

    def describe(self) -> str:
        names = {"variants": [str(v) for v in self.variants], "dtypes": list(self.dtypes),
                 "head_dims": list(self.head_dims), "causal": list(self.causal),
                 "distributions": list(self.distributions), "layouts": list(self.layouts)}
        full = Space.for_device(self.on_gpu, self.impl)
        narrowed = [f"{k}={v}" for k, v in names.items()
                    if len(v) != len(getattr(full, k))]
        if self.classes:
            narrowed.append(f"{len(self.classes)} compiled classes")
        sizes = (f"batch <= {self.max_batch}, heads_q <= {self.max_heads_q}, seqlen <= "
                 f"{self.max_seqlen or '2 tiles + 1'}")
        return ", ".join(narrowed + [sizes]) if narrowed else f"everything; {sizes}"


def _evenly(values, site: str = ""):
    """One of `values`, each about equally likely, shrinking towards the first.

    - sampled_from, not st.integers: integers draw their lower bound about a third of the time,
      which starved the rarer classes (measured: a group size of 5, or the logits-1e5
      distribution, unseen for hundreds of examples).
    - `site` names the draw: hypothesis labels a draw by its strategy and values and, after
      each example, copies a choice onto other choices of the same label (its duplication
      mutator); with seqlen_q's and seqlen_k's choices sharing labels, up to five of every six
      examples were such near-copies, and planted bugs took 2-4 times longer to find
      (40 seeds). Equal lengths are drawn on purpose instead (the "near" kind, offset 0)."""
    return _tagged(tuple(values), site)


@functools.lru_cache(maxsize=None)
def _tagged(values: tuple, site: str):
    return st.sampled_from(tuple((site, v) for v in values)).map(lambda pair: pair[1])


def _weighted(kinds, site: str = ""):
    """One of `kinds` ((name, weight), ...) with those weights; shrinks towards the first."""
    return _evenly((name for name, weight in kinds for _ in range(weight)), site)


def _seqlen(draw, site: str, tiles: tuple[int, ...], limit: int, near: int | None = None) -> int:
    """A sequence length in [1, limit] (see the module docstring); with `near`, also
    near + offset (equal, one off, a tile and one off).

    Every call draws the same choices whatever the kind (unused ones are ignored), so that when
    hypothesis shrinks the kind the later choices keep their meaning."""
    kind = draw(_weighted(LENGTH_KINDS if near is None else KEY_LENGTH_KINDS, site))
    tile = sorted(tiles, reverse=True)[draw(_evenly(range(8), site)) % len(tiles)]  # largest first
    multiple = draw(_evenly(range(1, 17), site))
    delta = draw(_evenly((0, 1, -1), site))
    pick = draw(_evenly(range(256), site))  # a prime, or an offset from `near`
    anything = draw(_evenly(range(1, 4097), site))
    if kind == "one":
        n = 1
    elif kind == "tile":
        n = (1 + (multiple - 1) % max(1, limit // tile)) * tile + delta
    elif kind == "prime":
        primes = primes_up_to(limit) or (1,)
        n = primes[pick % len(primes)]
    elif kind == "near":
        offsets = (0, 1, -1) + tuple(sign * t + e for t in tiles for sign in (1, -1)
                                     for e in (0, 1, -1))
        n = near + offsets[pick % len(offsets)]
    else:
        n = 1 + (anything - 1) % limit
    return min(max(n, 1), limit)


def head_dims(space: Space, site: str = "head_dim"):
    """A head_dim of the space: a tile width half the time, any other (padded) head_dim the
    other half; shrinks towards the first tile width. `site` names the draw (see _evenly).

    One choice, a weighted sampled_from: drawing "padded or not" and then an index, two
    choices, moved the ci profile's shrink of planted_diagonal_off_by_one to a local minimum
    (seqlen_k 32 instead of 1; tests/test_fuzz.py)."""
    widths = [d for d in space.head_dims if d == block_d(d)]
    others = [d for d in space.head_dims if d != block_d(d)]
    weight = max(1, len(others) // len(widths)) if widths else 1
    return _weighted(tuple((d, weight) for d in widths) + tuple((d, 1) for d in others), site)


def compiled_class(example: Example) -> CompiledClass:
    p = example.problem

    def residue(n):
        return ONE if n == 1 else n % SPECIALISED
    return CompiledClass(KernelClass(example.variant, p.dtype, p.head_dim, p.head_dim_v, p.causal),
                         ShapeClass(p.batch, p.heads_q, p.heads_kv, residue(p.seqlen_q),
                                    residue(p.seqlen_k), example.layout))


def _length_of(draw, site: str, residue: int, limit: int, near: int | None = None) -> int:
    """A length of the residue class (ONE: 1) up to `limit`: 16 k + residue with k drawn (with
    `near`, about near's k half of the time, so that equal and nearly equal lengths come up)."""
    if residue == ONE:
        return 1
    least = 1 if residue in (0, 1) else 0  # 16 k + 1 with k = 0 is the length 1's class
    most = max(least, (limit - residue) // SPECIALISED)
    k = draw(_evenly(range(least, most + 1), site))
    if near is not None and draw(_evenly((False, True), site)):
        k = min(max(near // SPECIALISED + draw(_evenly((0, 1, -1, 2, -2), site)), least), most)
    return SPECIALISED * k + residue


@st.composite
def compiled_problems(draw, space: Space, compiled: CompiledClass):
    """A Problem of a compiled class: its kernel class and shape class fixed, the lengths'
    multiples of 16 and the seed drawn."""
    kernel, shape = compiled.kernel, compiled.shape
    limit = space.seqlen_limit(space.tiles())
    seqlen_q = _length_of(draw, "seqlen_q", shape.q_residue, limit)
    seqlen_k = _length_of(draw, "seqlen_k", shape.k_residue, limit, near=seqlen_q)
    seed = draw(st.integers(0, 2**31 - 1))
    return Problem(shape.batch, shape.heads_q, shape.heads_kv, seqlen_q, seqlen_k,
                   kernel.head_dim, kernel.dtype, kernel.causal, seed=seed,
                   head_dim_v=kernel.head_dim_v)


def head_dims_v(draw, space: Space, head_dim: int) -> int:
    """v's head dim: head_dim itself three times in four, otherwise one of the space's own
    (`head_dims`), which may differ; shrinks towards head_dim itself.

    Both choices are drawn every time (the second ignored for "same"), and after every other
    choice of the problem, so that the choices before keep their meaning and the planted bugs
    shrink as they did before v had a head dim of its own (tests/test_fuzz.py)."""
    kind = draw(_weighted(HEAD_DIM_V_KINDS, "head_dim_v kind"))
    own = draw(head_dims(space, "head_dim_v"))
    return head_dim if kind == "same" or not space.own_head_dim_v else own


def variants(space: Space):
    return st.sampled_from(space.variants)


def distributions(space: Space):
    """A distribution name; the pass-rule ones (whose gradients are judged) twice as often as
    the extreme ones (forward only)."""
    return _weighted(tuple((name, 2 if DISTRIBUTIONS[name].judge == "pass_rule" else 1)
                           for name in space.distributions), "distribution")


@st.composite
def problems(draw, space: Space):
    """A Problem of the space. Its lengths follow the tiles of every variant and head_dim of the
    space, not those of the example's own: so that when hypothesis shrinks the variant or the
    head_dim, the length choices keep their meaning (measured: with per-variant tiles a bug of
    every variant stayed reported on a split-K variant and an arbitrary seed)."""
    dtype = draw(st.sampled_from(space.dtypes))
    head_dim = draw(head_dims(space))
    causal = draw(st.sampled_from(space.causal))
    tiles = space.tiles()
    limit = space.seqlen_limit(tiles)
    batch = draw(_evenly(range(1, space.max_batch + 1), "batch"))
    # fixed choices (see _seqlen), the group first so that every group size is equally likely
    group = min(draw(st.sampled_from(GROUPS)), space.max_heads_q)
    heads_kv = max(1, min(draw(st.sampled_from(HEADS_KV)), space.max_heads_q // group))
    seqlen_q = _seqlen(draw, "seqlen_q", tiles, limit)
    seqlen_k = _seqlen(draw, "seqlen_k", tiles, limit, near=seqlen_q)
    seed = draw(st.integers(0, 2**31 - 1))
    head_dim_v = head_dims_v(draw, space, head_dim)
    return Problem(batch, heads_kv * group, heads_kv, seqlen_q, seqlen_k, head_dim, dtype, causal,
                   seed=seed, head_dim_v=head_dim_v)


@st.composite
def examples(draw, space: Space):
    if space.classes:  # one of the compiled classes (shrinks towards the first)
        compiled = draw(st.sampled_from(space.classes))
        variant, layout = compiled.kernel.variant, compiled.shape.layout
        problem = draw(compiled_problems(space, compiled))
        return Example(variant, problem, draw(distributions(space)), layout)
    variant = draw(variants(space))
    problem = draw(problems(space))
    distribution = draw(distributions(space))
    layout = draw(st.sampled_from(space.layouts))
    return Example(variant, problem, distribution, layout)


# ----------------------------------------------------------------------------- coverage

def length_class(n: int, tiles: tuple[int, ...]) -> str:
    """'1', 'T*k-1', 'T*k', 'T*k+1' for the largest tile T that fits, 'prime' or 'other'."""
    if n == 1:
        return "1"
    for tile in sorted(tiles, reverse=True):
        if n >= tile - 1 and n % tile in (0, 1, tile - 1):
            return f"{tile}k" + {0: "", 1: "+1", tile - 1: "-1"}[n % tile]
    return "prime" if n in primes_up_to(n) else "other"


def coverage_keys(example: Example, on_gpu: bool) -> dict[str, str]:
    """The classes of an example that the fuzzer's coverage summary counts."""
    p = example.problem
    tiles = tile_sizes(max(p.head_dim, p.head_dim_v), on_gpu, [example.variant])
    group = p.heads_q // p.heads_kv
    heads = "MHA" if group == 1 else (f"MQA g{group}" if p.heads_kv == 1 else f"GQA g{group}")
    order = "q<k" if p.seqlen_q < p.seqlen_k else ("q=k" if p.seqlen_q == p.seqlen_k else "q>k")
    return {"variant": str(example.variant), "dtype": p.dtype, "head_dim": str(p.head_dim),
            "mask": "causal" if p.causal else "full", "heads": heads,
            "seqlen_q": length_class(p.seqlen_q, tiles),
            "seqlen_k": length_class(p.seqlen_k, tiles), "lengths": order,
            "distribution": example.distribution, "layout": example.layout}
