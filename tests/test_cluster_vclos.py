"""vClos and OCS-vClos (the vclos paper): rings grouped by leaf on leaf-spine links no other job
uses, a job waits when no such placement exists, and the paper's baselines share links."""

from __future__ import annotations

import itertools
import random

import numpy as np
import pytest

from mltcp.core.errors import SpecError
from mltcp.lab.cluster.engine.gpu_jobs import JobRequest, PlacedJob
from mltcp.lab.cluster.engine.leafspine import LeafSpine
from mltcp.lab.cluster.engine.network import Network
from mltcp.lab.cluster.engine.scheduling import Allocation, ClusterView, QueuedJob, RunningJob
from mltcp.lab.cluster.engine.simulator import ClusterSim
from mltcp.lab.cluster.papers.vclos.schedulers import (
    SCHEDULERS,
    balanced_ecmp_placement,
    cluster512,
    idle_by_leaf,
    leaf_cycle,
    locality_ecmp,
    locality_ecmp_placement,
    ocs_vclos_placement,
    source_routing_placement,
    vclos,
    vclos_placement,
)

SMALL = LeafSpine(leaves=4, servers_per_leaf=3, spines=2, gpus_per_server=4,
                  server_gbit=10, oversubscription=1)


def _req(name: str, gpus: int, arrival: float = 0.0, iterations: int = 10,
         compute: float = 0.1, nbytes: float = 50e6) -> JobRequest:
    return JobRequest(name, arrival, gpus, compute, nbytes, iterations)


def _running(req: JobRequest, where: Allocation) -> RunningJob:
    job = PlacedJob(req.name, where.gpus, req.compute_s, req.gradient_bytes,
                    req.iterations, spines=where.spines)
    return RunningJob(job, req, 0, 0.0, 0.0)


def _view(fabric: LeafSpine, running: list[RunningJob], seed: int = 0) -> ClusterView:
    free = np.full(fabric.servers, fabric.gpus_per_server)
    for r in running:
        for s, n in r.job.gpus:
            free[s] -= n
    return ClusterView(fabric, 0.0, free, tuple(running), (), random.Random(seed))


def _spine_links(fabric: LeafSpine, job: PlacedJob) -> list[int]:
    """The leaf-spine links of a job's flows, from the fabric's own paths."""
    return [link for path in job.flows(fabric) for link in path if fabric.is_fabric_link(link)]


def _leaf_blocks(fabric: LeafSpine, servers: tuple[int, ...]) -> int:
    """How many contiguous runs of one leaf the ring has (cyclically)."""
    leaves = [fabric.leaf_of(s) for s in servers]
    return sum(leaves[i] != leaves[i - 1] for i in range(len(leaves))) or 1


def _hop(fabric: LeafSpine, running: list[RunningJob]) -> np.ndarray:
    """hop[a, b]: a spine for each rail has a -> spine and spine -> b free of running
    jobs' flows."""
    used = {link for r in running for link in _spine_links(fabric, r.job)}
    hop = np.zeros((fabric.leaves, fabric.leaves), dtype=bool)
    for a, b in itertools.permutations(range(fabric.leaves), 2):
        hop[a, b] = sum(fabric.leaf_up(a, p) not in used and fabric.leaf_down(b, p) not in used
                        for p in range(fabric.spines)) >= fabric.rails
    return hop


def _brute_force_ring_exists(fabric: LeafSpine, running: list[RunningJob], need: int) -> bool:
    """Some set of leaves in some cyclic order holds ``need`` idle servers, one at least
    from each, with every hop on a free spine: what vClos must find when it exists."""
    idle = [len(s) for s in idle_by_leaf(fabric, _view(fabric, running).free)]
    hop = _hop(fabric, running)
    cands = [leaf for leaf in range(fabric.leaves) if idle[leaf]]
    for size in range(2, min(need, len(cands)) + 1):
        for order in itertools.permutations(cands, size):
            if sum(idle[x] for x in order) >= need and \
                    all(hop[order[i], order[(i + 1) % size]] for i in range(size)):
                return True
    return False


# Fewer spines than servers under a leaf: a leaf's links to the spines run out.
ONE_SPINE = LeafSpine(leaves=4, servers_per_leaf=2, spines=1, gpus_per_server=4)
# Two NICs a server: each hop needs two spines, and a leaf's three run out at once.
TWO_RAILS = LeafSpine(leaves=4, servers_per_leaf=3, spines=3, gpus_per_server=4, rails=2)


