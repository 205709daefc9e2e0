"""The agent's signal socket protocol, shared by its server (:mod:`mltcp.host.signal_socket`)
and its client (:mod:`mltcp.hook.signalling`): one definition of the path and the lines.

A client connects to the Unix socket, writes one JSON line ``{"op": "signal", "job":
NAME}`` and reads one back: ``{"ok": true, "seq": N}`` (the job's signal sequence number
now in the kernel) or ``{"ok": false, "error": "..."}``.  One request per connection.
"""

from __future__ import annotations

DEFAULT_AGENT_SOCKET = "/run/mltcp/agent.sock"
AGENT_SOCKET_ENV = "MLTCP_AGENT_SOCKET"
MAX_LINE = 64 * 1024      # a request or an answer longer than this is not one line
OP_SIGNAL = "signal"
