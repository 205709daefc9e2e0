"""Checks made from the packets themselves.

Without root: the dissection and the sequence-space accounting, on frames scapy builds.
With root: a short real testbed run with captures on both directions of the bottleneck
(AF_PACKET sockets inside the switches' namespaces): CE marks only where the marker's
threshold lets the queue mark them, the codepoints the marker claims, and every
worker's new payload per iteration equal to its budget, nothing sent in the compute gaps.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import pytest

scapy_all = pytest.importorskip("scapy.all", reason="needs scapy (the test extra)")
from scapy.layers.inet import IP, TCP  # noqa: E402
from scapy.layers.l2 import Ether  # noqa: E402
from scapy.packet import Raw  # noqa: E402

from mltcp.lab.scenario.emulation import wire  # noqa: E402
from mltcp.lab.scenario.emulation.capture import SNAP_BYTES, Capture, Frame  # noqa: E402

A, B = "10.200.0.1", "10.200.0.2"


def frame(t: float, seq: int, n: int, *, tos: int = 2, flags: str = "A", src: str = A,
          dst: str = B, sport: int = 40000, dport: int = 9000) -> Frame:
    """A captured frame as the capture keeps it: headers only (SNAP_BYTES)."""
    pkt = (Ether() / IP(src=src, dst=dst, tos=tos) /
           TCP(sport=sport, dport=dport, seq=seq, flags=flags,
               options=[("NOP", None), ("NOP", None), ("Timestamp", (1, 2))]) /
           Raw(b"x" * n))
    return Frame(t, True, bytes(pkt)[:SNAP_BYTES])


def test_payload_and_codepoints_come_from_the_headers() -> None:
    segs = wire.segments([frame(0.0, 1000, 1448, tos=3), frame(0.1, 2448, 0, tos=0),
                          Frame(0.2, True, bytes(Ether() / Raw(b"arp?")))])
    assert [(s.payload, s.ecn) for s in segs] == [(1448, wire.CE), (0, wire.NOT_ECT)]
    assert segs[0].conn == (A, 40000, B, 9000) and not segs[0].syn


def test_retransmissions_add_nothing_and_holes_add_themselves() -> None:
    isn = 2**32 - 3000                           # the stream wraps around 2^32
    frames = [frame(0.0, isn, 0, flags="S"),
              frame(0.1, isn + 1, 1448),             # [0, 1448)
              frame(0.2, (isn + 1 + 2896) % 2**32, 1448),   # [2896, 4344): a hole before
              frame(0.3, isn + 1, 1448, tos=0),      # retransmission of [0, 1448)
              frame(0.4, (isn + 1 + 1448) % 2**32, 2896, tos=0),  # fills the hole + repeat
              frame(0.5, (isn + 1 + 4344) % 2**32, 100)]
    added = [n for _seg, n in wire.new_bytes(wire.segments(frames))]
    assert added == [1448, 1448, 0, 1448, 100]
    assert sum(added) == 4444


def test_connections_are_counted_apart_and_windows_split_them() -> None:
    frames = [frame(1.0, 0, 1000, sport=1), frame(1.1, 0, 1000, sport=2),
              frame(2.0, 1000, 500, sport=1), frame(5.0, 1500, 7, sport=1)]
    items = [(seg.t, n) for seg, n in wire.new_bytes(wire.segments(frames))]
    sums, outside = wire.per_window(items, [(0.9, 1.2), (1.9, 2.1)], slack_s=0.01)
    assert sums == [2000, 500] and outside == [(5.0, 7)]


# --------------------------------------------------------------------------- on the testbed

def _missing_root() -> str | None:
    if os.geteuid() != 0:
        return "needs root (CAP_NET_ADMIN, CAP_NET_RAW, CAP_BPF) for namespaces, captures and " \
               "the ECN marker"
    return None


needs_root = pytest.mark.skipif(_missing_root() is not None, reason=_missing_root() or "")

WIRE_SCENARIO = """
name = "wire"
[topology]
kind = "dumbbell"
bottleneck_mbit = 100
queue_packets = 100
ecn_threshold_bytes = 3000
hosts = 2
[[jobs]]
name = "a"
compute_ms = 100
bytes_per_iteration = "2MB"
workers = 2
connections = 2
iterations = 3
[[schemes]]
name = "cubic"
cc = "cubic"
mltcp = false
"""
HIGH_K = 1 << 30          # above any queue: the marker may never mark


@dataclasses.dataclass
class Wires:
    """What the hook saw: per shaped egress (node, dev), its capture, its marker's
    counters and its queue's drops, and the run's time 0."""

    t0: float = 0.0
    captures: dict = dataclasses.field(default_factory=dict)
    markers: dict = dataclasses.field(default_factory=dict)
    drops: dict = dataclasses.field(default_factory=dict)
    ports: dict = dataclasses.field(default_factory=dict)
    ns: dict = dataclasses.field(default_factory=dict)
    egress: dict = dataclasses.field(default_factory=dict)    # (link id, node) -> key
    addrs: dict = dataclasses.field(default_factory=dict)     # host -> address


def _capture_run(tmp_path: Path, k_bytes: int):
    """One run of the wire scenario with threshold ``k_bytes``; its trace, plan, Wires."""
    from mltcp.host import datapath
    from mltcp.lab.scenario.emulation import testbed
    from mltcp.lab.scenario.plan import resolve
    from mltcp.lab.scenario.spec import load_scenario

    spec = tmp_path / "wire.toml"
    spec.write_text(WIRE_SCENARIO)
    sc = load_scenario(str(spec))
    plan = dataclasses.replace(resolve(sc, sc.scheme("cubic"), 0), ecn_threshold_bytes=k_bytes)
    seen = Wires()

    @contextmanager
    def during(live: testbed.LiveRun) -> Iterator[None]:
        fab = live.fabric
        seen.t0 = live.t0
        seen.addrs = {h: fab.host_addr(h) for h in fab.hosts}
        with ExitStack() as stack:
            for lid, port in fab.shaped_ports():
                key = (port.node, port.dev)
                seen.ports[key], seen.ns[key] = port, fab.ns(port.node)
                seen.egress[(lid, port.node)] = key
                seen.captures[key] = stack.enter_context(Capture(fab.ns(port.node), port.dev))
            yield
        for key, port in seen.ports.items():      # captures stopped; the network is still up
            seen.markers[key] = datapath.marker_stats(port.dev, netns=seen.ns[key])
            seen.drops[key] = fab.queue(port).drops

    trace = testbed.run_plan(plan, during=during)
    for key, cap in seen.captures.items():      # for wireshark when a check fails
        scapy_all.wrpcap(str(tmp_path / f"k{k_bytes}-{key[0]}-{key[1]}.pcap"),
                         [Ether(f.data) for f in cap.frames])
    return trace, plan, seen


def _check_budget_per_iteration(trace, plan, seen: Wires) -> None:
    """(b): each worker's new payload on the wire per iteration is its budget, and it
    sends nothing between iterations (the compute gaps)."""
    from mltcp.lab.scenario.emulation.testbed import BASE_PORT

    [job] = plan.active_jobs
    port = BASE_PORT + job.index                 # where the job's workers listen
    windows = [(seen.t0 + it.comm_start, seen.t0 + it.comm_end)
               for it in trace.job(job.name).iterations]
    assert len(windows) == job.spec.iterations
    checked = 0
    for flow in job.flows:
        [(a, _b, link)] = [hop for hop in flow.hops if hop[2].rate_mbit]
        key = seen.egress[(link.id, a)]          # where the worker's data leaves switch a
        src, dst = seen.addrs[flow.src], seen.addrs[flow.dst]
        segs = [s for s in wire.segments(seen.captures[key].frames)
                if s.outgoing and s.src == src and s.dst == dst and s.dport == port]
        items = [(seg.t, n) for seg, n in wire.new_bytes(segs)]
        sums, outside = wire.per_window(items, windows, slack_s=0.005)
        assert sums == [job.comm_bytes_per_worker] * len(windows), (flow, sums)
        assert [(t - seen.t0, n) for t, n in outside if n] == [], flow
        assert len({s.sport for s in segs}) == job.spec.connections
        checked += 1
    assert checked == job.spec.workers


@needs_root
def test_marks_codepoints_and_budgets_on_the_wire(clean_datapath, tmp_path) -> None:
    results = {}
    for k in (3000, HIGH_K):
        trace, plan, seen = _capture_run(tmp_path, k)
        results[k] = (trace, plan, seen)
    low, high = results[3000][2], results[HIGH_K][2]
    for seen in (low, high):
        assert all(cap.kernel_drops == 0 for cap in seen.captures.values()), \
            "the capture lost frames: its checks would be wrong"

    def ce_on_wire(seen: Wires, key) -> list[wire.Segment]:
        return [s for s in wire.segments(seen.captures[key].frames)
                if s.outgoing and s.ecn == wire.CE]

    # (a) A threshold above any queue: no mark, on the wire or in the marker, although
    # the queue went well past the low threshold (so marks would have been possible).
    for key in high.ports:
        assert ce_on_wire(high, key) == [] and high.markers[key].marked == 0
    assert max(high.markers[key].max_backlog for key in high.ports) > 3000
    # The low threshold: CE marks, as many on the wire as the marker says it set, less
    # at most the marked packets the full queue dropped after marking.
    total_ce = 0
    for key, port in low.ports.items():
        m = low.markers[key]
        ce = ce_on_wire(low, key)
        total_ce += len(ce)
        assert 0 <= m.marked - len(ce) <= low.drops[key], (port, m.marked, len(ce))
        assert m.marked == 0 or m.max_backlog > 3000
        # The marker marks only ECN-capable packets, and TCP makes only data ECN-capable.
        assert all(s.payload > 0 for s in ce)
        out = [s for s in wire.segments(low.captures[key].frames) if s.outgoing]
        assert not [s for s in out if s.ecn == wire.ECT1]    # nobody sends ECT(1) here
        assert any(s.ecn == wire.ECT0 for s in out)           # data left ECN-capable
        # The capture saw every packet the marker passed to the queue but the drops (a
        # few connection-closing packets may cross after the capture stopped).
        sent = len([f for f in low.captures[key].frames if f.outgoing])
        assert 0 <= m.packets - low.drops[key] - sent <= 16, (port, m.packets, sent)
    assert total_ce > 0
    # (b) per worker and iteration, the budget, retransmissions excluded.
    for trace, plan, seen in results.values():
        _check_budget_per_iteration(trace, plan, seen)
