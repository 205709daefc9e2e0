"""RL-base and RL-Hybrid (deepshare-rl §IV): a trained policy as a cluster scheduler.

At a scheduling moment the scheduler first sends back to the queue the running jobs
whose CS over the last round reached the preemption threshold, then asks the policy
again and again (state, action mask -> action; :mod:`.encoding`) and places what it picks, until the
policy answers "nothing" or nothing fits:

* **RL-base** stops at the policy's "nothing" (it may leave GPUs idle to avoid
  contention), unless nothing would run at all: an empty cluster that waits has no job
  to end and free GPUs, so then it places one job as RL-Hybrid would;
* **RL-Hybrid** then falls back to the greedy rule (deepshare-rl: "when it faces an empty set
  ... it follows a safety rule of trying greedy scheduling"): the first candidate, in
  queue order, that :func:`~mltcp.lab.cluster.papers.deepshare_rl.setup.spread_place` fits.

The policy is a stable-baselines3 / sb3-contrib MaskablePPO checkpoint (a ``.zip``);
the repository ships them (``policies/``, each trained by :mod:`.train` with the command
in its ``.json``), so the scheduler runs without training: :data:`SHIPPED`, deepshare-rl's
Eq. 2 reward, is ``rl-base``/``rl-hybrid``; another by its name, ``rl-hybrid@NAME``
(:data:`SHIPPED_JCT`, the reward with a JCT term and the checkpoint picked on held-out
job sets: ``rl-hybrid@deepshare-normal-w0.4-jct``).  A policy is checked and loaded by
:mod:`.policy_file` and evaluated in NumPy (:mod:`.numpy_policy`), so running the
scheduler needs no PyTorch; training one does.  Each decision's inference time is
counted (:attr:`RLScheduler.inference_s`).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

import numpy as np

from mltcp.core.errors import SpecError
from mltcp.lab.cluster.engine.leafspine import LeafSpine
from mltcp.lab.cluster.engine.scheduling import ClusterView, Decision, QueuedJob
from mltcp.lab.cluster.papers.deepshare_rl import encoding as rl_encoding
from mltcp.lab.cluster.papers.deepshare_rl import setup as deepshare
from mltcp.lab.cluster.papers.deepshare_rl.encoding import PREEMPT_CS, CSMeter, Layout
from mltcp.lab.cluster.papers.deepshare_rl.policy_file import Policy, load_policy

MAX_PLACEMENTS = 64                # per moment: a guard, far above what 32 GPUs hold
SHIPPED = "deepshare-normal-w0.4"             # the paper's setup: Eq. 2, the last policy
SHIPPED_JCT = "deepshare-normal-w0.4-jct"     # Eq. 2 + a JCT term, picked by selection


def shipped_path(name: str = SHIPPED) -> Path:
    return Path(str(resources.files(__package__).joinpath("policies", f"{name}.zip")))


@dataclass
class RLScheduler:
    """``policy``: obs, mask -> action; ``hybrid``: RL-Hybrid's greedy fallback;
    ``preempt_cs``: CS at which a running job is sent back (None: never)."""

    name: str
    fabric: LeafSpine
    policy: Policy
    hybrid: bool = False
    round_s: float = deepshare.ROUND_S
    preempt_cs: float | None = PREEMPT_CS
    seed: int = 0
    decisions: int = 0
    inference_s: float = 0.0
    meter: CSMeter = field(init=False)

    def __post_init__(self) -> None:
        self.layout = Layout.of(self.fabric)
        self.meter = CSMeter(self.fabric, self.round_s, self.seed)

    def decide(self, view: ClusterView) -> Decision:
        self.meter.update(view.running, view.now)
        preempt = []
        if self.preempt_cs is not None:
            for r in view.running:
                if self.meter.cs.get(r.name, 1.0) >= self.preempt_cs:
                    preempt.append(r.name)
                    view.release(r)
        running = [r for r in view.running if r.name not in preempt]
        # A preempted job waits at the queue's end and may be placed again at once.
        queue = list(view.queue) + [QueuedJob(r.request, r.done, r.attained_gpu_s)
                                    for r in view.running if r.name in preempt]
        for _ in range(MAX_PLACEMENTS):
            cands = rl_encoding.candidates(self.layout, queue)
            mask = rl_encoding.action_mask(self.layout, view.free, cands)
            if not mask[1:].any():
                break
            obs = rl_encoding.observation(self.layout, running, self.meter.cs, cands,
                                          view.planned)
            t0 = time.perf_counter()
            action = self.policy(obs, mask)
            self.inference_s += time.perf_counter() - t0
            self.decisions += 1
            picked = self.layout.decode(action) if mask[action] else None
            if picked is not None:
                job = cands[picked[0]]
                where = self.layout.allocation(job.gpus, picked[1])
            elif self.hybrid or not (running or view.planned):
                # RL-Hybrid's safety rule; RL-base too when the cluster would stay
                # empty (waiting for nothing: no job would ever end to free GPUs)
                found = rl_encoding.greedy(view, queue, cands)
                if found is None:
                    break
                job, where = found
            else:
                break
            if where is None:
                break
            view.take(job, where)
            queue.remove(job)
        return Decision(tuple(view.planned), tuple(preempt))


def first_fit_action(obs: np.ndarray, mask: np.ndarray) -> int:
    """The first action that fits: the smallest-demand candidate on the first node set
    (pairs before the quad)."""
    fits = np.flatnonzero(mask[1:])
    return int(fits[0]) + 1 if len(fits) else 0


def random_action(seed: int = 0) -> Policy:
    """A fitting action drawn at random (never "nothing" while one fits)."""
    rng = np.random.default_rng(seed)

    def act(obs: np.ndarray, mask: np.ndarray) -> int:
        fits = np.flatnonzero(mask[1:])
        return int(rng.choice(fits)) + 1 if len(fits) else 0

    return act


def rule_scheduler(kind: str, fabric: LeafSpine) -> RLScheduler:
    """The RL scheduler's state, actions and preemption driven by a fixed rule instead
    of a trained policy (``deepshare-first-fit``, ``deepshare-random``): what learning
    has to beat in the same action space."""
    rules = {"deepshare-first-fit": lambda: first_fit_action,
             "deepshare-random": lambda: random_action(0)}
    if kind not in rules:
        raise SpecError("scheduler", f"unknown rule {kind!r}", f"use one of {', '.join(rules)}")
    return RLScheduler(kind, fabric, rules[kind]())


def policy_path(policy: str | Path | None, base_dir: Path | None = None) -> Path:
    """The policy file ``policy`` names: None is the shipped default; the name of a
    shipped policy (no '/', e.g. ``deepshare-normal-w0.4-jct``) is that policy, whatever
    files lie around (a stray file of that name in the working directory used to
    shadow it; write ``./NAME`` for a file of that name); anything else is a path,
    relative to ``base_dir`` (the config's directory, as its jobs.trace) when given."""
    if policy is None:
        return shipped_path()
    text = str(policy)
    if not text.strip():
        raise SpecError("policy", "gives no policy after '@'",
                        "write rl-base (the shipped policy), rl-base@NAME of a shipped one, "
                        "or rl-base@FILE.zip")
    if "/" not in text and shipped_path(text).is_file():
        return shipped_path(text)
    path = Path(text)
    return path if path.is_absolute() or base_dir is None else base_dir / path


def rl_scheduler(kind: str, fabric: LeafSpine, policy: str | Path | None = None,
                 label: str | None = None) -> RLScheduler:
    """``rl-base`` or ``rl-hybrid`` with the policy at ``policy`` (a path or a shipped
    policy's name; the shipped default when None), named ``label`` (default: the spec
    as ``kind@policy``); the policy is checked against this fabric's spaces."""
    if kind not in ("rl-base", "rl-hybrid"):
        raise SpecError("scheduler", f"unknown RL scheduler {kind!r}",
                        "use rl-base or rl-hybrid")
    if (fabric.servers, fabric.gpus_per_server) != (4, 8):
        raise SpecError("cluster", f"the RL policy acts on deepshare-rl's 4 nodes x 8 GPUs, not "
                        f"{fabric.servers} x {fabric.gpus_per_server}",
                        "run it on [jobs] setup = \"deepshare-normal\" (or another trace)")
    act = load_policy(policy_path(policy), Layout.of(fabric))
    name = label or (kind if policy is None else f"{kind}@{policy}")
    return RLScheduler(name, fabric, act, hybrid=kind == "rl-hybrid")
