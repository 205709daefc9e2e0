"""The cluster simulator's loop: arrivals, a FIFO queue, placement, the engine between
scheduling moments, and the jobs' times (JCT, JWT, makespan, utilisation)."""

from __future__ import annotations

import random

import numpy as np
import pytest

from mltcp.core.aggressiveness import Aggressiveness
from mltcp.core.errors import SpecError
from mltcp.lab.cluster.fabric import LeafSpine
from mltcp.lab.cluster.jobs import PlacedJob, engine_state
from mltcp.lab.cluster.sim import ClusterSim, JobRequest, poisson_arrivals
from mltcp.lab.models import fluid_engine

FABRIC = LeafSpine(leaves=2, servers_per_leaf=2, spines=1, gpus_per_server=4,
                   server_gbit=10, oversubscription=1)


def _req(name: str, arrival: float, gpus: int, iterations: int = 10,
         compute: float = 0.1, nbytes: float = 50e6) -> JobRequest:
    return JobRequest(name, arrival, gpus, compute, nbytes, iterations)


def test_jobs_on_one_server_each_take_their_compute_only() -> None:
    res = ClusterSim(FABRIC, [_req("a", 0.0, 4), _req("b", 0.5, 2)], "consolidated",
                     None).run()
    a, b = res.jobs
    assert (a.start_s, a.end_s, a.servers) == (0.0, pytest.approx(1.0), 1)
    assert (b.start_s, b.jct_s, b.jwt_s) == (0.5, pytest.approx(1.0), 0.0)
    assert res.makespan_s == pytest.approx(1.5)
    assert res.gpu_utilisation() == pytest.approx((4 * 1.0 + 2 * 1.0) / (16 * 1.5))


def test_fifo_waits_for_gpus_and_the_head_blocks_the_queue() -> None:
    # 16 GPUs: a takes 12, b (8) must wait for a; c (2) arrives after b and waits too
    # (FIFO: the head blocks), although 4 GPUs are free.
    reqs = [_req("a", 0.0, 12, iterations=5), _req("b", 0.1, 8), _req("c", 0.2, 2)]
    res = {j.name: j for j in ClusterSim(FABRIC, reqs, "first_fit", None).run().jobs}
    assert res["b"].start_s == pytest.approx(res["a"].end_s)
    assert res["c"].start_s == pytest.approx(res["a"].end_s)
    assert res["b"].jwt_s > 0 and res["c"].jwt_s > 0


def test_a_run_split_at_scheduling_moments_equals_one_engine_run() -> None:
    # Jobs that all start at once: the simulator rebuilds the engine each time one
    # ends (carrying the others' progress); one engine run without rebuilds must agree.
    reqs = [_req(f"j{i}", 0.0, 4, iterations=8 + 3 * i, nbytes=40e6 + 10e6 * i)
            for i in range(4)]
    for f in (None, Aggressiveness(4.0, 1.0)):
        res = ClusterSim(FABRIC, reqs, "random", f, seed=2).run()
        placed = {j.name: j for j in res.jobs}
        rng = random.Random(2)
        free = np.full(FABRIC.servers, FABRIC.gpus_per_server)
        jobs = []
        from mltcp.lab.cluster.placement import spread
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


def test_poisson_arrivals_and_summary() -> None:
    rng = random.Random(0)
    reqs = poisson_arrivals(40, 360.0, rng, lambda i, t, r: _req(
        f"j{i}", t, r.choice([1, 2, 4, 8]), iterations=r.randint(5, 20)))
    gaps = np.diff([q.arrival_s for q in reqs])
    assert gaps.mean() == pytest.approx(10.0, rel=0.5)          # 360 jobs/hour
    res = ClusterSim(FABRIC, reqs, "consolidated", Aggressiveness(4.0, 1.0)).run()
    assert len(res.jobs) == 40 and res.events > 0
    summary = res.jct_summary()
    assert summary["p50"] <= summary["p90"] <= summary["p99"]
    assert all(j.jct_s >= j.jwt_s >= 0 for j in res.jobs)


def test_bad_requests_name_the_field() -> None:
    with pytest.raises(SpecError, match=r"jobs\[big\].gpus"):
        ClusterSim(FABRIC, [_req("big", 0.0, 17)], "first_fit", None)
    with pytest.raises(SpecError, match="placement"):
        ClusterSim(FABRIC, [_req("a", 0.0, 1)], "nosuch", None)
    with pytest.raises(SpecError, match=r"jobs\[a\].arrival_s"):
        _req("a", -1.0, 1)
    with pytest.raises(SpecError, match=r"jobs\[a\].compute_s"):    # at arrival, not later
        _req("a", 0.0, 1, compute=-0.1)
