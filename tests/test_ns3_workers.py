"""ns-3 workers that run many plans: a reset worker gives a fresh process's traces bit for
bit, a failed plan does not poison the next, the backend reuses its workers, and a
worker that dies or hangs is replaced.

The ns-3 runs are small (3 iterations on 100 Mbit/s): most of their time is the
start-up of the processes being compared.  The protocol tests use a stand-in worker
(no ns-3).
"""

from __future__ import annotations

import contextlib
import sys

import pytest

from mltcp.core.errors import MltcpError
from mltcp.lab.scenario import schedule
from mltcp.lab.scenario.ns3.sim import comparable
from mltcp.lab.scenario.plan import resolve
from tests.test_ns3 import TEST_BUDGET_S, _small, _two_spines, needs_ns3


def _plans() -> tuple:
    """Two plans unlike each other: MLTCP on an ECN-marking dumbbell and cubic on a
    drop-tail leaf-spine with pinned paths (more nodes, routers and random streams).
    Without ``Simulator::Destroy()`` the worker crashes on the second plan; without
    ``ResetNextStreamIndex()`` A's traces differ the second time (both checked by
    hand by skipping the step)."""
    sc = _small("compatible-pair")
    a = schedule.apply([resolve(sc, sc.scheme("mltcp-cubic"), 0)])[0]
    spines, seed, _, _ = _two_spines()
    b = schedule.apply([resolve(spines, spines.scheme("cubic"), seed)])[0]
    return a, b


@needs_ns3
@pytest.mark.idle           # long and CPU-only: scripts/suite.py
def test_one_worker_gives_a_fresh_processs_traces_plan_after_plan() -> None:
    """A, B, A stopped mid-way by an error, A again in one worker: every A is the fresh
    process's A and B the fresh process's B, bit for bit."""
    from mltcp.lab.scenario.ns3 import launch

    a, b = _plans()
    fresh_a, fresh_b = (launch.run_plan(p, budget_s=TEST_BUDGET_S, reuse=False)
                        for p in (a, b))
    worker = launch.Worker()
    try:
        first_a = worker.run(a, budget_s=TEST_BUDGET_S)
        then_b = worker.run(b, budget_s=TEST_BUDGET_S)
        with pytest.raises(MltcpError, match="finished 0 of 3 iterations"):
            worker.run(a, budget_s=TEST_BUDGET_S, max_sim_s=0.1)    # fails mid-simulation
        again_a = worker.run(a, budget_s=TEST_BUDGET_S)
        assert worker.alive() and worker.plans_run == 4
    finally:
        worker.close()
    assert comparable(first_a) == comparable(fresh_a)
    assert comparable(again_a) == comparable(fresh_a)
    assert comparable(then_b) == comparable(fresh_b)
    assert comparable(fresh_a) != comparable(fresh_b)


@needs_ns3
@pytest.mark.idle           # long and CPU-only: scripts/suite.py
def test_the_backend_reuses_its_workers(monkeypatch) -> None:
    """Three runs through the backend start at most one worker (none when the session
    already has an idle one), which goes back to the pool."""
    from mltcp.lab.scenario import backends
    from mltcp.lab.scenario.ns3 import launch

    created = []

    class Counted(launch.Worker):
        def __init__(self) -> None:
            super().__init__()
            created.append(self)

    monkeypatch.setattr(launch, "Worker", Counted)
    a, _ = _plans()
    engine = backends.get("ns3", budget_s=TEST_BUDGET_S)
    traces = dict(engine.run([a, a, a], None, parallel=1))
    assert len(created) <= 1
    assert comparable(traces[0]) == comparable(traces[1]) == comparable(traces[2])
    assert launch.POOL._idle and launch.POOL._idle[-1].alive()


STAND_IN = """
import json, os, sys, time
out = os.fdopen(os.dup(1), "w", buffering=1)
out.write('mltcp-ns3 {"ready": true}\\n')
for line in sys.stdin:
    seed = json.loads(line)["plan"]["seed"]
    if seed == 1:
        print("boom: the worker crashed", file=sys.stderr, flush=True)
        os._exit(3)
    if seed == 2:
        time.sleep(60)
    out.write('mltcp-ns3 {"error": "RuntimeError: no ns-3 here"}\\n')
"""


