"""Train the RL scheduler's policy (deepshare-rl Algorithm 1) on the cluster simulator.

The environment is :class:`.gym_env.ContentionEnv`; the algorithm is sb3-contrib's
MaskablePPO (PPO, the paper's default in stable-baselines3, with the actions that do
not fit masked out instead of being no-ops the agent has to learn to
avoid).  Episodes are drawn from a trace's *training* job sets
(:data:`TRAIN_SETS`, disjoint from the sets the comparison evaluates on).

Three options go beyond the paper (all off by default, the paper's setup):

* ``jct_weight`` (W3): the reward's JCT term (:mod:`.gym_env`), which Eq. 2 lacks;
* ``select_sets``: checkpoint selection (:mod:`.selection`): every ``select_every``
  steps the policy is run as the deployed ``select_by`` scheduler on these job sets
  (200-204 by convention, disjoint from training's 100-109 and the comparison's 0-9),
  and the policy written is the checkpoint with the lowest mean JCT there, not the
  last one.  Judging a checkpoint draws no random numbers, so the training itself is
  the same with or without it;
* ``warm_start``: imitate a fixed rule (``deepshare-first-fit``) on the training sets
  before PPO (:mod:`.imitation`), so that PPO learns what the rule does not.

Training prints a line per episode (reward, JCT, utilisation, CS) and per checkpoint,
and writes the policy (``NAME.zip``, stable-baselines3's checkpoint with the NumPy copy
of its network that ``cluster run`` evaluates without PyTorch: :mod:`.numpy_export`)
and next to it ``NAME.json`` (the settings, the command that reproduces it, the
training time, the library versions, every episode's figures and the selection curve)
and ``NAME-curves.png``/``.pdf`` (the curves).  The policy and
its record are written atomically (mltcp.lab.common.atomic): a training cut short
leaves the previous policy of that name whole, never a truncated zip that a later
experiment would load.  stable-baselines3's logger is replaced by one that writes
nothing (its default leaves a ``/tmp/SB3-*`` folder per training).

Ctrl-C and the teardown signals (:mod:`mltcp.core.signals`) unwind a training within
milliseconds wherever they land (an environment step returns to Python every
``fluid_engine.SLICE_S``; a PPO update is thousands of small torch calls), except where
a library swallows the raise (stable-baselines3's ``deepcopy`` of each step's
observations runs a bare ``except:``): the training then raises it again at its next
environment or optimiser step (:func:`mltcp.core.signals.check`), so that it never runs
on past a Ctrl-C.

    mltcp cluster rl-train --out mltcp/lab/cluster/papers/deepshare_rl/policies \\
        --name deepshare-normal-w0.4 --trace normal --w1 0.4 --timesteps 150000
"""

from __future__ import annotations

import io
import itertools
import re
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from mltcp.core import console, signals, validate
from mltcp.core.errors import CapabilityError, SpecError
from mltcp.lab.cluster.engine.network import congestion_control
from mltcp.lab.cluster.papers.deepshare_rl import imitation as rl_imitate
from mltcp.lab.cluster.papers.deepshare_rl import numpy_export
from mltcp.lab.cluster.papers.deepshare_rl import selection as rl_select
from mltcp.lab.cluster.papers.deepshare_rl import setup as deepshare
from mltcp.lab.common import inputfile, plotting
from mltcp.lab.common.atomic import replacing, write_bytes, write_json
from mltcp.lab.common.eta import eta_text

