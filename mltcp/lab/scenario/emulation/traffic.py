"""The testbed's one traffic generator: training jobs (and bulk flows) over real kernel TCP.

A job is one process (``python -m mltcp.lab.scenario.emulation.traffic SPEC.json``) whose
workers are threads; each thread enters its worker's host namespace (setns on the
thread) before it creates sockets, so the sockets live in that host's TCP stack while
the job keeps one clock and one barrier.  Every worker listens on its endpoint and
discards what arrives; the *senders* open ``connections`` connections each to their
successor:

* ``pattern = "ring"``: every worker sends to the next one in ring order (ring
  AllReduce's bytes on every link); ``"oneway"``: worker 0 sends to worker 1 only (a
  single flow, for measurements of one direction).
* ``iterations > 0``: per iteration every sender sleeps for the compute time (plus
  that iteration's seeded jitter), then hands its share to the kernel at once and
  waits until all of it is acknowledged; the iteration ends when the last sender's
  data is ACKed (barrier), then all start the next compute.  The ring is pipelined:
  each worker streams its 2(N-1)/N x G bytes to its successor without waiting for
  per-step chunks from its predecessor; the bytes on every link and the barrier are
  those of ring AllReduce, the step-level dependencies inside one iteration are not
  modelled.
* ``pause_ms > 0``: a silence inside every iteration's communication: each connection
  sends the first half of its share, waits until it is acknowledged, pauses, then sends
  the rest (DDP waiting for the backward pass between gradient buckets); the iteration
  tracker's tests use it.  ``signal_job``: after each iteration the job signals its end
  to the datapath (``mltcp.host.jobs.signal``, as the hook does through the agent).
* ``duration_s > 0``: bulk instead: every sender streams for that long (goodput
  counts the bytes ACKed by the deadline).

The report (JSON, at ``spec.out``) has the iterations (times in seconds since the
job's time 0: ``t0``, or the moment every connection was up), the bytes acknowledged,
and optionally ``TCP_INFO`` samples of every sending connection.  ``Launch`` starts
several jobs at once from the calling process and collects their reports; the netns
backend, ``mltcp demo --live``, the kernel tests and the datapath benchmark all drive
traffic through it.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from mltcp.core import validate
from mltcp.core.errors import MltcpError, SpecError
from mltcp.host import jobs
from mltcp.host.namespaces import enter_netns
from mltcp.lab.scenario.emulation.procgroup import ProcessGroup
from mltcp.lab.scenario.emulation.sockets import (
    drain,
    hold_whole_share,
    read_tcp_info,
    send_and_wait_acked,
    set_congestion,
    split_evenly,
    zero_payload,
)

MODULE = "mltcp.lab.scenario.emulation.traffic"   # how `mltcp testbed clean` recognises leftovers
PATTERNS = ("ring", "oneway")
ACK_POLL_S = 0.0005        # per sending thread: 4+ pollers share 2 cores with the network
_BULK_CHUNK = 1 << 20
_BULK_SEND_TIMEOUT_S = 0.05
_CONNECT_TIMEOUT_S = 30.0
_LISTEN_TIMEOUT_S = 10.0
PR_SET_PDEATHSIG = 1
PARENT_ENV = "MLTCP_TRAFFIC_PARENT"   # the launcher's pid, for the driver's check
SCRATCH_PREFIX = "mltcp-traffic-"   # + the launcher's pid: `testbed clean` finds dead ones


@dataclass(frozen=True)
class Endpoint:
    """Where a worker lives: its host's namespace (a path; None: the caller's own), the
    address its listener binds and its predecessor connects to, and the port."""

    netns: str | None
    addr: str
    port: int


@dataclass
class TrafficSpec:
    """One job's traffic (validated on construction, JSON in and out)."""

    name: str
    workers: list[Endpoint]
    cc: str
    connections: int = 1
    pattern: str = "ring"
    iterations: int = 0
    bytes_per_worker: int = 0
    compute_ms: float = 0.0
    compute_jitter_ms: list[float] = field(default_factory=list)
    pause_ms: float = 0.0              # > 0: a silence halfway through each connection's share
    signal_job: str | None = None      # the datapath job to signal at each iteration's end
    duration_s: float = 0.0
    t0: float | None = None            # CLOCK_MONOTONIC of time 0; None: once connected
    start_offset_ms: float = 0.0
    sample_ms: float = 0.0             # > 0: TCP_INFO of every sending connection
    listener_cc: str | None = None     # DCTCP receivers must run DCTCP too (ECN echo)
    cgroup: str | None = None          # cgroup v2 directory the process joins first
    out: str = ""

    def __post_init__(self) -> None:
        self.workers = [w if isinstance(w, Endpoint) else Endpoint(**w) for w in self.workers]
        validate.choice(self.pattern, "pattern", PATTERNS)
        if len(self.workers) < 2:
            raise SpecError("workers", f"{len(self.workers)} worker(s)",
                            "give at least two (a sender and its successor)")
        for i, w in enumerate(self.workers):
            validate.port(w.port, f"workers[{i}].port")
        validate.integer(self.connections, "connections", 1, 1024, "1")
        if self.duration_s:
            validate.number(self.duration_s, "duration_s", 0, 86_400, "3", lo_open=True)
        if self.iterations:
            validate.integer(self.iterations, "iterations", 1, 1_000_000, "20")
        if bool(self.iterations) == bool(self.duration_s):
            raise SpecError("iterations", "give exactly one of iterations and duration_s",
                            "iterations > 0 for training traffic, duration_s > 0 for bulk")
        if self.iterations and self.bytes_per_worker < self.connections:
            raise SpecError("bytes_per_worker", f"{self.bytes_per_worker} is less than one "
                            "byte per connection",
                            f"use at least {self.connections} (one per connection)")
        validate.number(self.compute_ms, "compute_ms", 0, 600_000, "120")
        validate.number(self.pause_ms, "pause_ms", 0, 600_000, "0 (no pause)")
        if self.pause_ms and not self.iterations:
            raise SpecError("pause_ms", "a pause inside communication needs iterations",
                            "give iterations > 0, or pause_ms = 0 for bulk traffic")
        if self.sample_ms:
            validate.number(self.sample_ms, "sample_ms", 0.1, 60_000, "10")

    @property
    def senders(self) -> list[int]:
        """The workers that send (to their successor)."""
        return list(range(len(self.workers))) if self.pattern == "ring" else [0]

    @property
    def receivers(self) -> list[int]:
        return [(i + 1) % len(self.workers) for i in self.senders]

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> TrafficSpec:
        return cls(**json.loads(text))


