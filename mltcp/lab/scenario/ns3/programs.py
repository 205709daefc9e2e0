"""The ns-3 scenario programs: where they are, and which one builds a topology kind.

The programs live in ``ns3_scenarios/`` at the top of the repository, runnable on their
own and editable by researchers; the wheel carries a copy inside this package
(``mltcp/lab/scenario/ns3/scenarios/``).  The ns-3 backend builds every run's network with the
program of its topology kind, so the programs cannot drift from what the backend runs.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path
from types import ModuleType

from mltcp.core.errors import MltcpError

PROGRAMS = {"dumbbell": "dumbbell.py", "leaf_spine": "leaf_spine.py"}


def directory() -> Path:
    """$MLTCP_NS3_SCENARIOS, else the copy a wheel carries, else the checkout's
    ``ns3_scenarios/``."""
    env = os.environ.get("MLTCP_NS3_SCENARIOS")
    if env:
        return Path(env)
    here = Path(__file__).resolve().parent
    packaged = here / "scenarios"
    if (packaged / PROGRAMS["dumbbell"]).is_file():
        return packaged
    return here.parents[3] / "ns3_scenarios"


def load(kind: str) -> ModuleType:
    """The program that builds topologies of ``kind`` (it defines ``build(ns, plan)``)."""
    path = directory() / PROGRAMS[kind]
    if not path.is_file():
        raise MltcpError(f"no ns-3 scenario program for {kind} at {path}: reinstall mltcp or "
                         "set MLTCP_NS3_SCENARIOS to the checkout's ns3_scenarios/")
    spec = importlib.util.spec_from_file_location(f"mltcp_ns3_scenario_{kind}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
