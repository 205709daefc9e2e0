"""The host datapath under concurrency: CLI processes racing each other and the agent.

Every mutation runs under one host lock (mltcp.host.state); these tests race real CLI
processes against each other, and `job signal` against the agent's refresh, on the real
kernel, and check the outcome: no residue, no job id handed out twice, no lost signal.
"""

from __future__ import annotations

import ctypes
import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from mltcp.host import datapath, jobs, maps, rules
from mltcp.host.state import lock_path

pytestmark = pytest.mark.kernel

CYCLES_PER_WORKER = int(os.environ.get("MLTCP_RACE_CYCLES", "10"))


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "mltcp.cli", *args], capture_output=True,
                          text=True, timeout=120)


def test_the_lock_file_outlives_every_job(clean_datapath):
    """Unlinking a lock file lets two writers lock two different inodes."""
    datapath.load(["reno"])
    jobs.attach(jobs.JobSpec(name="a", cc="reno", budget=10**6, rules=(rules.Rule(port=7001),)))
    inode = lock_path(jobs.Registry().dir).stat().st_ino
    jobs.detach("a")
    jobs.Registry().clear()
    assert lock_path(jobs.Registry().dir).stat().st_ino == inode


def test_unload_refuses_a_module_that_jobs_use(clean_datapath):
    assert _cli("load", "reno", "cubic").returncode == 0
    assert _cli("job", "attach", "a", "--cc", "reno", "--budget", "1MB",
                "--port", "7002").returncode == 0
    proc = _cli("unload", "reno")
    assert proc.returncode == 2
    assert proc.stderr.strip() == (
        "mltcp: error: modules: mltcp_reno in use by job(s) a; detach them first "
        "(`mltcp job detach NAME`), or `mltcp unload --all`")
    assert "reno" in datapath.loaded_modules()
    assert _cli("unload", "cubic").returncode == 0      # a module no job uses goes
    assert _cli("unload", "--all").returncode == 0
    assert datapath.settle() == []


_WORKER = textwrap.dedent("""
    import json, re, subprocess, sys
    worker, cycles = sys.argv[1], int(sys.argv[2])

    def cli(*args):
        return subprocess.run([sys.executable, "-m", "mltcp.cli", *args],
                              capture_output=True, text=True, timeout=120)

    def must(proc):
        if proc.returncode != 0:
            sys.exit(f"{proc.args[3:]} failed: {proc.stderr.strip()}")
        return proc

    done = refused_attach = refused_unload = 0
    for i in range(cycles):
        must(cli("load", "cubic"))
        name = f"{worker}-{i}"
        proc = cli("job", "attach", name, "--cc", "cubic", "--budget", "1MB",
                   "--port", str(20000 + 1000 * int(worker[1:]) + i), "--stale-s", "0")
        if proc.returncode != 0:
            # The other worker unloaded cubic between our load and our attach.
            if "mltcp_cubic is not loaded" not in proc.stderr:
                sys.exit(f"attach failed: {proc.stderr.strip()}")
            refused_attach += 1
            continue
        job_id = int(re.search(r"[(]id (\\d+)[)]", proc.stdout).group(1))
        listed = json.loads(must(cli("job", "list", "--json")).stdout)
        ids = [j["id"] for j in listed.values()]
        if listed.get(name, {}).get("id") != job_id or len(ids) != len(set(ids)):
            sys.exit(f"registry after attaching {name} (id {job_id}): {listed}")
        must(cli("job", "signal", name))
        must(cli("job", "detach", name))
        proc = cli("unload", "cubic")
        if proc.returncode != 0:
            if "in use by job" not in proc.stderr:
                sys.exit(f"unload failed: {proc.stderr.strip()}")
            refused_unload += 1
        done += 1
    print(json.dumps({"done": done, "refused_attach": refused_attach,
                      "refused_unload": refused_unload}))
""")


