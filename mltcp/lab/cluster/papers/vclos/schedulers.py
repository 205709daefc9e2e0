"""vClos and OCS-vClos: contention-free placement on a leaf-spine, and the paper's baselines.

The vclos paper ("Isolated Scheduling for Distributed Training Tasks in GPU
Clusters").  Its argument, as this module follows it:

* §5.2 (Lemma 5.1): with *source routing* (the source picks the spine) a traffic pattern
  in which no two flows from different leaves head for the same leaf through the same
  spine is contention-free.  A ring whose servers are grouped by leaf (every leaf one
  contiguous block of the ring, §5.3's Ring case) is such a pattern: each leaf of the
  job sends exactly one flow to another leaf and receives exactly one.  So a job's own
  flows never share a leaf-spine link, whatever spine each of them takes.
* §6.1 vClos: give each job its own sub-network ("virtual Clos") so that jobs never
  share a link either.  GPUs follow the locality rule: Stage 0, a job of at most ``T``
  GPUs (a server's) goes on one server, the one with the fewest free GPUs that holds it;
  Stage 1, a larger job takes ``ceil(N / T)`` idle servers under one leaf, the leaf with
  the fewest idle servers that suffice; Stage 2, else it spans leaves, each of its
  leaf-to-leaf flows on a spine whose two links (source leaf up, destination leaf down)
  no other job uses.  "If vClos cannot be generated, the task will enter the waiting
  phase": the placement returns None and, FIFO being the paper's scheduler (§4.3, §8.1,
  §9.2), the job waits at the head of the queue and nobody passes it.
* §7 OCS-vClos: optical circuit switches between leaves and spines rewire *idle*
  leaf-spine links so that fragments of free ports become usable; Stage 2 places the
  job "within one Spine" (the spine with the fewest but enough free ports), Stage 3
  over several spines.
* §9.3 baselines, on the same GPUs as vClos but without link reservation (they never
  wait for the network): ECMP (the fabric's hash), *Source Routing* (SR: a fixed map
  from a leaf's server port to a spine port, §5.2) and *Balanced ECMP* (each flow on
  the source leaf's least loaded uplink, ties at random: ECMP's port choice made by
  load, blind to the destination leaf's links as the hash is).

How the paper's terms map onto :class:`~mltcp.lab.cluster.engine.leafspine.LeafSpine`: the paper
binds one NIC per GPU (§4.1), which is the fabric's ``rails`` (one NIC a GPU: ``rails =
gpus_per_server``), and a job's network use is one ring per rail over its servers
(:mod:`mltcp.lab.cluster.engine.gpu_jobs`; §5.3: "for rings with multiple channels, we only need to
construct an independent communication plane for each ring").  Every leaf of a ring
grouped by leaf sends one hop to the next leaf and receives one, so on each of its leaves
a job uses ``rails`` uplinks and ``rails`` downlinks; vClos gives every (hop, rail) its
own spine, free at both ends, so no two flows, of one job or of two, share a leaf-spine
link.  Links are directed and full duplex here, so vClos reserves the directed links its
flows use (the paper reserves whole cables; that would only make a job wait more often,
never contend less).

Approximations, stated plainly:

* The paper solves Stage 2 with an ILP whose objective it does not give.  Here, since each
  leaf of a job has one outgoing and one incoming inter-leaf flow, the spine of each
  flow can be chosen on its own (any spine free at both ends); what is searched is the
  set of leaves and their order around the ring (a cycle in the "some spine is free
  from a to b" graph), fewest leaves first, within :data:`SEARCH_STEPS` steps; when the
  search runs out the job waits as if no vClos existed.  Each flow takes the spine with
  the fewest free links among those free at both ends (best fit, as §7.2 sorts spines).
* OCS-vClos cannot be expressed faithfully: the OCS joins *any* free up-port of leaf a
  to *any* free down-port of leaf b (through a spine with free ports, or directly for a
  two-leaf job), but :meth:`LeafSpine.path` sends a flow up and down the same spine
  index, so a flow up (a, p) and down (b, q) with p != q has no name in this model.  The
  variant here keeps what can be named: OCS-vClos's stage order (one spine for the whole
  job when some spine has free links both ways at enough leaves, the spine with the
  fewest such leaves first; else vClos's search).  It admits exactly the jobs vClos
  admits, so it cannot show §7's lower fragmentation (Table 2); doing so needs a route
  of two spine indices per flow (``Allocation.spines`` as (up, down) pairs and
  ``LeafSpine.path`` taking both).
* The paper's *Best* (one electric switch joining all servers) is not a placement on this
  fabric; a job's ``dedicated_s`` (alone on its GPUs and paths) is its bound here.
* The paper's virtual Clos gives a leaf holding k of a job's GPUs k uplinks (a
  non-blocking sub-Clos, which AlltoAll or HD traffic would need); a ring uses only
  ``rails`` of them, and here only those are reserved.  So a leaf with more than one of
  a job's servers keeps spare uplinks for other jobs and vClos waits less often than the
  paper's (its Table 2 counts the waits for network).
* The paper's remark that a vClos needs N to be "a prime number" (§6.1, garbled in the
  source) does not apply to a ring over servers: any server count forms one.
* Running jobs routed by ECMP (``spines`` None) hash with the simulator's seed, which a
  scheduler does not see: vClos counts such a flow as using every spine between its
  leaves (so it never lands on a link one might use), Balanced ECMP as 1/spines on each.
* OCS-vClos's "one spine" with several rails is one spine per rail, the same for every
  hop of the ring (one rail's flows would otherwise share a leaf's single link to it).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from mltcp.core.errors import SpecError
from mltcp.lab.cluster.engine.leafspine import LeafSpine
from mltcp.lab.cluster.engine.scheduling import Allocation, ClusterView, QueuedJob
from mltcp.lab.cluster.schedulers.orders import fifo
from mltcp.lab.cluster.schedulers.queue import PlacementFn, QueueScheduler

# Nodes the multi-leaf search may visit for one job before it gives up (the job then
# waits).  The paper's ILP takes about a second on 2048 GPUs; a bounded search keeps a
# long simulation's scheduling time bounded instead.
SEARCH_STEPS = 20_000


@dataclass(frozen=True)
class LinkUse:
    """Flows on each leaf->spine (``up``) and spine->leaf (``down``) link, indexed
    ``[leaf, spine]``: 1 per source-routed flow (one per rail of a hop); an ECMP flow,
    whose spine the scheduler cannot know, 1/spines on each spine between its two
    leaves."""

    up: np.ndarray
    down: np.ndarray

    def free_up(self) -> np.ndarray:
        return self.up == 0

    def free_down(self) -> np.ndarray:
        return self.down == 0


def ring_leaf_edges(fabric: LeafSpine, servers: Sequence[int]) -> list[tuple[int, int, int]]:
    """``(flow index, source leaf, destination leaf)`` of each ring flow that crosses
    leaves (flow i goes from the i-th server to the next)."""
    m = len(servers)
    if m < 2:
        return []
    out = []
    for i, src in enumerate(servers):
        a, b = fabric.leaf_of(src), fabric.leaf_of(servers[(i + 1) % m])
        if a != b:
            out.append((i, a, b))
    return out


def link_use(view: ClusterView) -> LinkUse:
    """The leaf-spine links of the running jobs and of those this decision has already
    placed (``view.planned``), from their servers and spines (one per hop and rail)."""
    fabric = view.fabric
    rails = fabric.rails
    up = np.zeros((fabric.leaves, fabric.spines))
    down = np.zeros((fabric.leaves, fabric.spines))
    rings = [(r.job.servers, r.job.spines) for r in view.running]
    rings += [(tuple(s for s, _ in a.gpus), a.spines) for _, a in view.planned]
    for servers, spines in rings:
        for i, a, b in ring_leaf_edges(fabric, servers):
            if spines is None:
                up[a] += rails / fabric.spines
                down[b] += rails / fabric.spines
            else:
                for p in spines[i * rails:(i + 1) * rails]:
                    up[a, p] += 1.0
                    down[b, p] += 1.0
    return LinkUse(up, down)


# -- the GPUs: the paper's locality rule (Stages 0 and 1, and the leaves of Stage 2)

def servers_needed(fabric: LeafSpine, gpus: int) -> int:
    """A job of more than a server's GPUs takes whole idle servers: ``ceil(N / T)``."""
    return math.ceil(gpus / fabric.gpus_per_server)