# --------------------------------------------------------------------------- the job


@dataclass
class _Sender:
    """One sending worker's connections and what its last iteration took."""

    index: int
    socks: list[socket.socket] = field(default_factory=list)
    comm_end: float = 0.0
    retransmits: int = 0
    rtos: int = 0
    error: BaseException | None = None


def _listen(spec: TrafficSpec, w: Endpoint, n: int, ready: threading.Event,
            failures: list[BaseException]) -> None:
    """Accept ``n`` connections on the worker's endpoint and discard what they carry."""
    try:
        if w.netns:
            enter_netns(w.netns)
        srv = socket.socket()
        srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if spec.listener_cc:
            set_congestion(srv, spec.listener_cc)   # accepted sockets inherit it
        srv.bind((w.addr, w.port))
        srv.listen(n)
        ready.set()
        for _ in range(n):
            conn, _ = srv.accept()
            threading.Thread(target=drain, args=(conn,), daemon=True).start()
        srv.close()
    except BaseException as exc:   # reported by the main thread
        failures.append(exc)
        ready.set()


def _loss_counters(socks: list[socket.socket]) -> tuple[int, int]:
    """(segments retransmitted, retransmission timeouts) so far, over ``socks``."""
    infos = [read_tcp_info(s) for s in socks]
    return sum(i.total_retrans for i in infos), sum(i.total_rto for i in infos)


