"""ns-3 runs in worker processes (:mod:`.worker`), reused, with progress and a budget.

cppyy can abort the interpreter on a C++ fault, so ns-3 runs in worker processes, not
in the caller's.  Loading ns-3 and compiling the MLTCP classes costs a worker 10-20 s,
which a small run would pay again and again, so a worker runs many plans (ns-3's global
state is reset between them: :func:`mltcp.lab.scenario.ns3.sim.reset`) and this
process keeps its idle workers in :data:`POOL` for the next run: the backend's
``parallel`` threads, a sweep's tasks on one Dask worker and a test session all reuse
them.  A worker that dies, hangs past its plan's budget or is stopped is killed (its
plan fails or is interrupted, as with a process per run) and the next plan gets a new
one; a plan that fails inside a worker leaves it usable.  ns-3 is an optional extra
(``pip install 'mltcp[ns3]'``): without it :func:`require_ns3` says so in one line.
"""

from __future__ import annotations

import atexit
import contextlib
import importlib.util
import json
import os
import queue
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from mltcp.core.errors import CapabilityError, MltcpError
from mltcp.lab.scenario.ns3.sim import max_sim_seconds
from mltcp.lab.scenario.plan import RunPlan
from mltcp.lab.scenario.trace import Trace, load_trace

WORKER = "mltcp.lab.scenario.ns3.worker"
REPLY = "mltcp-ns3 "               # the worker's protocol lines (worker.REPLY)
DEFAULT_BUDGET_S = 1800.0          # wall-clock seconds one run may take
STARTUP_S = 60.0                   # importing ns-3 and compiling the MLTCP classes
POLL_S = 0.2                       # how often a waiting run checks whether to stop
MAX_PLANS = 64                     # then a fresh worker: a run leaves a little memory behind

Progress = Callable[[str], None]


def require_ns3() -> None:
    """Raise a one-line CapabilityError when the ns-3 bindings are not installed."""
    if importlib.util.find_spec("ns") is None or importlib.util.find_spec("cppyy") is None:
        raise CapabilityError("the ns3 backend needs the ns-3 Python bindings: "
                              "pip install 'mltcp[ns3]' (PyPI ns3 3.44 with cppyy)")


def worker_command() -> list[str]:
    """The worker's command line (tests put a stand-in here)."""
    return [sys.executable, "-m", WORKER]


class WorkerGone(Exception):
    """The worker process ended (crashed, or killed) before it replied."""


def wait_reply(replies: queue.Queue, deadline: float,
               stop: threading.Event | None) -> dict[str, Any]:
    """The worker's next reply, waiting until ``deadline`` (monotonic;
    subprocess.TimeoutExpired after it) or until ``stop`` is set (KeyboardInterrupt:
    the caller kills the worker), checking every ``POLL_S``: a thread never receives
    the main thread's Ctrl-C, and the main thread gets it only between waits."""
    while True:
        try:
            message = replies.get(timeout=max(0.0, min(POLL_S, deadline - time.monotonic())))
        except queue.Empty:
            if time.monotonic() >= deadline:
                raise subprocess.TimeoutExpired(WORKER, 0) from None
            if stop is not None and stop.is_set():
                raise KeyboardInterrupt("the run was stopped") from None
            continue
        if message is None:
            raise WorkerGone
        return message


