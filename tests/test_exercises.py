"""numlab.exercises.check: the course's answer checker."""

import math

import pytest

from numlab.exercises import check


@pytest.mark.parametrize("answer", [None, ...])
def test_unanswered_is_none_and_says_so(answer, capsys):
    assert check(answer, 3, name="my_steps") is None
    assert "not answered yet: set `my_steps`" in capsys.readouterr().out


@pytest.mark.parametrize("answer,expected,kw,want", [
    (2, 2, {}, True), (3, 2, {}, False), (2.0, 2, {}, True),
    (0.101, 0.1, {"rtol": 0.02}, True), (0.11, 0.1, {"rtol": 0.02}, False),
    (1e-9, 0.0, {"atol": 1e-8}, True), (math.inf, math.inf, {"rtol": 1.0}, True),
    (1e308, math.inf, {"rtol": 1.0}, False), (math.nan, math.nan, {}, True), (0.0, math.nan, {}, False),
    (" Pairwise ", "pairwise", {}, True), ("tree", "pairwise", {}, False), (3, "3", {}, False),
    (True, True, {}, True), (1, True, {}, False),
    ((1, 2.0), [1, 2], {}, True), ((1, 2), (1, 2, 3), {}, False), ({"a": 1}, {"a": 1}, {}, True),
])
def test_matching_rules(answer, expected, kw, want, capsys):
    assert check(answer, expected, **kw) is want
    out = capsys.readouterr().out
    assert out.startswith("correct" if want else "not yet")


def test_a_wrong_answer_gets_the_hint_but_not_the_expected_value(capsys):
    assert check(5, 7, name="n", hint="count the rounding steps") is False
    out = capsys.readouterr().out
    assert "count the rounding steps" in out and "7" not in out


@pytest.mark.parametrize("kw", [{"rtol": -1.0}, {"atol": math.nan}, {"rtol": math.inf}])
def test_bad_tolerance_is_refused_with_its_value(kw):
    with pytest.raises(ValueError, match="rtol=.*atol="):
        check(1, 1, **kw)
