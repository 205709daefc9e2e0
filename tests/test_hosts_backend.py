"""The hosts backend, for real: PyTorch DDP over SSH on namespace hosts.

A dumbbell fabric (1 Gbit/s bottleneck marking ECN) whose four hosts each run Debian's
sshd (:mod:`mltcp.lab.scenario.emulation.sshd`); the backend reaches them with the OpenSSH
client exactly as it reaches remote machines, loads the modules, puts each job's
workers in a cgroup attached as an MLTCP job, runs torchrun with the bundled DDP
workload (gloo, through the bottleneck) and builds the common trace from the
training-loop hook's records.  One short run per scheme here; longer runs in
bench/bench_hosts.py.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from mltcp.lab.scenario.emulation import fabric, sshd
from mltcp.lab.scenario.spec import load_scenario

pytestmark = [
    pytest.mark.kernel,
    pytest.mark.skipif(sshd.missing() is not None, reason=str(sshd.missing())),
]
torch = pytest.importorskip("torch", reason="the hosts backend's workload needs mltcp[torch]")

SCENARIO = """
name = "ddp-pair"
description = "Two small DDP jobs (a tiny transformer) through a 1 Gbit/s ECN bottleneck."
seeds = [0]

[topology]
kind = "dumbbell"
bottleneck_mbit = 1000
host_link_mbit = 10000
queue_packets = 400
ecn_threshold_bytes = 100000
hosts = 4

[[jobs]]
name = "a"
compute_ms = 60
bytes_per_iteration = "3MB"
workers = 2
iterations = 6
workload = {model = "transformer", preset = "tiny", batch = 2, gpu_time_ms = 60, signal = true}

[[jobs]]
name = "b"
compute_ms = 60
bytes_per_iteration = "3MB"
workers = 2
iterations = 6
workload = {model = "transformer", preset = "tiny", batch = 2, gpu_time_ms = 60}

[[schemes]]
name = "cubic"
cc = "cubic"
mltcp = false

[[schemes]]
name = "mltcp-cubic"
cc = "cubic"
mltcp = true
slope = 4.0

[[schemes]]
name = "mltcp-reno"
cc = "reno"
mltcp = true
slope = 4.0
"""


# What was left on this machine before these tests (a run killed by SIGKILL elsewhere):
# the tests check that *their* runs leave nothing, not that no process ever did.
PREEXISTING: set[Path] = set()


def _leftovers() -> set[Path]:
    """What a hosts run creates on a host and must remove: its cgroups, its files."""
    from mltcp.host import datapath

    return set(datapath.cgroup2_root().glob("mltcp-*")) | set(Path("/tmp").glob("mltcp-hosts*"))


@pytest.fixture(scope="module")
def hosts(bpf_host, tmp_path_factory):
    """The scenario's fabric with sshd on every host, and the inventory of them."""
    PREEXISTING.update(_leftovers())
    work = tmp_path_factory.mktemp("hosts")
    path = work / "ddp-pair.toml"
    path.write_text(SCENARIO)
    sc = load_scenario(str(path))
    with (fabric.for_topology(sc.topology) as net,
          sshd.SshdLab(net, work / "sshd", tuple(sc.topology.host_names()),
                       python=sys.executable) as lab):
        inventory = work / "inventory.toml"
        inventory.write_text(lab.inventory_toml())
        yield path, inventory, work


