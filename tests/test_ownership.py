"""Owners of resources and the processes of a run, for real and without root: flocks held
by other processes (alive, then SIGKILLed), testbed run records and what `testbed clean`
keeps, process groups, and job drivers that die with their launcher."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from mltcp.core import procstat
from mltcp.host import ownership
from mltcp.host.ownership import Held, OwnerLock, holder_of
from mltcp.lab.scenario.emulation import owners, traffic
from mltcp.lab.scenario.emulation.procgroup import ProcessGroup
from mltcp.lab.scenario.emulation.traffic import Endpoint, TrafficSpec

REPO = Path(__file__).resolve().parents[1]


def _gone(pid: int, timeout_s: float = 5.0) -> bool:
    """Whether ``pid`` ends (or is a zombie) within ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not procstat.alive(pid):
            return True
        time.sleep(0.02)
    return False


class Forked:
    """A forked child that runs ``body`` and then waits until it is killed."""

    def __init__(self, body) -> None:  # type: ignore[no-untyped-def]
        r, w = os.pipe()
        self.pid = os.fork()
        if self.pid == 0:                        # the child: no pytest machinery past here
            try:
                os.close(r)
                keep = body()                    # noqa: F841 (held until the child dies)
                os.write(w, b"ready")
                while True:
                    time.sleep(60)
            finally:
                os._exit(0)
        os.close(w)
        assert os.read(r, 5) == b"ready"
        os.close(r)

    def kill(self) -> None:
        os.kill(self.pid, signal.SIGKILL)
        os.waitpid(self.pid, 0)


@pytest.fixture
def forked() -> Iterator[list[Forked]]:
    children: list[Forked] = []
    yield children
    for child in children:
        with contextlib.suppress(ProcessLookupError, ChildProcessError):
            child.kill()


# --------------------------------------------------------------------------- owner locks


def test_a_held_lock_names_its_live_holder_until_it_dies(tmp_path: Path,
                                                         forked: list[Forked]) -> None:
    path = tmp_path / "port.lock"
    assert holder_of(path) is None                     # no file: nobody
    child = Forked(lambda: OwnerLock.acquire(path))
    forked.append(child)
    holder = holder_of(path)
    assert holder is not None and holder.pid == child.pid
    assert holder.start_ticks == ownership.process_start_ticks(child.pid)
    with pytest.raises(Held) as info:
        OwnerLock.acquire(path, wait_s=0.1)
    assert info.value.holder is not None and info.value.holder.pid == child.pid
    assert f"pid {child.pid}" in str(info.value)
    child.kill()                                       # SIGKILL: the kernel drops the lock
    assert holder_of(path) is None                     # the file says pid N, the lock says gone
    with OwnerLock.acquire(path) as mine:
        assert holder_of(path) is not None and mine.holder.pid == os.getpid()
    assert holder_of(path) is None and path.exists()   # released, never unlinked by default


def test_a_probe_does_not_make_the_owner_fail(tmp_path: Path) -> None:
    """`testbed clean` and `dcqcn restore` probe by taking the lock for an instant; an
    owner starting right then waits that instant out instead of being refused."""
    path = tmp_path / "x.lock"
    probe = os.open(path, os.O_RDWR | os.O_CREAT)
    fcntl.flock(probe, fcntl.LOCK_EX)
    closer = threading.Timer(0.1, os.close, (probe,))   # the probe ends meanwhile
    try:
        with pytest.raises(Held):
            OwnerLock.acquire(path, wait_s=0.05)
    finally:
        closer.start()
    OwnerLock.acquire(path, wait_s=2).release(unlink=True)
    closer.join()
    assert not path.exists()


# --------------------------------------------------------------------------- run records


def test_clean_keeps_what_live_runs_claimed_and_removes_the_rest(tmp_path: Path,
                                                                forked: list[Forked]) -> None:
    def live_run():  # type: ignore[no-untyped-def]
        owner = owners.RunOwner(tmp_path)
        owner.claim(namespaces=["mltcp-1-aa-h1", "mltcp-1-aa-swL"], jobs=["tb-a-w0"])
        return owner

    alive = Forked(live_run)
    dead = Forked(lambda: owners.RunOwner(tmp_path).claim(namespaces=["mltcp-2-bb-h1"]))
    forked += [alive, dead]
    dead.kill()
    runs = {r.holder.pid if r.holder else None: r for r in owners.records(tmp_path)}
    assert set(runs) == {alive.pid, None}
    assert runs[alive.pid].namespaces == ("mltcp-1-aa-h1", "mltcp-1-aa-swL")
    assert runs[None].namespaces == ("mltcp-2-bb-h1",)

    found = ["mltcp-1-aa-h1", "mltcp-1-aa-swL", "mltcp-2-bb-h1", "mltcp-old-h1"]
    spaces = owners.sort_out(found, owners.records(tmp_path), "namespaces")
    assert spaces.remove == ["mltcp-2-bb-h1", "mltcp-old-h1"]
    assert spaces.kept == {runs[alive.pid].id: ["mltcp-1-aa-h1", "mltcp-1-aa-swL"]}
    jobs = owners.sort_out(["tb-a-w0", "tb-a-w1"], owners.records(tmp_path), "jobs")
    assert jobs.remove == ["tb-a-w1"] and list(jobs.kept.values()) == [["tb-a-w0"]]

    assert not owners.forget(runs[alive.pid], tmp_path)      # alive: its record stays
    assert owners.forget(runs[None], tmp_path)
    assert [r.holder.pid for r in owners.records(tmp_path) if r.holder] == [alive.pid]
    alive.kill()
    assert owners.sort_out(found, owners.records(tmp_path), "namespaces").kept == {}


