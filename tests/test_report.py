"""The report on hand-made traces: aggregation per scheme, speed-ups, table, plots."""

from __future__ import annotations

import json

import numpy as np
import pytest

from mltcp.core.errors import SpecError
from mltcp.lab.scenario.report import build_report, table
from mltcp.lab.scenario.trace import FlowSample, FlowTrace, IterationRecord, JobTrace, Trace


def _job(name: str, period: float, comm: float, offset: float, n: int = 10) -> JobTrace:
    its = []
    for i in range(n):
        start = offset + i * period
        comm_start = start + period - comm
        its.append(IterationRecord(i, start, comm_start, start + period, start + period, 1000))
    return JobTrace(name, ("bottleneck",), tuple(its))


def _trace(scheme: str, seed: int, jobs: tuple[JobTrace, ...], mltcp: bool,
           cc: str = "cubic", schedule: str | None = None) -> Trace:
    params = {"name": scheme, "cc": cc, "mltcp": mltcp}
    if schedule:
        params["schedule"] = schedule
    return Trace(scenario="toy", scheme=scheme, backend="test", seed=seed, jobs=jobs,
                 params=params)


@pytest.fixture
def run_dir(tmp_path):
    traces = tmp_path / "traces"
    traces.mkdir()
    for seed in (0, 1):
        # Standard: both jobs communicate at the same time, iterations take 0.3 s.
        _trace("cubic", seed, (_job("a", 0.3, 0.2, 0), _job("b", 0.3, 0.2, 0)), False).save(
            traces / f"cubic-seed{seed}.json")
        # MLTCP: interleaved (b's communication sits in a's compute), 0.2 s iterations.
        _trace("mltcp-cubic", seed, (_job("a", 0.2, 0.1, 0), _job("b", 0.2, 0.1, 0.1)),
               True).save(traces / f"mltcp-cubic-seed{seed}.json")
        for name in ("a", "b"):
            ded = _trace("dedicated", seed, (_job(name, 0.2, 0.1, 0),), False)
            ded.save(traces / f"dedicated-{name}-seed{seed}.json")
    return tmp_path


def test_report_aggregates_schemes_and_compares_with_the_standard(run_dir):
    report = build_report(run_dir)
    assert report["dedicated_means"] == {"a": pytest.approx(0.2), "b": pytest.approx(0.2)}
    std, ml = report["schemes"]["cubic"], report["schemes"]["mltcp-cubic"]
    assert std["convergence"] == {"per_seed": [None, None], "converged_runs": 0,
                                  "median": None,
                                  "first_interleaved": {"per_seed": [None, None], "runs": 0,
                                                        "median": None}}
    assert ml["convergence"]["converged_runs"] == 2 and ml["convergence"]["median"] == 0
    assert std["ratio_to_dedicated"]["mean"] == pytest.approx(1.5)
    assert ml["ratio_to_dedicated"]["mean"] == pytest.approx(1.0)
    assert std["overlap_last"]["mean"] == pytest.approx(1.0)
    assert ml["overlap_last"]["mean"] == pytest.approx(0.0)
    assert std["speedup"] is None
    assert (std["retransmits_per_iteration"], std["rtos"]) == (None, None)   # not recorded
    assert ml["speedup"] == {"baseline": "cubic", "n": 2, "mean": pytest.approx(1.5),
                             "mean_ci": [pytest.approx(1.5), pytest.approx(1.5)],
                             "p99": pytest.approx(1.5),
                             "p99_ci": [pytest.approx(1.5), pytest.approx(1.5)]}
    assert json.loads((run_dir / "report.json").read_text())["schema"] == "mltcp.report/2"
    for name in ("timeline.png", "overlap.png", "cdf.png", "timeline.pdf", "overlap.pdf",
                 "cdf.pdf", "summary.md"):
        assert (run_dir / name).stat().st_size > 0
    assert not (run_dir / "cwnd.png").exists()       # these traces record no windows
    assert ml["scheme"] == {"name": "mltcp-cubic", "cc": "cubic", "mltcp": True,
                            "slope": 1.0, "intercept": 1.0,
                            "f": {"slope": 1.0, "intercept": 1.0, "cap": None},
                            "congestion_control": "mltcp_cubic"}


