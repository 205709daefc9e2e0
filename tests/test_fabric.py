"""The one fabric builder, for real: dumbbell and leaf-spine graphs as namespaces, HTB
bottlenecks in both directions, ECMP, ring jobs across them, and the lifecycle (close,
errors, half-built fabrics, SIGTERM, leftovers of killed runs)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from mltcp.core.errors import SpecError
from mltcp.host.namespaces import list_netns, nsenter_argv
from mltcp.lab.scenario.emulation import fabric, netns, owners, traffic
from mltcp.lab.scenario.graph import LinkSpec, NetworkGraph

pytestmark = pytest.mark.skipif(os.geteuid() != 0,
                                reason="needs root (CAP_NET_ADMIN) to create network namespaces")

REPO = Path(__file__).resolve().parents[1]
OUR_PREFIX = f"mltcp-{os.getpid()}-"


def _ring(f: fabric.Fabric, hosts: list[str], port: int, **kw) -> traffic.TrafficSpec:
    base = dict(name="j", workers=[f.endpoint(h, port) for h in hosts], cc="cubic",
                connections=2, compute_ms=30, bytes_per_worker=2_000_000, iterations=3,
                t0=time.monotonic() + 0.3)
    return traffic.TrafficSpec(**{**base, **kw})


# --------------------------------------------------------------------------- topology


def test_dumbbell_names_addresses_shaping_and_sysctls():
    with fabric.dumbbell(4, 1000, 100) as f:
        assert f.tag.startswith(OUR_PREFIX)
        assert set(f.namespaces) <= set(list_netns())
        assert f.host_addr("h3").startswith("10.200.")
        route = f.check_output("h1", ["ip", "route", "get", f.host_addr("h3")])
        assert f"via {f.ports['h1-access'][1].addr}" in route
        left = f.egress("bottleneck", "swL")
        kinds = {q["kind"] for q in json.loads(f.check_output(
            "swL", ["tc", "-j", "qdisc", "show", "dev", left.dev]))}
        assert kinds == {"htb", "bfifo"}
        cls = f.check_output("swL", ["tc", "-d", "class", "show", "dev", left.dev])
        assert "rate 1Gbit ceil 1Gbit" in cls and "quantum 100000" in cls
        assert "burst 500000b" in cls and "cburst 500000b" in cls
        assert f.queue(f.egress("bottleneck", "swR")).bytes >= 0       # both directions
        access = f.check_output("swL", ["tc", "-j", "qdisc", "show", "dev",
                                        f.ports["h1-access"][1].dev])
        assert "htb" not in access                                   # host links unshaped
        assert f.check_output("h1", ["sysctl", "-n", "net.ipv4.tcp_ecn"]).strip() == "1"
        assert f.check_output("h3", ["sysctl", "-n",
                                     "net.ipv4.tcp_ecn_fallback"]).strip() == "0"
        root_default = Path("/proc/sys/net/ipv4/tcp_congestion_control").read_text().strip()
        assert f.check_output("h1", ["sysctl", "-n",
                                     "net.ipv4.tcp_congestion_control"]).strip() == root_default
        with pytest.raises(SpecError, match="not an end"):
            f.egress("bottleneck", "h1")


def test_dumbbell_ring_crosses_the_bottleneck_both_ways_with_barriers():
    with fabric.dumbbell(4, 500, 100) as f:
        result = traffic.run(_ring(f, ["h1", "h3", "h2"], 9100))
        its = result["iterations"]
        assert [it["index"] for it in its] == [0, 1, 2]
        for it in its:
            assert it["bytes"] == 3 * 2_000_000
            assert it["comm_start"] - it["start"] >= 0.030 - 1e-3   # compute phase
            assert it["comm_end"] > it["comm_start"] and it["end"] == it["comm_end"]
        for a, b in zip(its, its[1:], strict=False):
            assert b["start"] >= a["end"]                           # barrier: no overlap
        left = f.queue(f.egress("bottleneck", "swL")).bytes
        right = f.queue(f.egress("bottleneck", "swR")).bytes
        # ring h1 -> h3 -> h2 -> h1: h1->h3 crosses L->R, h3->h2 crosses R->L.
        assert left >= 3 * 2_000_000 and right >= 3 * 2_000_000
        namespaces = f.namespaces
    assert not set(namespaces) & set(list_netns())


def test_queues_read_over_netlink_are_those_tc_prints_in_the_namespace():
    """The fabric's netlink reads (one socket per namespace, kept open) against tc run
    inside the namespace, after a ring put megabytes through both bottleneck queues."""
    with fabric.dumbbell(4, 500, 100) as f:
        traffic.run(_ring(f, ["h1", "h3"], 9150, iterations=2))

        def tc_roots() -> dict[str, dict]:
            return {q["dev"]: q for q in json.loads(f.check_output(
                "swL", ["tc", "-s", "-j", "qdisc", "show"])) if q.get("root")}

        before = tc_roots()
        ours = f.qdisc_stats("swL")
        after = tc_roots()
        assert set(ours) == set(before) == set(after)
        left = f.egress("bottleneck", "swL")
        assert ours[left.dev].bytes >= 2 * 2_000_000
        for dev, st in ours.items():
            for name in ("bytes", "packets", "drops", "overlimits", "requeues"):
                assert before[dev][name] <= getattr(st, name) <= after[dev][name], (dev, name)
        assert f.queue(left).bytes >= ours[left.dev].bytes
        reader = f._built.readers[f.ns("swL")]
        assert f.qdisc_stats("swL") and f._built.readers[f.ns("swL")] is reader  # kept
        seen: list[int] = []
        t = threading.Thread(target=lambda: seen.append(f.queue(left).packets))
        t.start()
        t.join()
        assert seen and seen[0] >= ours[left.dev].packets      # another thread, same socket
    assert reader._sock.fileno() == -1                          # closed with the fabric
    with pytest.raises(netns.NetnsError, match="closed"):
        f.queue(left)


def test_leaf_spine_spreads_over_equal_cost_uplinks():
    with fabric.leaf_spine(leaves=2, spines=2, hosts_per_leaf=2, host_link_mbit=1000,
                           oversubscription=2.0, queue_packets=100) as f:
        uplinks = [link for link in f.links if "spine" in link.id]
        assert all(link.rate_mbit == pytest.approx(500) for link in uplinks)  # 2*1000/2/2
        traffic.run(_ring(f, ["h1", "h3"], 9200, connections=8, bytes_per_worker=4_000_000,
                          iterations=1))
        per_spine = [sum(st.bytes for dev, st in f.qdisc_stats("leaf1").items()
                         if dev.endswith(f"spine{s}")) for s in (1, 2)]
        assert sum(per_spine) >= 4_000_000
        assert min(per_spine) > 0.1 * sum(per_spine)  # ECMP used both spines


def test_hosts_routes_carry_the_minimum_rto():
    with fabric.dumbbell(2, 100, 50, rto_min_ms=5) as f:
        routes = f.check_output("h1", ["ip", "route"])
        switch = f.check_output("swL", ["ip", "route"])
    route_to_h2 = next(line for line in routes.splitlines()
                       if line.startswith(f"{f.host_addr('h2')} via"))
    assert "rto_min" in route_to_h2 and "5ms" in route_to_h2
    assert "rto_min" not in switch


def test_jumbo_frames_set_every_device_and_size_the_queues_in_frames():
    with fabric.dumbbell(2, 100, 50, mtu_bytes=9000) as f:
        for node in ("h1", "swL", "swR", "h2"):
            links = json.loads(f.check_output(node, ["ip", "-j", "link", "show"]))
            assert {ln["mtu"] for ln in links if ln["ifname"] != "lo"} == {9000}, node
        qdiscs = json.loads(f.check_output("swL", ["tc", "-j", "qdisc", "show"]))
        limits = [q["options"]["limit"] for q in qdiscs if q["kind"] == "bfifo"]
        assert limits == [50 * 9014]
        # A full-size datagram crosses the fabric in one piece (DF set, so nothing
        # on the way may fragment it).
        recv = f.run("h2", [sys.executable, "-c",
                            "import socket; s = socket.socket(socket.AF_INET, "
                            "socket.SOCK_DGRAM); s.bind(('0.0.0.0', 9999)); s.settimeout(5); "
                            "print(len(s.recv(65535)))"], stdout=subprocess.PIPE, text=True)
        time.sleep(0.3)
        f.check_output("h1", [sys.executable, "-c",
                              "import socket; s = socket.socket(socket.AF_INET, "
                              "socket.SOCK_DGRAM); s.setsockopt(socket.IPPROTO_IP, 10, 2); "
                              f"s.sendto(bytes({9000 - 28}), ('{f.host_addr('h2')}', 9999))"])
        out, _ = recv.communicate(timeout=10)
        assert out.strip() == str(9000 - 28)


# --------------------------------------------------------------------------- lifecycle


def test_namespaces_and_processes_gone_after_close():
    f = fabric.dumbbell(2, 100, 50, prefix=f"{OUR_PREFIX}close")
    names = f.namespaces
    assert set(names) <= set(list_netns())
    sleeper = f.run("h1", ["sleep", "60"])
    f.close()
    f.close()  # idempotent
    assert not set(names) & set(list_netns())
    assert sleeper.poll() is not None


def test_close_deletes_a_namespace_whose_file_is_mounted_twice():
    """A stacked mount (a second `ip netns add`, a mount propagated from a peer) makes one
    `ip netns del` fail with EBUSY; close tries again instead of leaving it behind."""
    f = fabric.dumbbell(2, 100, 50, prefix=f"{OUR_PREFIX}stack")
    path = f"/run/netns/{f.ns('h2')}"
    subprocess.run(["mount", "--bind", path, path], check=True)
    f.close()
    assert not set(f.namespaces) & set(list_netns())


def _refuse_to_delete(monkeypatch, ns: str) -> None:
    """Make every `ip netns del` of ``ns`` fail as the kernel would on a busy mount."""
    real = netns.run_cmd

    def run_cmd(argv, **kw):
        if list(argv) == ["ip", "netns", "del", ns]:
            raise netns.NetnsError(f'Cannot remove namespace file "/run/netns/{ns}": '
                                   "Device or resource busy")
        return real(argv, **kw)

    monkeypatch.setattr(netns, "run_cmd", run_cmd)


def test_close_says_which_namespace_it_could_not_delete(monkeypatch):
    f = fabric.dumbbell(2, 100, 50, prefix=f"{OUR_PREFIX}stuck")
    stuck = f.ns("h2")
    _refuse_to_delete(monkeypatch, stuck)
    try:
        with pytest.raises(netns.NetnsError, match=f"{stuck}.*busy.*mltcp testbed clean"):
            f.close()
        assert [ns for ns in list_netns() if ns.startswith(f.tag)] == [stuck]
    finally:
        monkeypatch.undo()
        netns.cleanup_leftovers(f.tag)
    assert stuck not in list_netns()


def test_a_namespace_left_behind_does_not_hide_the_error_that_ended_the_body(monkeypatch):
    with pytest.raises(RuntimeError, match="boom") as info, \
            fabric.dumbbell(2, 100, 50, prefix=f"{OUR_PREFIX}body") as f:
        _refuse_to_delete(monkeypatch, f.ns("h1"))
        raise RuntimeError("boom")
    monkeypatch.undo()
    netns.cleanup_leftovers(f.tag)
    assert any("left behind" in note for note in getattr(info.value, "__notes__", []))


def test_fabric_is_removed_after_an_error_inside():
    with pytest.raises(RuntimeError), fabric.dumbbell(2, 100, 50) as f:
        ns = f.ns("h1")
        assert ns in list_netns()
        raise RuntimeError("boom")
    assert ns not in list_netns()


def test_half_built_fabric_is_removed():
    tag = f"{OUR_PREFIX}half"
    squatter = f"{tag}-h2"      # created after h1, so the build fails half way
    subprocess.run(["ip", "netns", "add", squatter], check=True)
    try:
        with pytest.raises(netns.NetnsError, match="already exists"):
            fabric.dumbbell(2, 100, 50, prefix=tag)
        assert [ns for ns in list_netns() if ns.startswith(tag)] == [squatter]
    finally:
        subprocess.run(["ip", "netns", "del", squatter], check=True)


def test_bad_link_is_rejected_before_anything_is_built():
    before = set(list_netns())
    with pytest.raises(SpecError, match="unknown node 'nowhere'"):
        fabric.Fabric(NetworkGraph(["h1"], ["sw"], [LinkSpec("x", "h1", "nowhere")]))
    assert set(list_netns()) == before


def test_sigterm_cleans_up():
    tag = f"{OUR_PREFIX}sigterm"
    code = ("import time; from mltcp.lab.scenario.emulation import fabric\n"
            f"f = fabric.dumbbell(2, 100, 50, prefix={tag!r})\n"
            "print('ready', flush=True); time.sleep(60)\n")
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True,
                             env={**os.environ, "PYTHONPATH": str(REPO)})
    assert child.stdout is not None and child.stdout.readline().strip() == "ready"
    assert any(ns.startswith(tag) for ns in list_netns())
    child.send_signal(signal.SIGTERM)
    assert child.wait(timeout=15) == -signal.SIGTERM
    assert not any(ns.startswith(tag) for ns in list_netns())


def test_processes_a_fabric_started_die_with_its_sigkilled_parent():
    """SIGKILL runs no teardown: what Fabric.run started must still not outlive the
    process (setpriv --pdeathsig); the namespaces are left for `mltcp testbed clean`."""
    tag = f"{OUR_PREFIX}orphan"
    code = ("import os, time; from mltcp.lab.scenario.emulation import fabric\n"
            f"f = fabric.dumbbell(2, 100, 50, prefix={tag!r})\n"
            "p = f.run('h1', ['sleep', '60'])\n"
            "time.sleep(0.5)\n"               # nsenter -> setpriv -> sleep: exec'd by now
            "print(p.pid, os.getpgid(p.pid), flush=True); time.sleep(60)\n")
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True,
                             env={**os.environ, "PYTHONPATH": str(REPO)})
    try:
        assert child.stdout is not None
        pid, pgid = (int(x) for x in child.stdout.readline().split())
        assert Path(f"/proc/{pid}/comm").read_text().strip() == "sleep"
        assert pgid == pid != os.getpgid(child.pid)          # the fabric's own group
        child.kill()
        child.wait()
        deadline = time.monotonic() + 5
        while Path(f"/proc/{pid}").exists() and time.monotonic() < deadline:
            time.sleep(0.02)
        assert not Path(f"/proc/{pid}").exists(), "the fabric's process outlived its parent"
    finally:
        child.kill()
        netns.cleanup_leftovers(tag)
        for record in owners.records():     # the killed process's claim (as clean does)
            if not record.alive:
                owners.forget(record)


def test_cleanup_leftovers_removes_prefixed_namespace():
    prefix = f"{OUR_PREFIX}leftover-"
    name = f"{prefix}x"
    subprocess.run(["ip", "netns", "add", name], check=True)
    sleeper = subprocess.Popen(nsenter_argv(name, ["sleep", "60"]))
    time.sleep(0.05)
    assert netns.cleanup_leftovers(prefix) == [name]
    assert name not in list_netns()
    assert sleeper.wait(timeout=5) != 0
    assert netns.cleanup_leftovers(prefix) == []


def test_cleanup_leftovers_refuses_foreign_prefix():
    with pytest.raises(SpecError, match="prefix"):
        netns.cleanup_leftovers("")


def test_zz_nothing_of_ours_is_left():
    """Runs last in file order: every fabric above removed its namespaces."""
    assert [ns for ns in list_netns() if ns.startswith(OUR_PREFIX)] == []
