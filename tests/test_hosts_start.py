"""The hosts backend's synchronized start: the slack rule, the skew record, the report."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from mltcp.core.workload import go_moment
from mltcp.lab.scenario.hosts import start
from mltcp.lab.scenario.report import _start_lines

LAUNCH = 1_000.0


def record(skews: dict[str, float], ready_after: dict[str, float], slack: float = 15.0,
           attempt: int = 1) -> dict:
    told = {job: LAUNCH + slack for job in skews}
    first = {job: told[job] + skew for job, skew in skews.items()}
    ready = {job: LAUNCH + r for job, r in ready_after.items()}
    return start.start_record(LAUNCH, slack, told, first, ready, attempt)


def test_the_ready_line_is_read_from_the_workloads_output() -> None:
    out = ("model: transformer\nstart: ready at 1764213000.125; the first iteration waits "
           "3.2 s, until 04:30:00 (--start-at)\niteration 1/3: 10 ms\n")
    assert start.ready_at(out) == 1764213000.125
    assert start.ready_at("start: ready at 12.5; LATE: 2.0 s after ...") == 12.5
    assert start.ready_at("no such line") is None


def test_a_run_whose_jobs_all_start_on_their_moment_is_synchronized() -> None:
    rec = record({"a": 0.002, "b": 0.011}, {"a": 6.0, "b": 7.5})
    assert rec["synchronized"] and rec["max_skew_s"] == pytest.approx(0.011)
    assert rec["jobs"]["b"] == {"skew_s": pytest.approx(0.011), "startup_s": 7.5,
                                "told_s": 15.0, "late": False}
    assert start.describe(rec).startswith("synchronized start: every job within 11 ms of its "
                                          "moment, 15.0 s after the launch (slack 15 s)")


def test_the_go_and_ready_lines_are_read_from_the_workloads_output() -> None:
    out = ("start: ready at 1764213000.125; the first iteration waits for the go file "
           "/tmp/x/start-go, at most 50.0 s, until 04:30:00 (--start-at)\n"
           "start: go at 1764213001.125000, 49.0 s before --start-at\n")
    assert start.ready_at(out) == 1764213000.125
    assert start.go_at(out) == 1764213001.125
    assert start.go_at("start: ready at 12.5; the first iteration waits 3.0 s") is None


def test_a_go_file_brings_the_start_forward(tmp_path: Path) -> None:
    """The workers' side of the go file (mltcp.core.workload.go_moment): its moment once
    it appears, never later than the latest start; without one, the latest start."""
    go = tmp_path / "start-go"
    now = time.time()
    latest = now + 30
    writer = threading.Timer(0.2, lambda: go.write_text(f"{now + 0.5!r}\n"))
    writer.start()
    began = time.monotonic()
    assert go_moment(str(go), latest) == now + 0.5
    assert 0.15 <= time.monotonic() - began < 5          # it waited for the file, not 30 s
    go.write_text(f"{latest + 10!r}")                     # after the latest: the latest
    assert go_moment(str(go), latest) == latest
    for text in ("soon", "nan", "inf", ""):               # not a moment: the latest
        go.write_text(text)
        assert go_moment(str(go), latest) == latest
    go.unlink()
    assert go_moment(str(go), now - 1) == now - 1         # none and the latest is past
    began = time.monotonic()
    assert go_moment(str(go), time.time() + 0.3) > now   # none: waits for the latest
    assert time.monotonic() - began >= 0.25


def test_a_job_that_was_ready_after_its_moment_makes_the_run_not_synchronized() -> None:
    rec = record({"a": 0.003, "b": 3.2}, {"a": 8.0, "b": 18.2})
    assert not rec["synchronized"] and rec["jobs"]["b"]["late"]
    line = start.describe(rec)
    assert "NOT synchronized" in line and "job b +3.20 s (start-up 18.2 s)" in line
    assert "job a" not in line
    assert start.runs_not_synchronized([("cubic/seed0", rec), ("x", None)]) == ["cubic/seed0"]


def test_the_slack_follows_the_longest_start_up_measured() -> None:
    clock = start.StartClock(first_slack_s=15.0)
    assert clock.slack_s() == 15.0                       # nothing measured yet
    clock.measured(record({"a": 0.0, "b": 0.0}, {"a": 4.0, "b": 5.0}))
    assert clock.slack_s() == pytest.approx(1.5 * 5.0 + 2.0)   # quicker hosts: less waiting
    clock.measured(record({"a": 0.0, "b": 6.0}, {"a": 8.0, "b": 21.0}))
    assert clock.slack_s() == pytest.approx(1.5 * 21.0 + 2.0)  # a slow start-up: more slack
    quick = start.StartClock()
    quick.measured(record({"a": 0.0}, {"a": 0.1}))
    assert quick.slack_s() == start.MIN_SLACK_S


def test_the_report_names_the_runs_that_missed_their_start() -> None:
    on_time = record({"a": 0.004, "b": 0.020}, {"a": 6.0, "b": 7.0})
    missed = record({"a": 0.001, "b": 2.5}, {"a": 6.0, "b": 17.0}, attempt=2)
    report = {"runs": {"cubic/seed0": {"start": on_time}, "cubic/seed1": {"start": missed},
                       "mltcp/seed0": {}}}
    [line, _] = _start_lines(report)
    assert line.startswith("Synchronized start: 1 of 2 runs")
    assert "(largest skew 20 ms)" in line
    assert "NOT synchronized (their jobs did not start together): cubic/seed1: b +2.50 s" in line
    assert _start_lines({"runs": {"x/seed0": {}}}) == []
