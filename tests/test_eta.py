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


def test_a_models_first_report_says_no_time_left_yet(monkeypatch) -> None:
    """The DCQCN model's first report came at once and already at the runs' first event
    (0.12 of ~2 s simulated): "ETA 0 s" for a 42 s sweep.  The pace now counts from the
    first report."""
    from mltcp.lab.scenario import footprint, schedule
    from mltcp.lab.scenario.backends import base
    from mltcp.lab.scenario.plan import resolve
    from mltcp.lab.scenario.spec import load_scenario

    sc = load_scenario("compatible-pair")
    plans = schedule.apply([resolve(sc, sc.scheme("cubic"), 0)])
    clock = iter([100.0, 100.0, 110.0])
    monkeypatch.setattr(base.time, "monotonic", lambda: next(clock))
    said: list[str] = []
    advanced = base.simulated_progress("dcqcn", plans, said.append)
    horizon = max(max(p.nominal_duration_s, footprint.min_duration_s(p)[0]) for p in plans)
    advanced(0.1 * horizon)
    advanced(0.55 * horizon)                # half the rest in 10 s: 10 s left
    assert said[0].endswith("ETA ?") and said[1].endswith("ETA 10 s"), said
