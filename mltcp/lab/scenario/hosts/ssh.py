"""SSH to the training hosts: the OpenSSH client with one shared connection per host.

Why the OpenSSH client rather than an SSH library: it is what the hosts' operators
already configure and trust (keys, agents, known_hosts, jump hosts in ~/.ssh/config),
it is on every Linux box, and its connection sharing (``ControlMaster``) makes each
command after the first cost a channel, not a handshake, so the backend can run many
short commands (doctor, attach, collect) without a protocol of its own.

A :class:`Session` owns one master connection, started as a child process (never
daemonised: it dies with the run, PR_SET_PDEATHSIG), and runs commands, long-running
processes and file copies through it.  A dead host shows as a one-line
:class:`HostError` within ``ServerAliveInterval x ServerAliveCountMax`` seconds.
"""

from __future__ import annotations

import contextlib
import os
import select
import shlex
import subprocess
import tempfile
import threading
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from mltcp.core.errors import MltcpError
from mltcp.lab.scenario.emulation.procgroup import pdeathsig_argv
from mltcp.lab.scenario.hosts.inventory import HostSpec

ALIVE_INTERVAL_S = 3
ALIVE_COUNT = 3


class HostError(MltcpError):
    """A host could not be reached or a command on it failed; the message names the host."""


@dataclass
class Session:
    """One host's shared SSH connection (``open()`` before use, ``close()`` after)."""

    host: HostSpec
    control_dir: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="mltcp-ssh-")))
    connect_timeout_s: float = 10.0
    _master: subprocess.Popen | None = None

    @property
    def control_path(self) -> Path:
        # A Unix socket path: ~100 bytes at most, so the host's name, not its address.
        return self.control_dir / f"{self.host.name}.sock"

    def options(self) -> list[str]:
        """The ``-o`` options every ssh/scp invocation of this session shares."""
        h = self.host
        opts = ["-o", "BatchMode=yes", "-o", f"ConnectTimeout={int(self.connect_timeout_s)}",
                "-o", f"ControlPath={self.control_path}",
                "-o", f"ServerAliveInterval={ALIVE_INTERVAL_S}",
                "-o", f"ServerAliveCountMax={ALIVE_COUNT}", "-o", "LogLevel=ERROR"]
        if h.key:
            opts += ["-o", f"IdentityFile={os.path.expanduser(h.key)}",
                     "-o", "IdentitiesOnly=yes"]
        if h.known_hosts:
            opts += ["-o", f"UserKnownHostsFile={os.path.expanduser(h.known_hosts)}",
                     "-o", "StrictHostKeyChecking=yes"]
        else:
            opts += ["-o", "StrictHostKeyChecking=accept-new"]
        return opts

    def _ssh(self, *extra: str) -> list[str]:
        return ["ssh", *self.options(), "-p", str(self.host.port), *extra, self.host.destination]

    # ------------------------------------------------------------------ connection

    def open(self) -> Session:
        """Start the master connection and wait until it serves (or say why not)."""
        if self._master is not None:
            return self
        self.control_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        # A session of its own: a terminal's Ctrl-C (sent to this process group) must not
        # end the connection the teardown it causes goes over (it dies with this thread).
        self._master = subprocess.Popen(
            pdeathsig_argv(self._ssh("-M", "-N", "-o", "ControlPersist=no")),
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
            text=True, start_new_session=True)
        deadline = time.monotonic() + self.connect_timeout_s + 5
        while time.monotonic() < deadline:
            if self._master.poll() is not None:
                err = _last_line(self._master.stderr.read() if self._master.stderr else "")
                err = err.rstrip(".")
                self._master = None
                hint = ("; check the host's key in known_hosts" if "Host key" in err else
                        "; check the key and the host's authorized_keys"
                        if "Permission denied" in err else "")
                raise HostError(f"host {self.host.name} ({self.host.destination} port "
                                f"{self.host.port}): SSH failed: {err or 'no reason given'}{hint}")
            if self.control_path.exists() and subprocess.run(
                    self._ssh("-O", "check"), capture_output=True).returncode == 0:
                return self
            time.sleep(0.05)
        self.close()
        raise HostError(f"host {self.host.name}: no SSH connection within "
                        f"{self.connect_timeout_s + 5:g} s")

    def close(self) -> None:
        """End the master connection (every channel on it closes with it)."""
        master, self._master = self._master, None
        if master is None:
            return
        subprocess.run(self._ssh("-O", "exit"), capture_output=True, timeout=10, check=False)
        try:
            master.wait(timeout=5)
        except subprocess.TimeoutExpired:
            master.kill()
            master.wait()

    def __enter__(self) -> Session:
        return self.open()

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ commands

    def run(self, argv: Sequence[str], timeout_s: float = 120, check: bool = True,
            input_text: str | None = None) -> subprocess.CompletedProcess[str]:
        """Run ``argv`` on the host (quoted for its shell) and wait for it."""
        cmd = self._ssh() + ["--", shlex.join(argv)]
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s,
                                  input=input_text, check=False)
        except subprocess.TimeoutExpired:
            raise HostError(f"host {self.host.name}: {shlex.join(argv)} did not finish "
                            f"within {timeout_s:g} s") from None
        if proc.returncode == 255 and not self.alive():
            raise HostError(f"host {self.host.name}: connection lost "
                            f"({_last_line(proc.stderr) or 'ssh exit 255'})")
        if check and proc.returncode != 0:
            last = _last_line(proc.stderr) or _last_line(proc.stdout)
            raise HostError(f"host {self.host.name}: {shlex.join(argv)} exited "
                            f"{proc.returncode}: {last or 'no output'}")
        return proc

    def popen(self, argv: Sequence[str], **popen_kw: object) -> subprocess.Popen:
        """Start ``argv`` on the host; the local ssh process stands for it."""
        cmd = pdeathsig_argv(self._ssh() + ["--", shlex.join(argv)])
        return subprocess.Popen(cmd, **popen_kw)  # type: ignore[call-overload]

    def shell(self) -> Shell:
        """A shell kept open on the host (:class:`Shell`), started from this thread."""
        return Shell(self.popen(["sh"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.DEVNULL, bufsize=0,
                                start_new_session=True))

    def alive(self) -> bool:
        return self._master is not None and self._master.poll() is None and subprocess.run(
            self._ssh("-O", "check"), capture_output=True).returncode == 0

    # ------------------------------------------------------------------ files

    def put(self, local: str | Path, remote: str) -> None:
        self._scp(str(local), f"{self._scp_host()}:{remote}")

    def get(self, remote: str, local: str | Path) -> None:
        self._scp(f"{self._scp_host()}:{remote}", str(local))

    def _scp_host(self) -> str:
        ssh = self.host.ssh
        return f"{self.host.user}@[{ssh}]" if ":" in ssh else self.host.destination

    def _scp(self, src: str, dst: str) -> None:
        proc = subprocess.run(["scp", "-q", *self.options(), "-P", str(self.host.port), src, dst],
                              capture_output=True, text=True, timeout=300, check=False)
        if proc.returncode != 0:
            raise HostError(f"host {self.host.name}: copying {src} to {dst} failed: "
                            f"{_last_line(proc.stderr) or 'scp exit ' + str(proc.returncode)}")


class Shell:
    """A shell kept open on a host for commands that must start at once: a teardown's.

    Every command over :meth:`Session.run` pays a channel's start (an ssh client, a
    session, a shell): 0.4-0.9 s on a 2-core machine whose CPUs the dying workers still
    hold, per step and host.  A script written to this shell starts at once.  Its ssh
    client leads a session of its own, so a terminal's Ctrl-C does not end it before the
    teardown that needs it; it dies with the thread that started it, like the master."""

    def __init__(self, proc: subprocess.Popen) -> None:
        self.proc = proc
        self._busy = threading.Lock()

    def run(self, script: str, timeout_s: float) -> bool:
        """Run ``script`` (a shell command line, its output discarded) and wait for it;
        False when the shell is gone, busy with another thread's script, or the script
        did not end within ``timeout_s`` (the caller then runs it another way)."""
        if not self._busy.acquire(blocking=False):
            return False
        try:
            return self._run(script, timeout_s)
        finally:
            self._busy.release()

    def _run(self, script: str, timeout_s: float) -> bool:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        done = f"mltcp-done-{uuid.uuid4().hex}".encode()
        try:
            self.proc.stdin.write(b"( " + script.encode() + b" ) </dev/null >/dev/null 2>&1; "
                                  b"echo " + done + b"\n")
        except OSError:                  # the shell or its connection is gone
            return False
        fd, seen = self.proc.stdout.fileno(), b""
        deadline = time.monotonic() + timeout_s
        while done not in seen:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                return False
            chunk = os.read(fd, 4096)
            if not chunk:
                return False
            seen = seen[-len(done):] + chunk
        return True

    def close(self) -> None:
        """End the shell (end of its input) and its ssh client."""
        if self.proc.stdin is not None:
            with contextlib.suppress(OSError):
                self.proc.stdin.close()
        try:
            self.proc.wait(timeout=2)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def _last_line(text: str) -> str:
    """The last non-empty line: OpenSSH ends its explanations with the verdict."""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    return lines[-1] if lines else ""
