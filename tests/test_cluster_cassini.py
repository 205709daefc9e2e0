"""Cassini in the cluster simulator: candidate placements ranked by Algorithm 2, and
time-shifts with drift correction applied to running jobs (thesis chapter 4)."""

from __future__ import annotations

import random

import numpy as np
import pytest

from mltcp.core.errors import SpecError
from mltcp.lab.cluster.engine.gpu_jobs import JobRequest, PlacedJob
from mltcp.lab.cluster.engine.leafspine import LeafSpine
from mltcp.lab.cluster.engine.network import Network
from mltcp.lab.cluster.engine.scheduling import Allocation, ClusterView, QueuedJob, RunningJob
from mltcp.lab.cluster.engine.simulator import ClusterSim
from mltcp.lab.cluster.experiments.registry import scheduler
from mltcp.lab.cluster.papers.cassini.links import (
    closes_loop,
    lockstep_periods,
    shared_links,
    solve_link,
    traffic,
)
from mltcp.lab.cluster.papers.cassini.schedulers import (
    CassiniScheduler,
    candidate_allocations,
    rank_candidates,
)
from mltcp.lab.cluster.papers.cassini.themis import ThemisScheduler
from mltcp.lab.cluster.papers.cassini.timeshifts import CassiniNetwork, ShiftPlan, holds, shift_plan
from mltcp.lab.cluster.schedulers.queue import QueueScheduler
from mltcp.lab.common.cassini import JobDemand, Phase

# One GPU per server, so that every 2-GPU job is a ring over two servers; the leaves'
# uplinks carry what one NIC does (2 servers x 10 Gbit / 2 oversubscription).
FOUR_LEAVES = LeafSpine(leaves=4, servers_per_leaf=2, spines=1, gpus_per_server=1,
                        server_gbit=10, oversubscription=2)
TWO_LEAVES = LeafSpine(leaves=2, servers_per_leaf=2, spines=1, gpus_per_server=1,
                       server_gbit=10, oversubscription=2)
RATE = float(TWO_LEAVES.capacities()[0])        # payload bytes/s of a NIC and an uplink


def _job(name: str, servers: tuple[int, ...], compute_s: float, comm_s: float,
         iterations: int = 100) -> tuple[JobRequest, PlacedJob]:
    """A 2-server job whose ring sends ``comm_s`` x the link rate per iteration (a ring
    over two servers sends the gradient bytes once each way)."""
    req = JobRequest(name, 0.0, len(servers), compute_s, comm_s * RATE, iterations)
    placed = PlacedJob(name, tuple((s, 1) for s in servers), compute_s, comm_s * RATE,
                       iterations, spines=(0,) * len(servers))
    return req, placed


def _fixed(places: dict[str, Allocation], round_s: float) -> QueueScheduler:
    """Jobs on given GPUs, in arrival order: the network scheme alone is under test."""
    return QueueScheduler("fixed", lambda job, now: (job.request.arrival_s,),
                          lambda view, job: places[job.name], round_s=round_s)


def _outcomes(fabric: LeafSpine, reqs: list[JobRequest], places: dict[str, Allocation],
              network: Network, round_s: float) -> dict:
    res = ClusterSim(fabric, reqs, _fixed(places, round_s), network).run()
    return {j.name: j for j in res.jobs}


# --------------------------------------------------------------------------------------
# Step 2: ranking candidates


def test_ranking_prefers_the_placement_whose_shared_links_interleave() -> None:
    # x communicates 83% of its iteration, y 31%.  z (38%) can go under the leaves of x
    # (servers 1, 3: it shares x's uplinks, their Up phases cannot both fit) or of y
    # (servers 5, 7: they fit side by side).
    _, x = _job("x", (0, 2), 0.02, 0.10)
    _, y = _job("y", (4, 6), 0.11, 0.05)
    _, z_by_x = _job("z", (1, 3), 0.10, 0.06)
    _, z_by_y = _job("z", (5, 7), 0.10, 0.06)
    others = [traffic(x, FOUR_LEAVES), traffic(y, FOUR_LEAVES)]
    ranked = rank_candidates(FOUR_LEAVES, others,
                             [traffic(z_by_x, FOUR_LEAVES), traffic(z_by_y, FOUR_LEAVES)])
    assert [i for i, _ in ranked] == [1, 0]
    assert ranked[0][1] == pytest.approx(1.0)
    assert ranked[1][1] < 0.95
    # A placement that shares nothing scores 1 as well.
    _, alone = _job("z", (1, 5), 0.1, 0.06)
    assert rank_candidates(FOUR_LEAVES, [], [traffic(alone, FOUR_LEAVES)]) == [(0, 1.0)]


