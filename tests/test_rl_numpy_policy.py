"""The RL scheduler's policy evaluated in NumPy (issue 26): the shipped policies carry a
NumPy copy of their network taken from their own ``policy.pth``; its decisions are
stable-baselines3's on thousands of observations of real cluster runs; ``mltcp cluster
run`` with the RL schedulers runs where PyTorch cannot be imported at all; and a policy
without the copy is derived where PyTorch is installed, one line naming the fix where
it is not.

The tests that compare with stable-baselines3 need the ``rl`` extra and are skipped
without it; the others need only the ``lab`` extra.
"""

from __future__ import annotations

import importlib.util
import io
import json
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest

from mltcp.lab.cluster.engine.simulator import ClusterSim
from mltcp.lab.cluster.experiments import registry
from mltcp.lab.cluster.papers.deepshare_rl import numpy_policy
from mltcp.lab.cluster.papers.deepshare_rl import policy_file as rl_file
from mltcp.lab.cluster.papers.deepshare_rl import schedulers as rl_sched
from mltcp.lab.cluster.papers.deepshare_rl import setup as deepshare
from mltcp.lab.cluster.papers.deepshare_rl.encoding import Layout
from mltcp.lab.cluster.papers.deepshare_rl.numpy_policy import MEMBER, MlpPolicy, NotDerived

NET = deepshare.fabric()
LAYOUT = Layout.of(NET)
SHIPPED = (rl_sched.SHIPPED, rl_sched.SHIPPED_JCT)
REPO = Path(__file__).resolve().parents[1]
needs_sb3 = pytest.mark.skipif(importlib.util.find_spec("sb3_contrib") is None,
                               reason="comparing with stable-baselines3 needs mltcp[rl]")

# A Python that cannot import PyTorch, stable-baselines3 or Gymnasium (what the lab
# extra alone installs), running ``mltcp`` with the arguments given after ``-c``.
BLOCKED = ("torch", "torchvision", "stable_baselines3", "sb3_contrib", "gymnasium")
WITHOUT_TORCH = f"""
import sys
BLOCKED = {BLOCKED!r}
class NoTorch:
    def find_spec(self, name, path=None, target=None):
        if name.partition('.')[0] in BLOCKED:
            raise ModuleNotFoundError(f"No module named {{name!r}} (blocked by the test)")
        return None
sys.meta_path.insert(0, NoTorch())
from mltcp.cli import main
code = main(sys.argv[1:])
loaded = set(BLOCKED) & set(sys.modules)
assert not loaded, loaded
sys.exit(code)
"""


def _without_torch(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", WITHOUT_TORCH, *args], cwd=cwd,
                          capture_output=True, text=True, timeout=600, check=False)


def _config(where: Path, schedulers: str, jobs: int = 4) -> Path:
    path = where / "c.toml"
    path.write_text(f'name = "t"\nschedulers = {schedulers}\nnetworks = ["fair"]\n'
                    f'[jobs]\nsetup = {{ name = "deepshare-normal", first = {jobs} }}\n')
    return path


def _stripped(path: Path, out: Path) -> Path:
    """A copy of the policy at ``path`` without its NumPy copy (as a policy saved
    before it existed)."""
    with zipfile.ZipFile(path) as src, zipfile.ZipFile(out, "w") as dst:
        for info in src.infolist():
            if info.filename != MEMBER:
                dst.writestr(info, src.read(info))
    return out


def _toy(logits_of_zero: list[float]) -> MlpPolicy:
    """A network without hidden layers whose logits at the zero observation are the
    given ones (the biases)."""
    n = len(logits_of_zero)
    return MlpPolicy((2, 3), (), (np.zeros((n, 6), np.float32),
                                  np.array(logits_of_zero, np.float32)), "tanh", "x")


# --------------------------------------------------------------------------- no PyTorch


