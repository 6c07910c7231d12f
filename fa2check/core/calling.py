"""How the harness calls an implementation it did not write: what the function may omit, the
layout it takes, and what it says when it cannot run a call.

The properties call every implementation as

    impl(q, k, v, *, causal, softmax_scale=None, variant, return_lse=True) -> (o, lse)

with q, k, v in torch SDPA's layout (batch, heads, seqlen, head_dim). `adapt(fn, layout)` puts
a user's function behind that call:

- Parameters it may omit: `variant` (it is then one implementation whatever the variant),
  `return_lse` (lse is then not checked), `softmax_scale` (the harness passes only the
  default, None) and `causal` (its causal cases are then n/a); `config` is never passed.
- lse: with a `return_lse` parameter it is asked for lse; if it returns o alone, or raises
  NotImplementedError when asked, it is called again without lse. Then the call returns
  (o, None) and `lse_missing` says why: the lse checks are n/a with that reason, everything
  else (o, the gradients of o) is checked.
- Layout "bshd": q, k, v reach it as (batch, seqlen, heads, head_dim), contiguous when the
  harness's own tensors are (a strided view stays a view, transposed, so that memory_safety
  still hands it strides of its own); o comes back in that layout and lse as (batch, heads,
  seqlen_q), flash-attention's convention.
- NotImplementedError (and fa2check.Unsupported, a kind of it) raised by the function means
  "cannot run this call": reported n/a with its words. Anything else it raises is an error.
- An o or lse of the wrong shape is refused with what to change (`CallError`).
"""
from __future__ import annotations

import functools
import inspect

import torch

from .implementations import Unsupported

LAYOUTS = {"bhsd": "(batch, heads, seqlen, head_dim)", "bshd": "(batch, seqlen, heads, head_dim)"}
OMITTABLE = ("variant", "return_lse", "softmax_scale", "causal")


class CallError(ValueError):
    """What an implementation returned does not fit its signature; the message says what to
    change."""


def accepts(fn, name: str) -> bool:
    """Whether `fn` takes keyword `name` (a parameter of that name, or **kwargs). A callable
    whose signature cannot be read is assumed to take it."""
    try:
        parameters = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return True
    return any(p.name == name and p.kind != p.POSITIONAL_ONLY or p.kind == p.VAR_KEYWORD
               for p in parameters)


class Adapted:
    """`fn` behind the harness's call (see the module docstring). `lse_missing` is None until a
    call returns no lse; then it says why, in words."""

    def __init__(self, fn, layout: str = "bhsd"):
        if layout not in LAYOUTS:
            raise ValueError(f"layout {layout!r}: expected one of {list(LAYOUTS)}")
        functools.update_wrapper(self, fn)  # __wrapped__, __name__: inspect.unwrap finds fn
        self.fn, self.layout = fn, layout
        self.takes = {name: accepts(fn, name) for name in OMITTABLE}
        self.lse_missing: str | None = None

    def __repr__(self) -> str:
        return f"adapt({getattr(self.fn, '__qualname__', self.fn)!r}, layout={self.layout!r})"

    def __call__(self, q, k, v, *, causal=False, softmax_scale=None, variant=None,
                 return_lse=False):
        kwargs = {"variant": variant} if self.takes["variant"] else {}  # else: one implementation
        for name, value, default in (("causal", causal, False),
                                     ("softmax_scale", softmax_scale, None)):
            if self.takes[name]:
                kwargs[name] = value
            elif value is not default:
                raise Unsupported(f"it has no `{name}` parameter, and this case passes "
                                  f"{name}={value!r}")
        args = tuple(self._in(t) for t in (q, k, v))
        shapes = _expected(q, k, v)
        if not return_lse:
            return self._o(self._call(args, kwargs, False), shapes)
        if not self.takes["return_lse"]:
            self.lse_missing = "it has no `return_lse` parameter"
            return self._o(self._call(args, kwargs, None), shapes), None
        try:
            out = self.fn(*args, **kwargs, return_lse=True)
        except NotImplementedError as refusal:
            out = self._call(args, kwargs, False)  # a refusal of the call itself propagates
            self.lse_missing = (f"it raised {type(refusal).__name__} when asked for lse: "
                                f"{_first_line(refusal)}")
            return self._o(out, shapes), None
        if isinstance(out, torch.Tensor):
            self.lse_missing = "it returned o alone when asked for lse (return_lse=True)"
            return self._o(out, shapes), None
        if not isinstance(out, (tuple, list)) or len(out) != 2:
            raise CallError(f"with return_lse=True it returned {_kind(out)}; return (o, lse), "
                            "or o alone when it has no lse")
        return self._o(out[0], shapes), self._lse(out[1], shapes)

    def _call(self, args, kwargs, return_lse):
        out = (self.fn(*args, **kwargs) if return_lse is None or not self.takes["return_lse"]
               else self.fn(*args, **kwargs, return_lse=return_lse))
        if isinstance(out, (tuple, list)) and out and isinstance(out[0], torch.Tensor):
            raise CallError(f"it returned {_kind(out)} without being asked for lse; return o "
                            "alone unless return_lse=True")
        return out

    def _in(self, t):
        if self.layout == "bhsd":
            return t
        u = t.transpose(1, 2)  # (B, H, S, D) -> (B, S, H, D)
        return u.contiguous() if t.is_contiguous() else u

    def _o(self, o, shapes):
        if not isinstance(o, torch.Tensor):
            raise CallError(f"it returned {_kind(o)}; return o, a torch.Tensor")
        want = shapes["o_" + self.layout]
        if tuple(o.shape) != want:
            other = "bshd" if self.layout == "bhsd" else "bhsd"
            fix = (f"run with --layout {other}" if tuple(o.shape) == shapes["o_" + other]
                   else f"return o as {LAYOUTS[self.layout]}")
            raise CallError(f"o has shape {tuple(o.shape)}, expected {want}, layout "
                            f"{self.layout} {LAYOUTS[self.layout]}; {fix}")
        return o if self.layout == "bhsd" else o.transpose(1, 2)

    def _lse(self, lse, shapes):
        if not isinstance(lse, torch.Tensor) or tuple(lse.shape) != shapes["lse"]:
            got = tuple(lse.shape) if isinstance(lse, torch.Tensor) else _kind(lse)
            raise CallError(f"lse is {got}, expected shape {shapes['lse']} (batch, heads, "
                            "seqlen_q) in any layout; return o alone if it has no lse")
        return lse


def adapt(fn, layout: str = "bhsd") -> Adapted:
    """`fn` behind the harness's call: see the module docstring."""
    return fn if isinstance(fn, Adapted) and fn.layout == layout else Adapted(fn, layout)


def _expected(q, k, v) -> dict:
    batch, heads, seqlen_q = q.shape[:3]
    head_dim_v = v.shape[-1]
    return {"o_bhsd": (batch, heads, seqlen_q, head_dim_v),
            "o_bshd": (batch, seqlen_q, heads, head_dim_v), "lse": (batch, heads, seqlen_q)}


def _kind(value) -> str:
    if isinstance(value, torch.Tensor):
        return f"a tensor of shape {tuple(value.shape)}"
    if isinstance(value, (tuple, list)):
        return f"a {type(value).__name__} of {len(value)}"
    return f"a {type(value).__name__}"


def _first_line(error: BaseException) -> str:
    return (str(error).splitlines() or [""])[0] or type(error).__name__
