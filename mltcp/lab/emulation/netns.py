"""Emulated hosts in Linux network namespaces, joined by a shaped dumbbell.

MLTCP has to be measured against the real kernel TCP stack (and the eBPF
congestion modules loaded into it), on one machine.  A dumbbell of namespaces
gives every sender and receiver its own stack, with one router namespace in the
middle whose egress toward each receiver is the bottleneck:

    s1 ─┐                ┌─ r1
    s2 ─┼── rt (router) ─┼─ r2     HTB at `rate_mbit` on rt's egress to each rJ
    sN ─┘                └─ rM

Facts about this host that shaped the design (measured, see the tests):

* Only htb/tbf/pfifo/bfifo/clsact qdiscs exist, so the bottleneck is an HTB class
  with a FIFO leaf.  HTB needs an explicit burst/cburst of ~500 KB, otherwise the
  64 KB GSO packets that veth passes through unsplit cap goodput far below the
  configured rate.
* ``ip netns exec`` and ``tc -n`` remount /sys, which hides BPF pins under
  /sys/fs/bpf; everything that runs *in* a namespace therefore goes through
  ``nsenter --net=/run/netns/NAME`` instead.
* A BPF congestion control cannot be a namespace default (EPERM, and the failed
  attempt leaks a kernel reference), so the namespace default CC is left alone;
  programs pick their CC per socket with TCP_CONGESTION.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import re
import secrets
import shutil
import signal
import subprocess
import threading
import time
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from types import FrameType
from typing import Any

from mltcp.core.errors import CapabilityError, MltcpError, SpecError
from mltcp.host.namespaces import NETNS_DIR, list_netns, nsenter_argv

PROJECT_PREFIX = "mltcp-"
ROOT_REQUIRED = (
    "network namespaces need root (CAP_SYS_ADMIN/CAP_NET_ADMIN): run as root"
)

# Every link is its own /24 under 10.201.0.0/16: senders use 10.201.<i>.0/24 and
# receivers 10.201.<100+j>.0/24, the router is .1 and the host .2 on each link.
# The namespaces are private to one Dumbbell, so two dumbbells may reuse them.
_SUBNET_BASE = "10.201"
_RECEIVER_SUBNET_OFFSET = 100
_MAX_HOSTS_PER_SIDE = 99
_HOST_DEV = "eth0"
_MTU_FRAME_BYTES = 1514
# One DRR round must be able to dequeue a whole 64 KB GSO packet; 100 KB is above
# that and below HTB's 200 KB cap (the r2q default of rate/10 exceeds the cap).
_HTB_QUANTUM_BYTES = 100_000
_HTB_CLASS_MINOR = 10
_RUN_TAG_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,40}$")
_KILL_GRACE_S = 1.0


class NetnsError(MltcpError):
    """A command that builds or tears down the emulated network failed."""


@dataclass(frozen=True)
class BottleneckSpec:
    """The shaped link from the router to each receiver.

    ``burst_bytes`` is HTB's burst/cburst: it must hold several 64 KB GSO packets
    or HTB throttles well below ``rate_mbit``.  ``queue_packets`` sizes the FIFO
    behind the shaper in MTU-sized (1514 B) packets; it is enforced in bytes
    (bfifo) because veth hands the router GSO packets of up to 64 KB, so a packet
    count would make the buffer up to 40x deeper than intended.
    """

    rate_mbit: float = 1000
    burst_bytes: int = 500_000
    queue_packets: int = 1000

    def __post_init__(self) -> None:
        _require_number("rate_mbit", self.rate_mbit, 1, 40_000, "Mbit/s")
        _require_int("burst_bytes", self.burst_bytes, 10_000, "bytes")
        _require_int("queue_packets", self.queue_packets, 10, "packets")

    @property
    def rate_bps(self) -> float:
        """The shaped rate in bit/s, the reference for goodput ratios."""
        return self.rate_mbit * 1e6

    @property
    def queue_bytes(self) -> int:
        """The FIFO limit actually configured (bfifo bytes)."""
        return self.queue_packets * _MTU_FRAME_BYTES


def _require_number(name: str, value: object, lo: float, hi: float, unit: str) -> None:
    ok = isinstance(value, int | float) and not isinstance(value, bool)
    if not ok or not lo <= value <= hi:  # type: ignore[operator]
        raise SpecError(name, f"{value!r} is out of range", f"use {lo}..{hi} {unit}")


def _require_int(name: str, value: object, lo: int, unit: str) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < lo:
        raise SpecError(name, f"{value!r} is invalid", f"use an integer >= {lo} {unit}")


@dataclass(frozen=True)
class Host:
    """One emulated end host: its namespace and its single address."""

    name: str
    """Short role name: ``s1``.., ``r1``.."""
    ns: str
    """Full network namespace name (``/run/netns/<ns>``)."""
    addr: str
    """The host's IPv4 address on its link to the router."""
    gateway: str
    """The router's address on the same link (the host's default route)."""
    dev: str = _HOST_DEV
    """The host-side interface name."""
    router_dev: str = ""
    """The router-side interface of this host's link (name inside the router ns)."""

    @property
    def netns_path(self) -> str:
        return f"{NETNS_DIR}/{self.ns}"


