"""Cassini applied to scenarios: demands from the dedicated profile, shifted starts, and
the shifted run interleaving from the first iteration on the fluid model."""

from __future__ import annotations

import dataclasses
import json

import pytest

from mltcp.lab import metrics, runner
from mltcp.lab.graph import graph_for
from mltcp.lab.models import fluid
from mltcp.lab.scenario import Scheme, load_scenario, placement
from mltcp.lab.schedule import apply_schedule, cassini_plan, job_demand

CASSINI = Scheme("cassini", "cubic", False, schedule="cassini")


def test_demand_is_the_dedicated_profile() -> None:
    sc = load_scenario("model-parallel")
    job = sc.job("a")
    demand = job_demand(job, sc.topology, graph_for(sc.topology), placement(sc)["a"])
    burst_ms = job.comm_bytes_per_worker() * 0.5 * 8 / (1e9 * 1448 / 1514) * 1000
    assert demand.period_ms == pytest.approx(120 + 2 * burst_ms)
    (p0, p1) = demand.phases
    assert (p0.start_ms, p0.duration_ms, p0.demand) == pytest.approx((60, burst_ms, 1000))
    assert p1.start_ms == pytest.approx(60 + burst_ms + 60)


def test_compatible_pair_gets_a_shift_that_separates_the_phases() -> None:
    sc = load_scenario("compatible-pair")
    plan = cassini_plan(sc)
    assert all(score == pytest.approx(1.0) for score in plan.link_scores.values())
    demand = job_demand(sc.job("a"), sc.topology, graph_for(sc.topology), placement(sc)["a"])
    comm = demand.phases[0].duration_ms
    gap = (plan.shifts_ms["b"] - plan.shifts_ms["a"]) % demand.period_ms
    assert comm <= gap <= demand.period_ms - comm      # b communicates while a computes


def test_without_a_schedule_nothing_moves() -> None:
    sc = load_scenario("compatible-pair")
    assert apply_schedule(sc, sc.scheme("cubic")) == (sc, {})


def test_a_job_never_starts_before_its_own_start() -> None:
    sc = load_scenario("compatible-pair")
    late = dataclasses.replace(sc, jobs=(sc.jobs[0], dataclasses.replace(
        sc.jobs[1], start_offset_ms=1000.0)))
    shifted, added = apply_schedule(late, CASSINI)
    plan = cassini_plan(late)
    period = job_demand(late.job("b"), late.topology, graph_for(late.topology),
                        placement(late)["b"]).period_ms
    b = shifted.job("b")
    assert 1000.0 <= b.start_offset_ms < 1000.0 + period
    periods_later = (b.start_offset_ms - plan.shifts_ms["b"]) / period
    assert periods_later == pytest.approx(round(periods_later), abs=1e-9)
    assert added["b"] == pytest.approx(b.start_offset_ms - 1000.0)


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
    shifted, _ = apply_schedule(sc, CASSINI)
    fair = metrics.summarize(fluid.run_once(sc, sc.scheme("cubic"), 0))
    cas = metrics.summarize(fluid.run_once(shifted, CASSINI, 0))
    assert cassini_plan(sc).link_scores["bottleneck:swL->swR"] < 1.0   # cannot fit
    assert cas["jobs"]["a"]["mean"] < fair["jobs"]["a"]["mean"]