TRAIN_SETS = deepshare.TRAIN_SETS       # the comparison evaluates on sets 0..9


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
    learning_rate: float = 3e-4             # SB3's default; lower keeps a warm start close
    jct_weight: float = 0.0                 # W3: 0 is the paper's Eq. 2
    select_sets: tuple[int, ...] = ()       # () keeps the last policy
    select_every: int = 10_000
    select_by: str = "rl-hybrid"
    warm_start: str = ""                    # "" or a rule to imitate first
    warm_start_epochs: int = 20

    def __post_init__(self) -> None:
        validate.choice(self.trace, "trace", deepshare.TRACES)
        validate.number(self.w1, "w1", 0, 1, "0.4")
        validate.integer(self.timesteps, "timesteps", 64, 10**9, "60000")
        validate.integer(self.n_steps, "n_steps", 16, 10**6, "2048")
        validate.choice(self.network, "network", ("fair", "mltcp"))
        validate.number(self.gamma, "gamma", 0, 1, "0.99", lo_open=True)
        validate.number(self.ent_coef, "ent_coef", 0, 1, "0.01")
        validate.number(self.learning_rate, "learning_rate", 1e-7, 1, "0.0003")
        validate.number(self.jct_weight, "jct_weight", 0, 100, "1")
        validate.integer(self.select_every, "select_every", 1, 10**9, "10000")
        validate.choice(self.select_by, "select_by", rl_select.SELECT_BY)
        if self.warm_start:
            validate.choice(self.warm_start, "warm_start", rl_imitate.RULES)
        validate.integer(self.warm_start_epochs, "warm_start_epochs", 1, 10_000, "20")
        object.__setattr__(self, "sets", tuple(self.sets))
        object.__setattr__(self, "select_sets", tuple(self.select_sets))
        rl_select.check_sets(self.sets, self.select_sets)
        if self.n_steps > self.timesteps:
            raise SpecError("n_steps", f"a rollout of {self.n_steps} steps is longer than "
                            f"the training's {self.timesteps}: PPO collects a whole rollout "
                            "before it looks at the total, so it would run "
                            f"{self.n_steps} steps", "give a rollout of at most "
                            f"{self.timesteps} steps, e.g. "
                            f"{_largest_power_of_two(self.timesteps)}")


def _largest_power_of_two(limit: int) -> int:
    """The largest power of two <= ``limit`` (a rollout length to suggest)."""
    return 1 << (max(limit, 1).bit_length() - 1)


# A policy's file name stem: NAME.zip, NAME.json and NAME-curves.png/.pdf go into --out,
# so the stem is a plain file name (no '/', which would write elsewhere; not '.' or
# '..' or hidden, which start with a dot), short enough for its longest file and the
# atomic writer's temporary name (".NAME-curves.tmp-PID.png") to stay under 255 bytes.
POLICY_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")
MAX_NAME = 100


def policy_name(value: object, field_: str = "name") -> str:
    """A policy's file name stem (:data:`POLICY_NAME`).  A trailing ``.zip`` is refused,
    not stripped: ``--name p.zip`` would write ``p.zip.zip``, and guessing what was meant
    would make the name on disk differ from the one given."""
    text = validate.text(value, field_, "deepshare-normal-w0.4")
    if not text.strip():
        raise SpecError(field_, "is empty", "give a file name stem, e.g. policy")
    if "/" in text:
        raise SpecError(field_, f"{text!r} holds a '/' (its files would go outside --out)",
                        "give a file name without '/', and the directory as --out")
    if len(text) > MAX_NAME:
        raise SpecError(field_, f"is {len(text)} characters long",
                        f"give at most {MAX_NAME}")
    if text.lower().endswith(".zip"):
        raise SpecError(field_, f"{text!r} ends in .zip, which rl-train adds itself",
                        f"give the stem: {text[:-4] or 'policy'}")
    return validate.name(text, field_, POLICY_NAME, "letters, digits, '.', '_' or '-', "
                         "starting with a letter or digit", "deepshare-normal-w0.4")


def output_paths(out_dir: str | Path, name: str, curves: bool = True) -> list[Path]:
    """The files a training writes into ``out_dir``: the policy, its record and (with
    ``curves``) its curves."""
    out = Path(out_dir)
    paths = [out / f"{name}.zip", out / f"{name}.json"]
    return paths + ([out / f"{name}-curves.png", out / f"{name}-curves.pdf"] if curves else [])


