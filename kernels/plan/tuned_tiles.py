"""The table of tuned tiles (kernels/tuned_tiles.json), read by `default_config` on a GPU.

For each GPU name (torch.cuda.get_device_name), kernel backend, variant, tile head_dim
(`key_head_dim`), mask, dtype and seqlen band, the tile fields the ablation's tuner found fastest
(`python -m fa2check.ablate --retune` writes it), with where they came from. Keys the table
lacks, and every GPU it does not name, keep default_config's heuristic tiles; the CPU
interpreter never reads it. So `flash_attention`, `fa2check.verify` and `fa2check.ablate` run
the same tiles for the same key.

An entry is one part's fields: "fwd" (every TileConfig field but the bwd_ ones) or "bwd" (the
bwd_ fields; the Triton backward, which the other backends' gradients use where they have
none of their own, keyed by backend "triton" and the variant). The file states its
seqlen bands, {part: {band: [first seqlen, seqlen it is tuned at]}}; a call's band is picked by
seqlen_k for the forward (the keys a row block walks) and by seqlen_q for the backward (the
rows a key column block walks).

FA2CHECK_TUNED_TILES names another table file (an empty value: no table, heuristics only).
"""
from __future__ import annotations

import dataclasses
import json
import os
from dataclasses import dataclass
from functools import lru_cache

from .tiles import BACKENDS, TileConfig, block_d, tile_columns

SCHEMA = "fa2check.tuned_tiles/1"
PATH = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                    "tuned_tiles.json")  # kernels/tuned_tiles.json
PATH_ENV = "FA2CHECK_TUNED_TILES"
PARTS = ("fwd", "bwd")
# a numerics choice and FA1's launcher's grids (kernels/plan/fa1_launch.py), never from a table
NOT_TILES = ("input_precision", "fa1_splits", "fa1_bwd_splits")
PROVENANCE = ("commit", "date", "median_ms", "tuned_on", "source")


def key_head_dim(part: str, backend: str, head_dim: int) -> int:
    """The head dim a call's entry is keyed by: the columns its tile computes. The Triton
    forward computes a head dim that is not a tile width in two chunks (D60: 96 = 64 + 32), so
    96 has entries of its own; every other kernel pads to block_d (96 reads 128's)."""
    return tile_columns(head_dim) if (part, backend) == ("fwd", "triton") else block_d(head_dim)


class TileTableError(ValueError):
    """A table file that cannot be read as a table of tiles (what and where is in the text)."""


def part_fields(part: str) -> tuple[str, ...]:
    """The TileConfig fields an entry of a part may set."""
    names = [f.name for f in dataclasses.fields(TileConfig) if f.name not in NOT_TILES]
    return tuple(n for n in names if n.startswith("bwd_") == (part == "bwd"))


def dtype_name(dtype) -> str:
    return str(dtype).removeprefix("torch.")


@dataclass(frozen=True)
class TileKey:
    gpu: str
    backend: str  # kernels.plan.tiles.BACKENDS; "triton" for every "bwd" entry
    part: str  # "fwd" or "bwd"
    variant: str  # str(Variant)
    head_dim: int  # key_head_dim: the columns the tile computes
    causal: bool
    dtype: str  # "bfloat16", "float16" or "float32"
    band: str  # one of the table's bands of this part


KEY_FIELDS = tuple(f.name for f in dataclasses.fields(TileKey))
KEY_TYPES = {"head_dim": int, "causal": bool}  # the others are str