def idle_by_leaf(fabric: LeafSpine, free: np.ndarray) -> list[list[int]]:
    """Each leaf's idle servers (all GPUs free), lowest index first."""
    per, spl = fabric.gpus_per_server, fabric.servers_per_leaf
    return [[s for s in range(leaf * spl, (leaf + 1) * spl) if free[s] == per]
            for leaf in range(fabric.leaves)]


def one_server(free: np.ndarray, gpus: int) -> int | None:
    """Stage 0: the server with the fewest free GPUs that holds the job (best fit)."""
    fits = np.flatnonzero(free >= gpus)
    return None if not len(fits) else int(fits[np.argmin(free[fits])])


def one_leaf(idle: list[list[int]], need: int) -> list[int] | None:
    """Stage 1: ``need`` idle servers of the leaf with the fewest idle servers that has
    enough (the paper's ``validLeafList.sort()``; ties: the lower leaf)."""
    leaves = [leaf for leaf, servers in enumerate(idle) if len(servers) >= need]
    if not leaves:
        return None
    best = min(leaves, key=lambda leaf: (len(idle[leaf]), leaf))
    return idle[best][:need]


def split_gpus(fabric: LeafSpine, servers: Sequence[int], gpus: int) -> tuple[tuple[int, int], ...]:
    """A server's GPUs on each server in ring order, the remainder on the last."""
    per = fabric.gpus_per_server
    out = [(s, per) for s in servers[:-1]]
    return (*out, (servers[-1], gpus - per * (len(servers) - 1)))


