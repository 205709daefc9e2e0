"""The hosts backend's synchronized start: the slack rule, the skew record, the report."""

from __future__ import annotations

import subprocess
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


class _Session:
    """A host's SSH session, run here: it runs each command with this machine's sh and
    records it once it ran (or fails it, a host gone dark)."""

    def __init__(self, fail: bool = False) -> None:
        self.fail, self.ran = fail, []

    def run(self, argv, timeout_s=120, check=True, input_text=None):  # type: ignore[no-untyped-def]
        if self.fail:
            raise OSError("host gone dark")
        done = subprocess.run(argv, input=input_text, text=True, timeout=timeout_s,
                              check=check)
        self.ran.append(argv)                        # once it ran
        return done


def _run_of_two_jobs(tmp_path: Path, dark: set[str] = frozenset()):  # type: ignore[no-untyped-def]
    from mltcp.lab.scenario.hosts.inventory import parse_inventory
    from mltcp.lab.scenario.hosts.training import HostRun, JobOnHosts
    from mltcp.lab.scenario.plan import resolve
    from mltcp.lab.scenario.spec import load_scenario

    sc = load_scenario("compatible-pair")
    plan = resolve(sc, sc.schemes[0], 0)
    inventory = parse_inventory({"hosts": [
        {"name": f"g{i}", "ssh": f"10.0.0.{i}", "data_addr": f"10.1.0.{i}",
         "data_iface": "eth1"} for i in range(1, 1 + len(plan.topology.host_names()))]})
    run = HostRun(plan, inventory, tmp_path, start_slack_s=60.0)
    run.launched_at = time.time()
    for job in plan.active_jobs:
        hosts = tuple(run.host_of(h) for h in job.hosts)
        remote_dir = tmp_path / "hosts" / job.name       # every host's, here one
        remote_dir.mkdir(parents=True)
        run.jobs.append(JobOnHosts(job, hosts, job.name, f"mltcp-x/{job.name}",
                                   str(remote_dir)))
        run.start_at[job.name] = run.launched_at + 60.0 + job.start_ms / 1000
        for h in hosts:
            run.sessions.setdefault(h.name, _Session(fail=h.name in dark))
    return run


def _wait_for_writes(run, count: int) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + 10
    while sum(len(s.ran) for s in run.sessions.values()) < count:
        assert time.monotonic() < deadline, "the go files were never written"
        time.sleep(0.01)


def test_the_go_files_are_written_once_every_job_is_ready(tmp_path: Path) -> None:
    run = _run_of_two_jobs(tmp_path)
    first, second = run.jobs
    run._rank0_log(first).write_text(f"start: ready at {time.time():.3f}; the first ...\n")
    run.go_when_ready()
    assert run.went_at is None                     # one job is still starting
    run._rank0_log(second).write_text(f"start: ready at {time.time():.3f}; the first ...\n")
    run.go_when_ready()
    assert run.went_at is not None and set(run.go_at) == {first.plan.name, second.plan.name}
    writes = sum(len(set(h.name for h in on.hosts)) for on in run.jobs)
    _wait_for_writes(run, writes)
    for on in run.jobs:
        assert run.go_at[on.plan.name] == pytest.approx(
            run.went_at + start.GO_AHEAD_S + on.plan.start_ms / 1000)
        go_file = Path(run.go_file(on))
        assert float(go_file.read_text()) == run.go_at[on.plan.name]   # exactly
        assert [f.name for f in go_file.parent.iterdir()] == ["start-go"]  # renamed, each
        for host in set(h.name for h in on.hosts):
            assert sum(run.go_file(on) in argv[-1] for argv in run.sessions[host].ran) == 1
    run.go_when_ready()                            # once only
    assert sum(len(s.ran) for s in run.sessions.values()) == writes


def test_a_job_whose_go_file_never_came_is_late(tmp_path: Path) -> None:
    """Its hosts start it at MLTCP_START_AT: the skew is measured from the moment the run
    meant, so the run is not synchronized (and is run again), however punctually that
    job kept its own fallback."""
    from types import SimpleNamespace

    probe = _run_of_two_jobs(tmp_path / "probe")
    dark = {h.name for h in probe.jobs[1].hosts}
    run = _run_of_two_jobs(tmp_path, dark=dark)
    for on in run.jobs:
        run._rank0_log(on).write_text(f"start: ready at {time.time():.3f}; ...\n")
    run.go_when_ready()
    a, b = (on.plan.name for on in run.jobs)
    records = {a: [SimpleNamespace(start_wall=run.go_at[a] + 0.001)],
               b: [SimpleNamespace(start_wall=run.start_at[b] + 0.001)]}   # its fallback
    rec = run.start_record(records)
    assert rec["jobs"][a]["skew_s"] == pytest.approx(0.001)
    assert rec["jobs"][b]["late"] and not rec["synchronized"]
    assert rec["jobs"][b]["skew_s"] == pytest.approx(run.start_at[b] - run.go_at[b] + 0.001)
