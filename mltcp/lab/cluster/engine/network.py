"""How the network shares links among a cluster's running jobs: the network scheme.

A scheme is the one thing that differs between two runs of the same jobs under the same
scheduler: fair sharing (the standard congestion control: max-min fair per flow), MLTCP
(each flow's share grows with its iteration's bytes sent: F), or a scheme that
prioritises or shifts jobs (Ada-SRSF's communication order, Cassini's time shifts).
The simulator asks it, at every rebuild of the running set, for F and for each job's
flow weight; a scheme that keeps no state answers from the running jobs alone.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from mltcp.core.aggressiveness import Aggressiveness
from mltcp.core.errors import SpecError
from mltcp.lab.cluster.engine.leafspine import LeafSpine
from mltcp.lab.cluster.engine.scheduling import RunningJob


@dataclass(frozen=True)
class Network:
    """Fair sharing (``f`` None) or MLTCP's ``f``; subclasses add job weights."""

    name: str = "fair"
    f: Aggressiveness | None = None

    def job_weights(self, running: Sequence[RunningJob], now: float) -> list[float] | None:
        """Each running job's flow weight (None: all 1)."""
        return None

    def delays(self, fabric: LeafSpine, seed: int, running: Sequence[RunningJob],
               comm_start_s: Sequence[float], now: float) -> Sequence[float | None] | None:
        """How long to hold back each running job's next communication, given when its
        current or next one starts (None: no holds; a scheme that shifts jobs in time,
        Cassini's, answers)."""
        return None


def fair(fabric: object = None) -> Network:
    return Network("fair", None)


def mltcp(fabric: object = None, slope: float = 4.0, intercept: float = 1.0) -> Network:
    return Network("mltcp", Aggressiveness(slope=slope, intercept=intercept))


# The schemes that are a congestion control alone (no job ranked, none shifted in
# time).  The papers' schemes are registered beside them by name in
# :mod:`mltcp.lab.cluster.experiments.registry`.
CONGESTION_CONTROLS = {"fair": fair, "mltcp": mltcp}


def congestion_control(name: str, fabric: LeafSpine | None = None) -> Network:
    """The scheme ``name`` of :data:`CONGESTION_CONTROLS`."""
    if name not in CONGESTION_CONTROLS:
        raise SpecError("network", f"scheme {name!r} is not a congestion control alone",
                        f"use one of: {', '.join(CONGESTION_CONTROLS)}")
    return CONGESTION_CONTROLS[name](fabric)
