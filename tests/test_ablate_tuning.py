"""fa2check.ablate.tuning: the tile search space, its seqlen bands, the interleaved final rounds,
and compiling each distinct job once."""
from fa2check.ablate.grids import Cell, paper_grid
from kernels import Variant


def test_tuning_space_keeps_split_k_honest():
    from fa2check.ablate import tuning

    for d in (64, 128):
        split_k = tuning.candidates("fwd", d, Variant(True, True, False), on_gpu=True)
        split_q = tuning.candidates("fwd", d, Variant(), on_gpu=True)
        assert split_k and all(c["block_n"] >= 64 for c in split_k)
        four = [c for c in split_k if "key_slices" not in c]
        two = [c for c in split_k if "key_slices" in c]
        assert all(c in split_q for c in four)  # the same space, less what it cannot use
        assert two and all(c["key_slices"] == 2 for c in two)  # and 2 slices, named
        for c in split_k:  # a candidate keeps the slices it names, else FA1's 4
            config = tuning.build_config(d, Variant(True, True, False), True, fwd=c)
            assert config.key_slices == c.get("key_slices", 4)
        # seq_parallel off also has FA1's 16-row query steps, and 64-row ones
        serial = tuning.candidates("fwd", d, Variant(seq_parallel=False), on_gpu=True)
        assert {16, 64} <= {c["block_m"] for c in serial}
        assert 16 not in {c["block_m"] for c in split_q}
    assert tuning.warm_seqlen(16384) == 256 and tuning.warm_seqlen(1000) == 257
    assert tuning.warm_seqlen(1) == 1 and tuning.warm_seqlen(100) == 100


def test_causal_keys_alone_try_the_first_row_repair_check():
    from fa2check.ablate import report, tuning

    for d in (64, 128):
        full = tuning.candidates("fwd", d, Variant(), on_gpu=True)
        causal = tuning.candidates("fwd", d, Variant(), on_gpu=True, causal=True)
        extra = [c for c in causal if c not in full]
        assert all(c["nan_flags"] is False for c in extra)
        assert not any("nan_flags" in c for c in full)
        assert len(extra) == len(tuning.CAUSAL_FWD_NAN_FLAGS_OFF.get(d, []))
        # each is the twin of a tile of the space
        assert all({k: v for k, v in c.items() if k != "nan_flags"} in full for c in extra)
    assert extra  # d=128 has some
    assert not any("nan_flags" in c for c in tuning.candidates("fwd", 128, Variant(),
                                                                on_gpu=False, causal=True))
    records = [{"key": {"part": "fwd", "variant": "v", "head_dim": 128, "causal": True},
                "fields": {**extra[0], "block_m": 64}},
               {"key": {"part": "fwd", "variant": "v", "head_dim": 128, "causal": True},
                "fields": {"block_m": 64, "tma": True}}]
    choices = [row[9] for row in report.configs_table({"configs": records}).rows]
    assert choices[0].endswith("NaN check in REPAIR") and choices[1] == "TMA loads"


def test_each_seqlen_band_has_its_own_winner_tuned_on_its_cells():
    from fa2check.ablate import sweep, tuning

    cells = paper_grid()
    keys = sweep.needed_keys(cells, ["fwd+bwd"], sweep.Settings(backends=()))
    fa2 = [k for k in keys if k.variant == str(Variant()) and k.head_dim == 128 and k.causal]
    assert sorted((k.part, k.band) for k in fa2) == [("bwd", ""), ("bwd", "long"),
                                                      ("fwd", ""), ("fwd", "short")]
    tuned_on = {(k.part, k.band): tuning.representative(cells, k).seqlen for k in fa2}
    assert tuned_on == {("bwd", ""): 4096, ("bwd", "long"): 16384, ("fwd", "short"): 1024,
                        ("fwd", ""): 4096}
    # each cell reads the winner of its own band
    configs = sweep.Configs({k: {"key": k.as_dict(), "fields": {
        f"{'bwd_' if k.part == 'bwd' else ''}block_m": 16 * (1 + sorted(
            tuning.TUNE_BANDS[k.part]).index(k.band))}} for k in fa2}, on_gpu=True)
    chosen = {c.seqlen: (configs.config(str(Variant()), c).block_m,
                         configs.config(str(Variant()), c).bwd_block_m)
              for c in cells if c.head_dim == 128 and c.causal and c.dtype == "bfloat16"}
    assert chosen == {512: (32, 16), 1024: (32, 16), 2048: (16, 16), 4096: (16, 16),
                      8192: (16, 32), 16384: (16, 32)}


