"""What the ablation times: our kernels (one per variant, each with its own config), torch
SDPA's backends and the opt-in peer `flex` (torch's flex_attention under torch.compile), and
the calls that are timed for each mode.

- fwd: the forward call (`flash_attention`, or SDPA under one forced backend).
- bwd: only the backward. The forward runs once outside the timed region with inputs that
  require grad; the timed call is `torch.autograd.grad(o, (q, k, v), dO, retain_graph=True)`.
  For our kernels that is the preprocess (D = rowsum(dO * O)), the main backward kernel, the
  float32 dQ buffer's zeroing and its conversion to the input dtype; SDPA's backends are timed
  through the same call, so both carry the same autograd overhead.
- fwd+bwd: the forward and `torch.autograd.grad` of its output, both timed.
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass

import torch

from ..core.flex import flex_call
from ..core.sdpa_backends import BACKENDS, forced, sdpa

GLUON = "gluon"  # the prefix of the Gluon forward's names: "gluon+defer+seqpar+splitq"
HOPPER = "hopper"  # the Hopper chassis (forward and, where it takes the call, backward)
PREFIXED = (GLUON, HOPPER)  # kernel backends whose names carry a prefix; Triton's do not
API = "api"  # `flash_attention(q, k, v, causal=...)` with nothing else: what a user's call runs
FLEX = "flex"  # torch's flex_attention, compiled once per shape, dtype and mask (fa2check.core.flex)
PEERS = (*BACKENDS, API, FLEX)  # what may be timed beside our variants (--backends)
DEFAULT_PEERS = (*BACKENDS, API)  # --backends' default: flex compiles a graph per cell (D63)


def kernel_name(variant, kernel_backend: str = "triton") -> str:
    """The name of one of our kernels: str(variant), prefixed with the backend unless Triton."""
    return (kernel_backend if kernel_backend in PREFIXED else "") + str(variant)


def api_kernel(cell, mode: str, gpu: str) -> str:
    """The kernel_name of what API runs in a cell and mode: the choice of the table of fastest
    kernels for this GPU (kernels.fastest; "" without a GPU: Triton's FA2). The forward's call
    needs no gradient; bwd's and fwd+bwd's do (their leaves require grad)."""
    from kernels.fastest import choose_for

    backend, variant = choose_for(gpu, mode != "fwd", cell.head_dim, cell.dv, cell.causal,
                                  cell.dtype, cell.seqlen)
    return kernel_name(variant, backend)


def kernel_backend_of(name: str) -> str:
    """The kernel backend of one of our kernels' names (no Variant parsed)."""
    return next((b for b in PREFIXED if name.startswith(b)), "triton")


def parse_kernel_name(name: str):
    """kernel_name's inverse: (kernel backend, kernels.Variant)."""
    from kernels import Variant

    backend = kernel_backend_of(name)
    return backend, Variant.parse(name[len(backend):] if backend in PREFIXED else name)


@dataclass(frozen=True)
class Contender:
    name: str  # kernel_name(variant, kernel_backend) for ours, else a peer's (PEERS)
    variant: object = None  # kernels.Variant for ours
    config: object = None  # kernels.TileConfig for ours
    backend: str | None = None  # the SDPA backend
    kernel_backend: str = "triton"  # ours: kernels.plan.tiles.BACKENDS

    @property
    def ours(self) -> bool:
        return self.variant is not None

    def context(self):
        return forced(self.backend) if self.backend else contextlib.nullcontext()

    def forward(self, q, k, v, causal: bool, return_lse: bool = False):
        """o, or (o, lse) for ours and flex with return_lse (SDPA returns no lse: (o, None))."""
        from kernels import flash_attention

        if self.name == FLEX:  # its lse always, as our forward stores lse: one graph a cell
            o, lse = flex_call(q, k, v, causal, return_lse=True)  # compiled at the gate's call
            return (o, lse) if return_lse else o
        if self.name == API:  # the API's defaults: backend, variant and tiles
            return flash_attention(q, k, v, causal=causal, return_lse=return_lse)
        if self.ours:
            return flash_attention(q, k, v, causal=causal, variant=self.variant,
                                   config=self.config, return_lse=return_lse,
                                   backend=self.kernel_backend)
        o = sdpa(q, k, v, causal)
        return (o, None) if return_lse else o


def ours(variant, config, kernel_backend: str = "triton") -> Contender:
    return Contender(kernel_name(variant, kernel_backend), variant=variant, config=config,
                     kernel_backend=kernel_backend)


def backend(name: str) -> Contender:
    """A peer: one of SDPA's backends, API or FLEX."""
    if name not in PEERS:
        raise ValueError(f"unknown peer {name!r}; expected one of {', '.join(PEERS)}")
    return Contender(name, backend=name if name in BACKENDS else None)


def make_inputs(cell, device: str, seed: int = 0):
    """q, k, v (standard normal) and dO for a cell, generated on the device, seeded."""
    gen = torch.Generator(device=device).manual_seed(seed)
    shape_q = (cell.batch, cell.heads_q, cell.seqlen, cell.head_dim)
    shape_k = (cell.batch, cell.heads_kv, cell.seqlen, cell.head_dim)
    shape_v = shape_k[:3] + (cell.dv,)
    return tuple(torch.randn(s, device=device, dtype=cell.torch_dtype, generator=gen)
                 for s in (shape_q, shape_k, shape_v, shape_q[:3] + (cell.dv,)))


@contextlib.contextmanager
def timed_call(contender: Contender, mode: str, inputs, causal: bool):
    """Yields the zero-argument callable that is timed for `mode`, with the contender's
    backend forced for as long as the callable is in use."""
    q, k, v, do = inputs
    with contender.context():
        if mode == "fwd":
            yield lambda: contender.forward(q, k, v, causal)
            return
        leaves = tuple(t.detach().requires_grad_(True) for t in (q, k, v))
        if mode == "bwd":
            o = contender.forward(*leaves, causal)
            yield lambda: torch.autograd.grad(o, leaves, do, retain_graph=True)
            return
        if mode == "fwd+bwd":
            yield lambda: torch.autograd.grad(contender.forward(*leaves, causal), leaves, do)
            return
        raise ValueError(f"unknown mode {mode!r}")
