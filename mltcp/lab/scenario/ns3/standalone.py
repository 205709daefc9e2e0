"""What lets an ns-3 scenario program run on its own: its flags, the run, the printout.

A program (``ns3_scenarios/*.py``) defines its topology's flags and ``build()``; this
module adds the rest of a scenario's flags (jobs, scheme, seed), builds the scenario
exactly as a scenario file would be parsed (so the same validation applies), resolves
its plan, runs it in this process with the program's ``build`` and prints each job's
iterations and the overlap between the jobs (``--trace FILE`` keeps the common trace).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from mltcp.core.errors import MltcpError
from mltcp.lab.scenario import metrics, schedule
from mltcp.lab.scenario.ns3 import sim
from mltcp.lab.scenario.plan import resolve
from mltcp.lab.scenario.spec import load_scenario, parse_scenario


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The flags every program shares (its topology's own come first)."""
    p.add_argument("--queue-packets", type=int, default=100,
                   help="every shaped link's queue, in full-size frames")
    p.add_argument("--ecn-bytes", type=int, default=50_000,
                   help="mark ECN above this backlog (0: drop-tail)")
    j = p.add_argument_group("jobs (identical ring-AllReduce jobs)")
    j.add_argument("--jobs", type=int, default=2)
    j.add_argument("--workers", type=int, default=2)
    j.add_argument("--compute-ms", type=float, default=40)
    j.add_argument("--bytes-per-iteration", default="1MB", help="the gradient size")
    j.add_argument("--connections", type=int, default=1)
    j.add_argument("--iterations", type=int, default=8)
    s = p.add_argument_group("scheme")
    s.add_argument("--cc", default="cubic", choices=["reno", "cubic", "dctcp"])
    s.add_argument("--standard", action="store_true", help="the standard algorithm (F = 1)")
    s.add_argument("--slope", type=float, default=4.0)
    s.add_argument("--intercept", type=float, default=1.0)
    p.add_argument("--scenario", help="instead of the flags above: a scenario (an example "
                                      "name or a TOML file) of this program's topology kind")
    p.add_argument("--scheme", help="with --scenario: which scheme (default: its first)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--trace", metavar="FILE", help="write the common trace here")


def _scenario(topology: dict[str, Any], args: argparse.Namespace):  # type: ignore[no-untyped-def]
    if args.scenario:
        sc = load_scenario(args.scenario)
        if sc.topology.kind != topology["kind"]:
            raise MltcpError(f"{args.scenario} is a {sc.topology.kind} scenario; run it with "
                             f"ns3_scenarios/{sc.topology.kind}.py")
        return sc, sc.scheme(args.scheme) if args.scheme else sc.schemes[0]
    scheme = {"name": args.cc if args.standard else f"mltcp-{args.cc}", "cc": args.cc,
              "mltcp": not args.standard}
    if not args.standard:
        scheme |= {"slope": args.slope, "intercept": args.intercept}
    topo = {**topology, "queue_packets": args.queue_packets}
    if args.ecn_bytes:
        topo["ecn_threshold_bytes"] = args.ecn_bytes
    sc = parse_scenario({
        "name": f"{topology['kind'].replace('_', '-')}-standalone", "seeds": [args.seed],
        "topology": topo,
        "jobs": [{"name": f"j{i + 1}", "compute_ms": args.compute_ms,
                  "bytes_per_iteration": args.bytes_per_iteration, "workers": args.workers,
                  "connections": args.connections, "iterations": args.iterations}
                 for i in range(args.jobs)],
        "schemes": [scheme]}, "the command line")
    return sc, sc.schemes[0]


def run(build: Callable[[Any, Any], sim.Network], program: str, topology: dict[str, Any],
        args: argparse.Namespace) -> int:
    """Run the program's scenario in this process and print what happened."""
    sc, scheme = _scenario(topology, args)
    [plan] = schedule.apply([resolve(sc, scheme, args.seed)])
    print(f"{sc.name} / {scheme.name} / seed {args.seed}: importing ns-3 and compiling the "
          "MLTCP classes...", file=sys.stderr, flush=True)
    ns, gbl = sim.load()
    sim.configure(ns, plan)
    net = build(ns, plan)
    trace = sim.simulate(ns, gbl, plan, net, sim.max_sim_seconds(plan),
                         program=Path(program).name,
                         progress=lambda s, w: print(f"\r{s:.1f} s simulated, {w:.0f} s wall",
                                                     end="", file=sys.stderr, flush=True))
    print(file=sys.stderr)
    overlaps = metrics.overlaps(trace)
    print("job  iteration  time (s)  communication (s)  overlap")
    for job in trace.jobs:
        for rec, ov in zip(job.iterations, overlaps[job.name], strict=True):
            print(f"{job.name:<4} {rec.index:>9}  {rec.end - rec.start:8.3f}  "
                  f"{rec.comm_end - rec.comm_start:17.3f}  {ov:7.0%}")
    conv = metrics.scenario_convergence(trace)
    print(f"converged (overlap < 10 % for 5 iterations) at iteration {conv}"
          if conv is not None else "the jobs did not interleave")
    if args.trace:
        print(f"wrote {trace.save(args.trace)}")
    return 0


def exit_after(main: Callable[[], int]) -> int:
    """Run ``main`` and leave without interpreter teardown: the results are out, and
    finalizing cppyy's proxies to ns-3 objects only risks an abort after the fact."""
    try:
        code = main()
    except MltcpError as exc:
        print(f"error: {exc}", file=sys.stderr)
        code = 2
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