def test_the_scheduler_places_a_job_where_the_base_placement_would_not() -> None:
    (rx, x), (ry, y) = _job("x", (0, 2), 0.02, 0.10), _job("y", (4, 6), 0.11, 0.05)
    z = QueuedJob(JobRequest("z", 1.0, 2, 0.10, 0.06 * RATE, 100))

    def view() -> ClusterView:
        free = np.array([0, 1] * 4)
        running = (RunningJob(x, rx, 0, 0.0, 0.0), RunningJob(y, ry, 0, 0.0, 0.0))
        return ClusterView(FOUR_LEAVES, 1.0, free, running, (z,), random.Random(0))

    base = scheduler("fifo/consolidated", FOUR_LEAVES).decide(view())
    assert {s for s, _ in base.start[0][1].gpus} == {1, 3}        # under x's leaves
    decision = CassiniScheduler().decide(view())
    (job, where), = decision.start
    assert job.name == "z" and {s for s, _ in where.gpus} == {5, 7}
    assert where.spines == (0, 0)                                  # source-routed


def test_a_job_that_fits_on_one_server_stays_off_the_network() -> None:
    fabric = LeafSpine(leaves=2, servers_per_leaf=2, spines=2, gpus_per_server=4,
                       server_gbit=10)
    free = np.array([4, 2, 4, 3])
    job = QueuedJob(JobRequest("j", 0.0, 3, 0.1, 50e6, 10))
    view = ClusterView(fabric, 0.0, free, (), (job,), random.Random(1))
    (_, where), = CassiniScheduler().decide(view).start
    assert where.gpus == ((3, 3),) and where.spines is None        # best fit, one server


def test_candidates_are_distinct_free_and_source_routed() -> None:
    fabric = LeafSpine(leaves=3, servers_per_leaf=2, spines=2, gpus_per_server=2)
    free = np.array([2, 1, 2, 0, 1, 2])
    cands = candidate_allocations(fabric, free, 4, random.Random(3), limit=8)
    assert 1 < len(cands) <= 8
    assert len({(a.gpus, a.spines) for a in cands}) == len(cands)
    for a in cands:
        assert a.gpu_count == 4
        assert all(n <= free[s] for s, n in a.gpus)
        assert a.spines is not None and len(a.spines) == len(a.gpus)
    assert candidate_allocations(fabric, free, 9, random.Random(3)) == []


def test_a_candidate_that_closes_a_loop_is_discarded() -> None:
    # a and b share link L1; c shares L2 with a and L3 with b: a loop through c.
    assert closes_loop({"a": ("L1", "L2"), "b": ("L1", "L3"), "c": ("L2", "L3")}, "c")
    assert not closes_loop({"a": ("L1", "L2"), "b": ("L1",), "c": ("L2",)}, "c")
    # Two jobs under the same two leaves share four links (both directions of both
    # uplinks) that carry the same demands: merged, they make no loop.
    _, a = _job("a", (0, 2), 0.1, 0.05)
    _, b = _job("b", (1, 3), 0.1, 0.05)
    ranked = rank_candidates(TWO_LEAVES, [traffic(a, TWO_LEAVES)], [traffic(b, TWO_LEAVES)])
    assert ranked == [(0, pytest.approx(1.0))]


# --------------------------------------------------------------------------------------
# Step 3: time-shifts and drift correction