# Standard and MLTCP congestion control; MLTCP-Reno takes the same path here as
# MLTCP-CUBIC (another module name: tests/test_kernel_behaviour.py runs both).
@pytest.mark.parametrize("scheme", ["cubic", "mltcp-cubic"])
def test_one_short_run_per_scheme(hosts, scheme) -> None:
    from mltcp.host import datapath, jobs
    from mltcp.lab.scenario.runner import run_scenario

    scenario, inventory, work = hosts
    out = work / f"out-{scheme}"
    # These 8 processes take ~11 s to start on an idle 2-core machine, 16-17 s beside
    # the pure-Python tests, and CI's first (cold) run took over 30 s.  The slack is only
    # the latest start: the jobs start once both are ready (the go files), so a generous
    # one costs nothing, and a go file that never came would show as told_s == slack.
    slack = 120.0
    run_scenario(str(scenario), out, schemes=[scheme], seeds=[0], backend="hosts",
                 backend_options={"inventory": str(inventory), "keep_logs": str(out / "logs"),
                                  "start_slack_s": slack})
    [trace_file] = (out / "traces").glob("*.json")
    trace = json.loads(trace_file.read_text())
    assert trace["backend"] == "hosts" and trace["scheme"] == scheme
    assert [j["name"] for j in trace["jobs"]] == ["a", "b"]
    for job in trace["jobs"]:
        its = job["iterations"]
        assert [it["index"] for it in its] == list(range(6))
        assert all(it["start"] <= it["comm_start"] <= it["comm_end"] <= it["end"] for it in its)
        assert all(it["bytes"] > 0 for it in its)
    counted = trace["provenance"]["datapath"]
    print(json.dumps(counted))
    if scheme.startswith("mltcp"):
        # The run's agent kept the configs fresh and took job a's signals (one boundary
        # per iteration, though both of its ranks signal on this one kernel).
        assert counted["a"]["stale_fallbacks"] == counted["b"]["stale_fallbacks"] == 0
        assert counted["a"]["signals"] >= 6 and counted["b"]["signals"] == 0
        assert counted["a"]["gaps"] == 0          # a signalling job: no gap boundaries
        assert counted["b"]["gaps"] >= 5
    else:
        assert counted == {}
    # The synchronized start as it went: each job's skew and start-up; a run that
    # missed it was run again (attempt 2) and is marked, never passed off as synchronized.
    began = trace["provenance"]["start"]
    print(json.dumps(began))
    assert set(began["jobs"]) == {"a", "b"} and began["attempt"] in (1, 2)
    assert all(j["startup_s"] is not None and j["startup_s"] > 0 for j in began["jobs"].values())
    assert began["synchronized"] == (began["max_skew_s"] <= began["tolerance_s"])
    for j in began["jobs"].values():    # started by the go file, a moment after both were ready
        assert j["startup_s"] < j["told_s"] < began["slack_s"]
    hosts_seen = trace["provenance"]["hosts"]
    assert [h["name"] for h in hosts_seen] == ["h1", "h3", "h2", "h4"] or \
        sorted(h["name"] for h in hosts_seen) == ["h1", "h2", "h3", "h4"]
    assert all(torch.__version__.startswith(h["torch"]) for h in hosts_seen)
    # Everything the run created is gone: modules, jobs, cgroups, remote files.
    assert not [m for m in datapath.loaded_modules()]
    assert jobs.Registry().read() == {}
    assert not _leftovers() - PREEXISTING
    final = [d for d in (out / "logs").iterdir() if d.name.endswith("-attempt2")] \
        if began["attempt"] == 2 else [d for d in (out / "logs").iterdir()
                                       if not d.name.endswith("-attempt2")]
    logs = [p for d in final for p in d.rglob("*.log") if not p.name.startswith("agent-")]
    assert len(logs) == 4
    agents = [p for d in final for p in d.rglob("agent-*.log")]
    assert len(agents) == (1 if scheme.startswith("mltcp") else 0)
    # torchrun's agents may log a failed exit barrier when node 0 ends first: harmless;
    # a worker's own traceback is not.
    assert not [p for p in logs if re.search(r"\[rank\d+\]: Traceback", p.read_text())]
    assert all("done: 6 iterations" in p.read_text() for p in logs if "-0-" in p.name)


