"""Cluster experiments: ``mltcp cluster run`` and ``mltcp cluster schedulers``.

``run`` takes an experiment config (:mod:`mltcp.lab.cluster.config`), runs every
scheduler x network scheme x seed on the cluster simulator, here or on Dask, and writes
the report (:mod:`mltcp.lab.cluster.report`).  ``schedulers`` lists what a config's
``schedulers`` and ``networks`` may name.  Parsing imports nothing of the lab; the
simulator (numpy, matplotlib) is imported when a command runs.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from mltcp.cli import args as args_
from mltcp.cli.output import add_json_flag, emit


def register(sub: Any) -> None:
    """Add ``mltcp cluster ...`` to the top-level subparsers."""
    cl = sub.add_parser("cluster", help="schedulers x network schemes on a simulated GPU "
                                        "cluster (JCT, waiting, slowdown; report + plots)")
    cls = cl.add_subparsers(dest="cluster_cmd", required=True, metavar="SUBCOMMAND")

    rn = cls.add_parser("run", help="every scheduler x network x seed of an experiment "
                                    "config; write report.json, summary.md and plots")
    rn.add_argument("config", help="an experiment TOML file, or an example's name "
                                   "(mltcp/lab/cluster/examples/, e.g. small)")
    rn.add_argument("--out", required=True, help="output directory")
    where = rn.add_mutually_exclusive_group()
    where.add_argument("--parallel", type=args_.integer(1, 1024, "4"), metavar="N",
                       help="runs at once on a local Dask cluster of N worker processes "
                            "(1..1024; default: 1, one after the other in this process)")
    where.add_argument("--scheduler", metavar="ADDR",
                       help="the Dask scheduler to run on, e.g. tcp://host:8786 (default: "
                            "none, runs here; not a cluster scheduler: those are in the "
                            "config)")
    rn.set_defaults(handler=cmd_run, teardown_signals=True)

    sc = cls.add_parser("schedulers", help="the schedulers and network schemes a config "
                                           "may name")
    add_json_flag(sc, "{orders, placements, flags, named, networks}")
    sc.set_defaults(handler=cmd_schedulers)


def cmd_run(args: argparse.Namespace) -> int:
    from mltcp.cli.lab import _out_dir
    from mltcp.lab.cluster import config, experiment, report

    cfg = config.load_config(args.config)
    _out_dir(args.out)
    result = experiment.execute(cfg, parallel=args.parallel or 1, scheduler=args.scheduler)
    written = report.write(result, args.out)
    print(report.table(written))
    print()
    print(report.vs_fair_table(written))
    out = Path(args.out)
    print(f"\n{len(result.runs)} runs -> {out / 'report.json'}, {out / 'summary.md'}, "
          f"{out / 'jct_cdf.png'}, {out / 'slowdown_cdf.png'}")
    return 0


def cmd_schedulers(args: argparse.Namespace) -> int:
    from mltcp.lab.cluster.orders import ORDERS
    from mltcp.lab.cluster.placement import POLICIES
    from mltcp.lab.cluster.registry import FLAGS, NAMED, NETWORKS

    known = {"orders": list(ORDERS), "placements": list(POLICIES), "flags": list(FLAGS),
             "named": sorted(NAMED), "networks": list(NETWORKS)}
    if getattr(args, "json", False):
        emit(known)
        return 0
    print("schedulers: ORDER/PLACEMENT[+" + "][+".join(known["flags"]) + "], e.g. "
          "fifo/consolidated, las/consolidated+preempt")
    print(f"  orders:     {', '.join(known['orders'])}")
    print(f"  placements: {', '.join(known['placements'])}")
    print(f"  named:      {', '.join(known['named']) or '(none registered)'}")
    print(f"networks:     {', '.join(known['networks'])}")
    return 0