def test_shifts_interleave_two_jobs_sharing_an_uplink_where_fair_sharing_collides() -> None:
    # Each job computes 100 ms and all-reduces 60 ms alone; started together under fair
    # sharing they all-reduce together at half the rate every iteration (220 ms).
    (ra, _), (rb, _) = _job("a", (0, 2), 0.1, 0.06), _job("b", (1, 3), 0.1, 0.06)
    places = {"a": Allocation(((0, 1), (2, 1)), (0, 0)),
              "b": Allocation(((1, 1), (3, 1)), (0, 0))}
    fair = _outcomes(TWO_LEAVES, [ra, rb], places, Network(), 0.5)
    shifted = _outcomes(TWO_LEAVES, [ra, rb], places, CassiniNetwork(), 0.5)
    for name in "ab":
        assert fair[name].slowdown == pytest.approx(0.22 / 0.16, rel=1e-3)
        assert shifted[name].slowdown < 1.01          # one shift (< a period) at the start
    assert shifted["a"].end_s != shifted["b"].end_s     # one of them was held back


def test_drift_correction_keeps_slightly_different_periods_interleaved() -> None:
    # b computes 4 ms longer: shifted once, b's Up phase drifts into a's next one within
    # ten iterations and they collide from then on, over and over.  Re-aligned every
    # 0.5 s (three iterations), a is held to b's pace and neither collides.
    (ra, _), (rb, _) = _job("a", (0, 2), 0.100, 0.06), _job("b", (1, 3), 0.104, 0.06)
    places = {"a": Allocation(((0, 1), (2, 1)), (0, 0)),
              "b": Allocation(((1, 1), (3, 1)), (0, 0))}
    once = _outcomes(TWO_LEAVES, [ra, rb], places, CassiniNetwork(), 0.0)
    kept = _outcomes(TWO_LEAVES, [ra, rb], places, CassiniNetwork(), 0.5)
    fair = _outcomes(TWO_LEAVES, [ra, rb], places, Network(), 0.5)
    assert kept["b"].slowdown < 1.01
    assert kept["a"].jct_s == pytest.approx(100 * 0.164, rel=0.01)   # b's period
    assert once["b"].slowdown > 1.08
    assert fair["b"].slowdown > 1.08
    assert max(j.jct_s for j in kept.values()) < 0.95 * max(j.jct_s for j in once.values())


def test_shifts_put_up_phases_in_the_middle_of_the_room_left() -> None:
    # 60 ms Up phases in 160 ms iterations: any shift from 60 to 100 ms scores 1; the
    # search returns 60 (back to back), the plan the middle, 80 (20 ms either side).
    _, a = _job("a", (0, 2), 0.1, 0.06)
    _, b = _job("b", (1, 3), 0.1, 0.06)
    plan = shift_plan(TWO_LEAVES, [traffic(a, TWO_LEAVES), traffic(b, TWO_LEAVES)])
    assert plan.shift_s == {"a": 0.0, "b": pytest.approx(0.08, abs=0.16 / 72)}
    assert plan.groups == (("a", "b"),) and plan.compatible(0.99) == [0]
    fit = plan.links[0][0]
    assert fit.score == pytest.approx(1.0)
    assert fit.score_at({"a": 0.0, "b": 0.0}) == pytest.approx(1 - 60 / 160)


def test_only_compatible_groups_are_kept_on_their_shifts() -> None:
    # x (83% communication) and z cannot interleave: their plan overlaps, so they get
    # their shifts when one of them starts, and are left alone afterwards.
    (rx, x), (rz, z) = _job("x", (0, 2), 0.02, 0.10), _job("z", (1, 3), 0.10, 0.06)
    net = CassiniNetwork()
    together = [0.5, 0.5]                      # both start communicating now

    def delays(iteration_s: float) -> list[float]:
        running = (RunningJob(x, rx, 5, 0.0, 0.2), RunningJob(z, rz, 0, 0.0, iteration_s))
        return net.delays(TWO_LEAVES, 0, running, together, 0.4)

    assert delays(0.0) != [0.0, 0.0]           # z has just started: shifted
    assert delays(0.16) == [0.0, 0.0]          # both running for a while: left alone
    # Two jobs that interleave are re-aligned however long they have been running.
    (ra, a), (rb, b) = _job("a", (0, 2), 0.1, 0.06), _job("b", (1, 3), 0.1, 0.06)
    running = (RunningJob(a, ra, 5, 0.0, 0.16), RunningJob(b, rb, 5, 0.0, 0.16))
    held = net.delays(TWO_LEAVES, 0, running, together, 0.4)
    assert sorted(held) == [0.0, pytest.approx(0.08, abs=0.16 / 72)]


