"""The kernel-fault witness: counts garbage ssthresh/cwnd per congestion control.

:file:`kernel/cc_fault_probe.bpf.c` attaches to two TCP tracepoints (``tcp_cong_state_set``
and ``tcp_probe``) and shares no code with the mltcp modules, so its counts are an
independent measure of the fault of docs/known-issues.md: how often TCP was handed a
garbage ``ssthresh()`` return (the fault itself), how often the garbage survived to
the next incoming segment (an *episode*), and how often TCP sent more than 64 segments
under a garbage window between two incoming segments (a *burst*: what the fault costs).
Used by the regression test (tests/test_kernel_fault.py) and
``bench/bench_kernel_fault.py``.

Attached only while the :class:`FaultProbe` is open (the links die with the object), so
it leaves nothing in the kernel.  The probe is a tracing program, and the kernel skips a
tracing program that would nest on its CPU, so ``handed_garbage`` undercounts (the
modules' own ``mltcp_health`` counters see more); an episode, which lasts until a clean
segment arrives, is seen as long as any segment of it is.
"""

from __future__ import annotations

import ctypes
from dataclasses import asdict, dataclass

from mltcp.host.build import build_object
from mltcp.host.libbpf import libbpf

PROGRAMS = ("probe_state_set", "probe_segment")


class _Key(ctypes.Structure):
    _fields_ = [("cc", ctypes.c_char * 16)]


class _Counts(ctypes.Structure):
    _fields_ = [("n", ctypes.c_uint64 * 8), ("last_bad", ctypes.c_uint64)]


@dataclass(frozen=True)
class FaultCounts:
    """One congestion control's counts since the probe was attached."""

    reductions: int              # entries into CWR/Recovery/Loss (ssthresh() calls)
    handed_garbage: int          # of those, TCP received a garbage ssthresh
    episodes: int                # garbage outlived its ACK: TCP sent under it
    segments_with_garbage: int
    segments: int
    episodes_cwnd: int           # episodes that began with a garbage cwnd (else ssthresh)
    episodes_open: int           # episodes that began outside a reduction (Open/Disorder)
    bursts: int                  # garbage-window episodes TCP sent > 64 segments in
    last_bad: int

    def to_json(self) -> dict[str, int]:
        return asdict(self)

    def minus(self, before: FaultCounts) -> FaultCounts:
        return FaultCounts(self.reductions - before.reductions,
                           self.handed_garbage - before.handed_garbage,
                           self.episodes - before.episodes,
                           self.segments_with_garbage - before.segments_with_garbage,
                           self.segments - before.segments,
                           self.episodes_cwnd - before.episodes_cwnd,
                           self.episodes_open - before.episodes_open,
                           self.bursts - before.bursts, self.last_bad)


ZERO = FaultCounts(0, 0, 0, 0, 0, 0, 0, 0, 0)


class FaultProbe:
    """Load and attach the probe; :meth:`counts` reads it; :meth:`close` detaches."""

    def __init__(self) -> None:
        self.lib = libbpf()
        self.obj = 0
        self.links: list[int] = []
        path = build_object("cc_fault_probe")
        L = self.lib.lib
        with self.lib.call("cc_fault_probe"):
            self.obj = self.lib.check_ptr(L.bpf_object__open_file(str(path).encode(), None),
                                          f"open {path.name}")
        try:
            with self.lib.call("cc_fault_probe"):
                self.lib.check(L.bpf_object__load(self.obj), "load cc_fault_probe")
            for name in PROGRAMS:
                prog = self.lib.check_ptr(
                    L.bpf_object__find_program_by_name(self.obj, name.encode()), f"prog {name}")
                with self.lib.call(name):
                    self.links.append(self.lib.check_ptr(L.bpf_program__attach(prog),
                                                         f"attach {name}"))
            found = L.bpf_object__find_map_by_name(self.obj, b"probe_counts")
            self.counts_fd = L.bpf_map__fd(self.lib.check_ptr(found, "map probe_counts"))
        except BaseException:
            self.close()
            raise

    def counts(self) -> dict[str, FaultCounts]:
        """Congestion-control name -> its counts so far."""
        out = {}
        for key in self.lib.map_keys(self.counts_fd, _Key):
            value = _Counts()
            if self.lib.map_lookup(self.counts_fd, key, value):
                n = list(value.n)
                out[key.cc.decode()] = FaultCounts(*n, value.last_bad)
        return out

    def close(self) -> None:
        for link in self.links:
            self.lib.lib.bpf_link__destroy(link)
        self.links = []
        if self.obj:
            self.lib.lib.bpf_object__close(self.obj)
            self.obj = 0

    def __enter__(self) -> FaultProbe:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# -- the measurement: ECN-marked bulk flows under the probe --------------------------

