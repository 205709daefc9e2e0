"""The expected time left of a long run, as both wings' progress lines print it.

A run of a cluster trace or a scenario can take minutes to days of wall time; its
progress lines say how far it got and, from the pace so far, when it should end.  The
pace is the fraction done per wall second since the run began: a run whose later part
is denser (more jobs at once) ends later than said, so the text is an estimate.
"""

from __future__ import annotations

import math

_UNITS = ((86400.0, "d"), (3600.0, "h"), (60.0, "min"))


def duration_text(seconds: float) -> str:
    """``seconds`` in the largest unit that keeps it at least 1 (s, min, h, d), one
    decimal below 10: a progress line's estimate, not a measurement."""
    if not math.isfinite(seconds):
        return "?"
    for size, unit in _UNITS:
        if seconds >= size:
            value = seconds / size
            return f"{value:.1f} {unit}" if value < 10 else f"{value:.0f} {unit}"
    return f"{seconds:.0f} s"


def eta_text(elapsed_s: float, fraction: float) -> str:
    """"ETA 3.5 h": the time left at the pace so far, ``fraction`` (0-1) done after
    ``elapsed_s`` of wall time; "ETA ?" before anything is done."""
    if fraction <= 0 or elapsed_s <= 0:
        return "ETA ?"
    return f"ETA {duration_text(elapsed_s * (1 - min(fraction, 1.0)) / fraction)}"
