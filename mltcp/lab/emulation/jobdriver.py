"""One synthetic training job across emulated hosts: compute, ring collective, barrier.

A job is one process; each of its workers is a thread that enters the worker's
host namespace (setns on the thread) before it creates its sockets, so the
sockets live in that host's TCP stack while the job keeps one clock and one
barrier.  Per iteration every worker sleeps for the compute time, then sends its
share of the collective to its ring successor over its connections and waits
until all of it is ACKed; the iteration ends when the last worker's data is
ACKed (barrier semantics), then all workers start the next compute phase.

The ring is pipelined: each worker streams its 2(N-1)/N x G bytes to its
successor without waiting for per-step chunks from its predecessor.  The bytes
on every link and the barrier at the end are those of ring AllReduce; the
step-level dependencies inside one iteration are not modelled.

    python -m mltcp.lab.emulation.jobdriver SPEC.json     (SPEC: see DriverSpec; writes spec.out)
"""

from __future__ import annotations

import json
import socket
import struct
import sys
import threading
import time
from dataclasses import asdict, dataclass, field

from mltcp.host.namespaces import enter_netns
from mltcp.lab.emulation.traffic import (
    drain,
    hold_whole_share,
    read_tcp_info,
    send_and_wait_acked,
    set_congestion,
    split_evenly,
    zero_payload,
)

ACK_POLL_S = 0.0005   # per worker thread: 4+ pollers share 2 cores with the network


@dataclass
class WorkerSpec:
    netns: str         # path, e.g. /run/netns/mltcp-...-h1
    addr: str          # the worker's address (its successor connects here)
    port: int          # the worker's listening port


@dataclass
class DriverSpec:
    job: str
    workers: list[WorkerSpec]
    cc: str                    # congestion control of the job's sockets
    connections: int
    compute_ms: float
    bytes_per_worker: int      # sent by each worker per iteration
    iterations: int
    t0: float                  # CLOCK_MONOTONIC of the scenario's time 0
    start_offset_ms: float = 0.0
    compute_jitter_ms: list[float] = field(default_factory=list)   # per iteration, added
    out: str = ""
    listener_cc: str | None = None   # DCTCP receivers must run DCTCP too (ECN echo)

    @classmethod
    def from_json(cls, text: str) -> DriverSpec:
        d = json.loads(text)
        d["workers"] = [WorkerSpec(**w) for w in d["workers"]]
        return cls(**d)

    def to_json(self) -> str:
        return json.dumps(asdict(self))


@dataclass
class _Worker:
    spec: WorkerSpec
    socks: list[socket.socket] = field(default_factory=list)
    comm_end: float = 0.0
    retransmits: int = 0     # this iteration's, over the worker's connections
    rtos: int = 0
    acked: int = 0
    error: BaseException | None = None


def _listen(worker: _Worker, n: int, cc: str | None, ready: threading.Event,
            failures: list[BaseException]) -> None:
    try:
        enter_netns(worker.spec.netns)
        srv = socket.socket()
        srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if cc:
            set_congestion(srv, cc)
        srv.bind((worker.spec.addr, worker.spec.port))
        srv.listen(n)
        ready.set()
        for _ in range(n):
            conn, _ = srv.accept()
            threading.Thread(target=drain, args=(conn, []), daemon=True).start()
        srv.close()
    except BaseException as exc:  # reported by the main thread
        failures.append(exc)
        ready.set()


def _loss_counters(socks: list[socket.socket]) -> tuple[int, int]:
    """(segments retransmitted, retransmission timeouts) so far, over ``socks``."""
    infos = [read_tcp_info(s) for s in socks]
    return sum(i.total_retrans for i in infos), sum(i.total_rto for i in infos)


