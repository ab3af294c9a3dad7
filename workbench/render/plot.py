"""A whole run as charts, for reports: one chart per pool, the hit rate and the tree's
counts over every step, with the failing steps, breakpoints and "changes at" marks.

Draws the series model (``model.timeline.series``) with matplotlib's object API (a
``Figure``, no pyplot: no global state, no display). Every series is cut to at most
``buckets`` points first, each bucket its lowest and highest value (``downsample``),
so an 80,000-step run draws as fast as a 1,000-step one and a one-step spike still
shows. The SVG keeps its text as text and carries no date, so two pictures of the same
run are the same file.
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from typing import NamedTuple, Optional

import numpy as np
from matplotlib import rc_context
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator, StrMethodFormatter

from ..model.timeline.series import HITS, TREE, RunSeries

BUCKETS = 1200  # points per series: about the picture's width in pixels
COLOURS = {"available": "#2ca02c", "evictable": "#1f77b4", "protected": "#ff7f0e", "held": "#9467bd",
           "unaccounted": "#000000", "total": "#7f7f7f", "hit_rate": "#1f77b4", "hit_rate_recent": "#17becf",
           "host_hit_rate": "#9467bd", "nodes": "#1f77b4", "evictable_leaves": "#2ca02c", "requests": "#ff7f0e"}
OTHERS = ("#8c564b", "#e377c2", "#bcbd22", "#17becf", "#7f7f7f")
FAILURE, BREAKPOINT, CHANGE = "#d62728", "#1f77b4", "#9400d3"
UNACCOUNTED = "unaccounted"
THOUSANDS = "{x:,.0f}"  # 80,000 (a formatter per axis: one formatter belongs to one axis)


class ChangeMark(NamedTuple):
    """A "where it changes" answer to draw: series ``name`` left, after ``since``, the
    value it had there, at step ``at`` (None: it never did)."""

    name: str
    since: int
    at: Optional[int]


def default_series(series: RunSeries) -> list[str]:
    """What a plot shows unless told: per pool its counters that are ever non-zero
    (available always, the total as a dashed line), ``unaccounted`` only where some slot
    is; the hit rates; the tree's counts that are ever non-zero."""
    out = []
    for name, info in series.info.items():
        always = info.label in ("total", "available") or info.group == HITS
        if always or np.nanmax(series.values(name), initial=0) > 0 or np.nanmin(series.values(name), initial=0) < 0:
            out.append(name)
    return out


def draw_run(series: RunSeries, names: Optional[Sequence[str]] = None, changes: Sequence[ChangeMark] = (),
             buckets: int = BUCKETS, title: Optional[str] = None) -> Figure:
    """The charts of ``names`` (default ``default_series``), one per group, sharing the step axis."""
    names = list(names) if names is not None else default_series(series)
    charts: dict[str, list[str]] = {}
    for name in names:  # the unaccounted slots of every pool on a chart of their own: one slot shows there
        info = series.info[name]
        charts.setdefault(UNACCOUNTED if info.label == UNACCOUNTED and info.group in series.pools else info.group,
                          []).append(name)
    order = [*series.pools, UNACCOUNTED, HITS, TREE]
    charts = dict(sorted(charts.items(), key=lambda item: order.index(item[0])))
    end = series.steps + 1  # the state after the last step holds up to here
    figure = Figure(figsize=(12, 1.0 + 2.1 * len(charts)), layout="constrained")
    axes = figure.subplots(len(charts), 1, sharex=True, squeeze=False)[:, 0] if charts else []
    for ax, (group, members) in zip(axes, charts.items()):
        for n, name in enumerate(members):
            _draw_series(ax, series, name, buckets, n)
        ax.set_ylabel(_chart_label(group), fontsize=9)
        if group == HITS:
            ax.set_ylim(-0.02, 1.02)
        else:  # slots and counts: whole numbers
            ax.yaxis.set_major_locator(MaxNLocator(integer=True))
            ax.yaxis.set_major_formatter(StrMethodFormatter(THOUSANDS))
        ax.xaxis.set_major_formatter(StrMethodFormatter(THOUSANDS))
        ax.set_xlim(0, end)
        ax.grid(True, alpha=0.25, linewidth=0.5)
        _draw_marks(ax, series, changes, buckets, legend=ax is axes[0], name=group)
        ax.legend(loc="upper left", bbox_to_anchor=(1.005, 1.0), fontsize=8, frameon=False)
    if len(axes):
        axes[-1].set_xlabel("step")
    figure.suptitle(title or run_title(series), fontsize=10, x=0.01, ha="left", parse_math=False)  # a name's $ is text
    return figure


