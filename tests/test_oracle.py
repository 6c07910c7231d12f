"""The float64 oracle is certified by mpmath (50 digits), extreme logits included, and the pass
rule is shown to reject implementations with known bugs (test doubles)."""
import pytest
import torch

from doubles import double
from fa2check.core.checks import Reference
from fa2check.core.oracle import mp_reference_rows, reference, visible_mask
from fa2check.core.problems import Problem


@pytest.mark.parametrize("scale", (1.0, 30.0, 300.0), ids=lambda s: f"x{s:g}")
@pytest.mark.parametrize("causal,seqlen_q,seqlen_k", ((False, 5, 9), (True, 9, 5), (True, 4, 7)))
def test_float64_oracle_matches_mpmath(scale, causal, seqlen_q, seqlen_k):
    # scale 300 gives logits of order 1e5 (q.k ~ 3e5 * 0.25): exp overflows without max-shifting
    q, k, v, _ = Problem(1, 2, 1, seqlen_q, seqlen_k, 16, "float32", causal).inputs(scale=scale)
    v = v / scale
    o, lse = reference(q, k, v, causal=causal)
    rows = range(seqlen_q)
    for head in range(2):
        for i, (mp_o, mp_lse) in zip(rows, mp_reference_rows(q, k, v, rows, head=head, causal=causal)):
            if mp_lse == float("-inf"):
                assert lse[0, head, i] == float("-inf") and torch.all(o[0, head, i] == 0)
                continue
            assert abs(float(lse[0, head, i]) - float(mp_lse)) <= 1e-12 * max(1.0, abs(float(mp_lse)))
            for d in range(16):
                assert abs(float(o[0, head, i, d]) - float(mp_o[d])) <= 1e-12


def test_visible_mask_is_bottom_right_aligned():
    m = visible_mask(2, 4, causal=True)
    assert m.tolist() == [[True, True, True, False], [True, True, True, True]]
    m = visible_mask(4, 2, causal=True)
    assert m.tolist() == [[False, False], [False, False], [True, False], [True, True]]


# Test doubles (tests/doubles.py): a correct float32 composition and the same with one known
# bug each. Each must fail the pass rule on a problem where the bug matters.
@pytest.mark.parametrize("bug,fails", [("none", False), ("dropped_last_key", True),
                                       ("top_left_causal", True), ("lse_log2", True),
                                       ("finite_sentinel", True)])
def test_pass_rule_catches_test_doubles(bug, fails):
    problem = Problem(1, 4, 2, 37, 21, 16, "float16", causal=True, seed=3)
    checks = Reference(problem, "cpu").check(double(bug), None)
    assert any(not c.passed for c in checks) == fails, [str(c) for c in checks]


def test_pass_rule_rejects_tf32_for_float32_inputs():
    problem = Problem(1, 2, 2, 40, 40, 64, "float32", causal=False, seed=5)
    ref = Reference(problem, "cpu")
    assert all(c.passed for c in ref.check(double("none"), None))
    assert not all(c.passed for c in ref.check(double("tf32"), None))


@pytest.mark.parametrize("dtype", ("float16", "bfloat16", "float32"))
def test_mpmath_rows_take_the_products_exactly(dtype):
    """mp_reference_rows forms q.k's products in float64 (exact for these dtypes) and sums them
    in mpmath: the same lse, to the last of its 50 digits, as products formed in mpmath (the
    float64 inputs' path). With products rounded to float32 the lse differs."""
    import mpmath

    q, k, v, _ = Problem(1, 1, 1, 3, 40, 64, dtype, False, seed=7).inputs(scale=5.0)
    fast = mp_reference_rows(q, k, v, range(3))
    slow = mp_reference_rows(q.double(), k.double(), v.double(), range(3))
    with mpmath.workdps(50):
        assert [lse for _, lse in fast] == [lse for _, lse in slow]