class Worker:
    """One ns-3 worker process, running the plans it is given one at a time."""

    def __init__(self) -> None:
        self.tmp = Path(tempfile.mkdtemp(prefix="mltcp-ns3-"))
        # One BLAS thread: numpy's OpenBLAS thread pool and cling's JIT in one process
        # were seen to deadlock (the worker asleep in a futex while compiling).
        env = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"}
        # The worker removes self.tmp when its stdin ends: if this process dies first
        # (or is a pool's worker, which ends without its exit handlers), it still goes.
        self.proc = subprocess.Popen([*worker_command(), "--work-dir", str(self.tmp)], env=env,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True, bufsize=1)
        self.ready = False            # ns-3 loaded: a plan's budget needs no start-up
        self.plans_run = 0
        self.errors: list[str] = []   # the current plan's stderr lines, for its error
        self.on_progress: Callable[[float], None] | None = None
        self.replies: queue.Queue[dict[str, Any] | None] = queue.Queue()
        self.readers = [threading.Thread(target=f, daemon=True)
                        for f in (self._read_stdout, self._read_stderr)]
        for reader in self.readers:
            reader.start()

    def _read_stdout(self) -> None:
        """Protocol lines into ``replies``; None when the worker's stdout ends."""
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if line.startswith(REPLY):
                self.replies.put(json.loads(line[len(REPLY):]))
        self.replies.put(None)

    def _read_stderr(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            if line.startswith("progress "):
                if self.on_progress is not None:
                    self.on_progress(float(line.split()[1]))
            elif "materialize symbols" not in line:      # a harmless cling notice
                self.errors.append(line.rstrip())

    def alive(self) -> bool:
        return self.proc.poll() is None

    def close(self) -> None:
        """Kill the process (mid-plan it cannot be interrupted otherwise) and tidy up."""
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        for reader in self.readers:
            reader.join(timeout=5)
        for pipe in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            if pipe is not None:
                with contextlib.suppress(OSError):   # a killed worker's stdin: broken pipe
                    pipe.close()
        shutil.rmtree(self.tmp, ignore_errors=True)

    def run(self, plan: RunPlan, progress: Progress | None = None,
            budget_s: float = DEFAULT_BUDGET_S, stop: threading.Event | None = None,
            max_sim_s: float | None = None) -> Trace:
        """Run one plan; its common trace.  A plan that fails in the worker raises
        MltcpError and leaves the worker usable; a worker that dies, exceeds the budget
        or is stopped (KeyboardInterrupt) is killed first."""
        label = f"{plan.scenario.name}/{plan.scheme.name}/seed {plan.seed}"
        out = self.tmp / f"trace-{self.plans_run}.json"
        spec = {"plan": plan.to_dict(), "out": str(out),
                "max_sim_s": max_sim_seconds(plan) if max_sim_s is None else max_sim_s}
        started = time.monotonic()
        say = progress or (lambda _msg: None)
        self.errors.clear()
        self.on_progress = lambda sim_s: say(
            f"{plan.scenario.name} / {plan.scheme.name} / seed {plan.seed}: ns-3 at "
            f"{sim_s:.1f} s simulated, {time.monotonic() - started:.0f} s wall")
        self.plans_run += 1
        try:
            reply = self._exchange(spec, budget_s, stop)
        except subprocess.TimeoutExpired:
            self.close()
            raise MltcpError(f"ns-3 run {label} exceeded its {budget_s:.0f} s wall-clock "
                             "budget") from None
        except WorkerGone:
            self.close()
            tail = next((e for e in reversed(self.errors)
                         if e.strip() and not e.startswith("#")),
                        f"exit status {self.proc.returncode}")
            raise MltcpError(f"ns-3 run {label} failed: {tail}") from None
        except BaseException:          # stopped (KeyboardInterrupt), or anything else
            self.close()
            raise
        finally:
            self.on_progress = None
        if "error" in reply:
            raise MltcpError(f"ns-3 run {label} failed: {reply['error']}")
        try:
            return load_trace(out)
        finally:
            out.unlink(missing_ok=True)

    def _exchange(self, spec: dict[str, Any], budget_s: float,
                  stop: threading.Event | None) -> dict[str, Any]:
        """Send the spec; the worker's answer to it.  A new worker has up to STARTUP_S
        to load ns-3 and then the budget: the budget counts from its ready line."""
        assert self.proc.stdin is not None
        now = time.monotonic()
        deadline = now + budget_s + (0 if self.ready else STARTUP_S)
        try:
            self.proc.stdin.write(json.dumps(spec) + "\n")
            self.proc.stdin.flush()
        except (OSError, ValueError):  # a broken pipe, or a closed one: the worker is gone
            raise WorkerGone from None
        while True:
            reply = wait_reply(self.replies, deadline, stop)
            if not reply.get("ready"):
                return reply
            self.ready = True
            deadline = min(deadline, time.monotonic() + budget_s)


class WorkerPool:
    """This process's idle workers, reused by the next run (most of a small run is a
    new worker's start-up); a busy worker belongs to the run that took it."""

    def __init__(self) -> None:
        self._idle: list[Worker] = []
        self._lock = threading.Lock()

    def take(self) -> Worker:
        with self._lock:
            while self._idle:
                worker = self._idle.pop()
                if worker.alive():
                    return worker
                worker.close()
        return Worker()

    def give(self, worker: Worker) -> None:
        """Keep a live worker for the next run, unless it has run ``MAX_PLANS``."""
        if worker.alive() and worker.plans_run < MAX_PLANS:
            with self._lock:
                self._idle.append(worker)
        else:
            worker.close()

    def close(self) -> None:
        """End the idle workers (at exit; they also end when this process's pipes close)."""
        with self._lock:
            idle, self._idle = self._idle, []
        for worker in idle:
            worker.close()


POOL = WorkerPool()
atexit.register(POOL.close)


def run_plan(plan: RunPlan, progress: Progress | None = None,
             budget_s: float = DEFAULT_BUDGET_S,
             stop: threading.Event | None = None, reuse: bool = True) -> Trace:
    """Run one plan on ns-3 in a worker process (one of :data:`POOL`'s, or with
    ``reuse=False`` a fresh one that ends with the run); its common trace.  ``stop``
    set (by the backend, when its caller was interrupted) kills the worker within
    ``POLL_S`` and raises KeyboardInterrupt: a thread never receives the main thread's
    Ctrl-C."""
    require_ns3()
    worker = POOL.take() if reuse else Worker()
    try:
        return worker.run(plan, progress, budget_s, stop)
    finally:
        if reuse:
            POOL.give(worker)          # a killed worker is closed, not kept
        else:
            worker.close()
