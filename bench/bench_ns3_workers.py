"""ns-3 start-up tax: 8 small runs in fresh processes against reused workers.

The default pair (compatible-pair) made small as bench_ns3.py makes it (100 Mbit/s
dumbbell, 1 MB per worker per iteration, 40 ms compute), 40 iterations, under cubic and
MLTCP-cubic for 4 seeds: 8 runs through the ns3 backend, once with a fresh worker
process per run (``reuse=False``, as every run paid before) and once on reused workers
(starting from none, so their start-up is counted), side by side in one invocation.
Reported: each side's wall seconds, the ratio reused / fresh, and whether the two
sides' traces are identical (their JSON less the provenance's times and host).  Each
side's wall time is also split into the workers' simulation loops (their own clocks,
summed and divided by ``--parallel``: the loops of N workers overlap) and the rest
(start-up, plans in, traces out): on a busy machine the simulation's share varies from
run to run, while the rest is what reuse removes.

    python bench/bench_ns3_workers.py --out bench/results/ns3_workers.json
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

from bench_ns3 import scenario

from mltcp.lab.common.provenance import provenance
from mltcp.lab.scenario import backends, schedule
from mltcp.lab.scenario.ns3 import launch
from mltcp.lab.scenario.ns3.sim import comparable
from mltcp.lab.scenario.plan import RunPlan, resolve

SCHEMES = ("cubic", "mltcp-cubic")
SEEDS = (0, 1, 2, 3)


def plans(iterations: int) -> list[RunPlan]:
    sc = scenario(iterations)
    return [schedule.apply([resolve(sc, sc.scheme(name), seed)])[0]
            for name in SCHEMES for seed in SEEDS]


def timed(runs: list[RunPlan], reuse: bool, parallel: int) -> tuple[float, list[Any]]:
    """Wall seconds of the runs through the backend, and their traces in order."""
    launch.POOL.close()                       # no warm worker: count every start-up
    engine = backends.get("ns3", reuse=reuse)
    t0 = time.perf_counter()
    traces = dict(engine.run(runs, None, parallel))
    wall = time.perf_counter() - t0
    launch.POOL.close()
    return wall, [traces[i] for i in range(len(runs))]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default="bench/results/ns3_workers.json")
    ap.add_argument("--iterations", type=int, default=40)
    ap.add_argument("--parallel", type=int, default=1, help="runs (workers) at once")
    args = ap.parse_args()
    runs = plans(args.iterations)
    sides = {}
    for name, reuse in (("fresh", False), ("reused", True)):
        wall, traces = timed(runs, reuse=reuse, parallel=args.parallel)
        sim = sum(t.provenance["ns3"]["simulation_wall_s"] for t in traces) / args.parallel
        sides[name] = {"wall_s": wall, "simulation_s": sim, "rest_s": wall - sim,
                       "traces": traces}
        print(f"{name:6s}: {len(runs)} runs in {wall:6.1f} s wall, of which {sim:6.1f} s in "
              f"the simulation loops and {wall - sim:6.1f} s the rest", flush=True)
    fresh, reused = sides["fresh"], sides["reused"]
    identical = [comparable(a) == comparable(b)
                 for a, b in zip(fresh.pop("traces"), reused.pop("traces"), strict=True)]
    ratio = reused["wall_s"] / fresh["wall_s"]
    print(f"reused / fresh: wall {ratio:.3f}, the rest {reused['rest_s'] / fresh['rest_s']:.3f}; "
          f"traces identical: {sum(identical)}/{len(identical)}")
    result = {"schema": "mltcp.bench.ns3_workers/1", "provenance": provenance(),
              "runs": len(runs), "iterations": args.iterations, "parallel": args.parallel,
              "schemes": list(SCHEMES), "seeds": list(SEEDS), **sides, "ratio": ratio,
              "rest_ratio": reused["rest_s"] / fresh["rest_s"],
              "traces_identical": all(identical)}
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
