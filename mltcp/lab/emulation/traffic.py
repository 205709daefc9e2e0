"""Synthetic distributed-training traffic over real kernel TCP sockets.

Training jobs alternate a compute phase (no traffic) with a communication phase
that moves a fixed number of bytes; an iteration only finishes when the *last*
byte is acknowledged, which is what MLTCP's window scaling tries to speed up.
This module reproduces that pattern (``send --iterations``), a plain bulk
transfer for calibration (``send --duration``) and a discard server (``sink``):

    python -m mltcp.lab.emulation.traffic sink --port 5001 [--cc dctcp]
    python -m mltcp.lab.emulation.traffic send --dst 10.201.101.2 --port 5001 --cc cubic \\
        --conns 4 --iterations 10 --bytes-per-iteration 20M --compute-ms 50

The congestion control is chosen per socket (TCP_CONGESTION before connect),
never as a namespace default: MLTCP's BPF congestion controls cannot be one.
Times in the JSON report are seconds since the connections were established;
``t0_monotonic`` is that instant on CLOCK_MONOTONIC, which all namespaces share,
so reports of concurrent jobs can be put on one time line.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import json
import os
import signal
import socket
import struct
import sys
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from types import FrameType
from typing import Any

from mltcp.core.errors import MltcpError, SpecError
from mltcp.core.validate import parse_bytes
from mltcp.lab.trace import IterationRecord

TCP_CONGESTION = getattr(socket, "TCP_CONGESTION", 13)
TCP_INFO = getattr(socket, "TCP_INFO", 11)
_TCP_INFO_BUFLEN = 512
_SEND_CHUNK = 1 << 20
_RECV_BUF = 1 << 20
_SEND_TIMEOUT_S = 0.05
_ACK_POLL_S = 0.0001
_CONNECT_TIMEOUT_S = 10.0
_AVAILABLE_CC = "/proc/sys/net/ipv4/tcp_available_congestion_control"


# --------------------------------------------------------------------------- TCP_INFO

# (field, byte offset in Linux `struct tcp_info` from <linux/tcp.h>, struct code).
# The layout is append-only ABI: fields are never moved, only added at the end,
# so fixed offsets are safe; a field past the length the kernel returns is absent.
#   0..7   eight __u8 (state, ca_state, retransmits, probes, backoff, options,
#          wscale bits, app_limited bits)
#   8 rto, 12 ato, 16 snd_mss, 20 rcv_mss, 24 unacked, 28 sacked, 32 lost,
#   36 retrans, 40 fackets, 44..56 four last_* times, 60 pmtu, 64 rcv_ssthresh,
#   68 rtt, 72 rttvar, 76 snd_ssthresh, 80 snd_cwnd, 84 advmss, 88 reordering,
#   92 rcv_rtt, 96 rcv_space, 100 total_retrans, 104 pacing_rate (u64),
#   112 max_pacing_rate, 120 bytes_acked, 128 bytes_received, 136 segs_out,
#   140 segs_in, 144 notsent_bytes, 148 min_rtt, 152 data_segs_in,
#   156 data_segs_out, 160 delivery_rate (u64), 168 busy_time, 176 rwnd_limited,
#   184 sndbuf_limited, 192 delivered, 196 delivered_ce, 200 bytes_sent (u64),
#   208 bytes_retrans (u64), 216 dsack_dups, 220 reord_seen, 224 rcv_ooopack,
#   228 snd_wnd, 232 rcv_wnd, 236 rehash, 240 total_rto (u16, Linux 6.7),
#   242 total_rto_recoveries (u16), 244 total_rto_time (ms).
_TCP_INFO_FIELDS: tuple[tuple[str, int, str], ...] = (
    ("state", 0, "B"),
    ("ca_state", 1, "B"),
    ("rto_us", 8, "I"),
    ("snd_mss", 16, "I"),
    ("unacked", 24, "I"),
    ("lost", 32, "I"),
    ("retrans", 36, "I"),
    ("rtt_us", 68, "I"),
    ("rttvar_us", 72, "I"),
    ("snd_ssthresh", 76, "I"),
    ("snd_cwnd", 80, "I"),
    ("total_retrans", 100, "I"),
    ("pacing_rate", 104, "Q"),
    ("bytes_acked", 120, "Q"),
    ("bytes_received", 128, "Q"),
    ("notsent_bytes", 144, "I"),
    ("min_rtt_us", 148, "I"),
    ("delivery_rate", 160, "Q"),
    ("delivered", 192, "I"),
    ("delivered_ce", 196, "I"),
    ("bytes_sent", 200, "Q"),
    ("bytes_retrans", 208, "Q"),
    ("total_rto", 240, "H"),
    ("total_rto_time_ms", 244, "I"),
)
# notsent_bytes (Linux 4.6) is the newest field we cannot do without.
_TCP_INFO_MIN_LEN = 148


@dataclass(frozen=True)
class TcpInfo:
    """The subset of Linux ``struct tcp_info`` that traffic analysis needs.

    Units as the kernel reports them: segments for cwnd/unacked/lost/retrans,
    microseconds for *_us, bytes/s for rates, bytes otherwise.  Fields newer than
    the running kernel are 0.  Raw kernel values: ``bytes_acked`` also counts the
    SYN (and FIN) sequence numbers, so a client that sent N data bytes reads N + 1;
    ``bytes_sent`` counts data only.  Use differences for data progress.
    """

    state: int
    ca_state: int
    rto_us: int
    snd_mss: int
    unacked: int
    lost: int
    retrans: int
    rtt_us: int
    rttvar_us: int
    snd_ssthresh: int
    snd_cwnd: int
    total_retrans: int
    pacing_rate: int
    bytes_acked: int
    bytes_received: int
    notsent_bytes: int
    min_rtt_us: int
    delivery_rate: int
    delivered: int
    delivered_ce: int
    bytes_sent: int
    bytes_retrans: int
    total_rto: int            # retransmission timeouts so far (Linux >= 6.7, else 0)
    total_rto_time_ms: int    # time spent recovering from them (Linux >= 6.7, else 0)


def parse_tcp_info(buf: bytes) -> TcpInfo:
    """Decode the bytes of ``getsockopt(TCP_INFO)`` by fixed offset (host order)."""
    if len(buf) < _TCP_INFO_MIN_LEN:
        raise ValueError(f"tcp_info is {len(buf)} bytes, need >= {_TCP_INFO_MIN_LEN}")
    values: dict[str, int] = {}
    for name, offset, code in _TCP_INFO_FIELDS:
        end = offset + struct.calcsize(code)
        values[name] = struct.unpack_from("=" + code, buf, offset)[0] if end <= len(buf) else 0
    return TcpInfo(**values)


def read_tcp_info(sock: socket.socket) -> TcpInfo:
    """The kernel's current TCP_INFO for ``sock``."""
    return parse_tcp_info(sock.getsockopt(socket.IPPROTO_TCP, TCP_INFO, _TCP_INFO_BUFLEN))