def leaf_counts(idle: list[list[int]], leaves: Sequence[int], need: int) -> list[int]:
    """Servers each leaf of a ring gives: one each, then filled in ring order (so the
    leaves tried first, those with the most idle servers, give all they have)."""
    counts = [1] * len(leaves)
    rest = need - len(leaves)
    for i, leaf in enumerate(leaves):
        add = min(len(idle[leaf]) - 1, rest)
        counts[i] += add
        rest -= add
    return counts


def ring_servers(idle: list[list[int]], leaves: Sequence[int], need: int) -> list[int]:
    """The ring's servers, each leaf's as one block (lowest indices), leaves in order."""
    counts = leaf_counts(idle, leaves, need)
    return [s for leaf, n in zip(leaves, counts, strict=True) for s in idle[leaf][:n]]


def most_idle_leaves(idle: list[list[int]], need: int) -> list[int] | None:
    """The fewest leaves holding ``need`` idle servers, most idle first (the baselines'
    multi-leaf rule: vClos's leaves without its link constraint)."""
    order = sorted(range(len(idle)), key=lambda leaf: (-len(idle[leaf]), leaf))
    got, out = 0, []
    for leaf in order:
        if got >= need or not idle[leaf]:
            break
        out.append(leaf)
        got += len(idle[leaf])
    return out if got >= need else None


# -- vClos's Stage 2: a cycle of leaves whose every hop has a spine free at both ends

class _OutOfSteps(Exception):
    pass