def test_holds_pick_the_frame_that_delays_least() -> None:
    plan = ShiftPlan({"a": 0.0, "b": 0.5}, {"a": 1.0, "b": 1.0}, {"a": 0.0, "b": 0.0},
                     (("a", "b"),), ((),))
    # a communicates at 0, b at 0.2: b is 0.3 early (hold it) rather than 0.7 late.
    assert holds(plan, ["a", "b"], [0.0, 0.2], 0.02) == [0.0, pytest.approx(0.3)]
    assert holds(plan, ["b", "a"], [0.2, 0.0], 0.02) == [pytest.approx(0.3), 0.0]
    # On target (within the tolerance), or not running: nothing held.
    assert holds(plan, ["a", "b"], [0.0, 0.51], 0.02) == [0.0, 0.0]
    assert holds(plan, ["a", "b"], [0.0, float("nan")], 0.02) == [0.0, 0.0]


# --------------------------------------------------------------------------------------
# Heterogeneous periods


def test_near_equal_periods_lock_step_and_distinct_ones_keep_their_own() -> None:
    periods = lockstep_periods({"a": 0.240, "b": 0.155, "c": 0.235}, 0.05)
    assert periods == {"a": 0.240, "b": 0.155, "c": 0.240}
    assert lockstep_periods({"a": 0.240, "c": 0.235}, 0.0) == {"a": 0.240, "c": 0.235}


def test_periods_of_240_155_235_ms_are_solved_on_one_link() -> None:
    jobs = [JobDemand(n, p, (Phase(p - 50, 50, 10.0),))
            for n, p in (("a", 240.0), ("b", 155.0), ("c", 235.0))]
    found = solve_link(jobs, 10.0).solution          # 1 ms: LCM 349,680 ms, too long
    assert set(found.shifts_ms) == {"a", "b", "c"}
    assert all(0 <= found.shifts_ms[j.name] < j.period_ms for j in jobs)
    assert -1 < found.score <= 1


def test_periods_without_a_bounded_circle_put_their_group_in_lock_step() -> None:
    # Four 2-server jobs through one uplink, iterations of 300/400/500/700 ms alone: 42 s
    # even at 100 ms resolution (more bins than a link allows).  The group goes in
    # lock-step at the longest period on every link instead of refusing, and the plan is
    # made (one period per job on all its links).
    fabric = LeafSpine(leaves=2, servers_per_leaf=4, spines=1, gpus_per_server=1,
                       server_gbit=10, oversubscription=4)
    jobs = [PlacedJob(n, ((i, 1), (i + 4, 1)), p - 0.06, 0.06 * RATE, 10, spines=(0, 0))
            for i, (n, p) in enumerate((("a", .3), ("b", .4), ("c", .5), ("d", .7)))]
    links = shared_links(fabric, [traffic(j, fabric) for j in jobs], 0.05)
    assert sorted(links.periods_s.values()) == pytest.approx([0.7] * 4, rel=0.01)
    for demands in links.jobs.values():
        assert [d.period_ms for d in demands] == pytest.approx([700.0] * len(demands),
                                                               rel=0.01)
    plan = shift_plan(fabric, [traffic(j, fabric) for j in jobs])
    assert set(plan.shift_s) >= {"a", "b", "c", "d"}
    two = shared_links(fabric, [traffic(j, fabric) for j in jobs[:2]], 0.05)
    assert sorted(two.periods_s.values()) == [pytest.approx(0.3), pytest.approx(0.4)]


def _three_jobs() -> tuple[LeafSpine, list[JobRequest], dict[str, Allocation]]:
    """Three 2-server jobs through the same two leaves' uplinks, 50 ms all-reduces, and
    iterations of 240, 155 and 235 ms alone."""
    fabric = LeafSpine(leaves=2, servers_per_leaf=3, spines=1, gpus_per_server=1,
                       server_gbit=10, oversubscription=3)
    reqs = [JobRequest(n, 0.0, 2, p - 0.05, 0.05 * RATE, 40)
            for n, p in (("a", 0.240), ("b", 0.155), ("c", 0.235))]
    places = {n: Allocation(((i, 1), (i + 3, 1)), (0, 0)) for i, n in enumerate("abc")}
    return fabric, reqs, places


