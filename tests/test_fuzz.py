"""python -m fa2check.fuzz: its strategies reach what they promise, its checks fail on test doubles,
and within the ci profile's budget it finds planted bugs that the fixed test shapes
(tests/lattice.py, tests/test_lattice.py) miss, shrinks them, prints a reproduction and saves
them to a regression corpus (a temporary directory here, never tests/regressions/).

The planted bugs (tests/doubles.py, planted_*) are float64 compositions, so these tests need no
interpreter; one smoke test runs our kernels through it for a few examples."""
import json
import os
import shlex

import pytest
import torch
from hypothesis import given, settings

from doubles import double, without_variant
from fa2check.fuzz import cli as fuzz, corpus
from fa2check.core.checks import Reference
from fa2check.fuzz.fuzzer import DEFAULT_CHECKS, PROFILES, check_example
from fa2check.fuzz.fuzzer import fuzz as run_fuzz
from fa2check.core.problems import Problem
from kernels import Variant, default_config, flash_attention
from lattice import lattice
from properties.base import scores
from properties.strategies import (DISTRIBUTIONS, LAYOUTS, Example, Space, examples, length_class,
                                   make_inputs, primes_up_to, tile_sizes)
from test_lattice import LENGTHS

BLOCK_N = default_config(16, on_gpu=False).block_n  # the interpreter's forward key tile
PLANTED = {
    "planted_full_last_tile": lambda p: p.seqlen_k % BLOCK_N == 0 and p.seqlen_k > BLOCK_N,
    "planted_diagonal_off_by_one": lambda p: p.causal and (p.seqlen_k - p.seqlen_q) % BLOCK_N == 1,
    "planted_group_5": lambda p: p.heads_q // p.heads_kv == 5,
}
PRIMES = set(primes_up_to(100))


def _fixed_shapes():
    """Every (variant, problem) of tests/lattice.py and the forward-only length pairs of
    tests/test_lattice.py, as those tests build them."""
    cases = [(variant, problem, True) for variant, problem in lattice()]
    for seqlen_q, seqlen_k in LENGTHS:
        for causal in (False, True):
            problem = Problem(1, 4, 2, seqlen_q, seqlen_k, 16, "float16", causal,
                              seed=seqlen_q * seqlen_k)
            cases += [(variant, problem, False) for variant in Variant.all()]
    return cases


# ----------------------------------------------------------------------------- strategies

def test_tile_sizes_are_the_configs():
    fa2, split_k = Variant(), Variant(split_q=False)
    for on_gpu in (False, True):
        for head_dim in (16, 64, 256):
            c = default_config(head_dim, on_gpu, fa2)
            assert tile_sizes(head_dim, on_gpu, [fa2]) == tuple(sorted(
                {c.block_m, c.block_n, c.bwd_block_m, c.bwd_block_n}))
            k = default_config(head_dim, on_gpu, split_k)
            assert k.block_n // k.key_slices in tile_sizes(head_dim, on_gpu, [split_k])