@dataclass(frozen=True)
class QdiscStats:
    """Counters of the root HTB qdisc on a bottleneck device."""

    bytes: int
    packets: int
    drops: int
    overlimits: int
    backlog: int
    """Bytes queued right now."""
    qlen: int
    """Packets queued right now."""
    requeues: int = 0


# --------------------------------------------------------------------------- commands





def _cmd(argv: Sequence[str], *, stdin: str | None = None) -> str:
    """Run a setup command and fail with its stderr, which names the problem."""
    proc = subprocess.run(
        list(argv), input=stdin, capture_output=True, text=True, check=False
    )
    if proc.returncode != 0:
        detail = (proc.stderr or proc.stdout).strip().replace("\n", " | ")
        raise NetnsError(f"command failed ({proc.returncode}): {' '.join(argv)}: {detail}")
    return proc.stdout


def _ip_batch(ns: str, lines: Sequence[str]) -> None:
    """Apply several ``ip`` commands in one namespace with one process."""
    _cmd(["ip", "-n", ns, "-batch", "-"], stdin="\n".join(lines) + "\n")


def _tc_batch(ns: str, lines: Sequence[str]) -> None:
    _cmd(nsenter_argv(ns, ["tc", "-batch", "-"]), stdin="\n".join(lines) + "\n")


def _sysctl(ns: str, settings: dict[str, str]) -> None:
    _cmd(nsenter_argv(ns, ["sysctl", "-q", "-w", *(f"{k}={v}" for k, v in settings.items())]))













def _netns_pids(ns: str) -> list[int]:
    proc = subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True)
    return [int(tok) for tok in proc.stdout.split() if tok.isdigit()]


def _kill_netns_processes(ns: str) -> None:
    """SIGTERM, then SIGKILL, whatever still runs in ``ns``.

    A process inside keeps the namespace (and its veths and qdiscs) alive after
    ``ip netns del``, so the namespace is only really gone once they are.
    """
    for sig in (signal.SIGTERM, signal.SIGKILL):
        pids = [p for p in _netns_pids(ns) if p != os.getpid()]
        if not pids:
            return
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, sig)
        deadline = time.monotonic() + _KILL_GRACE_S
        while time.monotonic() < deadline and any(_alive(p) for p in pids):
            time.sleep(0.01)


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False


def _delete_netns(ns: str) -> None:
    _kill_netns_processes(ns)
    if ns in list_netns():
        _cmd(["ip", "netns", "del", ns])


def cleanup_leftovers(prefix: str = PROJECT_PREFIX) -> list[str]:
    """Delete every namespace whose name starts with ``prefix``; return their names.

    For runs that died without cleaning up (SIGKILL, power loss).  Processes
    inside are killed first so the namespaces really go away.  Note that the
    default prefix also matches dumbbells of *other* live processes.
    """
    if not prefix.startswith(PROJECT_PREFIX):
        raise SpecError(
            "prefix", f"{prefix!r} does not start with {PROJECT_PREFIX!r}",
            f"pass a prefix beginning with {PROJECT_PREFIX!r} so only MLTCP namespaces go",
        )
    removed = []
    for ns in list_netns():
        if ns.startswith(prefix):
            _delete_netns(ns)
            removed.append(ns)
    return removed


