"""The cluster model's first parts: the GPU leaf-spine, jobs as rings over their
servers, the placement policies, and the fluid engine running them."""

from __future__ import annotations

import random

import numpy as np
import pytest

from mltcp.core.aggressiveness import Aggressiveness
from mltcp.core.errors import SpecError
from mltcp.lab.cluster.engine.gpu_jobs import PlacedJob, engine_state
from mltcp.lab.cluster.engine.leafspine import LeafSpine
from mltcp.lab.cluster.schedulers.placement import POLICIES, consolidated, first_fit, spread
from mltcp.lab.models import fluid_engine


def test_links_capacities_and_paths() -> None:
    fab = LeafSpine(leaves=2, servers_per_leaf=4, spines=2, gpus_per_server=8,
                    server_gbit=100, oversubscription=4)
    assert (fab.servers, fab.gpus, fab.links) == (8, 64, 2 * 8 + 2 * 2 * 2)
    assert fab.uplink_gbit == pytest.approx(4 * 100 / 4 / 2)       # 50 Gbit/s per spine
    cap = fab.capacities()
    assert cap[fab.nic_up(0)] == pytest.approx(100e9 / 8 * 1448 / 1514)
    assert cap[fab.leaf_up(1, 1)] == pytest.approx(50e9 / 8 * 1448 / 1514)
    ids = fab.link_ids()
    assert len(ids) == fab.links and ids[fab.leaf_down(1, 0)] == "spine0>leaf1"
    # same server: no link; same leaf: two NICs; across leaves: through one spine
    assert fab.path(3, 3, "x") == []
    assert fab.path(0, 3, "x") == [fab.nic_up(0), fab.nic_down(3)]
    across = fab.path(0, 5, "x")
    assert across[0] == fab.nic_up(0) and across[-1] == fab.nic_down(5)
    spine = across[1] - fab.leaf_up(0, 0)
    assert across[1:3] == [fab.leaf_up(0, spine), fab.leaf_down(1, spine)]
    # ECMP: stable per flow, and flows spread over both spines
    assert fab.path(0, 5, "x") == across
    picks = {fab.path(0, 5, f"flow{i}")[1] for i in range(32)}
    assert picks == {fab.leaf_up(0, 0), fab.leaf_up(0, 1)}


def test_bad_fabric_names_the_field() -> None:
    with pytest.raises(SpecError, match="cluster.oversubscription"):
        LeafSpine(2, 4, 2, oversubscription=0.5)
    with pytest.raises(SpecError, match="cluster.gpus_per_server"):
        LeafSpine(2, 4, 2, gpus_per_server=0)
    with pytest.raises(SpecError, match=r"jobs\[a\].gpus"):
        PlacedJob("a", (), 0.1, 1e6, 10)


def test_a_job_is_a_ring_over_its_servers() -> None:
    fab = LeafSpine(2, 4, 2)
    alone = PlacedJob("one", ((2, 8),), 0.1, 100e6, 5)
    assert alone.flows(fab) == [] and alone.ring_bytes() == 0
    ring = PlacedJob("r", ((0, 8), (1, 8), (4, 8)), 0.1, 90e6, 5)
    assert ring.gpu_count == 24
    assert ring.ring_bytes() == pytest.approx(2 * 2 / 3 * 90e6)
    flows = ring.flows(fab)
    assert [f[0] for f in flows] == [fab.nic_up(0), fab.nic_up(1), fab.nic_up(4)]
    assert [f[-1] for f in flows] == [fab.nic_down(1), fab.nic_down(4), fab.nic_down(0)]


@pytest.mark.parametrize("policy", sorted(POLICIES))
def test_every_policy_places_exactly_what_is_asked_on_free_gpus(policy: str) -> None:
    fab = LeafSpine(4, 4, 2)
    rng = random.Random(1)
    free = np.full(fab.servers, 8)
    for gpus in (1, 3, 8, 16, 5, 24, 2):
        where = POLICIES[policy](fab, free, gpus, rng)
        assert where is not None and sum(n for _, n in where) == gpus
        assert len({s for s, _ in where}) == len(where)
        for server, n in where:
            assert 0 < n <= free[server]
            free[server] -= n
    assert POLICIES[policy](fab, free, int(free.sum()) + 1, rng) is None


def test_policies_differ_in_how_many_servers_a_job_spans() -> None:
    fab = LeafSpine(4, 4, 2)
    free = np.full(fab.servers, 8)
    free[0] = 3                                   # a partly used server first
    rng = random.Random(0)
    assert first_fit(fab, free, 4, rng) == ((0, 3), (1, 1))
    assert consolidated(fab, free, 4, rng) == ((1, 4),)      # one server that fits
    assert consolidated(fab, free, 3, rng) == ((0, 3),)      # best fit: the fullest
    # 16 GPUs: two whole servers under one leaf, not across the spine
    two = consolidated(fab, free, 16, rng)
    assert len(two) == 2 and len({fab.leaf_of(s) for s, _ in two}) == 1
    spread_out = spread(fab, np.full(fab.servers, 8), 8, random.Random(3))
    assert len(spread_out) > 1                    # random GPUs land on several servers


