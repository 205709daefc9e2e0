"""Schedulers and network schemes by name, as configs and the CLI name them.

A scheduler is written ``ORDER/PLACEMENT`` (e.g. ``fifo/consolidated``,
``srtf/first_fit``), with ``+preempt`` for a preemptive order (``las/consolidated+preempt``)
and ``+backfill`` to let jobs that fit pass a waiting head; or the name of one of the
papers' schedulers that decides differently (registered in :data:`NAMED`).  A network
scheme is a name in :data:`NETWORKS`.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

from mltcp.core.errors import SpecError
from mltcp.lab.cluster.engine import network as _network
from mltcp.lab.cluster.engine.leafspine import LeafSpine
from mltcp.lab.cluster.engine.network import Network
from mltcp.lab.cluster.engine.scheduling import Scheduler
from mltcp.lab.cluster.papers.ada_srsf import schedulers as ada_srsf
from mltcp.lab.cluster.papers.cassini import schedulers as cassini_sched
from mltcp.lab.cluster.papers.cassini import themis as cassini_themis
from mltcp.lab.cluster.papers.cassini import timeshifts as cassini_net
from mltcp.lab.cluster.papers.deepshare_rl import schedulers as rl_sched
from mltcp.lab.cluster.papers.deepshare_rl import setup as deepshare
from mltcp.lab.cluster.papers.vclos import schedulers as vclos
from mltcp.lab.cluster.schedulers.orders import ORDERS, order
from mltcp.lab.cluster.schedulers.placement import POLICIES
from mltcp.lab.cluster.schedulers.queue import QueueScheduler, placement_from

# Preemptive orders re-rank every this many seconds as well (Tiresias' LAS uses rounds of
# minutes; a job is only preempted for one that ranks before it).
PREEMPT_ROUND_S = 60.0
FLAGS = ("preempt", "backfill")

NAMED: dict[str, Callable[[LeafSpine], Scheduler]] = {
    **ada_srsf.SCHEDULERS, **vclos.SCHEDULERS, "cassini": cassini_sched.cassini,
    "themis": cassini_themis.themis, "themis-cassini": cassini_sched.themis_cassini,
    "deepshare-las": lambda fabric: deepshare.baseline("las", fabric),
    "deepshare-srtf": lambda fabric: deepshare.baseline("srtf", fabric),
    "rl-base": lambda fabric: rl_sched.rl_scheduler("rl-base", fabric),
    "rl-hybrid": lambda fabric: rl_sched.rl_scheduler("rl-hybrid", fabric),
    **{name: (lambda fabric, name=name: rl_sched.rule_scheduler(name, fabric))
       for name in ("deepshare-first-fit", "deepshare-random")},
}
# rl-base@PATH / rl-hybrid@PATH: the RL scheduler with the policy checkpoint at PATH
POLICY_SEP = "@"

NETWORKS: dict[str, Callable[[LeafSpine], Network]] = {
    **_network.CONGESTION_CONTROLS,
    "ada-dual": ada_srsf.ada_dual, "cassini": cassini_net.cassini_network,
    **{f"srsf-{n}": (lambda fabric, n=n: ada_srsf.srsf_comm(fabric, n)) for n in (1, 2, 3)},
}


def network(name: str, fabric: LeafSpine) -> Network:
    """The network scheme ``name`` on ``fabric`` (schemes that rank jobs need it)."""
    if name not in NETWORKS:
        raise SpecError("network", f"unknown scheme {name!r}",
                        f"use one of: {', '.join(NETWORKS)}")
    return NETWORKS[name](fabric)


@dataclass(eq=False)
class SchedulerSpec:
    """A scheduler spec, parsed and checked against a fabric once (what a config holds
    for each of its schedulers).  Checking builds the scheduler (a scheduler checks its
    fabric when made); that one goes to the first run, and each later run gets a fresh
    one from :meth:`build` (a scheduler keeps one run's state).  ``identity``: the
    scheduler it builds, whatever the spelling (flags in one order, an RL policy by
    its file), so that a config cannot list one scheduler twice as two."""

    spec: str
    make: Callable[[], Scheduler] = field(repr=False)
    identity: str = ""
    _checked: Scheduler | None = field(default=None, init=False, repr=False)

    def __post_init__(self) -> None:
        self.identity = self.identity or self.spec
        self._checked = self.make()

    def build(self) -> Scheduler:
        checked, self._checked = self._checked, None
        return checked if checked is not None else self.make()

    def check_network(self, scheme: Network) -> None:
        """Refuse a network scheme this scheduler cannot run with: a one-line SpecError
        from a scheduler with a ``check_network`` of its own (Ada-SRSF's time-shared
        GPUs run only its gates and fair sharing); nothing for the others."""
        if self._checked is None:
            self._checked = self.make()
        check = getattr(self._checked, "check_network", None)
        if check is not None:
            check(scheme)


RL_KINDS = ("rl-base", "rl-hybrid")


def parse_scheduler(spec: str, fabric: LeafSpine, base_dir: Path | None = None
                    ) -> SchedulerSpec:
    """The scheduler ``spec`` names on ``fabric``, checked; a one-line SpecError
    otherwise.  An RL policy's path (``rl-base@PATH``) is taken relative to
    ``base_dir``, the config's directory, as the config's other paths are."""
    kind, sep, policy = spec.partition(POLICY_SEP)
    if kind in RL_KINDS and (sep or spec == kind):
        path = rl_sched.policy_path(policy if sep else None, base_dir)
        return SchedulerSpec(spec, partial(rl_sched.rl_scheduler, kind, fabric, path, spec),
                             f"{kind}@{os.path.realpath(path)}")   # a loop raises no error
    if spec in NAMED:
        return SchedulerSpec(spec, partial(NAMED[spec], fabric))
    base, *flags = spec.split("+")
    order_name, sep, place_name = base.partition("/")
    fix = (f"write ORDER/PLACEMENT[+preempt][+backfill] with ORDER one of "
           f"{', '.join(ORDERS)} and PLACEMENT one of {', '.join(POLICIES)}"
           + (f", or one of {', '.join(NAMED)}" if NAMED else ""))
    if not sep or order_name not in ORDERS or place_name not in POLICIES:
        raise SpecError("scheduler", f"unknown scheduler {spec!r}", fix)
    _check_flags(spec, flags, fix)
    preempt = "preempt" in flags

    def make() -> Scheduler:
        return QueueScheduler(spec, order(order_name, fabric),
                              placement_from(POLICIES[place_name]),
                              blocking="backfill" not in flags, preemptive=preempt,
                              round_s=PREEMPT_ROUND_S if preempt else 0.0)

    return SchedulerSpec(spec, make, base + "".join(f"+{f}" for f in FLAGS if f in flags))


def _check_flags(spec: str, flags: list[str], fix: str) -> None:
    """Known flags, each once: ``+preempt+preempt`` is a typo, not a stronger preempt."""
    bad = [f for f in flags if f not in FLAGS]
    if bad:
        raise SpecError("scheduler", f"unknown flag +{bad[0]} in {spec!r}", fix)
    twice = [f for i, f in enumerate(flags) if f in flags[:i]]
    if twice:
        raise SpecError("scheduler", f"flag +{twice[0]} is given twice in {spec!r}",
                        "give each flag once")


def scheduler(spec: str, fabric: LeafSpine, base_dir: Path | None = None) -> Scheduler:
    """The scheduler ``spec`` names on ``fabric`` (parsed and built at once)."""
    return parse_scheduler(spec, fabric, base_dir).build()
