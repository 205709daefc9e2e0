"""Network namespaces as the host datapath meets them: enter one, name one, list them,
open a socket inside one.

The ECN marker and the cleanup of stale markers identify a device by its interface
index *and* its namespace's cookie (what BPF's ``bpf_get_netns_cookie`` returns), and
commands that configure a device inside a namespace must not remount /sys (``ip
netns exec`` and ``tc -n`` do, hiding the pins under /sys/fs/bpf): they go through
``nsenter --net=``.  The emulated testbed (:mod:`mltcp.lab.scenario.emulation`) builds its
fabrics on these too; this module only reads and enters namespaces, it never creates
one.
"""

from __future__ import annotations

import ctypes
import os
import socket
import threading
from collections.abc import Sequence

NETNS_DIR = "/run/netns"
INIT_NETNS = "/proc/1/ns/net"
CLONE_NEWNET = 0x40000000
SO_NETNS_COOKIE = 71


def netns_path(name: str | None) -> str:
    """The file of a named namespace, or of the initial one for None."""
    return f"{NETNS_DIR}/{name}" if name else INIT_NETNS


def nsenter_argv(ns: str, argv: Sequence[str]) -> list[str]:
    """Prefix ``argv`` so it runs in namespace ``ns`` without remounting /sys.

    ``ip netns exec`` would remount /sys and hide the BPF pins that MLTCP's
    congestion modules and ECN marker live under.
    """
    return ["nsenter", f"--net={netns_path(ns)}", "--", *argv]


def enter_netns(ns_path: str) -> None:
    """Move the calling *thread* into a network namespace (other threads stay put)."""
    libc = ctypes.CDLL(None, use_errno=True)
    fd = os.open(ns_path, os.O_RDONLY)
    try:
        if libc.setns(fd, CLONE_NEWNET) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"setns({ns_path}): {os.strerror(err)}")
    finally:
        os.close(fd)


def socket_in_netns(ns_path: str | None, family: int, type_: int,
                    proto: int = 0) -> socket.socket:
    """A socket that lives in a network namespace (``None``: this process's own), made
    without starting a process.

    A socket belongs to the namespace it was created in for its whole life, whichever
    thread then uses it; so a short-lived thread enters the namespace (setns moves only
    that thread), creates the socket and ends.  ``nsenter`` or pyroute2's ``NetNS`` would
    fork a process for this."""
    if not ns_path:
        return socket.socket(family, type_ | socket.SOCK_CLOEXEC, proto)
    result: list[socket.socket | BaseException] = []

    def make() -> None:
        try:
            enter_netns(ns_path)
            result.append(socket.socket(family, type_ | socket.SOCK_CLOEXEC, proto))
        except BaseException as exc:
            result.append(exc)

    t = threading.Thread(target=make, name="mltcp-setns")
    t.start()
    t.join()
    if isinstance(result[0], BaseException):
        raise result[0]
    return result[0]


def netns_cookie(ns_path: str | None) -> int:
    """The kernel's cookie of a network namespace (what BPF's get_netns_cookie returns);
    ``None`` is this process's own namespace."""
    with socket_in_netns(ns_path, socket.AF_INET, socket.SOCK_STREAM) as s:
        raw = s.getsockopt(socket.SOL_SOCKET, SO_NETNS_COOKIE, 8)
    return int.from_bytes(raw, "little")


def list_netns() -> list[str]:
    """Names of all named network namespaces (entries of /run/netns)."""
    try:
        return sorted(os.listdir(NETNS_DIR))
    except FileNotFoundError:
        return []