def leaf_cycle(idle_count: Sequence[int], hop: np.ndarray, need: int,
               steps: int = SEARCH_STEPS) -> list[int] | None:
    """An order of distinct leaves (at least two, at most ``need``) holding ``need`` idle
    servers in all, in which every hop, the last back to the first included, has
    ``hop[a, b]`` true; the fewest leaves first, leaves with more idle servers tried
    first.  None when there is none, or none found within ``steps`` visits."""
    order = [leaf for leaf in sorted(range(len(idle_count)),
                                     key=lambda x: (-idle_count[x], x))
             if idle_count[leaf] > 0 and hop[leaf].any() and hop[:, leaf].any()]
    counts = [idle_count[leaf] for leaf in order]
    left = [steps]

    def extend(path: list[int], got: int, size: int) -> list[int] | None:
        left[0] -= 1
        if left[0] < 0:
            raise _OutOfSteps
        if len(path) == size:
            return path if got >= need and hop[path[-1], path[0]] else None
        room = size - len(path)
        if got + sum(counts[:room]) < need:     # even the largest leaves fall short
            return None
        for leaf in order:
            if leaf in path or not hop[path[-1], leaf]:
                continue
            found = extend([*path, leaf], got + idle_count[leaf], size)
            if found:
                return found
        return None

    try:
        for size in range(2, min(need, len(order)) + 1):
            if sum(counts[:size]) < need:
                continue
            for first in order:
                found = extend([first], idle_count[first], size)
                if found:
                    return found
    except _OutOfSteps:
        return None
    return None


def hop_matrix(use: LinkUse, rails: int) -> np.ndarray:
    """``hop[a, b]``: at least ``rails`` spines are free up from ``a`` and down to ``b``
    (a hop of every rail's ring on a spine of its own)."""
    counts = (use.free_up()[:, None, :] & use.free_down()[None, :, :]).sum(axis=2)
    hop = counts >= rails
    np.fill_diagonal(hop, False)
    return hop


def best_fit_spines(up_free: np.ndarray, down_free: np.ndarray, a: int, b: int,
                    k: int = 1) -> tuple[int, ...]:
    """Of the spines free up from ``a`` and down to ``b``, the ``k`` with the fewest free
    links (keeps emptier spines whole for later jobs); ties: the lower spine."""
    both = np.flatnonzero(up_free[a] & down_free[b])
    free_links = up_free.sum(axis=0) + down_free.sum(axis=0)
    return tuple(sorted((int(p) for p in both),
                        key=lambda p: (int(free_links[p]), p))[:k])


def best_fit_spine(up_free: np.ndarray, down_free: np.ndarray, a: int, b: int) -> int:
    """The one best-fit spine of :func:`best_fit_spines` (one rail)."""
    return best_fit_spines(up_free, down_free, a, b)[0]


def route(fabric: LeafSpine, servers: Sequence[int],
          pick: Callable[[int, int, int], Sequence[int]]) -> tuple[int, ...]:
    """Spines for a ring, one per (flow, rail), flow-major: ``pick(flow, source leaf,
    destination leaf)`` gives a spine per rail for each flow that crosses leaves; 0 for
    the others (:meth:`LeafSpine.path` ignores it under one leaf)."""
    rails = fabric.rails
    spines = [0] * (len(servers) * rails)
    for i, a, b in ring_leaf_edges(fabric, servers):
        picked = tuple(pick(i, a, b))
        if len(picked) != rails:
            raise ValueError(f"flow {i}: {len(picked)} spines for {rails} rails")
        spines[i * rails:(i + 1) * rails] = picked
    return tuple(spines)


def _stages_0_1(view: ClusterView, job: QueuedJob
                ) -> tuple[Allocation | None, tuple[list[list[int]], int] | None]:
    """``(placed, rest)``: the job placed by Stage 0 (one server) or Stage 1 (one leaf);
    else ``rest`` = (idle servers per leaf, servers needed) when enough idle servers
    exist for a ring over leaves, or None when the job must wait for GPUs (a job of one
    server's GPUs is never split: the paper's locality constraint)."""
    fabric, n = view.fabric, job.gpus
    if n <= fabric.gpus_per_server:
        server = one_server(view.free, n)
        return (None if server is None else Allocation(((server, n),))), None
    need = servers_needed(fabric, n)
    idle = idle_by_leaf(fabric, view.free)
    servers = one_leaf(idle, need)
    if servers is not None:
        return Allocation(split_gpus(fabric, servers, n)), None
    if sum(len(s) for s in idle) < need:
        return None, None
    return None, (idle, need)