def test_the_engine_runs_placed_jobs_contention_and_all() -> None:
    # Two 2-server jobs share server 0's NIC (both rings start there): 100 MB each way
    # at 100 Gbit/s payload rate; alone a job's flows take 8 ms per iteration.
    fab = LeafSpine(1, 4, 1, server_gbit=100)
    a = PlacedJob("a", ((0, 4), (1, 8)), 0.05, 100e6, 20)
    b = PlacedJob("b", ((0, 4), (2, 8)), 0.05, 100e6, 20, start_s=0.002)
    c = PlacedJob("c", ((3, 8),), 0.05, 100e6, 20)               # no network
    rate = fab.capacities()[0]
    alone = 0.05 + a.ring_bytes() / rate
    for f in (None, Aggressiveness(4.0, 1.0)):
        st = engine_state(fab, [a, b, c], f)
        assert fluid_engine.advance_until(st, np.inf, 10**6) == fluid_engine.DONE
        times = st.end - st.start
        assert times[2] == pytest.approx(np.full(20, 0.05))
        assert (times[:2] >= alone * (1 - 1e-9)).all()
        if f is None:     # fair sharing keeps the pair overlapped, 2 ms apart
            assert (times[:2, -1] > alone * 1.05).all()
        else:             # MLTCP slides them apart: each back to its time alone
            assert times[:2, -1] == pytest.approx([alone, alone], rel=1e-6)


# -- several NICs a server (rails) --------------------------------------------------

RAILS = LeafSpine(leaves=2, servers_per_leaf=2, spines=4, gpus_per_server=4,
                  server_gbit=25, rails=4)


def test_one_rail_keeps_every_index_and_name() -> None:
    fab = LeafSpine(leaves=3, servers_per_leaf=2, spines=2)
    assert fab.rails == 1 and fab.links == 2 * 6 + 2 * 3 * 2
    assert [fab.nic_up(s) for s in range(6)] == list(range(6))
    assert [fab.nic_down(s) for s in range(6)] == list(range(6, 12))
    assert fab.leaf_up(2, 1) == 12 + 2 * 2 + 1 and fab.leaf_down(0, 1) == 12 + 6 + 1
    assert fab.link_ids()[:2] == ["s0>leaf0", "s1>leaf0"]
    ring = PlacedJob("r", ((0, 8), (3, 8)), 0.1, 90e6, 5)
    # ECMP keys as before rails existed: the job's name and flow index
    assert ring.flows(fab, 7) == [fab.path(0, 3, "r/0", 7), fab.path(3, 0, "r/1", 7)]
    assert ring.flow_bytes(fab) == ring.ring_bytes()


def test_rails_are_nics_of_their_own_and_fill_the_uplinks() -> None:
    fab = RAILS
    assert (fab.nics, fab.links) == (16, 2 * 16 + 2 * 2 * 4)
    assert fab.nic_gbit == 100 and fab.uplink_gbit == pytest.approx(2 * 4 * 25 / 4)
    cap = fab.capacities()
    assert cap[fab.nic_up(3, 3)] == pytest.approx(25e9 / 8 * 1448 / 1514)
    assert cap[fab.leaf_up(1, 3)] == pytest.approx(50e9 / 8 * 1448 / 1514)
    assert fab.server_payload_bytes_s == pytest.approx(4 * cap[fab.nic_up(0)])
    nics = {fab.nic_up(s, r) for s in range(4) for r in range(4)} | \
        {fab.nic_down(s, r) for s in range(4) for r in range(4)}
    assert nics == set(range(32)) and not any(fab.is_fabric_link(k) for k in nics)
    assert fab.is_fabric_link(fab.leaf_up(0, 0))
    ids = fab.link_ids()
    assert len(ids) == fab.links == len(cap)
    assert ids[fab.nic_up(2, 1)] == "s2r1>leaf1" and ids[fab.nic_down(2, 1)] == "leaf1>s2r1"
    assert ids[fab.leaf_down(1, 3)] == "spine3>leaf1"
    assert fab.path(0, 1, "x", rail=2) == [fab.nic_up(0, 2), fab.nic_down(1, 2)]
    assert fab.path(0, 2, "x", spine=3, rail=1) == [
        fab.nic_up(0, 1), fab.leaf_up(0, 3), fab.leaf_down(1, 3), fab.nic_down(2, 1)]
    with pytest.raises(SpecError, match="rail"):
        fab.path(0, 2, "x", rail=4)
    with pytest.raises(SpecError, match="cluster.rails"):
        LeafSpine(2, 2, 2, rails=0)


