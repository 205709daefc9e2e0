"""Network namespaces for the emulated testbed: create, configure, run in, delete.

The one fabric builder (:mod:`mltcp.lab.scenario.emulation.fabric`) builds every emulated
network out of these primitives; the host datapath's read-only view of namespaces
(enter one, its cookie, the list) is :mod:`mltcp.host.namespaces`.

Facts about this host that shaped them (measured):

* ``ip netns exec`` and ``tc -n`` remount /sys, which hides BPF pins under
  /sys/fs/bpf; everything that runs *in* a namespace goes through
  ``nsenter --net=/run/netns/NAME`` instead.
* A process inside keeps a namespace (and its veths and qdiscs) alive after ``ip
  netns del``, so deleting one kills what runs in it first.
* Every namespace this project creates is named with :data:`PROJECT_PREFIX`, so
  ``mltcp testbed clean`` finds the leftovers of runs that died without cleaning up
  (and spares those of live runs: :mod:`mltcp.lab.scenario.emulation.owners`); whatever is
  alive is closed at interpreter exit, and on SIGTERM unless the program unwinds on
  signals (the CLI does: :mod:`mltcp.core.signals`).
"""

from __future__ import annotations

import atexit
import contextlib
import importlib.util
import os
import re
import secrets
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from types import FrameType
from typing import Any, Protocol

from mltcp.core import procstat, signals
from mltcp.core.errors import CapabilityError, MltcpError, SpecError
from mltcp.host.namespaces import list_netns, nsenter_argv

PROJECT_PREFIX = "mltcp-"
ROOT_REQUIRED = "network namespaces need root (CAP_SYS_ADMIN/CAP_NET_ADMIN): run as root"
_RUN_TAG_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,40}$")
_KILL_GRACE_S = 1.0
_DELETE_ATTEMPTS = 4


class NetnsError(MltcpError):
    """A command that builds or tears down the emulated network failed."""


@dataclass(frozen=True)
class QdiscStats:
    """Counters of a device's root qdisc."""

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


def run_cmd(argv: Sequence[str], *, stdin: str | None = None) -> str:
    """Run a setup command and fail with its stderr, which names the problem."""
    proc = subprocess.run(list(argv), input=stdin, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        detail = (proc.stderr or proc.stdout).strip().replace("\n", " | ")
        raise NetnsError(f"command failed ({proc.returncode}): {' '.join(argv)}: {detail}")
    return proc.stdout


def ip_batch(ns: str, lines: Sequence[str]) -> None:
    """Apply several ``ip`` commands in one namespace with one process."""
    run_cmd(["ip", "-n", ns, "-batch", "-"], stdin="\n".join(lines) + "\n")


def tc_batch(ns: str, lines: Sequence[str]) -> None:
    run_cmd(nsenter_argv(ns, ["tc", "-batch", "-"]), stdin="\n".join(lines) + "\n")


def set_sysctls(ns: str, settings: dict[str, str]) -> None:
    run_cmd(nsenter_argv(ns, ["sysctl", "-q", "-w", *(f"{k}={v}" for k, v in settings.items())]))


def create_netns(ns: str) -> None:
    if ns in list_netns():
        raise NetnsError(f"namespace {ns} already exists: pick another prefix")
    run_cmd(["ip", "netns", "add", ns])


def qdisc_stats(ns: str, dev: str | None = None) -> dict[str, QdiscStats]:
    """Root-qdisc counters of every device in ``ns`` (or of ``dev`` only), by device.

    One netlink socket for this one read; whoever reads often keeps a
    :class:`~mltcp.lab.scenario.emulation.qdiscs.QdiscReader` open instead (the fabric does)."""
    from mltcp.lab.scenario.emulation.qdiscs import QdiscReader

    with QdiscReader(ns) as reader:
        return reader.read(dev)


# --------------------------------------------------------------------------- processes


def _netns_pids(ns: str) -> list[int]:
    proc = subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True)
    return [int(tok) for tok in proc.stdout.split() if tok.isdigit()]


