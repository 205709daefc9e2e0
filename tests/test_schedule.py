"""Cassini applied to scenarios: demands from the dedicated profile, shifted starts, and
the shifted run interleaving from the first iteration on the fluid model."""

from __future__ import annotations

import dataclasses
import json

import pytest

from mltcp.lab.scenario import metrics, runner, schedule
from mltcp.lab.scenario.plan import resolve
from mltcp.lab.scenario.schedule import cassini_plan, job_demand
from mltcp.lab.scenario.spec import Scheme, load_scenario

CASSINI = Scheme("cassini", "cubic", False, schedule="cassini")


def test_demand_is_the_dedicated_profile() -> None:
    sc = load_scenario("model-parallel")
    job = sc.job("a")
    plan = resolve(sc, CASSINI, 0)
    demand = job_demand(plan.job("a"), plan)
    burst_ms = job.comm_bytes_per_worker() * 0.5 * 8 / (1e9 * 1448 / 1514) * 1000
    assert demand.period_ms == pytest.approx(120 + 2 * burst_ms)
    (p0, p1) = demand.phases
    assert (p0.start_ms, p0.duration_ms, p0.demand) == pytest.approx((60, burst_ms, 1000))
    assert p1.start_ms == pytest.approx(60 + burst_ms + 60)


def test_compatible_pair_gets_a_shift_that_separates_the_phases() -> None:
    sc = load_scenario("compatible-pair")
    run = resolve(sc, CASSINI, 0)
    plan = cassini_plan(run)
    assert all(score == pytest.approx(1.0) for score in plan.link_scores.values())
    demand = job_demand(run.job("a"), run)
    comm = demand.phases[0].duration_ms
    gap = (plan.shifts_ms["b"] - plan.shifts_ms["a"]) % demand.period_ms
    assert comm <= gap <= demand.period_ms - comm      # b communicates while a computes


def test_without_a_schedule_nothing_moves() -> None:
    sc = load_scenario("compatible-pair")
    plan = resolve(sc, sc.scheme("cubic"), 0)
    assert schedule.apply([plan]) == [plan] and plan.shifts_ms == {}


def test_a_job_never_starts_before_its_own_start() -> None:
    sc = load_scenario("compatible-pair")
    late = dataclasses.replace(sc, jobs=(sc.jobs[0], dataclasses.replace(
        sc.jobs[1], start_offset_ms=1000.0)))
    run = resolve(late, CASSINI, 0)
    [shifted] = schedule.apply([run])
    plan = cassini_plan(run)
    period = job_demand(run.job("b"), run).period_ms
    b = shifted.job("b")
    assert 1000.0 <= b.start_offset_ms < 1000.0 + period
    periods_later = (b.start_offset_ms - plan.shifts_ms["b"]) / period
    assert periods_later == pytest.approx(round(periods_later), abs=1e-9)
    assert shifted.shifts_ms["b"] == pytest.approx(b.start_offset_ms - 1000.0)


def test_cassini_interleaves_from_the_start_on_the_fluid_model(tmp_path) -> None:
    report = runner.run_scenario("compatible-pair", tmp_path, schemes=["cassini", "cubic"],
                                 seeds=[0], dedicated=True, backend="fluid")
    cassini = report["schemes"]["cassini"]
    assert cassini["convergence"]["per_seed"] == [0]
    assert cassini["ratio_to_dedicated"]["mean"] == pytest.approx(1.0, abs=0.01)
    assert report["schemes"]["cubic"]["ratio_to_dedicated"]["mean"] > 1.3
    trace = json.loads((tmp_path / "traces" / "cassini-seed0.json").read_text())
    assert set(trace["params"]["shifts_ms"]) == {"a", "b"}
    plain = json.loads((tmp_path / "traces" / "cubic-seed0.json").read_text())
    assert "shifts_ms" not in plain["params"]


def test_incompatible_pair_still_gains_from_cassini() -> None:
    sc = load_scenario("incompatible-pair")
    fair = metrics.summarize(runner.run_one("fluid", sc, sc.scheme("cubic"), 0))
    cas = metrics.summarize(runner.run_one("fluid", sc, CASSINI, 0))
    assert cassini_plan(resolve(sc, CASSINI, 0)).link_scores["bottleneck:swL->swR"] < 1.0
    assert cas["jobs"]["a"]["mean"] < fair["jobs"]["a"]["mean"]
