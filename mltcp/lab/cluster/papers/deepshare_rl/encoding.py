"""What the RL scheduler sees and can do (deepshare-rl §IV), shared by its training
environment (:mod:`.gym_env`) and the deployed scheduler (:mod:`.schedulers`), so that a
policy trained on one acts on the same numbers in the other.

**Candidates**: walking the waiting queue from its head, the first job of each GPU
demand in :data:`mltcp.lab.cluster.papers.deepshare_rl.setup.DEMANDS` (``K`` = 4 candidates at most;
deepshare-rl picks "K candidate jobs with different GPU demands ... from the head").

**State**: a ``nodes x 3*GPUs`` array (deepshare-rl Fig. 2 is ``nodes x 2*GPUs``; the middle
block is ours: the issue asks for the jobs' contention sensitivities in the state, and
deepshare-rl puts them only in its reward):

* left block: each node's GPUs, filled left to right by the jobs placed on it, each
  slot holding the job's model code (1..6 over 6: which of Table I's models);
* middle block: the same slots holding the job's measured CS - 1 (0 until measured,
  capped at 2);
* right block: slot ``(i, j)`` holds the model code of the candidate that could run on
  ``2^i`` nodes x ``j + 1`` GPUs each (deepshare-rl's right half: one candidate may fill several
  slots, one per way its demand splits).

**Action**: ``Discrete(1 + K x S)``: 0 = schedule nothing this round (deepshare-rl's empty
set), else candidate ``k`` on node set ``s`` of :func:`~mltcp.lab.cluster.papers.deepshare_rl.setup.
node_sets` (the demand split evenly over the set's nodes, ring in node order).  deepshare-rl's
action is a node set that its environment gives to the first candidate it fits; ours
names the candidate too.  :func:`action_mask` says which actions fit now (the policy is
trained with invalid actions masked out: sb3-contrib's MaskablePPO).

**Contention sensitivity** (:class:`CSMeter`): a running job's CS over the last round
= the time it ran in the round over (iterations it finished x its dedicated
iteration on the same GPUs), deepshare-rl Eq. 1 measured by the simulator instead of profiled.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from mltcp.lab.cluster.engine.leafspine import LeafSpine
from mltcp.lab.cluster.engine.scheduling import Allocation, ClusterView, QueuedJob, RunningJob
from mltcp.lab.cluster.papers.deepshare_rl import setup as deepshare

CS_CAP = 3.0
PREEMPT_CS = 1 / 0.6    # deepshare-rl's code: a job below 0.6 of its ideal throughput is preempted
MODEL_CODE = {m: (i + 1) / len(deepshare.MODELS) for i, m in enumerate(deepshare.MODELS)}


def model_code(model: str) -> float:
    """A model's code in the state (an unknown model reads as the middle one)."""
    return MODEL_CODE.get(model, 0.5)


@dataclass(frozen=True)
class Layout:
    """The cluster's shape and the action space it implies."""

    nodes: int
    gpus_per_node: int
    demands: tuple[int, ...] = deepshare.DEMANDS
    sets: tuple[tuple[int, ...], ...] = ()

    @classmethod
    def of(cls, net: LeafSpine) -> Layout:
        return cls(net.servers, net.gpus_per_server, deepshare.DEMANDS,
                   deepshare.node_sets(net.servers))

    @property
    def actions(self) -> int:
        return 1 + len(self.demands) * len(self.sets)

    @property
    def shape(self) -> tuple[int, int]:
        return (self.nodes, 3 * self.gpus_per_node)

    def decode(self, action: int) -> tuple[int, tuple[int, ...]] | None:
        """Action -> (candidate index, node set); None for "nothing"."""
        if action == 0:
            return None
        k, s = divmod(int(action) - 1, len(self.sets))
        return k, self.sets[s]

    def encode(self, k: int, nodes: tuple[int, ...]) -> int:
        return 1 + k * len(self.sets) + self.sets.index(tuple(nodes))

    def allocation(self, demand: int, nodes: tuple[int, ...]) -> Allocation | None:
        per = deepshare.per_node(demand, len(nodes), self.gpus_per_node)
        return None if per is None else Allocation(tuple((n, per) for n in nodes))


def candidates(layout: Layout, queue: Sequence[QueuedJob]) -> list[QueuedJob | None]:
    """Per demand of ``layout``, the first waiting job that asks for it (or None)."""
    out: list[QueuedJob | None] = [None] * len(layout.demands)
    index = {d: k for k, d in enumerate(layout.demands)}
    for job in queue:
        k = index.get(job.gpus)
        if k is not None and out[k] is None:
            out[k] = job
            if all(c is not None for c in out):
                break
    return out


