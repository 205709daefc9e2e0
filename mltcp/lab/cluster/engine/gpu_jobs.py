"""Training jobs placed on a GPU cluster, and the traffic the fluid engine runs for them.

A data-parallel job on GPUs of several servers all-reduces its gradients every
iteration.  Inside a server the GPUs reduce over NVLink/PCIe (part of the iteration's
compute time here: it never touches the network); across servers the job runs a ring
over its servers, as NCCL's inter-node ring does: each server sends
``2 (m - 1) / m`` of the gradient bytes to the next of the job's ``m`` servers.  A job
on one server has no network traffic at all; its iterations are its compute.

On servers with several NICs (``LeafSpine.rails``) the job runs one ring per rail, as
NCCL spreads its channels over rail-aligned NICs: rail ``r`` of each server sends to
rail ``r`` of the next, each carrying ``1 / rails`` of the ring's bytes, and each rail's
flow is hashed by ECMP on its own key, as a switch sees separate 5-tuples.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from mltcp.core import validate
from mltcp.core.aggressiveness import Aggressiveness
from mltcp.core.errors import SpecError
from mltcp.lab.cluster.engine.leafspine import LeafSpine
from mltcp.lab.models import fluid_engine


def check_costs(field: str, compute_s: object, gradient_bytes: object,
                iterations: object) -> None:
    """A job's per-iteration compute and gradient bytes and its iteration count, checked
    the same way whether it is a request waiting in a queue or a placed job."""
    validate.number(compute_s, f"{field}.compute_s", 0, 86_400, "0.2")
    validate.number(gradient_bytes, f"{field}.gradient_bytes", 0, 1e13, "100e6")
    validate.integer(iterations, f"{field}.iterations", 1, 10**9, "1000")


def ring_bytes(gradient_bytes: float, servers: int) -> float:
    """Bytes each of ``servers`` sends to the next in a ring all-reduce of
    ``gradient_bytes``: ``2 (m - 1) / m`` of them (0 on one server)."""
    return 2 * (servers - 1) / servers * gradient_bytes if servers > 1 else 0.0


def ring_comm_s(fabric: LeafSpine, gradient_bytes: float, servers: int) -> float:
    """A ring all-reduce over ``servers`` servers alone on the network: the ring's bytes
    at the payload rate of a server's NICs together (all its rails)."""
    return ring_bytes(gradient_bytes, servers) / fabric.server_payload_bytes_s


@dataclass(frozen=True)
class JobRequest:
    """A job as it arrives: how many GPUs it asks for and what one iteration costs
    (``model``: the catalogue's name for it, if it came from there)."""

    name: str
    arrival_s: float
    gpus: int
    compute_s: float
    gradient_bytes: float
    iterations: int
    model: str = ""

    def __post_init__(self) -> None:
        field = f"jobs[{self.name}]"
        validate.number(self.arrival_s, f"{field}.arrival_s", 0, 1e9, "0")
        validate.integer(self.gpus, f"{field}.gpus", 1, 1 << 20, "8")
        check_costs(field, self.compute_s, self.gradient_bytes, self.iterations)


