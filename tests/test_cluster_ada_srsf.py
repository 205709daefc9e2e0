"""LWF-κ placement and Ada-SRSF's communication order (the ada-srsf paper): the rules on
hand-made cluster states and running sets, and a small cluster run where AdaDUAL's
priority lets the job of less remaining service communicate first."""

from __future__ import annotations

import random

import numpy as np
import pytest

from mltcp.core.errors import SpecError
from mltcp.lab.cluster.engine.gpu_jobs import JobRequest, PlacedJob, ring_comm_s
from mltcp.lab.cluster.engine.leafspine import LeafSpine
from mltcp.lab.cluster.engine.network import fair
from mltcp.lab.cluster.engine.scheduling import Allocation, ClusterView, QueuedJob, RunningJob
from mltcp.lab.cluster.engine.simulator import ClusterSim
from mltcp.lab.cluster.papers.ada_srsf.lwf import lwf, remaining_workload
from mltcp.lab.cluster.papers.ada_srsf.schedulers import (
    NETWORKS,
    SCHEDULERS,
    CommOrderNetwork,
    ada_dual,
    ada_srsf,
    paper_srsf,
    srsf_comm,
    srsf_ls,
    threshold,
)

# 4 servers of 4 GPUs under one leaf: every flow crosses only the two NICs.
FABRIC = LeafSpine(leaves=1, servers_per_leaf=4, spines=1, gpus_per_server=4,
                   server_gbit=10, oversubscription=1)


def _req(name: str, gpus: int, iterations: int = 10, compute: float = 0.1,
         nbytes: float = 100e6, arrival: float = 0.0) -> JobRequest:
    return JobRequest(name, arrival, gpus, compute, nbytes, iterations)


def _running(name: str, gpus: tuple[tuple[int, int], ...], iterations: int = 10,
             done: int = 0, compute: float = 0.1, nbytes: float = 100e6) -> RunningJob:
    req = _req(name, sum(n for _, n in gpus), iterations, compute, nbytes)
    return RunningJob(PlacedJob(name, gpus, compute, nbytes, iterations - done), req, done,
                      0.0, 0.0)


def _view(running: tuple[RunningJob, ...] = ()) -> ClusterView:
    free = np.full(FABRIC.servers, FABRIC.gpus_per_server)
    for r in running:
        for s, n in r.job.gpus:
            free[s] -= n
    return ClusterView(FABRIC, 0.0, free, running, (), random.Random(0))


# --------------------------------------------------------------------------- LWF-κ


def test_workload_is_remaining_compute_and_contention_free_comm_times_gpus() -> None:
    req = _req("a", 8, iterations=10, compute=0.1, nbytes=100e6)
    nic = float(FABRIC.capacities()[0])
    assert ring_comm_s(FABRIC, 100e6, 1) == 0.0
    assert ring_comm_s(FABRIC, 100e6, 2) == pytest.approx(100e6 / nic)
    assert remaining_workload(FABRIC, req, 4, None) == pytest.approx(6 * 0.1 * 8)
    assert remaining_workload(FABRIC, req, 4, 2) == pytest.approx(6 * (0.1 + 100e6 / nic) * 8)


def test_a_job_above_kappa_goes_server_by_server_least_workload_first() -> None:
    # s0: a job with 90 of 100 iterations left on 2 GPUs; s1: one nearly done on 3 GPUs
    # (less workload although more GPUs are busy); s2, s3 empty.
    view = _view((_running("long", ((0, 2),), iterations=100, done=10),
                  _running("short", ((1, 3),), iterations=100, done=95)))
    place = lwf(1)
    # 6 GPUs: the empty servers first (index order among equals), whole.
    x = QueuedJob(_req("x", 6, iterations=100))
    assert place(view, x).gpus == ((2, 4), (3, 2))
    view.take(x, Allocation(((2, 4), (3, 2))))
    # Now s3 carries x's workload (much more than "short" on s1): 3 GPUs go to s1's
    # one idle GPU first, then to s0 (2 idle) -- not to s3's 2 idle ones.
    assert place(view, QueuedJob(_req("y", 3))).gpus == ((1, 1), (0, 2))