@dataclass
class TileTable:
    bands: dict  # {part: {band: (first seqlen, tuned at)}}
    entries: dict  # {TileKey: {"fields": {...}, "provenance": {...}}}
    path: str = ""

    def band_of(self, part: str, seqlen: int) -> str:
        """The band whose entries a part uses at this seqlen."""
        return max((first, band) for band, (first, _) in self.bands[part].items()
                   if first <= seqlen)[1]

    def key(self, part, gpu, backend, variant, head_dim, causal, dtype, seqlen_q,
            seqlen_k) -> TileKey:
        if part == "bwd":
            backend = "triton"
        seqlen = seqlen_k if part == "fwd" else seqlen_q
        return TileKey(gpu, backend, part, str(variant), key_head_dim(part, backend, head_dim),
                       bool(causal), dtype_name(dtype), self.band_of(part, seqlen))

    def find(self, key: TileKey) -> tuple[TileKey, dict | None]:
        """(key, entry), or where the table has none for a chunked tile (96), the padded
        tile's (128: the tiles it ran before it had its own); (key, None) where neither."""
        padded = dataclasses.replace(key, head_dim=block_d(key.head_dim))
        for k in (key, padded):
            if k in self.entries:
                return k, self.entries[k]
        return key, None

    def merged(self, entries: dict) -> "TileTable":
        """This table with `entries` added; an entry of a key already here replaces it."""
        return TileTable(self.bands, {**self.entries, **entries}, self.path)

    def as_json(self) -> dict:
        order = sorted(self.entries, key=lambda k: tuple(str(x) for x in dataclasses.astuple(k)))
        return {"schema": SCHEMA,
                "bands": {p: {b: list(v) for b, v in bands.items()}
                          for p, bands in self.bands.items()},
                "entries": [{**dataclasses.asdict(k), **self.entries[k]} for k in order]}


def parse(data, path: str = "<table>") -> TileTable:
    """A TileTable from a table file's JSON, checked: every key field, band and tile field
    named, with its type; TileTableError otherwise."""
    def fail(where, why):
        raise TileTableError(f"{path}: {where}: {why}")

    if not isinstance(data, dict) or data.get("schema") != SCHEMA:
        fail("top level", f"expected an object with schema {SCHEMA!r}")
    bands = data.get("bands")
    if not isinstance(bands, dict) or set(bands) != set(PARTS):
        fail("bands", f"expected {{part: {{band: [first seqlen, tuned at]}}}} for {PARTS}")
    for part, by_band in bands.items():
        if not isinstance(by_band, dict) or not any(
                isinstance(v, list) and v and v[0] == 0 for v in by_band.values()):
            fail(f"bands.{part}", "needs a band starting at seqlen 0")
        for band, v in by_band.items():
            if not (isinstance(v, list) and len(v) == 2 and all(isinstance(x, int) for x in v)):
                fail(f"bands.{part}.{band!r}", f"expected [first seqlen, tuned at], got {v!r}")
    types = {f.name: {"int": int, "bool": bool, "str": str}[str(f.type)]
             for f in dataclasses.fields(TileConfig)}
    entries = {}
    if not isinstance(data.get("entries"), list):
        fail("entries", "expected a list")
    for i, entry in enumerate(data["entries"]):
        where = f"entries[{i}]"
        if not isinstance(entry, dict):
            fail(where, "expected an object")
        missing = [f for f in KEY_FIELDS + ("fields",) if f not in entry]
        if missing:
            fail(where, f"missing {', '.join(missing)}")
        key = TileKey(**{f: entry[f] for f in KEY_FIELDS})
        for f in KEY_FIELDS:
            want = KEY_TYPES.get(f, str)
            if type(getattr(key, f)) is not want:
                fail(where, f"{f} must be a {want.__name__}, got {getattr(key, f)!r}")
        if key.part not in PARTS or key.backend not in BACKENDS:
            fail(where, f"part must be one of {PARTS} and backend one of {BACKENDS}")
        if key.band not in bands[key.part]:
            fail(where, f"band {key.band!r} is not one of the file's {key.part} bands "
                        f"{sorted(bands[key.part])}")
        fields = entry["fields"]
        allowed = part_fields(key.part)
        if not isinstance(fields, dict) or not fields:
            fail(where, "fields must be a non-empty object of TileConfig fields")
        for name, value in fields.items():
            if name not in allowed:
                fail(where, f"{name!r} is not a {key.part} field of TileConfig "
                            f"({', '.join(allowed)})")
            if type(value) is not types[name]:
                fail(where, f"{name} must be a {types[name].__name__}, got {value!r}")
        if key in entries:
            fail(where, f"a second entry for {key}")
        entries[key] = {"fields": dict(fields), "provenance": dict(entry.get("provenance", {}))}
    return TileTable({p: {b: tuple(v) for b, v in bs.items()} for p, bs in bands.items()},
                     entries, path)


