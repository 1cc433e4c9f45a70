"""The shared number formatters: what the terminal, the HTML report and dataset cards print."""

from __future__ import annotations

from bias_discovery.formatting import (
    ci_pp,
    count,
    delta_clause,
    excluded_above,
    excluded_clause,
    number,
    p_clause,
    p_value,
    percent,
    percent_range,
    pp,
)


def test_percent_in_each_medium():
    assert percent(0.253) == "25.3%"  # terminal and report
    assert percent(1) == "100.0%" and percent(0) == "0.0%"
    assert percent(0.084, signed=True, unit=" %", missing="n/a") == "+8.4 %"  # dataset cards
    assert percent(0.5, unit="") == "50.0"  # a column whose header says "(%)"
    assert percent(None) == "-" and percent(None, missing="–") == "–" and percent(None, missing="n/a") == "n/a"


def test_percentage_points_and_their_ci():
    assert pp(0.15) == "+15.0 pp" and pp(-0.05) == "-5.0 pp" and pp(0.0) == "+0.0 pp"
    assert pp(0.2, unit="") == "+20.0" and pp(None, unit="") == "-"
    assert pp(0.123, unit="", digits=0) == "+12"  # plot axis ticks
    assert ci_pp(0.05, 0.25) == "[+5.0, +25.0]" and ci_pp(-0.1, 0.0) == "[-10.0, +0.0]"
    assert ci_pp(None, 0.2) == "" and ci_pp(0.1, None, missing="-") == "-"


def test_rate_interval():
    assert percent_range(0.207, 1.0) == "20.7%-100.0%"
    assert percent_range(None, None) == "-" and percent_range(0.1, None) == "-"


def test_p_value():
    assert p_value(0.004) == "0.004" and p_value(0.0456) == "0.046" and p_value(1) == "1.000"
    assert p_value(0.001) == "0.001" and p_value(0.000999) == "<0.001" and p_value(0.0) == "<0.001"
    assert p_value(None) == "-" and p_value(None, missing="–") == "–"


def test_plain_numbers_and_counts():
    assert number(12.345) == "12.3" and number(0.25, digits=3) == "0.250"
    assert number(3, digits=0, signed=True) == "+3" and number(-0.05, digits=3, signed=True) == "-0.050"
    assert number(None) == "-" and number(None, missing="undefined (one label everywhere)").startswith("undefined")
    assert count(95299) == "95,299" and count(7) == "7" and count(None, missing="–") == "–"


def test_p_value_in_a_sentence():
    assert p_clause(0.0042) == "p = 0.004" and p_clause(0.0001) == "p < 0.001" and p_clause(None) == "p = -"


def test_a_difference_in_a_sentence():
    assert delta_clause(0.2, 0.1, 0.3, 30, 0.0042) == "+20.0 pp (CI [+10.0, +30.0], n = 30), p = 0.004"
    assert delta_clause(-0.05, None, None, 12, None) == "-5.0 pp (CI -, n = 12), p = -"


def test_json_problem_never_says_at_twice():
    import json

    from bias_discovery.errors import json_problem

    for text in ('{"a": "x', '{"a": "\x01"}', "{", '{"a": 1} x'):
        try:
            json.loads(text)
        except json.JSONDecodeError as exc:
            assert " at at " not in json_problem(exc) and " at at " not in json_problem(exc, line=False)
            assert json_problem(exc).endswith(f"at line {exc.lineno}, column {exc.colno}")


def test_plural_is_singular_for_exactly_one():
    from bias_discovery.formatting import plural

    assert plural(1, "pair") == "1 pair" and plural(0, "pair") == "0 pairs" and plural(2, "pair") == "2 pairs"
    assert plural(1, "bias") == "1 bias" and plural(3, "seed bias") == "3 seed biases"
    assert plural(12345, "call") == "12,345 calls" and plural(None, "pair") == "- pairs"
    assert plural(2, "datum", "data") == "2 data"


def test_a_rejected_candidates_upper_bound_in_a_cell_and_in_a_sentence():
    assert excluded_above(0.123) == "< +12.3 pp" and excluded_above(-0.02, unit="") == "< -2.0"
    assert excluded_above(1.0) == "none" and excluded_above(None) == "-"
    assert excluded_clause(0.123) == "an effect above +12.3 pp is excluded at 95 %"
    assert excluded_clause(0.05, 0.9, label="ΔP(rejected)") == "a ΔP(rejected) above +5.0 pp is excluded at 90 %"
    assert (
        excluded_clause(1.0) == "no effect up to +100 pp is excluded at 95 %"
        and excluded_clause(None, missing="–") == "–"
    )