RATE_MBIT = 300          # the rate the fault was characterised at (docs/known-issues.md)
QUEUE_PACKETS = 1000
MARK_ABOVE_BYTES = 65_000


@dataclass(frozen=True)
class FaultRun:
    """``flows`` ECN-marked bulk flows of one congestion control for ``seconds``."""

    cc: str
    seconds: float
    counts: FaultCounts
    drops: int
    goodput_fraction: float     # of the bottleneck rate

    @property
    def episodes_per_minute(self) -> float:
        return self.counts.episodes * 60.0 / self.seconds

    @property
    def garbage_per_minute(self) -> float:
        return self.counts.handed_garbage * 60.0 / self.seconds

    def to_json(self) -> dict[str, object]:
        return {"cc": self.cc, "seconds": self.seconds, **self.counts.to_json(),
                "drops": self.drops, "goodput_fraction": self.goodput_fraction,
                "episodes_per_minute": self.episodes_per_minute,
                "garbage_per_minute": self.garbage_per_minute}


class EcnBench:
    """A dumbbell (h1, h2 -> h3) whose 300 Mbit/s bottleneck marks CE above 65 kB (the
    project's own marker), and the probe; :meth:`run` drives two bulk flows of one CC.

    Senders emit single segments (gso_max_segs 1), as in the fault's characterisation:
    more ACKs per second, more nesting, more exposure."""

    def __init__(self, seconds_per_run: float) -> None:
        from mltcp.host import datapath
        from mltcp.lab.scenario.emulation import fabric

        self.seconds = seconds_per_run
        self.net = fabric.dumbbell(3, RATE_MBIT, QUEUE_PACKETS, gso_max_segs=1)
        try:
            self.port = self.net.egress("bottleneck", "swL")
            datapath.attach_marker(self.port.dev, MARK_ABOVE_BYTES,
                                   netns=self.net.ns(self.port.node))
            self.probe = FaultProbe()
        except BaseException:
            self.close()
            raise

    def run(self, cc: str, base_port: int = 7100) -> FaultRun:
        from mltcp.lab.scenario.emulation import traffic

        listener = cc if cc.endswith("dctcp") else None   # DCTCP receivers echo CE exactly
        specs = [traffic.TrafficSpec(
            name=f"{src}-{cc}", cc=cc, pattern="oneway", duration_s=self.seconds,
            workers=[self.net.endpoint(src, base_port + i), self.net.endpoint("h3", base_port + i)],
            listener_cc=listener) for i, src in enumerate(("h1", "h2"))]
        before = self.probe.counts().get(cc, ZERO)
        drops = self.net.queue(self.port).drops
        reports = traffic.run_jobs(specs)
        after = self.probe.counts().get(cc, ZERO)
        goodput = sum(r["goodput_bps"] for r in reports) / (RATE_MBIT * 1e6)
        return FaultRun(cc, self.seconds, after.minus(before),
                        self.net.queue(self.port).drops - drops, goodput)

    def close(self) -> None:
        from mltcp.host import datapath

        probe = getattr(self, "probe", None)
        if probe is not None:
            probe.close()
        try:
            if hasattr(self, "port"):   # the marker was attached after the port was found
                datapath.detach_marker(self.port.dev, netns=self.net.ns(self.port.node))
        finally:
            self.net.close()

    def __enter__(self) -> EcnBench:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