def table_path() -> str | None:
    """The table default_config reads: FA2CHECK_TUNED_TILES, or the committed one."""
    path = os.environ.get(PATH_ENV, PATH)
    return path or None


def read_json(path: str, error: type[ValueError]):
    """A table file's JSON; `error` (the table's error type) where it cannot be read."""
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, json.JSONDecodeError) as e:
        raise error(f"{path}: cannot be read as JSON: {e}") from None


@lru_cache(maxsize=8)
def load(path: str) -> TileTable:
    return parse(read_json(path, TileTableError), path)


def write(table: TileTable, path: str):
    """The table as JSON, one entry a line (a re-tune's diff shows the keys it changed)."""
    data = table.as_json()
    lines = ['{"schema": ' + json.dumps(data["schema"]) + ",",
             ' "bands": ' + json.dumps(data["bands"]) + ",", ' "entries": [']
    lines += ["  " + json.dumps(e) + ("," if i + 1 < len(data["entries"]) else "")
              for i, e in enumerate(data["entries"])]
    with open(path, "w") as f:
        f.write("\n".join(lines + [" ]", "}"]) + "\n")
    load.cache_clear()
    _applied.cache_clear()


def current_gpu() -> str:
    import torch

    return torch.cuda.get_device_name()


def lookup(gpu, backend, variant, head_dim, causal, dtype, seqlen_q, seqlen_k,
           path: str | None = None) -> dict:
    """{part: (TileKey, entry or None)} for both parts of a call; {} without a table."""
    path = path or table_path()
    if path is None:
        return {}
    table = load(path)
    out = {}
    for part in PARTS:
        key = table.key(part, gpu, backend, variant, head_dim, causal, dtype, seqlen_q, seqlen_k)
        out[part] = table.find(key)
    return out


def apply_table(config: TileConfig, backend, variant, head_dim, causal, dtype, seqlen_q,
                seqlen_k, gpu: str | None = None) -> TileConfig:
    """config with the fields of the table's entries for this call (fitted to the variant)."""
    return _applied(config, backend, variant, head_dim, bool(causal), dtype, seqlen_q, seqlen_k,
                    current_gpu() if gpu is None else gpu, table_path())


@lru_cache(maxsize=4096)  # a call's host time: the lookup once per distinct call shape
def _applied(config, backend, variant, head_dim, causal, dtype, seqlen_q, seqlen_k, gpu, path):
    found = lookup(gpu, backend, variant, head_dim, causal, dtype, seqlen_q, seqlen_k, path) \
        if path else {}
    fields = {}
    for _, entry in found.values():
        if entry is not None:
            fields.update(entry["fields"])
    if not fields:
        return config
    return dataclasses.replace(config, **fields).for_variant(variant, True)


def describe(entry: dict | None, key: TileKey | None = None) -> str:
    """Where a part's tiles came from, in words."""
    if entry is None:
        return ("heuristic (default_config: no table entry" +
                (f" for {key.gpu}, {key.backend} {key.part} {key.variant} d={key.head_dim} "
                 f"{'causal' if key.causal else 'full'} {key.dtype} band {key.band!r})"
                 if key else ")"))
    p = entry.get("provenance", {})
    ms = p.get("median_ms")
    return (f"table (git {p.get('commit', '?')}, {p.get('date', '?')}"
            + (f", {ms:.4f} ms" if isinstance(ms, (int, float)) else "")
            + (f" on {p['tuned_on']}" if p.get("tuned_on") else "") + ")")