class _Sampler(threading.Thread):
    """TCP_INFO of every sending connection every ``period_s`` (cwnd, RTT, progress)."""

    def __init__(self, socks: list[socket.socket], t0: float, period_s: float) -> None:
        super().__init__(daemon=True)
        self.socks, self.t0, self.period_s = socks, t0, period_s
        self.base = [read_tcp_info(s).bytes_acked for s in socks]   # the SYN counts 1
        self.samples: list[dict[str, Any]] = []
        self.stop = threading.Event()

    def run(self) -> None:
        next_t = time.monotonic()
        while not self.stop.is_set():
            t = time.monotonic() - self.t0
            for i, (sock, base) in enumerate(zip(self.socks, self.base, strict=True)):
                try:
                    info = read_tcp_info(sock)
                except OSError:
                    return
                self.samples.append({
                    "t": round(t, 6), "conn": i, "cwnd": info.snd_cwnd, "rtt_us": info.rtt_us,
                    "bytes_acked": info.bytes_acked - base, "retrans": info.total_retrans,
                    "ssthresh": info.snd_ssthresh, "ca_state": info.ca_state,
                    "delivered": info.delivered, "delivered_ce": info.delivered_ce,
                    "dsack_dups": info.dsack_dups})
            next_t += self.period_s
            self.stop.wait(max(0.0, next_t - time.monotonic()))


def _bulk(sock: socket.socket, deadline: float) -> None:
    payload = memoryview(bytes(_BULK_CHUNK))
    sock.settimeout(_BULK_SEND_TIMEOUT_S)
    while time.monotonic() < deadline:
        try:
            sock.send(payload)
        except TimeoutError:
            continue
        except OSError:
            return


def run(spec: TrafficSpec) -> dict[str, Any]:
    """Run the job; its report (see the module docstring)."""
    if spec.cgroup:
        Path(spec.cgroup, "cgroup.procs").write_text(str(os.getpid()))
    failures: list[BaseException] = []
    listeners = sorted(set(spec.receivers))
    ready = [threading.Event() for _ in listeners]
    for w, ev in zip(listeners, ready, strict=True):
        threading.Thread(target=_listen, args=(spec, spec.workers[w], spec.connections, ev,
                                               failures), daemon=True).start()
    for ev in ready:
        ev.wait(_LISTEN_TIMEOUT_S)
    if failures:
        raise failures[0]

    senders = [_Sender(i) for i in spec.senders]
    shares = split_evenly(spec.bytes_per_worker, spec.connections) if spec.iterations \
        else [0] * spec.connections
    barrier = threading.Barrier(len(senders) + 1)     # senders + the recording main thread
    clock: dict[str, float] = {}

    def sender_main(s: _Sender) -> None:
        me, succ = spec.workers[s.index], spec.workers[(s.index + 1) % len(spec.workers)]
        try:
            if me.netns:
                enter_netns(me.netns)
            for _ in range(spec.connections):
                sock = socket.socket()
                set_congestion(sock, spec.cc)
                if spec.iterations:
                    hold_whole_share(sock, max(shares))
                # Reset on close: a job killed mid-iteration must not leave orphaned
                # sockets retransmitting megabytes (and pinning the MLTCP module) for
                # minutes; after a bulk run, buffered data must not flow into the next
                # measurement.  A finished iteration has nothing unacknowledged anyway.
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                sock.settimeout(_CONNECT_TIMEOUT_S)
                sock.connect((succ.addr, succ.port))
                s.socks.append(sock)
            barrier.wait()                              # connected
            barrier.wait()                              # time 0 is set
            if not spec.iterations:
                threads = [threading.Thread(target=_bulk, args=(sock, clock["deadline"]))
                           for sock in s.socks]
                for t in threads:
                    t.start()
                for t in threads:
                    t.join()
                barrier.wait()                          # every bulk sender is done
                return
            # One zero buffer per worker, sent whole: a refill between chunks is a stall.
            payload = zero_payload(max(shares))
            for sock in s.socks:
                sock.settimeout(None)
            for _ in range(spec.iterations):
                barrier.wait()                          # iteration starts (compute done)
                before = _loss_counters(s.socks)
                sends = [threading.Thread(target=_send_share,
                                          args=(sock, n, payload, spec.pause_ms / 1000))
                         for sock, n in zip(s.socks, shares, strict=True) if n]
                for t in sends:
                    t.start()
                for t in sends:
                    t.join()
                s.comm_end = time.monotonic()
                after = _loss_counters(s.socks)
                s.retransmits, s.rtos = after[0] - before[0], after[1] - before[1]
                barrier.wait()                          # every sender's data ACKed
        except BaseException as exc:
            s.error = exc
            barrier.abort()

    threads = [threading.Thread(target=sender_main, args=(s,), daemon=True) for s in senders]
    for t in threads:
        t.start()
    records: list[dict[str, Any]] = []
    sampler = None
    try:
        barrier.wait()
        t0 = spec.t0 if spec.t0 is not None else time.monotonic()
        socks = [sock for s in senders for sock in s.socks]
        base = [read_tcp_info(sock).bytes_acked for sock in socks]
        if spec.sample_ms:
            sampler = _Sampler(socks, t0, spec.sample_ms / 1000)
            sampler.start()
        start_at = t0 + spec.start_offset_ms / 1000
        clock["deadline"] = start_at + spec.duration_s
        if start_at > time.monotonic():
            time.sleep(start_at - time.monotonic())
        barrier.wait()
        if spec.iterations:
            records = _iterations(spec, senders, barrier, t0)
        else:       # goodput counts what was ACKed by the deadline, read right there
            time.sleep(max(0.0, clock["deadline"] - time.monotonic()))
        acked = sum(read_tcp_info(sock).bytes_acked - b for sock, b in zip(socks, base,
                                                                          strict=True))
        elapsed = time.monotonic() - start_at
        if not spec.iterations:
            barrier.wait()                              # the bulk senders stopped
    except threading.BrokenBarrierError:
        errors = [s.error for s in senders if s.error]
        raise errors[0] if errors else RuntimeError("job barrier broken") from None
    finally:
        if sampler is not None:
            sampler.stop.set()
            sampler.join()
    for t in threads:
        t.join(timeout=10)
    for s in senders:
        for sock in s.socks:
            sock.close()
    return {"name": spec.name, "cc": spec.cc, "connections": spec.connections,
            "pattern": spec.pattern, "t0_monotonic": t0, "iterations": records,
            "bytes_acked_total": acked, "duration_s": round(elapsed, 6),
            "goodput_bps": acked * 8 / elapsed if elapsed > 0 else 0.0,
            "samples": sampler.samples if sampler is not None else []}


