"""The resolved plan: placement, seeded starts and jitter, ECMP paths, idle gaps, ECN
thresholds, centralized shifts, and the round trip to a worker process."""

from __future__ import annotations

import dataclasses
import json

import pytest

from mltcp.lab.scenario import schedule
from mltcp.lab.scenario.graph import ring_flow_path, ring_link_ids
from mltcp.lab.scenario.plan import (
    compute_jitter_ms,
    ecn_threshold_bytes,
    from_dict,
    idle_gap_ms,
    phase_bytes,
    placement,
    resolve,
    shifted,
)
from mltcp.lab.scenario.spec import (
    DEDICATED,
    JobPhase,
    Scheme,
    list_examples,
    load_scenario,
    parse_scenario,
)
from tests.test_scenario import dumbbell, leaf_spine


def test_placement_compatible_pair_crosses_the_bottleneck() -> None:
    s = load_scenario("compatible-pair")
    assert placement(s) == {"a": ("h1", "h3"), "b": ("h2", "h4")}
    assert [s.topology.side(h) for h in s.topology.host_names()] == [
        "left", "left", "right", "right"]


def test_placement_three_jobs_and_leaf_spine() -> None:
    assert placement(load_scenario("three-jobs")) == {
        "a": ("h1", "h4"), "b": ("h2", "h5"), "c": ("h3", "h6")}
    assert placement(load_scenario("leaf-spine")) == {"a": ("h1", "h3"), "b": ("h2", "h4")}


def test_placement_keeps_explicit_and_alternates_larger_jobs() -> None:
    data = dumbbell()
    data["jobs"][0]["placement"] = ["h4", "h2"]
    data["jobs"][1]["workers"] = 4
    assert placement(parse_scenario(data)) == {"a": ("h4", "h2"), "b": ("h1", "h3", "h2", "h4")}


def test_placement_odd_dumbbell_fills_the_larger_side() -> None:
    data = dumbbell()
    data["topology"]["hosts"] = 3  # h1 left; h2, h3 right
    data["jobs"][0]["workers"] = 3
    s = parse_scenario(data)
    # b wraps round-robin on both sides: left h1 again, right back to h2.
    assert placement(s) == {"a": ("h1", "h2", "h3"), "b": ("h1", "h2")}


def test_placement_leaf_spine_puts_consecutive_workers_on_different_leaves() -> None:
    data = leaf_spine()
    data["topology"] |= {"leaves": 3, "hosts_per_leaf": 2}
    data["jobs"][0]["workers"] = 5
    s = parse_scenario(data)
    hosts = placement(s)
    assert hosts["a"] == ("h1", "h3", "h5", "h2", "h4")
    for job_hosts in hosts.values():
        leaves = [s.topology.leaf(h) for h in job_hosts]
        assert all(x != y for x, y in zip(leaves, leaves[1:], strict=False))
        assert len(set(job_hosts)) == len(job_hosts)


def test_compute_jitter_is_seeded_per_job_and_never_negative() -> None:
    data = dumbbell()
    for job in data["jobs"]:
        job["compute_jitter_ms"] = 200.0          # larger than the 120 ms compute
    sc = parse_scenario(data)
    assert sc.job("a").compute_jitter_ms == 200.0
    assert parse_scenario(sc.to_dict()) == sc
    one, again, other = compute_jitter_ms(sc, 1), compute_jitter_ms(sc, 1), compute_jitter_ms(sc, 2)
    assert one == again and one != other and one["a"] != one["b"]
    assert all(len(v) == 40 for v in one.values())
    assert min(min(v) for v in one.values()) >= -120.0      # compute never below 0 ms
    assert compute_jitter_ms(load_scenario("compatible-pair"), 1)["a"] == [0.0] * 40


def test_links_mark_ecn_wherever_the_topology_says_and_for_dctcp() -> None:
    plain = load_scenario("compatible-pair-droptail")
    assert ecn_threshold_bytes(plain.topology, plain.scheme("cubic")) is None
    dctcp = Scheme("d", "dctcp", False)
    assert ecn_threshold_bytes(plain.topology, dctcp) == 30_000
    marked = dataclasses.replace(plain.topology, ecn_threshold_bytes=100_000)
    for scheme in (plain.scheme("cubic"), plain.scheme("mltcp-reno"), dctcp):
        assert ecn_threshold_bytes(marked, scheme) == 100_000


# -- the plan as a whole --------------------------------------------------------------