def test_a_run_owner_leaves_nothing_when_closed(tmp_path: Path) -> None:
    with owners.RunOwner(tmp_path) as owner:
        owner.claim(namespaces=["mltcp-x-h1"])
        owner.claim(namespaces=["mltcp-x-h1", "mltcp-x-h2"], jobs=["tb-j-w0"])
        doc = json.loads(owner.record_path.read_text())
        assert doc["namespaces"] == ["mltcp-x-h1", "mltcp-x-h2"] and doc["jobs"] == ["tb-j-w0"]
        [record] = owners.records(tmp_path)
        assert record.alive and record.holder and record.holder.pid == os.getpid()
    assert list(tmp_path.iterdir()) == []


# --------------------------------------------------------------------------- process groups


def test_a_group_stops_its_members_and_their_children(tmp_path: Path) -> None:
    group = ProcessGroup()
    first = group.popen(["sleep", "60"])
    shell = group.popen(["sh", "-c", "sleep 60 & echo $!; wait"], stdout=subprocess.PIPE,
                        text=True)
    assert shell.stdout is not None
    grandchild = int(shell.stdout.readline())
    pgid = os.getpgid(first.pid)
    assert pgid == first.pid != os.getpgid(0)          # a group of its own, not ours
    assert os.getpgid(shell.pid) == os.getpgid(grandchild) == pgid
    group.stop(grace_s=1)
    assert first.returncode is not None and shell.returncode is not None
    assert _gone(grandchild)                            # not our child: the group got it
    later = group.popen(["sleep", "60"])                # the old group is empty: a new one
    assert os.getpgid(later.pid) == later.pid
    group.stop()
    assert later.returncode == -signal.SIGTERM


# --------------------------------------------------------------------------- job drivers


def _loopback_job(out: Path) -> TrafficSpec:
    import socket

    ports = []
    for _ in range(2):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            ports.append(s.getsockname()[1])
    return TrafficSpec(name="j", workers=[Endpoint(None, "127.0.0.1", p) for p in ports],
                       cc="reno", compute_ms=50, bytes_per_worker=100_000, iterations=10_000,
                       out=str(out))


def test_job_drivers_die_with_a_sigkilled_launcher(tmp_path: Path) -> None:
    """No teardown runs on SIGKILL: the drivers' PR_SET_PDEATHSIG must end them."""
    spec = tmp_path / "spec.json"
    spec.write_text(_loopback_job(tmp_path / "out.json").to_json())
    code = ("import sys, time\n"
            "from mltcp.lab.scenario.emulation import traffic\n"
            f"spec = traffic.TrafficSpec.from_json(open({str(spec)!r}).read())\n"
            "launch = traffic.Launch([spec])\n"
            "print(launch.procs[0].pid, flush=True)\n"
            "time.sleep(60)\n")
    launcher = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True,
                                env={**os.environ, "PYTHONPATH": str(REPO)})
    assert launcher.stdout is not None
    driver = int(launcher.stdout.readline())
    assert os.getpgid(driver) != os.getpgid(launcher.pid)      # its own group
    time.sleep(0.5)                                            # running: pdeathsig is set
    assert not _gone(driver, 0.1)
    launcher.kill()
    launcher.wait()
    assert _gone(driver), "the job driver outlived its SIGKILLed launcher"


def test_a_driver_whose_launcher_died_before_it_started_exits(tmp_path: Path) -> None:
    """The window before prctl(PR_SET_PDEATHSIG): the driver compares its parent with the
    launcher's pid it was given and leaves when they differ."""
    spec = tmp_path / "spec.json"
    spec.write_text(_loopback_job(tmp_path / "out.json").to_json())
    proc = subprocess.run([sys.executable, "-m", traffic.MODULE, str(spec)], timeout=30,
                          env={**os.environ, "PYTHONPATH": str(REPO),
                               traffic.PARENT_ENV: str(os.getpid() + 1_000_000)})
    assert proc.returncode == 1 and not (tmp_path / "out.json").exists()


def test_launch_stop_ends_its_drivers(tmp_path: Path) -> None:
    with traffic.Launch([_loopback_job(tmp_path / "out.json")]) as launch:
        [driver] = launch.procs
        assert os.getpgid(driver.pid) == launch.group.pgid != os.getpgid(0)
        time.sleep(0.3)
        assert launch.running()
    assert driver.returncode is not None and not launch.running()