def test_a_job_runs_one_ring_per_rail_each_hashed_on_its_own() -> None:
    fab = RAILS
    ring = PlacedJob("r", ((0, 4), (2, 4)), 0.1, 80e6, 5)
    flows = ring.flows(fab)
    assert len(flows) == 2 * 4                                # flow-major: hop, then rail
    assert [f[0] for f in flows[:4]] == [fab.nic_up(0, r) for r in range(4)]
    assert [f[-1] for f in flows[4:]] == [fab.nic_down(0, r) for r in range(4)]
    assert ring.flow_bytes(fab) == pytest.approx(ring.ring_bytes() / 4)
    # each rail hashes on its own key: over jobs, one hop's rails take different spines
    spreads = {len({f[1] for f in PlacedJob(f"j{i}", ((0, 4), (2, 4)), 0.1, 80e6, 5)
                    .flows(fab)[:4]}) for i in range(20)}
    assert max(spreads) > 1 and min(spreads) < 4              # spread, and collisions
    # source routes: one spine per (flow, rail)
    routed = PlacedJob("s", ((0, 4), (2, 4)), 0.1, 80e6, 5, spines=(0, 1, 2, 3, 3, 2, 1, 0))
    assert [f[1] for f in routed.flows(fab)] == [fab.leaf_up(0, p) for p in (0, 1, 2, 3)] + \
        [fab.leaf_up(1, p) for p in (3, 2, 1, 0)]
    # alone on rail-disjoint spines the ring runs at all 4 NICs' rate together
    nic = fab.capacities()[fab.nic_up(0)]
    assert routed.dedicated_iteration_s(fab) == pytest.approx(
        0.1 + ring.ring_bytes() / (4 * nic))
    # a job's own rails collide on a spine: its 50 Gbit/s uplink carries two 25 Gbit/s
    # rails at full rate, four at half, and the slowest rail ends the iteration; the
    # dedicated baseline is collision-free whatever the routing
    two = PlacedJob("t", ((0, 4), (2, 4)), 0.1, 80e6, 5, spines=(0, 0, 1, 1, 2, 2, 3, 3))
    four = PlacedJob("f", ((0, 4), (2, 4)), 0.1, 80e6, 5, spines=(0, 0, 0, 1) + (2,) * 4)
    comm = routed.dedicated_iteration_s(fab) - 0.1
    assert routed.alone_iteration_s(fab) - 0.1 == pytest.approx(comm)
    assert two.alone_iteration_s(fab) - 0.1 == pytest.approx(comm)
    assert four.alone_iteration_s(fab) - 0.1 == pytest.approx(2 * comm)
    assert four.dedicated_iteration_s(fab) - 0.1 == pytest.approx(comm)
    with pytest.raises(SpecError, match=r"jobs\[s\].spines"):
        PlacedJob("s", ((0, 4), (2, 4)), 0.1, 80e6, 5, spines=(0, 1, 2)).flows(fab)
    with pytest.raises(SpecError, match=r"jobs\[s\].spines"):          # 2 per flow, not 4
        PlacedJob("s", ((0, 4), (2, 4)), 0.1, 80e6, 5, spines=(0, 1, 2, 3)).flows(fab)
    # the engine gets each rail's flow with its share of the bytes
    st = engine_state(fab, [routed], None)
    assert fluid_engine.advance_until(st, np.inf, 10**6) == fluid_engine.DONE
    assert (st.end - st.start)[0] == pytest.approx(
        np.full(5, routed.dedicated_iteration_s(fab)), rel=1e-9)


def test_communication_is_priced_at_all_of_a_servers_rails() -> None:
    from mltcp.lab.cluster.engine.gpu_jobs import JobRequest, ring_comm_s
    from mltcp.lab.cluster.schedulers.orders import expected_iteration_s

    four = LeafSpine(2, 2, 4, gpus_per_server=4, server_gbit=25, rails=4)
    one = LeafSpine(2, 2, 4, gpus_per_server=4, server_gbit=100)
    req = JobRequest("j", 0.0, 12, 0.1, 60e6, 10)
    assert expected_iteration_s(req, four) == pytest.approx(expected_iteration_s(req, one))
    assert expected_iteration_s(req, four) > 0.1
    assert ring_comm_s(four, 60e6, 3) == pytest.approx(
        ring_comm_s(one, 60e6, 3))
    assert ring_comm_s(four, 60e6, 3) == pytest.approx(
        2 * 2 / 3 * 60e6 / (4 * four.capacities()[0]))