def run_job(spec: DriverSpec) -> dict:
    """Run the job; return its trace part: {"name", "iterations": [...]} (times since t0)."""
    n = len(spec.workers)
    workers = [_Worker(w) for w in spec.workers]
    failures: list[BaseException] = []
    ready = [threading.Event() for _ in workers]
    for w, ev in zip(workers, ready, strict=True):
        threading.Thread(target=_listen, args=(w, spec.connections, spec.listener_cc, ev,
                                               failures), daemon=True).start()
    for ev in ready:
        ev.wait(10)
    if failures:
        raise failures[0]

    barrier = threading.Barrier(n + 1)   # workers + the recording main thread
    shares = split_evenly(spec.bytes_per_worker, spec.connections)
    start_at = spec.t0 + spec.start_offset_ms / 1000

    def worker_main(i: int) -> None:
        w = workers[i]
        succ = spec.workers[(i + 1) % n]
        try:
            enter_netns(w.spec.netns)
            for _ in range(spec.connections):
                s = socket.socket()
                set_congestion(s, spec.cc)
                hold_whole_share(s, max(shares))
                # Reset on close: a driver killed mid-iteration must not leave orphaned
                # sockets retransmitting megabytes (and pinning the MLTCP module) for
                # minutes.  A normal close has nothing unacknowledged anyway.
                s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                s.settimeout(30)
                s.connect((succ.addr, succ.port))
                w.socks.append(s)
            # One zero buffer per worker, sent whole: a refill between chunks is a stall.
            payload = zero_payload(max(shares))
            barrier.wait()                              # connected
            for _ in range(spec.iterations):
                barrier.wait()                          # iteration starts (compute done)
                before = _loss_counters(w.socks)
                senders = [threading.Thread(target=send_and_wait_acked,
                                            args=(s, b, payload, ACK_POLL_S))
                           for s, b in zip(w.socks, shares, strict=True) if b]
                for t in senders:
                    t.start()
                for t in senders:
                    t.join()
                w.comm_end = time.monotonic()
                after = _loss_counters(w.socks)
                w.retransmits, w.rtos = after[0] - before[0], after[1] - before[1]
                barrier.wait()                          # all workers' data ACKed
        except BaseException as exc:
            w.error = exc
            barrier.abort()
        finally:
            for s in w.socks:
                s.close()

    threads = [threading.Thread(target=worker_main, args=(i,), daemon=True) for i in range(n)]
    for t in threads:
        t.start()
    records = []
    try:
        barrier.wait()
        delay = start_at - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        for k in range(spec.iterations):
            it_start = time.monotonic()
            jitter = spec.compute_jitter_ms[k] if k < len(spec.compute_jitter_ms) else 0.0
            time.sleep(max(0.0, spec.compute_ms + jitter) / 1000)
            comm_start = time.monotonic()
            barrier.wait()
            barrier.wait()
            comm_end = max(w.comm_end for w in workers)
            records.append({"index": k, "start": it_start - spec.t0,
                            "comm_start": comm_start - spec.t0, "comm_end": comm_end - spec.t0,
                            "end": comm_end - spec.t0, "bytes": spec.bytes_per_worker * n,
                            "retransmits": sum(w.retransmits for w in workers),
                            "rtos": sum(w.rtos for w in workers)})
    except threading.BrokenBarrierError:
        errors = [w.error for w in workers if w.error]
        raise errors[0] if errors else RuntimeError("job barrier broken") from None
    for t in threads:
        t.join(timeout=10)
    return {"name": spec.job, "iterations": records}


PR_SET_PDEATHSIG = 1
# How `mltcp testbed clean` recognises leftover drivers.
DRIVER_MODULE = "mltcp.lab.emulation.jobdriver"


def _die_with_parent() -> None:
    """A driver whose testbed was killed must not keep its sockets (and with them
    the MLTCP module it runs) alive: ask the kernel for SIGKILL when the parent dies."""
    import ctypes
    import signal

    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    _die_with_parent()
    if len(argv) != 1:
        print("usage: python -m mltcp.lab.emulation.jobdriver SPEC.json", file=sys.stderr)
        return 2
    with open(argv[0]) as f:
        spec = DriverSpec.from_json(f.read())
    try:
        result = run_job(spec)
    except Exception as exc:
        print(f"jobdriver {spec.job}: error: {exc}", file=sys.stderr)
        return 1
    with open(spec.out, "w") as f:
        json.dump(result, f)
    return 0


if __name__ == "__main__":
    sys.exit(main())