def _send_share(sock: socket.socket, nbytes: int, payload: memoryview, pause_s: float) -> None:
    """One connection's share of an iteration, acknowledged; with ``pause_s`` the first
    half is acknowledged, then the connection stays silent that long before the rest."""
    if pause_s > 0 and nbytes > 1:
        first = nbytes // 2
        send_and_wait_acked(sock, first, payload, ACK_POLL_S)
        time.sleep(pause_s)
        nbytes -= first
    send_and_wait_acked(sock, nbytes, payload, ACK_POLL_S)


def _iterations(spec: TrafficSpec, senders: list[_Sender], barrier: threading.Barrier,
                t0: float) -> list[dict[str, Any]]:
    """The main thread's side of every iteration: compute, then the two barriers."""
    records = []
    for k in range(spec.iterations):
        it_start = time.monotonic()
        jitter = spec.compute_jitter_ms[k] if k < len(spec.compute_jitter_ms) else 0.0
        time.sleep(max(0.0, spec.compute_ms + jitter) / 1000)
        comm_start = time.monotonic()
        barrier.wait()
        barrier.wait()
        comm_end = max(s.comm_end for s in senders)
        if spec.signal_job:        # the hook's signal, without the agent in between
            jobs.signal(spec.signal_job)
        records.append({"index": k, "start": it_start - t0, "comm_start": comm_start - t0,
                        "comm_end": comm_end - t0, "end": comm_end - t0,
                        "bytes": spec.bytes_per_worker * len(senders),
                        "retransmits": sum(s.retransmits for s in senders),
                        "rtos": sum(s.rtos for s in senders)})
    return records


# --------------------------------------------------------------------------- launching


