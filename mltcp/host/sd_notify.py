"""systemd's service notification protocol (sd_notify(3)), with the standard library only.

Under a ``Type=notify`` unit systemd passes ``$NOTIFY_SOCKET``, a Unix datagram socket: a
path (``/run/systemd/notify``) or, starting with ``@``, a name in the abstract namespace.
A message is one datagram of newline-separated ``VAR=value`` assignments:

* ``READY=1``: the service serves (systemd then starts the units ordered after it);
* ``RELOADING=1`` (with ``MONOTONIC_USEC=``) ... ``READY=1``: a reload, begun and done;
* ``STOPPING=1``: the service has begun to stop;
* ``STATUS=...``: one line that ``systemctl status`` shows;
* ``WATCHDOG=1``: alive.  With ``WatchdogSec=`` systemd passes ``$WATCHDOG_USEC`` (and
  ``$WATCHDOG_PID``, the process meant) and restarts a service that sends no ping for that
  long; sd_watchdog_enabled(3) advises a ping every half of it, which :meth:`watchdog`
  keeps to.

Without ``$NOTIFY_SOCKET`` (a terminal, a test, a ``Type=simple`` unit) every call is a
no-op that returns False.  A failed send is logged once and never raises: telling systemd
must not stop the service.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from collections.abc import Callable, Mapping

log = logging.getLogger("mltcp.host.sd_notify")


def socket_address(value: str) -> str | None:
    """The address of ``$NOTIFY_SOCKET``: an absolute path, or ``@name`` as the abstract
    address ``\\0name``; None when unset or of a kind this client does not speak (e.g.
    systemd's ``vsock:`` addresses for virtual machines)."""
    if value.startswith("/"):
        return value
    if value.startswith("@") and len(value) > 1:
        return "\0" + value[1:]
    return None


def watchdog_seconds(environ: Mapping[str, str]) -> float | None:
    """The watchdog period systemd asks of this process (``$WATCHDOG_USEC``), or None: none
    asked, a bad value, or ``$WATCHDOG_PID`` names another process (a child that inherited
    the environment is not the one watched)."""
    pid = environ.get("WATCHDOG_PID", "")
    if pid and pid != str(os.getpid()):
        return None
    try:
        usec = int(environ.get("WATCHDOG_USEC", ""))
    except ValueError:
        return None
    return usec / 1e6 if usec > 0 else None


class Notifier:
    """Sends the service's state to systemd; see the module's doc for the messages."""

    def __init__(self, environ: Mapping[str, str] | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        env = os.environ if environ is None else environ
        raw = env.get("NOTIFY_SOCKET", "")
        self.address = socket_address(raw)
        if raw and self.address is None:
            log.warning("NOTIFY_SOCKET=%s is not a Unix socket address: not telling systemd "
                        "the agent's state", raw)
        self.watchdog_s = watchdog_seconds(env) if self.address else None
        self._clock = clock
        self._next_ping: float | None = None
        self._status: str | None = None
        self._sock: socket.socket | None = None
        self._failed = False
        self._lock = threading.Lock()

    @property
    def enabled(self) -> bool:
        return self.address is not None

    def send(self, *assignments: str) -> bool:
        """One datagram of ``VAR=value`` lines; True if it was sent."""
        if self.address is None:
            return False
        with self._lock:
            try:
                if self._sock is None:
                    self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
                self._sock.sendto("\n".join(assignments).encode(), self.address)
            except OSError as exc:
                if not self._failed:
                    log.warning("cannot notify systemd on %s: %s", self.address.lstrip("\0"),
                                exc.strerror or exc)
                    self._failed = True
                return False
        return True

    def _with_status(self, first: str, status: str | None) -> bool:
        if status is None:
            return self.send(first)
        self._status = _one_line(status)
        return self.send(first, f"STATUS={self._status}")

    def ready(self, status: str | None = None) -> bool:
        """Serving (at start, and when a reload is done)."""
        sent = self._with_status("READY=1", status)
        self.watchdog()           # the watchdog runs from READY=1 on
        return sent

    def reloading(self, status: str | None = None) -> bool:
        """A reload has begun; :meth:`ready` says it is done."""
        usec = time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000
        return self._with_status(f"RELOADING=1\nMONOTONIC_USEC={usec}", status)

    def stopping(self, status: str | None = None) -> bool:
        return self._with_status("STOPPING=1", status)

    def status(self, text: str) -> bool:
        """``STATUS=text``, sent only when it differs from the last one."""
        line = _one_line(text)
        if line == self._status:
            return False
        self._status = line
        return self.send(f"STATUS={line}")

    def watchdog(self) -> bool:
        """``WATCHDOG=1`` if one is due (every half of ``$WATCHDOG_USEC``); True if sent."""
        if self.watchdog_s is None:
            return False
        now = self._clock()
        if self._next_ping is not None and now < self._next_ping:
            return False
        self._next_ping = now + self.watchdog_s / 2
        return self.send("WATCHDOG=1")

    def watchdog_due_in(self) -> float | None:
        """Seconds until the next ping is due (0: now); None without a watchdog."""
        if self.watchdog_s is None:
            return None
        if self._next_ping is None:
            return 0.0
        return max(0.0, self._next_ping - self._clock())

    def close(self) -> None:
        with self._lock:
            if self._sock is not None:
                self._sock.close()
                self._sock = None


def _one_line(text: str) -> str:
    return " ".join(text.split())
