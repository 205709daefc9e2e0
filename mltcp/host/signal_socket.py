"""The agent's signal socket: the end-of-iteration signal without root.

``mltcp job signal NAME`` writes the job's kernel config, which needs root; a training
process (``mltcp.hook`` with ``MLTCP_HOOK_SIGNAL=1``) usually runs as a user.  The agent
serves the same signal on a Unix socket (protocol: :mod:`mltcp.core.agent_protocol`).

Who may signal which job is decided by the kernel's word about the peer (``SO_PEERCRED``),
never by what the request claims:

* root may signal any job (as ``mltcp job signal`` can);
* any other process only a job it belongs to: its cgroup (``/proc/PID/cgroup``) is the
  job's cgroup or below it.  A training job's processes are in its cgroup by
  construction (that is how the datapath finds their sockets), so a job can mark its own
  iterations and nobody else's.  A ``whole_host`` job (every socket of the host) takes
  every local process's signal; a job found by address/port rules only, root's.

The socket file is world-writable (0666): the check above is the gate, and a user-owned
training process must be able to connect.  A stale file left by a crashed agent is
replaced; a live agent's socket is not taken over (the second agent stops with a
one-line error), and neither is a path that is not a socket.  Each connection is served
on a thread with a short read deadline, one request per connection, so a client that
never writes holds one thread for at most that long.
"""

from __future__ import annotations

import contextlib
import errno
import json
import logging
import os
import socket
import socketserver
import stat
import struct
import threading
from pathlib import Path

from mltcp.core import validate
from mltcp.core.agent_protocol import MAX_LINE, MAX_SOCKET_PATH, OP_SIGNAL
from mltcp.core.errors import MltcpError, SpecError
from mltcp.host import datapath, jobs

log = logging.getLogger("mltcp.host.signal_socket")

READ_DEADLINE_S = 2.0
_PEERCRED = struct.Struct("3i")      # struct ucred: pid, uid, gid


class SocketInUse(MltcpError):
    """The path is a live agent's socket."""


def peer_credentials(sock: socket.socket) -> tuple[int, int, int]:
    """(pid, uid, gid) of the process at the other end, as the kernel recorded them at
    connect time."""
    raw = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _PEERCRED.size)
    pid, uid, gid = _PEERCRED.unpack(raw)
    return pid, uid, gid


def process_cgroup(pid: int) -> Path | None:
    """The cgroup v2 directory ``pid`` is in, or None (gone, or no v2 entry)."""
    try:
        text = Path(f"/proc/{pid}/cgroup").read_text()
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith("0::"):
            return datapath.cgroup2_root() / line[3:].lstrip("/")
    return None


def may_signal(record: jobs.JobRecord, pid: int, uid: int) -> str | None:
    """None when the peer may signal the job, else why not (one line)."""
    if uid == 0:
        return None
    spec = record.spec
    if spec.whole_host:
        return None
    if not spec.cgroup:
        return (f"job {spec.name!r} finds its sockets by address rules, not a cgroup: only "
                f"root may signal it (sudo mltcp job signal {spec.name})")
    try:
        job_dir = jobs.cgroup_path(spec.cgroup, spec.whole_host)
    except MltcpError as exc:
        return f"job {spec.name!r}: {exc}"
    mine = process_cgroup(pid)
    if mine is not None and (mine == job_dir or job_dir in mine.parents):
        return None
    return (f"process {pid} (uid {uid}) is not in job {spec.name!r}'s cgroup {job_dir}: a "
            "process may only signal the job it belongs to")