@pytest.mark.parametrize("name", list_examples())
def test_every_flow_takes_its_seeds_drawn_path(name: str) -> None:
    sc = load_scenario(name)
    for seed in (0, 3):
        plan = resolve(sc, sc.schemes[0], seed)
        for job in plan.jobs:
            assert job.hosts == placement(sc)[job.name]
            assert list(job.links) == ring_link_ids(plan.graph, job.hosts)
            for i, flow in enumerate(job.flows):
                assert (flow.src, flow.dst) == (job.hosts[i], job.hosts[(i + 1) % len(job.hosts)])
                assert list(flow.hops) == ring_flow_path(plan.graph, job.hosts, i, seed,
                                                         job.name)
            assert job.compute_jitter_ms == tuple(compute_jitter_ms(sc, seed)[job.name])
            assert job.idle_gap_ms == idle_gap_ms(job.spec)
            assert 0 <= job.tie_break_ms < 1 and job.start_ms == job.tie_break_ms \
                + job.spec.start_offset_ms
        assert plan.ecn_threshold_bytes == ecn_threshold_bytes(sc.topology, sc.schemes[0])


def test_a_dedicated_plan_keeps_every_job_and_runs_one() -> None:
    sc = load_scenario("three-jobs")
    full, alone = resolve(sc, sc.schemes[0], 2), resolve(sc, DEDICATED, 2, only_job="b")
    assert [j.name for j in alone.jobs] == ["a", "b", "c"]
    assert [j.name for j in alone.active_jobs] == ["b"]
    assert alone.stem == "dedicated-b-seed2" and full.stem == f"{sc.schemes[0].name}-seed2"
    # the same draws as the full run: one seed, one experiment
    assert [j.flows for j in alone.jobs] == [j.flows for j in full.jobs]
    assert [j.start_ms for j in alone.jobs] == [j.start_ms for j in full.jobs]
    with pytest.raises(Exception, match="no-such"):
        resolve(sc, DEDICATED, 2, only_job="no-such")


def test_seeds_differ_only_in_their_draws() -> None:
    sc = load_scenario("leaf-spine")
    a, b = resolve(sc, sc.schemes[0], 0), resolve(sc, sc.schemes[0], 1)
    assert [j.hosts for j in a.jobs] == [j.hosts for j in b.jobs]
    assert [j.start_ms for j in a.jobs] != [j.start_ms for j in b.jobs]


@pytest.mark.parametrize("name", list_examples())
def test_a_plan_survives_the_trip_to_a_worker_process(name: str) -> None:
    sc = load_scenario(name)
    [plan] = schedule.apply([resolve(sc, sc.schemes[-1], 5)])
    again = from_dict(json.loads(json.dumps(plan.to_dict())))
    assert again == plan


def test_a_shift_moves_the_start_and_keeps_the_tie_break() -> None:
    sc = load_scenario("compatible-pair")
    plan = resolve(sc, Scheme("c", "cubic", False, schedule="cassini"), 1)
    moved = shifted(plan, {"b": 37.5})
    a, b = moved.job("a"), moved.job("b")
    assert a == plan.job("a")
    assert b.shift_ms == 37.5 and b.tie_break_ms == plan.job("b").tie_break_ms
    assert b.start_ms == pytest.approx(plan.job("b").start_ms + 37.5)
    assert moved.shifts_ms == {"a": 0.0, "b": 37.5}
    assert moved.trace_params()["shifts_ms"] == {"a": 0.0, "b": 37.5}
    assert "shifts_ms" not in resolve(sc, sc.scheme("cubic"), 1).trace_params()


def test_phase_bytes_add_up_exactly() -> None:
    job = load_scenario("model-parallel").jobs[0]
    assert phase_bytes(job) == [5_000_000, 5_000_000]
    thirds = dataclasses.replace(job, bytes_per_worker=1_000_001, phases=(
        JobPhase(10, 1 / 3), JobPhase(10, 1 / 3), JobPhase(10, 1 / 3)))
    split = phase_bytes(thirds)
    assert sum(split) == thirds.comm_bytes_per_worker() and max(split) - min(split) <= 1
    assert phase_bytes(load_scenario("compatible-pair").jobs[0]) == [10_000_000]
    sc = load_scenario("model-parallel")
    assert resolve(sc, sc.schemes[0], 0).job("a").phase_bytes == (5_000_000, 5_000_000)


def test_idle_gap_follows_the_compute_time_within_bounds():
    job = load_scenario("compatible-pair").jobs[0]
    assert idle_gap_ms(job) == 30       # compatible-pair: a quarter of compute
    for compute_ms, gap_ms in ((8, 5), (1000, 50)):    # never below the datapath's
        # default; long compute: a stall is still not a gap
        assert idle_gap_ms(dataclasses.replace(job, compute_ms=compute_ms)) == gap_ms
    mp = load_scenario("model-parallel").jobs[0]    # 2 x 60 ms of compute per iteration
    gap = idle_gap_ms(mp)
    assert gap > mp.compute_ms and gap > max(p.compute_ms for p in mp.phase_list())
    noisy = dataclasses.replace(mp, compute_jitter_ms=20)
    assert idle_gap_ms(noisy) > noisy.compute_ms + 4 * 20