def require_netns() -> None:
    """Raise CapabilityError unless this process can create network namespaces."""
    if os.geteuid() != 0:
        raise CapabilityError(ROOT_REQUIRED)
    missing = [tool for tool in ("ip", "tc", "nsenter", "sysctl") if shutil.which(tool) is None]
    if missing:
        raise CapabilityError(
            f"network namespaces need {', '.join(missing)} on PATH: install iproute2/util-linux"
        )
    probe = f"{PROJECT_PREFIX}{os.getpid()}-probe-{secrets.token_hex(2)}"
    try:
        _cmd(["ip", "netns", "add", probe])
    except NetnsError as exc:
        raise CapabilityError(ROOT_REQUIRED) from exc
    with contextlib.suppress(NetnsError):
        _cmd(["ip", "netns", "del", probe])


# --------------------------------------------------------------------------- cleanup on exit

_LIVE: set[Dumbbell] = set()
_LIVE_LOCK = threading.Lock()
_HOOKS_INSTALLED = False
_PREV_SIGTERM: Any = signal.SIG_DFL


def _close_all_live() -> None:
    with _LIVE_LOCK:
        live = list(_LIVE)
    for dumbbell in live:
        with contextlib.suppress(Exception):
            dumbbell.close()


def _on_sigterm(signum: int, frame: FrameType | None) -> None:
    """Tear the namespaces down, then behave as the previous SIGTERM handler would."""
    _close_all_live()
    prev = _PREV_SIGTERM
    if callable(prev):
        prev(signum, frame)
    elif prev != signal.SIG_IGN:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGTERM)


def _install_exit_hooks() -> None:
    """Close live dumbbells at interpreter exit and on SIGTERM (once per process)."""
    global _HOOKS_INSTALLED, _PREV_SIGTERM
    if _HOOKS_INSTALLED:
        return
    _HOOKS_INSTALLED = True
    atexit.register(_close_all_live)
    if threading.current_thread() is threading.main_thread():
        prev = signal.getsignal(signal.SIGTERM)
        if prev is not _on_sigterm:
            _PREV_SIGTERM = prev
            signal.signal(signal.SIGTERM, _on_sigterm)


# --------------------------------------------------------------------------- dumbbell


def _run_tag(prefix: str | None) -> str:
    if prefix is None:
        return f"{PROJECT_PREFIX}{os.getpid()}-{secrets.token_hex(2)}"
    tag = prefix if prefix.startswith(PROJECT_PREFIX) else PROJECT_PREFIX + prefix
    if not _RUN_TAG_RE.match(tag):
        raise SpecError(
            "prefix", f"{prefix!r} is not a usable namespace name",
            "use at most 40 letters, digits, '.', '_' or '-'",
        )
    return tag


def _check_count(name: str, value: object) -> None:
    is_int = isinstance(value, int) and not isinstance(value, bool)
    if not is_int or not 1 <= value <= _MAX_HOSTS_PER_SIDE:  # type: ignore[operator]
        raise SpecError(name, f"{value!r} is out of range", f"use 1..{_MAX_HOSTS_PER_SIDE}")


@dataclass
class _State:
    """What has been created so far, so a half-built dumbbell can be undone."""

    namespaces: list[str] = field(default_factory=list)
    procs: list[subprocess.Popen[Any]] = field(default_factory=list)
    closed: bool = False