class Boundaries:
    """The last iteration signalled per job (by its registry id, so a job attached anew
    starts afresh): the first signal of an iteration moves the kernel's boundary, the
    same iteration's signals from the job's other ranks are duplicates."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._last: dict[int, tuple[int, int]] = {}      # job id -> (iteration, seq)

    def signal(self, record: jobs.JobRecord, iteration: int | None,
               registry: jobs.Registry) -> dict[str, object]:
        with self._lock:      # one job's ranks race to signal the same iteration
            last = self._last.get(record.id)
            if iteration is not None and last is not None and last[0] == iteration:
                return {"ok": True, "seq": last[1], "duplicate": True}
            seq = jobs.signal(record.spec.name, registry)
            if iteration is not None:
                self._last[record.id] = (iteration, seq)
            return {"ok": True, "seq": seq}


def answer(request: bytes, pid: int, uid: int, registry: jobs.Registry,
           boundaries: Boundaries) -> dict[str, object]:
    """The reply to one request line from a peer."""
    try:
        message = json.loads(request)
    except ValueError:
        return {"ok": False, "error": "the request is not a JSON line"}
    if not isinstance(message, dict) or message.get("op") != OP_SIGNAL:
        return {"ok": False, "error": f'unknown request: send {{"op": "{OP_SIGNAL}", '
                                      '"job": NAME}'}
    name = message.get("job")
    iteration = message.get("iteration")
    try:
        validate.job_name(name, "job")
        if iteration is not None:
            validate.integer(iteration, "iteration", 0, 2**63 - 1, "0")
        record = registry.read().get(name)  # type: ignore[call-overload]
        if record is None:
            raise SpecError("job", f"no job named {name!r} on this host",
                            "attach it first (mltcp job attach) or check MLTCP_JOB")
        refused = may_signal(record, pid, uid)
        if refused:
            return {"ok": False, "error": refused}
        return boundaries.signal(record, iteration, registry)
    except MltcpError as exc:
        return {"ok": False, "error": str(exc)}


class _Server(socketserver.ThreadingUnixStreamServer):
    daemon_threads = True
    # Every rank of every job on the host signals at about the same moment; a client
    # that finds the backlog full fails at once (EAGAIN), so leave room for a burst.
    request_queue_size = 256


class SignalSocket:
    """Serves the signal protocol on ``path`` from a thread until :meth:`close`."""

    def __init__(self, path: str | Path, registry: jobs.Registry | None = None) -> None:
        self.path = Path(path)
        if len(os.fsencode(self.path)) > MAX_SOCKET_PATH:
            raise SpecError("--signal-socket", f"{self.path} is longer than a Unix socket's "
                            f"{MAX_SOCKET_PATH} bytes", "give a shorter path, e.g. "
                            "/run/mltcp/agent.sock")
        self.registry = registry or jobs.Registry()
        self.served = 0
        self.refused = 0
        self.boundaries = Boundaries()
        self._lock = threading.Lock()
        self._refusals_said: set[str] = set()
        self._claim()
        owner = self

        class Handler(socketserver.StreamRequestHandler):
            def handle(self) -> None:
                owner._handle(self.connection, self.rfile, self.wfile)

        self.server = _Server(str(self.path), Handler, bind_and_activate=False)
        try:
            self.server.server_bind()
            os.chmod(self.path, 0o666)
            self.server.server_activate()
        except OSError as exc:
            self.server.server_close()
            raise MltcpError(f"cannot serve the signal socket {self.path}: "
                             f"{exc.strerror or exc}") from None
        self._inode = self.path.stat().st_ino
        self._thread = threading.Thread(target=self.server.serve_forever, args=(0.2,),
                                        name="mltcp-signal-socket", daemon=True)
        self._thread.start()

    def _claim(self) -> None:
        """Make the path free: a stale socket is removed, a live one or a non-socket
        stops the start."""
        try:
            st = self.path.lstat()
        except FileNotFoundError:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            return
        if not stat.S_ISSOCK(st.st_mode):
            raise SpecError("--signal-socket", f"{self.path} exists and is not a socket",
                            "give a path that is free, or remove that file")
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
            probe.settimeout(1.0)
            try:
                probe.connect(str(self.path))
            except OSError as exc:
                if exc.errno not in (errno.ECONNREFUSED, errno.ENOENT):
                    raise
            else:
                raise SocketInUse(f"another agent serves {self.path}: stop it first "
                                  "(systemctl stop mltcp-agent) or give another "
                                  "--signal-socket")
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()
        log.info("removed the stale signal socket %s", self.path)

    def _handle(self, conn: socket.socket, rfile, wfile) -> None:  # type: ignore[no-untyped-def]
        conn.settimeout(READ_DEADLINE_S)
        try:
            pid, uid, _gid = peer_credentials(conn)
            line = rfile.readline(MAX_LINE + 1)
        except OSError:           # the deadline, or the peer went away
            return
        if not line:
            return
        if len(line) > MAX_LINE or not line.endswith(b"\n"):
            reply: dict[str, object] = {"ok": False, "error": "the request is not one line"}
        else:
            reply = answer(line, pid, uid, self.registry, self.boundaries)
        with self._lock:
            if reply["ok"]:
                self.served += 1
            else:
                self.refused += 1
                error = str(reply["error"])
                first = error not in self._refusals_said
                self._refusals_said.add(error)
        if not reply["ok"] and first:       # once per distinct reason: a loop must not flood
            log.warning("signal refused (pid %d, uid %d): %s", pid, uid, reply["error"])
        with contextlib.suppress(OSError):
            wfile.write(json.dumps(reply).encode() + b"\n")

    def close(self) -> None:
        """Stop serving and remove the socket file if it is still ours."""
        self.server.shutdown()
        self.server.server_close()
        self._thread.join(timeout=5)
        with contextlib.suppress(OSError):
            if self.path.stat().st_ino == self._inode:
                self.path.unlink()

    def __enter__(self) -> SignalSocket:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
