"""Checkpoint selection: of the policies a training passes through, keep the one whose
deployed scheduler has the lowest mean JCT on job sets kept for choosing.

Why: PPO's training reward is noisy and is not the figure the comparison reports (the
shipped Eq. 2 policy's reward per round peaked at 40,000-60,000 steps and fell after,
while the policy learnt to idle GPUs), so the last policy is not necessarily the best.
Picking by the held-out comparison's own job sets (0-9) would make that comparison
dishonest: the selection sets are a third range (:data:`.setup.SELECT_SETS`, 200-204),
and :func:`check_sets` refuses a training or selection range that touches the
evaluation sets or each other.

A checkpoint is judged as it will be deployed: :class:`.schedulers.RLScheduler`
(RL-Hybrid or RL-base) on the cluster simulator, the policy acting deterministically,
each selection set's mean JCT, their mean the score (lower is better; a tie keeps the
earlier checkpoint).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from mltcp.core.errors import SpecError
from mltcp.lab.cluster.engine.network import congestion_control
from mltcp.lab.cluster.engine.simulator import ClusterSim
from mltcp.lab.cluster.papers.deepshare_rl import setup as deepshare
from mltcp.lab.cluster.papers.deepshare_rl.schedulers import Policy, RLScheduler

SELECT_BY = ("rl-hybrid", "rl-base")


def check_sets(train: Sequence[int], select: Sequence[int]) -> None:
    """Training and selection sets must be disjoint from each other and from the
    comparison's evaluation sets (:data:`.setup.EVAL_SETS`)."""
    held_out = set(deepshare.EVAL_SETS)
    lo, hi = min(held_out), max(held_out)
    for field_, sets in (("sets", train), ("select_sets", select)):
        touched = sorted(set(sets) & held_out)
        if touched:
            raise SpecError(field_, f"job set {touched[0]} is one the comparison evaluates "
                            f"on ({lo}-{hi})", "use sets from 100 up (e.g. 200-204)")
    both = sorted(set(train) & set(select))
    if both:
        raise SpecError("select_sets", f"job set {both[0]} is also a training set",
                        "pick selection sets disjoint from training (e.g. 200-204)")


def evaluate(policy: Policy, sets: Sequence[int], *, by: str = "rl-hybrid",
             trace: str = "normal", jobs: int = deepshare.JOBS_PER_SET,
             duration_s: float = deepshare.DURATION_S, round_s: float = deepshare.ROUND_S,
             network: str = "fair",
             progress: Callable[[int, int], None] | None = None) -> list[float]:
    """Mean JCT (seconds) of ``by`` with ``policy`` on each job set in ``sets`` of
    ``trace``, each run as the experiment runner runs it (the set's index the
    simulator's seed); ``progress(done, total)`` after each set."""
    if by not in SELECT_BY:
        raise SpecError("select_by", f"unknown scheduler {by!r}",
                        f"use one of {', '.join(SELECT_BY)}")
    net = deepshare.fabric()
    out = []
    for index in sets:
        sched = RLScheduler(by, net, policy, hybrid=by == "rl-hybrid", round_s=round_s)
        result = ClusterSim(net, deepshare.job_set(trace, index, jobs, duration_s), sched,
                            congestion_control(network, net), index).run()
        out.append(float(result.jct_summary()["mean"]))
        if progress is not None:
            progress(len(out), len(sets))
    return out


@dataclass
class Checkpoint:
    """One policy judged: after ``timesteps`` training steps, its mean JCT on each
    selection set."""

    timesteps: int
    jct_mean_s: list[float]

    @property
    def score_s(self) -> float:
        return float(np.mean(self.jct_mean_s))


@dataclass
class Selection:
    """The checkpoints judged so far and the best one's saved policy."""

    sets: tuple[int, ...]
    by: str = "rl-hybrid"
    every: int = 10_000
    checkpoints: list[Checkpoint] = field(default_factory=list)
    best: int | None = None
    best_policy: bytes = b""

    def offer(self, timesteps: int, jct_mean_s: Sequence[float],
              snapshot: Callable[[], bytes]) -> bool:
        """Record a checkpoint; keep ``snapshot()`` (the policy's bytes) when it is the
        best so far (strictly: a tie keeps the earlier one).  True when kept."""
        cp = Checkpoint(int(timesteps), [float(v) for v in jct_mean_s])
        self.checkpoints.append(cp)
        if self.best is not None and cp.score_s >= self.checkpoints[self.best].score_s:
            return False
        self.best, self.best_policy = len(self.checkpoints) - 1, snapshot()
        return True

    @property
    def picked(self) -> Checkpoint | None:
        return None if self.best is None else self.checkpoints[self.best]

    def record(self) -> dict:
        """The selection curve and the pick, for the policy's JSON record."""
        picked = self.picked
        return {"sets": list(self.sets), "by": self.by, "every": self.every,
                "metric": "mean JCT (s) over the selection sets, lower is better",
                "checkpoints": [{"timesteps": c.timesteps, "jct_mean_s": c.jct_mean_s,
                                 "score_s": c.score_s} for c in self.checkpoints],
                "picked": None if picked is None else {"timesteps": picked.timesteps,
                                                       "score_s": picked.score_s}}
