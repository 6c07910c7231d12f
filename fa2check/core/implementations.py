"""Which implementations a run verifies: ours (one column per variant) and any callable with
flash_attention's signature, named as MODULE:FUNC.

    ours                  kernels:flash_attention, one column per variant
    gluon                 fa2check.adapters:gluon (our forward in Gluon), one column per variant
    hopper                fa2check.adapters:hopper (the wgmma/TMA chassis), one column per
                          variant of both lattices: the 8 FA2 variants and FA2 with the
                          Hopper switches (warp_specialize off, pingpong, overlap; D59,
                          D66, D85)
    sdpa                  ours and the four torch SDPA adapters beside it
    sdpa_math (etc.)      fa2check.adapters:sdpa_math
    flex                  fa2check.adapters:flex (torch's flex_attention, compiled)
    MODULE:FUNC           any importable callable, called through fa2check.core.calling
                          (variant, return_lse, softmax_scale, causal may be omitted; layout
                          bhsd or bshd)
"""
from __future__ import annotations

import importlib
import inspect
from dataclasses import dataclass

OURS = "kernels:flash_attention"
GLUON = "fa2check.adapters:gluon"
HOPPER = "fa2check.adapters:hopper"
PER_VARIANT = (OURS, GLUON, HOPPER)  # implementations that take every variant
SDPA = ("sdpa_flash", "sdpa_cudnn", "sdpa_efficient", "sdpa_math")
FLEX = "fa2check.adapters:flex"


class Unsupported(NotImplementedError):
    """An implementation cannot run this problem (a backend's limits): reported n/a with its
    words, neither pass nor fail. Any NotImplementedError an implementation raises means the
    same (fa2check.core.calling); this one is exported as fa2check.Unsupported."""


@dataclass(frozen=True)
class Column:
    """One column of the verdict table: an implementation and the variant passed to it."""
    impl: str  # MODULE:FUNC
    variant: str  # str(Variant)
    label: str
    layout: str = "bhsd"  # the layout the implementation takes (fa2check.core.calling)

    @property
    def ours(self) -> bool:
        return self.impl in PER_VARIANT

    def load(self):
        """The callable MODULE:FUNC names, as it is."""
        module, _, name = self.impl.partition(":")
        return getattr(importlib.import_module(module), name)

    def implementation(self):
        """The callable behind the harness's call (fa2check.core.calling.adapt)."""
        from .calling import adapt

        return adapt(self.load(), self.layout)

    def load_variant(self):
        from kernels import Variant

        return Variant.parse(self.variant)

    def cli_args(self) -> list[str]:
        """The --impl/--variant arguments that select exactly this column."""
        return (([] if self.impl == OURS else [f"--impl={self.impl}"])
                + ([] if self.layout == "bhsd" else [f"--layout={self.layout}"])
                + [f"--variant={self.variant}"])


def expand(spec: str) -> list[str]:
    """An --impl value -> MODULE:FUNC names."""
    if spec == "ours":
        return [OURS]
    if spec == "gluon":
        return [GLUON]
    if spec == "hopper":
        return [HOPPER]
    if spec == "sdpa":
        return [OURS] + [f"fa2check.adapters:{name}" for name in SDPA]
    if spec == "flex":
        return [FLEX]
    if spec in SDPA:
        return [f"fa2check.adapters:{spec}"]
    if ":" not in spec:
        raise ValueError(f"--impl {spec!r}: expected MODULE:FUNC, 'ours', 'gluon', 'hopper', "
                         f"'sdpa', 'flex' or one of {SDPA}")
    return [spec]


def default_specs(device: str, capability: tuple[int, int] | None = None) -> list[str]:
    """--impl's default: ours, and on a GPU also a second forward of ours: on sm_90 (compute
    capability (9, 0), read from the GPU when not given) the Hopper chassis, the forward of
    record there; elsewhere the Gluon forward. Triton's interpreter runs neither."""
    if device != "cuda":
        return ["ours"]
    if capability is None:
        import torch

        capability = (tuple(torch.cuda.get_device_capability())
                      if torch.cuda.is_available() else None)
    return ["ours", "hopper"] if capability == (9, 0) else ["ours", "gluon"]


def lattice(impl: str) -> list:
    """Every variant an implementation takes: the 8 FA2 variants, and for the Hopper chassis
    also FA2 with each combination of its switches (`Variant.hopper()` less FA2 itself)."""
    from kernels import Variant

    return Variant.all() + ([v for v in Variant.hopper() if v.hopper_switches]
                            if impl == HOPPER else [])


def builtin(impl: str) -> bool:
    """Ours, and the adapters fa2check ships (SDPA's backends, flex): they take the harness's
    own layout; --layout applies to the others."""
    return impl in PER_VARIANT or impl.startswith("fa2check.adapters:")


def columns(impl_specs: list[str] | None, variant_names: list[str] | None,
            layout: str = "bhsd") -> list[Column]:
    """Ours gets every variant of its lattice (or the ones asked for); another implementation
    gets one column with FA2's variant, or one per variant asked for. `layout` is that of the
    implementations given as MODULE:FUNC (fa2check.core.calling.LAYOUTS)."""
    from kernels import Variant

    from .calling import LAYOUTS

    if layout not in LAYOUTS:
        raise ValueError(f"--layout {layout!r}: expected one of {list(LAYOUTS)}")
    impls = list(dict.fromkeys(n for spec in (impl_specs or ["ours"]) for n in expand(spec)))
    asked = [Variant.parse(v) for v in variant_names] if variant_names else None
    out = []
    for impl in impls:
        module, _, name = impl.partition(":")
        if impl in PER_VARIANT:
            prefix = {OURS: "", GLUON: "gluon ", HOPPER: "hopper "}[impl]
            out += [Column(impl, str(v), f"{prefix}{v}") for v in (asked or lattice(impl))]
        elif asked and len(asked) > 1:
            out += [Column(impl, str(v), f"{name} {v}", _layout(impl, layout)) for v in asked]
        else:
            out.append(Column(impl, str(asked[0] if asked else Variant()), name,
                              _layout(impl, layout)))
    for column in out:
        column.load()  # fail early on a name that does not import
    return out


def _layout(impl: str, layout: str) -> str:
    return "bhsd" if builtin(impl) else layout


def takes_variant(fn) -> bool:
    """Whether `fn` accepts a `variant` keyword (a parameter of that name, or **kwargs)."""
    from .calling import accepts

    return accepts(inspect.unwrap(fn), "variant")


def key_tile(impl, variant, q, k, v, causal) -> int | None:
    """The keys a K/V tile holds when `impl`, if it is one of our kernels' entry points
    (kernels.flash_attention or the gluon and hopper adapters), runs `variant` on these
    inputs (kernels.interface.call_config): the tile fixes the order of each row's sums, so
    two variants on tiles of different widths need not agree bitwise (variant_equivalence).
    None for any other implementation."""
    from kernels import flash_attention
    from kernels.interface import call_config

    from . import adapters

    backend = {flash_attention: "triton", adapters.gluon: "gluon",
               adapters.hopper: "hopper"}.get(inspect.unwrap(impl))
    return None if backend is None else call_config(q, k, v, causal, variant, backend).block_n
