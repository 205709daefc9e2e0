"""Real kernel TCP sockets as the emulated training jobs use them.

Reading ``TCP_INFO`` (what the kernel knows of a connection: cwnd, RTT, bytes acked,
retransmissions, ECN-marked deliveries), choosing a congestion control per socket
(``TCP_CONGESTION`` before connect: MLTCP's BPF congestion controls cannot be a
namespace default), and moving a share of bytes the way a collective does: handed to
the kernel at once, done when every byte is acknowledged.  The traffic generator
(:mod:`mltcp.lab.scenario.emulation.traffic`) is built on these.
"""

from __future__ import annotations

import errno
import os
import socket
import struct
import time
from dataclasses import dataclass

from mltcp.core.errors import SpecError

TCP_CONGESTION = getattr(socket, "TCP_CONGESTION", 13)
TCP_INFO = getattr(socket, "TCP_INFO", 11)
_TCP_INFO_BUFLEN = 512
_RECV_BUF = 1 << 20
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
    ("dsack_dups", 216, "I"),
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
    dsack_dups: int           # segments the receiver reported twice (D-SACK; Linux >= 5.0)
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
            "cc", f"the kernel rejected congestion control {cc!r} ({reason})",
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


def drain(conn: socket.socket) -> int:
    """Receive and discard until the peer closes; the bytes received."""
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
    return total
