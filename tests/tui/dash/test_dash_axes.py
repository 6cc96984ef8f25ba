"""The charts' labels say where the curve is: its y axis spans the curve's own range and the
title gives its last value (tui/dash/axes.py), checked on the labels and on the drawn chart."""

from __future__ import annotations

import math

from hypothesis import given
from hypothesis import strategies as st
from textual.app import App

from tui.dash.axes import chart_title, distinct_labels, x_ticks, y_ticks
from tui.dash.watch import Series, downsample, log10_series
from tui.dash.widgets import Charts

# a loss that fell from 3.83 long ago and now sits around 0.0026 (0.0021 to 0.0031)
SETTLED = [0.0026 + 0.0005 * math.sin(i / 3.0) for i in range(200)]
SETTLED[-1] = 0.0026
FALLING = [3.83 * math.exp(-i / 42) for i in range(301)] + [0.0026]  # 3.83 down to 0.003, then 0.0026


def test_a_curve_at_0_0026_is_labelled_in_its_own_range() -> None:
    lo, hi = min(SETTLED), max(SETTLED)
    _ticks, labels = y_ticks(lo, hi, rows=8)
    assert labels[0] == "0.0021" and labels[-1] == "0.0031"
    assert all(0.0021 <= float(label) <= 0.0031 for label in labels)
    assert "3.83" not in labels and len(set(labels)) == len(labels)
    assert chart_title("loss", SETTLED) == "loss 0.0026 (0.0021-0.0031)"


def test_a_curve_that_fell_labels_its_bottom_where_it_sits_now() -> None:
    """plotext's own ticks were 3.83 / 2.56 / 0.64 here: nothing named the 0.0026 it ends at."""
    _ticks, labels = y_ticks(min(FALLING), max(FALLING), rows=3)
    assert labels == ["0.0026", "3.83"]
    assert chart_title("loss", FALLING) == "loss 0.0026 (0.0026-3.83)"


def test_labels_get_the_digits_that_tell_them_apart() -> None:
    assert distinct_labels([1.0001, 1.0002, 1.0003]) == ["1.0001", "1.0002", "1.0003"]
    assert chart_title("acc", [0.5, -0.25, 0.125]) == "acc 0.125 (-0.25 to 0.5)"  # no dash-minus
    assert chart_title("lr", [3e-4, 7.5e-06]) == "lr 7.5e-06 (7.5e-06 to 0.0003)"
    assert chart_title("loss", [0.7, 0.7]) == "loss 0.7 (flat)"


def test_a_log10_chart_labels_the_metric_s_own_values() -> None:
    _ticks, labels = y_ticks(math.log10(0.001), math.log10(10.0), rows=8, shown=lambda v: 10 ** v)
    assert labels[0] == "0.001" and labels[-1] == "10"
    assert chart_title("loss", [10.0, 0.001], log_scale=True) == "log10 loss 0.001 (0.001-10)"


def test_whole_steps_are_labelled_as_whole_numbers() -> None:
    _ticks, labels = x_ticks(0.0, 399.0, 64)
    assert labels[0] == "0" and labels[-1] == "399" and all("." not in label for label in labels)


@given(st.floats(-1e6, 1e6, allow_nan=False), st.floats(1e-6, 1e6, allow_nan=False), st.integers(1, 60))
def test_the_axis_ends_are_the_curve_s_ends(lo: float, span: float, rows: int) -> None:
    hi = lo + span
    if hi == lo:
        return
    ticks, labels = y_ticks(lo, hi, rows)
    assert ticks[0] == lo and ticks[-1] == hi and 2 <= len(ticks) <= 5
    assert len(set(labels)) == len(labels)  # two ticks never read the same
    assert math.isclose(float(labels[0]), lo, rel_tol=1e-2, abs_tol=1e-9 + span * 1e-2)
    assert math.isclose(float(labels[-1]), hi, rel_tol=1e-2, abs_tol=1e-9 + span * 1e-2)


class _ChartsApp(App):
    def compose(self):
        yield Charts(id="charts")


def _series(values: list[float]) -> dict:
    return {"loss": Series(steps=list(range(len(values))), values=list(values))}


async def test_the_drawn_chart_names_its_own_range_after_another_job_s() -> None:
    """Drawn by plotext in the widget: a job whose loss fell from 3.83, then a job sitting at
    0.0026. The second chart's axis and title are its own; nothing of the first remains."""
    app = _ChartsApp()
    async with app.run_test(size=(80, 24)) as pilot:
        charts = app.query_one(Charts)
        charts.show(_series(FALLING), downsample, log10_series)
        await pilot.pause()
        first = _chart_text(charts)
        assert "loss 0.0026 (0.0026-3.83)" in first and "3.83┤" in first and "0.0026┤" in first
        charts.show(_series(SETTLED), downsample, log10_series)
        await pilot.pause()
        text = _chart_text(charts)
        assert "loss 0.0026 (0.0021-0.0031)" in text
        assert "0.0031┤" in text and "0.0021┤" in text and "3.83" not in text


async def test_no_metric_collapses_the_charts() -> None:
    app = _ChartsApp()
    async with app.run_test(size=(80, 24)) as pilot:
        charts = app.query_one(Charts)
        charts.show({}, downsample, log10_series)
        await pilot.pause()
        assert not charts.display and charts.wanted_rows() == 0
        charts.show(_series(SETTLED), downsample, log10_series)
        await pilot.pause()
        assert charts.display and charts.wanted_rows() > 0


def _chart_text(charts: Charts) -> str:
    from textual_plotext import PlotextPlot

    plot = next(p for p in charts.query(PlotextPlot) if p.display)
    return "\n".join(plot.render_line(y).text for y in range(plot.size.height))
