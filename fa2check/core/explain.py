"""A failed check in words: what was expected and what came out, for every kind of check the
properties and the fuzzer produce (verify's failures and the fuzzer's counterexamples)."""
from __future__ import annotations

import math


def format_ratio(value: float) -> str:
    if math.isinf(value):
        return "inf"
    return f"{value:.2f}" if value < 100 else f"{value:.0f}" if value < 1e5 else f"{value:.1e}"



def _g(x) -> str:
    if x is None:
        return "-"
    if isinstance(x, float) and math.isinf(x):
        return "inf" if x > 0 else "-inf"
    return f"{x:.3g}" if isinstance(x, float) else str(x)


def _times(ratio) -> str:
    return "" if ratio is None else f" ({format_ratio(ratio)}x the allowed)"


def explain_failures(checks: list) -> str:
    """The failed checks of a case, each in words; 'ok' when none failed."""
    failed = [c for c in checks if not _field(c, "passed")]
    return "; ".join(explain(c) for c in failed) or "ok"


def _field(check, name):
    return check[name] if isinstance(check, dict) else getattr(check, name)


def explain(check) -> str:
    """One failed check (a properties.base.Check or its dict) in words: '<check>: expected ...;
    got ...' (per output where several failed). Every kind of check that the properties and
    the fuzzer produce has its words."""
    name, numbers = _field(check, "name"), _field(check, "numbers") or {}
    ratio = _field(check, "ratio")
    for kind, words in _EXPLAINERS:
        if kind(name, numbers):
            said = words(name, numbers, ratio)
            return f"{name}: " + (said if isinstance(said, str) else
                                  f"expected {said[0]}; got {said[1]}")
    got = f"{format_ratio(ratio)}x the allowed error" if ratio is not None else "a failure"
    return f"{name}: expected it to hold; got {got}"


def _is_output(n) -> bool:
    return isinstance(n, dict) and ("nonfinite_match" in n or "pass_rule" in n or "max_error" in n)


def _output_words(output: str, n: dict):
    """(expected, got) for one output judged against the oracle: by the pass rule, by
    extreme_logits' element-wise bound, or by either (the fuzzer's oracle check)."""
    if "pass_rule" in n:  # the fuzzer: o and lse pass by the pass rule or by the bound
        rule, bound = n["pass_rule"], n["bound"]
        if not rule["nonfinite_match"]:
            return ("non-finite values exactly where the float64 oracle has them",
                    "NaN or inf where the oracle is finite, or the reverse")
        return (f"max|{output} - oracle| <= {_g(rule['allowed'])} (pass rule) or within the "
                f"element-wise bound (up to {_g(bound.get('max_allowed'))})",
                f"{_g(rule['error'])} ({format_ratio(rule['ratio'])}x the pass rule's allowed, "
                f"{_g(bound.get('max_error'))} against the bound)")
    if "nonfinite_match" in n:  # the pass rule
        if not n["nonfinite_match"]:
            note = " (-inf on a row that sees no key; never NaN)" if output == "lse" else ""
            return (f"non-finite values exactly where the float64 oracle has them{note}",
                    "NaN or inf where the oracle is finite, or finite where it is not")
        c = 2 if output in ("o", "lse") else 3
        return (f"max|{output} - oracle| <= {_g(n['allowed'])} ({c}x the same-dtype PyTorch "
                f"error {_g(n['baseline_error'])}, plus rounding)",
                f"{_g(n['error'])}{_times(n.get('ratio'))}")
    # extreme_logits' element-wise bound
    if n.get("ratio") is not None and math.isinf(n["ratio"]):
        return ("finite values where the oracle is finite", "NaN or inf there")
    return (f"|{output} - oracle| within the element-wise bound (at most "
            f"{_g(n['max_allowed'])})", f"an error of {_g(n['max_error'])}{_times(n.get('ratio'))}")


def _against_oracle(name, numbers, ratio):
    """'o expected ..., got ...; dq expected ..., got ...' for each output that failed."""
    parts = []
    finite = numbers.get("finite")
    if isinstance(finite, dict) and finite.get("passed") is False:
        parts.append("expected {}, got {}".format(*_finite_words(finite)))
    for output, n in numbers.items():
        if _is_output(n) and n.get("passed") is False:
            parts.append("{} expected {}, got {}".format(output, *_output_words(output, n)))
    return "; ".join(parts) or f"expected every output within its allowed error; got {format_ratio(ratio)}x"


