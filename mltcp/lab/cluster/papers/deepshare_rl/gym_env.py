"""The RL scheduler's training environment: a Gymnasium ``Env`` over the cluster
simulator (deepshare-rl §IV, Algorithm 1).

An episode is one job set (:func:`.setup.job_set`) on deepshare-rl's cluster, from an
empty cluster until every job has finished.  The environment runs the scheduling loop
the deployed scheduler runs (:mod:`.schedulers`), one decision per step: at a
scheduling moment (a round's tick every ``round_s``, a job's end, an arrival) the
policy places candidates one step at a time; its "nothing", or a cluster where nothing
more fits, lets time run to the next moment at which something fits (deepshare-rl
Algorithm 1: schedule, sleep for T, reward).  Jobs whose CS over the last round reached
``preempt_cs`` go back to the queue (deepshare-rl §IV: "preemption based on a
predefined threshold on contention sensitivity"; its code uses a throughput ratio of
0.6, CS 1/0.6).  The simulator is the cluster simulator itself: the fluid engine runs
the jobs' iterations, their flows sharing NICs under ``network``'s congestion control.

The reward is deepshare-rl Eq. 2, ``-W1 x CS + W2 x Util`` with ``CS`` the mean over running
jobs of (CS - 1) measured over their last round (0 for a job alone; deepshare-rl's code uses
1 - 1/CS, the same ordering), ``Util`` the fraction of GPUs held, ``W2 = 1 - W1``;
it is paid for each stretch of time between moments, weighted by the stretch's length
in rounds (so an episode's return is its integral over time, however many moments it
has); a step that only places a job earns 0.

Eq. 2 has no term for waiting: a policy that defers small jobs behind large ones pays
nothing for it, and learns to (docs/cluster.md).  ``jct_weight`` (W3, ours; 0, the
paper's Eq. 2, by default) adds ``-W3 x (jobs in the system / jobs in the set)`` to
each stretch's rate, jobs in the system being those waiting or running.  Integrated
over the episode that is ``-W3 x mean JCT in rounds`` (Little's law on one job set: the
time integral of the jobs in the system is the sum of their JCTs), so the return
becomes Eq. 2's integral minus W3 x the set's mean JCT: the term charges waiting and
slow running alike, which a waiting-only term would leave to Eq. 2's CS term.

``info`` at the episode's end carries the run's mean JCT, p90 JCT, GPU utilisation and
makespan, the episode's return and its Eq. 2 part.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from typing import Any

import gymnasium as gym
import numpy as np

from mltcp.core import signals, validate
from mltcp.lab.cluster.engine.gpu_jobs import JobRequest
from mltcp.lab.cluster.engine.network import Network, fair
from mltcp.lab.cluster.engine.scheduling import Decision
from mltcp.lab.cluster.engine.simulator import ClusterSim, Run
from mltcp.lab.cluster.papers.deepshare_rl import encoding as rl_encoding
from mltcp.lab.cluster.papers.deepshare_rl import setup as deepshare
from mltcp.lab.cluster.papers.deepshare_rl.encoding import PREEMPT_CS, CSMeter, Layout

MAX_EVENTS = 10**9


class _NoScheduler:
    """The simulator's scheduler slot while the environment decides itself."""

    name = "rl-env"
    round_s = 0.0

    def decide(self, view: Any) -> Decision:
        return Decision()


JobSets = Callable[[random.Random], Sequence[JobRequest]]