def test_the_shipped_policies_carry_their_network_for_numpy() -> None:
    for name in SHIPPED:
        path = rl_sched.shipped_path(name)
        net = numpy_policy.read(path)           # its digest is that of its policy.pth
        assert (net.obs_shape, net.actions, net.activation) == (LAYOUT.shape, LAYOUT.actions,
                                                                "tanh")
        assert [w.shape for w, _ in net.hidden] == [(64, 96), (64, 64)]
        with zipfile.ZipFile(path) as archive:
            assert archive.getinfo(MEMBER).file_size < 100_000
        act = rl_file.load_policy(path, LAYOUT)
        mask = np.ones(LAYOUT.actions, dtype=bool)
        assert 0 <= act(np.zeros(LAYOUT.shape, np.float32), mask) < LAYOUT.actions


def test_a_masked_action_is_never_chosen_and_ties_go_to_the_first() -> None:
    net = _toy([0.5, 3.0, 1.0, 3.0])
    obs = np.zeros((2, 3), np.float32)
    assert net.act(obs, np.array([True, True, True, True])) == 1          # first of a tie
    assert net.act(obs, np.array([True, False, True, True])) == 3
    assert net.act(obs, np.array([True, False, True, False])) == 2
    assert net.act(obs, np.zeros(4, bool)) == 0         # none allowed: 0, as sb3-contrib
    assert net.logits(np.zeros((5, 2, 3))).shape == (5, 4)
    assert net.logits(obs).shape == (4,)


def test_the_member_is_the_same_bytes_for_the_same_network() -> None:
    net = numpy_policy.read(rl_sched.shipped_path())
    raw = numpy_policy.to_npz(net)
    assert numpy_policy.to_npz(numpy_policy.from_npz(raw)) == raw
    again = numpy_policy.from_npz(raw)
    obs = np.random.default_rng(0).uniform(0, 2, (50, *LAYOUT.shape))
    assert np.array_equal(again.logits(obs), net.logits(obs))


def test_a_member_of_another_network_or_format_is_refused() -> None:
    with pytest.raises(ValueError, match="layer 0"):
        MlpPolicy((4, 24), (), (np.zeros((29, 95), np.float32), np.zeros(29, np.float32)),
                  "tanh", "x")
    with pytest.raises(ValueError, match="activation"):
        _toy([0.0, 1.0]).__class__((2, 3), (), _toy([0.0, 1.0]).action, "gelu", "x")
    raw = io.BytesIO()
    np.savez(raw, format=np.array(99))
    with pytest.raises(ValueError, match="format 99"):
        numpy_policy.from_npz(raw.getvalue())


def test_a_copy_of_another_policy_pth_is_not_used(tmp_path: Path) -> None:
    """A zip whose NumPy copy is not of its own policy.pth (here: the JCT policy's
    copy in the Eq. 2 policy's zip) is refused, whatever the copy holds."""
    path = _stripped(rl_sched.shipped_path(), tmp_path / "p.zip")
    with zipfile.ZipFile(rl_sched.shipped_path(rl_sched.SHIPPED_JCT)) as other:
        foreign = other.read(MEMBER)
    with zipfile.ZipFile(path, "a") as archive:
        archive.writestr(MEMBER, foreign)
    with pytest.raises(NotDerived, match="another policy.pth"):
        numpy_policy.read(path)
    with pytest.raises(NotDerived, match="no NumPy copy"):
        numpy_policy.read(_stripped(rl_sched.shipped_path(), tmp_path / "bare.zip"))


def test_cluster_run_of_the_rl_schedulers_needs_no_pytorch(tmp_path: Path) -> None:
    """``mltcp cluster run`` of RL-base and RL-Hybrid (both shipped policies) in a
    Python where importing PyTorch, stable-baselines3 or Gymnasium fails."""
    _config(tmp_path, f'["rl-base", "rl-hybrid@{rl_sched.SHIPPED_JCT}"]')
    done = _without_torch(tmp_path, "cluster", "run", "c.toml", "--out", "out")
    assert done.returncode == 0, done.stderr[-2000:]
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    assert {"rl-base", f"rl-hybrid@{rl_sched.SHIPPED_JCT}"} <= set(json.dumps(report).split('"'))