def check_outputs(out_dir: str | Path, name: str, curves: bool = True,
                  field_: str = "--out") -> None:
    """Refuse, before training, an output path held by something the training cannot
    replace (a directory, a FIFO): found after training it would throw the policy away.
    A regular file there is replaced, as a retraining of the same name should."""
    for path in output_paths(out_dir, name, curves):
        try:
            found = inputfile.kind(path.lstat().st_mode)
        except FileNotFoundError:
            continue
        if found:
            raise SpecError(field_, f"{path} is {found}, where rl-train writes a file",
                            "remove it, or give another --name or --out")


@dataclass
class Episode:
    """One training episode: its return (``reward``) and the return per round (the
    return grows with the episode's length, so episodes compare by the latter), and
    the Eq. 2 part of the latter (the same without a JCT term)."""

    timesteps: int
    elapsed_s: float
    reward: float
    reward_per_round: float
    steps: int
    jct_mean_s: float
    jct_p90_s: float
    utilisation: float
    mean_cs: float
    eq2_per_round: float = 0.0


@dataclass
class TrainResult:
    config: TrainConfig
    policy: Path
    train_s: float
    episodes: list[Episode] = field(default_factory=list)
    selection: rl_select.Selection | None = None
    warm_start: rl_imitate.WarmStart | None = None


def _libraries() -> Any:
    try:
        import sb3_contrib
        import stable_baselines3
        from sb3_contrib import MaskablePPO
        from stable_baselines3.common.callbacks import BaseCallback
        from stable_baselines3.common.logger import Logger
    except ImportError:
        raise CapabilityError("training the RL scheduler needs stable-baselines3 and "
                              "sb3-contrib: pip install 'mltcp[rl]'") from None
    return sb3_contrib, stable_baselines3, MaskablePPO, BaseCallback, Logger


def quiet_logger(logger_cls: Any) -> Any:
    """A stable-baselines3 logger that writes nothing anywhere: its default, even at
    ``verbose=0``, makes a ``/tmp/SB3-<date>`` folder per training and leaves it."""
    return logger_cls(folder=None, output_formats=[])


