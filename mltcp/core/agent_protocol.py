"""The agent's signal socket protocol, shared by its server (:mod:`mltcp.host.signal_socket`)
and its client (:mod:`mltcp.hook.signalling`): one definition of the path and the lines.

A client connects to the Unix socket, writes one JSON line ``{"op": "signal", "job":
NAME, "iteration": I}`` and reads one back: ``{"ok": true, "seq": N}`` (the job's signal
sequence number now in the kernel) or ``{"ok": false, "error": "..."}``.  One request per
connection.

``iteration`` (optional, the training loop's own index) makes the signal idempotent per
iteration: every rank of a job on a host (several GPUs, or namespace hosts sharing a
kernel) signals the same iteration's end, and only the first of them moves the kernel's
boundary; the others are answered ``{"ok": true, "seq": N, "duplicate": true}``.  Without
it every request is a boundary, as ``mltcp job signal`` is.
"""

from __future__ import annotations

DEFAULT_AGENT_SOCKET = "/run/mltcp/agent.sock"
AGENT_SOCKET_ENV = "MLTCP_AGENT_SOCKET"
MAX_LINE = 64 * 1024      # a request or an answer longer than this is not one line
MAX_SOCKET_PATH = 107     # sun_path's 108 bytes, with its terminating NUL
OP_SIGNAL = "signal"
