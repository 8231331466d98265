"""numlab.plots.mark_infinite and ulp_hist: what they draw, read back from the axes."""

from __future__ import annotations

import numpy as np
import pytest

from numlab import plots


def test_mark_infinite_draws_one_marker_and_label_per_infinite_value():
    ax = plots.figure().add_subplot()
    xs = np.array([1.0, 2.0, 3.0, 4.0])
    vals = np.array([1e-3, np.inf, 2e-3, np.inf])
    ax.plot(xs, np.where(np.isinf(vals), np.nan, vals), "--")
    assert plots.mark_infinite(ax, xs, vals, label="bound = inf") == 2
    marks = [ln for ln in ax.get_lines() if ln.get_label() == "bound = inf"]
    assert len(marks) == 1
    assert list(marks[0].get_xdata()) == [2.0, 4.0]
    assert np.all(marks[0].get_ydata() == 0.97)           # in axes coordinates: the top edge
    assert [t.get_text() for t in ax.texts] == ["inf", "inf"]
    assert [t.get_position()[0] for t in ax.texts] == [2.0, 4.0]


def test_mark_infinite_nothing_infinite_draws_nothing():
    ax = plots.figure().add_subplot()
    assert plots.mark_infinite(ax, [1, 2], [0.5, 1.0]) == 0
    assert len(ax.get_lines()) == 0 and len(ax.texts) == 0


def test_mark_infinite_mismatched_lengths_name_the_arguments():
    ax = plots.figure().add_subplot()
    with pytest.raises(ValueError, match=r"xs has 3 entries and values 2"):
        plots.mark_infinite(ax, [1, 2, 3], [1.0, np.inf])


def test_ulp_hist_integer_bins_and_clipped_tail():
    ax = plots.figure().add_subplot()
    d = np.concatenate([np.repeat(np.arange(-3, 4), 50), [500, -900]])   # a bulk within 3 ulps, two far out
    n_out = plots.ulp_hist(ax, d, "t")
    heights = np.array([p.get_height() for p in ax.patches])
    lefts = np.array([p.get_x() for p in ax.patches])
    lim = (len(heights) - 1) // 2
    assert n_out == 2 and lim >= 3
    assert heights.sum() == d.size                      # every value counted, the tail in the edge bins
    assert np.allclose(lefts + 0.5, np.arange(-lim, lim + 1))   # one bin per integer, centred on it
    assert heights[0] >= 1 and heights[-1] >= 1         # -900 and 500 sit in the edge bins
    assert "2 beyond" in ax.get_title()


def test_ulp_hist_small_differences_are_not_clipped():
    ax = plots.figure().add_subplot()
    assert plots.ulp_hist(ax, np.array([0, 0, 1, -2]), "t") == 0
    assert ax.get_title() == "t"