def _finite_words(numbers):
    got = []
    for output in ("o", "lse"):
        n = numbers.get(output)
        if not isinstance(n, dict):
            continue
        if n.get("nonfinite_where_oracle_finite"):
            got.append(f"{n['nonfinite_where_oracle_finite']} {output} values NaN or inf where "
                       "the oracle is finite")
        if n.get("finite_where_oracle_not"):
            got.append(f"{n['finite_where_oracle_not']} {output} values finite where the "
                       "oracle is not")
        if n.get("nonfinite_values_equal") is False:
            got.append(f"{output} non-finite values other than the oracle's")
    return "o and lse finite exactly where the float64 oracle is", "; ".join(got) or "a mismatch"


def _bounds(name, n, ratio):
    expected = (f"max S <= lse <= max S + log(keys seen) within {_g(n['allowed'])} on every row "
                "that sees a key")
    if n.get("rows_without_keys"):
        expected += f", and lse = -inf on the {n['rows_without_keys']} rows that see no key"
    got = []
    if n["max_violation"] > n["allowed"]:
        got.append(f"lse outside those bounds by up to {_g(n['max_violation'])}{_times(ratio)}")
    if n.get("those_rows_have_-inf") is False:
        got.append("lse is not -inf on rows that see no key")
    return expected, " and ".join(got) or "a violation"


def _softmax_rows(name, n, ratio):
    return (f"P = exp(S - lse) in [0, 1] with rows summing to 1 within {_g(n['allowed'])}",
            f"largest P {_g(n['max_p'])}, row sums off by up to {_g(n['max_row_sum_error'])}")


def _mpmath(name, n, ratio):
    worst = max((r["error"] for r in n["rows"]), default=0.0)
    return (f"lse within {_g(n['allowed'])} of mpmath's 50-digit value on {len(n['rows'])} "
            "sampled rows", f"an error of up to {_g(worst)}{_times(ratio)}")


def _natural_log(name, n, ratio):
    return ("lse in natural-log units", "values closer to a log2 logsumexp (median error "
            f"{_g(n['median_error_if_log2'])} as log2, {_g(n['median_error_natural'])} as ln)")


def _rows_without_keys(name, n, ratio):
    wanted = {"o_zero": ("o = 0", "o is not 0"), "lse_minus_inf": ("lse = -inf", "lse is not -inf"),
              "dq_zero": ("dq = 0", "dq is not 0")}
    expected = [e for key, (e, _) in wanted.items() if key in n]
    got = [g for key, (_, g) in wanted.items() if n.get(key) is False]
    return (f"on the {n['rows']} rows that see no key: " + ", ".join(expected),
            " and ".join(got))


HIDDEN = {"invisible_random": "other random values", "invisible_1e10": "1e10",
          "invisible_nan_keys": "NaN (K only)", "invisible_nan": "NaN",
          "invisible_inf_values": "+inf (V's even columns only)"}


def _differences(numbers) -> str:
    """'o: 1024 elements differ, ...' for each output of an exact or a bounded comparison."""
    got = []
    for output, n in numbers.items():
        if not isinstance(n, dict) or "mismatches" not in n:
            continue
        if "allowed" in n:  # within(): max|a - b| <= allowed
            if n.get("ratio") is not None and n["ratio"] <= 1:
                continue
            if n.get("ratio") is not None and math.isinf(n["ratio"]):
                got.append(f"{output}: NaN or inf in one and not in the other, or different "
                           f"ones ({n['mismatches']} elements differ)")
            else:
                got.append(f"{output} differs by up to {_g(n['max_abs_diff'])} (allowed "
                           f"{_g(n['allowed'])})")
            continue
        if n.get("equal", True):
            continue
        if n["max_abs_diff"] == 0:
            got.append(f"{output}: {n['mismatches']} elements differ, every one NaN or inf on "
                       "one side (no finite difference)")
        else:
            nonfinite = n.get("nonfinite_mismatches")
            got.append(f"{output}: {n['mismatches']} elements differ"
                       + (f" ({nonfinite} NaN or inf on one side)" if nonfinite else "")
                       + f", by up to {_g(n['max_abs_diff'])} where both are finite")
        if n.get("where_last_two_dims"):
            rows, cols = n["where_last_two_dims"]
            got[-1] += f", at indices {rows} x {cols} of its last two dimensions"
    return "; ".join(got) or "a difference"