class Dumbbell:
    """N senders and M receivers around one router, with HTB bottlenecks.

    Use as a context manager; namespaces are ``<tag>-s1``.., ``<tag>-r1``..,
    ``<tag>-rt`` with ``tag = mltcp-<pid>-<4 hex>`` unless ``prefix`` is given.
    Hosts get ``tcp_ecn=1``/``tcp_ecn_fallback=0`` (reliable ECN for DCTCP) and
    ``tcp_no_metrics_save=1`` (no ssthresh carried between runs); IPv6 is off so
    that no neighbour-discovery chatter crosses the bottleneck.
    """

    def __init__(
        self,
        n_senders: int = 2,
        n_receivers: int = 1,
        bottleneck: BottleneckSpec | None = None,
        prefix: str | None = None,
        gso_max_segs: int | None = None,
    ) -> None:
        _check_count("n_senders", n_senders)
        if gso_max_segs is not None and not 1 <= gso_max_segs <= 65535:
            raise SpecError("gso_max_segs", f"{gso_max_segs} out of range",
                            "use 1 (per-segment packets, like a real switch sees) .. 65535")
        self.gso_max_segs = gso_max_segs
        _check_count("n_receivers", n_receivers)
        self.bottleneck = bottleneck if bottleneck is not None else BottleneckSpec()
        if not isinstance(self.bottleneck, BottleneckSpec):
            raise SpecError("bottleneck", "is not a BottleneckSpec", "pass BottleneckSpec(...)")
        if os.geteuid() != 0:
            raise CapabilityError(ROOT_REQUIRED)
        self.tag = _run_tag(prefix)
        self.router_ns = f"{self.tag}-rt"
        self.senders = [self._host("s", i, i) for i in range(1, n_senders + 1)]
        self.receivers = [
            self._host("r", j, _RECEIVER_SUBNET_OFFSET + j) for j in range(1, n_receivers + 1)
        ]
        self._state = _State()
        self._lock = threading.Lock()
        _install_exit_hooks()
        with _LIVE_LOCK:
            _LIVE.add(self)
        try:
            self._build()
        except BaseException:
            self.close()
            raise

    def _host(self, role: str, index: int, subnet: int) -> Host:
        name = f"{role}{index}"
        return Host(
            name=name,
            ns=f"{self.tag}-{name}",
            addr=f"{_SUBNET_BASE}.{subnet}.2",
            gateway=f"{_SUBNET_BASE}.{subnet}.1",
            router_dev=name,
        )

    # ----------------------------------------------------------------- build

    @property
    def hosts(self) -> list[Host]:
        return [*self.senders, *self.receivers]

    @property
    def namespaces(self) -> list[str]:
        """Every namespace this dumbbell owns (router last)."""
        return [h.ns for h in self.hosts] + [self.router_ns]

    @property
    def bottleneck_dev(self) -> str:
        """Router-side device toward receiver 1 (in ``router_ns``): attach tc/ECN here."""
        return self.receivers[0].router_dev

    def _build(self) -> None:
        for ns in [self.router_ns, *(h.ns for h in self.hosts)]:
            if ns in list_netns():
                raise NetnsError(f"namespace {ns} already exists: pick another prefix")
            _cmd(["ip", "netns", "add", ns])
            self._state.namespaces.append(ns)
        quiet_v6 = {
            "net.ipv6.conf.all.disable_ipv6": "1",
            "net.ipv6.conf.default.disable_ipv6": "1",
        }
        _sysctl(self.router_ns, {**quiet_v6, "net.ipv4.ip_forward": "1"})
        host_sysctls = {
            **quiet_v6,
            "net.ipv4.tcp_ecn": "1",
            "net.ipv4.tcp_ecn_fallback": "0",
            "net.ipv4.tcp_no_metrics_save": "1",
        }
        router_cmds = ["link set lo up"]
        for h in self.hosts:
            _sysctl(h.ns, host_sysctls)
            # Created straight inside both namespaces, so the root namespace never
            # sees (or collides on) these interface names.
            _cmd([
                "ip", "link", "add", "name", h.router_dev, "netns", self.router_ns,
                "type", "veth", "peer", "name", h.dev, "netns", h.ns,
            ])
            _ip_batch(h.ns, [
                "link set lo up",
                f"addr add {h.addr}/24 dev {h.dev}",
                f"link set {h.dev} up",
                f"route add default via {h.gateway} dev {h.dev}",
                *([f"link set {h.dev} gso_max_segs {self.gso_max_segs}"]
                  if self.gso_max_segs else []),
            ])
            router_cmds += [f"addr add {h.gateway}/24 dev {h.router_dev}",
                            f"link set {h.router_dev} up"]
        _ip_batch(self.router_ns, router_cmds)
        for r in self.receivers:
            _tc_batch(self.router_ns, self._htb_commands(r.router_dev))

    def _htb_commands(self, dev: str) -> list[str]:
        spec = self.bottleneck
        rate = f"{round(spec.rate_bps)}bit"
        burst = f"{spec.burst_bytes}b"
        minor = _HTB_CLASS_MINOR
        return [
            f"qdisc replace dev {dev} root handle 1: htb default {minor}",
            f"class add dev {dev} parent 1: classid 1:{minor} htb rate {rate} ceil {rate} "
            f"burst {burst} cburst {burst} quantum {_HTB_QUANTUM_BYTES}",
            f"qdisc add dev {dev} parent 1:{minor} handle {minor}: bfifo limit {spec.queue_bytes}",
        ]

    # ----------------------------------------------------------------- use

    def _ns_of(self, host: Host | str) -> str:
        if isinstance(host, Host):
            return host.ns
        by_name = {h.name: h.ns for h in self.hosts} | {"rt": self.router_ns}
        if host in by_name:
            return by_name[host]
        if host in self.namespaces:
            return host
        raise SpecError("host", f"{host!r} is not part of this dumbbell",
                        f"use one of {sorted(by_name)} or a Host object")

    def host(self, name: str) -> Host:
        """The host with short name ``name`` (``s1``, ``r2``, ...)."""
        for h in self.hosts:
            if h.name == name:
                return h
        raise SpecError("host", f"no host named {name!r}",
                        f"use one of {[h.name for h in self.hosts]}")

    def run(self, host: Host | str, argv: Sequence[str], **popen_kw: Any) -> subprocess.Popen[Any]:
        """Start ``argv`` inside ``host``'s namespace; it is killed on close()."""
        ns = self._ns_of(host)
        with self._lock:
            if self._state.closed:
                raise NetnsError("dumbbell is closed")
            proc = subprocess.Popen(nsenter_argv(ns, argv), **popen_kw)
            self._state.procs.append(proc)
        return proc

    def check_output(self, host: Host | str, argv: Sequence[str], **run_kw: Any) -> str:
        """Run ``argv`` to completion in ``host``'s namespace and return its stdout."""
        run_kw.setdefault("timeout", 60)
        proc = subprocess.run(
            nsenter_argv(self._ns_of(host), argv),
            capture_output=True, text=True, check=False, **run_kw,
        )
        if proc.returncode != 0:
            raise NetnsError(
                f"{' '.join(argv)} in {self._ns_of(host)} exited {proc.returncode}: "
                f"{proc.stderr.strip()}"
            )
        return proc.stdout

    def tc_stats(self, dev: str | None = None) -> QdiscStats:
        """Counters of the root HTB on ``dev`` (default: the bottleneck toward r1)."""
        dev = dev or self.bottleneck_dev
        out = _cmd(nsenter_argv(self.router_ns, ["tc", "-s", "-j", "qdisc", "show", "dev", dev]))
        return parse_qdisc_stats(out)

    # ----------------------------------------------------------------- teardown

    def close(self) -> None:
        """Stop our processes and delete our namespaces; safe to call repeatedly."""
        with self._lock:
            if self._state.closed:
                return
            self._state.closed = True
            procs, namespaces = list(self._state.procs), list(self._state.namespaces)
        for proc in procs:
            _stop_process(proc)
        errors = []
        for ns in reversed(namespaces):
            try:
                _delete_netns(ns)
            except NetnsError as exc:
                errors.append(str(exc))
        with _LIVE_LOCK:
            _LIVE.discard(self)
        if errors:
            raise NetnsError("; ".join(errors))

    def __enter__(self) -> Dumbbell:
        return self

    def __exit__(self, exc_type: object, exc: BaseException | None, tb: object) -> None:
        if exc is None:
            self.close()
            return
        try:
            self.close()
        except NetnsError as cleanup_exc:
            warnings.warn(f"dumbbell cleanup failed: {cleanup_exc}", stacklevel=2)

    def __repr__(self) -> str:
        return (f"Dumbbell(tag={self.tag!r}, senders={len(self.senders)}, "
                f"receivers={len(self.receivers)}, bottleneck={self.bottleneck})")


def _stop_process(proc: subprocess.Popen[Any]) -> None:
    if proc.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        proc.terminate()
    try:
        proc.wait(timeout=_KILL_GRACE_S)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        proc.wait()


def parse_qdisc_stats(tc_json: str) -> QdiscStats:
    """Pick the root qdisc's counters out of ``tc -s -j qdisc show`` output."""
    entries = json.loads(tc_json)
    root = next((e for e in entries if e.get("root")), None)
    if root is None:
        raise NetnsError(f"no root qdisc in tc output: {tc_json.strip()[:200]}")
    return QdiscStats(
        bytes=int(root.get("bytes", 0)),
        packets=int(root.get("packets", 0)),
        drops=int(root.get("drops", 0)),
        overlimits=int(root.get("overlimits", 0)),
        backlog=int(root.get("backlog", 0)),
        qlen=int(root.get("qlen", 0)),
        requeues=int(root.get("requeues", 0)),
    )