def test_configs_of_older_files_load_into_the_band_they_were_tuned_for(tmp_path):
    """Before bands, every winner was tuned at 4k (the band ""); then the backward's keys had
    `long`."""
    import json

    from fa2check.ablate import report, tuning

    records = [{"key": {"part": "fwd", "variant": "v", "head_dim": 64, "causal": False},
                "fields": {}},
               {"key": {"part": "bwd", "variant": "v", "head_dim": 64, "causal": False,
                        "long": True}, "fields": {}},
               {"key": {"part": "fwd", "variant": "v", "head_dim": 64, "causal": True,
                        "long": False}, "fields": {}}]
    path = tmp_path / "old.json"
    path.write_text(json.dumps({"configs": records}))
    assert sorted((k.part, k.band) for k in tuning.load_configs([path])) == [
        ("bwd", "long"), ("fwd", ""), ("fwd", "")]
    seqlens = [row[4] for row in report.configs_table({"configs": records}).rows]
    assert seqlens == ["all", ">= 8192", "all"]
    assert [tuning.band_seqlens(p, b) for p, b in [("fwd", "short"), ("fwd", ""), ("bwd", ""),
                                                   ("bwd", "long")]] == [
        "< 2048", ">= 2048", "< 8192", ">= 8192"]


def test_a_middle_band_covers_the_seqlens_between_its_neighbours(monkeypatch):
    from fa2check.ablate import tuning

    monkeypatch.setitem(tuning.TUNE_BANDS, "fwd", {"short": (0, 1024), "": (2048, 4096),
                                                   "long": (8192, 16384)})
    assert [tuning.band_seqlens("fwd", b) for b in ("short", "", "long")] == [
        "< 2048", "2048-8191", ">= 8192"]
    assert [tuning.band_of("fwd", s) for s in (2047, 2048, 8191, 8192)] == [
        "short", "", "", "long"]


def test_tuning_keeps_the_finalist_fastest_in_interleaved_rounds(monkeypatch):
    """The first pass ranks; the finalists' rounds decide (a one-pass lead of 1% is noise)."""
    import contextlib

    from fa2check.ablate import sweep, tuning
    from fa2check.ablate.timing import Timing

    first = {16: 1.00, 32: 1.01, 48: 1.02, 64: 2.0}  # block_m -> first-pass ms
    final = {16: 1.10, 32: 1.00, 48: 1.05}  # ... and in the final rounds
    timed = []

    def bench(config, **_):
        timed.append(config.block_m)
        seen = timed.count(config.block_m)
        return Timing([first[config.block_m] if seen == 1 else final[config.block_m]] * 5)

    monkeypatch.setattr(sweep, "bench", bench)
    monkeypatch.setattr(sweep, "ours", lambda variant, config, backend: config)
    monkeypatch.setattr(sweep, "timed_call", lambda c, *_: contextlib.nullcontext(c))
    monkeypatch.setattr(sweep, "make_inputs", lambda *_: None)
    cell = Cell(1, 2, 2, 64, 16, "bfloat16", False)
    key = tuning.TuneKey("fwd", str(Variant()), 16, False)
    mine = [({"block_m": m, "block_n": 16}, tuning.make_job(
        "fwd", Variant(), tuning.build_config(16, Variant(), False, fwd={"block_m": m}), cell))
        for m in first]
    record = sweep.tune(key, cell, mine, "cpu", sweep.Settings(backends=()), {})
    assert record["fields"]["block_m"] == 32
    assert timed == [16, 32, 48, 64] + [16, 32, 48] * tuning.FINAL_ROUNDS
    finals = {c["fields"]["block_m"]: c.get("final_median_ms") for c in record["candidates"]}
    assert finals == {16: 1.10, 32: 1.00, 48: 1.05, 64: None}

    # a finalist that raises in the final rounds is dropped, as in the first pass
    def flaky(config, **kwargs):
        if config.block_m == 32 and timed.count(32) >= 1:
            timed.append(32)
            raise RuntimeError("out of resources")
        return bench(config, **kwargs)

    timed.clear()
    monkeypatch.setattr(sweep, "bench", flaky)
    record = sweep.tune(key, cell, mine, "cpu", sweep.Settings(backends=()), {})
    assert record["fields"]["block_m"] == 48
    dropped = next(c for c in record["candidates"] if c["fields"]["block_m"] == 32)
    assert "final rounds: RuntimeError" in dropped["error"] and "final_median_ms" not in dropped


