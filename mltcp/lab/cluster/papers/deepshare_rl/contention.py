"""Contention sensitivity (CS): how much slower a job trains next to another job.

The deepshare-rl paper (§I, Eq. 1) defines a job's CS as its ideal throughput over its throughput
when co-located with another job, and its Fig. 1 maps CS for pairs of its Table I
models (``deepshare/*`` in the catalogue) on its cluster (§VI: 4 nodes x 8 TITAN Xp,
one NIC each; the 40 Gbit/s InfiniBand, since FSDP's 2672 MB/s exceeds the 10 GbE).
Its RL scheduler's state and reward are built on these numbers, so they are measured
here by the same fluid engine that runs the cluster simulator, under fair sharing and
under MLTCP, rather than typed in.

*Co-located* (deepshare-rl footnote 2) means the jobs share all or part of their nodes, and so
the nodes' network bandwidth.  Here both jobs are ``nodes x gpus_per_node`` (deepshare-rl
Fig. 1 labels its jobs so) and the placement says which servers the second one gets:

* ``shared``: the same servers as the first, in the same ring order, so each NIC
  carries one ring flow of each job (deepshare-rl's full co-location);
* ``partial``: shifted by half the node count (part of the nodes shared);
* ``disjoint``: other servers (no NIC in common: a control whose CS is 1).

The ideal is each job alone on the same GPUs and paths.  Both jobs start together, the
second ``offset`` later (a fraction of 1 % of its iteration, drawn from ``seed``): the
launch jitter of real jobs.  Under fair sharing a small offset keeps the two
communications overlapped as an exact tie would (the later job ends its transfer
exactly as much later as it started), but an exact tie is a symmetry no real pair has,
and MLTCP only interleaves jobs once something breaks it.

Steady state: the run goes on until the job with the longer period has run
``iterations`` iterations of its dedicated length (or a job ends), and the first
``warmup`` fraction of that time is skipped; a job's iteration time is the mean over
its iterations that lie wholly after it.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from mltcp.core import validate
from mltcp.core.errors import SpecError
from mltcp.lab.cluster.arrivals import catalogue
from mltcp.lab.cluster.engine.gpu_jobs import PlacedJob, engine_state
from mltcp.lab.cluster.engine.leafspine import LeafSpine
from mltcp.lab.cluster.engine.network import Network, congestion_control
from mltcp.lab.cluster.papers.deepshare_rl.setup import fabric as paper_fabric
from mltcp.lab.common import plotting
from mltcp.lab.models import fluid_engine

PLACEMENTS = ("shared", "partial", "disjoint")
PAPER_MODELS = tuple(n for n in catalogue.names() if n.startswith("deepshare/"))
PAPER_GPUS = (4, 4)              # 4 nodes x 4 GPUs each: two jobs fill deepshare-rl's cluster
MAX_EVENTS = 50_000_000
LAUNCH_JITTER = 0.01            # the second job starts up to this x its iteration late


@dataclass(frozen=True)
class PairCS:
    """Two co-located jobs: each one's steady iteration time alone (``alone_*``) and
    together (``together_*``), and its CS = together / alone (= ideal throughput over
    throughput under contention, deepshare-rl Eq. 1)."""

    model_a: str
    model_b: str
    network: str
    placement: str
    gpus: tuple[int, int]          # nodes x GPUs per node of job a (and of b, by default)
    alone_a_s: float
    alone_b_s: float
    together_a_s: float
    together_b_s: float
    gpus_b: tuple[int, int] | None = None     # job b's shape where it differs

    @property
    def cs_a(self) -> float:
        return self.together_a_s / self.alone_a_s

    @property
    def cs_b(self) -> float:
        return self.together_b_s / self.alone_b_s

    def swapped(self) -> PairCS:
        return PairCS(self.model_b, self.model_a, self.network, self.placement,
                      self.gpus_b or self.gpus, self.alone_b_s, self.alone_a_s,
                      self.together_b_s, self.together_a_s,
                      None if self.gpus_b is None else self.gpus)


def _network(network: str | Network, fabric: LeafSpine) -> Network:
    net = congestion_control(network, fabric) if isinstance(network, str) else network
    if type(net) is not Network:
        raise SpecError("network", f"scheme {net.name!r} ranks or shifts jobs; a pair's CS "
                        "is measured under the congestion control alone", "use fair or mltcp")
    return net


def _shape(fabric: LeafSpine, gpus: object, field_: str) -> tuple[int, int]:
    if not (isinstance(gpus, tuple | list) and len(gpus) == 2):
        raise SpecError(field_, f"must be (nodes, GPUs per node) (got {gpus!r})",
                        "e.g. (4, 4): 4 nodes with 4 GPUs each")
    return (validate.integer(gpus[0], f"{field_}.nodes", 1, fabric.servers, "4"),
            validate.integer(gpus[1], f"{field_}.per_node", 1, fabric.gpus_per_server, "4"))


def _servers(fabric: LeafSpine, gpus: object, placement: str, gpus_b: object = None
             ) -> tuple[list[int], list[int]]:
    """The servers of the first and second job (ring order) for ``placement``; the
    second job is ``gpus_b`` (nodes, GPUs per node), the first's shape by default."""
    nodes, per = _shape(fabric, gpus, "gpus")
    nodes_b, per_b = (nodes, per) if gpus_b is None else _shape(fabric, gpus_b, "gpus_b")
    validate.choice(placement, "placement", PLACEMENTS)
    shift = {"shared": 0, "partial": max(min(nodes, nodes_b) // 2, 1),
             "disjoint": nodes}[placement]
    if shift + nodes_b > fabric.servers:
        raise SpecError("gpus.nodes", f"{placement} placement of a {nodes}- and a "
                        f"{nodes_b}-node job needs {shift + nodes_b} servers, the cluster "
                        f"has {fabric.servers}", "use fewer nodes or another placement")
    if shift < nodes and per + per_b > fabric.gpus_per_server:
        raise SpecError("gpus.per_node", f"jobs of {per} and {per_b} GPUs per node do not "
                        f"fit a shared {fabric.gpus_per_server}-GPU server",
                        f"use at most {fabric.gpus_per_server} GPUs per node together")
    return list(range(nodes)), list(range(shift, shift + nodes_b))


def _steady_s(st: fluid_engine.EngineState, j: int, t_from: float, t_to: float) -> float:
    """Mean iteration time of job ``j`` over its iterations wholly inside the window."""
    start, end = fluid_engine.job_iterations(st, j)
    ok = np.flatnonzero((start >= t_from) & (end <= t_to))
    if len(ok) == 0:
        raise SpecError("iterations", "no whole iteration in the measured window",
                        "raise iterations (e.g. 20)")
    return float(end[ok[-1]] - start[ok[0]]) / len(ok)


def _run(fabric: LeafSpine, jobs: list[PlacedJob], targets: list[float], horizon_s: float,
         net: Network, seed: int, warmup: float) -> list[float]:
    """Each job's steady iteration time when ``jobs`` run together, run until every job
    has done its ``targets`` of iterations (or one ends)."""
    st = engine_state(fabric, jobs, net.f, seed)
    t = 0.0
    while True:
        t += horizon_s / 4
        status = fluid_engine.advance_until(st, t, MAX_EVENTS)
        if status in (fluid_engine.STUCK, fluid_engine.TOO_MANY_EVENTS):
            raise SpecError("iterations", "the pair's run did not finish", "use fewer")
        running = [fluid_engine.is_running(st, j) for j in range(len(jobs))]
        if status == fluid_engine.DONE or not all(running) or \
                all(fluid_engine.iterations_done(st, j) >= targets[j]
                    for j in range(len(jobs))):
            break
    t_end = min([t] + [float(np.nanmax(fluid_engine.job_iterations(st, j)[1]))
                       for j in range(len(jobs)) if not fluid_engine.is_running(st, j)])
    t0 = max(job.start_s for job in jobs)
    t_from = t0 + warmup * (t_end - t0)
    return [_steady_s(st, j, t_from, t_end) for j in range(len(jobs))]


def _profile(model: str | catalogue.ModelProfile) -> catalogue.ModelProfile:
    return model if isinstance(model, catalogue.ModelProfile) else catalogue.profile(model)


def contention_sensitivity(model_a: str | catalogue.ModelProfile,
                           model_b: str | catalogue.ModelProfile, fabric: LeafSpine | None = None,
                           gpus: Sequence[int] = PAPER_GPUS, placement: str = "shared",
                           network: str | Network = "fair", iterations: int = 20,
                           seed: int = 0, warmup: float = 0.5,
                           gpus_b: Sequence[int] | None = None) -> PairCS:
    """The CS of ``model_a`` and ``model_b`` (catalogue names or profiles) co-located on ``fabric``
    (deepshare-rl's cluster by default), each ``gpus`` = (nodes, GPUs per node) (``model_b``
    ``gpus_b`` where given: deepshare-rl Fig. 1's grids pair jobs of different sizes), under
    ``network`` (``fair`` or ``mltcp``, or such a :class:`Network`).

    The pair is run in name order, whatever order it is given in: the engine's tie
    breaks and the launch offset follow the job order, and a pair's CS must not depend
    on which job was named first."""
    fabric = fabric or paper_fabric()
    pa, pb = _profile(model_a), _profile(model_b)
    net = _network(network, fabric)
    validate.integer(iterations, "iterations", 4, 10_000, "20")
    validate.integer(seed, "seed", 0, 2**32 - 1, "0")
    validate.number(warmup, "warmup", 0, 0.9, "0.5")
    if (pb.name, 1) < (pa.name, 0):
        return contention_sensitivity(pb, pa, fabric, gpus_b or gpus, placement, network,
                                      iterations, seed, warmup,
                                      None if gpus_b is None else gpus).swapped()
    first, second = _servers(fabric, gpus, placement, gpus_b)
    per, per_b = gpus[1], (gpus_b or gpus)[1]

    def job(p: catalogue.ModelProfile, name: str, servers: list[int], n: int,
            start_s: float = 0.0) -> PlacedJob:
        each = per if name == "a" else per_b
        return PlacedJob(name, tuple((s, each) for s in servers), p.compute_s,
                         p.gradient_bytes, n, start_s=start_s)

    d = [job(pa, "a", first, 1).dedicated_iteration_s(fabric, seed),
         job(pb, "b", second, 1).dedicated_iteration_s(fabric, seed)]
    horizon = iterations * max(d)
    # Iterations to record: enough for the run to go on up to 8x slower than alone.
    n = [math.ceil(8 * horizon / x) + 2 for x in d]
    targets = [horizon / x for x in d]
    offset = float(np.random.default_rng(seed).uniform(0, LAUNCH_JITTER)) * d[1]
    a, b = job(pa, "a", first, n[0]), job(pb, "b", second, n[1], offset)
    alone = [_run(fabric, [a], targets[:1], horizon, net, seed, warmup)[0],
             _run(fabric, [b], targets[1:], horizon, net, seed, warmup)[0]]
    together = _run(fabric, [a, b], targets, horizon, net, seed, warmup)
    return PairCS(pa.name, pb.name, net.name, placement, (gpus[0], per), alone[0], alone[1],
                  together[0], together[1],
                  None if gpus_b is None else (gpus_b[0], per_b))


@dataclass(frozen=True)
class CSTable:
    """CS of every ordered pair of ``models``: ``cs[i][j]`` is model i's CS next to
    model j (deepshare-rl Fig. 1: target row, co-located column)."""

    models: tuple[str, ...]
    network: str
    placement: str
    gpus: tuple[int, int]
    cs: tuple[tuple[float, ...], ...]
    pairs: tuple[PairCS, ...]

    def markdown(self, digits: int = 2) -> str:
        short = [m.split("/")[-1] for m in self.models]
        head = f"| target \\ co-located ({self.network}) | " + " | ".join(short) + " |"
        rows = [head, "|---" * (len(short) + 1) + "|"]
        rows += [f"| {s} | " + " | ".join(f"{x:.{digits}f}" for x in row) + " |"
                 for s, row in zip(short, self.cs, strict=True)]
        return "\n".join(rows)

    def to_json(self) -> str:
        return json.dumps({"models": self.models, "network": self.network,
                           "placement": self.placement, "gpus": self.gpus,
                           "cs": self.cs,
                           "pairs": [asdict(p) | {"cs_a": p.cs_a, "cs_b": p.cs_b}
                                     for p in self.pairs]}, indent=1)


def cs_table(models: Sequence[str] = PAPER_MODELS, fabric: LeafSpine | None = None,
             gpus: Sequence[int] = PAPER_GPUS, placement: str = "shared",
             network: str | Network = "fair", iterations: int = 20,
             seed: int = 0) -> CSTable:
    """:func:`contention_sensitivity` for every unordered pair of ``models`` (each with
    itself too), each pair run once and filling both of its cells."""
    models = tuple(_profile(m).name for m in models)
    if not models or len(set(models)) != len(models):
        raise SpecError("models", "must name distinct catalogue models", "e.g. deepshare/lm")
    k = len(models)
    cs = [[math.nan] * k for _ in range(k)]
    pairs = []
    for i in range(k):
        for j in range(i, k):
            p = contention_sensitivity(models[i], models[j], fabric, gpus, placement,
                                       network, iterations, seed)
            cs[i][j], cs[j][i] = p.cs_a, p.cs_b
            if i == j:          # two jobs of one model: either is the target
                cs[i][i] = (p.cs_a + p.cs_b) / 2
            pairs.append(p)
    name = _network(network, fabric or paper_fabric()).name
    return CSTable(models, name, placement, (gpus[0], gpus[1]),
                   tuple(tuple(r) for r in cs), tuple(pairs))


# deepshare-rl Fig. 1's 6 x 6 grids: a job's CS for each of its shapes (rows) next to each of the
# co-located job's (columns).  The shapes are the RL scheduler's placements that leave
# room on a node for another job: 2 and 4 nodes x 1, 2, 4 GPUs (demands 2-16).
GRID_SHAPES = ((2, 1), (2, 2), (2, 4), (4, 1), (4, 2), (4, 4))


@dataclass(frozen=True)
class CSGrid:
    """``cs[t][c]``: for target model t and co-located model c, the 6 x 6 grid of t's CS
    (rows: t's shape, columns: c's shape in :data:`GRID_SHAPES`), both jobs sharing
    their first nodes (the smaller job's nodes are all shared)."""

    models: tuple[str, ...]
    network: str
    shapes: tuple[tuple[int, int], ...]
    cs: tuple[tuple[np.ndarray, ...], ...]

    def block(self, target: str, colocated: str) -> np.ndarray:
        return self.cs[self.models.index(target)][self.models.index(colocated)]

    def maximum(self, target: str, colocated: str) -> float:
        return float(self.block(target, colocated).max())

    def to_json(self) -> dict:
        return {"models": self.models, "network": self.network, "shapes": self.shapes,
                "cs": [[b.round(4).tolist() for b in row] for row in self.cs]}


def cs_grid(models: Sequence[str] = PAPER_MODELS, network: str | Network = "fair",
            iterations: int = 20, seed: int = 0,
            shapes: Sequence[tuple[int, int]] = GRID_SHAPES) -> CSGrid:
    """Every pair of ``models`` in every pair of ``shapes``, on deepshare-rl's cluster (each
    unordered pair of models and of shapes run once, filling both jobs' cells)."""
    models = tuple(_profile(m).name for m in models)
    k, n = len(models), len(shapes)
    grid = [[np.full((n, n), np.nan) for _ in range(k)] for _ in range(k)]
    for i in range(k):
        for j in range(i, k):
            for u in range(n):
                for v in range(n):
                    if i == j and v < u:
                        continue
                    p = contention_sensitivity(models[i], models[j], None, shapes[u],
                                               "shared", network, iterations, seed,
                                               gpus_b=shapes[v])
                    if i == j and u == v:       # two alike jobs: either is the target
                        grid[i][i][u, u] = (p.cs_a + p.cs_b) / 2
                    else:
                        grid[i][j][u, v], grid[j][i][v, u] = p.cs_a, p.cs_b
    name = _network(network, paper_fabric()).name
    return CSGrid(models, name, tuple(shapes), tuple(tuple(r) for r in grid))


def plot_cs_grids(grids: Sequence[CSGrid], path: str | Path) -> list[Path]:
    """deepshare-rl Fig. 1's layout, one panel per network: target models down, co-located
    across, each cell a 6 x 6 grid of shapes; as PNG and PDF (``path`` with either
    suffix or none), one colour scale for every panel.  The paths written."""
    fig, axes = plotting.figure(1, len(grids), figsize=(6.6 * len(grids) + 1.2, 7.0),
                                squeeze=False)
    axes = axes[0]
    vmax = max(float(np.nanmax([b for row in g.cs for b in row])) for g in grids)
    for ax, g in zip(axes, grids, strict=True):
        whole = np.block([[b for b in row] for row in g.cs])
        im = ax.imshow(whole, cmap="viridis", vmin=1.0, vmax=vmax)
        n, short = len(g.shapes), [m.split("/")[-1] for m in g.models]
        ticks = [n * i + (n - 1) / 2 for i in range(len(short))]
        ax.set_xticks(ticks, short)
        ax.set_yticks(ticks, short)
        for x in range(1, len(short)):
            ax.axhline(n * x - 0.5, color="white", lw=1.5)
            ax.axvline(n * x - 0.5, color="white", lw=1.5)
        ax.set_xlabel(f"co-located model ({n} shapes each)")
        ax.set_ylabel(f"target model ({n} shapes each)")
        ax.set_title(f"contention sensitivity, {g.network} (each cell: one run of the pair)",
                     fontsize=10)
    fig.colorbar(im, ax=list(axes), shrink=0.8, label="CS (together / alone)")
    return plotting.save(fig, path)


# python -m mltcp.lab.cluster.papers.deepshare_rl.contention [iterations]
if __name__ == "__main__":
    import sys
    its = int(sys.argv[1]) if len(sys.argv) > 1 else 20
    for scheme in ("fair", "mltcp"):
        print(cs_table(network=scheme, iterations=its).markdown(), end="\n\n")