@pytest.mark.parametrize("place", [vclos_placement, ocs_vclos_placement])
def test_random_mixes_never_share_a_leaf_spine_link_and_wait_only_when_they_must(
        place) -> None:
    checked_waits = 0
    for fabric, trial in itertools.product((SMALL, ONE_SPINE, TWO_RAILS), range(30)):
        rng = random.Random(trial)
        running: list[RunningJob] = []
        for step in range(14):
            if running and rng.random() < 0.2:
                running.pop(rng.randrange(len(running)))
            req = _req(f"j{trial}.{step}", rng.choice([1, 6, 8, 12, 16]))
            view = _view(fabric, running, trial)
            before = view.free.copy()
            where = place(view, QueuedJob(req))
            need = -(-req.gpus // fabric.gpus_per_server)
            if where is None:
                idle = idle_by_leaf(fabric, before)
                if req.gpus > fabric.gpus_per_server and sum(map(len, idle)) >= need:
                    assert max(map(len, idle)) < need          # Stage 1 had no leaf
                    assert not _brute_force_ring_exists(fabric, running, need)
                    checked_waits += 1
                continue
            assert where.gpu_count == req.gpus
            job = _running(req, where).job                  # PlacedJob validates spines
            if req.gpus > fabric.gpus_per_server:            # whole idle servers, grouped by leaf
                assert len(job.gpus) == need
                assert all(before[s] == fabric.gpus_per_server for s in job.servers)
                assert _leaf_blocks(fabric, job.servers) == len(
                    {fabric.leaf_of(s) for s in job.servers})
            else:
                assert len(job.gpus) == 1 and before[job.servers[0]] >= req.gpus
            mine = _spine_links(fabric, job)
            assert len(mine) == len(set(mine))              # no link twice in the job
            others = {link for r in running for link in _spine_links(fabric, r.job)}
            assert not others & set(mine)
            nics = [link for path in job.flows(fabric) for link in path
                    if not fabric.is_fabric_link(link)]
            other_nics = {link for r in running for path in r.job.flows(fabric)
                          for link in path if not fabric.is_fabric_link(link)}
            assert len(nics) == len(set(nics)) and not other_nics & set(nics)
            running.append(_running(req, where))
    assert checked_waits > 0                # the mixes reach waits for links


def test_stages_0_and_1_follow_the_locality_rule() -> None:
    fabric = LeafSpine(leaves=3, servers_per_leaf=3, spines=2, gpus_per_server=4)
    # server 0 has 1 GPU free, server 1 has 3: a 2-GPU job goes to server 1 (best fit),
    # a 1-GPU job to server 0.
    busy = [_running(_req("a", 3), Allocation(((0, 3),))),
            _running(_req("b", 1), Allocation(((1, 1),)))]
    view = _view(fabric, busy)
    assert vclos_placement(view, QueuedJob(_req("x", 2))) == Allocation(((1, 2),))
    assert vclos_placement(view, QueuedJob(_req("y", 1))) == Allocation(((0, 1),))
    # idle servers: leaf 0 has 1 (server 2), leaf 1 has 3, leaf 2 has 2 (server 6 busy):
    # a 2-server job goes under leaf 2 (fewest idle servers that suffice), no spines;
    # 6 GPUs = a server's 4 + 2 on the next.
    busy.append(_running(_req("c", 4), Allocation(((6, 4),))))
    where = vclos_placement(_view(fabric, busy), QueuedJob(_req("z", 6)))
    assert where == Allocation(((7, 4), (8, 2)))
    # a one-server job never splits: 4 GPUs free, 2 on each of two servers, none has 3
    full = [_running(_req(f"f{s}", n), Allocation(((s, n),)))
            for s, n in enumerate([2, 2] + [4] * (fabric.servers - 2))]
    view = _view(fabric, full)
    assert view.free.sum() == 4 and vclos_placement(view, QueuedJob(_req("w", 3))) is None


def _crossing_spines(fabric: LeafSpine, where: Allocation) -> list[int]:
    servers = [s for s, _ in where.gpus]
    return [where.spines[i] for i in range(len(servers))
            if fabric.leaf_of(servers[i]) != fabric.leaf_of(servers[(i + 1) % len(servers)])]


def test_when_no_one_spine_serves_a_ring_both_find_a_spine_per_hop() -> None:
    fabric = LeafSpine(leaves=4, servers_per_leaf=2, spines=2, gpus_per_server=4)
    # r: servers 0 (leaf 0) and 2 (leaf 1): leaf0->leaf1 on spine 0, back on spine 1.
    r = _running(_req("r", 8), Allocation(((0, 4), (2, 4)), (0, 1)))
    view = _view(fabric, [r])
    # 6 idle servers: 1, 3, 4-7; a 24-GPU job needs all 4 leaves, and leaf 0 has only
    # up on spine 1 and down on spine 0 free: no one spine serves it, vClos's cycle does.
    for place in (vclos_placement, ocs_vclos_placement):
        where = place(view, QueuedJob(_req("x", 24)))
        assert where is not None and where.spines is not None
        job = _running(_req("x", 24), where).job
        assert not set(_spine_links(fabric, job)) & set(_spine_links(fabric, r.job))
        assert len(set(_crossing_spines(fabric, where))) == 2


def test_ocs_vclos_keeps_a_ring_on_one_spine_where_vclos_fits_each_hop() -> None:
    fabric = LeafSpine(leaves=3, servers_per_leaf=2, spines=3, gpus_per_server=4)
    # r: leaf 0 -> leaf 2 on spine 2, back on spine 1.  A 3-server job goes on leaf 1's
    # two idle servers and leaf 0's one: the hop into leaf 0 has spines 0 and 2 free,
    # the hop out of it 0 and 1.  vClos takes the fuller spine for each hop (2, then 1);
    # OCS-vClos the one spine whose links are free both ways at both leaves (0).
    r = _running(_req("r", 8), Allocation(((0, 4), (4, 4)), (2, 1)))
    req = _req("y", 12)
    per_hop = vclos_placement(_view(fabric, [r]), QueuedJob(req))
    one = ocs_vclos_placement(_view(fabric, [r]), QueuedJob(req))
    assert per_hop.gpus == one.gpus == ((2, 4), (3, 4), (1, 4))
    assert sorted(_crossing_spines(fabric, per_hop)) == [1, 2]
    assert _crossing_spines(fabric, one) == [0, 0]
    for where in (per_hop, one):
        job = _running(req, where).job
        assert not set(_spine_links(fabric, job)) & set(_spine_links(fabric, r.job))


def test_leaf_cycle_finds_the_fewest_leaves_and_respects_hops() -> None:
    hop = np.ones((4, 4), dtype=bool)
    np.fill_diagonal(hop, False)
    assert leaf_cycle([3, 1, 2, 2], hop, 5) == [0, 2]          # 3 + 2 in two leaves
    hop[0, 2] = hop[2, 0] = False                              # 0 and 2 cannot be neighbours
    found = leaf_cycle([3, 1, 2, 2], hop, 5)
    assert found is not None and set(found) == {0, 3}
    hop[:, 0] = False                                          # nothing reaches leaf 0
    found = leaf_cycle([3, 1, 2, 2], hop, 5)
    assert found is not None and 0 not in found and len(found) == 3
    assert leaf_cycle([3, 1, 2, 2], hop, 6) is None            # only 5 idle without leaf 0
    assert leaf_cycle([3, 1, 2, 2], np.ones((4, 4), dtype=bool), 5, steps=0) is None
    # one-way hops only: 0 -> 1 -> 2 -> 0; no two leaves reach each other both ways, so
    # 4 servers need all three leaves, in that order (the hop back closes the ring).
    hop = np.zeros((3, 3), dtype=bool)
    hop[0, 1] = hop[1, 2] = hop[2, 0] = True
    found = leaf_cycle([2, 2, 2], hop, 4)
    assert found is not None and found[found.index(0):] + found[:found.index(0)] == [0, 1, 2]


# A fabric whose uplinks are as fast as a NIC, so two flows on one uplink halve both.
NARROW = LeafSpine(leaves=3, servers_per_leaf=2, spines=1, gpus_per_server=4,
                   server_gbit=10, oversubscription=2)


def test_with_no_free_spine_vclos_waits_while_ecmp_starts_and_collides() -> None:
    # a: 3 servers (leaves 0 and 1) on the only spine; b: 3 servers over leaves 1 and 2
    # would need leaf 1's links to the spine again; c: one server, behind b in FIFO.
    # (communication-bound: compute alone would let the two rings interleave)
    reqs = [_req("a", 12, 0.0, compute=0.01), _req("b", 12, 0.1, compute=0.01),
            _req("c", 4, 0.2)]
    res = {j.name: j for j in ClusterSim(NARROW, reqs, vclos(NARROW), Network()).run().jobs}
    a, b, c = res["a"], res["b"], res["c"]
    assert b.start_s == pytest.approx(a.end_s)      # the paper: the task waits ...
    assert c.start_s == pytest.approx(a.end_s)      # ... and FIFO's head blocks the queue
    for j in (a, b, c):                             # never slowed by another job
        assert j.held_s == pytest.approx(j.dedicated_s, rel=1e-9)
        assert j.jct_s == pytest.approx(j.jwt_s + j.dedicated_s, rel=1e-9)
    ecmp = {j.name: j for j in ClusterSim(NARROW, reqs, locality_ecmp(NARROW),
                                          Network()).run().jobs}
    assert ecmp["b"].start_s == pytest.approx(0.1) and ecmp["b"].servers == 3
    assert ecmp["a"].held_s > 1.2 * ecmp["a"].dedicated_s       # shared uplinks
    assert ecmp["b"].held_s > 1.2 * ecmp["b"].dedicated_s


def test_jobs_placed_in_one_decision_see_each_others_links() -> None:
    # Both arrive together: the second must see the first's reservation (view.planned),
    # not only the running jobs.
    view = _view(NARROW, [])
    first = QueuedJob(_req("a", 12))
    where = vclos_placement(view, first)
    assert where is not None and where.spines is not None
    view.take(first, where)
    assert vclos_placement(view, QueuedJob(_req("b", 12))) is None
    reqs = [_req("a", 12, compute=0.01), _req("b", 12, compute=0.01)]
    res = {j.name: j for j in ClusterSim(NARROW, reqs, vclos(NARROW), Network()).run().jobs}
    assert res["b"].start_s == pytest.approx(res["a"].end_s)
    assert res["a"].held_s == pytest.approx(res["a"].dedicated_s, rel=1e-9)


def test_with_two_spines_vclos_isolates_both_jobs_where_ecmp_hashes_them_together() -> None:
    # b's ring shares leaf 1 with a's; vClos puts b's hops on the spine a leaves free.
    # ECMP hashes each flow: over seeds and job names, some pair lands on one spine.
    fabric = LeafSpine(leaves=3, servers_per_leaf=2, spines=2, gpus_per_server=4,
                       server_gbit=10, oversubscription=2)   # uplink 5 Gbit/s, NIC 10
    collided = 0
    for (first, second), seed in itertools.product((("a", "b"), ("a", "c")), range(4)):
        reqs = [_req(first, 12, 0.0, compute=0.01), _req(second, 12, 0.1, compute=0.01)]
        for j in ClusterSim(fabric, reqs, vclos(fabric), Network(), seed=seed).run().jobs:
            assert j.jwt_s == pytest.approx(0.0, abs=1e-12)
            assert j.held_s == pytest.approx(j.dedicated_s, rel=1e-9)     # slowdown 1
        ecmp = ClusterSim(fabric, reqs, locality_ecmp(fabric), Network(), seed=seed).run()
        assert [j.start_s for j in ecmp.jobs] == [0.0, 0.1]
        collided += any(j.held_s > 1.2 * j.dedicated_s for j in ecmp.jobs)
    assert collided > 0


def test_baselines_route_without_reserving() -> None:
    fabric = NARROW
    a = _running(_req("a", 12), Allocation(((0, 4), (1, 4), (2, 4)), (0, 0, 0)))
    view = _view(fabric, [a])
    assert vclos_placement(view, QueuedJob(_req("b", 12))) is None
    ecmp = locality_ecmp_placement(view, QueuedJob(_req("b", 12)))
    assert ecmp is not None and ecmp.spines is None
    assert [s for s, _ in ecmp.gpus] == [4, 5, 3]       # leaf 2 (2 idle), then leaf 1
    sr = source_routing_placement(view, QueuedJob(_req("b", 12)))
    assert sr.gpus == ecmp.gpus and sr.spines == (0, 0, 0)
    # Balanced: each flow on its source leaf's least loaded uplink.  a sends up from
    # leaves 0 and 1 on spine 0, so b's flow out of leaf 1 takes spine 1; b's flow out of
    # leaf 2 (no load there) takes either, blind to a's link down into leaf 1 on spine 0.
    two = LeafSpine(leaves=3, servers_per_leaf=2, spines=2, gpus_per_server=4)
    a_links = set(_spine_links(two, _running(_req("a", 12), Allocation(
        ((0, 4), (1, 4), (2, 4)), (0, 0, 0))).job))
    met = 0
    for seed in range(16):
        view = _view(two, [_running(_req("a", 12), Allocation(((0, 4), (1, 4), (2, 4)),
                                                              (0, 0, 0)))], seed)
        bal = balanced_ecmp_placement(view, QueuedJob(_req("b", 12)))
        shared = set(_spine_links(two, _running(_req("b", 12), bal).job)) & a_links
        assert shared <= {two.leaf_down(1, 0)}               # never an uplink a loads
        met += bool(shared)
    assert 0 < met < 16


def test_schedulers_are_fifo_and_named() -> None:
    assert set(SCHEDULERS) == {"vclos", "ocs-vclos", "vclos-sr", "vclos-balanced",
                               "vclos-ecmp"}
    for name, make in SCHEDULERS.items():
        sched = make(SMALL)
        assert sched.name == name and sched.blocking and not sched.preemptive
    big = cluster512()
    assert (big.gpus, big.uplink_gbit) == (512, pytest.approx(big.server_gbit))
    assert (big.rails, big.spines, big.server_gbit) == (8, 32, 100.0)


def test_reserving_schemes_refuse_fewer_spines_than_rails() -> None:
    few = LeafSpine(leaves=2, servers_per_leaf=2, spines=2, gpus_per_server=4, rails=4)
    for name in ("vclos", "ocs-vclos"):
        with pytest.raises(SpecError, match="cluster.rails"):
            SCHEDULERS[name](few)
    assert SCHEDULERS["vclos-ecmp"](few).name == "vclos-ecmp"       # ECMP just collides


def test_on_the_papers_rails_vclos_isolates_every_rail_where_ecmp_collides() -> None:
    # CLUSTER512: a 2-leaf job of 8 servers (64 GPUs) sends 8 rails out of each leaf over
    # 32 spines.  vClos gives every rail a spine of its own, so the ring runs at its NICs'
    # full rate; ECMP hashes 16 flows and usually lands two on one link (the birthday
    # odds of 8 in 32 twice: about 0.15 of none).
    fabric = cluster512()
    req = _req("big", 64, nbytes=400e6)
    full = _running(req, vclos_placement(_view(fabric, []), QueuedJob(req))).job
    assert len({fabric.leaf_of(s) for s in full.servers}) == 2
    mine = _spine_links(fabric, full)
    assert len(mine) == 2 * 2 * fabric.rails and len(set(mine)) == len(mine)
    alone = full.compute_s + full.ring_bytes() / fabric.server_payload_bytes_s
    assert full.dedicated_iteration_s(fabric) == pytest.approx(alone, rel=1e-9)
    collided = 0
    for seed in range(8):
        ecmp = PlacedJob(f"e{seed}", full.gpus, req.compute_s, req.gradient_bytes, 10)
        # the dedicated baseline is collision-free whatever the routing; on its own hashed
        # paths the job is slower
        assert ecmp.dedicated_iteration_s(fabric, seed) == pytest.approx(alone, rel=1e-9)
        comm = ecmp.alone_iteration_s(fabric, seed) - req.compute_s
        assert comm >= (alone - req.compute_s) * (1 - 1e-9)
        collided += comm > (alone - req.compute_s) * 1.5    # two rails on a link: half rate
    assert collided >= 4
    # a second such job: vClos and Balanced ECMP keep off the first one's links, source
    # routing maps rail r of a leaf's k-th server to spine 8k + r
    view = _view(fabric, [_running(req, Allocation(full.gpus, full.spines))])
    second = _req("two", 64)
    for place in (vclos_placement, balanced_ecmp_placement):
        job = _running(second, place(view, QueuedJob(second))).job
        assert not set(_spine_links(fabric, job)) & set(mine)
    sr = source_routing_placement(view, QueuedJob(second))
    servers = [s for s, _ in sr.gpus]
    for i, s in enumerate(servers):
        if fabric.leaf_of(s) != fabric.leaf_of(servers[(i + 1) % len(servers)]):
            k = s % fabric.servers_per_leaf
            assert sr.spines[i * 8:(i + 1) * 8] == tuple(range(8 * k, 8 * k + 8))