def test_precompile_runs_each_distinct_job_once_in_workers(device):
    """The worker pool runs each distinct job and returns its error or None (without CUDA
    every job fails, and says why)."""
    from fa2check.ablate import tuning

    cell = Cell(1, 2, 2, 64, 16, "bfloat16", False)
    config = tuning.build_config(16, Variant(), on_gpu=device == "cuda")
    jobs = [tuning.make_job("fwd", Variant(), config, cell)] * 2 + [
        tuning.make_job("bwd", Variant(), config, cell)]
    results = tuning.precompile(jobs, workers=2)
    assert len(results) == 2
    for error in results.values():
        assert (error is None) if device == "cuda" else ("CUDA" in error or "Torch" in error)


def test_d64_tries_register_capped_tiles_in_every_variant_and_mask():
    """tuning.REGISTER_CAPPED_FWD: at d=64 every variant's forward space (both masks) has the
    capped tiles, and a capped candidate's config carries the cap; other head dims have none;
    the configs table names the cap."""
    from fa2check.ablate import report, tuning

    for causal in (False, True):
        for variant in Variant.all():
            space = tuning.candidates("fwd", 64, variant, on_gpu=True, causal=causal)
            capped = [c for c in space if c.get("max_registers")]
            assert len(capped) == len(tuning.REGISTER_CAPPED_FWD[64])
            config = tuning.build_config(64, variant, True, fwd=capped[0])
            assert config.max_registers == capped[0]["max_registers"] > 0
        assert not any("max_registers" in c for c in tuning.candidates(
            "fwd", 128, Variant(), on_gpu=True, causal=causal))
    records = [{"key": {"part": "fwd", "variant": "v", "head_dim": 64, "causal": True},
                "fields": {"block_m": 64, "block_n": 64, "num_warps": 4, "num_stages": 3,
                           "tma": False, "max_registers": 128}, "source": "test"}]
    row = report.configs_table({"configs": records}).rows[0]
    assert "registers <= 128" in row


def test_jobs_that_compile_different_kernels_have_different_keys():
    """Precompiling runs one job per key: a tile choice that changes the forward's code
    (nan_flags, key_slices) must change the key, or its kernels compile lazily while tuning
    times them (D04's nan_flags twins did); backward fields must not."""
    from dataclasses import replace

    from fa2check.ablate import tuning

    cell = Cell(1, 2, 2, 64, 64, "bfloat16", True)
    config = tuning.build_config(64, Variant(), on_gpu=True)
    key = tuning.job_key(tuning.make_job("fwd", Variant(), config, cell))
    for change in ({"nan_flags": False}, {"key_slices": 2}, {"tma": True}, {"max_registers": 128}):
        assert tuning.job_key(tuning.make_job("fwd", Variant(), replace(config, **change),
                                              cell)) != key
        bwd = [tuning.job_key(tuning.make_job("bwd", Variant(), c, cell))
               for c in (config, replace(config, **change))]
        assert bwd[0] != bwd[1]  # the backward's job runs that forward first
    assert tuning.job_key(tuning.make_job("fwd", Variant(), replace(config, bwd_block_m=16),
                                          cell)) == key