# --------------------------------------------------------------------------- sockets


def available_congestion_controls() -> list[str]:
    try:
        with open(_AVAILABLE_CC) as f:
            return f.read().split()
    except OSError:
        return []


def set_congestion(sock: socket.socket, cc: str) -> None:
    """Select ``cc`` for ``sock``; SpecError naming --cc if the kernel refuses it."""
    try:
        sock.setsockopt(socket.IPPROTO_TCP, TCP_CONGESTION, cc.encode())
    except OSError as exc:
        reason = os.strerror(exc.errno) if exc.errno else str(exc)
        if exc.errno == errno.ENOENT:
            reason = "not registered in the kernel"
        elif exc.errno == errno.EPERM:
            reason = "not in net.ipv4.tcp_allowed_congestion_control and no CAP_NET_ADMIN"
        raise SpecError(
            "--cc", f"the kernel rejected congestion control {cc!r} ({reason})",
            f"use one of: {' '.join(available_congestion_controls()) or '?'}"
            " (or load the module that registers it)",
        ) from exc


def connect(dst: str, port: int, cc: str) -> socket.socket:
    """A connected TCP socket whose CC was set before the SYN (so it is used from byte 0)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        set_congestion(sock, cc)
        sock.settimeout(_CONNECT_TIMEOUT_S)
        sock.connect((dst, port))
    except BaseException:
        sock.close()
        raise
    return sock


def wait_acked(sock: socket.socket, deadline: float | None = None,
               poll_s: float = _ACK_POLL_S) -> TcpInfo:
    """Poll TCP_INFO until everything written to ``sock`` has been acknowledged.

    ``sendall`` returns once data is in the socket buffer; a training collective
    is only done when the receiver has it, i.e. no unacked and no unsent bytes.
    """
    while True:
        info = read_tcp_info(sock)
        if info.unacked == 0 and info.notsent_bytes == 0:
            return info
        if deadline is not None and time.monotonic() > deadline:
            raise TimeoutError("data still unacknowledged at deadline")
        time.sleep(poll_s)


# --------------------------------------------------------------------------- sender


@dataclass(frozen=True)
class SendConfig:
    """One ``send`` run: either ``duration_s`` (bulk) or ``iterations`` (training)."""

    dst: str
    port: int
    cc: str
    conns: int = 1
    duration_s: float | None = None
    iterations: int | None = None
    bytes_per_iteration: int = 0
    compute_ms: float = 0.0
    sample_ms: float = 10.0

    def __post_init__(self) -> None:
        if not 1 <= self.port <= 65535:
            raise SpecError("--port", f"{self.port} is out of range", "use 1..65535")
        if not 1 <= self.conns <= 1024:
            raise SpecError("--conns", f"{self.conns} is out of range", "use 1..1024")
        if (self.duration_s is None) == (self.iterations is None):
            raise SpecError("--duration", "give exactly one of --duration and --iterations",
                            "use --duration S for bulk or --iterations K for training")
        if self.duration_s is not None and not 0 < self.duration_s <= 86400:
            raise SpecError("--duration", f"{self.duration_s} is out of range",
                            "use seconds > 0")
        if self.iterations is not None:
            if self.iterations < 1:
                raise SpecError("--iterations", f"{self.iterations} < 1", "use >= 1")
            if self.bytes_per_iteration < self.conns:
                raise SpecError("--bytes-per-iteration",
                                f"{self.bytes_per_iteration} is less than one byte per conn",
                                f"use >= --conns ({self.conns}) bytes, e.g. 20M")
        if self.compute_ms < 0:
            raise SpecError("--compute-ms", f"{self.compute_ms} < 0", "use >= 0")
        if not 0.1 <= self.sample_ms <= 60_000:
            raise SpecError("--sample-ms", f"{self.sample_ms} is out of range",
                            "use 0.1..60000")


@dataclass
class _Run:
    """Shared state of one sender run (sockets, clock, samples)."""

    socks: list[socket.socket]
    t0: float
    base_acked: list[int] = field(default_factory=list)
    """bytes_acked at t0 (the SYN counts as 1), so samples report data bytes."""
    samples: list[dict[str, Any]] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)

    def now(self) -> float:
        return time.monotonic() - self.t0

    def acked(self) -> list[int]:
        return [read_tcp_info(s).bytes_acked for s in self.socks]


def _sampler(run: _Run, period_s: float) -> None:
    """Record cwnd/RTT/progress of every connection each ``period_s``."""
    next_t = time.monotonic()
    while not run.stop.is_set():
        t = run.now()
        for i, (sock, base) in enumerate(zip(run.socks, run.base_acked, strict=True)):
            try:
                info = read_tcp_info(sock)
            except OSError:
                return
            run.samples.append({
                "t": round(t, 6), "conn": i, "cwnd": info.snd_cwnd, "rtt_us": info.rtt_us,
                "bytes_acked": info.bytes_acked - base, "retrans": info.total_retrans,
                "ssthresh": info.snd_ssthresh, "ca_state": info.ca_state,
                "delivered": info.delivered, "delivered_ce": info.delivered_ce,
            })
        next_t += period_s
        run.stop.wait(max(0.0, next_t - time.monotonic()))


def _bulk_writer(sock: socket.socket, stop: threading.Event) -> None:
    payload = memoryview(bytes(_SEND_CHUNK))
    sock.settimeout(_SEND_TIMEOUT_S)
    while not stop.is_set():
        try:
            sock.send(payload)
        except TimeoutError:
            continue
        except OSError:
            return


def _run_duration(run: _Run, duration_s: float) -> tuple[int, float, list[IterationRecord]]:
    """Bulk-send for ``duration_s``; goodput counts bytes ACKed by the deadline."""
    base = run.base_acked
    writers = [threading.Thread(target=_bulk_writer, args=(s, run.stop), daemon=True)
               for s in run.socks]
    for w in writers:
        w.start()
    time.sleep(max(0.0, duration_s - run.now()))
    elapsed = run.now()
    total = sum(a - b for a, b in zip(run.acked(), base, strict=True))
    run.stop.set()
    for w in writers:
        w.join()
    return total, elapsed, []


SO_SNDBUFFORCE = 32          # Linux: SO_SNDBUF beyond wmem_max, needs CAP_NET_ADMIN
MAX_PAYLOAD = 64 << 20       # the largest single write; bigger shares go in several


def hold_whole_share(sock: socket.socket, nbytes: int) -> None:
    """Size the send buffer so one iteration's share fits into the kernel at once.

    Why: with the default buffer the sending thread must refill it during the
    communication phase; on a busy host a Python thread can wait several ms for
    the CPU or the GIL while the buffer runs dry.  That stalls the flow (the
    network idles although the job has data) and an MLTCP job reads the stall
    as an iteration boundary.  A real training job hands its gradient buffers
    to the NIC/NCCL at once, so the whole share belongs in the kernel.  Per-
    segment skbs cost ~2x their payload in buffer accounting, hence the factor.
    """
    want = min(2 * nbytes + (1 << 20), (1 << 31) - 1)
    try:
        sock.setsockopt(socket.SOL_SOCKET, SO_SNDBUFFORCE, want)
    except PermissionError:   # without CAP_NET_ADMIN: as far as wmem_max allows
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, want)


def zero_payload(nbytes: int) -> memoryview:
    """A reusable buffer for shares of up to ``nbytes`` (allocated once, not per iteration)."""
    return memoryview(bytes(min(max(nbytes, 1), MAX_PAYLOAD)))


def send_and_wait_acked(sock: socket.socket, nbytes: int, payload: memoryview | None = None,
                        poll_s: float = _ACK_POLL_S) -> int:
    """Write ``nbytes`` in as few calls as possible (a refill between chunks is a
    stall, see hold_whole_share) and wait for their ACKs; returns the bytes newly ACKed.
    ``poll_s``: how often TCP_INFO is read meanwhile (processes with many senders on a
    small host poll less often, to leave the CPU to the network)."""
    before = read_tcp_info(sock).bytes_acked
    payload = payload if payload is not None and len(payload) else zero_payload(nbytes)
    left = nbytes
    while left:
        n = min(left, len(payload))
        sock.sendall(payload[:n])
        left -= n
    return wait_acked(sock, poll_s=poll_s).bytes_acked - before


def split_evenly(total: int, parts: int) -> list[int]:
    base, extra = divmod(total, parts)
    return [base + (1 if i < extra else 0) for i in range(parts)]


def _run_iterations(run: _Run, cfg: SendConfig) -> tuple[int, float, list[IterationRecord]]:
    """Compute (sleep), then send one iteration's bytes over all conns in parallel."""
    assert cfg.iterations is not None
    shares = split_evenly(cfg.bytes_per_iteration, cfg.conns)
    for s, share in zip(run.socks, shares, strict=True):
        s.settimeout(None)
        hold_whole_share(s, share)
    payload = zero_payload(max(shares))
    records = []
    with ThreadPoolExecutor(max_workers=cfg.conns, thread_name_prefix="comm") as pool:
        for k in range(cfg.iterations):
            start = run.now()
            time.sleep(cfg.compute_ms / 1000)
            comm_start = run.now()
            acked = sum(pool.map(send_and_wait_acked, run.socks, shares,
                                 [payload] * len(shares)))
            comm_end = run.now()
            records.append(IterationRecord(k, start, comm_start, comm_end, comm_end, acked))
    total = sum(r.bytes for r in records)
    return total, run.now(), records