def run_title(series: RunSeries) -> str:
    from cache.config.reference import config_line

    from ..model.scenarios.errors import printable

    scenario = series.timeline.scenario
    failing = series.failing_steps
    verdict = ("every check passed" if not failing.size else
               f"{failing.size:,} failing step{'s' if failing.size != 1 else ''}, the first at step {failing[0]:,}")
    config = printable(config_line(scenario.config))
    return f"{printable(scenario.name)} — {series.steps:,} steps, {verdict}\n{config}"


def figure_bytes(figure: Figure, fmt: str = "svg") -> bytes:
    """The picture as a file's bytes; SVG with text as text and no date (reproducible)."""
    buffer = io.BytesIO()
    metadata = {"svg": {"Date": None}, "pdf": {"CreationDate": None}}.get(fmt)
    with rc_context({"svg.fonttype": "none", "svg.hashsalt": "urc plot"}):
        figure.savefig(buffer, format=fmt, metadata=metadata, dpi=110)
    return buffer.getvalue()


def _chart_label(group: str) -> str:
    if group == HITS:
        return "hit rate"
    if group == TREE:
        return "tree (count)"
    if group == UNACCOUNTED:
        return "unaccounted (slots)"
    return f"{group} pool (slots)"


def _draw_series(ax, series: RunSeries, name: str, buckets: int, n: int) -> None:
    info = series.info[name]
    key = info.label if info.group in series.pools else name
    colour = COLOURS.get(key, OTHERS[n % len(OTHERS)]) if not (key == UNACCOUNTED and n) else OTHERS[n % len(OTHERS)]
    points = series.points(name, buckets)
    if not points.steps.size:
        return
    steps = np.append(points.steps, series.steps + 1)  # each value holds until the next step
    low, high = np.append(points.low, points.low[-1]), np.append(points.high, points.high[-1])
    style = {"linestyle": "--", "linewidth": 0.9} if key == "total" else {
        "linewidth": 1.8 if key == UNACCOUNTED else 1.0}
    label = name if key == UNACCOUNTED else info.label
    if np.array_equal(low, high, equal_nan=True):  # every bucket one value: a plain line
        ax.step(steps, high, where="post", color=colour, label=label, **style)
    else:  # each bucket's range, its edges drawn so a flat stretch still shows
        ax.fill_between(steps, low, high, step="post", color=colour, alpha=0.35, linewidth=0)
        ax.step(steps, high, where="post", color=colour, label=label, **{**style, "linewidth": 0.7})
        ax.step(steps, low, where="post", color=colour, **{**style, "linewidth": 0.7})


def _draw_marks(ax, series: RunSeries, changes: Sequence[ChangeMark], buckets: int, legend: bool, name: str) -> None:
    """The markers, named in the legend of the first chart only (the same on every chart).
    Every run of marked steps gets its line (at most ``buckets`` runs: ``marker_runs``
    joins closer ones), drawn as one collection per kind (``{name}-failing``,
    ``{name}-breakpoints`` in the SVG)."""
    across = ax.get_xaxis_transform()  # x in steps, y from the chart's bottom (0) to its top (1)
    failing = series.marker_runs(series.failing_steps, buckets)
    for first, last in failing:
        if last > first:
            ax.axvspan(first, last + 1, color=FAILURE, alpha=0.12, linewidth=0)
    if failing:
        ax.vlines([first for first, _ in failing], 0, 1, transform=across, color=FAILURE, linewidth=1.0,
                  label=f"failing (first: step {failing[0][0]:,})" if legend else None, gid=f"{name}-failing")
    marked = series.marker_runs(series.breakpoint_steps, buckets)
    if marked:
        ax.vlines([first for first, _ in marked], 0, 1, transform=across, color=BREAKPOINT, linewidth=0.9,
                  linestyle=":", label="breakpoint" if legend else None, gid=f"{name}-breakpoints")
    for change in changes:
        if change.at is not None:
            ax.axvline(change.at, color=CHANGE, linewidth=1.2, linestyle="--",
                       label=f"{change.name} changes at {change.at:,}" if legend else None)
