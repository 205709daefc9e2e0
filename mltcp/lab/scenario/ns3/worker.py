"""One ns-3 run, in its own process: the plan's scenario program builds the network,
the plan's jobs run on it, the common trace is written.

ns-3 keeps global simulator state and cppyy can abort the interpreter on a C++ fault,
so every run is a fresh ``python -m mltcp.lab.scenario.ns3.worker SPEC.json`` process
(started by :mod:`.launch`) that receives its resolved plan (:mod:`mltcp.lab.scenario.plan`):
placement, starts, jitter, idle gaps, ECN thresholds and each ring flow's path come
from there.  The network is built by the scenario program of the plan's topology kind
(``ns3_scenarios/``, :mod:`.programs`), the rest by :mod:`.sim`.
It prints ``progress <sim seconds> <wall seconds>`` lines on stderr while it runs.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from mltcp.lab.scenario import plan as plans
from mltcp.lab.scenario.ns3 import programs, sim, standalone
from mltcp.lab.scenario.trace import Trace


def run(spec: dict) -> Trace:
    plan = plans.from_dict(spec["plan"])
    program = programs.load(plan.topology.kind)
    ns, gbl = sim.load()
    sim.configure(ns, plan)
    net = program.build(ns, plan)
    # No Simulator::Destroy(): the process ends with os._exit once the trace is written,
    # and nothing needs ns-3's teardown.
    return sim.simulate(ns, gbl, plan, net, spec["max_sim_s"],
                        program=Path(program.__file__ or "").name,
                        progress_step_s=spec.get("progress_step_s", 0.5),
                        progress=sim.progress_to_stderr)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        print("usage: python -m mltcp.lab.scenario.ns3.worker SPEC.json", file=sys.stderr)
        return 2
    spec = json.loads(Path(argv[0]).read_text())
    run(spec).save(spec["out"])
    return 0


if __name__ == "__main__":
    sys.exit(standalone.exit_after(main))
