"""Schedulers and network schemes by name, as configs and the CLI name them.

A scheduler is written ``ORDER/PLACEMENT`` (e.g. ``fifo/consolidated``,
``srtf/first_fit``), with ``+preempt`` for a preemptive order (``las/consolidated+preempt``)
and ``+backfill`` to let jobs that fit pass a waiting head; or the name of one of the
seeds' schedulers that decides differently (registered in :data:`NAMED`).
"""

from __future__ import annotations

from collections.abc import Callable

from mltcp.core.errors import SpecError
from mltcp.lab.cluster.fabric import LeafSpine
from mltcp.lab.cluster.orders import ORDERS, order
from mltcp.lab.cluster.placement import POLICIES
from mltcp.lab.cluster.scheduler import QueueScheduler, Scheduler, placement_from

# Preemptive orders re-rank every this many seconds as well (Tiresias' LAS uses rounds of
# minutes; a job is only preempted for one that ranks before it).
PREEMPT_ROUND_S = 60.0
FLAGS = ("preempt", "backfill")

NAMED: dict[str, Callable[[LeafSpine], Scheduler]] = {}


def scheduler(spec: str, fabric: LeafSpine) -> Scheduler:
    """The scheduler ``spec`` names on ``fabric``."""
    if spec in NAMED:
        return NAMED[spec](fabric)
    base, *flags = spec.split("+")
    order_name, sep, place_name = base.partition("/")
    fix = (f"write ORDER/PLACEMENT[+preempt][+backfill] with ORDER one of "
           f"{', '.join(ORDERS)} and PLACEMENT one of {', '.join(POLICIES)}"
           + (f", or one of {', '.join(NAMED)}" if NAMED else ""))
    if not sep or order_name not in ORDERS or place_name not in POLICIES:
        raise SpecError("scheduler", f"unknown scheduler {spec!r}", fix)
    bad = [f for f in flags if f not in FLAGS]
    if bad:
        raise SpecError("scheduler", f"unknown flag +{bad[0]} in {spec!r}", fix)
    preempt = "preempt" in flags
    return QueueScheduler(spec, order(order_name, fabric), placement_from(POLICIES[place_name]),
                          blocking="backfill" not in flags, preemptive=preempt,
                          round_s=PREEMPT_ROUND_S if preempt else 0.0)
