"""The training-loop hook (mltcp.hook) and the bundled DDP workload (mltcp.workloads.ddp).

Plain loops and the signal client run everywhere; the DDP tests run real PyTorch
(gloo over loopback, two ranks under torchrun) where the ``torch`` extra is installed.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from mltcp import hook


def test_a_plain_loop_writes_one_ordered_record_per_iteration(tmp_path) -> None:
    h = hook.IterationHook(out=tmp_path, job="resnet", rank=1, world_size=2)
    for i in range(5):
        with h.iteration():
            time.sleep(0.002)
            h.comm_begin()
            h.add_bytes(1000 + i)
            time.sleep(0.002)
            h.comm_end()
    h.close()
    records = hook.read_records(tmp_path / "hook-rank1.jsonl")
    assert [r.iteration for r in records] == [0, 1, 2, 3, 4]
    assert [r.bytes for r in records] == [1000, 1001, 1002, 1003, 1004]
    for r in records:
        assert r.start < r.comm_start < r.comm_end <= r.end
        assert r.start_wall < r.comm_start_wall < r.comm_end_wall <= r.end_wall
        assert (r.job, r.rank, r.world_size, r.buckets, r.pid) == ("resnet", 1, 2, 0, os.getpid())
        assert r.signal_seq is None and r.signal_error is None
    assert all(a.end <= b.start for a, b in zip(records, records[1:], strict=False))
    assert records == h.records


def test_an_iteration_without_communication_has_an_empty_phase_at_its_end(tmp_path) -> None:
    h = hook.IterationHook(out=tmp_path / "r.jsonl")
    with h.iteration():
        pass
    [r] = hook.read_records(tmp_path / "r.jsonl")
    assert r.comm_start == r.comm_end == r.end and r.bytes == 0


def test_from_env_and_its_bad_values(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("MLTCP_HOOK_OUT", str(tmp_path))
    monkeypatch.setenv("MLTCP_JOB", "bert")
    monkeypatch.setenv("RANK", "3")
    monkeypatch.setenv("WORLD_SIZE", "4")
    monkeypatch.delenv("MLTCP_HOOK_SIGNAL", raising=False)
    h = hook.from_env()
    assert (h.job, h.rank, h.world_size, h.signal) == ("bert", 3, 4, None)
    assert h.path == tmp_path / "hook-rank3.jsonl"
    h.close()
    monkeypatch.setenv("MLTCP_HOOK_SIGNAL", "maybe")
    with pytest.raises(hook.HookError, match=r"^MLTCP_HOOK_SIGNAL: 'maybe' is not a flag"):
        hook.from_env()
    monkeypatch.setenv("MLTCP_HOOK_SIGNAL", "1")
    monkeypatch.setenv("RANK", "x")
    with pytest.raises(hook.HookError, match=r"^RANK: 'x' is not an integer"):
        hook.from_env()


@pytest.mark.parametrize("make,match", [
    (lambda p: hook.IterationHook(signal=True), r"^job: signal needs the datapath job's name"),
    (lambda p: hook.IterationHook(rank=2, world_size=2), r"^world_size: 2 must be > rank 2"),
    (lambda p: hook.IterationHook(out=p / "f" / "x.jsonl"), r"^out: cannot write"),
])
def test_bad_construction_is_one_line(tmp_path, make, match) -> None:
    (tmp_path / "f").write_text("a file, not a directory")
    with pytest.raises(hook.HookError, match=match):
        make(tmp_path)


def test_misuse_is_one_line() -> None:
    h = hook.IterationHook()
    with pytest.raises(hook.HookError, match=r"^end: no iteration began"):
        h.end()
    h.begin()
    with pytest.raises(hook.HookError, match=r"^begin: the previous iteration has not ended"):
        h.begin()
    with pytest.raises(hook.HookError, match=r"^bytes: -1 is not a byte count"):
        h.add_bytes(-1)


def test_records_of_a_crashed_worker_are_read_up_to_the_cut(tmp_path) -> None:
    h = hook.IterationHook(out=tmp_path / "r.jsonl")
    for _ in range(3):
        with h.iteration():
            pass
    h.close()
    path = tmp_path / "r.jsonl"
    path.write_text(path.read_text() + '{"schema": "mltcp.hook/1", "job": "j", "ra')
    assert len(hook.read_records(path)) == 3
    lines = path.read_text().splitlines()
    path.write_text("\n".join([lines[0], "garbage", lines[1]]) + "\n")
    with pytest.raises(hook.HookError, match=r"r\.jsonl:2: not a JSON line"):
        hook.read_records(path)
    bad = dict(json.loads(lines[0]), schema="mltcp.hook/0")
    path.write_text(json.dumps(bad) + "\n")
    with pytest.raises(hook.HookError, match=r"^schema: 'mltcp.hook/0' is not mltcp.hook/1"):
        hook.read_records(path)


class _Agent(threading.Thread):
    """A real Unix-socket server speaking the agent's signal protocol."""

    def __init__(self, path: Path, refuse: str | None = None) -> None:
        super().__init__(daemon=True)
        self.srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.srv.bind(str(path))
        self.srv.listen(4)
        self.refuse = refuse
        self.seen: list[dict] = []
        self.seq = 0

    def run(self) -> None:
        while True:
            try:
                conn, _ = self.srv.accept()
            except OSError:
                return
            with conn, conn.makefile("rwb") as f:
                for line in f:
                    req = json.loads(line)
                    self.seen.append(req)
                    if self.refuse:
                        reply = {"ok": False, "error": self.refuse}
                    else:
                        self.seq += 1
                        reply = {"ok": True, "seq": self.seq}
                    f.write(json.dumps(reply).encode() + b"\n")
                    f.flush()