def test_heterogeneous_periods_run_through_the_network_scheme() -> None:
    fabric, reqs, places = _three_jobs()
    jobs = [PlacedJob(r.name, places[r.name].gpus, r.compute_s, r.gradient_bytes,
                      r.iterations, spines=places[r.name].spines) for r in reqs]
    assert [traffic(j, fabric).period_s for j in jobs] == pytest.approx([0.24, 0.155, 0.235])
    plan = shift_plan(fabric, [traffic(j, fabric) for j in jobs])
    assert set(plan.shift_s) == {"a", "b", "c"} and plan.groups == (("a", "b", "c"),)
    assert plan.period_s == pytest.approx({"a": 0.24, "b": 0.155, "c": 0.24})
    res = _outcomes(fabric, reqs, places, CassiniNetwork(), 1.0)
    assert set(res) == {"a", "b", "c"}
    assert all(j.slowdown >= 1 - 1e-9 for j in res.values())


def test_heterogeneous_periods_run_through_the_scheduler() -> None:
    # a (240 ms) and b (155 ms alone, 310 ms measured) run; c (235 ms) is placed next to
    # them: its links' circles mix all three periods.
    fabric, reqs, places = _three_jobs()
    running = tuple(RunningJob(PlacedJob(r.name, places[r.name].gpus, r.compute_s,
                                         r.gradient_bytes, r.iterations,
                                         spines=places[r.name].spines), r, 0, 0.0, it_s)
                    for r, it_s in zip(reqs[:2], (0.0, 0.31), strict=True))
    others = [traffic(r.job, fabric).with_period(r.iteration_s) for r in running]
    assert [t.period_s for t in others] == pytest.approx([0.24, 0.31])
    c = PlacedJob("c", ((2, 1), (5, 1)), reqs[2].compute_s, reqs[2].gradient_bytes, 40,
                  spines=(0, 0))
    (index, score), = rank_candidates(fabric, others, [traffic(c, fabric)])
    assert index == 0 and -1 < score < 1               # 240 + 235 lock-step, 310 apart
    view = ClusterView(fabric, 1.0, np.array([0, 0, 1, 0, 0, 1]), running,
                       (QueuedJob(reqs[2]),), random.Random(0))
    (job, where), = CassiniScheduler().decide(view).start
    assert job.name == "c" and where.gpus == ((2, 1), (5, 1))


# --------------------------------------------------------------------------------------
# The Themis stand-in: Themis's candidates, one drawn blind to the network


def _x_runs_and_z_needs_three() -> tuple[RunningJob, QueuedJob, np.ndarray]:
    """x communicates 83 % of its iteration on servers 0 and 2 (leaves 0 and 1); z asks
    for 3 GPUs, more than a leaf holds, so every cross-rack placement is worth the same
    to Themis: those with server 1 or 3 share x's leaf links, (4, 5, 6) shares none."""
    rx, x = _job("x", (0, 2), 0.02, 0.10)
    z = QueuedJob(JobRequest("z", 1.0, 3, 0.02, 0.10 * RATE, 100))
    return RunningJob(x, rx, 0, 0.0, 0.0), z, np.array([0, 1, 0, 1, 1, 1, 1, 1])


def test_themis_places_jobs_on_links_others_use_where_th_cassini_does_not() -> None:
    running, z, free = _x_runs_and_z_needs_three()
    x_links = traffic(running.job, FOUR_LEAVES).links()
    themis, th_cassini = (scheduler(name, FOUR_LEAVES) for name in ("themis", "themis-cassini"))
    shared = 0
    def view(seed: int) -> ClusterView:
        return ClusterView(FOUR_LEAVES, 1.0, free.copy(), (running,), (z,), random.Random(seed))

    for seed in range(20):
        (_, blind), = themis.decide(view(seed)).start
        assert blind.gpu_count == 3 and all(free[s] >= n for s, n in blind.gpus)
        assert blind.spines is None                       # ECMP: Themis picks no paths
        placed = PlacedJob("z", blind.gpus, 0.02, 0.10 * RATE, 100)
        shared += bool(traffic(placed, FOUR_LEAVES).links() & x_links)
        (_, ranked), = th_cassini.decide(view(seed)).start
        placed = PlacedJob("z", ranked.gpus, 0.02, 0.10 * RATE, 100, spines=ranked.spines)
        assert not traffic(placed, FOUR_LEAVES).links() & x_links
    assert 0 < shared < 20              # blind: sometimes on x's links, sometimes not


