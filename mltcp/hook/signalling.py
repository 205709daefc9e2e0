"""The end-of-iteration signal: a client of the mltcp agent's Unix socket.

The datapath's iteration tracker counts a job's bytes per iteration and starts a new
iteration after an idle gap; an explicit signal (``mltcp job signal``) marks the
boundary instead, which needs root.  The agent offers the same signal on a Unix socket a
training process can reach without root (``MLTCP_AGENT_SOCKET``, default
``/run/mltcp/agent.sock``): the client connects, sends one JSON line
``{"op": "signal", "job": NAME}`` and reads one back, ``{"ok": true, "seq": N}`` or
``{"ok": false, "error": "..."}``.  One connection per signal: nothing to keep alive,
and an agent restarted between two iterations is simply reached again.

A signal must never hurt training: each exchange has a deadline (0.2 s by default), it
runs on a thread of its own (:class:`Signaller`), a failure is counted and reported
in the records (the first one also on stderr, once), and after an agent that did not
answer in time the signals of the next few seconds are skipped rather than each
costing the deadline again.  An agent that is absent or refuses fails at once and is
tried again at the next iteration.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import TextIO

from mltcp.core.agent_protocol import (
    AGENT_SOCKET_ENV,
    DEFAULT_AGENT_SOCKET,
    MAX_LINE,
    MAX_SOCKET_PATH,
    OP_SIGNAL,
)
from mltcp.core.errors import MltcpError, SpecError

DEFAULT_TIMEOUT_S = 0.2
QUIET_AFTER_TIMEOUT_S = 5.0


class SignalFailed(MltcpError):
    """The agent did not take the signal; the message says why, in one line."""

    def __init__(self, reason: str, timed_out: bool = False) -> None:
        super().__init__(reason)
        self.timed_out = timed_out


def agent_socket_path(path: str | None = None) -> str:
    """The agent's socket: ``path``, else ``$MLTCP_AGENT_SOCKET``, else the default."""
    return path or os.environ.get(AGENT_SOCKET_ENV) or DEFAULT_AGENT_SOCKET


def checked_socket_path(path: str | None = None) -> str:
    """:func:`agent_socket_path`, refused at once (naming ``agent_socket`` or the
    variable, whichever gave it) when no Unix socket can have it: longer than sun_path's
    107 bytes, every signal would fail with 'AF_UNIX path too long' while training went
    on, one warning and no boundary ever reaching the datapath."""
    chosen = agent_socket_path(path)
    size = len(os.fsencode(chosen))
    if size > MAX_SOCKET_PATH:
        field = "agent_socket" if path else AGENT_SOCKET_ENV
        raise SpecError(field, f"{chosen} is {size} bytes, longer than a Unix socket's "
                        f"{MAX_SOCKET_PATH}", "give the agent's --signal-socket path, which "
                        f"is at most {MAX_SOCKET_PATH} bytes (default {DEFAULT_AGENT_SOCKET})")
    return chosen


@dataclass(frozen=True)
class AgentClient:
    """One request, one answer, over a fresh connection, within ``timeout_s``."""

    path: str
    timeout_s: float = DEFAULT_TIMEOUT_S

    def signal(self, job: str, iteration: int | None = None) -> int:
        """Signal ``job``'s end of iteration (``iteration``: the loop's index, so that
        its other ranks' signals of the same iteration are one boundary); the agent's
        sequence number for it."""
        message: dict[str, object] = {"op": OP_SIGNAL, "job": job}
        if iteration is not None:
            message["iteration"] = iteration
        reply = self.request(message)
        if reply.get("ok") is True:
            seq = reply.get("seq")
            if isinstance(seq, int) and not isinstance(seq, bool) and seq >= 0:
                return seq
            raise SignalFailed(f"the agent at {self.path} answered ok without a sequence "
                               f"number ({reply!r})")
        reason = reply.get("error")
        raise SignalFailed(f"the agent refused: {reason if isinstance(reason, str) else reply}")

    def request(self, message: dict[str, object]) -> dict[str, object]:
        deadline = time.monotonic() + self.timeout_s
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
                sock.settimeout(self.timeout_s)
                sock.connect(self.path)
                sock.settimeout(_left(deadline))
                sock.sendall(json.dumps(message).encode() + b"\n")
                line = _read_line(sock, deadline)
        except TimeoutError:
            raise SignalFailed(f"the agent at {self.path} did not answer within "
                               f"{self.timeout_s:g} s", timed_out=True) from None
        except OSError as exc:
            raise SignalFailed(f"cannot reach the agent at {self.path} "
                               f"({exc.strerror or exc})") from None
        try:
            reply = json.loads(line)
        except ValueError:
            reply = None
        if not isinstance(reply, dict):
            raise SignalFailed(f"the agent at {self.path} answered {line[:80]!r}, not a "
                               "JSON object")
        return reply


