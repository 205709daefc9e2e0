"""Train the RL scheduler's policy (deepshare-rl Algorithm 1) on the cluster simulator.

The environment is :class:`.gym_env.ContentionEnv`; the algorithm is sb3-contrib's
MaskablePPO (PPO, the paper's default in stable-baselines3, with the actions that do
not fit masked out instead of being no-ops the agent has to learn to
avoid).  Episodes are drawn from a trace's *training* job sets
(:data:`TRAIN_SETS`, disjoint from the sets the comparison evaluates on).

Training prints a line per episode (reward, JCT, utilisation, CS) and writes, next to
the policy (``NAME.zip``): ``NAME.json`` (the settings, the command that reproduces it,
the training time, the library versions and every episode's figures) and
``NAME-curves.png``/``.pdf`` (the curves).  The policy and its record are written
atomically (mltcp.lab.common.atomic): a training cut short leaves the previous policy
of that name whole, never a truncated zip that a later experiment would load.

    mltcp cluster rl-train --out mltcp/lab/cluster/papers/deepshare_rl/policies \\
        --name deepshare-normal-w0.4 --trace normal --w1 0.4 --timesteps 150000
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from mltcp.core import validate
from mltcp.core.errors import CapabilityError
from mltcp.lab.cluster.engine.network import congestion_control
from mltcp.lab.cluster.papers.deepshare_rl import setup as deepshare
from mltcp.lab.common import plotting
from mltcp.lab.common.atomic import replacing, write_json

TRAIN_SETS = tuple(range(100, 110))     # the comparison evaluates on sets 0..9


@dataclass(frozen=True)
class TrainConfig:
    trace: str = "normal"
    w1: float = deepshare.W1
    timesteps: int = 60_000
    jobs: int = deepshare.JOBS_PER_SET
    duration_s: float = deepshare.DURATION_S
    round_s: float = deepshare.ROUND_S
    network: str = "fair"
    seed: int = 0
    n_steps: int = 2048
    sets: tuple[int, ...] = TRAIN_SETS
    gamma: float = 0.99
    ent_coef: float = 0.0

    def __post_init__(self) -> None:
        validate.choice(self.trace, "trace", deepshare.TRACES)
        validate.number(self.w1, "w1", 0, 1, "0.4")
        validate.integer(self.timesteps, "timesteps", 64, 10**9, "60000")
        validate.integer(self.n_steps, "n_steps", 16, 10**6, "2048")
        validate.choice(self.network, "network", ("fair", "mltcp"))
        validate.number(self.gamma, "gamma", 0, 1, "0.99", lo_open=True)
        validate.number(self.ent_coef, "ent_coef", 0, 1, "0.01")


@dataclass
class Episode:
    """One training episode: its return (``reward``) and the return per round (the
    return grows with the episode's length, so episodes compare by the latter)."""

    timesteps: int
    elapsed_s: float
    reward: float
    reward_per_round: float
    steps: int
    jct_mean_s: float
    jct_p90_s: float
    utilisation: float
    mean_cs: float


@dataclass
class TrainResult:
    config: TrainConfig
    policy: Path
    train_s: float
    episodes: list[Episode] = field(default_factory=list)


def _libraries() -> Any:
    try:
        import sb3_contrib
        import stable_baselines3
        from sb3_contrib import MaskablePPO
        from stable_baselines3.common.callbacks import BaseCallback
    except ImportError:
        raise CapabilityError("training the RL scheduler needs stable-baselines3 and "
                              "sb3-contrib: pip install 'mltcp[rl]'") from None
    return sb3_contrib, stable_baselines3, MaskablePPO, BaseCallback


def train(cfg: TrainConfig, out_dir: str | Path, name: str,
          progress: Callable[[str], None] | None = None, command: str = "") -> TrainResult:
    """Train a policy by ``cfg`` and write it with its record and curves to ``out_dir``."""
    sb3_contrib, sb3, MaskablePPO, BaseCallback = _libraries()
    import torch

    from mltcp.lab.cluster.papers.deepshare_rl import gym_env as rl_env

    validate.text(name, "name", "deepshare-normal-w0.4")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    env = rl_env.ContentionEnv(
        rl_env.trace_sets(cfg.trace, cfg.sets, cfg.jobs, cfg.duration_s),
        congestion_control(cfg.network, deepshare.fabric()), cfg.w1, cfg.round_s,
        seed=cfg.seed)
    torch.set_num_threads(1)            # a small MLP: threads only add overhead
    model = MaskablePPO("MlpPolicy", env, n_steps=cfg.n_steps, batch_size=64,
                        gamma=cfg.gamma, ent_coef=cfg.ent_coef, seed=cfg.seed,
                        device="cpu", verbose=0)
    result = TrainResult(cfg, out / f"{name}.zip", 0.0)
    started = time.monotonic()
    say = progress or (lambda line: print(line, file=sys.stderr, flush=True))

    class Progress(BaseCallback):
        def _on_step(self) -> bool:
            for info, done in zip(self.locals["infos"], self.locals["dones"], strict=True):
                if not done or "jct_mean_s" not in info:
                    continue
                rounds = max(info["makespan_s"] / cfg.round_s, 1e-9)
                ep = Episode(self.num_timesteps, time.monotonic() - started,
                             info["reward_sum"], info["reward_sum"] / rounds,
                             info["steps"], info["jct_mean_s"],
                             info["jct_p90_s"], info["utilisation"], info["cs"])
                result.episodes.append(ep)
                say(f"[episode {len(result.episodes)}, {ep.timesteps}/{cfg.timesteps} "
                    f"steps, {ep.elapsed_s:.0f} s] reward {ep.reward_per_round:.3f} per "
                    f"round, JCT mean "
                    f"{ep.jct_mean_s / 3600:.2f} h, p90 {ep.jct_p90_s / 3600:.2f} h, "
                    f"util {ep.utilisation:.3f}")
            return True

    model.learn(total_timesteps=cfg.timesteps, callback=Progress())
    result.train_s = time.monotonic() - started
    with replacing(result.policy) as tmp:      # its name keeps .zip: SB3 adds none
        model.save(tmp)
    record = {"name": name, "config": asdict(cfg), "command": command,
              "train_s": result.train_s, "timesteps": cfg.timesteps,
              "versions": {"stable_baselines3": sb3.__version__,
                           "sb3_contrib": sb3_contrib.__version__,
                           "torch": torch.__version__},
              "episodes": [asdict(e) for e in result.episodes]}
    write_json(out / f"{name}.json", record, indent=1)
    plot_curves(result, out / f"{name}-curves")
    return result


def plot_curves(result: TrainResult, path: Path) -> list[Path]:
    """Reward per round, mean JCT and utilisation of each episode against training
    steps, as PNG and PDF (``path`` with either suffix or none); the N episodes in the
    title."""
    eps = result.episodes
    fig, axes = plotting.figure(1, 3, figsize=(13, 3.8))
    x = [e.timesteps for e in eps]
    # One series per panel: a thin solid line with a dot per episode (a dashed style
    # would only blur a noisy curve; nothing shares the panel to tell it from).
    for ax, ys, label, style in zip(axes, ([e.reward_per_round for e in eps],
                                           [e.jct_mean_s / 3600 for e in eps],
                                           [e.utilisation for e in eps]),
                                    ("reward per round (Eq. 2)", "mean JCT (h)",
                                     "GPU utilisation"), plotting.styles(), strict=False):
        ax.plot(x, ys, color=style["color"], linestyle="-", linewidth=0.8, marker=".",
                markersize=3)
        ax.set_xlabel("training steps")
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
    cfg = result.config
    fig.suptitle(f"RL scheduler training: trace {cfg.trace}, W1 {cfg.w1}, {cfg.network}, "
                 f"N={len(eps)} episodes (one point each), {result.train_s:.0f} s",
                 fontsize=10)
    return plotting.save(fig, path)