def train(cfg: TrainConfig, out_dir: str | Path, name: str,
          progress: Callable[[str], None] | None = None, command: str = "",
          curves: bool = True) -> TrainResult:
    """Train a policy by ``cfg`` and write it with its record and (``curves``: the
    figure takes longer than a tiny training) its curves to ``out_dir``."""
    sb3_contrib, sb3, MaskablePPO, BaseCallback, Logger = _libraries()
    import torch

    from mltcp.lab.cluster.papers.deepshare_rl import gym_env as rl_env

    policy_name(name)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    check_outputs(out, name, curves)
    env = rl_env.ContentionEnv(
        rl_env.trace_sets(cfg.trace, cfg.sets, cfg.jobs, cfg.duration_s),
        congestion_control(cfg.network, deepshare.fabric()), cfg.w1, cfg.round_s,
        seed=cfg.seed, jct_weight=cfg.jct_weight)
    torch.set_num_threads(1)            # a small MLP: threads only add overhead
    model = MaskablePPO("MlpPolicy", env, n_steps=cfg.n_steps, batch_size=64,
                        gamma=cfg.gamma, ent_coef=cfg.ent_coef, seed=cfg.seed,
                        learning_rate=cfg.learning_rate,
                        device="cpu", verbose=0)
    model.set_logger(quiet_logger(Logger))
    # the update's safe point: every minibatch (PPO's and the warm start's, one optimiser)
    model.policy.optimizer.register_step_pre_hook(lambda *_: signals.check())
    result = TrainResult(cfg, out / f"{name}.zip", 0.0)
    started = time.monotonic()
    say = progress or console.line
    beat = Heartbeat(say)

    def where() -> str:
        steps = model.num_timesteps
        run = env.run
        at = f", episode {len(result.episodes) + 1} at simulated {run.t:.3g} s" if run else ""
        return (f"[training, {time.monotonic() - started:.0f} s] {steps}/{cfg.timesteps} "
                f"steps{at}; {eta_text(time.monotonic() - started, steps / cfg.timesteps)}")

    env.on_moment = lambda: beat.maybe(where)
    if cfg.warm_start:
        result.warm_start = warm_start(model, cfg, lambda: beat.maybe(
            lambda: f"[warm start, {time.monotonic() - started:.0f} s] imitating "
                    f"{cfg.warm_start} on {len(cfg.sets)} training sets"))
        ws = result.warm_start
        say(f"[warm start] {ws.rule}: {ws.decisions} decisions of {ws.episodes} episodes, "
            f"{ws.epochs} epochs, the policy repeats {100 * ws.agreement:.1f} % of them, "
            f"cross-entropy {ws.cross_entropy:.3f} ({time.monotonic() - started:.0f} s)")
    chooser = Chooser(model, cfg, say, beat) if cfg.select_sets else None
    result.selection = chooser.selection if chooser else None

    class Progress(BaseCallback):
        def _on_rollout_start(self) -> None:
            signals.check()
            # between PPO updates: the policy judged is one the training really had
            if chooser is not None:
                chooser.maybe_judge(self.num_timesteps)

        def _on_step(self) -> bool:
            signals.check()     # right after the step's deepcopy, which may swallow it
            beat.maybe(where)
            for info, done in zip(self.locals["infos"], self.locals["dones"], strict=True):
                if not done or "jct_mean_s" not in info:
                    continue
                rounds = max(info["makespan_s"] / cfg.round_s, 1e-9)
                ep = Episode(self.num_timesteps, time.monotonic() - started,
                             info["reward_sum"], info["reward_sum"] / rounds,
                             info["steps"], info["jct_mean_s"],
                             info["jct_p90_s"], info["utilisation"], info["cs"],
                             info["eq2_sum"] / rounds)
                result.episodes.append(ep)
                beat.reset()
                say(f"[episode {len(result.episodes)}, {ep.timesteps}/{cfg.timesteps} "
                    f"steps, {ep.elapsed_s:.0f} s] reward {ep.reward_per_round:.3f} per "
                    f"round, JCT mean "
                    f"{ep.jct_mean_s / 3600:.2f} h, p90 {ep.jct_p90_s / 3600:.2f} h, "
                    f"util {ep.utilisation:.3f}")
            return True

    model.learn(total_timesteps=cfg.timesteps, callback=Progress())
    if chooser is not None:
        chooser.judge(model.num_timesteps)          # the last policy is a checkpoint too
    result.train_s = time.monotonic() - started
    # the policy with the NumPy copy of its network, which cluster run evaluates
    if chooser is None:
        with replacing(result.policy) as tmp:      # its name keeps .zip: SB3 adds none
            model.save(tmp)
            tmp.write_bytes(numpy_export.with_network(tmp.read_bytes(), str(result.policy)))
    else:
        write_bytes(result.policy, numpy_export.with_network(chooser.selection.best_policy,
                                                             str(result.policy)))
    record = {"name": name, "config": asdict(cfg), "command": command,
              "train_s": result.train_s, "timesteps": cfg.timesteps,
              "versions": {"stable_baselines3": sb3.__version__,
                           "sb3_contrib": sb3_contrib.__version__,
                           "torch": torch.__version__},
              "episodes": [asdict(e) for e in result.episodes],
              "selection": chooser.selection.record() if chooser else None,
              "warm_start": result.warm_start.to_dict() if result.warm_start else None}
    write_json(out / f"{name}.json", record, indent=1)
    if curves:
        plot_curves(result, out / f"{name}-curves")
    return result