def test_two_cli_processes_racing_leave_no_residue_and_no_duplicate_ids(clean_datapath):
    """Two processes loop load / attach / list / signal / detach / unload through the CLI
    at once.  The only failures allowed are the ones the other process legitimately
    causes (it unloaded the module we were about to attach to; a job of the other's uses
    the module we unload); every attach gets an id no live job has, every detach finds
    its job, and nothing is left in the kernel at the end."""
    workers = [subprocess.Popen([sys.executable, "-c", _WORKER, w, str(CYCLES_PER_WORKER)],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
               for w in ("w1", "w2")]
    results = []
    for proc in workers:
        out, err = proc.communicate(timeout=600)
        assert proc.returncode == 0, err
        results.append(json.loads(out))
    print(results)
    assert all(r["done"] > 0 for r in results)
    assert jobs.Registry().read() == {}
    assert _cli("unload", "--all").returncode == 0
    assert datapath.settle() == []


def _agent(interval_s: float) -> subprocess.Popen[str]:
    proc = subprocess.Popen([sys.executable, "-m", "mltcp.cli", "agent", "--interval",
                             str(interval_s)], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    time.sleep(0.5)
    assert proc.poll() is None, proc.stdout.read() if proc.stdout else ""
    return proc


def _cfg(job_id: int) -> maps.JobCfg:
    with maps.PinnedMap("mltcp_job_cfg") as cfg:
        return cfg.get(ctypes.c_uint32(job_id), maps.JobCfg)


def test_no_signal_is_lost_to_the_agents_refresh(clean_datapath):
    datapath.load(["reno"])
    rec = jobs.attach(jobs.JobSpec(name="sig", cc="reno", budget=10**6,
                                   rules=(rules.Rule(port=7003),)))
    agent = _agent(0.05)      # refreshing (read config, rewrite it) 20 times a second
    try:
        for _ in range(300):
            jobs.signal("sig")
    finally:
        agent.send_signal(signal.SIGTERM)
        agent.wait(timeout=10)
    assert _cfg(rec.id).signal_seq == 300
    jobs.detach_all()


def test_agent_killed_and_restarted_keeps_the_jobs_and_the_unit_can_load_again(
        clean_datapath):
    """After SIGKILL the unit runs ExecStartPre (`mltcp load all`) and the agent again:
    both succeed, and the job's config is refreshed again."""
    assert _cli("load", "all").returncode == 0
    rec = jobs.attach(jobs.JobSpec(name="a", cc="cubic", budget=10**6, stale_s=2,
                                   rules=(rules.Rule(port=7004),)))
    agent = _agent(0.1)
    agent.send_signal(signal.SIGKILL)
    agent.wait(timeout=10)
    killed_at = _cfg(rec.id).refreshed_ns
    proc = _cli("load", "all")
    assert proc.returncode == 0, proc.stderr
    assert re.findall(r"mltcp_\w+ was loaded already", proc.stdout) == [
        "mltcp_reno was loaded already", "mltcp_cubic was loaded already",
        "mltcp_dctcp was loaded already"]
    agent = _agent(0.1)
    try:
        deadline = time.monotonic() + 5
        while _cfg(rec.id).refreshed_ns == killed_at and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _cfg(rec.id).refreshed_ns > killed_at
        assert set(jobs.Registry().read()) == {"a"}
    finally:
        agent.send_signal(signal.SIGTERM)
        agent.wait(timeout=10)
    jobs.detach_all()


def test_agent_keeps_live_jobs_fresh_while_the_registry_is_damaged(clean_datapath):
    datapath.load(["reno"])
    rec = jobs.attach(jobs.JobSpec(name="a", cc="reno", budget=10**6, stale_s=2,
                                   rules=(rules.Rule(port=7005),)))
    registry = jobs.Registry()
    good = registry.path.read_text()
    registry.path.write_text(good[: len(good) // 2])       # truncated
    before = _cfg(rec.id).refreshed_ns
    agent = _agent(0.1)
    try:
        time.sleep(0.5)
        assert _cfg(rec.id).refreshed_ns > before
    finally:
        agent.send_signal(signal.SIGTERM)
        out, _ = agent.communicate(timeout=10)
    assert out.count("is unreadable") == 1, out          # said once, not every tick
    registry.path.write_text(good)
    jobs.detach_all()