class ContentionEnv(gym.Env):
    """``job_sets(rng)`` draws an episode's jobs (e.g. a random set of a trace:
    :func:`trace_sets`); ``w1`` weighs contention against utilisation (Eq. 2);
    ``jct_weight`` (W3) the JCT term (module docstring; 0: Eq. 2 alone);
    ``max_steps`` ends (truncates) an episode that never finishes."""

    metadata = {"render_modes": []}

    def __init__(self, job_sets: JobSets, network: Network | None = None, w1: float = deepshare.W1,
                 round_s: float = deepshare.ROUND_S, preempt_cs: float | None = PREEMPT_CS,
                 max_steps: int = 20_000, seed: int = 0, jct_weight: float = 0.0) -> None:
        self.fabric = deepshare.fabric()
        self.layout = Layout.of(self.fabric)
        self.network = network or fair()
        self.w1 = validate.number(w1, "w1", 0, 1, "0.4")
        self.jct_weight = validate.number(jct_weight, "jct_weight", 0, 100, "1")
        self.round_s = validate.number(round_s, "round_s", 1e-3, 1e6, "300", lo_open=True)
        if preempt_cs is not None:
            validate.number(preempt_cs, "preempt_cs", 1, 100, "1.67", lo_open=True)
        self.preempt_cs = preempt_cs
        self.max_steps = validate.integer(max_steps, "max_steps", 1, 10**8, "20000")
        self.job_sets, self.seed = job_sets, seed
        self.action_space = gym.spaces.Discrete(self.layout.actions)
        self.observation_space = gym.spaces.Box(0.0, rl_encoding.CS_CAP - 1.0,
                                                self.layout.shape, np.float32)
        self._rng = random.Random(seed)
        self.run: Run | None = None
        # Called at every moment time runs to (a job's end, an arrival, a round's tick):
        # where a training prints a line while one step runs for long (jobs of months).
        self.on_moment: Callable[[], None] | None = None

    # -- gymnasium API

    def reset(self, *, seed: int | None = None, options: dict | None = None
              ) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        if seed is not None:
            self._rng = random.Random(seed)
        jobs = list(self.job_sets(self._rng))
        deepshare.check_demands(jobs, self.fabric)
        self.run = ClusterSim(self.fabric, jobs, _NoScheduler(), self.network,
                              self.seed).start()
        self.run.admit()
        self.meter = CSMeter(self.fabric, self.round_s, self.seed)
        self.steps, self.reward_sum, self.eq2_sum, self.jobs = 0, 0.0, 0.0, len(jobs)
        return self._observe(), {}

    def step(self, action: int) -> tuple[np.ndarray, float, bool, bool, dict]:
        # A Ctrl-C that a library swallowed since the last step (mltcp.core.signals.check)
        # unwinds here, whoever steps: PPO's rollouts, the warm start's demonstrations.
        signals.check()
        run = self.run
        assert run is not None, "reset() before step()"
        view = run.view()
        cands = rl_encoding.candidates(self.layout, view.queue)
        mask = rl_encoding.action_mask(self.layout, view.free, cands)
        picked = self.layout.decode(int(action)) if mask[int(action)] else None
        start = None
        if picked is not None:
            job = cands[picked[0]]
            start = (job, self.layout.allocation(job.gpus, picked[1]))
        elif not run.segments:      # as RL-base: an empty cluster never waits on nothing
            start = rl_encoding.greedy(view, view.queue, cands)
        if start is not None:
            run.apply(Decision((start,)))
        reward, info = 0.0, {}
        # Time runs when the policy places nothing more or nothing more fits, and on
        # from moment to moment until something fits again (or the set is done).
        if start is None or not self.action_masks()[1:].any():
            reward, info = self._run_until_choice()
        self.steps += 1
        self.reward_sum += reward
        done = run.finished
        truncated = not done and self.steps >= self.max_steps
        if done:
            result = run.result()
            jct = result.jct_summary()
            info.update(jct_mean_s=jct["mean"], jct_p90_s=jct["p90"],
                        utilisation=result.gpu_utilisation(), steps=self.steps,
                        reward_sum=self.reward_sum, eq2_sum=self.eq2_sum,
                        makespan_s=result.makespan_s)
        return self._observe(), reward, done, truncated, info

    def action_masks(self) -> np.ndarray:
        """Which actions fit now (sb3-contrib's MaskablePPO asks for this)."""
        assert self.run is not None
        view = self.run.view()
        return rl_encoding.action_mask(self.layout, view.free,
                                       rl_encoding.candidates(self.layout, view.queue))

    # -- inside a step

    def _observe(self) -> np.ndarray:
        assert self.run is not None
        view = self.run.view()
        return rl_encoding.observation(self.layout, view.running, self.meter.cs,
                                       rl_encoding.candidates(self.layout, view.queue))

    def _run_until_choice(self) -> tuple[float, dict]:
        """Run the cluster from moment to moment (a job's end, an arrival, a round's
        tick) until an action other than "nothing" fits; the reward is Eq. 2 (and the
        JCT term) at each moment weighted by the time to it in rounds (its integral over
        time)."""
        run = self.run
        assert run is not None
        reward, cs_sum, used_sum, span = 0.0, 0.0, 0.0, 0.0
        total = self.fabric.gpus
        while not run.finished:
            # Held GPUs and jobs in the system stay as they are until the next moment:
            # advance() stops at the first job's end.
            t, held = run.t, total - int(run.free.sum())
            in_system = len(run.queue) + len(run.segments)
            run.advance(min(self._next_tick(), run.next_arrival_s()), MAX_EVENTS)
            run.admit()
            dt = run.t - t
            self.meter.update(run.running(), run.t)
            cs_term = self.meter.excess()
            used = held / total
            eq2 = -self.w1 * cs_term + (1 - self.w1) * used
            jct = -self.jct_weight * in_system / max(self.jobs, 1)
            reward += (eq2 + jct) * dt / self.round_s
            self.eq2_sum += eq2 * dt / self.round_s
            cs_sum, used_sum, span = cs_sum + cs_term * dt, used_sum + used * dt, span + dt
            preempt = self._preemptions()
            if preempt:
                run.apply(Decision((), preempt))
            if self.on_moment is not None:
                self.on_moment()
            if self.action_masks()[1:].any():
                break
        span = max(span, 1e-12)
        return reward, {"cs": 1 + cs_sum / span, "util": used_sum / span}

    def _next_tick(self) -> float:
        assert self.run is not None
        return (np.floor(self.run.t / self.round_s + 1e-9) + 1) * self.round_s

    def _preemptions(self) -> tuple[str, ...]:
        if self.preempt_cs is None:
            return ()
        return tuple(name for name, cs in self.meter.cs.items() if cs >= self.preempt_cs)


def trace_sets(trace: str, sets: Sequence[int], jobs: int = deepshare.JOBS_PER_SET,
               duration_s: float = deepshare.DURATION_S) -> JobSets:
    """Episodes drawn uniformly from ``trace``'s job sets ``sets``."""
    validate.choice(trace, "trace", deepshare.TRACES)
    cache: dict[int, list[JobRequest]] = {}

    def draw(rng: random.Random) -> list[JobRequest]:
        index = rng.choice(list(sets))
        if index not in cache:
            cache[index] = deepshare.job_set(trace, index, jobs, duration_s)
        return cache[index]

    return draw