def test_without_pytorch_a_policy_without_its_copy_names_the_fix(tmp_path: Path) -> None:
    _stripped(rl_sched.shipped_path(), tmp_path / "p.zip")
    _config(tmp_path, '["rl-base@p.zip"]')
    done = _without_torch(tmp_path, "cluster", "run", "c.toml", "--out", "out")
    assert done.returncode == 3, done.stderr[-2000:]          # a missing optional package
    line = done.stderr.strip()
    assert "\n" not in line and "p.zip has no NumPy copy of its network" in line
    assert "pip install 'mltcp[rl]'" in line and "numpy_export" in line
    # the file checks need no PyTorch either
    (tmp_path / "p.zip").write_text("not a policy")
    done = _without_torch(tmp_path, "cluster", "run", "c.toml", "--out", "out")
    assert done.returncode == 2 and "p.zip is not a zip file" in done.stderr


def test_without_pytorch_rl_train_says_what_it_needs(tmp_path: Path) -> None:
    done = _without_torch(tmp_path, "cluster", "rl-train", "--out", "o", "--timesteps", "64",
                          "--n-steps", "16", "--jobs", "2", "--duration-s", "10")
    assert done.returncode == 3, done.stderr[-2000:]
    line = done.stderr.strip()
    assert "\n" not in line and "stable-baselines3" in line and "mltcp[rl]" in line


# --------------------------------------------------------------------------- vs SB3


def _sb3(path: Path):                                   # noqa: ANN202 - a MaskablePPO
    from sb3_contrib import MaskablePPO

    return MaskablePPO.load(path, device="cpu")


def _sb3_logits(model, obs: np.ndarray) -> np.ndarray:  # noqa: ANN001
    import torch

    policy = model.policy
    with torch.no_grad():
        x = policy.extract_features(torch.as_tensor(obs, dtype=torch.float32))
        return policy.action_net(policy.mlp_extractor.forward_actor(x)).numpy()