def run_sender(cfg: SendConfig) -> dict[str, Any]:
    """Run one sender according to ``cfg`` and return the JSON-ready report."""
    socks: list[socket.socket] = []
    try:
        for _ in range(cfg.conns):
            socks.append(connect(cfg.dst, cfg.port, cfg.cc))
        run = _Run(socks=socks, t0=time.monotonic())
        run.base_acked = run.acked()
        sampler = threading.Thread(target=_sampler, args=(run, cfg.sample_ms / 1000),
                                   daemon=True)
        sampler.start()
        try:
            if cfg.duration_s is not None:
                total, elapsed, records = _run_duration(run, cfg.duration_s)
            else:
                total, elapsed, records = _run_iterations(run, cfg)
        finally:
            run.stop.set()
            sampler.join()
    finally:
        for s in socks:
            _abort_close(s, graceful=cfg.duration_s is None)
    return {
        "cc": cfg.cc,
        "conns": cfg.conns,
        "dst": cfg.dst,
        "port": cfg.port,
        "t0_monotonic": run.t0,
        "iterations": [{k: _round(v) for k, v in asdict(r).items()} for r in records],
        "bytes_acked_total": total,
        "duration_s": round(elapsed, 6),
        "goodput_bps": total * 8 / elapsed if elapsed > 0 else 0.0,
        "samples": run.samples,
    }