def _vclos_stage2(view: ClusterView, job: QueuedJob, idle: list[list[int]],
                  need: int) -> Allocation | None:
    rails = view.fabric.rails
    use = link_use(view)
    up_free, down_free = use.free_up(), use.free_down()
    leaves = leaf_cycle([len(s) for s in idle], hop_matrix(use, rails), need)
    if leaves is None:
        return None
    servers = ring_servers(idle, leaves, need)
    # Each leaf of the cycle sends one hop and receives one, so the hops' spines never
    # compete for a link and each can take its best fit on its own.
    spines = route(view.fabric, servers,
                   lambda i, a, b: best_fit_spines(up_free, down_free, a, b, rails))
    return Allocation(split_gpus(view.fabric, servers, job.gpus), spines)


def vclos_placement(view: ClusterView, job: QueuedJob) -> Allocation | None:
    """vClos (vclos §6.1, Algorithm 1): Stage 0, Stage 1, then a ring over several leaves
    on leaf-spine links no other job uses; None (wait) when there is none."""
    placed, rest = _stages_0_1(view, job)
    if rest is None:
        return placed
    return _vclos_stage2(view, job, *rest)


def one_spine(view: ClusterView, idle: list[list[int]], need: int
              ) -> tuple[list[int], tuple[int, ...]] | None:
    """OCS-vClos's Stage 2 as this fabric can name it: leaves (most idle first, as few as
    hold ``need`` servers) whose links up to and down from one spine are both free, on
    the spine with the fewest such leaves that still suffices (vclos §7.2).  With several
    rails, that spine and the other ``rails - 1`` spines free both ways at all those
    leaves with the fewest such leaves (one spine per rail, the same for every hop);
    returns the leaves and the spines, rail by rail."""
    rails = view.fabric.rails
    use = link_use(view)
    both = use.free_up() & use.free_down()              # [leaf, spine]
    free_leaves = both.sum(axis=0)
    options = []
    for p in range(view.fabric.spines):
        usable = [servers if both[leaf, p] else [] for leaf, servers in enumerate(idle)]
        leaves = most_idle_leaves(usable, need)
        if leaves is None:
            continue
        others = [q for q in np.flatnonzero(both[leaves].all(axis=0)) if q != p]
        if len(others) < rails - 1:
            continue
        rest = sorted(others, key=lambda q: (int(free_leaves[q]), int(q)))[:rails - 1]
        options.append((int(free_leaves[p]), p, leaves, (p, *(int(q) for q in rest))))
    if not options:
        return None
    _, _, leaves, spines = min(options)
    return leaves, spines


def ocs_vclos_placement(view: ClusterView, job: QueuedJob) -> Allocation | None:
    """OCS-vClos (vclos §7, Algorithm 2) as far as this fabric can express it: Stages 0-1,
    then the whole ring through one spine, then vClos's multi-spine search (see the
    module's docstring for what the OCS would add and why it is not modelled)."""
    placed, rest = _stages_0_1(view, job)
    if rest is None:
        return placed
    idle, need = rest
    found = one_spine(view, idle, need)
    if found is None:
        return _vclos_stage2(view, job, idle, need)
    leaves, spines = found
    servers = ring_servers(idle, leaves, need)
    return Allocation(split_gpus(view.fabric, servers, job.gpus),
                      route(view.fabric, servers, lambda i, a, b: spines))


# -- the paper's baselines (§9.3): vClos's GPUs, routes that reserve nothing

def _baseline(routing: Callable[[ClusterView, Sequence[int]], tuple[int, ...] | None]
              ) -> PlacementFn:
    """Stages 0-1, else the fewest leaves with enough idle servers, routed by
    ``routing(view, ring servers)``; the job waits only for GPUs, never for links."""

    def place(view: ClusterView, job: QueuedJob) -> Allocation | None:
        placed, rest = _stages_0_1(view, job)
        if rest is None:
            return placed
        idle, need = rest
        leaves = most_idle_leaves(idle, need)
        if leaves is None:
            return None
        servers = ring_servers(idle, leaves, need)
        return Allocation(split_gpus(view.fabric, servers, job.gpus),
                          routing(view, servers))

    return place


def _ecmp(view: ClusterView, servers: Sequence[int]) -> None:
    return None


