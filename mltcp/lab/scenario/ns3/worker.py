"""ns-3 runs in a long-lived process: the plan's scenario program builds the network,
the plan's jobs run on it, the common trace is written; then the next plan.

Loading ns-3 and compiling the MLTCP classes takes 10-20 s, a small run ~1 s, so one
``python -m mltcp.lab.scenario.ns3.worker`` process (started by :mod:`.launch`) loads
them once and runs plan after plan, resetting ns-3's global state before each
(:func:`mltcp.lab.scenario.ns3.sim.reset`: the traces are a fresh process's, bit for
bit).  A plan is its resolved :mod:`mltcp.lab.scenario.plan` (placement, starts,
jitter, idle gaps, ECN thresholds and each ring flow's path come from there); the
network is built by the scenario program of the plan's topology kind
(``ns3_scenarios/``, :mod:`.programs`), the rest by :mod:`.sim`.

Protocol: one JSON spec a line on stdin (``plan``, ``out``: where to write the trace,
``max_sim_s``); on the process's original stdout, lines ``mltcp-ns3 {json}``:
``{"ready": true}`` once ns-3 is loaded, then per spec ``{"ok": true}`` or
``{"error": "..."}`` (a plan that fails is reported and the next one starts from a
reset).  Anything else that writes to stdout (ns-3, cling) lands on stderr, where
``progress <sim seconds> <wall seconds>`` lines go while a plan runs.  The process ends
at the end of its stdin: when its parent closes the pipe or dies, and takes its
``--work-dir`` with it.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import traceback
from pathlib import Path
from typing import Any, TextIO

from mltcp.lab.scenario import plan as plans
from mltcp.lab.scenario.ns3 import programs, sim, standalone
from mltcp.lab.scenario.trace import Trace

REPLY = "mltcp-ns3 "               # the prefix of the worker's protocol lines


def run(spec: dict[str, Any], ns: Any, gbl: Any) -> Trace:
    """One plan on the loaded ns-3, from a reset state; its common trace."""
    sim.reset(ns, gbl)
    plan = plans.from_dict(spec["plan"])
    program = programs.load(plan.topology.kind)
    sim.configure(ns, plan)
    net = program.build(ns, plan)
    return sim.simulate(ns, gbl, plan, net, spec["max_sim_s"],
                        program=Path(program.__file__ or "").name,
                        progress_step_s=spec.get("progress_step_s", 0.5),
                        progress=sim.progress_to_stderr)


def protocol_channel() -> TextIO:
    """The process's stdout kept for protocol lines alone; fd 1 (C++ and Python prints)
    goes to stderr from here on, so nothing else can break a reply line."""
    channel = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    return channel


def reply(channel: TextIO, message: dict[str, Any]) -> None:
    channel.write(REPLY + json.dumps(message) + "\n")
    channel.flush()


def serve(specs: TextIO, channel: TextIO) -> int:
    """Load ns-3 once, then run every spec read from ``specs`` until it ends."""
    ns, gbl = sim.load()
    reply(channel, {"ready": True})
    for line in specs:
        if not line.strip():
            continue
        spec = json.loads(line)
        try:
            run(spec, ns, gbl).save(spec["out"])
        except Exception as exc:      # reported; the next plan starts from a reset
            traceback.print_exc(file=sys.stderr)
            reply(channel, {"error": f"{type(exc).__name__}: {exc}"})
        else:
            reply(channel, {"ok": True})
    return 0


def main(argv: list[str] | None = None) -> int:
    """``--work-dir DIR``: the parent's scratch directory for this worker's traces,
    removed here when stdin ends, so that it goes with the worker even where the parent
    could not remove it (killed, or a pool's worker process, which ends by ``os._exit``
    without its exit handlers)."""
    argv = sys.argv[1:] if argv is None else argv
    if argv and (len(argv) != 2 or argv[0] != "--work-dir"):
        print("usage: python -m mltcp.lab.scenario.ns3.worker [--work-dir DIR]  (plans as "
              "JSON lines on stdin)", file=sys.stderr)
        return 2
    try:
        return serve(sys.stdin, protocol_channel())
    finally:
        if argv:
            shutil.rmtree(argv[1], ignore_errors=True)


if __name__ == "__main__":
    # No Simulator::Destroy() at the end: the process leaves with os._exit, since
    # finalizing cppyy's proxies to ns-3 objects only risks an abort after the fact.
    sys.exit(standalone.exit_after(main))