def test_signals_go_to_the_agent_once_per_iteration(tmp_path) -> None:
    agent = _Agent(tmp_path / "agent.sock")
    agent.start()
    h = hook.IterationHook(job="gpt", signal=True, agent_socket=str(tmp_path / "agent.sock"))
    for _ in range(4):
        with h.iteration():
            pass
    assert [r.signal_seq for r in h.records] == [1, 2, 3, 4]
    assert agent.seen == [{"op": "signal", "job": "gpt"}] * 4
    assert (h.signals_sent, h.signal_failures) == (4, 0)
    h.close()
    agent.srv.close()


def test_a_refused_or_missing_agent_never_stops_training(tmp_path, capsys) -> None:
    agent = _Agent(tmp_path / "agent.sock", refuse="pid 7 is not in job gpt's cgroup")
    agent.start()
    h = hook.IterationHook(job="gpt", signal=True, agent_socket=str(tmp_path / "agent.sock"))
    with h.iteration():
        pass
    assert h.records[-1].signal_error == "pid 7 is not in job gpt's cgroup"
    h.close()
    agent.srv.close()
    gone = hook.IterationHook(job="gpt", signal=True, agent_socket=str(tmp_path / "none.sock"))
    for _ in range(3):
        with gone.iteration():
            pass
    assert gone.signal_failures == 3 and all(r.signal_error for r in gone.records)
    err = capsys.readouterr().err
    assert err.count("mltcp.hook: the end-of-iteration signal") == 2   # once per hook


# --------------------------------------------------------------------------- PyTorch

TINY = ["--model", "transformer", "--d-model", "32", "--layers", "1", "--heads", "2",
        "--vocab", "500", "--seq", "16", "--batch", "2"]


def _torchrun(tmp_path: Path, args: list[str], port: int, env: dict | None = None):
    return subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--nnodes", "1", "--nproc_per_node",
         "2", "--master_addr", "127.0.0.1", f"--master_port={port}", "-m",
         "mltcp.workloads.ddp", *args],
        capture_output=True, text=True, timeout=240,
        env={**os.environ, "MLTCP_HOOK_OUT": str(tmp_path), "OMP_NUM_THREADS": "1",
             **(env or {})})


def test_the_workload_describes_its_models() -> None:
    pytest.importorskip("torchvision", reason="the DDP workload needs the mltcp[torch] extra")
    from mltcp.workloads import ddp

    r18 = ddp.describe(ddp.ModelSpec("resnet18"))
    assert r18["parameters"] == 11_181_642 and r18["gradient_bytes"] == 4 * 11_181_642
    tiny = ddp.describe(ddp.ModelSpec("transformer", d_model=32, layers=1, heads=2, seq=16,
                                      vocab=500))
    assert 0 < tiny["parameters"] < 100_000


def test_ddp_training_records_every_iteration_with_its_buckets(tmp_path) -> None:
    """Two real ranks (gloo over loopback): one record per iteration and rank, the
    gradient bytes the model has, the communication inside the iteration."""
    pytest.importorskip("torchvision", reason="the DDP workload needs the mltcp[torch] extra")
    from mltcp.workloads import ddp

    spec = ddp.spec_of(ddp.parser().parse_args(TINY), ddp.parser())
    grads = ddp.describe(spec)["gradient_bytes"]
    proc = _torchrun(tmp_path, [*TINY, "--iterations", "6", "--gpu-time-ms", "20"], 29631,
                     {"MLTCP_JOB": "tiny"})
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "compute pad: 20 ms of sleep per iteration" in proc.stdout
    assert "gloo over TCP" in proc.stdout and "done: mean iteration" in proc.stdout
    for rank in (0, 1):
        records = hook.read_records(tmp_path / f"hook-rank{rank}.jsonl")
        assert [r.iteration for r in records] == list(range(6))
        for r in records:
            assert (r.job, r.rank, r.world_size) == ("tiny", rank, 2)
            assert r.buckets >= 1 and r.bytes == grads
            assert r.start + 0.02 <= r.comm_start <= r.comm_end <= r.end


def test_the_workload_refuses_bad_flags_in_one_line(tmp_path) -> None:
    pytest.importorskip("torchvision", reason="the DDP workload needs the mltcp[torch] extra")
    run = [sys.executable, "-m", "mltcp.workloads.ddp"]
    bad = subprocess.run([*run, "--model", "transformer", "--d-model", "30", "--heads", "4"],
                         capture_output=True, text=True, env={**os.environ})
    assert bad.returncode == 2 and "--heads 4 does not divide --d-model 30" in bad.stderr
    bad = subprocess.run([*run, "--model", "alexnet"], capture_output=True, text=True)
    assert bad.returncode == 2 and "invalid choice: 'alexnet'" in bad.stderr
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE")}
    alone = subprocess.run([*run, *TINY], capture_output=True, text=True, env=env)
    assert alone.returncode == 2 and "run it under torchrun" in alone.stderr