REACHES = {
    "group 5": lambda e: e.problem.heads_q // e.problem.heads_kv == 5,
    "MQA": lambda e: e.problem.heads_kv == 1 and e.problem.heads_q > 1,
    "non-power-of-two GQA": lambda e: e.problem.heads_kv > 1
    and (e.problem.heads_q // e.problem.heads_kv) in (3, 5, 6, 7),
    "seqlen_q 1": lambda e: e.problem.seqlen_q == 1,
    "seqlen_k 2 tiles + 1": lambda e: e.problem.seqlen_k == 2 * BLOCK_N + 1,
    "seqlen_k 2 tiles - 1": lambda e: e.problem.seqlen_k == 2 * BLOCK_N - 1,
    "seqlen_q 2 tiles": lambda e: e.problem.seqlen_q == 2 * default_config(
        e.problem.head_dim, False).block_m,
    "prime lengths, unequal": lambda e: {e.problem.seqlen_q, e.problem.seqlen_k} <= PRIMES
    and min(e.problem.seqlen_q, e.problem.seqlen_k) > 17
    and e.problem.seqlen_q != e.problem.seqlen_k,
    "equal lengths, causal": lambda e: e.problem.causal
    and e.problem.seqlen_q == e.problem.seqlen_k > 1,
    "causal diagonal one past a tile": lambda e: e.problem.causal
    and e.problem.seqlen_k - e.problem.seqlen_q == BLOCK_N + 1,
    "v's own head dim": lambda e: e.problem.head_dim_v != e.problem.head_dim,
    "v's head dim wider than q's, causal": lambda e: e.problem.head_dim_v > e.problem.head_dim
    and e.problem.causal,
    "head_dim 256 float32": lambda e: e.problem.head_dim == 256 and e.problem.dtype == "float32",
    "odd head_dim below 16": lambda e: e.problem.head_dim < 16,
    "odd head_dim between 64 and 128": lambda e: 64 < e.problem.head_dim < 128,
    "odd head_dim between 128 and 256, causal": lambda e: 128 < e.problem.head_dim < 256
    and e.problem.causal,
    "extreme below-5e4 padded": lambda e: e.distribution == "below-5e4"
    and e.layout == "padded-bshd-strided",
    "split-K, batch 2": lambda e: not e.variant.split_q and e.problem.batch == 2,
    **{f"distribution {name}": (lambda name: lambda e: e.distribution == name)(name)
       for name in DISTRIBUTIONS},
    **{f"layout {name}": (lambda name: lambda e: e.layout == name)(name) for name in LAYOUTS},
}


def test_the_strategy_reaches_every_class():
    hits = dict.fromkeys(REACHES, 0)

    @settings(database=None, derandomize=True, max_examples=1500)
    @given(examples(Space()))
    def collect(example):
        for name, condition in REACHES.items():
            hits[name] += condition(example)

    collect()
    assert [name for name, n in hits.items() if n == 0] == []


NARROW = Space(variants=(Variant(),), dtypes=("bfloat16",), head_dims=(64,), causal=(True,),
               distributions=("normal",), layouts=("contiguous",), max_seqlen=9)


@settings(database=None, derandomize=True, max_examples=200)
@given(examples(NARROW))
def test_a_narrowed_space_stays_narrow(example):
    assert NARROW.contains(example)
    assert max(example.problem.seqlen_q, example.problem.seqlen_k) <= 9


def test_length_classes():
    assert [length_class(n, (16, 32)) for n in (1, 15, 16, 17, 31, 64, 65, 37, 40)] == [
        "1", "16k-1", "16k", "16k+1", "32k-1", "32k", "32k+1", "prime", "other"]


def test_examples_round_trip():
    problem = Problem(2, 10, 2, 1, 65, 128, "bfloat16", True, seed=7)
    e = Example(Variant(False, True, False), problem, "logits-1e5", "padded")
    assert Example.parse(str(e)) == e and Example.from_dict(e.as_dict()) == e
    with pytest.raises(ValueError, match="distribution"):
        Example.parse(str(e).replace("logits-1e5", "cauchy"))


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32"])
def test_distributions_are_finite_and_what_they_claim(dtype):
    p = Problem(1, 4, 2, 33, 40, 16, dtype, causal=False, seed=3)
    logits = {}
    for name in DISTRIBUTIONS:
        q, k, v, do = make_inputs(p, name)
        assert all(bool(torch.isfinite(t).all()) and t.dtype == p.torch_dtype
                   for t in (q, k, v, do)), name
        logits[name] = scores(q, k, causal=False)
        for layout in LAYOUTS[1:]:  # a view of the same values, NaN around it
            views = make_inputs(p, name, layout)
            assert all(torch.equal(a, b) and not b.is_contiguous()
                       for a, b in zip((q, k, v, do), views))
    top = {name: float(s.abs().max()) for name, s in logits.items()}
    assert top["normal"] < 20 and 50 < top["logits-1e2"] < 200
    assert 5e3 < top["logits-1e4"] < 2e4 and top["logits-1e5"] > 5e4
    assert float(logits["below-5e4"][:, :, 1::2].max()) < -5e4
    assert float(torch.logsumexp(logits["lse-below-88.7"], -1).max()) < -88.7
    _, k, _, _ = make_inputs(p, "ties")
    assert torch.equal(k[:, :, 2], k[:, :, 0]) and torch.equal(k[:, :, 1], -k[:, :, 0])
    _, k, _, _ = make_inputs(p, "low-rank-keys")
    assert int(torch.linalg.matrix_rank(k[0, 0].double(), rtol=1e-2)) <= 2


# ----------------------------------------------------------------------------- checks

@pytest.mark.parametrize("check,bug,example,failing", [
    ("oracle", "dropped_last_key", "b1-h2/1-q9-k17-d16-float16-full-s1:normal:contiguous",
     "oracle"),
    ("oracle", "dtype_scores", "b1-h2/1-q9-k17-d16-float16-full-s1:logits-1e5:contiguous",
     "oracle"),
    ("oracle", "ignores_strides", "b1-h2/1-q9-k17-d16-bfloat16-full-s1:normal:padded", "oracle"),
    # float32 with logits near 100 at head_dim 256, where the pass rule alone was a toss-up
    ("oracle", "tf32", "b1-h1/1-q64-k16-d256-float32-full-s9:logits-1e2:contiguous", "oracle"),
    ("lse_bounds", "lse_log2", "b1-h2/1-q9-k17-d16-float32-full-s1:uniform:contiguous", "bounds"),
    ("rows_without_keys", "finite_sentinel", "b1-h2/1-q17-k9-d16-float32-causal-s1:normal:"
     "contiguous", "rows_without_keys"),
    ("invisible_random", "top_left_causal", "b1-h2/1-q17-k9-d16-float32-causal-s1:normal:"
     "contiguous", "invisible_random"),
    ("visible_non_finite", "nan_not_restored", "b1-h2/1-q9-k17-d16-bfloat16-causal-s1:normal:"
     "padded", "visible_non_finite"),
    ("visible_non_finite", "nan_whole_row", "b1-h2/1-q9-k17-d16-float16-causal-s1:normal:"
     "contiguous", "visible_non_finite"),
    ("gqa_twin", "no_group_reduction", "b1-h4/2-q9-k17-d16-float32-full-s1:normal:contiguous",
     "group_sum"),
    ("determinism", "nondeterministic", "b1-h2/1-q9-k17-d16-float32-full-s1:normal:contiguous",
     "bitwise_run2"),
    ("variant_flips", "splitk_drops_key", "b1-h2/1-q9-k17-d16-float32-full-s1:normal:contiguous",
     "split_q_agree"),
])
def test_each_check_fails_on_a_double(check, bug, example, failing):
    example = Example.parse(f"{Variant()}:{example}")
    checks = tuple(dict.fromkeys(DEFAULT_CHECKS + (check,)))
    assert failing not in check_example(double(bug), example, "cpu", DEFAULT_CHECKS).failed or \
        check in DEFAULT_CHECKS
    assert failing in check_example(double(bug), example, "cpu", checks).failed


def test_hidden_non_finite_values_are_checked_by_default(device):
    assert fuzz.chosen_checks([], []) == DEFAULT_CHECKS
    assert "invisible_nan" not in fuzz.chosen_checks(["all"], ["invisible_nan"])
    # the first causal example with a hidden key tells a product over all keys from ours
    example = Example.parse("+defer+seqpar+splitq:b1-h1/1-q3-k5-d16-float32-causal-s0:normal:"
                            "contiguous")
    assert check_example(flash_attention, example, device).passed
    assert check_example(double("hidden_v_leaks"), example, "cpu").failed == [
        "invisible_nan", "invisible_inf_values"]


@pytest.mark.parametrize("bug, layout", [("mutates_k", "contiguous"),
                                         ("writes_before_k", "padded")])
def test_a_kernel_that_changes_its_inputs_fails_inputs_untouched(bug, layout):
    example = Example.parse(f"+defer+seqpar+splitq:b1-h2/1-q9-k9-d16-bfloat16-full-s1:normal:"
                            f"{layout}")
    assert check_example(double("none"), example, "cpu").passed
    assert check_example(double(bug), example, "cpu").failed == ["inputs_untouched"]


# ----------------------------------------------------------------------------- planted bugs

def test_the_fixed_shapes_miss_the_planted_bugs():
    """On every problem of the lattice tests each planted double passes the pass rule, forward
    and backward as those tests run it (so they cannot tell it from a correct kernel): its bug's
    condition holds on none of them."""
    for variant, problem, backward in _fixed_shapes():
        assert not any(condition(problem) for condition in PLANTED.values()), problem
    problems = {(problem, backward): variant for variant, problem, backward in _fixed_shapes()}
    for (problem, backward), variant in problems.items():
        ref = Reference(problem, "cpu", backward=backward)
        for bug in PLANTED:
            failed = [str(c) for c in ref.check(double(bug), variant) if not c.passed]
            assert not failed, (bug, str(problem), failed)


@pytest.mark.parametrize("bug", PLANTED)
def test_the_ci_profile_finds_and_shrinks_each_planted_bug(bug):
    outcome = run_fuzz(double(bug), f"doubles:{bug}", space=Space(), device="cpu", profile="ci")
    assert outcome.failure is not None, f"{bug}: not found in {outcome.tally.examples} examples"
    assert outcome.tally.examples <= PROFILES["ci"].max_examples
    found = outcome.failure.example
    assert PLANTED[bug](found.problem) and found.problem.batch == 1, str(found)
    # shrunk: the simplest of everything that does not hide the bug
    assert (found.variant, found.distribution, found.layout, found.problem.seed) == (
        Variant(), "normal", "contiguous", 0), str(found)
    assert found.problem.head_dim == 16 and found.problem.dtype == "float16", str(found)
    if bug == "planted_full_last_tile":
        assert (found.problem.seqlen_q, found.problem.seqlen_k) == (1, 2 * BLOCK_N)
    if bug == "planted_diagonal_off_by_one":  # the last row sees key 0, which it must not
        assert found.problem.seqlen_k == 1 and found.problem.seqlen_q <= 2 * BLOCK_N
    if bug == "planted_group_5":
        assert (found.problem.heads_q, found.problem.heads_kv) == (5, 1)
        assert outcome.failure.failed == ["oracle"]  # a gradient-only bug: dk, dv
        assert {o for o, n in outcome.failure.checks[0].numbers.items()
                if not n["passed"]} == {"dk", "dv"}
    else:
        assert (found.problem.heads_q, found.problem.heads_kv) == (1, 1)


def test_the_ci_profile_finds_a_bug_only_odd_head_dims_have():
    """planted_padded_column mis-masks the padded tile's columns, which a tile-width head_dim
    does not have: the fixed shapes (head_dim 32) and a space of tile widths alone never see it.
    Shrunk towards the first head_dim that is not a tile width, with everything else minimal."""
    bug = "planted_padded_column"
    outcome = run_fuzz(double(bug), f"doubles:{bug}", space=Space(), device="cpu", profile="ci")
    assert outcome.failure is not None, f"{bug}: not found in {outcome.tally.examples} examples"
    assert outcome.tally.examples <= PROFILES["ci"].max_examples
    found = outcome.failure.example
    assert found.problem.head_dim == 1 and "oracle" in outcome.failure.failed, str(found)
    assert (found.variant, found.distribution, found.layout, found.problem.batch,
            found.problem.heads_q, found.problem.dtype) == (
        Variant(), "normal", "contiguous", 1, 1, "float16"), str(found)


def test_replay_runs_what_failed_and_what_is_expected_to_hold():
    ran = list(DEFAULT_CHECKS) + ["invisible_nan", "gqa_twin"]
    assert corpus.replay_checks({"failed": ["oracle"], "checks": ran}) == tuple(
        DEFAULT_CHECKS) + ("gqa_twin",)
    assert "invisible_nan" in corpus.replay_checks({"failed": ["invisible_nan"], "checks": ran})
    assert corpus.replay_checks({"failed": ["runs"], "checks": ["oracle"]}) == ("oracle",)


def test_corpus_examples_are_tried_first():
    past = Example.parse("+defer+seqpar+splitq:b1-h5/1-q1-k1-d16-float16-full-s0:normal:"
                         "contiguous")
    seen = []
    outcome = run_fuzz(double("planted_group_5"), "doubles:planted_group_5", space=Space(),
                       device="cpu", profile="ci", explicit=[past], on_tick=seen.append)
    assert seen[0].example == past and outcome.failure.example == past
    assert outcome.tally.examples == 1


def test_time_budget_ends_a_run_without_a_failure(tmp_path):
    never_group_5 = Space(max_heads_q=4)
    outcome = run_fuzz(double("planted_group_5"), "doubles:planted_group_5", space=never_group_5,
                       device="cpu", profile="dev", seconds=1.0, database=str(tmp_path))
    assert outcome.failure is None and outcome.stopped == "time" and outcome.tally.examples > 0


# ----------------------------------------------------------------------------- the command

def test_cli_reports_reproduces_and_saves_where_it_is_told(tmp_path, capsys, device):
    before = sorted(os.listdir(corpus.CORPUS_DIR)) if os.path.isdir(corpus.CORPUS_DIR) else []
    report = tmp_path / "fuzz.json"
    status = fuzz.main(["--impl", "doubles:planted_group_5", "--profile", "ci", "--out",
                        str(tmp_path / "found"), "--json", str(report)])
    out = capsys.readouterr().out
    assert status == 1
    data = json.loads(report.read_text())
    assert data["counterexample"]["failed"] == ["oracle"] and data["examples"] > 0
    assert data["examples_per_second"] > 0 and set(data["coverage"]) >= {
        "dtype", "mask", "heads", "seqlen_k", "distribution", "layout"}
    command = data["counterexample"]["reproduce"]
    assert "COUNTEREXAMPLE" in out and command in out and "report = check_example(" in out
    assert command.startswith("python -m fa2check.fuzz --impl=doubles:planted_group_5 --replay=")

    # the one-line command and the Python snippet reproduce it
    assert fuzz.main(shlex.split(command)[3:]) == 1
    example = Example.from_dict(data["counterexample"]["example"])
    with pytest.raises(AssertionError, match="oracle: dk expected .*, got "):
        exec(corpus.snippet("doubles:planted_group_5", example), {})

    # saved once, in the directory given, with what failed; replayed against our kernels it passes
    entries = corpus.load(str(tmp_path / "found"))
    assert len(entries) == 1
    path, entry = entries[0]
    assert path == data["counterexample"]["saved"]
    assert entry["impl"] == "doubles:planted_group_5" and entry["failed"] == ["oracle"]
    assert entry["example"]["id"] == str(example) and entry["found"]["date"]
    assert corpus.replay(entry, device).passed
    assert fuzz.main(["--replay", path]) == 1  # the entry's own implementation still fails it
    assert fuzz.main(["--replay", path, "--impl", "ours"]) == 0
    after = sorted(os.listdir(corpus.CORPUS_DIR)) if os.path.isdir(corpus.CORPUS_DIR) else []
    assert after == before  # the repository's corpus is not touched by tests


def test_a_replay_the_implementation_refuses_is_neither_a_pass_nor_a_failure(capsys):
    example = "+defer+seqpar+splitq:b1-h2/1-q5-k7-d8-float32-{}-s0:normal:contiguous"
    assert fuzz.main(["--replay", example.format("causal"), "--impl", "doubles:no_causal"]) == 3
    out = capsys.readouterr().out
    assert "NOT RUN" in out and "this kernel has no causal mask" in out
    assert "PASS" not in out and "Traceback" not in out
    assert fuzz.main(["--replay", example.format("full"), "--impl", "doubles:no_causal"]) == 0


def test_cli_fuzzes_our_kernels(tmp_path, capsys):
    """A smoke test through the interpreter: a few examples, all passing, with throughput and
    coverage reported."""
    report = tmp_path / "fuzz.json"
    status = fuzz.main(["--profile", "ci", "--max-examples", "4", "--no-corpus-first",
                        "--out", str(tmp_path / "found"), "--json", str(report)])
    out = capsys.readouterr().out
    assert status == 0, out
    data = json.loads(report.read_text())
    assert data["examples"] == 4 and data["stopped"] == "done" and data["counterexample"] is None
    assert "examples/s" in out and "coverage" in out
    assert not (tmp_path / "found").exists()
    assert out.strip().splitlines()[-2].startswith("no counterexample: 4 examples passed")


def test_cli_rejects_unknown_names():
    with pytest.raises(SystemExit, match="unknown check"):
        fuzz.main(["--check", "no_such_check", "--max-examples", "1"])
    with pytest.raises(SystemExit, match="unknown distribution"):
        fuzz.main(["--distribution", "cauchy", "--max-examples", "1"])
    with pytest.raises(SystemExit, match="one implementation"):
        fuzz.main(["--impl", "sdpa", "--max-examples", "1"])


# ----------------------------------------------------------------------------- a user's run

attention_without_variant = without_variant("none")  # a user's function, as --impl names it
planted_group_5_without_variant = without_variant("planted_group_5")


def test_a_users_counterexample_stays_out_of_the_project_until_added(tmp_path, capsys,
                                                                     monkeypatch):
    """A user's fuzzing writes into the directory named by --out, by default the user's data
    directory, never into tests/regressions/; adding to the corpus is its own command."""
    project = os.path.dirname(os.path.dirname(os.path.abspath(corpus.__file__)))
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    assert corpus.out_dir() == str(tmp_path / "data" / "fa2check" / "counterexamples")
    monkeypatch.delenv("XDG_DATA_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert not corpus.out_dir().startswith(project + os.sep)
    assert corpus.out_dir().startswith(str(tmp_path / "home"))

    before = sorted(os.listdir(corpus.CORPUS_DIR))
    impl = "test_fuzz:planted_group_5_without_variant"
    assert fuzz.main(["--impl", impl, "--profile", "ci", "--no-corpus-first"]) == 1
    out = capsys.readouterr().out
    (saved,) = (tmp_path / "home").rglob("*.json")  # the default: the user's data directory
    assert sorted(os.listdir(corpus.CORPUS_DIR)) == before
    assert f"saved to {saved}" in out and f"--add-to-corpus {saved}" in out

    assert fuzz.main(["--impl", impl, "--profile", "ci", "--no-corpus-first", "--out",
                      str(tmp_path / "mine")]) == 1
    (named,) = (tmp_path / "mine").glob("*.json")
    assert named.name == saved.name and sorted(os.listdir(corpus.CORPUS_DIR)) == before

    # explicit: the file is added to the corpus given (here a copy, not the project's)
    assert fuzz.main(["--add-to-corpus", str(named), "--corpus", str(tmp_path / "corpus")]) == 0
    assert "added" in capsys.readouterr().out
    (added,) = corpus.load(str(tmp_path / "corpus"))
    assert added[1] == json.loads(named.read_text())
    (tmp_path / "junk.json").write_text("{}")
    with pytest.raises(SystemExit, match="not a counterexample"):
        fuzz.main(["--add-to-corpus", str(tmp_path / "junk.json"), "--corpus", str(tmp_path)])


def test_a_function_without_variant_is_fuzzed_and_a_clean_run_says_so(tmp_path, capsys):
    status = fuzz.main(["--impl", "test_fuzz:attention_without_variant", "--profile", "ci",
                        "--max-examples", "6", "--no-corpus-first", "--out", str(tmp_path)])
    out = capsys.readouterr().out
    assert status == 0, out
    assert "raised" not in out and "has no `variant` parameter" in out
    assert "variants=['+defer+seqpar+splitq']" in out  # one variant: the others are the same call
    assert out.strip().splitlines()[-1] == (
        "no counterexample: 6 examples passed every check (" + ", ".join(DEFAULT_CHECKS) + ")")
    assert not os.listdir(tmp_path)


def test_coverage_names_length_classes_in_words():
    from fa2check.fuzz.fuzzer import Tally, Tick, coverage_label

    assert coverage_label("seqlen_k", "32k") == "multiple of 32"
    assert coverage_label("seqlen_q", "64k+1") == "multiple of 64 plus 1"
    assert coverage_label("seqlen_q", "16k-1") == "multiple of 16 minus 1"
    assert coverage_label("seqlen_q", "1") == "length 1"
    assert coverage_label("seqlen_k", "prime") == "prime"
    assert coverage_label("dtype", "float16") == "float16"
    tally = Tally()
    example = Example.parse(f"{Variant()}:b1-h1/1-q64-k65-d16-float16-full-s0:normal:contiguous")
    tally.add(Tick(example, True, 0.1, 0.01, "generate"))
    classes = {key: set(counter) for key, counter in tally.coverage.items()}
    (q_class,), (k_class,) = classes["seqlen_q"], classes["seqlen_k"]
    assert q_class.startswith("multiple of ") and k_class.endswith(" plus 1"), classes
    assert tally.as_dict()["coverage"]["seqlen_q"] == {q_class: 1}  # the JSON says the same