def test_recorded_windows_get_their_own_plot(run_dir):
    path = run_dir / "traces" / "mltcp-cubic-seed0.json"
    trace = Trace.from_dict(json.loads(path.read_text()))
    flows = tuple(FlowTrace(f"{j}/0.0", j, "h1", "h2",
                            tuple(FlowSample(0.01 * k, 1448 * (k % 7 + 1)) for k in range(50)))
                  for j in ("a", "b"))
    Trace(**{**trace.__dict__, "flows": flows}).save(path)
    build_report(run_dir)
    assert (run_dir / "cwnd.png").stat().st_size > 0
    assert "![cwnd](cwnd.png)" in (run_dir / "summary.md").read_text()
    Trace(**{**trace.__dict__, "flows": ()}).save(path)
    build_report(run_dir)                            # the windows are gone: so is the plot
    assert not (run_dir / "cwnd.png").exists()
    assert "cwnd" not in (run_dir / "summary.md").read_text()


def test_mltcp_is_also_compared_with_every_other_standard_scheme(run_dir):
    for seed in (0, 1):   # standard reno: 0.4 s iterations, so mltcp-cubic is 2x faster
        _trace("reno", seed, (_job("a", 0.4, 0.2, 0), _job("b", 0.4, 0.2, 0)), False,
               cc="reno").save(run_dir / "traces" / f"reno-seed{seed}.json")
    report = build_report(run_dir)
    ml = report["schemes"]["mltcp-cubic"]
    assert ml["speedup"]["baseline"] == "cubic"             # same congestion control first
    versus = ml["speedup_vs_standard"]
    assert set(versus) == {"cubic", "reno"}
    assert (versus["cubic"]["mean"], versus["cubic"]["p99"]) == (pytest.approx(1.5),) * 2
    assert (versus["reno"]["mean"], versus["reno"]["p99"]) == (pytest.approx(2.0),) * 2
    assert report["schemes"]["reno"]["speedup_vs_standard"] is None
    summary = (run_dir / "summary.md").read_text()
    assert ("| mltcp-cubic | 1.50x [1.50-1.50] / 1.50x [1.50-1.50] | "
            "2.00x [2.00-2.00] / 2.00x [2.00-2.00] |") in summary


def test_cassini_is_a_rival_not_the_baseline(run_dir):
    for seed in (0, 1):   # Cassini: shifted starts, 0.25 s iterations; its name sorts first
        _trace("cassini", seed, (_job("a", 0.25, 0.1, 0), _job("b", 0.25, 0.1, 0.1)), False,
               schedule="cassini").save(run_dir / "traces" / f"cassini-seed{seed}.json")
    report = build_report(run_dir)
    ml = report["schemes"]["mltcp-cubic"]
    assert ml["speedup"]["baseline"] == "cubic"
    assert ml["speedup_vs_standard"]["cassini"]["mean"] == pytest.approx(1.25)


def test_table_has_one_row_per_scheme(run_dir):
    text = table(build_report(run_dir))
    rows = [line for line in text.splitlines() if line.startswith("| ") and "scheme" not in line]
    assert [r.split("|")[1].strip() for r in rows] == ["cubic", "mltcp-cubic"]
    assert "1.50x [1.50-1.50] / 1.50x [1.50-1.50] vs cubic" in rows[1]
    assert "| mltcp-cubic | 2 | 2/2 | 2/2 | 0 (2 of 2 converged) |" in rows[1]


def test_report_without_traces_says_what_to_do(tmp_path):
    (tmp_path / "traces").mkdir()
    with pytest.raises(FileNotFoundError, match="run `mltcp run` first"):
        build_report(tmp_path)


