"""The time left of a long run, as the progress lines of both wings print it."""

from __future__ import annotations

import math

from mltcp.lab.common.eta import duration_text, eta_text


def test_a_duration_is_said_in_its_largest_unit() -> None:
    assert duration_text(42.4) == "42 s"
    assert duration_text(90) == "1.5 min"
    assert duration_text(2.6 * 3600) == "2.6 h"
    assert duration_text(7145 * 86400) == "7145 d"
    assert duration_text(math.inf) == "?"


def test_the_time_left_is_at_the_pace_so_far() -> None:
    assert eta_text(10, 0.25) == "ETA 30 s"           # a quarter in 10 s: 30 s to go
    assert eta_text(10, 3.2e-6) == "ETA 36 d"
    assert eta_text(10, 0.0) == eta_text(0, 0.5) == "ETA ?"
    assert eta_text(10, 1.5) == "ETA 0 s"