def _observed(model, runs: list[tuple[str, int, str, bool]], jobs: int
              ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:  # noqa: ANN001
    """Every (observation, mask) the RL scheduler met in ``runs`` (trace, job set,
    network, hybrid) driven by stable-baselines3's policy, with its actions."""
    obs, masks, actions = [], [], []

    def act(o: np.ndarray, m: np.ndarray) -> int:
        a, _ = model.predict(o, action_masks=m, deterministic=True)
        obs.append(o.copy())
        masks.append(m.copy())
        actions.append(int(a))
        return int(a)

    for trace, index, network, hybrid in runs:
        sched = rl_sched.RLScheduler("rl", NET, act, hybrid=hybrid)
        ClusterSim(NET, deepshare.job_set(trace, index, jobs, duration_s=300), sched,
                   registry.network(network, NET)).run()
    return np.array(obs), np.array(masks), np.array(actions)


# every trace, RL-base under fair sharing and RL-Hybrid under MLTCP (other CS values)
RUNS = [(trace, index, network, hybrid)
        for trace, index in (("normal", 0), ("heavy", 1), ("medium", 2), ("low", 3))
        for network, hybrid in (("fair", False), ("mltcp", True))]


@pytest.fixture(scope="module")
def observed() -> dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """Each shipped policy's runs (:data:`RUNS`, 112-job sets), driven by
    stable-baselines3: what the policy met and did."""
    return {name: _observed(_sb3(rl_sched.shipped_path(name)), RUNS, jobs=112)
            for name in SHIPPED}


@needs_sb3
@pytest.mark.idle           # long (its fixture runs the simulator) and CPU-only: scripts/suite.py
@pytest.mark.parametrize("name", SHIPPED)
def test_decisions_are_stable_baselines3s_on_real_runs(name: str, observed) -> None:  # noqa: ANN001
    """Along the runs stable-baselines3 drives, NumPy takes every decision it took, so
    a run driven by NumPy is the same run (the simulator is deterministic); and on the
    states of the other policy's runs too (thousands in all), logits within 1e-4."""
    path = rl_sched.shipped_path(name)
    model, net = _sb3(path), numpy_policy.read(path)
    obs, masks, actions = observed[name]
    assert len(obs) >= 500 and len(set(actions)) > 3
    ours = np.array([net.act(o, m) for o, m in zip(obs, masks, strict=True)])
    assert np.array_equal(ours, actions), np.flatnonzero(ours != actions)[:10]
    obs = np.concatenate([o for o, _, _ in observed.values()])
    masks = np.concatenate([m for _, m, _ in observed.values()])
    assert len(obs) >= 2000
    theirs, _ = model.predict(obs, action_masks=masks, deterministic=True)
    ours = np.array([net.act(o, m) for o, m in zip(obs, masks, strict=True)])
    assert np.array_equal(ours, theirs), np.flatnonzero(ours != theirs)[:10]
    np.testing.assert_allclose(net.logits(obs), _sb3_logits(model, obs), rtol=0, atol=1e-4)


@needs_sb3
@pytest.mark.parametrize("name", SHIPPED)
def test_decisions_are_stable_baselines3s_on_random_observations(name: str) -> None:
    path = rl_sched.shipped_path(name)
    model, net = _sb3(path), numpy_policy.read(path)
    rng = np.random.default_rng(26)
    obs = rng.uniform(0, 2, (3000, *LAYOUT.shape)).astype(np.float32)
    obs[rng.random(obs.shape) < 0.6] = 0.0                  # mostly empty, as real states
    masks = rng.random((3000, LAYOUT.actions)) < 0.4
    masks[:, 0] = True                                      # "nothing" is always allowed
    theirs, _ = model.predict(obs, action_masks=masks, deterministic=True)
    ours = np.array([net.act(o, m) for o, m in zip(obs, masks, strict=True)])
    assert np.array_equal(ours, theirs)
    np.testing.assert_allclose(net.logits(obs), _sb3_logits(model, obs), rtol=0, atol=1e-4)


@needs_sb3
@pytest.mark.parametrize("name", SHIPPED)
def test_the_shipped_copy_is_what_the_checkpoint_gives(name: str, tmp_path: Path) -> None:
    """Derived again from the shipped checkpoint, the copy is byte for byte the one
    shipped: one source of truth, the checkpoint's policy.pth."""
    from mltcp.lab.cluster.papers.deepshare_rl import numpy_export

    path = rl_sched.shipped_path(name)
    bare = _stripped(path, tmp_path / "bare.zip").read_bytes()
    again = numpy_export.with_network(bare)
    with zipfile.ZipFile(path) as shipped, zipfile.ZipFile(io.BytesIO(again)) as derived:
        assert derived.read(MEMBER) == shipped.read(MEMBER)
        assert [i.filename for i in derived.infolist()] == \
            [i.filename for i in shipped.infolist()]
    assert numpy_export.with_network(again) == again          # replaces, never duplicates


@needs_sb3
def test_with_pytorch_a_policy_without_its_copy_is_derived(tmp_path: Path) -> None:
    path = _stripped(rl_sched.shipped_path(), tmp_path / "p.zip")
    act = rl_file.load_policy(path, LAYOUT)
    net = numpy_policy.read(rl_sched.shipped_path())
    rng = np.random.default_rng(1)
    for _ in range(200):
        obs = rng.uniform(0, 2, LAYOUT.shape).astype(np.float32)
        mask = rng.random(LAYOUT.actions) < 0.5
        assert act(obs, mask) == net.act(obs, mask)
    # and the command that adds it to the file
    from mltcp.lab.cluster.papers.deepshare_rl import numpy_export

    assert numpy_export.main([str(path)]) == 0
    assert np.array_equal(numpy_policy.read(path).action[0], net.action[0])


@needs_sb3
def test_rl_train_writes_the_copy(tmp_path: Path) -> None:
    from mltcp.lab.cluster.papers.deepshare_rl import train as rl_train

    cfg = rl_train.TrainConfig(jobs=8, duration_s=300, round_s=30.0, n_steps=32,
                               timesteps=64)
    result = rl_train.train(cfg, tmp_path, "tiny", progress=lambda line: None, curves=False)
    net, model = numpy_policy.read(result.policy), _sb3(result.policy)
    rng = np.random.default_rng(2)
    obs = rng.uniform(0, 2, (500, *LAYOUT.shape)).astype(np.float32)
    masks = rng.random((500, LAYOUT.actions)) < 0.5
    theirs, _ = model.predict(obs, action_masks=masks, deterministic=True)
    assert np.array_equal([net.act(o, m) for o, m in zip(obs, masks, strict=True)], theirs)


def test_the_fix_names_a_shipped_policy() -> None:
    assert f"rl-hybrid@{rl_sched.SHIPPED_JCT}" in rl_file.POLICY_FIX