def test_steady_state_p99_counts_only_iterations_after_convergence(tmp_path):
    """A run that starts overlapped (slow iterations) and then interleaves: the p99 after
    convergence sees only the fast iterations; a run that never converges has none."""
    traces = tmp_path / "traces"
    traces.mkdir()

    def job(name: str, offset_after: float) -> JobTrace:
        its, t = [], 0.0
        for i in range(20):
            slow = i < 8                          # 8 overlapped iterations, then apart
            period, comm = (0.5, 0.3) if slow else (0.2, 0.1)
            shift = 0.0 if slow else offset_after
            its.append(IterationRecord(i, t, t + shift, t + shift + comm, t + period, 1000))
            t += period
        return JobTrace(name, ("bottleneck",), tuple(its))

    _trace("mltcp-cubic", 0, (job("a", 0.0), job("b", 0.1)), True).save(
        traces / "mltcp-cubic-seed0.json")
    _trace("cubic", 0, (_job("a", 0.5, 0.3, 0, 20), _job("b", 0.5, 0.3, 0, 20)), False).save(
        traces / "cubic-seed0.json")
    report = build_report(tmp_path)
    ml, std = report["schemes"]["mltcp-cubic"], report["schemes"]["cubic"]
    assert ml["convergence"]["per_seed"] == [8]
    assert ml["iteration_time"]["p99"] == pytest.approx(0.5)
    assert ml["iteration_time"]["p99_after_convergence"] == pytest.approx(0.2)
    assert ml["iteration_time"]["p99_second_half"] == pytest.approx(0.2)
    assert std["iteration_time"]["p99_after_convergence"] is None
    assert std["iteration_time"]["p99_second_half"] == pytest.approx(0.5)


def test_a_run_shorter_than_one_link_sample_reports(tmp_path):
    """Two 1 ms iterations of 10 KB: the links record no sample, so their ECN marks and
    drops are unknown (null), not a crash and not a made-up 0."""
    from importlib import resources

    from mltcp.lab.scenario.runner import run_scenario

    text = (resources.files("mltcp.lab.scenario") / "examples" / "compatible-pair.toml"
            ).read_text()
    for old, new in (("iterations = 40", "iterations = 2"), ("compute_ms = 120", "compute_ms = 1"),
                     ('bytes_per_iteration = "10MB"', 'bytes_per_iteration = "10KB"'),
                     ("seeds = [0, 1, 2, 3, 4]", "seeds = [0]")):
        assert old in text
        text = text.replace(old, new)
    path = tmp_path / "short.toml"
    path.write_text(text)
    report = run_scenario(str(path), tmp_path / "out", schemes=["cubic", "mltcp-cubic"],
                          backend="fluid")
    for block in report["schemes"].values():
        assert block["drops"] is None and block["ecn_marks"] is None
        assert block["iteration_time"]["mean"] > 0
    assert (tmp_path / "out" / "summary.md").is_file()


def _job_times(name: str, times: list[float], comm: float = 0.05) -> JobTrace:
    its, t = [], 0.0
    for i, d in enumerate(times):
        its.append(IterationRecord(i, t, t + d - comm, t + d, t + d, 1000))
        t += d
    return JobTrace(name, ("bottleneck",), tuple(its))


def test_every_figure_over_seeds_carries_n_and_a_95_percent_interval(tmp_path):
    traces = tmp_path / "traces"
    traces.mkdir()
    for seed, d in enumerate((0.30, 0.32, 0.35, 0.31)):
        _trace("cubic", seed, (_job("a", d, 0.2, 0), _job("b", d, 0.2, 0)), False).save(
            traces / f"cubic-seed{seed}.json")
    for name in ("a", "b"):
        _trace("dedicated", 0, (_job(name, 0.2, 0.1, 0),), False).save(
            traces / f"dedicated-{name}-seed0.json")
    report = build_report(tmp_path)
    block = report["schemes"]["cubic"]
    assert block["n"] == 4
    for spread in (block["ratio_to_dedicated"]["spread"], block["iteration_time"]["mean_spread"],
                   block["iteration_time"]["p99_spread"], block["overlap_last"]["spread"]):
        assert spread["n"] == 4 and spread["level"] == 0.95
        assert spread["ci_lo"] <= spread["mean"] <= spread["ci_hi"]
    ratio = block["ratio_to_dedicated"]["spread"]
    assert ratio["mean"] == pytest.approx(np.mean([1.5, 1.6, 1.75, 1.55]))
    assert ratio["ci_lo"] < ratio["mean"] < ratio["ci_hi"]          # the seeds disagree
    assert build_report(tmp_path)["schemes"]["cubic"] == block      # seeded: reproducible
    summary = (tmp_path / "summary.md").read_text()
    assert "95% bootstrap confidence interval" in summary
    assert f"| cubic | 4 | 0/4 | 0/4 | - | 1.60 [{ratio['ci_lo']:.2f}-{ratio['ci_hi']:.2f}] |" \
        in summary


