"""The agent's signal socket on the real datapath: the hook's client signals a job through
a running agent, the kernel's sequence number moves; a process outside the job's cgroup
is refused by its kernel credentials; stale, live and foreign socket files."""

from __future__ import annotations

import ctypes
import json
import os
import socket
import subprocess
import threading
import time
from pathlib import Path

import pytest

from mltcp.core.errors import MltcpError, SpecError
from mltcp.hook.signalling import AgentClient, SignalFailed
from mltcp.host import datapath, jobs, maps, rules
from mltcp.host.agent import Agent
from mltcp.host.signal_socket import SignalSocket, SocketInUse
from tests.hook_agent import short_tmp

NOBODY = 65534
REPO = str(Path(__file__).resolve().parents[1])
# The hook needs only the standard library: the system's interpreter, which an
# unprivileged user can run (a root-owned virtual environment may not be).
PEER_PYTHON = "/usr/bin/python3"


def _kernel_seq(record: jobs.JobRecord) -> int:
    with maps.PinnedMap("mltcp_job_cfg") as cfg_map:
        cfg = cfg_map.get(ctypes.c_uint32(record.id), maps.JobCfg)
        assert cfg is not None
        return int(cfg.signal_seq)


@pytest.fixture
def sock_dir():
    with short_tmp() as d:
        os.chmod(d, 0o755)        # reachable by an unprivileged peer
        yield Path(d)


@pytest.fixture
def job_cgroup(clean_datapath):
    datapath.load(["reno"])
    root = datapath.cgroup2_root()
    path = root / f"mltcp-sigtest-{os.getpid()}"
    path.mkdir()
    try:
        yield path
    finally:
        for pid in (path / "cgroup.procs").read_text().split():
            (root / "cgroup.procs").write_text(pid)
        path.rmdir()