def _stand_in(monkeypatch) -> None:
    from mltcp.lab.scenario.ns3 import launch

    monkeypatch.setattr(launch, "worker_command", lambda: [sys.executable, "-c", STAND_IN])
    monkeypatch.setattr(launch, "POOL", launch.WorkerPool())


def _plan(seed: int):
    sc = _small("compatible-pair")
    return resolve(sc, sc.scheme("cubic"), seed)


def test_a_failed_plan_keeps_its_worker_and_a_dead_or_hung_one_is_replaced(monkeypatch):
    """A plan the worker reports as failed fails alone; a worker that dies fails its plan
    with its last words and one that exceeds the budget is killed; either way the pool
    hands the next plan a new worker."""
    import time

    from mltcp.lab.scenario.ns3 import launch

    _stand_in(monkeypatch)
    monkeypatch.setattr(launch, "require_ns3", lambda: None)
    plans = launch.POOL
    with pytest.raises(MltcpError, match="no ns-3 here"):
        launch.run_plan(_plan(0))
    (kept,) = plans._idle
    with pytest.raises(MltcpError, match="failed: boom: the worker crashed"):
        launch.run_plan(_plan(1))
    assert not kept.alive() and not plans._idle
    t0 = time.monotonic()
    with pytest.raises(MltcpError, match="1 s wall-clock budget"):
        launch.run_plan(_plan(2), budget_s=1.0)
    assert time.monotonic() - t0 < 3.0 and not plans._idle
    with pytest.raises(MltcpError, match="no ns-3 here"):
        launch.run_plan(_plan(0))
    (fresh,) = plans._idle
    assert fresh is not kept and fresh.plans_run == 1
    plans.close()
    assert not fresh.alive()


def test_a_stopped_run_kills_its_worker_within_a_poll(monkeypatch) -> None:
    """The backend's stop (its caller's Ctrl-C) kills the worker mid-plan in POLL_S."""
    import threading
    import time

    from mltcp.lab.scenario.ns3 import launch

    _stand_in(monkeypatch)
    worker = launch.Worker()
    stop = threading.Event()
    threading.Timer(0.3, stop.set).start()
    t0 = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        worker.run(_plan(2), stop=stop)                 # the stand-in hangs on seed 2
    # The stop comes at 0.3 s and is seen within a poll (launch.POLL_S); without it the
    # stand-in hangs for ever.  The bound leaves a busy host a few seconds: the suite
    # asserts the behaviour, bench/bench_ctrl_c.py measures the latency.
    assert time.monotonic() - t0 < 0.3 + launch.POLL_S + 3.0 and not worker.alive()
    with pytest.raises(MltcpError, match="failed: exit status -9"):
        worker.run(_plan(0))                            # a killed worker runs nothing


def test_the_worker_takes_its_scratch_directory_with_it(monkeypatch, tmp_path) -> None:
    """A worker whose parent never closes it (killed, or a pool's worker process, which
    ends by os._exit without its exit handlers: a sweep on local workers left one
    /tmp/mltcp-ns3-* per worker) removes its --work-dir when its stdin ends, whether
    serving ended normally or by an error."""
    from mltcp.lab.scenario.ns3 import worker

    monkeypatch.setattr(worker, "protocol_channel", lambda: None)
    for outcome in (lambda *_: 0, lambda *_: 1 / 0):
        scratch = tmp_path / "scratch"
        scratch.mkdir()
        (scratch / "trace-0.json").write_text("{}")
        monkeypatch.setattr(worker, "serve", outcome)
        with contextlib.suppress(ZeroDivisionError):
            worker.main(["--work-dir", str(scratch)])
        assert not scratch.exists()
    assert worker.main(["--work-dir"]) == 2 and worker.main(["--other", "x"]) == 2


@needs_ns3
@pytest.mark.idle           # long and CPU-only: scripts/suite.py
def test_a_real_worker_whose_parent_vanished_leaves_no_scratch() -> None:
    """The real worker: its stdin closed without close() (as when its parent dies), it
    ends and its scratch directory is gone."""
    from mltcp.lab.scenario.ns3 import launch

    worker = launch.Worker()
    assert worker.tmp.is_dir()
    assert worker.proc.stdin is not None
    worker.proc.stdin.close()
    assert worker.proc.wait(timeout=300) == 0        # a hang guard, not a timing
    assert not worker.tmp.exists()
    worker.close()
