"""The kernel `flash_attention` runs when a call names no backend, variant or config: the
fastest correct one measured on this GPU for the call's key, from the committed table
kernels/fastest.json, else Triton's FA2.

The table is written by `python -m fa2check.ablate.fastest_table` from ablation runs that timed
the candidates side by side in every cell and passed their correctness gate: Triton's FA2 (the
`api` peer), the Hopper chassis's FA2 and its Hopper-era switch variants. A key is (GPU name,
part, head_dim, mask, dtype, seqlen): part "fwd" for calls that need no gradient, "fwd+bwd" for
calls that do (the chosen backend's backward then runs, as with backend=...). A call takes the
entry of the largest measured seqlen at or below its seqlen_k (below the smallest: that one).
An entry names a kernel other than Triton's FA2 only where it was faster by the table's rule
(fa2check.ablate.fastest_table.RULE); a call the chosen backend cannot take (dtype, head dims,
alignment, not sm_90) runs Triton's FA2.

FA2CHECK_FASTEST names another table file (an empty value: no table, Triton's FA2 always).
"""
from __future__ import annotations

import os
from functools import lru_cache

from .variant import Variant

SCHEMA = "fa2check.fastest/1"
PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fastest.json")
PATH_ENV = "FA2CHECK_FASTEST"
PARTS = ("fwd", "fwd+bwd")
DEFAULT = ("triton", Variant())
KEY_FIELDS = ("gpu", "part", "head_dim", "causal", "dtype", "seqlen")
KEY_TYPES = {"head_dim": int, "causal": bool, "seqlen": int}  # the others are str


class FastestTableError(ValueError):
    """A file that cannot be read as a table of fastest kernels (what and where is in the text)."""


def table_path() -> str | None:
    path = os.environ.get(PATH_ENV, PATH)
    return path or None


def parse(data, path: str = "<table>") -> dict:
    """{(gpu, part, head_dim, causal, dtype): [(seqlen, backend, Variant), ...] by seqlen},
    checked; FastestTableError otherwise."""
    from .plan.tiles import BACKENDS

    def fail(where, why):
        raise FastestTableError(f"{path}: {where}: {why}")

    if not isinstance(data, dict) or data.get("schema") != SCHEMA:
        fail("top level", f"expected an object with schema {SCHEMA!r}")
    if not isinstance(data.get("entries"), list):
        fail("entries", "expected a list")
    table = {}
    for i, entry in enumerate(data["entries"]):
        where = f"entries[{i}]"
        if not isinstance(entry, dict) or any(f not in entry for f in KEY_FIELDS + ("backend", "variant")):
            fail(where, f"expected an object with {', '.join(KEY_FIELDS)}, backend and variant")
        for f in KEY_FIELDS:
            want = KEY_TYPES.get(f, str)
            if type(entry[f]) is not want:
                fail(where, f"{f} must be a {want.__name__}, got {entry[f]!r}")
        if entry["part"] not in PARTS or entry["backend"] not in BACKENDS:
            fail(where, f"part must be one of {PARTS} and backend one of {BACKENDS}")
        try:
            variant = Variant.parse(entry["variant"])
        except ValueError as e:
            fail(where, str(e))
        key = tuple(entry[f] for f in KEY_FIELDS[:-1])
        table.setdefault(key, []).append((entry["seqlen"], entry["backend"], variant))
    for rows in table.values():
        rows.sort(key=lambda r: r[0])
    return table


@lru_cache(maxsize=8)
def load(path: str) -> dict:
    from .plan.tuned_tiles import read_json

    return parse(read_json(path, FastestTableError), path)


@lru_cache(maxsize=4096)  # a call's host time: the lookup once per distinct call shape
def choose(path: str | None, gpu: str, part: str, head_dim: int, causal: bool, dtype: str,
           seqlen_k: int) -> tuple[str, Variant]:
    """(backend, variant) of the table's entry for this key, DEFAULT where it has none."""
    rows = load(path).get((gpu, part, head_dim, bool(causal), dtype)) if path else None
    if not rows:
        return DEFAULT
    below = [r for r in rows if r[0] <= seqlen_k] or rows[:1]
    return below[-1][1:]


def choose_for(gpu: str, needs_grad: bool, head_dim: int, head_dim_v: int, causal: bool,
               dtype, seqlen_k: int) -> tuple[str, Variant]:
    """The table's choice for a call of this shape, DEFAULT where the chosen backend cannot
    take its dtype and head dims."""
    from .hopper_forward import unsupported

    dtype = str(dtype).removeprefix("torch.")
    backend, variant = choose(table_path(), gpu, "fwd+bwd" if needs_grad else "fwd", head_dim,
                              causal, dtype, seqlen_k)
    if backend == "hopper" and unsupported(dtype, head_dim, head_dim_v) is not None:
        return DEFAULT
    return backend, variant


def for_call(q, k, v, causal: bool, needs_grad: bool, gpu: str) -> tuple[str, Variant]:
    """choose_for of a call's tensors, DEFAULT where the chosen backend cannot read them
    (the Hopper chassis: sm_90, and TMA-ready q, k and v)."""
    import torch

    from .tma import tma_ready

    backend, variant = choose_for(gpu, needs_grad, q.shape[-1], v.shape[-1], causal, q.dtype,
                                  k.shape[2])
    if backend == "hopper" and not (torch.cuda.get_device_capability(q.device) == (9, 0)
                                    and all(tma_ready(t) for t in (q, k, v))):
        return DEFAULT
    return backend, variant