def _kill_netns_processes(ns: str) -> None:
    """SIGTERM, then SIGKILL, whatever still runs in ``ns``."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        pids = [p for p in _netns_pids(ns) if p != os.getpid()]
        if not pids:
            return
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, sig)
        deadline = time.monotonic() + _KILL_GRACE_S
        while time.monotonic() < deadline and any(procstat.alive(p) for p in pids):
            time.sleep(0.01)


def delete_netns(ns: str, attempts: int = _DELETE_ATTEMPTS) -> None:
    """Kill what runs in ``ns``, then delete it (a process inside would keep it alive).

    ``ip netns del`` unmounts one mount of the namespace file and fails with "Device or
    resource busy" when another is stacked on it (a second ``ip netns add`` or a mount
    propagated from a peer mount namespace): each try removes one, so it is tried again
    before the namespace is reported as left behind."""
    for attempt in range(1, attempts + 1):
        _kill_netns_processes(ns)
        if ns not in list_netns():
            return
        try:
            run_cmd(["ip", "netns", "del", ns])
            return
        except NetnsError:
            if attempt == attempts:
                raise


def stop_process(proc: subprocess.Popen[Any]) -> None:
    """SIGTERM, then SIGKILL after a grace period; reaps it."""
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


def cleanup_leftovers(prefix: str = PROJECT_PREFIX, keep: Collection[str] = ()) -> list[str]:
    """Delete every namespace whose name starts with ``prefix``, except those in
    ``keep``; return their names.

    For runs that died without cleaning up (SIGKILL, power loss).  Processes inside
    are killed first so the namespaces really go away.  The default prefix also matches
    fabrics of *other* live processes: ``mltcp testbed clean`` keeps those of live runs
    (:mod:`mltcp.lab.scenario.emulation.owners`).
    """
    if not prefix.startswith(PROJECT_PREFIX):
        raise SpecError(
            "prefix", f"{prefix!r} does not start with {PROJECT_PREFIX!r}",
            f"pass a prefix beginning with {PROJECT_PREFIX!r} so only MLTCP namespaces go",
        )
    removed = []
    for ns in list_netns():
        if ns.startswith(prefix) and ns not in keep:
            delete_netns(ns)
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
    if importlib.util.find_spec("pyroute2") is None:
        raise CapabilityError("the testbed reads its queues through pyroute2, which is not "
                              "installed: pip install 'mltcp[lab]'")
    probe = f"{PROJECT_PREFIX}{os.getpid()}-probe-{secrets.token_hex(2)}"
    try:
        run_cmd(["ip", "netns", "add", probe])
    except NetnsError as exc:
        raise CapabilityError(ROOT_REQUIRED) from exc
    with contextlib.suppress(NetnsError):
        run_cmd(["ip", "netns", "del", probe])


def run_tag(prefix: str | None) -> str:
    """The namespaces' name prefix of one build: ``mltcp-<pid>-<4 hex>`` by default."""
    if prefix is None:
        return f"{PROJECT_PREFIX}{os.getpid()}-{secrets.token_hex(2)}"
    tag = prefix if prefix.startswith(PROJECT_PREFIX) else PROJECT_PREFIX + prefix
    if not _RUN_TAG_RE.match(tag):
        raise SpecError(
            "prefix", f"{prefix!r} is not a usable namespace name",
            "use at most 40 letters, digits, '.', '_' or '-'",
        )
    return tag


# --------------------------------------------------------------------------- cleanup on exit


class Closable(Protocol):
    def close(self) -> None: ...


_LIVE: set[Closable] = set()
_LIVE_LOCK = threading.Lock()
_HOOKS_INSTALLED = False
_PREV_SIGTERM: Any = signal.SIG_DFL


def _close_all_live() -> None:
    with _LIVE_LOCK:
        live = list(_LIVE)
    for obj in live:
        with contextlib.suppress(Exception):
            obj.close()


def _on_sigterm(signum: int, frame: FrameType | None) -> None:
    """Tear the namespaces down, then behave as the previous SIGTERM handler would.

    The last resort of a program that uses fabrics and handles no signal.  The CLI's
    commands unwind instead (:mod:`mltcp.core.signals`), which tears down the run's
    jobs, markers, module and processes as well; while that handler is installed this
    one stays out (and if it comes later, it replaces this one for SIGTERM)."""
    _close_all_live()
    prev = _PREV_SIGTERM
    if callable(prev):
        prev(signum, frame)
    elif prev != signal.SIG_IGN:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGTERM)


def track(obj: Closable) -> None:
    """Close ``obj`` at interpreter exit or SIGTERM unless it was closed (untracked) before."""
    global _HOOKS_INSTALLED, _PREV_SIGTERM
    with _LIVE_LOCK:
        _LIVE.add(obj)
        if _HOOKS_INSTALLED:
            return
        _HOOKS_INSTALLED = True
    atexit.register(_close_all_live)
    if threading.current_thread() is threading.main_thread():
        prev = signal.getsignal(signal.SIGTERM)
        if prev is not _on_sigterm and not signals.unwinds(prev):
            _PREV_SIGTERM = prev
            signal.signal(signal.SIGTERM, _on_sigterm)


def untrack(obj: Closable) -> None:
    with _LIVE_LOCK:
        _LIVE.discard(obj)