class Launch:
    """Jobs started together, each its own process; their reports once they end.

    Use as a context manager: leaving it stops whatever still runs.  A job whose
    process fails is an :class:`~mltcp.core.errors.MltcpError` naming the job and
    carrying its error line."""

    def __init__(self, specs: Sequence[TrafficSpec], group: ProcessGroup | None = None) -> None:
        """Start every job, each a process in ``group`` (the run's: a testbed run passes
        its fabric's, so that one teardown stops all; default: a group of its own)."""
        self._tmp = tempfile.TemporaryDirectory(prefix=f"{SCRATCH_PREFIX}{os.getpid()}-")
        self.group = group if group is not None else ProcessGroup()
        self._own_group = group is None
        self.specs = []
        self.procs: list[subprocess.Popen[str]] = []
        env = {**os.environ, PARENT_ENV: str(os.getpid())}
        try:
            for k, spec in enumerate(specs):
                out = Path(self._tmp.name) / f"{k}-{spec.name}.json"
                spec = TrafficSpec(**{**asdict(spec), "out": str(out)})
                path = out.with_suffix(".spec.json")
                path.write_text(spec.to_json())
                self.specs.append(spec)
                self.procs.append(self.group.popen([sys.executable, "-m", MODULE, str(path)],
                                                   stdin=subprocess.DEVNULL,
                                                   stderr=subprocess.PIPE, text=True, env=env))
        except BaseException:
            self.stop()
            raise

    def running(self) -> bool:
        return any(p.poll() is None for p in self.procs)

    def wait(self, timeout_s: float = 600.0) -> list[dict[str, Any]]:
        """Every job's report, in the order given."""
        deadline = time.monotonic() + timeout_s
        for spec, proc in zip(self.specs, self.procs, strict=True):
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                raise MltcpError(f"job {spec.name} did not finish within {timeout_s:g} s") \
                    from None
        reports = []
        for spec, proc in zip(self.specs, self.procs, strict=True):
            err = proc.stderr.read().strip() if proc.stderr else ""
            if proc.returncode != 0 or not Path(spec.out).exists():
                raise MltcpError(f"job {spec.name} failed (exit {proc.returncode}): "
                                 f"{err.splitlines()[-1] if err else 'no error output'}")
            reports.append(json.loads(Path(spec.out).read_text()))
        return reports

    def stop(self) -> None:
        """Kill what still runs (the whole group if it is the launch's own) and reap it."""
        if self._own_group:
            self.group.stop(grace_s=0)
        for proc in self.procs:
            if proc.poll() is None:
                proc.kill()
            with contextlib.suppress(Exception):
                proc.wait(timeout=5)
        self._tmp.cleanup()

    def __enter__(self) -> Launch:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def run_jobs(specs: Sequence[TrafficSpec], timeout_s: float = 600.0) -> list[dict[str, Any]]:
    """Start ``specs`` at once, wait for all of them, return their reports in order."""
    with Launch(specs) as launch:
        return launch.wait(timeout_s)


def pids(orphans_only: bool = True) -> list[int]:
    """PIDs of traffic jobs on this host.  ``orphans_only``: those whose launcher is gone
    (re-parented to init); a running testbed's jobs are its children and are left alone."""
    out = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            argv = (proc / "cmdline").read_bytes().split(b"\0")
            ppid = int((proc / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        if MODULE.encode() in argv[:4] and (ppid == 1 or not orphans_only):
            out.append(int(proc.name))
    return out


def stale_scratch() -> list[Path]:
    """Scratch directories of launchers that are gone (killed runs never cleaned them)."""
    out = []
    for path in Path(tempfile.gettempdir()).glob(f"{SCRATCH_PREFIX}*"):
        pid = path.name.removeprefix(SCRATCH_PREFIX).split("-", 1)[0]
        if pid.isdigit() and not Path(f"/proc/{pid}").exists():
            out.append(path)
    return out


def _die_with_parent() -> None:
    """A job whose launcher was killed must not keep its sockets (and with them the
    MLTCP module it runs) alive: ask the kernel for SIGKILL when the parent dies.  A
    parent that died before the request was made is noticed by the parent pid having
    changed (the launcher passes its own in the environment): then exit at once."""
    import ctypes
    import signal

    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    expected = os.environ.get(PARENT_ENV, "")
    if expected.isdigit() and os.getppid() != int(expected):
        os._exit(1)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    _die_with_parent()
    if len(argv) != 1:
        print(f"usage: python -m {MODULE} SPEC.json", file=sys.stderr)
        return 2
    try:
        spec = TrafficSpec.from_json(Path(argv[0]).read_text())
        report = run(spec)
    except SpecError as exc:
        print(f"traffic: error: {exc}", file=sys.stderr)
        return 2
    except Exception as exc:
        print(f"traffic: error: {exc}", file=sys.stderr)
        return 1
    Path(spec.out).write_text(json.dumps(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