def test_a_host_that_cannot_be_reached_is_one_line(hosts, tmp_path) -> None:
    from mltcp.core.errors import MltcpError
    from mltcp.lab.scenario.runner import run_scenario

    scenario, inventory, _work = hosts
    broken = tmp_path / "inventory.toml"
    broken.write_text(inventory.read_text().replace("port = 22", "port = 2222"))
    with pytest.raises(MltcpError, match=r"^host h\d \(root@10\.254\.\d\.2 port 2222\): SSH "
                                         r"failed: .*Connection refused"):
        run_scenario(str(scenario), tmp_path / "out", schemes=["cubic"], seeds=[0],
                     backend="hosts", backend_options={"inventory": str(broken)})
    assert os.listdir(tmp_path / "out" / "traces") == []


def _job_pids(job: str) -> list[int]:
    """The worker processes in a running hosts run's cgroup of ``job`` (none yet: [])."""
    from mltcp.host import datapath

    pids = []
    for procs in datapath.cgroup2_root().glob(f"mltcp-*/{job}/cgroup.procs"):
        pids += [int(p) for p in procs.read_text().split()]
    return pids


def _wait_for_training(timeout_s: float = 120) -> None:
    deadline = time.monotonic() + timeout_s
    while len(_job_pids("a")) < 4:     # two hosts, each a shell-exec'd torchrun and a rank
        assert time.monotonic() < deadline, "the workers never started"
        time.sleep(0.2)
    time.sleep(3)


def _assert_nothing_left() -> None:
    from mltcp.host import datapath, jobs

    assert datapath.loaded_modules() == []
    assert jobs.Registry().read() == {}
    assert not _leftovers() - PREEXISTING
    assert _workers_in_host_namespaces() == [], "a worker survived"


def _workers_in_host_namespaces() -> list[int]:
    """Every DDP workload process in a network namespace other than this process's: the
    hosts run's workers run in the namespace hosts; the pure-Python tests that run beside
    these (scripts/suite.py) start the same workload in the root namespace."""
    own = os.stat("/proc/self/ns/net").st_ino
    found = subprocess.run(["pgrep", "-f", "mltcp.workloads.ddp"], capture_output=True,
                           text=True).stdout.split()
    pids = []
    for pid in map(int, found):
        with contextlib.suppress(OSError):          # gone meanwhile: not a survivor
            if os.stat(f"/proc/{pid}/ns/net").st_ino != own:
                pids.append(pid)
    return pids


def _long_run(hosts, tmp_path: Path) -> subprocess.Popen[str]:  # type: ignore[no-untyped-def]
    """`mltcp run` of the scenario with 500 iterations (it will not end by itself)."""
    scenario, inventory, _work = hosts
    long = tmp_path / "long.toml"
    long.write_text(scenario.read_text().replace("iterations = 6", "iterations = 500"))
    return subprocess.Popen([sys.executable, "-m", "mltcp.cli", "run", str(long),
                             "--backend", "hosts", "--inventory", str(inventory),
                             "--scheme", "mltcp-cubic", "--out", str(tmp_path / "out")],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_sigterm_mid_training_undoes_everything(hosts, tmp_path) -> None:
    proc = _long_run(hosts, tmp_path)
    try:
        _wait_for_training()
        proc.send_signal(signal.SIGTERM)
        _out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 143, err
    _assert_nothing_left()


def test_a_failed_worker_stops_the_run_naming_it_and_undoes_everything(hosts, tmp_path) -> None:
    proc = _long_run(hosts, tmp_path)
    try:
        _wait_for_training()
        ranks = [p for p in _job_pids("a")
                 if b"mltcp.workloads.ddp" in Path(f"/proc/{p}/cmdline").read_bytes()
                 and b"torch.distributed.run" not in Path(f"/proc/{p}/cmdline").read_bytes()]
        os.kill(ranks[0], signal.SIGKILL)          # one rank of job a dies
        _out, err = proc.communicate(timeout=180)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 1, err
    last = err.strip().splitlines()[-1]
    assert re.match(r"mltcp: error: host h\d: job a worker \d exited \d+: ", last), last
    _assert_nothing_left()