def warm_start(model: Any, cfg: TrainConfig,
               on_moment: Callable[[], None] | None = None) -> rl_imitate.WarmStart:
    """Imitate ``cfg.warm_start`` (:mod:`.imitation`): one episode per training set, in
    order, in an environment like the training's (same reward)."""
    from mltcp.lab.cluster.papers.deepshare_rl import gym_env as rl_env

    order = itertools.cycle(cfg.sets)
    env = rl_env.ContentionEnv(
        lambda rng: deepshare.job_set(cfg.trace, next(order), cfg.jobs, cfg.duration_s),
        congestion_control(cfg.network, deepshare.fabric()), cfg.w1, cfg.round_s,
        seed=cfg.seed, jct_weight=cfg.jct_weight)
    env.on_moment = on_moment
    demos = rl_imitate.demonstrate(env, rl_imitate.rule(cfg.warm_start), len(cfg.sets),
                                   cfg.gamma)
    ce, agreement = rl_imitate.pretrain(model.policy, demos, cfg.warm_start_epochs, cfg.seed)
    return rl_imitate.WarmStart(cfg.warm_start, len(cfg.sets), len(demos.actions),
                                cfg.warm_start_epochs, ce, agreement)


class Chooser:
    """Checkpoint selection during a training (:mod:`.selection`): judges ``model``
    before its first update (step 0: the initial or warm-started policy) and every
    ``cfg.select_every`` steps (at the first rollout boundary past it), and keeps the
    best policy's bytes."""

    def __init__(self, model: Any, cfg: TrainConfig, say: Callable[[str], None],
                 beat: Heartbeat | None = None) -> None:
        self.model, self.cfg, self.say = model, cfg, say
        self.beat = beat or Heartbeat(say)
        self.selection = rl_select.Selection(cfg.select_sets, cfg.select_by,
                                             cfg.select_every)
        self.next_at = 0

    def act(self, obs: Any, mask: Any) -> int:
        signals.check()             # a judging episode's safe point
        action, _ = self.model.predict(obs, action_masks=mask, deterministic=True)
        return int(action)

    def maybe_judge(self, timesteps: int) -> None:
        if timesteps >= self.next_at:
            self.judge(timesteps)
            while self.next_at <= timesteps:
                self.next_at += self.cfg.select_every

    def judge(self, timesteps: int) -> None:
        done = self.selection.checkpoints
        if done and done[-1].timesteps == timesteps:
            return
        cfg = self.cfg
        began = time.monotonic()

        def judged(done_sets: int, total: int) -> None:
            self.beat.maybe(lambda: (
                f"[checkpoint {timesteps} steps] judging: {done_sets} of {total} selection "
                f"sets, {eta_text(time.monotonic() - began, done_sets / total)}"))

        jcts = evaluate_checkpoint(self.act, cfg, judged)
        self.beat.reset()
        kept = self.selection.offer(timesteps, jcts, self._snapshot)
        picked = self.selection.picked
        assert picked is not None
        self.say(f"[checkpoint {timesteps} steps] {cfg.select_by} mean JCT "
                 f"{np.mean(jcts) / 3600:.2f} h on sets "
                 f"{_ranges(cfg.select_sets)}{' (best so far)' if kept else ''}; "
                 f"best {picked.score_s / 3600:.2f} h at {picked.timesteps}")

    def _snapshot(self) -> bytes:
        buf = io.BytesIO()
        self.model.save(buf)
        return buf.getvalue()


def evaluate_checkpoint(act: Callable[[Any, Any], int], cfg: TrainConfig,
                        progress: Callable[[int, int], None] | None = None) -> list[float]:
    """A checkpoint's mean JCT on each of ``cfg``'s selection sets (a seam for tests);
    ``progress(done, total)`` after each set."""
    return rl_select.evaluate(act, cfg.select_sets, by=cfg.select_by, trace=cfg.trace,
                              jobs=cfg.jobs, duration_s=cfg.duration_s,
                              round_s=cfg.round_s, network=cfg.network, progress=progress)


