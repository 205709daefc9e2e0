"""Namespace fabrics (dumbbell, leaf-spine) and the ring-collective job driver, for real."""

from __future__ import annotations

import os
import sys
import time

import pytest

from mltcp.host.namespaces import list_netns
from mltcp.lab.emulation import fabric
from mltcp.lab.emulation.jobdriver import DriverSpec, WorkerSpec, run_job

pytestmark = pytest.mark.skipif(os.geteuid() != 0,
                                reason="needs root (CAP_NET_ADMIN) to create network namespaces")


def _job(f: fabric.Fabric, hosts: list[str], port: int, **kw) -> DriverSpec:
    workers = [WorkerSpec(f"/run/netns/{f.ns(h)}", f.host_addr(h), port) for h in hosts]
    base = dict(job="j", workers=workers, cc="cubic", connections=2, compute_ms=30,
                bytes_per_worker=2_000_000, iterations=3, t0=time.monotonic() + 0.3)
    return DriverSpec(**{**base, **kw})


def test_dumbbell_ring_crosses_the_bottleneck_both_ways_with_barriers():
    with fabric.dumbbell(4, 500, 100) as f:
        spec = _job(f, ["h1", "h3", "h2"], 9100)
        result = run_job(spec)
        its = result["iterations"]
        assert [it["index"] for it in its] == [0, 1, 2]
        for it in its:
            assert it["bytes"] == 3 * 2_000_000
            assert it["comm_start"] - it["start"] >= 0.030 - 1e-3   # compute phase
            assert it["comm_end"] > it["comm_start"] and it["end"] == it["comm_end"]
        for a, b in zip(its, its[1:], strict=False):
            assert b["start"] >= a["end"]                           # barrier: no overlap
        left = f.qdisc_stats("swL")["l4-swR"]["bytes"]    # swL -> swR direction
        right = f.qdisc_stats("swR")["l4-swL"]["bytes"]   # swR -> swL direction
        # ring h1 -> h3 -> h2 -> h1: h1->h3 crosses L->R, h3->h2 crosses R->L.
        assert left >= 3 * 2_000_000 and right >= 3 * 2_000_000
        namespaces = [f.ns(n) for n in ("h1", "swL", "swR")]
    assert not set(namespaces) & set(list_netns())


def test_leaf_spine_spreads_over_equal_cost_uplinks():
    with fabric.leaf_spine(leaves=2, spines=2, hosts_per_leaf=2, host_link_mbit=1000,
                           oversubscription=2.0, queue_packets=100) as f:
        uplinks = [link for link in f.links if "spine" in link.id]
        assert all(link.rate_mbit == pytest.approx(500) for link in uplinks)  # 2*1000/2/2
        spec = _job(f, ["h1", "h3"], 9200, connections=8, bytes_per_worker=4_000_000,
                    iterations=1)
        run_job(spec)
        per_spine = [sum(st["bytes"] for dev, st in f.qdisc_stats("leaf1").items()
                         if dev.endswith(f"spine{s}")) for s in (1, 2)]
        assert sum(per_spine) >= 4_000_000
        assert min(per_spine) > 0.1 * sum(per_spine)  # ECMP used both spines


def test_fabric_is_removed_after_an_error_inside():
    with pytest.raises(RuntimeError), fabric.dumbbell(2, 100, 50) as f:
        ns = f.ns("h1")
        assert ns in list_netns()
        raise RuntimeError("boom")
    assert ns not in list_netns()


def test_bad_link_is_rejected_before_anything_is_built():
    before = set(list_netns())
    with pytest.raises(Exception, match="unknown node 'nowhere'"):
        fabric.Fabric(["h1"], ["sw"], [fabric.LinkSpec("x", "h1", "nowhere")])
    assert set(list_netns()) == before


def test_hosts_routes_carry_the_minimum_rto():
    import subprocess

    with fabric.dumbbell(2, 100, 50, rto_min_ms=5) as f:
        routes = subprocess.run(["nsenter", f"--net=/run/netns/{f.ns('h1')}", "ip", "route"],
                                capture_output=True, text=True, check=True).stdout
        switch = subprocess.run(["nsenter", f"--net=/run/netns/{f.ns('swL')}", "ip", "route"],
                                capture_output=True, text=True, check=True).stdout
    route_to_h2 = next(line for line in routes.splitlines()
                       if line.startswith(f"{f.host_addr('h2')} via"))
    assert "rto_min" in route_to_h2 and "5ms" in route_to_h2
    assert "rto_min" not in switch


def test_jumbo_frames_set_every_device_and_size_the_queues_in_frames():
    import json
    import subprocess

    def run(ns: str, *argv: str) -> str:
        return subprocess.run(["nsenter", f"--net=/run/netns/{ns}", *argv],
                              capture_output=True, text=True, check=True).stdout

    with fabric.dumbbell(2, 100, 50, mtu_bytes=9000) as f:
        for node in ("h1", "swL", "swR", "h2"):
            links = json.loads(run(f.ns(node), "ip", "-j", "link", "show"))
            assert {ln["mtu"] for ln in links if ln["ifname"] != "lo"} == {9000}, node
        qdiscs = json.loads(run(f.ns("swL"), "tc", "-j", "qdisc", "show"))
        limits = [q["options"]["limit"] for q in qdiscs if q["kind"] == "bfifo"]
        assert limits == [50 * 9014]
        # A full-size datagram crosses the fabric in one piece (DF set, so nothing
        # on the way may fragment it).
        recv = subprocess.Popen(
            ["nsenter", f"--net=/run/netns/{f.ns('h2')}", sys.executable, "-c",
             "import socket; s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); "
             "s.bind(('0.0.0.0', 9999)); s.settimeout(5); print(len(s.recv(65535)))"],
            stdout=subprocess.PIPE, text=True)
        time.sleep(0.3)
        run(f.ns("h1"), sys.executable, "-c",
            "import socket; s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); "
            "s.setsockopt(socket.IPPROTO_IP, 10, 2); "  # IP_MTU_DISCOVER = IP_PMTUDISC_DO
            f"s.sendto(bytes({9000 - 28}), ('{f.host_addr('h2')}', 9999))")
        out, _ = recv.communicate(timeout=10)
        assert out.strip() == str(9000 - 28)
