"""Warm start: before PPO, teach the policy a fixed rule by imitation (behaviour cloning).

Why: PPO from a random policy spends its first tens of thousands of decisions near the
random rule and, under deepshare-rl's Eq. 2, drifts to idling GPUs; a fixed rule in the
same action space (``deepshare-first-fit``) already has a lower mean JCT than the
trained policy.  Starting PPO from the rule's behaviour leaves it to learn only what the
rule does not know (which node set contends less, which candidate to hold back), with
the JCT term and checkpoint selection judging whether it did: the selection's
checkpoint 0 is the imitation itself, so a training that learns nothing better ships
the rule's behaviour, not something worse, and its curve says so.

The demonstrations are the rule's decisions in the training environment
(:class:`.gym_env.ContentionEnv`, the same reward) on the training sets, one episode per
set in order; the policy's action head learns them by cross-entropy on the masked
action distribution and its value head the discounted returns the rule earned, so that
PPO's first updates do not start from an untrained critic.  Batches are drawn by a
generator seeded from the training's seed: the same settings give the same weights.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from mltcp.core.errors import SpecError
from mltcp.lab.cluster.papers.deepshare_rl import schedulers as rl_sched

RULES: dict[str, Callable[[], rl_sched.Policy]] = {
    "deepshare-first-fit": lambda: rl_sched.first_fit_action,
}


@dataclass
class Demonstrations:
    """The rule's decisions: observations, action masks, actions, discounted returns."""

    obs: np.ndarray
    masks: np.ndarray
    actions: np.ndarray
    returns: np.ndarray


@dataclass
class WarmStart:
    """What the imitation reached: decisions shown, epochs, the final cross-entropy
    and the share of the shown decisions the policy's deterministic choice repeats."""

    rule: str
    episodes: int
    decisions: int
    epochs: int
    cross_entropy: float
    agreement: float

    def to_dict(self) -> dict:
        return asdict(self)


def rule(name: str) -> rl_sched.Policy:
    if name not in RULES:
        raise SpecError("warm_start", f"unknown rule {name!r}", f"use one of {', '.join(RULES)}")
    return RULES[name]()


def demonstrate(env: Any, act: rl_sched.Policy, episodes: int, gamma: float) -> Demonstrations:
    """``episodes`` episodes of ``env`` driven by ``act`` (obs, mask -> action)."""
    obs_l, mask_l, act_l, ret_l = [], [], [], []
    for _ in range(episodes):
        obs, _ = env.reset()
        rewards: list[float] = []
        done = truncated = False
        while not (done or truncated):
            mask = env.action_masks()
            action = act(obs, mask)
            obs_l.append(obs)
            mask_l.append(mask)
            act_l.append(action)
            obs, reward, done, truncated, _ = env.step(action)
            rewards.append(float(reward))
        ret_l.extend(discounted(rewards, gamma))
    return Demonstrations(np.array(obs_l, dtype=np.float32), np.array(mask_l, dtype=bool),
                          np.array(act_l, dtype=np.int64), np.array(ret_l, dtype=np.float32))


def discounted(rewards: Sequence[float], gamma: float) -> list[float]:
    """Each step's return: its reward plus ``gamma`` x the next step's return."""
    out, acc = [0.0] * len(rewards), 0.0
    for i in range(len(rewards) - 1, -1, -1):
        acc = rewards[i] + gamma * acc
        out[i] = acc
    return out


def pretrain(policy: Any, demos: Demonstrations, epochs: int, seed: int,
             batch_size: int = 256, value_coef: float = 0.5) -> tuple[float, float]:
    """Fit a MaskablePPO policy to ``demos`` (its own Adam optimizer at PPO's learning
    rate; the value head's bias set to the mean return first, since the returns are in
    the hundreds and a few hundred Adam steps move a bias by less than one); the final
    epoch's mean cross-entropy (nats: exp(-it) is the geometric mean probability the
    policy gives the rule's choice) and the deterministic choice's agreement."""
    import torch
    import torch.nn.functional as F

    obs = torch.as_tensor(demos.obs)
    masks = torch.as_tensor(demos.masks)
    actions = torch.as_tensor(demos.actions)
    returns = torch.as_tensor(demos.returns)
    gen = torch.Generator().manual_seed(seed)
    n, ce_mean = len(actions), 0.0
    with torch.no_grad():       # the critic starts at the mean return, then fits the rest
        policy.value_net.bias.fill_(float(returns.mean()) if n else 0.0)
    policy.set_training_mode(True)
    for _ in range(epochs):
        order, total = torch.randperm(n, generator=gen), 0.0
        for lo in range(0, n, batch_size):
            pick = order[lo:lo + batch_size]
            values, log_prob, _ = policy.evaluate_actions(obs[pick], actions[pick],
                                                          action_masks=masks[pick])
            ce = -log_prob.mean()
            loss = ce + value_coef * F.mse_loss(values.flatten(), returns[pick])
            policy.optimizer.zero_grad()
            loss.backward()
            policy.optimizer.step()
            total += float(ce.detach()) * len(pick)
        ce_mean = total / max(n, 1)
    policy.set_training_mode(False)
    with torch.no_grad():
        dist = policy.get_distribution(obs, action_masks=demos.masks)
        chosen = dist.get_actions(deterministic=True)
    return ce_mean, float((chosen == actions).float().mean())
