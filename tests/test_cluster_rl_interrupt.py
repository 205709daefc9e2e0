"""``mltcp cluster rl-train`` stops promptly and cleanly: Ctrl-C (and SIGTERM) sent to a
real training at several moments, in its rollouts and in its PPO updates, ends it with
the interrupt's exit code and one line, with no policy file, whole or partial; a Ctrl-C
that a library swallows is raised again at the next step; and no training leaves
stable-baselines3's ``SB3-*`` log folder in the temporary directory.

How fast is a benchmark's figure, not these tests' (they run beside others on 2 cores).
On a quiet machine: 0.37-0.57 s with ``bench/bench_ctrl_c.py --case rl-train`` (N = 5),
0.21-0.32 s over 12 moments of this test run alone, and 1.1-1.7 s before the
interpreter's exit stopped running full garbage collections over torch's objects.  In a
whole suite, beside the host tests, the same moments took 0.3-2.5 s; a swallowed signal
runs on until the harness kills it."""

from __future__ import annotations

import os
import signal
import tempfile
from pathlib import Path

import pytest

pytest.importorskip("sb3_contrib", reason="rl-train needs mltcp[rl] (sb3-contrib)")

from mltcp.core import signals  # noqa: E402
from mltcp.lab.cluster.papers.deepshare_rl import gym_env as rl_env  # noqa: E402
from mltcp.lab.cluster.papers.deepshare_rl import train as rl_train  # noqa: E402
from tests.interrupt import Interrupted, ctrl_c_when  # noqa: E402

# Small episodes (8 jobs) and rollouts of 1024 steps: an episode line every few ms, a
# rollout of ~2.5 s and an update of ~0.5 s (320 minibatches) on a 2-core machine.
ARGV = ["cluster", "rl-train", "--out", "out", "--name", "p", "--jobs", "8",
        "--duration-s", "300", "--round-s", "30", "--timesteps", "1000000",
        "--n-steps", "1024"]
# A line when each PPO update starts and ends, so that a signal can be aimed at one.
MARK_UPDATES = """
import sys
from sb3_contrib import MaskablePPO
_update = MaskablePPO.train
def _marked(self):
    print("test: update started", file=sys.stderr, flush=True)
    _update(self)
    print("test: update done", file=sys.stderr, flush=True)
MaskablePPO.train = _marked
"""


def _interrupt(tmp_path: Path, running: str, delay_s: float,
               signo: signal.Signals = signal.SIGINT) -> tuple[Interrupted, Path]:
    """One training in its own directory (and temporary directory, so that an SB3-*
    folder there is this run's), sent ``signo`` ``delay_s`` after ``running``."""
    tmp_path.mkdir()
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    got = ctrl_c_when(ARGV, tmp_path, running, wait_s=120, exit_s=10, delay_s=delay_s,
                      signo=signo, prelude=MARK_UPDATES,
                      env={**os.environ, "TMPDIR": str(scratch)})
    return got, tmp_path


def _clean(got: Interrupted, where: Path, signo: signal.Signals) -> None:
    assert got.returncode == signals.exit_code(signo), got.stderr
    assert got.stderr.splitlines()[-1] == f"mltcp: interrupted ({signo.name})", got.stderr
    out = where / "out"
    assert not (out / "p.zip").exists() and not (out / "p.json").exists()
    assert not [p.name for p in out.iterdir() if p.name.startswith(".")]   # temporaries
    assert not list((where / "tmp").glob("SB3-*"))


def test_ctrl_c_stops_a_training_in_rollouts_and_updates(tmp_path: Path) -> None:
    """Four moments: two in rollouts (an environment step: the cluster simulator in
    the compiled engine, PPO's forward pass) and two in the first PPO update (a
    gradient step), and a SIGTERM.  Each must exit 130 (143) with nothing written and
    end before the harness's 10 s kill (a swallowed signal let the training run on);
    the latency itself is bench_ctrl_c's (module docstring)."""
    latencies, in_update = [], 0
    for i, delay in enumerate((0.0, 0.6)):
        got, where = _interrupt(tmp_path / f"rollout{i}", "[episode 1,", delay)
        _clean(got, where, signal.SIGINT)
        latencies.append(got.latency_s)
    for i, delay in enumerate((0.0, 0.15)):
        got, where = _interrupt(tmp_path / f"update{i}", "test: update started", delay)
        _clean(got, where, signal.SIGINT)
        latencies.append(got.latency_s)
        in_update += "test: update done" not in got.stderr      # it landed inside
    got, where = _interrupt(tmp_path / "sigterm", "[episode 1,", 0.3, signal.SIGTERM)
    _clean(got, where, signal.SIGTERM)
    latencies.append(got.latency_s)
    assert in_update >= 1, "no signal landed inside a PPO update"
    assert max(latencies) < 8, latencies        # well before the kill at 10 s


