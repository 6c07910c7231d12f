"""The ablation's side of the table of tuned tiles (kernels/plan/tuned_tiles.py): where each tile of
a run came from, and the table entries a run's tuning found.

A run without --retune takes every tile from `kernels.default_config` (the table's entry for
the GPU and key, else the heuristic), as `flash_attention` does; `sources` says which, per
part and key. With --retune, `entries_from` turns the run's tuned records into table entries
(per dtype of the grid: a winner tuned on one dtype is the one the run times for the others,
and its provenance names the cell it was tuned on), which are merged into the table, keys not
searched kept. The first table was seeded the same way from the records of the tables of
record at 62fa7f3 (FA2's Triton keys only).
"""
from __future__ import annotations

import os

from .grids import Cell
from .contenders import parse_kernel_name
from . import tuning

TUNED = "tuned on "  # the start of a tuned record's source (sweep.tune)


def table_bands(tune_seqlen: int) -> dict:
    """The tuner's seqlen bands as a table states them: {part: {band: (first, tuned at)}}."""
    return {part: {band: (first, tune_seqlen if band == "" else at)
                   for band, (first, at) in bands.items()}
            for part, bands in tuning.TUNE_BANDS.items()}


def part_of(name: str, part: str):
    """(kernel backend, variant) whose entry a kernel's part reads: the backward's is Triton's,
    one key per variant (split_q reaches the backward, D50); the Hopper chassis's backward has
    fixed tiles and reads only the preprocess's block from it (D61); a Hopper switch variant
    reads its FA2 variant's (tuning.part_variant, D66)."""
    backend, variant = parse_kernel_name(name)
    return ("triton" if part == "bwd" else backend), tuning.part_variant(part, variant)


def entries_from(records: dict, cells, configs, run: dict) -> dict:
    """{TileKey: entry} for the keys this run tuned (records whose source starts with TUNED):
    one per dtype among the cells the key covers, with the part's fields of the config the run
    uses there (sweep.Configs) and the record's provenance."""
    from kernels.plan.tuned_tiles import TileKey, dtype_name, key_head_dim, part_fields

    out = {}
    for key, record in records.items():
        if not str(record.get("source", "")).startswith(TUNED):
            continue
        backend, variant = part_of(key.variant, key.part)
        for cell in cells:
            if (cell.head_dim, cell.causal) != (key.head_dim, key.causal) or \
                    tuning.band_of(key.part, cell.seqlen) != key.band:
                continue
            config = configs.config(key.variant, cell)
            tile_key = TileKey(run.get("gpu", "unknown"), backend, key.part, str(variant),
                               key_head_dim(key.part, backend, cell.head_dim), cell.causal,
                               dtype_name(cell.dtype), key.band)
            out[tile_key] = {"fields": {f: getattr(config, f) for f in part_fields(key.part)},
                             "provenance": provenance(run, record)}
    return out


def provenance(run: dict, record: dict) -> dict:
    """commit, date, the winner's measured median (its final rounds), where it was tuned."""
    fields = record.get("fields")
    winner = [c for c in record.get("candidates", []) if c.get("fields") == fields]
    ms = winner[0].get("final_median_ms", winner[0].get("median_ms")) if winner else None
    tuned_on = record.get("tuned_on")
    return {"commit": run.get("git_commit"), "date": str(run.get("date", ""))[:10],
            "median_ms": ms, "tuned_on": str(Cell(**tuned_on)) if tuned_on else None,
            "source": record.get("source", "")}


def sources(cells, names_for, on_gpu: bool, gpu: str | None) -> list[dict]:
    """One row per (part, kernel backend, variant, head_dim, mask, dtype, band) the run uses:
    where its tiles come from (a table entry with its commit, or the heuristic). names_for(cell)
    -> [(kernel name, parts)]."""
    from kernels.plan.tuned_tiles import describe, lookup

    rows = {}
    for cell in cells:
        for name, parts in names_for(cell):
            backend, variant = parse_kernel_name(name)
            variant = tuning.part_variant("fwd", variant)  # a switch variant: FA2's tiles
            found = lookup(gpu or "", backend, variant, cell.head_dim, cell.causal, cell.dtype,
                           cell.seqlen, cell.seqlen) if on_gpu else {}
            for part in parts:
                key, entry = found.get(part, (None, None))
                row_key = (part, name if part == "fwd" else str(part_of(name, part)[1]),
                           cell.head_dim, cell.causal, cell.dtype,
                           tuning.band_of(part, cell.seqlen))
                rows.setdefault(row_key, {
                    "part": part, "kernel": row_key[1], "head_dim": cell.head_dim,
                    "causal": cell.causal, "dtype": cell.dtype, "band": row_key[5],
                    "from": ("table" if entry else "heuristic"),
                    "source": describe(entry, key) if on_gpu else "interpreter tiles"})
    return list(rows.values())


def merge_into(path: str, entries: dict, tune_seqlen: int):
    """The table at `path` (or a new one) with `entries` merged in, written back; its bands
    must be the tuner's (else ValueError: a new table file is needed)."""
    from kernels.plan.tuned_tiles import TileTable, load, write

    bands = table_bands(tune_seqlen)
    if os.path.exists(path):
        table = load(path)
        if table.bands != bands:
            raise ValueError(f"{path} has seqlen bands {table.bands}, the tuner {bands}: write "
                             "the new entries to another file (--table-out)")
    else:
        table = TileTable(bands, {}, path)
    table = table.merged(entries)
    write(table, path)
    return table