def _round(v: Any) -> Any:
    return round(v, 6) if isinstance(v, float) else v


def _abort_close(sock: socket.socket, *, graceful: bool) -> None:
    """Close; after a bulk run, reset instead so megabytes of buffered data do not
    keep flowing into the next measurement."""
    if not graceful:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.close()


# --------------------------------------------------------------------------- sink


class _Stop(Exception):
    """Raised from the signal handler to leave the accept loop."""


def drain(conn: socket.socket, counter: list[int]) -> None:
    buf = bytearray(_RECV_BUF)
    total = 0
    with conn:
        while True:
            try:
                n = conn.recv_into(buf)
            except OSError:
                break
            if n == 0:
                break
            total += n
    counter.append(total)


def serve_sink(port: int, cc: str | None = None, bind: str = "0.0.0.0",
               out: Any = None) -> int:
    """Accept connections and discard their data until SIGTERM/SIGINT; returns 0.

    The listening socket carries ``cc`` so that accepted sockets inherit it: a
    DCTCP receiver must run DCTCP for its ACKs to echo ECN marks correctly.
    Prints ``{"event": "listening", "port": P}`` once ready (``--port 0`` picks
    a free port) and ``{"event": "stopped", ...}`` on the way out.
    """
    out = out if out is not None else sys.stdout
    srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if cc:
        set_congestion(srv, cc)
    srv.bind((bind, port))
    srv.listen(1024)

    def stop(signum: int, frame: FrameType | None) -> None:
        raise _Stop

    old = {s: signal.signal(s, stop) for s in (signal.SIGTERM, signal.SIGINT)}
    counter: list[int] = []
    accepted = 0
    try:
        print(json.dumps({"event": "listening", "port": srv.getsockname()[1]}),
              file=out, flush=True)
        while True:
            conn, _ = srv.accept()
            accepted += 1
            threading.Thread(target=drain, args=(conn, counter), daemon=True).start()
    except _Stop:
        pass
    finally:
        for s, handler in old.items():
            signal.signal(s, handler)
        srv.close()
    print(json.dumps({"event": "stopped", "connections": accepted,
                      "bytes_closed_conns": sum(counter)}), file=out, flush=True)
    return 0


