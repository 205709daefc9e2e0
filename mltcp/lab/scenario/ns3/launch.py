"""One ns-3 run = one worker process (:mod:`.worker`), with progress and a budget.

ns-3 keeps global simulator state and cppyy can abort the interpreter on a C++ fault,
so every plan runs in a fresh process that receives the plan (JSON) and writes the
common trace.  ns-3 is an optional extra (``pip install 'mltcp[ns3]'``): without it
:func:`require_ns3` says so in one line.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

from mltcp.core.errors import CapabilityError, MltcpError
from mltcp.lab.scenario.ns3.sim import max_sim_seconds
from mltcp.lab.scenario.plan import RunPlan
from mltcp.lab.scenario.trace import Trace, load_trace

WORKER = "mltcp.lab.scenario.ns3.worker"
DEFAULT_BUDGET_S = 1800.0          # wall-clock seconds one run may take
STARTUP_S = 60.0                   # importing ns-3 and compiling the MLTCP classes
POLL_S = 0.2                       # how often a waiting run checks whether to stop

Progress = Callable[[str], None]


def require_ns3() -> None:
    """Raise a one-line CapabilityError when the ns-3 bindings are not installed."""
    if importlib.util.find_spec("ns") is None or importlib.util.find_spec("cppyy") is None:
        raise CapabilityError("the ns3 backend needs the ns-3 Python bindings: "
                              "pip install 'mltcp[ns3]' (PyPI ns3 3.44 with cppyy)")


def _wait(proc: subprocess.Popen, deadline: float, stop: threading.Event | None) -> None:
    """Wait for ``proc`` until ``deadline`` (monotonic; TimeoutExpired after it), or
    until ``stop`` is set (KeyboardInterrupt: the caller kills the process)."""
    while True:
        try:
            proc.wait(timeout=max(0.0, min(POLL_S, deadline - time.monotonic())))
            return
        except subprocess.TimeoutExpired:
            if time.monotonic() >= deadline:
                raise
        if stop is not None and stop.is_set():
            raise KeyboardInterrupt("the run was stopped")


def run_plan(plan: RunPlan, progress: Progress | None = None,
             budget_s: float = DEFAULT_BUDGET_S,
             stop: threading.Event | None = None) -> Trace:
    """Run one plan on ns-3 in a worker process; its common trace.  ``stop`` set (by
    the backend, when its caller was interrupted) kills the worker within ``POLL_S``
    and raises KeyboardInterrupt: a thread never receives the main thread's Ctrl-C."""
    require_ns3()
    say = progress or (lambda _msg: None)
    scenario, scheme, seed = plan.scenario, plan.scheme, plan.seed
    with tempfile.TemporaryDirectory(prefix="mltcp-ns3-") as tmp:
        out = Path(tmp) / "trace.json"
        spec = {"plan": plan.to_dict(), "out": str(out), "max_sim_s": max_sim_seconds(plan)}
        spec_path = Path(tmp) / "spec.json"
        spec_path.write_text(json.dumps(spec))
        # One BLAS thread: numpy's OpenBLAS thread pool and cling's JIT in one process
        # were seen to deadlock (the worker asleep in a futex while compiling).
        env = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"}
        proc = subprocess.Popen([sys.executable, "-m", WORKER, str(spec_path)], env=env,
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        started, errors = time.monotonic(), []

        def read_stderr() -> None:
            assert proc.stderr is not None
            for line in proc.stderr:
                if line.startswith("progress "):
                    sim_s = float(line.split()[1])
                    say(f"{scenario.name} / {scheme.name} / seed {seed}: ns-3 at {sim_s:.1f} s "
                        f"simulated, {time.monotonic() - started:.0f} s wall")
                elif "materialize symbols" not in line:      # a harmless cling notice
                    errors.append(line.rstrip())

        reader = threading.Thread(target=read_stderr, daemon=True)
        reader.start()
        try:
            _wait(proc, started + budget_s + STARTUP_S, stop)
        except subprocess.TimeoutExpired:
            raise MltcpError(f"ns-3 run {scenario.name}/{scheme.name}/seed {seed} exceeded "
                             f"its {budget_s:.0f} s wall-clock budget") from None
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            reader.join(timeout=5)
        if proc.returncode != 0 or not out.exists():
            tail = next((e for e in reversed(errors) if e.strip() and not e.startswith("#")),
                        f"exit status {proc.returncode}")
            raise MltcpError(f"ns-3 run {scenario.name}/{scheme.name}/seed {seed} failed: "
                             f"{tail}")
        return load_trace(out)