def _compared(name, n, ratio):
    outputs = [o for o, v in n.items() if isinstance(v, dict) and "mismatches" in v]
    what = ", ".join(outputs[:-1]) + " and " + outputs[-1] if len(outputs) > 1 else outputs[0]
    if name in HIDDEN:
        expected = (f"{what} of the {n.get('rows_compared')} rows that cannot see key "
                    f"{n.get('first_hidden_key')} bitwise unchanged when K/V from that key on are "
                    f"set to {HIDDEN[name]}")
    elif name == "seq_parallel_bitwise":
        expected = f"{what} bitwise equal to those of {n.get('other_variant')}"
    elif name.startswith("bitwise_run"):
        expected = f"{what} of call {name[len('bitwise_run'):]} bitwise equal to the first call's"
    elif name.endswith("_agree"):
        expected = f"{what} within the pass rule's allowed error of {n.get('other_variant')}'s"
    elif name == "mha_equivalence":
        expected = f"{what} equal, within the pass rule's allowed error, to the MHA call on repeated K/V"
    elif name == "same_as_contiguous":
        expected = f"{what} on strided views within one ulp of the results on contiguous copies"
    else:
        expected = f"{what} equal to the other call's"
    return expected, _differences(n)


def _dq_spread(name, n, ratio):
    return (f"dq of {n['repeats']} calls within {_g(n['limit'])} of each other",
            f"a spread of {_g(n['spread'])}{_times(ratio)}")


def _group_sum(name, n, ratio):
    got = [f"{o} off by {_g(v['max_abs_diff'])} (allowed {_g(v['allowed'])})"
           for o, v in n.items() if isinstance(v, dict) and v.get("ratio", 0) > 1]
    return ("dK and dV equal to the sums over each head group of the MHA call's gradients",
            "; ".join(got) or "a difference")


def _every_head_written(name, n, ratio):
    got = [f"{key.replace('_heads_not_finite', '').replace('_', ' ')} heads {heads} not finite"
           for key, heads in n.items() if heads]
    return "every dK and dV head written (finite)", "; ".join(got)


def _visible_non_finite(name, n, ratio):
    counts = ((n["finite_elements"], "finite elements in the even columns"),
              (n.get("non_finite_elsewhere", 0), "non-finite elements in the odd columns"))
    got = [f"{count} {what}" for count, what in counts if count]
    return (f"in the {n['rows_that_see_it']} rows that see key {n['key']}, where V's even "
            "columns are +inf from that key on, a non-finite o in every even column and a "
            "finite o in every odd one", "; ".join(got))


def _inputs_untouched(name, n, ratio):
    got = [f"{what}: {count} elements changed" for what, count in n["changed_elements"].items()]
    return ("q, k, v and dO, and the buffers they lie in, bitwise unchanged by the call",
            "; ".join(got))


_EXPLAINERS = (
    (lambda name, n: name == "bounds", _bounds),
    (lambda name, n: name == "inputs_untouched", _inputs_untouched),
    (lambda name, n: name == "visible_non_finite", _visible_non_finite),
    (lambda name, n: name == "softmax_rows", _softmax_rows),
    (lambda name, n: name == "lse_mpmath", _mpmath),
    (lambda name, n: name == "natural_log", _natural_log),
    (lambda name, n: name == "rows_without_keys", _rows_without_keys),
    (lambda name, n: name == "dq_spread", _dq_spread),
    (lambda name, n: name == "group_sum", _group_sum),
    (lambda name, n: name == "every_head_written", _every_head_written),
    (lambda name, n: name == "finite", lambda name, n, r: _finite_words(n)),
    (lambda name, n: any(isinstance(v, dict) and "mismatches" in v for v in n.values()),
     _compared),
    (lambda name, n: any(_is_output(v) for v in n.values()) or isinstance(n.get("finite"), dict),
     _against_oracle),
    # extreme_logits' per-output checks (o, lse, dq, dk, dv): the numbers of one output
    (lambda name, n: "max_error" in n, lambda name, n, r: _output_words(name, {**n, "ratio": r})),
)