# --------------------------------------------------------------------------- CLI

def _size_arg(text: str) -> int:
    try:
        return parse_bytes(text, "size")
    except SpecError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m mltcp.lab.emulation.traffic",
                                description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="mode", required=True)

    sink = sub.add_parser("sink", help="discard server (run on receivers)")
    sink.add_argument("--port", type=int, required=True)
    sink.add_argument("--cc", help="TCP_CONGESTION for the listener (inherited by accepts)")
    sink.add_argument("--bind", default="0.0.0.0")

    send = sub.add_parser("send", help="bulk or training-like sender")
    send.add_argument("--dst", required=True)
    send.add_argument("--port", type=int, required=True)
    send.add_argument("--cc", required=True, help="congestion control, set per socket")
    send.add_argument("--conns", type=int, default=1)
    mode = send.add_mutually_exclusive_group(required=True)
    mode.add_argument("--duration", type=float, help="bulk send for this many seconds")
    mode.add_argument("--iterations", type=int, help="training iterations to run")
    send.add_argument("--bytes-per-iteration", type=_size_arg, default=None)
    send.add_argument("--compute-ms", type=float, default=0.0)
    send.add_argument("--sample-ms", type=float, default=10.0)
    send.add_argument("--out", help="write the JSON report here instead of stdout")
    return p


def _config(args: argparse.Namespace) -> SendConfig:
    if args.iterations is not None and args.bytes_per_iteration is None:
        raise SpecError("--bytes-per-iteration", "is required with --iterations",
                        "add e.g. --bytes-per-iteration 20M")
    return SendConfig(
        dst=args.dst, port=args.port, cc=args.cc, conns=args.conns,
        duration_s=args.duration, iterations=args.iterations,
        bytes_per_iteration=args.bytes_per_iteration or 0,
        compute_ms=args.compute_ms, sample_ms=args.sample_ms,
    )


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        if args.mode == "sink":
            return serve_sink(args.port, args.cc, args.bind)
        report = run_sender(_config(args))
    except MltcpError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        where = f"{getattr(args, 'dst', args.bind)}:{args.port}"
        print(f"error: {where}: {exc.strerror or exc}", file=sys.stderr)
        return 1
    text = json.dumps(report)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text + "\n")
    else:
        print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