def test_themis_and_th_cassini_keep_a_job_that_fits_in_a_rack_in_one() -> None:
    z = QueuedJob(JobRequest("z", 0.0, 2, 0.1, 0.05 * RATE, 10))
    for name in ("themis", "themis-cassini"):
        for seed in range(10):
            view = ClusterView(FOUR_LEAVES, 0.0, np.ones(8, dtype=int), (), (z,),
                               random.Random(seed))
            (_, where), = scheduler(name, FOUR_LEAVES).decide(view).start
            assert len({FOUR_LEAVES.leaf_of(s) for s, _ in where.gpus}) == 1


def test_themis_lets_a_job_that_fits_pass_one_that_does_not() -> None:
    # An auction offers the free GPUs to every bidder: no head-of-line blocking.
    big = QueuedJob(JobRequest("big", 0.0, 8, 0.1, 0.05 * RATE, 10))
    small = QueuedJob(JobRequest("small", 1.0, 2, 0.1, 0.05 * RATE, 10))
    free = np.array([1, 1, 1, 1, 0, 0, 0, 0])
    for name in ("themis", "themis-cassini"):
        view = ClusterView(FOUR_LEAVES, 1.0, free.copy(), (), (big, small), random.Random(0))
        assert [job.name for job, _ in scheduler(name, FOUR_LEAVES).decide(view).start] \
            == ["small"]


@pytest.mark.parametrize("name", ["themis", "themis-cassini"])
def test_a_cluster_run_with_the_themis_stand_in_finishes_every_job(name: str) -> None:
    fabric = LeafSpine(leaves=3, servers_per_leaf=2, spines=2, gpus_per_server=1,
                       server_gbit=10, oversubscription=2)
    rng = random.Random(5)
    reqs = [JobRequest(f"j{i}", 0.5 * i, rng.choice([1, 2, 3, 4]), rng.uniform(0.05, 0.2),
                       rng.uniform(0.02, 0.08) * RATE, rng.randint(20, 60))
            for i in range(12)]
    res = ClusterSim(fabric, reqs, scheduler(name, fabric), CassiniNetwork()).run()
    assert {j.name for j in res.jobs} == {r.name for r in reqs} and res.scheduler == name
    assert all(j.iterations == r.iterations for j, r in
               zip(res.jobs, sorted(reqs, key=lambda r: r.name), strict=True))


@pytest.mark.parametrize("rails", [1, 2])
def test_a_cluster_run_with_cassini_finishes_every_job(rails: int) -> None:
    fabric = LeafSpine(leaves=3, servers_per_leaf=2, spines=2, gpus_per_server=2,
                       server_gbit=10 / rails, oversubscription=2, rails=rails)
    rng = random.Random(4)
    reqs = [JobRequest(f"j{i}", 0.5 * i, rng.choice([3, 4, 5]), rng.uniform(0.05, 0.2),
                       rng.uniform(0.02, 0.08) * RATE, rng.randint(20, 60))
            for i in range(10)]
    res = ClusterSim(fabric, reqs, CassiniScheduler(round_s=1.0), CassiniNetwork()).run()
    assert {j.name for j in res.jobs} == {r.name for r in reqs}
    assert res.scheduler == "cassini" and res.network == "cassini"
    # Holding a job back never makes it faster than alone on its GPUs.
    assert all(j.held_s >= j.dedicated_s * (1 - 1e-9) and j.jwt_s >= 0 for j in res.jobs)


def test_bad_settings_name_the_field() -> None:
    with pytest.raises(SpecError, match="cassini.candidates"):
        CassiniScheduler(candidates=0)
    with pytest.raises(SpecError, match="themis.candidates"):
        ThemisScheduler(candidates=0)
    with pytest.raises(SpecError, match="cassini.round_s"):
        CassiniScheduler(round_s=-1.0)
    with pytest.raises(SpecError, match="cassini.tolerance"):
        CassiniNetwork(tolerance=0.9)
