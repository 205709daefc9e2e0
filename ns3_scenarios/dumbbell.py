#!/usr/bin/env python3
"""A dumbbell on ns-3 with MLTCP's TCP classes: hosts on two switches, one shaped link.

    h1 ─┐                        ┌─ h(N/2+1)
    h2 ─┼─ swL ══ bottleneck ══ swR ─┼─ ...
    ... ┘                        └─ hN

Every host hangs off its side's switch by a link at the host rate, unshaped (as the
testbed's veths); the bottleneck is shaped in both directions by a queue disc (a byte
FIFO, or RED as a step ECN marker where the scenario marks).  Ring jobs place their
workers on both sides, so every ring crosses the bottleneck both ways.

Run on its own (``pip install 'mltcp[ns3]'``; ns-3 imports and compiles in ~20 s):

    python ns3_scenarios/dumbbell.py                     # two jobs, MLTCP-CUBIC F = 1 + 4r
    python ns3_scenarios/dumbbell.py --cc reno --standard --iterations 10
    python ns3_scenarios/dumbbell.py --scenario compatible-pair --scheme mltcp-reno

This is also the program the ns-3 backend builds every dumbbell scenario with
(``mltcp run SCENARIO --backend ns3``): what you change here (``LINK_DELAY``,
``DEVICE_QUEUE``, the links in :func:`build`) changes the backend's runs too.
"""

from __future__ import annotations

import argparse
import sys

from mltcp.lab.scenario.ns3 import sim, standalone

LINK_DELAY = "5us"       # per link: a data-centre base RTT of a few tens of µs
DEVICE_QUEUE = "4p"      # the NIC ring below the queue disc: keep it small


def build(ns, plan) -> sim.Network:  # type: ignore[no-untyped-def]
    """The plan's dumbbell: nodes h1..hN, swL, swR; access links; the bottleneck."""
    topo, graph = plan.topology, plan.graph
    wiring = sim.Wiring(ns, plan, link_delay=LINK_DELAY, device_queue=DEVICE_QUEUE)
    for name in (*graph.hosts, "swL", "swR"):
        wiring.node(name)
    for host in graph.hosts:
        wiring.link(f"{host}-access", topo.host_link_mbit, shaped=False)
    wiring.link("bottleneck", topo.bottleneck_mbit, shaped=True)
    return wiring.finish()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--hosts", type=int, default=4, help="hosts, half on each side")
    p.add_argument("--bottleneck-mbit", type=float, default=100)
    p.add_argument("--host-link-mbit", type=float, default=1000)
    standalone.add_arguments(p)
    args = p.parse_args(argv)
    topology = {"kind": "dumbbell", "hosts": args.hosts, "bottleneck_mbit": args.bottleneck_mbit,
                "host_link_mbit": args.host_link_mbit}
    return standalone.run(build, __file__, topology, args)


if __name__ == "__main__":
    sys.exit(standalone.exit_after(main))