@dataclass(frozen=True)
class PlacedJob:
    """A job and the GPUs it got: ``gpus`` maps server -> GPUs used there."""

    name: str
    gpus: tuple[tuple[int, int], ...]      # (server, GPUs), servers in ring order
    compute_s: float                       # per iteration, intra-server reduction included
    gradient_bytes: float                  # per iteration
    iterations: int
    start_s: float = 0.0
    # per (ring flow, rail), flow-major: flow i's rail r at i x rails + r (source
    # routing); None: ECMP
    spines: tuple[int, ...] | None = None

    def __post_init__(self) -> None:
        field = f"jobs[{self.name}]"
        if not self.gpus:
            raise SpecError(f"{field}.gpus", "is empty", "place the job on at least one GPU")
        # The rail count is the fabric's, known only in flows(); here a ring of m flows
        # needs a multiple of m.
        m = len(self.gpus)
        if self.spines is not None and m > 1 and \
                (not self.spines or len(self.spines) % m):
            raise SpecError(f"{field}.spines", f"has {len(self.spines)} entries for a ring of "
                            f"{m} flows", "give one spine per ring flow and rail")
        check_costs(field, self.compute_s, self.gradient_bytes, self.iterations)
        validate.number(self.start_s, f"{field}.start_s", 0, 1e9, "0")

    @property
    def servers(self) -> tuple[int, ...]:
        return tuple(s for s, _ in self.gpus)

    @property
    def gpu_count(self) -> int:
        return sum(n for _, n in self.gpus)

    def ring_bytes(self) -> float:
        """Bytes each server sends to the next per iteration (0 on one server)."""
        return ring_bytes(self.gradient_bytes, len(self.gpus))

    def flow_bytes(self, fabric: LeafSpine) -> float:
        """Bytes each of the ring's flows carries per iteration: the server's ring bytes
        split evenly over its rails."""
        return self.ring_bytes() / fabric.rails

    def flows(self, fabric: LeafSpine, seed: int = 0) -> list[list[int]]:
        """The links of each of the job's ring flows (server i -> server i+1), one per
        rail, flow-major (flow i's rail r at ``i x rails + r``)."""
        servers, rails = self.servers, fabric.rails
        m = len(servers)
        if m < 2:
            return []
        if self.spines is not None and len(self.spines) != m * rails:
            raise SpecError(f"jobs[{self.name}].spines",
                            f"has {len(self.spines)} entries for a ring of {m} flows on "
                            f"{rails} rail{'s' if rails != 1 else ''}",
                            f"give one spine per ring flow and rail ({m * rails})")
        # One rail keeps the key it had before rails existed, so ECMP's picks (and every
        # result pinned on them) are unchanged.
        return [fabric.path(a, servers[(i + 1) % m],
                            f"{self.name}/{i}" if rails == 1 else f"{self.name}/{i}/r{r}",
                            seed, None if self.spines is None else self.spines[i * rails + r],
                            rail=r)
                for i, a in enumerate(servers) for r in range(rails)]

    def dedicated_iteration_s(self, fabric: LeafSpine, seed: int = 0) -> float:
        """One iteration alone on the cluster on these GPUs, on collision-free paths:
        compute, then each flow's bytes with no two of the job's flows on one link, so
        each runs at the narrowest link of its path (the slowest flow ends the iteration).

        The baseline of every slowdown, whatever the scheduler and routing: two of a
        job's own flows that ECMP's hash (or a source route) puts on one leaf-spine link
        are a cost of that routing, as a collision with another job's flow is, not part
        of the job.  A ring never puts two of its flows on one NIC, so only leaf-spine
        links can collide; where the fabric has too few spines for every flow of a leaf
        to have its own, this is a bound no routing reaches.  ``seed`` only names the
        paths, whose capacities do not depend on the spine."""
        flows = self.flows(fabric, seed)
        if not flows:
            return self.compute_s
        capacity = fabric.capacities()
        rate = min(float(capacity[links].min()) for links in flows)
        return self.compute_s + self.flow_bytes(fabric) / rate

    def alone_iteration_s(self, fabric: LeafSpine, seed: int = 0) -> float:
        """One iteration alone on the cluster on these GPUs and *these* paths (ECMP's
        picks for ``seed``, or the source routes): compute, then each flow's bytes at the
        rates the job's flows get when they share only with each other.  Over
        :meth:`dedicated_iteration_s`, what the routing alone costs the job."""
        flows = self.flows(fabric, seed)
        if not flows:
            return self.compute_s
        rates = fluid_engine.weighted_max_min(np.ones(len(flows)), flows, fabric.capacities())
        return self.compute_s + self.flow_bytes(fabric) / float(np.min(rates))


def engine_state(fabric: LeafSpine, jobs: Sequence[PlacedJob], f: Aggressiveness | None,
                 seed: int = 0, f_steps: int = 8, sample_s: float = 0.0, n_iter: int = 0,
                 ring: int = 0,
                 stop_on_job_done: bool = False,
                 job_weights: Sequence[float] | None = None) -> fluid_engine.EngineState:
    """The fluid engine's state for ``jobs`` on ``fabric`` at time 0: standard
    congestion control (max-min fair) when ``f`` is None, MLTCP's F otherwise (the
    arguments from ``n_iter`` on as :func:`mltcp.lab.models.fluid_engine.new_state` takes
    them);
    ``job_weights``: each job's flows' weight in the weighted max-min (1 by default: a
    network that prioritises some jobs gives them more)."""
    flow_job: list[int] = []
    flow_links: list[list[int]] = []
    flow_bytes: list[float] = []
    flow_weight: list[float] = []
    for j, job in enumerate(jobs):
        for links in job.flows(fabric, seed):
            flow_job.append(j)
            flow_links.append(links)
            flow_bytes.append(job.flow_bytes(fabric))
            flow_weight.append(1.0 if job_weights is None else float(job_weights[j]))
    n_jobs = len(jobs)
    slope, intercept, cap = (0.0, 1.0, np.inf) if f is None else (
        f.slope, f.intercept, f.cap if f.cap is not None else np.inf)
    return fluid_engine.new_state(
        np.array(flow_job, dtype=np.int64), flow_links, fabric.capacities(),
        np.array(flow_bytes), np.array(flow_weight), np.ones((n_jobs, 1)),
        np.array([[job.compute_s] for job in jobs]).reshape(n_jobs, 1),
        np.array([job.iterations for job in jobs], dtype=np.int64),
        np.array([job.start_s for job in jobs]), np.zeros((n_jobs, 1)),
        slope, intercept, cap, f_steps, sample_s, n_iter=n_iter, ring=ring,
        stop_on_job_done=stop_on_job_done)
