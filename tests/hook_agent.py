"""The mltcp agent's side of the hook's signal protocol, for tests: a real Unix-socket
server on threads (the agent itself is the host's; the hook must not need it)."""

from __future__ import annotations

import json
import socketserver
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from mltcp.hook.iteration import now


@contextmanager
def short_tmp() -> Iterator[str]:
    """A directory for sockets: AF_UNIX paths are limited to 107 bytes, and pytest's
    tmp_path can be longer."""
    with tempfile.TemporaryDirectory(prefix="mh", dir="/tmp") as d:
        yield d


@dataclass
class Agent:
    """The agent's side of the signal protocol, on a real Unix socket: answers each
    ``{"op": "signal", "job": ...}`` line with the next sequence number (or refuses,
    or never answers), noting when (CLOCK_MONOTONIC) each arrived."""

    path: str
    refuse: str | None = None
    hang: bool = False
    received: list[tuple[float, dict]] = field(default_factory=list)

    def serve(self) -> socketserver.ThreadingUnixStreamServer:
        agent = self

        class Handler(socketserver.StreamRequestHandler):
            def handle(self) -> None:
                line = self.rfile.readline()
                if not line:
                    return
                message = json.loads(line)
                agent.received.append((now(), message))
                if agent.hang:
                    time.sleep(1)
                    return
                reply = ({"ok": False, "error": agent.refuse} if agent.refuse
                         else {"ok": True, "seq": len(agent.received)})
                self.wfile.write(json.dumps(reply).encode() + b"\n")

        server = socketserver.ThreadingUnixStreamServer(self.path, Handler)
        server.daemon_threads = True
        threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
        return server

    @contextmanager
    def serving(self) -> Iterator[Agent]:
        server = self.serve()
        try:
            yield self
        finally:
            server.shutdown()
            server.server_close()