def test_the_tidy_iteration_table_has_every_iteration_of_every_run(run_dir):
    from mltcp.lab.common.tables import read_table
    from mltcp.lab.scenario.tidy import COLUMNS

    build_report(run_dir)
    [path] = list(run_dir.glob("iterations.*"))
    rows = read_table(path)
    # cubic and mltcp-cubic: 2 seeds x 2 jobs x 10; dedicated: 2 seeds x 2 jobs alone x 10
    assert len(rows) == 2 * 2 * 2 * 10 + 2 * 2 * 10
    assert tuple(rows[0]) == COLUMNS
    runs = {r["run"] for r in rows}
    assert {"cubic/seed0", "mltcp-cubic/seed1", "dedicated-a/seed0"} <= runs
    mltcp_a = [r for r in rows if r["run"] == "mltcp-cubic/seed0" and r["job"] == "a"]
    assert [float(r["iteration"]) for r in mltcp_a] == list(range(10))
    assert all(float(r["overlap"]) == pytest.approx(0.0, abs=1e-9) for r in mltcp_a)
    assert all(r["overlap"] in (None, "") for r in rows if r["scheme"] == "dedicated")


def test_traces_of_two_scenarios_are_refused_naming_the_file(run_dir):
    other = Trace(scenario="other", scheme="cubic", backend="test", seed=5,
                  jobs=(_job("a", 0.3, 0.2, 0),), params={"name": "cubic", "cc": "cubic",
                                                          "mltcp": False})
    other.save(run_dir / "traces" / "zz-other-seed5.json")
    with pytest.raises(SpecError, match=r"zz-other-seed5\.json: is a run of scenario 'other'"):
        build_report(run_dir)


def test_one_scheme_name_run_with_two_fs_is_refused(run_dir):
    path = run_dir / "traces" / "mltcp-cubic-seed1.json"
    trace = Trace.from_dict(json.loads(path.read_text()))
    Trace(**{**trace.__dict__, "params": {**trace.params, "slope": 3.0}}).save(path)
    with pytest.raises(SpecError, match="ran scheme 'mltcp-cubic' as"):
        build_report(run_dir)


def test_a_trace_whose_f_contradicts_its_scheme_is_refused(run_dir):
    path = run_dir / "traces" / "cubic-seed0.json"
    trace = Trace.from_dict(json.loads(path.read_text()))
    params = {**trace.params, "f": {"slope": 2.0, "intercept": 1.0, "cap": None}}
    Trace(**{**trace.__dict__, "params": params}).save(path)
    with pytest.raises(SpecError, match=r"cubic-seed0\.json: params\.f: .* is not what scheme "
                                        r"'cubic' runs"):
        build_report(run_dir)


def test_a_killed_writers_temporary_file_is_not_a_trace_and_a_damaged_one_is_named(run_dir):
    (run_dir / "traces" / ".cubic-seed0.tmp-999.json").write_text('{"schema": "mlt')
    build_report(run_dir)                                  # hidden: ignored
    (run_dir / "traces" / "cubic-seed0.json").write_text('{"schema": "mlt')
    with pytest.raises(SpecError, match=r"cubic-seed0\.json"):
        build_report(run_dir)