def _source_routing(view: ClusterView, servers: Sequence[int]) -> tuple[int, ...]:
    """vclos §5.2: leaf m maps its i-th server port to a spine port, f_m(i) = i here
    (mod the spines when a leaf has more server ports than spines); a server's ports are
    its rails, so rail r of the leaf's k-th server is port ``k x rails + r``."""
    fabric = view.fabric
    rails = fabric.rails

    def pick(i: int, a: int, b: int) -> tuple[int, ...]:
        first = servers[i] % fabric.servers_per_leaf * rails
        return tuple((first + r) % fabric.spines for r in range(rails))

    return route(fabric, servers, pick)


def _balanced(view: ClusterView, servers: Sequence[int]) -> tuple[int, ...]:
    """vclos §9.3's Balanced ECMP: "we randomly select the least congested ports to
    transmit instead of directly random ports", ECMP's choice made by load: the source
    leaf puts each flow on the uplink carrying the fewest flows (the job's own counted
    as they are routed), ties at random.  Like ECMP's hash it is the source leaf's
    choice among its own ports: the spine's link down to the destination leaf follows
    from the spine, and its load is not looked at, so flows of two jobs can still meet
    there."""
    up = link_use(view).up.copy()

    def one(a: int, b: int) -> int:
        load = up[a]
        p = view.rng.choice([int(x) for x in np.flatnonzero(load == load.min())])
        up[a, p] += 1.0
        return p

    # rail by rail, each seeing the rails already routed
    return route(view.fabric, servers,
                 lambda i, a, b: tuple(one(a, b) for _ in range(view.fabric.rails)))


locality_ecmp_placement = _baseline(_ecmp)
source_routing_placement = _baseline(_source_routing)
balanced_ecmp_placement = _baseline(_balanced)


# -- schedulers: FIFO with a blocking head, the paper's default (§4.3, §8.1, §9.2)

def _fifo(name: str, place: PlacementFn, reserves: bool = False
          ) -> Callable[[LeafSpine], QueueScheduler]:
    def make(fabric: LeafSpine) -> QueueScheduler:
        # A scheme that reserves a spine per rail would never start a job across leaves
        # with fewer spines than rails: it would wait forever; say so instead.
        if reserves and fabric.rails > fabric.spines:
            raise SpecError("cluster.rails", f"{fabric.rails} rails need as many spines "
                            f"for {name}'s link-disjoint rings, the cluster has "
                            f"{fabric.spines}", f"use at least {fabric.rails} spines")
        return QueueScheduler(name, fifo(fabric), place, blocking=True)
    make.__name__ = name.replace("-", "_")
    return make


vclos = _fifo("vclos", vclos_placement, reserves=True)
ocs_vclos = _fifo("ocs-vclos", ocs_vclos_placement, reserves=True)
source_routing = _fifo("vclos-sr", source_routing_placement)
balanced_ecmp = _fifo("vclos-balanced", balanced_ecmp_placement)
locality_ecmp = _fifo("vclos-ecmp", locality_ecmp_placement)

SCHEDULERS: dict[str, Callable[[LeafSpine], QueueScheduler]] = {
    "vclos": vclos, "ocs-vclos": ocs_vclos, "vclos-sr": source_routing,
    "vclos-balanced": balanced_ecmp, "vclos-ecmp": locality_ecmp}


def cluster512(oversubscription: float = 1.0) -> LeafSpine:
    """The paper's CLUSTER512 (§9.2) as we read it: 512 GPUs, one 100 Gbit/s NIC per GPU
    (§8.1; 8 rails a server), 8 GPUs a server, leaves of 64 ports, half to servers (32
    GPUs: 4 servers) and half to spines (§4.1): 16 leaves, and L x S = 512 GPUs (§6.1)
    gives 32 spines, one 100 Gbit/s link per leaf-spine pair (non-blocking, as the paper's
    fabric is).  The leaf port count is our assumption: the paper gives 64-port switches
    for CLUSTER2048 only."""
    return LeafSpine(leaves=16, servers_per_leaf=4, spines=32, gpus_per_server=8,
                     server_gbit=100.0, oversubscription=oversubscription, rails=8)
