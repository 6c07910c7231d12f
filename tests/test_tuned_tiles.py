"""kernels/plan/tuned_tiles.py: default_config takes a GPU's tuned tiles from the table, keeps the
heuristic where the table lacks the GPU or key (and in the interpreter), and a malformed table
is an error that says what and where. The committed table is well-formed, states the tuner's
bands, and its entries are FA2's.

Shown to fail on broken copies: with apply_table returning its config unchanged, the first
test fails (no table tiles); with lookup ignoring the gpu field, the second (the fake GPU's
tiles leak onto another GPU); with parse's field-name check removed, the third (no error for an
unknown field)."""
import dataclasses
import json

import pytest

from kernels import Variant, default_config
from kernels.plan import tuned_tiles
from kernels.plan.config import heuristic_config

FAKE = "Fake GPU 9000"
FA2 = Variant()


def write_table(path, entries, bands=None):
    bands = bands or {"fwd": {"short": [0, 1024], "": [2048, 4096]},
                      "bwd": {"": [0, 4096], "long": [8192, 16384]}}
    path.write_text(json.dumps({"schema": tuned_tiles.SCHEMA, "bands": bands,
                                "entries": entries}))
    return str(path)


def entry(part="fwd", band="", fields=None, gpu=FAKE, variant=str(FA2), causal=True,
          dtype="bfloat16", head_dim=128, backend="triton"):
    return {"gpu": gpu, "backend": backend, "part": part, "variant": variant,
            "head_dim": head_dim, "causal": causal, "dtype": dtype, "band": band,
            "fields": fields or {"block_m": 32, "block_n": 32, "num_warps": 2, "num_stages": 5},
            "provenance": {"commit": "abc1234", "date": "2026-12-03", "median_ms": 1.25}}


@pytest.fixture
def table(tmp_path, monkeypatch):
    def use(entries, bands=None):
        path = write_table(tmp_path / "tiles.json", entries, bands)
        monkeypatch.setenv(tuned_tiles.PATH_ENV, path)
        tuned_tiles.load.cache_clear()
        tuned_tiles._applied.cache_clear()
        return path
    yield use
    tuned_tiles.load.cache_clear()
    tuned_tiles._applied.cache_clear()


def call(seqlen=4096, gpu=FAKE, on_gpu=True, causal=True, head_dim=128, dtype="bfloat16",
         variant=FA2, backend="triton"):
    return default_config(head_dim, on_gpu, variant, dtype, backend, causal=causal,
                          seqlen_q=seqlen, seqlen_k=seqlen, gpu=gpu)


def test_a_gpu_with_a_table_entry_gets_its_tiles_for_that_key_and_band(table):
    table([entry(), entry(part="bwd", band="long",
                          fields={"bwd_block_m": 16, "bwd_block_n": 16, "bwd_dq_pass": False})])
    heuristic = heuristic_config(128, True, FA2, "bfloat16")
    got = call()
    assert (got.block_m, got.block_n, got.num_warps, got.num_stages) == (32, 32, 2, 5)
    assert got.bwd_block_m == heuristic.bwd_block_m  # the bwd entry is for the long band only
    long = call(seqlen=16384)
    assert (long.bwd_block_m, long.bwd_block_n, long.bwd_dq_pass) == (16, 16, False)
    assert long.block_m == 32  # the forward's "" band covers 16k too
    # head_dim 96 reads block_d's (128) entry; the short band and the other mask do not
    assert call(head_dim=96).block_m == 32
    assert call(seqlen=1024) == heuristic
    assert call(causal=False) == heuristic_config(128, True, FA2, "bfloat16")
    # the backward entry is the variant's own (split_q reaches the backward, D50): split-K
    # keeps its heuristic (FA1-shaped) backward tiles
    split_k = call(seqlen=16384, variant=Variant(split_q=False))
    assert split_k.bwd_block_n != 16 and split_k.block_m != 32


def test_other_gpus_keys_and_the_interpreter_keep_the_heuristic(table):
    table([entry()])
    assert call(gpu="NVIDIA H100 80GB HBM3") == heuristic_config(128, True, FA2, "bfloat16")
    assert call(dtype="float16") == heuristic_config(128, True, FA2, "float16")
    assert call(backend="hopper") == heuristic_config(128, True, FA2, "bfloat16", "hopper")
    assert call(on_gpu=False) == heuristic_config(128, False, FA2, "bfloat16")
    # without the lengths (or the mask) there is no band to pick: the heuristic, as before
    assert default_config(128, True, FA2, "bfloat16", gpu=FAKE) == heuristic_config(
        128, True, FA2, "bfloat16")


@pytest.mark.parametrize("bad, message", [
    ({"fields": {"blok_m": 32}}, "'blok_m' is not a fwd field of TileConfig"),
    ({"fields": {"block_m": "32"}}, "block_m must be a int"),
    ({"fields": {"bwd_block_m": 32}}, "'bwd_block_m' is not a fwd field"),
    ({"band": "huge"}, "band 'huge' is not one of the file's fwd bands"),
    ({"part": "both"}, "part must be one of"),
    ({"causal": "yes"}, "causal must be a bool"),
])
def test_a_malformed_table_is_an_error_naming_the_entry_and_the_problem(table, bad, message):
    path = table([entry(), {**entry(), **bad}])
    with pytest.raises(tuned_tiles.TileTableError) as error:
        call()
    assert str(error.value).startswith(f"{path}: entries[1]: ") and message in str(error.value)


def test_a_table_that_is_not_json_or_lacks_its_schema_is_an_error(table, tmp_path, monkeypatch):
    path = tmp_path / "broken.json"
    path.write_text("{not json")
    monkeypatch.setenv(tuned_tiles.PATH_ENV, str(path))
    tuned_tiles.load.cache_clear()
    with pytest.raises(tuned_tiles.TileTableError, match="cannot be read as JSON"):
        call(gpu="Other GPU")
    path.write_text(json.dumps({"entries": []}))
    tuned_tiles.load.cache_clear()
    with pytest.raises(tuned_tiles.TileTableError, match="schema"):
        call(gpu="Other GPU")


def test_an_empty_table_path_means_no_table(monkeypatch):
    monkeypatch.setenv(tuned_tiles.PATH_ENV, "")
    assert call(gpu="NVIDIA H200") == heuristic_config(128, True, FA2, "bfloat16")


def test_the_committed_table_is_well_formed_with_the_tuners_bands_and_fa2_entries():
    from fa2check.ablate import tile_table

    table = tuned_tiles.load(tuned_tiles.PATH)
    assert table.bands == tile_table.table_bands(4096)
    assert table.entries and all(k.variant == str(FA2) and k.backend == "triton"
                                 for k in table.entries)
    for key, e in table.entries.items():
        assert {"commit", "date", "source"} <= set(e["provenance"]), key
    # written as write() writes it: a re-tune's diff shows only the keys it changed
    with open(tuned_tiles.PATH) as f:
        text = f.read()
    copy = dataclasses.replace(table)
    import tempfile
    with tempfile.NamedTemporaryFile("r", suffix=".json") as out:
        tuned_tiles.write(copy, out.name)
        assert open(out.name).read() == text
