"""Where a job's GPUs go: the placement half of a scheduler.

Each policy takes the free GPUs per server and a GPU count and returns the job's
(server, GPUs) pairs, or None when the job does not fit now.  They differ in how they
trade fragmentation against network traffic:

* ``first_fit``: servers in order, taking what each has free (the simplest packing);
* ``consolidated``: as few servers as possible: one server that fits the job (the
  fullest that does: best fit), else whole free servers under as few leaves as
  possible, then the rest from the fullest server (jobs stay off the network when
  they can, and off the spine when they must cross it);
* ``random``: GPUs drawn at random among all free ones (spreads every job, the
  network-heavy end; a baseline in the schedulers' papers).
"""

from __future__ import annotations

import random as _random
from collections.abc import Callable

import numpy as np

from mltcp.lab.cluster.engine.leafspine import LeafSpine

Placement = tuple[tuple[int, int], ...]
Policy = Callable[[LeafSpine, np.ndarray, int, _random.Random], Placement | None]


def first_fit(fabric: LeafSpine, free: np.ndarray, gpus: int,
              rng: _random.Random) -> Placement | None:
    if free.sum() < gpus:
        return None
    out, need = [], gpus
    for server in np.flatnonzero(free):
        take = min(int(free[server]), need)
        out.append((int(server), take))
        need -= take
        if need == 0:
            return tuple(out)
    return None


def consolidated(fabric: LeafSpine, free: np.ndarray, gpus: int,
                 rng: _random.Random) -> Placement | None:
    if free.sum() < gpus:
        return None
    fits = np.flatnonzero(free >= gpus)
    if len(fits):                                   # one server: best fit
        server = int(fits[np.argmin(free[fits])])
        return ((server, gpus),)
    per = fabric.gpus_per_server
    whole = free == per
    by_leaf = whole.reshape(fabric.leaves, fabric.servers_per_leaf).sum(axis=1)
    out, need = [], gpus
    for leaf in np.argsort(-by_leaf, kind="stable"):          # most whole servers first
        for server in range(leaf * fabric.servers_per_leaf,
                            (leaf + 1) * fabric.servers_per_leaf):
            if need >= per and whole[server]:
                out.append((server, per))
                need -= per
        if need < per:
            break
    taken = {s for s, _ in out}
    while need > 0:                                 # the rest: fullest partial servers
        candidates = [s for s in np.flatnonzero(free) if int(s) not in taken]
        if not candidates:
            return None
        server = int(max(candidates, key=lambda s: (min(int(free[s]), need), -s)))
        take = min(int(free[server]), need)
        out.append((server, take))
        taken.add(server)
        need -= take
    return tuple(out)


def spread(fabric: LeafSpine, free: np.ndarray, gpus: int,
           rng: _random.Random) -> Placement | None:
    if free.sum() < gpus:
        return None
    slots = [int(s) for s in np.flatnonzero(free) for _ in range(int(free[s]))]
    chosen = rng.sample(slots, gpus)
    counts: dict[int, int] = {}
    for s in chosen:
        counts[s] = counts.get(s, 0) + 1
    return tuple(sorted(counts.items()))


POLICIES: dict[str, Policy] = {"first_fit": first_fit, "consolidated": consolidated,
                               "random": spread}
