"""The papers' cluster experiments by name: what an experiment's ``[jobs] setup = NAME``
runs (:mod:`mltcp.lab.cluster.experiments.config`).

Each paper's setup lives with its reproduction (``papers/<paper>/setup.py``); this
module only lists them.  The setups: Ada-SRSF (ada-srsf §V: 16 x 4 V100 on 10 GbE, 160
jobs), vClos's CLUSTER512 with FIFO (vclos §9: 512 GPUs, 5000 Helios-like jobs,
Poisson gaps of 120 s), Cassini's Poisson trace (thesis §4.5: 24 A100 servers at 50
Gbit/s, 13 models) and the RL scheduler's four traces (deepshare-rl §VI).
"""

from __future__ import annotations

from mltcp.core.errors import SpecError
from mltcp.lab.cluster.engine.gpu_jobs import JobRequest
from mltcp.lab.cluster.papers.ada_srsf.setup import ADA_SRSF
from mltcp.lab.cluster.papers.cassini.setup import CASSINI_POISSON
from mltcp.lab.cluster.papers.deepshare_rl.setup import DEEPSHARE
from mltcp.lab.cluster.papers.figures import PaperSetup
from mltcp.lab.cluster.papers.vclos.setup import VCLOS_CLUSTER512

SETUPS: dict[str, PaperSetup] = {s.key: s for s in (ADA_SRSF, VCLOS_CLUSTER512,
                                                      CASSINI_POISSON, *DEEPSHARE)}


def names() -> tuple[str, ...]:
    return tuple(SETUPS)


def setup(key: str) -> PaperSetup:
    """The paper's setup ``key``; a SpecError listing the keys otherwise."""
    try:
        return SETUPS[key]
    except KeyError:
        raise SpecError("setup", f"unknown setup {key!r}",
                        f"use one of: {', '.join(SETUPS)}") from None


def jobs(key: str, seed: int = 0) -> list[JobRequest]:
    """The jobs of setup ``key`` for ``seed`` (what an experiment's ``[jobs] setup``
    runs; :mod:`mltcp.lab.cluster.experiments.config`)."""
    return setup(key).jobs(seed)