def _left(deadline: float) -> float:
    left = deadline - time.monotonic()
    if left <= 0:
        raise TimeoutError
    return left


def _read_line(sock: socket.socket, deadline: float) -> bytes:
    buf = b""
    while b"\n" not in buf:
        sock.settimeout(_left(deadline))
        chunk = sock.recv(4096)
        if not chunk:
            raise ConnectionResetError(0, "it closed the connection without an answer")
        buf += chunk
        if len(buf) > MAX_LINE:
            raise ConnectionResetError(0, "its answer is not one line")
    return buf.split(b"\n", 1)[0]


@dataclass(frozen=True)
class SignalOutcome:
    """What became of one signal: the agent's ``seq``, or the ``error``."""

    seq: int | None = None
    error: str | None = None


class Signaller:
    """Sends one job's signals on a background thread, so that the thread that ends an
    iteration's communication (DDP completes buckets on the collective library's
    threads) never waits on the agent."""

    def __init__(self, client: AgentClient, job: str, *,
                 quiet_after_timeout_s: float = QUIET_AFTER_TIMEOUT_S,
                 stderr: TextIO | None = None) -> None:
        self.client = client
        self.job = job
        self.quiet_after_timeout_s = quiet_after_timeout_s
        self._stderr = stderr
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="mltcp-hook-signal")
        self._lock = threading.Lock()
        self._quiet_until = 0.0
        self._warned = False
        self.sent = 0
        self.failures = 0

    def submit(self, iteration: int | None = None) -> Future[SignalOutcome]:
        """Queue one signal (of the loop's ``iteration``); its outcome arrives on the
        future."""
        return self._pool.submit(self._send, iteration)

    def outcome(self, future: Future[SignalOutcome]) -> SignalOutcome:
        """The outcome of a submitted signal, waiting at most about one deadline (the
        exchange has its own; this only bounds a queue that a stuck agent let grow)."""
        try:
            return future.result(timeout=self.client.timeout_s + 0.05)
        except TimeoutError:
            return self._failed(SignalFailed("the signal was still queued after "
                                             f"{self.client.timeout_s:g} s"))

    def _send(self, iteration: int | None = None) -> SignalOutcome:
        now = time.monotonic()
        if now < self._quiet_until:
            return self._failed(SignalFailed(
                f"skipped: the agent at {self.client.path} did not answer in time "
                f"{now - (self._quiet_until - self.quiet_after_timeout_s):.1f} s ago"))
        try:
            seq = self.client.signal(self.job, iteration)
        except SignalFailed as exc:
            if exc.timed_out:
                self._quiet_until = time.monotonic() + self.quiet_after_timeout_s
            return self._failed(exc)
        with self._lock:
            self.sent += 1
        return SignalOutcome(seq=seq)

    def _failed(self, exc: SignalFailed) -> SignalOutcome:
        with self._lock:
            self.failures += 1
            warn, self._warned = not self._warned, True
        if warn:        # one write: ranks sharing a terminal must not interleave it
            stream = self._stderr or sys.stderr
            stream.write(f"mltcp.hook: the end-of-iteration signal for job {self.job!r} "
                         f"failed: {exc}; training goes on and the datapath finds iterations "
                         "by its budget (and by idle gaps unless the job signalled before or "
                         "was attached with --signal; later failures are counted in the "
                         "records, not printed)\n")
            stream.flush()
        return SignalOutcome(error=str(exc))

    def close(self) -> None:
        self._pool.shutdown(wait=True)
