"""One way to draw the lab's figures: no global state, PNG and PDF, lines told apart.

Every figure the lab and its benchmarks save goes through here, because:

* it builds :class:`matplotlib.figure.Figure` objects directly (the object-oriented
  API) and never touches pyplot's global state or switches the backend: importing a
  report function in a notebook must not change that notebook's backend (the old
  ``matplotlib.use("Agg")`` on import did), and saving needs no GUI;
* :func:`save` writes each figure as PNG (to look at) and PDF (vector, for a paper),
  each atomically;
* :func:`styles` gives each series a colour, a line style and a marker, so that two
  identical curves stay distinguishable (a colour alone hides one under the other);
* :func:`ecdf` draws empirical CDFs from 0 with :meth:`matplotlib.axes.Axes.ecdf`
  (a hand-made ``arange(1, n + 1) / n`` starts at 1/n and hides the smallest value);
* :func:`with_n` puts the N a figure is over into its title or legend.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

from mltcp.lab.common.atomic import replacing

FORMATS = ("png", "pdf")
DPI = 130
_LINESTYLES = ("-", "--", "-.", ":")
_MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")


def figure(nrows: int = 1, ncols: int = 1, figsize: tuple[float, float] = (7.0, 3.6),
           **subplots: Any) -> tuple[Any, Any]:
    """A new Figure (not registered with pyplot) and its axes, as ``plt.subplots``
    returns them: one Axes, or an array of them (``squeeze``, ``sharex``... pass on)."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=figsize, layout="constrained")
    return fig, fig.subplots(nrows, ncols, **subplots)


def save(fig: Any, path: str | Path, formats: Sequence[str] = FORMATS) -> list[Path]:
    """Write ``fig`` as ``path`` with each suffix of ``formats`` (``timeline.png`` and
    ``timeline.pdf`` for ``path`` = ``timeline`` or ``timeline.png``); the paths
    written.  The figure is not kept anywhere, so it is freed with its last reference."""
    stem = Path(path)
    if stem.suffix.lstrip(".") in FORMATS:
        stem = stem.with_suffix("")
    written = []
    for fmt in formats:
        target = stem.with_name(f"{stem.name}.{fmt}")
        with replacing(target) as tmp:
            fig.savefig(tmp, dpi=DPI, format=fmt)
        written.append(target)
    return written


def styles() -> Iterator[dict[str, Any]]:
    """Keyword sets for successive series: colour, line style and marker all change, so
    no two of the first 8 series share a colour, and curves that coincide still show
    their dashes and their markers (hollow, so a circle on a square shows both)."""
    for i in itertools.count():
        yield {"color": f"C{i % 10}", "linestyle": _LINESTYLES[i % len(_LINESTYLES)],
               "marker": _MARKERS[i % len(_MARKERS)], "markerfacecolor": "none"}


def _markevery(ax: Any, vertices: int, markers: int) -> tuple[int, int]:
    """About ``markers`` markers along the next line (of ``vertices``) on ``ax``, the
    first further along for each line already there, so coinciding lines show all."""
    step = max(1, vertices // markers)
    return (len(ax.lines) * max(1, step // 4)) % step, step


def error_bars(means: Sequence[float], lows: Sequence[float | None],
               highs: Sequence[float | None]) -> list[list[float]]:
    """``yerr`` for ``Axes.errorbar``/``bar``: each mean's distance down to its interval's
    low end and up to its high end; 0 where it has no interval (N = 1)."""
    return [[m - lo if lo is not None else 0.0 for m, lo in zip(means, lows, strict=True)],
            [hi - m if hi is not None else 0.0 for m, hi in zip(means, highs, strict=True)]]


def line_style(ax: Any, style: dict[str, Any], points: int) -> dict[str, Any]:
    """``style`` for the next line of ``points`` points on ``ax``: about 10 markers
    along it (a marker on each of thousands of points would be a smear), each line's
    starting further along, so that coinciding lines show every marker."""
    return {**style, "markevery": _markevery(ax, points, 10), "markersize": 5}


def ecdf(ax: Any, values: Iterable[float], label: str | None = None, **style: Any) -> None:
    """The empirical CDF of ``values`` on ``ax``, from 0 (Axes.ecdf); with a marker
    style given, about 8 markers per line, each line's starting further along, so
    that coinciding CDFs show every marker."""
    data = list(values)
    if not data:
        return
    markevery = _markevery(ax, 2 * len(data), 8)   # a step line: two vertices per value
    line = ax.ecdf(data, label=label, **style)
    if style.get("marker") is not None:
        line.set_markevery(markevery)
        line.set_markersize(5)


def with_n(label: str, n: int, what: str = "") -> str:
    """``"cubic (N=4 seeds)"``: the N a curve or a figure is over."""
    return f"{label} (N={n}{' ' + what if what else ''})"


def legend(ax: Any, **kwargs: Any) -> None:
    """A legend, only where some artist has a label (an empty one warns)."""
    if ax.get_legend_handles_labels()[0]:
        ax.legend(**{"fontsize": "small", **kwargs})