def test_a_job_within_kappa_takes_the_least_loaded_gpus_which_are_all_idle() -> None:
    # Idle GPUs all have workload 0: LWF-κ's first branch keeps their index order, so a
    # 2-GPU job lands on s0's idle GPUs although s0 is the most loaded server; with
    # κ = 1 the same job goes by server workload to an empty server.
    view = _view((_running("big", ((0, 2),), iterations=1000),))
    assert lwf(2)(view, QueuedJob(_req("x", 2))).gpus == ((0, 2),)
    assert lwf(1)(view, QueuedJob(_req("x", 2))).gpus == ((1, 2),)
    # A job that fits nowhere gets nothing.
    assert lwf(1)(view, QueuedJob(_req("z", 15))) is None


def test_list_scheduling_is_lwf_with_kappa_the_cluster() -> None:
    view = _view((_running("big", ((0, 3),), iterations=1000),))
    ls = srsf_ls(FABRIC)
    assert ls.place(view, QueuedJob(_req("x", 3))).gpus == ((0, 1), (1, 2))


def test_ada_srsf_orders_queued_jobs_by_compute_service_and_lets_them_pass() -> None:
    # E_J = 0 for queued jobs: "comm" has a huge gradient but less compute service, so
    # it ranks before "compute"; "huge" does not fit and blocks no one (no break in
    # Algorithm 3's loop over the queue).
    key = paper_srsf(FABRIC)
    comm = QueuedJob(_req("comm", 8, iterations=10, compute=0.1, nbytes=5e9))
    compute = QueuedJob(_req("compute", 4, iterations=10, compute=0.3, nbytes=1e6))
    huge = QueuedJob(_req("huge", 16, iterations=1))
    assert key(comm, 0.0) < key(compute, 0.0) and key(huge, 0.0) < key(comm, 0.0)
    view = _view((_running("r", ((0, 1),)),))
    view.queue = (compute, huge, comm)
    decision = ada_srsf(FABRIC).decide(view)
    assert [job.name for job, _ in decision.start] == ["comm", "compute"]
    assert decision.preempt == ()


def test_kappa_is_checked() -> None:
    with pytest.raises(SpecError, match="placement.kappa"):
        lwf(0)


# --------------------------------------------------------------------------- AdaDUAL


def test_the_second_task_on_a_server_waits_unless_its_message_is_small() -> None:
    # a and b share server 1; a has less remaining service.
    a = _running("a", ((0, 2), (1, 2)), iterations=10)
    b = _running("b", ((2, 2), (1, 2)), iterations=30)
    net = ada_dual(FABRIC)
    assert threshold(0.0) == 0.5
    assert net.job_weights([b, a], 0.0) == [net.wait_weight, 1.0]
    # b's message below half of a's: Theorem 2 says start now, so they share equally.
    small = _running("b", ((2, 2), (1, 2)), iterations=30, nbytes=40e6)
    assert net.job_weights([a, small], 0.0) == [1.0, 1.0]
    # A contention penalty lowers the threshold: b/(2(b+η)) = 1/4 with η = b.
    assert ada_dual(FABRIC, eta_over_b=1.0).job_weights([a, small], 0.0) == [1.0, 1e-3]
    # Remaining service, not length: b nearly done ranks first.
    b_done = _running("b", ((2, 2), (1, 2)), iterations=30, done=29)
    assert net.job_weights([a, b_done], 0.0) == [1e-3, 1.0]


