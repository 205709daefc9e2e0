"""The registry of backends: where a scenario's plans can run, by name.

Every backend implements :class:`mltcp.lab.scenario.backends.base.Backend` in one module of this
package; the registry below lists them by name with a one-line summary, and nothing
here imports a backend: listing them (``mltcp backends``, the CLI's ``--backend``
choices) costs nothing, and a backend's own dependencies (ns-3, numpy, root) are only
touched by :func:`get`.  Adding a backend is one module and one line in ``REGISTRY``.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from mltcp.core.errors import SpecError

if TYPE_CHECKING:
    from mltcp.lab.scenario.backends.base import Backend


@dataclass(frozen=True)
class Entry:
    """One registry line: the backend's name, its module, what it is."""

    name: str
    module: str
    summary: str


REGISTRY: tuple[Entry, ...] = (
    Entry("netns", "mltcp.lab.scenario.backends.netns",
          "real kernel TCP and the eBPF datapath, hosts in network namespaces (root)"),
    Entry("fluid", "mltcp.lab.scenario.backends.fluid",
          "flow-level model, weighted max-min rates (seconds, no root)"),
    Entry("ns3", "mltcp.lab.scenario.backends.ns3",
          "packet-level ns-3 with the MLTCP TCP classes (pip install 'mltcp[ns3]')"),
    Entry("dcqcn", "mltcp.lab.scenario.backends.dcqcn",
          "RoCE: every scheme on the DCQCN model, MLTCP through the tuner's knob policy"),
    Entry("hosts", "mltcp.lab.scenario.backends.hosts",
          "real PyTorch DDP training on the hosts of an inventory, over SSH "
          "(--inventory FILE; pip install 'mltcp[torch]' on the hosts)"),
)


def names() -> tuple[str, ...]:
    """Every registered backend's name, in registry order."""
    return tuple(entry.name for entry in REGISTRY)


def entry(name: str) -> Entry:
    """The registry line of ``name``; an unknown name is a one-line error listing them."""
    for e in REGISTRY:
        if e.name == name:
            return e
    raise SpecError("backend", f"unknown backend {name!r}", f"use one of: {', '.join(names())}")


def get(name: str, **options: Any) -> Backend:
    """An instance of backend ``name`` (its module imported now), built with ``options``."""
    module = importlib.import_module(entry(name).module)
    return module.BACKEND(**options)