def action_mask(layout: Layout, free: np.ndarray, cands: Sequence[QueuedJob | None]
                ) -> np.ndarray:
    """Which actions fit the free GPUs now (action 0 always does)."""
    mask = np.zeros(layout.actions, dtype=bool)
    mask[0] = True
    for k, job in enumerate(cands):
        if job is None:
            continue
        for s, nodes in enumerate(layout.sets):
            per = deepshare.per_node(job.gpus, len(nodes), layout.gpus_per_node)
            if per is not None and all(free[n] >= per for n in nodes):
                mask[1 + k * len(layout.sets) + s] = True
    return mask


def observation(layout: Layout, running: Sequence[RunningJob], cs: dict[str, float],
                cands: Sequence[QueuedJob | None],
                planned: Sequence[tuple[QueuedJob, Allocation]] = ()) -> np.ndarray:
    """The state array (module docstring); ``planned``: jobs placed this moment but not
    yet running, shown as running with no CS yet."""
    g = layout.gpus_per_node
    obs = np.zeros(layout.shape, dtype=np.float32)
    fill = np.zeros(layout.nodes, dtype=np.int64)
    placed = [(r.job.gpus, r.request.model, cs.get(r.name, 1.0)) for r in running]
    placed += [(where.gpus, job.request.model, 1.0) for job, where in planned]
    for gpus, model, job_cs in placed:
        code, load = model_code(model), min(max(job_cs - 1.0, 0.0), CS_CAP - 1.0)
        for node, n in gpus:
            a, b = fill[node], min(fill[node] + n, g)
            obs[node, a:b] = code
            obs[node, g + a:g + b] = load
            fill[node] = b
    for job in cands:
        if job is None:
            continue
        for i in range(layout.nodes.bit_length()):
            n = 1 << i
            per = deepshare.per_node(job.gpus, n, g)
            if n > 1 and n <= layout.nodes and per is not None:
                obs[i, 2 * g + per - 1] = model_code(job.request.model)
    return obs


def greedy(view: ClusterView, queue: Sequence[QueuedJob], cands: Sequence[QueuedJob | None]
           ) -> tuple[QueuedJob, Allocation] | None:
    """deepshare-rl's safety rule: the first candidate in ``queue`` order that the spread
    placement (:func:`~mltcp.lab.cluster.papers.deepshare_rl.setup.spread_place`) fits now."""
    for job in sorted((c for c in cands if c is not None), key=list(queue).index):
        where = deepshare.spread_place(view, job)
        if where is not None:
            return job, where
    return None


@dataclass
class CSMeter:
    """Each running job's CS over the last full round (module docstring): call
    :meth:`update` at any moment; a job's figure is renewed once ``round_s`` has passed
    since its last one."""

    fabric: LeafSpine
    round_s: float
    seed: int = 0
    cs: dict[str, float] = field(default_factory=dict)
    _mark: dict[str, tuple[float, int, float]] = field(default_factory=dict)
    _dedicated: dict[tuple, float] = field(default_factory=dict)

    def dedicated_s(self, r: RunningJob) -> float:
        key = (r.job.gpus, r.job.compute_s, r.job.gradient_bytes, r.job.spines)
        if key not in self._dedicated:
            self._dedicated[key] = r.job.dedicated_iteration_s(self.fabric, self.seed)
        return self._dedicated[key]

    def update(self, running: Sequence[RunningJob], now: float) -> None:
        live = set()
        for r in running:
            live.add(r.name)
            mark = self._mark.get(r.name)
            if mark is None or mark[2] != r.job.start_s:       # new, or restarted
                self._mark[r.name] = (max(now, r.job.start_s), r.done, r.job.start_s)
                self.cs.pop(r.name, None)
                continue
            t0, done0, _ = mark
            if now - t0 < self.round_s * (1 - 1e-9):
                continue
            finished = r.done - done0
            if finished > 0:
                self.cs[r.name] = (now - t0) / (finished * self.dedicated_s(r))
            self._mark[r.name] = (now, r.done, r.job.start_s)
        for name in list(self._mark):
            if name not in live:
                del self._mark[name]
                self.cs.pop(name, None)

    def excess(self) -> float:
        """Mean over the jobs measured of CS - 1 (0 when none is): Eq. 2's CS term."""
        return float(np.mean([c - 1 for c in self.cs.values()])) if self.cs else 0.0