class Heartbeat:
    """A progress line at most every EVERY_S seconds while the training goes on without
    one of its own (an episode's, a checkpoint's): an episode of jobs that run for
    months of simulated time, or a checkpoint judged on thousands of job sets, would
    otherwise be silent for minutes.  ``maybe(text)`` prints ``text()`` when one is
    due; ``reset()`` after any other line."""

    EVERY_S = 10.0

    def __init__(self, say: Callable[[str], None]) -> None:
        self.say = say
        self.due = time.monotonic() + self.EVERY_S

    def maybe(self, text: Callable[[], str]) -> None:
        now = time.monotonic()
        if now >= self.due:
            self.due = now + self.EVERY_S
            self.say(text())

    def reset(self) -> None:
        self.due = time.monotonic() + self.EVERY_S


def _ranges(sets: tuple[int, ...]) -> str:
    """``(200, 201, 202, 205)`` -> ``"200-202,205"``."""
    parts, start = [], 0
    for i, x in enumerate(sets):
        if i == 0 or sets[i - 1] != x - 1:
            start = x
        if i + 1 == len(sets) or sets[i + 1] != x + 1:
            parts.append(str(x) if start == x else f"{start}-{x}")
    return ",".join(parts)


def plot_curves(result: TrainResult, path: Path) -> list[Path]:
    """Reward per round, mean JCT and utilisation of each episode against training
    steps, and, with checkpoint selection, each checkpoint's mean JCT on the selection
    sets (the pick circled), as PNG and PDF (``path`` with either suffix or none); the N
    episodes and N selection sets in the titles."""
    eps, cfg = result.episodes, result.config
    chosen = result.selection.checkpoints if result.selection else []
    fig, axes = plotting.figure(1, 4 if chosen else 3, figsize=(17 if chosen else 13, 3.8))
    x = [e.timesteps for e in eps]
    reward = ("reward per round (Eq. 2)" if cfg.jct_weight == 0 else
              f"reward per round (Eq. 2 - {cfg.jct_weight:g} x jobs in system)")
    # One series per panel: a thin solid line with a dot per episode (a dashed style
    # would only blur a noisy curve; nothing shares the panel to tell it from).
    styles = list(itertools.islice(plotting.styles(), 4))
    for ax, ys, label, style in zip(axes, ([e.reward_per_round for e in eps],
                                           [e.jct_mean_s / 3600 for e in eps],
                                           [e.utilisation for e in eps]),
                                    (reward, "mean JCT (h), training episodes",
                                     "GPU utilisation"), styles, strict=False):
        ax.plot(x, ys, color=style["color"], linestyle="-", linewidth=0.8, marker=".",
                markersize=3)
        ax.set_xlabel("training steps")
        ax.set_ylabel(label, fontsize=9)
        ax.grid(alpha=0.3)
    if chosen:
        sel = result.selection
        assert sel is not None and sel.picked is not None
        ax, style = axes[3], styles[3 % len(styles)]
        ax.plot([c.timesteps for c in chosen], [c.score_s / 3600 for c in chosen],
                color=style["color"], linestyle="-", linewidth=0.8, marker="s",
                markersize=4)
        ax.plot([sel.picked.timesteps], [sel.picked.score_s / 3600], marker="o",
                markersize=11, markerfacecolor="none", markeredgecolor="black",
                linestyle="none", label="picked")
        ax.set_xlabel("training steps")
        ax.set_ylabel(f"{sel.by} mean JCT (h)", fontsize=9)
        ax.set_title(f"selection: sets {_ranges(sel.sets)}, N={len(sel.sets)}", fontsize=9)
        ax.legend(fontsize="small")
        ax.grid(alpha=0.3)
    w3 = f", W3 {cfg.jct_weight:g}" if cfg.jct_weight else ""
    fig.suptitle(f"RL scheduler training: trace {cfg.trace}, W1 {cfg.w1}{w3}, {cfg.network}, "
                 f"N={len(eps)} episodes (one point each), {result.train_s:.0f} s",
                 fontsize=10)
    return plotting.save(fig, path)