def _client_as(uid: int, sock: Path, job: str, cgroup: Path | None) -> dict:
    """One signal from a separate process running as ``uid``, moved into ``cgroup``
    first (by root, before it drops its privileges)."""
    code = ("import json, sys; from mltcp.hook.signalling import AgentClient, SignalFailed\n"
            "try: print(json.dumps({'seq': AgentClient(sys.argv[1], 2.0).signal(sys.argv[2])}))\n"
            "except SignalFailed as e: print(json.dumps({'error': str(e)}))\n")
    join = f"echo $$ > {cgroup}/cgroup.procs && " if cgroup else ""
    drop = (f"setpriv --reuid {uid} --regid {uid} --clear-groups " if uid else "")
    out = subprocess.run(["sh", "-c", f'{join}exec {drop}env PYTHONPATH="$0" {PEER_PYTHON} '
                          f'-c "$1" "$2" "$3"', REPO, code, str(sock), job],
                         capture_output=True, text=True, timeout=30, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.kernel
@pytest.mark.skipif(not os.access(PEER_PYTHON, os.X_OK), reason=f"no {PEER_PYTHON} to run an "
                    "unprivileged peer with")
def test_a_training_process_signals_its_own_job_through_the_agent(job_cgroup, sock_dir):
    record = jobs.attach(jobs.JobSpec(name="sig", budget=1_000_000, cc="reno",
                                      cgroup=str(job_cgroup)))
    other = jobs.attach(jobs.JobSpec(name="other", budget=1_000_000, cc="reno",
                                     rules=(rules.Rule(port=7355),)))
    path = sock_dir / "agent.sock"
    agent = Agent(interval_s=0.1, signal_socket=path)
    thread = threading.Thread(target=agent.run)
    thread.start()
    try:
        assert oct(path.stat().st_mode & 0o777) == "0o666"
        client = AgentClient(str(path), timeout_s=2.0)
        before = _kernel_seq(record)
        seqs = [client.signal("sig") for _ in range(5)]     # root: any job
        assert seqs == [before + i for i in range(1, 6)]
        assert _kernel_seq(record) == before + 5
        # Unprivileged, inside the job's cgroup: its own job yes, another job no.
        assert _client_as(NOBODY, path, "sig", job_cgroup) == {"seq": before + 6}
        refused = _client_as(NOBODY, path, "other", job_cgroup)["error"]
        assert "only root may signal it" in refused
        # Unprivileged, outside: refused by the kernel's word about the peer.
        refused = _client_as(NOBODY, path, "sig", None)["error"]
        assert "is not in job 'sig'" in refused and f"uid {NOBODY}" in refused
        assert _kernel_seq(record) == before + 6
        with pytest.raises(SignalFailed, match="no job named 'nope'"):
            client.signal("nope")
        with pytest.raises(SignalFailed, match="job"):
            client.signal("bad name!")
        assert _kernel_seq(other) == 0
        # Every rank signals each iteration's end: one boundary per iteration index.
        base = _kernel_seq(record)
        replies = [client.request({"op": "signal", "job": "sig", "iteration": i})
                   for i in (0, 0, 0, 1, 1, 0)]
        assert replies == [{"ok": True, "seq": base + 1},
                           {"ok": True, "seq": base + 1, "duplicate": True},
                           {"ok": True, "seq": base + 1, "duplicate": True},
                           {"ok": True, "seq": base + 2},
                           {"ok": True, "seq": base + 2, "duplicate": True},
                           {"ok": True, "seq": base + 3}]   # a loop that started again
        assert _kernel_seq(record) == base + 3
        assert client.request({"op": "signal", "job": "sig", "iteration": -1}) == {
            "ok": False, "error": "iteration: must be between 0 and 9223372036854775807 "
                                  "(got -1); use an integer from 0 to 9223372036854775807, e.g. 0"}
        assert agent.signals is not None and agent.signals.served == 12
    finally:
        agent.stop()
        thread.join(timeout=10)
    assert not path.exists()          # the agent removed its socket


@pytest.mark.kernel
def test_a_client_that_never_writes_does_not_hold_up_the_others(job_cgroup, sock_dir):
    jobs.attach(jobs.JobSpec(name="sig", budget=1_000_000, cc="reno", cgroup=str(job_cgroup)))
    path = sock_dir / "agent.sock"
    with SignalSocket(path) as server:
        silent = [socket.socket(socket.AF_UNIX) for _ in range(8)]
        for s in silent:
            s.connect(str(path))
        t0 = time.monotonic()
        assert AgentClient(str(path), timeout_s=2.0).signal("sig") >= 1
        assert time.monotonic() - t0 < 2.0
        for s in silent:
            s.close()
        with socket.socket(socket.AF_UNIX) as s:       # garbage gets an answer, not a crash
            s.connect(str(path))
            s.sendall(b"{not json\n")
            assert json.loads(s.makefile().readline()) == {
                "ok": False, "error": "the request is not a JSON line"}
        assert server.served == 1 and server.refused == 1


def test_socket_files_stale_live_and_foreign(sock_dir):
    path = sock_dir / "agent.sock"
    stale = socket.socket(socket.AF_UNIX)
    stale.bind(str(path))             # bound, never listening: what a killed agent leaves
    stale.close()
    with (SignalSocket(path),
          pytest.raises(SocketInUse, match="another agent serves .*agent.sock")):
        SignalSocket(path)
    assert not path.exists()
    path.write_text("not a socket")
    with pytest.raises(SpecError, match="^--signal-socket: .* exists and is not a socket"):
        SignalSocket(path)
    assert path.read_text() == "not a socket"
    with pytest.raises(SpecError, match="^--signal-socket: .* longer than a Unix socket's"):
        SignalSocket(sock_dir / ("x" * 120))
    with pytest.raises(MltcpError, match="^cannot serve the signal socket /proc/agent.sock"):
        SignalSocket("/proc/agent.sock")      # a place where no socket can be made
