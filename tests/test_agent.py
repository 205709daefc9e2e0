"""The long-running control plane: fresh configs, learned budgets, metrics, clean SIGTERM."""

from __future__ import annotations

import ctypes
import json
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request

import pytest

from mltcp.core.aggressiveness import FP_ONE
from mltcp.core.errors import SpecError
from mltcp.host import datapath, jobs, maps, rules, telemetry
from mltcp.host.agent import Agent

pytestmark = pytest.mark.kernel


@pytest.fixture
def reno_loaded(clean_datapath):
    datapath.load(["reno"])


def test_agent_keeps_configs_fresh_learns_and_serves_metrics(reno_loaded):
    jobs.attach(jobs.JobSpec(name="fresh", budget=1000, stale_s=1, rules=(rules.Rule(port=7301),),
                             cc="reno"))
    learner = jobs.attach(jobs.JobSpec(name="learn", learn=True, rules=(rules.Rule(port=7302),),
                                       cc="reno"))
    with maps.PinnedMap("mltcp_job_state") as st:  # five stable iterations seen by the datapath
        state = maps.JobState(f_fp=FP_ONE)
        for i, sample in enumerate((5_000_000, 5_010_000, 4_990_000, 5_000_000, 5_000_000)):
            state.hist[i] = sample
        state.hist_len = state.hist_head = 5
        st.put(ctypes.c_uint32(learner.id), state)
    agent = Agent(interval_s=0.1, metrics_port=0)
    thread = threading.Thread(target=agent.run)
    thread.start()
    try:
        time.sleep(1.6)  # longer than the 1 s stale timeout: only the agent keeps it fresh
        status = {s.name: s for s in telemetry.collect()}
        assert not status["fresh"].stale
        assert status["learn"].budget == 5_000_000
        body = urllib.request.urlopen(f"http://127.0.0.1:{agent.metrics_port}/metrics",
                                      timeout=5).read().decode()
        assert 'mltcp_job_budget_bytes{cc="reno",job="learn"} 5e+06' in body
        assert 'mltcp_job_stale{cc="reno",job="fresh"} 0.0' in body
        health = json.loads(urllib.request.urlopen(
            f"http://127.0.0.1:{agent.metrics_port}/healthz", timeout=5).read())
        assert health["status"] == "ok" and health["last_refresh_age_s"] < 1
        assert health["modules"] == ["reno"] and health["error"] is None
    finally:
        agent.stop()
        thread.join(timeout=5)
    assert not thread.is_alive()
    time.sleep(1.2)  # agent gone: the config goes stale and flows fall back
    assert {s.name: s for s in telemetry.collect()}["fresh"].stale


def test_agent_cli_stops_cleanly_on_sigterm(reno_loaded):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([sys.executable, "-m", "mltcp.cli", "agent", "--interval", "0.2",
                             "--metrics-port", str(port)], stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 10
        while True:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=1).read()
                break
            except OSError:
                assert time.monotonic() < deadline, "agent never served /metrics"
                time.sleep(0.1)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=10) == 0
        assert "agent stopped" in proc.stderr.read()
    finally:
        if proc.poll() is None:
            proc.kill()


def test_agent_interval_is_validated():
    with pytest.raises(SpecError, match="interval"):
        Agent(interval_s=0)
