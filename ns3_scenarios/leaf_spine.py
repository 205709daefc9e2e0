#!/usr/bin/env python3
"""A leaf-spine on ns-3 with MLTCP's TCP classes, each ring flow pinned to its ECMP path.

    spine1   spine2  ...        every leaf links to every spine at
      │ ╲   ╱ │                 hosts_per_leaf x host rate / oversubscription / spines
    leaf1    leaf2   ...
    h1 h2    h3 h4   ...        hosts at the host rate

Every link is shaped in both directions by a queue disc (a byte FIFO, or RED as a step
ECN marker where the scenario marks).  Where a flow has several equal-cost paths, the
plan has drawn one per flow (as a switch's flow hash would, and the same one the fluid
model uses for that seed); the switches on it get a route for exactly that flow
(``FlowPathRouting``), because ns-3's own ECMP sprays packets and reorders TCP.

Run on its own (``pip install 'mltcp[ns3]'``; ns-3 imports and compiles in ~20 s):

    python ns3_scenarios/leaf_spine.py                   # two jobs across two spines
    python ns3_scenarios/leaf_spine.py --spines 1 --standard --iterations 10
    python ns3_scenarios/leaf_spine.py --scenario leaf-spine --scheme mltcp-cubic

This is also the program the ns-3 backend builds every leaf-spine scenario with
(``mltcp run SCENARIO --backend ns3``): what you change here changes its runs too.
"""

from __future__ import annotations

import argparse
import sys

from mltcp.lab.scenario.ns3 import sim, standalone

LINK_DELAY = "5us"       # per link: a data-centre base RTT of a few tens of µs
DEVICE_QUEUE = "4p"      # the NIC ring below the queue disc: keep it small


def build(ns, plan) -> sim.Network:  # type: ignore[no-untyped-def]
    """The plan's leaf-spine: hosts, then leaves and spines; per leaf its host links,
    then its uplinks to every spine."""
    topo, graph = plan.topology, plan.graph
    wiring = sim.Wiring(ns, plan, link_delay=LINK_DELAY, device_queue=DEVICE_QUEUE)
    leaves = [f"leaf{i}" for i in range(1, topo.leaves + 1)]
    spines = [f"spine{i}" for i in range(1, topo.spines + 1)]
    for name in (*graph.hosts, *leaves, *spines):
        wiring.node(name)
    for k, leaf in enumerate(leaves):
        for host in topo.segments()[k]:
            wiring.link(f"{host}-access", topo.host_link_mbit, shaped=True)
        for spine in spines:
            wiring.link(f"{leaf}-{spine}", topo.bottleneck_mbit, shaped=True)
    return wiring.finish()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--leaves", type=int, default=2)
    p.add_argument("--spines", type=int, default=2)
    p.add_argument("--hosts-per-leaf", type=int, default=2)
    p.add_argument("--host-link-mbit", type=float, default=100)
    p.add_argument("--oversubscription", type=float, default=1.0)
    standalone.add_arguments(p)
    args = p.parse_args(argv)
    topology = {"kind": "leaf_spine", "leaves": args.leaves, "spines": args.spines,
                "hosts_per_leaf": args.hosts_per_leaf, "host_link_mbit": args.host_link_mbit,
                "oversubscription": args.oversubscription}
    return standalone.run(build, __file__, topology, args)


if __name__ == "__main__":
    sys.exit(standalone.exit_after(main))
