"""Run traffic in an emulated lab: sinks on receivers, senders on senders, JSON reports back.

Shared by the demo, the tests and the benchmarks so that all of them drive
real kernel TCP the same way (mltcp.lab.emulation.traffic processes inside namespaces).
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from mltcp.core.errors import MltcpError
from mltcp.lab.emulation.netns import Dumbbell, Host


@dataclass
class Sender:
    """One `mltcp.lab.emulation.traffic send` process: where, to which port, how."""

    host: Host
    port: int
    cc: str
    mode: list[str]                      # e.g. ["--duration", "3"] or ["--iterations", ...]
    conns: int = 1
    sample_ms: float = 10.0
    cgroup: Path | None = None           # start the process inside this cgroup (v2)
    extra: list[str] = field(default_factory=list)


def start_sink(net: Dumbbell, host: Host, port: int, cc: str | None = None,
               timeout_s: float = 15.0) -> subprocess.Popen:
    argv = [sys.executable, "-m", "mltcp.lab.emulation.traffic", "sink", "--port", str(port)]
    if cc:
        argv += ["--cc", cc]
    proc = net.run(host, argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + timeout_s
    line = proc.stdout.readline()
    if not line or json.loads(line).get("event") != "listening" or time.monotonic() > deadline:
        err = proc.stderr.read() if proc.poll() is not None else ""
        raise MltcpError(f"traffic sink on {host.name}:{port} did not start: {line!r} {err}")
    return proc


def _sender_argv(s: Sender, dst: str, out: Path) -> list[str]:
    argv = [sys.executable, "-m", "mltcp.lab.emulation.traffic", "send", "--dst", dst,
            "--port", str(s.port),
            "--cc", s.cc, "--conns", str(s.conns), "--sample-ms", str(s.sample_ms),
            "--out", str(out), *s.mode, *s.extra]
    if s.cgroup is not None:
        # Join the cgroup first so every socket of the process is created inside it.
        return ["sh", "-c", f'echo $$ > "{s.cgroup}/cgroup.procs" && exec "$@"', "sh", *argv]
    return argv


def run_senders(net: Dumbbell, senders: list[Sender], dst: Host,
                timeout_s: float = 120.0) -> list[dict]:
    """Start all senders at once toward `dst`, wait, and return their reports in order."""
    tmp = Path(tempfile.mkdtemp(prefix="mltcp-run-"))
    procs = []
    for i, s in enumerate(senders):
        out = tmp / f"sender{i}.json"
        procs.append((out, net.run(s.host, _sender_argv(s, dst.addr, out),
                                   stderr=subprocess.PIPE, text=True)))
    reports = []
    deadline = time.monotonic() + timeout_s
    for out, proc in procs:
        try:
            proc.wait(timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired as exc:
            raise MltcpError(f"a sender did not finish within {timeout_s:g} s") from exc
        if proc.returncode != 0 or not out.exists():
            raise MltcpError(f"sender failed (exit {proc.returncode}): {proc.stderr.read()}")
        reports.append(json.loads(out.read_text()))
        out.unlink()
    tmp.rmdir()
    return reports
