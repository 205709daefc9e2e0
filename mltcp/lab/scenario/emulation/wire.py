"""What a capture's packets say: their ECN codepoints and the payload each connection
put on the wire, retransmissions excluded.

Frames (:class:`mltcp.lab.scenario.emulation.capture.Frame`) are dissected with scapy.  They hold
headers only (the capture's snap length), so a segment's payload length comes from the
headers: IP total length minus the IP and TCP header lengths.  New bytes are counted in
sequence space per connection: a segment adds the part of ``[seq, seq + payload)`` no
earlier segment of its connection covered, so a retransmission adds nothing and a
segment that fills a hole (after a loss, later segments went first) adds exactly the
hole.  Sequence numbers are taken relative to the SYN (or the first segment seen) and
modulo 2^32.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from scapy.layers.inet import IP, TCP
from scapy.layers.l2 import Ether

from mltcp.lab.scenario.emulation.capture import Frame

NOT_ECT, ECT1, ECT0, CE = 0, 1, 2, 3          # the IP header's two ECN bits (RFC 3168)
SEQ_MOD = 1 << 32


@dataclass(frozen=True)
class Segment:
    """One TCP/IPv4 segment on the wire."""

    t: float
    outgoing: bool
    src: str
    sport: int
    dst: str
    dport: int
    seq: int
    payload: int
    syn: bool
    ecn: int

    @property
    def conn(self) -> tuple[str, int, str, int]:
        """The sending direction's connection key (src, sport, dst, dport)."""
        return (self.src, self.sport, self.dst, self.dport)


def segments(frames: Iterable[Frame]) -> list[Segment]:
    """Every TCP/IPv4 segment among the frames, in capture order."""
    out = []
    for frame in frames:
        pkt = Ether(frame.data)
        if IP not in pkt or TCP not in pkt:
            continue
        ip, tcp = pkt[IP], pkt[TCP]
        payload = ip.len - ip.ihl * 4 - tcp.dataofs * 4
        out.append(Segment(t=frame.t, outgoing=frame.outgoing, src=ip.src, sport=tcp.sport,
                           dst=ip.dst, dport=tcp.dport, seq=tcp.seq, payload=payload,
                           syn=bool(tcp.flags.S), ecn=ip.tos & 0x3))
    return out


class _Covered:
    """Disjoint, sorted, merged byte ranges [start, end) of one connection's stream."""

    def __init__(self) -> None:
        self.starts: list[int] = []
        self.ends: list[int] = []

    def add(self, a: int, b: int) -> int:
        """Cover [a, b); returns how many of its bytes were not covered before."""
        i = bisect.bisect_left(self.ends, a)      # first range that ends at or after a
        j = i
        overlap = 0
        lo, hi = a, b
        while j < len(self.starts) and self.starts[j] <= b:
            overlap += max(0, min(b, self.ends[j]) - max(a, self.starts[j]))
            lo, hi = min(lo, self.starts[j]), max(hi, self.ends[j])
            j += 1
        self.starts[i:j] = [lo]
        self.ends[i:j] = [hi]
        return (b - a) - overlap


def new_bytes(segs: Iterable[Segment]) -> list[tuple[Segment, int]]:
    """Each data segment with the payload bytes it put on the wire for the first time."""
    base: dict[tuple[str, int, str, int], int] = {}
    covered: dict[tuple[str, int, str, int], _Covered] = {}
    out = []
    for seg in sorted(segs, key=lambda s: s.t):
        if seg.syn:
            base[seg.conn] = (seg.seq + 1) % SEQ_MOD
            continue
        if seg.payload <= 0:
            continue
        start = (seg.seq - base.setdefault(seg.conn, seg.seq)) % SEQ_MOD
        out.append((seg, covered.setdefault(seg.conn, _Covered()).add(
            start, start + seg.payload)))
    return out


def per_window(items: Iterable[tuple[float, int]], windows: Sequence[tuple[float, float]],
               slack_s: float = 0.0) -> tuple[list[int], list[tuple[float, int]]]:
    """Sum ``(t, n)`` items into the time windows ``[start - slack, end + slack]``;
    returns the sums and the items that fell in no window."""
    sums = [0] * len(windows)
    outside = []
    for t, n in items:
        for k, (start, end) in enumerate(windows):
            if start - slack_s <= t <= end + slack_s:
                sums[k] += n
                break
        else:
            outside.append((t, n))
    return sums, outside
