"""The cluster simulator's loop: arrivals, a FIFO queue, placement, the engine between
scheduling moments, and the jobs' times (JCT, JWT, makespan, utilisation)."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest

from mltcp.core.aggressiveness import Aggressiveness
from mltcp.core.errors import SpecError
from mltcp.lab.cluster.engine.gpu_jobs import PlacedJob, engine_state
from mltcp.lab.cluster.engine.leafspine import LeafSpine
from mltcp.lab.cluster.engine.network import Network
from mltcp.lab.cluster.engine.simulator import ClusterSim, JobRequest, poisson_arrivals
from mltcp.lab.cluster.experiments.registry import scheduler
from mltcp.lab.models import fluid_engine

FABRIC = LeafSpine(leaves=2, servers_per_leaf=2, spines=1, gpus_per_server=4,
                   server_gbit=10, oversubscription=1)


def _req(name: str, arrival: float, gpus: int, iterations: int = 10,
         compute: float = 0.1, nbytes: float = 50e6) -> JobRequest:
    return JobRequest(name, arrival, gpus, compute, nbytes, iterations)


def _sim(reqs: list[JobRequest], placement: str, f: Aggressiveness | None, seed: int = 0,
         order: str = "fifo") -> ClusterSim:
    return ClusterSim(FABRIC, reqs, scheduler(f"{order}/{placement}", FABRIC),
                      Network("fair" if f is None else "mltcp", f), seed=seed)


def test_jobs_on_one_server_each_take_their_compute_only() -> None:
    res = _sim([_req("a", 0.0, 4), _req("b", 0.5, 2)], "consolidated", None).run()
    a, b = res.jobs
    assert (a.start_s, a.end_s, a.servers) == (0.0, pytest.approx(1.0), 1)
    assert (b.start_s, b.jct_s, b.jwt_s) == (0.5, pytest.approx(1.0), 0.0)
    assert res.makespan_s == pytest.approx(1.5)
    assert res.gpu_utilisation() == pytest.approx((4 * 1.0 + 2 * 1.0) / (16 * 1.5))


def test_fifo_waits_for_gpus_and_the_head_blocks_the_queue() -> None:
    # 16 GPUs: a takes 12, b (8) must wait for a; c (2) arrives after b and waits too
    # (FIFO: the head blocks), although 4 GPUs are free.
    reqs = [_req("a", 0.0, 12, iterations=5), _req("b", 0.1, 8), _req("c", 0.2, 2)]
    res = {j.name: j for j in _sim(reqs, "first_fit", None).run().jobs}
    assert res["b"].start_s == pytest.approx(res["a"].end_s)
    assert res["c"].start_s == pytest.approx(res["a"].end_s)
    assert res["b"].jwt_s > 0 and res["c"].jwt_s > 0


def test_a_run_split_at_scheduling_moments_equals_one_engine_run() -> None:
    # Jobs that all start at once: the simulator rebuilds the engine each time one
    # ends (carrying the others' progress); one engine run without rebuilds must agree.
    reqs = [_req(f"j{i}", 0.0, 4, iterations=8 + 3 * i, nbytes=40e6 + 10e6 * i)
            for i in range(4)]
    for f in (None, Aggressiveness(4.0, 1.0)):
        res = _sim(reqs, "random", f, seed=2).run()
        placed = {j.name: j for j in res.jobs}
        rng = random.Random(2)
        free = np.full(FABRIC.servers, FABRIC.gpus_per_server)
        jobs = []
        from mltcp.lab.cluster.schedulers.placement import spread
        for r in reqs:
            where = spread(FABRIC, free, r.gpus, rng)
            for s, n in where:
                free[s] -= n
            jobs.append(PlacedJob(r.name, where, r.compute_s, r.gradient_bytes, r.iterations))
        st = engine_state(FABRIC, jobs, f)
        assert fluid_engine.advance_until(st, np.inf, 10**7) == fluid_engine.DONE
        for j, job in enumerate(jobs):
            assert placed[job.name].servers == len(job.gpus)
            assert placed[job.name].end_s == pytest.approx(st.end[j, job.iterations - 1],
                                                           rel=1e-9)


def test_a_run_in_slices_of_one_event_is_the_run_in_one_call(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # The engine returns to Python every slice of events (so that Ctrl-C is handled
    # during a long run): a simulation with one event per compiled call, preemption
    # and arrivals among them, gives the same outcomes as one with unbounded calls.
    reqs = [_req("big", 0.0, 16, iterations=40)] + [
        _req(f"j{i}", 1.0 + 0.3 * i, 4 + 2 * (i % 3), iterations=6 + 2 * i) for i in range(5)]
    results = []
    for per_call in (1 << 62, 1):
        monkeypatch.setattr(fluid_engine, "SLICE_EVENTS_MIN", per_call)
        monkeypatch.setattr(fluid_engine, "SLICE_EVENTS_MAX", per_call)
        results.append(_sim(reqs, "random+preempt", Aggressiveness(4.0, 1.0), seed=1,
                            order="las").run())
    whole, sliced = results
    assert sum(j.preemptions for j in whole.jobs) > 0
    assert sliced.jobs == whole.jobs
    assert sliced.events == whole.events


def test_a_watched_run_reports_its_progress_while_the_engine_runs(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # What a long run's progress lines read: the simulated time and the iterations
    # finished only grow, the floor is the latest job's arrival plus its compute alone.
    monkeypatch.setattr(fluid_engine, "SLICE_EVENTS_MAX", 5)
    reqs = [_req("a", 0.0, 8, iterations=30), _req("b", 2.0, 8, iterations=20)]
    seen = []
    _sim(reqs, "random", Aggressiveness(4.0, 1.0)).run(watch=lambda r: seen.append(r.progress()))
    assert len(seen) > 10
    assert all(p.iterations == 50 and p.makespan_floor_s == pytest.approx(4.0) for p in seen)
    assert [p.t for p in seen] == sorted(p.t for p in seen)
    done = [p.iterations_done for p in seen]
    assert done == sorted(done) and 0 < done[-1] <= 50 and seen[-1].fraction == done[-1] / 50


def test_poisson_arrivals_and_summary() -> None:
    rng = random.Random(0)
    reqs = poisson_arrivals(40, 360.0, rng, lambda i, t, r: _req(
        f"j{i}", t, r.choice([1, 2, 4, 8]), iterations=r.randint(5, 20)))
    gaps = np.diff([q.arrival_s for q in reqs])
    assert gaps.mean() == pytest.approx(10.0, rel=0.5)          # 360 jobs/hour
    res = _sim(reqs, "consolidated", Aggressiveness(4.0, 1.0)).run()
    assert len(res.jobs) == 40 and res.events > 0
    summary = res.jct_summary()
    assert summary["p50"] <= summary["p90"] <= summary["p99"]
    assert all(j.jct_s >= j.jwt_s >= 0 for j in res.jobs)


def test_bad_requests_name_the_field() -> None:
    with pytest.raises(SpecError, match=r"jobs\[big\].gpus"):
        _sim([_req("big", 0.0, 17)], "first_fit", None)
    with pytest.raises(SpecError, match="scheduler"):
        _sim([_req("a", 0.0, 1)], "nosuch", None)
    with pytest.raises(SpecError, match=r"jobs\[a\]"):
        _sim([_req("a", 0.0, 1), _req("a", 1.0, 1)], "first_fit", None)
    with pytest.raises(SpecError, match=r"jobs\[a\].arrival_s"):
        _req("a", -1.0, 1)
    with pytest.raises(SpecError, match=r"jobs\[a\].compute_s"):    # at arrival, not later
        _req("a", 0.0, 1, compute=-0.1)


def test_backfill_lets_a_job_that_fits_pass_the_waiting_head() -> None:
    reqs = [_req("a", 0.0, 12, iterations=5), _req("b", 0.1, 8), _req("c", 0.2, 2)]
    res = {j.name: j for j in _sim(reqs, "first_fit+backfill", None).run().jobs}
    assert res["c"].start_s == pytest.approx(0.2)                # 4 GPUs were free
    assert res["b"].start_s == pytest.approx(res["a"].end_s)


def test_srtf_starts_the_shorter_waiting_job_first() -> None:
    # a holds 12 of 16 GPUs; b (long) and c (short) both need 12 and wait for a.
    reqs = [_req("a", 0.0, 12, iterations=5), _req("b", 0.1, 12, iterations=50),
            _req("c", 0.2, 12, iterations=5)]
    fifo = {j.name: j for j in _sim(reqs, "consolidated", None).run().jobs}
    srtf = {j.name: j for j in _sim(reqs, "consolidated", None, order="srtf").run().jobs}
    assert fifo["b"].start_s < fifo["c"].start_s
    assert srtf["c"].start_s < srtf["b"].start_s
    assert srtf["c"].start_s == pytest.approx(srtf["a"].end_s)


def test_las_preempts_the_job_with_most_service_and_resumes_it_where_it_stopped() -> None:
    # a takes all 16 GPUs (a ring over 4 servers) for 100 iterations; b arrives at 1 s
    # needing 8: LAS ranks b (no service yet) before a and preempts a, which waits for
    # b's end (it needs all 16) and resumes from its last finished iteration.
    reqs = [_req("a", 0.0, 16, iterations=100), _req("b", 1.0, 8, iterations=10)]
    sim = ClusterSim(FABRIC, reqs, scheduler("las/consolidated+preempt", FABRIC),
                     Network(), seed=0)
    res = {j.name: j for j in sim.run().jobs}
    a, b = res["a"], res["b"]
    assert a.preemptions == 1 and b.preemptions == 0
    assert b.start_s == pytest.approx(1.0)          # an arrival is a scheduling moment
    per = a.dedicated_s / 100                       # alone, every iteration alike
    done = math.floor(1.0 / per)                    # the partial one is lost
    assert 0 < done < 100
    assert a.end_s == pytest.approx(b.end_s + (100 - done) * per, rel=1e-9)
    assert a.held_s == pytest.approx(1.0 + (100 - done) * per, rel=1e-9)
    assert a.jct_s > a.dedicated_s
    fifo = {j.name: j for j in _sim(reqs, "consolidated", None).run().jobs}
    assert fifo["a"].preemptions == 0 and fifo["b"].start_s == pytest.approx(fifo["a"].end_s)


def test_a_job_alone_has_slowdown_one_and_source_routes_are_honoured() -> None:
    # Two servers under different leaves: the ring crosses a spine; alone, the job runs
    # at its dedicated time exactly.
    fabric = LeafSpine(leaves=2, servers_per_leaf=1, spines=2, gpus_per_server=4,
                       server_gbit=10, oversubscription=2)
    job = PlacedJob("x", ((0, 4), (1, 4)), 0.1, 50e6, 10, spines=(1, 1))
    paths = job.flows(fabric)
    assert fabric.leaf_up(0, 1) in paths[0] and fabric.leaf_down(0, 1) in paths[1]
    nic = fabric.capacities()[0]
    up = fabric.capacities()[-1]
    assert job.dedicated_iteration_s(fabric) == pytest.approx(0.1 + 50e6 / min(nic, up))
    with pytest.raises(SpecError, match=r"jobs\[x\].spines"):
        PlacedJob("x", ((0, 4), (1, 4)), 0.1, 50e6, 10, spines=(1,))
    with pytest.raises(SpecError, match="spines"):
        PlacedJob("x", ((0, 4), (1, 4)), 0.1, 50e6, 10, spines=(2, 0)).flows(fabric)
    res = ClusterSim(fabric, [_req("x", 0.0, 8)], scheduler("fifo/first_fit", fabric),
                     Network()).run()
    assert res.jobs[0].slowdown == pytest.approx(1.0, rel=1e-9)


def test_a_ring_of_records_ends_every_job_where_full_records_do() -> None:
    # The simulator keeps a ring of each job's last 2 iterations' records; the run must be
    # the one that keeps them all, and the ring must hold the latest iterations.
    from mltcp.lab.cluster.schedulers.placement import spread

    rng, free = random.Random(5), np.full(FABRIC.servers, FABRIC.gpus_per_server)
    jobs = []
    for i in range(4):
        where = spread(FABRIC, free, 4, rng)
        for s, n in where:
            free[s] -= n
        jobs.append(PlacedJob(f"j{i}", where, 0.05 + 0.01 * i, 30e6, 7 + 2 * i))
    for f in (None, Aggressiveness(4.0, 1.0)):
        full, ring = engine_state(FABRIC, jobs, f), engine_state(FABRIC, jobs, f, ring=2)
        for st in (full, ring):
            assert fluid_engine.advance_until(st, np.inf, 10**7) == fluid_engine.DONE
        assert ring.end.shape[1] == 2
        for j, job in enumerate(jobs):
            for k in (job.iterations - 2, job.iterations - 1):
                c = fluid_engine.column(ring, k)
                assert ring.end[j, c] == full.end[j, k]
                assert ring.start[j, c] == full.start[j, k]
                assert ring.comm_start[j, c] == full.comm_start[j, k]


def test_rails_split_a_servers_traffic_without_changing_a_lone_jobs_time() -> None:
    # Four 25 Gbit/s rails a server carry a lone ring as one 100 Gbit/s NIC does (under
    # one leaf no spine can collide); the simulator runs every rail's flow.
    reqs = [_req("a", 0.0, 8, compute=0.01), _req("b", 0.05, 4)]
    ends = []
    for fabric in (LeafSpine(1, 2, 1, gpus_per_server=4, server_gbit=100),
                   LeafSpine(1, 2, 1, gpus_per_server=4, server_gbit=25, rails=4)):
        res = ClusterSim(fabric, reqs, scheduler("fifo/first_fit", fabric), Network()).run()
        a = next(j for j in res.jobs if j.name == "a")
        assert a.servers == 2 and a.slowdown == pytest.approx(1.0, rel=1e-9)
        ends.append([j.end_s for j in res.jobs])
    assert ends[0] == pytest.approx(ends[1], rel=1e-9)