def test_more_than_two_tasks_never_share_and_waiters_go_in_srsf_order() -> None:
    # Remaining service (GPU-s): a 3.6 < b 6.5 < c 9.7 < d 28.8.
    a = _running("a", ((0, 2), (1, 2)), iterations=5)
    b = _running("b", ((2, 2), (1, 1)), iterations=20, nbytes=10e6)       # small: shares
    c = _running("c", ((3, 2), (1, 1)), iterations=30, nbytes=10e6)       # third: waits
    d = _running("d", ((3, 2), (2, 2)), iterations=40)                    # behind b and c
    solo = _running("solo", ((0, 2),), iterations=50)                     # no network
    w = 1e-3
    assert ada_dual(FABRIC).job_weights([a, b, c, d, solo], 0.0) == \
        pytest.approx([1.0, 1.0, w, w * w, 1.0])


def test_srsf_n_caps_tasks_per_server_without_the_rule() -> None:
    a = _running("a", ((0, 2), (1, 2)), iterations=10)
    b = _running("b", ((2, 2), (1, 2)), iterations=20)
    c = _running("c", ((3, 2), (1, 1)), iterations=30)
    apart = _running("apart", ((2, 1), (3, 1)), iterations=40)
    w = 1e-3
    assert srsf_comm(FABRIC, 1).job_weights([a, b, c], 0.0) == pytest.approx([1, w, w * w])
    assert srsf_comm(FABRIC, 2).job_weights([a, b, c], 0.0) == pytest.approx([1, 1, w])
    assert srsf_comm(FABRIC, 3).job_weights([a, b, c], 0.0) == [1, 1, 1]
    # Jobs on servers no prioritised job uses are not held back.
    assert srsf_comm(FABRIC, 1).job_weights([a, apart], 0.0) == [1, 1]


def test_network_options_are_checked() -> None:
    with pytest.raises(SpecError, match="fabric"):
        CommOrderNetwork("ada-dual")
    with pytest.raises(SpecError, match="max_tasks"):
        srsf_comm(FABRIC, 0)
    with pytest.raises(SpecError, match="eta_over_b"):
        ada_dual(FABRIC, eta_over_b=-1.0)
    with pytest.raises(SpecError, match="wait_weight"):
        CommOrderNetwork("x", fabric=FABRIC, wait_weight=0.0)


def test_the_registrable_names_build() -> None:
    for name, make in SCHEDULERS.items():
        assert make(FABRIC).name == name
    for name, make in NETWORKS.items():
        assert make(FABRIC).name == name


# --------------------------------------------------------------------------- a run


def test_ada_srsf_lets_the_job_of_less_service_communicate_first() -> None:
    # Three servers: a (6 GPUs, 10 iterations) takes s0 whole and 2 GPUs of s1;
    # b (6 GPUs, 30 iterations) then finds s2 empty and s1's 2 idle GPUs: both rings
    # cross s1's NIC.  Under fair sharing their all-reduces split it; under AdaDUAL
    # (equal messages: b waits) a's go at the NIC's full rate.
    fabric = LeafSpine(leaves=1, servers_per_leaf=3, spines=1, gpus_per_server=4,
                       server_gbit=10, oversubscription=1)
    reqs = [_req("a", 6, iterations=10), _req("b", 6, iterations=30)]
    runs = {}
    for net in (fair(), ada_dual(fabric)):
        res = ClusterSim(fabric, reqs, ada_srsf(fabric), net).run()
        runs[net.name] = {j.name: j for j in res.jobs}
        assert res.network == net.name and len(res.jobs) == 2
    assert runs["fair"]["a"].servers == runs["fair"]["b"].servers == 2
    ada, shared = runs["ada-dual"], runs["fair"]
    assert ada["a"].jct_s < shared["a"].jct_s
    # a is as fast as alone on its GPUs (the waiting job takes 0.1% while a sends).
    assert ada["a"].slowdown == pytest.approx(1.0, rel=2e-3)
    assert shared["a"].slowdown > 1.2
    # b finishes too, never faster than alone; and here it gains as well: after a's
    # first all-reduce the two jobs' communication phases no longer coincide.
    assert ada["b"].slowdown >= 1.0
    assert ada["b"].jct_s < shared["b"].jct_s