# --------------------------------------------------------------- a swallowed Ctrl-C

TINY = dict(jobs=8, duration_s=300.0, round_s=30.0, n_steps=32, sets=(100, 101))


def _swallow_ctrl_c(swallowed: list[bool]) -> None:
    """Ctrl-C landing inside a library's bare ``except:`` (as in ``copyreg._slotnames``,
    under stable-baselines3's deepcopy of each step's observations): it is gone."""
    try:  # noqa: SIM105 -- the library's code, as it is
        os.kill(os.getpid(), signal.SIGINT)      # the handler raises before the next line
    except:  # noqa: E722
        pass
    swallowed.append(signals.received() == signal.SIGINT)


def test_a_swallowed_ctrl_c_is_raised_again_at_the_next_environment_step(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Before, the training ran on to its end (and ignored every later Ctrl-C as if
    its teardown were under way)."""
    steps: list[int] = []
    swallowed: list[bool] = []
    step = rl_env.ContentionEnv.step

    def counted(self, action):  # type: ignore[no-untyped-def]
        steps.append(action)
        if len(steps) == 40:
            _swallow_ctrl_c(swallowed)
        return step(self, action)

    monkeypatch.setattr(rl_env.ContentionEnv, "step", counted)
    cfg = rl_train.TrainConfig(**TINY, timesteps=640)
    with pytest.raises(signals.Terminated), signals.unwinding():
        rl_train.train(cfg, tmp_path, "p", progress=lambda line: None, curves=False)
    assert swallowed == [True] and len(steps) == 40      # not one step more
    assert not list(tmp_path.glob("p*"))


def test_a_ctrl_c_swallowed_in_an_update_is_raised_again_at_its_next_gradient_step(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from sb3_contrib.common.maskable.buffers import MaskableRolloutBuffer

    batches: list[int] = []
    swallowed: list[bool] = []
    get = MaskableRolloutBuffer.get

    def swallowing(self, batch_size=None):  # type: ignore[no-untyped-def]
        for batch in get(self, batch_size):
            batches.append(1)
            if len(batches) == 3:
                _swallow_ctrl_c(swallowed)
            yield batch

    monkeypatch.setattr(MaskableRolloutBuffer, "get", swallowing)
    cfg = rl_train.TrainConfig(**TINY, timesteps=640)
    with pytest.raises(signals.Terminated) as info, signals.unwinding():
        rl_train.train(cfg, tmp_path, "p", progress=lambda line: None, curves=False)
    assert swallowed == [True] and len(batches) == 3     # its gradient step raised it
    assert info.traceback[-1].name == "check"
    assert not list(tmp_path.glob("p*"))


# --------------------------------------------------------------- no SB3-* folders


def test_a_training_leaves_no_sb3_folder_in_the_temporary_directory(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """stable-baselines3's default logger makes ``SB3-<date>`` in the temporary
    directory at every ``learn()``, even when it writes nothing, and leaves it; the
    training gives it a logger of its own.  The temporary directory is one of this
    test's (stable-baselines3 asks ``tempfile.gettempdir()``), so that another process's
    folder in /tmp cannot be taken for this training's."""
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    before = set(os.listdir(scratch))
    rl_train.train(rl_train.TrainConfig(**TINY, timesteps=64), tmp_path / "out", "p",
                   progress=lambda line: None, curves=False)
    assert (tmp_path / "out" / "p.zip").is_file()
    assert not [n for n in set(os.listdir(scratch)) - before if n.startswith("SB3-")]
