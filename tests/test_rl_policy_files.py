"""The RL scheduler's policy files (issue 25): every kind of bad file is one SpecError
naming it, found when the config is read (not a stable-baselines3 traceback, nor a
failure at a run's first decision), and ``rl-base@PATH`` is relative to the config's
directory, as jobs.trace is, with a shipped policy's name never shadowed by a stray
file."""

from __future__ import annotations

import base64
import json
import os
import pickle
import shutil
import zipfile
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("sb3_contrib", reason="the RL scheduler needs mltcp[rl] (sb3-contrib)")

import gymnasium as gym  # noqa: E402
import numpy as np  # noqa: E402
from sb3_contrib.common.maskable.policies import MaskableActorCriticPolicy  # noqa: E402
from stable_baselines3.common.policies import ActorCriticPolicy  # noqa: E402

from mltcp.core.errors import SpecError  # noqa: E402
from mltcp.lab.cluster.experiments import config  # noqa: E402
from mltcp.lab.cluster.experiments import runner as experiment  # noqa: E402
from mltcp.lab.cluster.papers.deepshare_rl import schedulers as rl_sched  # noqa: E402
from mltcp.lab.cluster.papers.deepshare_rl import setup as deepshare  # noqa: E402
from mltcp.lab.cluster.papers.deepshare_rl.encoding import Layout  # noqa: E402

LAYOUT = Layout.of(deepshare.fabric())
SHIPPED = rl_sched.shipped_path()


def _serialised(obj: object) -> dict[str, str]:
    """An entry of stable-baselines3's ``data`` as its save_util writes one."""
    return {":type:": str(type(obj)),
            ":serialized:": base64.b64encode(pickle.dumps(obj)).decode()}


def _policy_zip(path: Path, policy_class: type = MaskableActorCriticPolicy,
                obs: Any = None, act: Any = None, weights: bytes = b"not torch") -> Path:
    """A zip laid out as stable-baselines3 saves a model: ``data`` (JSON) and
    ``policy.pth``; with made-up contents for the part a test is about."""
    data: dict[str, Any] = {"policy_class": _serialised(policy_class)}
    if obs is not None:
        data["observation_space"] = _serialised(obs)
    if act is not None:
        data["action_space"] = _serialised(act)
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("data", json.dumps(data))
        archive.writestr("policy.pth", weights)
    return path


def _refusal(path: Path) -> str:
    with pytest.raises(SpecError) as err:
        rl_sched.load_policy(path, LAYOUT)
    assert err.value.field == "policy"
    return err.value.problem


def _ours() -> tuple[Any, Any]:
    return (gym.spaces.Box(0.0, 2.0, LAYOUT.shape, np.float32),
            gym.spaces.Discrete(LAYOUT.actions))


def test_files_that_are_not_zips(tmp_path: Path) -> None:
    cases = {b"": "is empty", b"not a policy\n": "not a zip file",
             bytes(range(256)) * 8: "not a zip file",
             SHIPPED.read_bytes()[:100_000]: "not a zip file"}        # truncated
    for i, (content, says) in enumerate(cases.items()):
        (tmp_path / f"{i}.zip").write_bytes(content)
        assert says in _refusal(tmp_path / f"{i}.zip")


def test_zips_without_a_policy(tmp_path: Path) -> None:
    zipfile.ZipFile(tmp_path / "empty.zip", "w").close()
    with zipfile.ZipFile(tmp_path / "csv.zip", "w") as archive:
        archive.writestr("jobs.csv", "name\n")
    with zipfile.ZipFile(tmp_path / "nopth.zip", "w") as archive:
        archive.writestr("data", "{}")
    assert "no 'data'" in _refusal(tmp_path / "empty.zip")
    assert "no 'data'" in _refusal(tmp_path / "csv.zip")
    assert "no 'policy.pth'" in _refusal(tmp_path / "nopth.zip")


def test_a_damaged_member_is_named(tmp_path: Path) -> None:
    path = tmp_path / "p.zip"
    shutil.copy(SHIPPED, path)
    raw = bytearray(path.read_bytes())
    with zipfile.ZipFile(path) as archive:
        info = archive.getinfo("policy.pth")
    extra = int.from_bytes(raw[info.header_offset + 28:info.header_offset + 30], "little")
    start = info.header_offset + 30 + len(info.filename) + extra   # its compressed bytes
    raw[start + info.compress_size // 2] ^= 0xFF
    path.write_bytes(bytes(raw))
    assert "damaged zip file" in _refusal(path)


def test_a_policy_of_another_algorithm(tmp_path: Path) -> None:
    problem = _refusal(_policy_zip(tmp_path / "p.zip", ActorCriticPolicy, *_ours()))
    assert "class ActorCriticPolicy, not MaskablePPO's" in problem


def test_a_policy_of_another_environment(tmp_path: Path) -> None:
    other = _policy_zip(tmp_path / "p.zip", obs=gym.spaces.Box(0, 1, (10,), np.float32),
                        act=gym.spaces.Discrete(10))
    problem = _refusal(other)
    assert "another environment" in problem and "acts in Discrete(10)" in problem
    assert f"observes Box(4, 24) and acts in Discrete({LAYOUT.actions})" in problem
    # without a layout (a library caller that only wants the file) the spaces pass
    with pytest.raises(SpecError, match="cannot be loaded"):
        rl_sched.load_policy(other)


def test_spaces_that_cannot_be_read(tmp_path: Path) -> None:
    assert "spaces cannot be read" in _refusal(_policy_zip(tmp_path / "p.zip"))


def test_right_spaces_with_weights_that_are_not_torch(tmp_path: Path) -> None:
    assert "cannot be loaded as a MaskablePPO policy" in _refusal(
        _policy_zip(tmp_path / "p.zip", MaskableActorCriticPolicy, *_ours()))


def test_the_shipped_policies_pass_every_check() -> None:
    for name in (rl_sched.SHIPPED, rl_sched.SHIPPED_JCT):
        act = rl_sched.load_policy(rl_sched.shipped_path(name), LAYOUT)
        mask = np.ones(LAYOUT.actions, dtype=bool)
        assert 0 <= act(np.zeros(LAYOUT.shape, np.float32), mask) < LAYOUT.actions


def test_a_discrete_observation_space_is_named(tmp_path: Path) -> None:
    """A policy of a toy environment (sb3-contrib's InvalidActionEnvDiscrete observes a
    Discrete space, whose shape is ())."""
    problem = _refusal(_policy_zip(tmp_path / "p.zip", obs=gym.spaces.Discrete(10),
                                   act=gym.spaces.Discrete(10)))
    assert "observes Discrete(10) and acts in Discrete(10)" in problem


def test_a_symlink_loop_is_named(tmp_path: Path) -> None:
    (tmp_path / "p.zip").symlink_to(tmp_path / "p.zip")
    assert "cannot be reached" in _refusal(tmp_path / "p.zip")
    err = _config_error(_config(tmp_path, "rl-base@p.zip"))
    assert err.field == "schedulers[0]" and "cannot be reached" in err.problem


def test_paths_that_are_not_files(tmp_path: Path) -> None:
    (tmp_path / "d.zip").mkdir()
    os.mkfifo(tmp_path / "f.zip")
    assert "is a directory, not a policy file" in _refusal(tmp_path / "d.zip")
    assert "is a FIFO" in _refusal(tmp_path / "f.zip")
    assert "is a character device" in _refusal(Path("/dev/zero"))


def test_an_unreadable_policy_says_why(tmp_path: Path, monkeypatch) -> None:
    shutil.copy(SHIPPED, tmp_path / "p.zip")
    monkeypatch.setattr(os, "access", lambda *a: False)
    assert "cannot read" in _refusal(tmp_path / "p.zip")


# --------------------------------------------------------------------------- in a config


def _config(where: Path, scheduler: str) -> Path:
    where.mkdir(parents=True, exist_ok=True)
    path = where / "c.toml"
    path.write_text(f'name = "t"\nschedulers = ["{scheduler}"]\nnetworks = ["fair"]\n'
                    '[jobs]\nsetup = { name = "deepshare-normal", first = 4 }\n')
    return path


def _config_error(path: Path) -> SpecError:
    with pytest.raises(SpecError) as err:
        config.load_config(path)
    return err.value


def test_a_bad_policy_is_refused_when_the_config_is_read(tmp_path: Path) -> None:
    (tmp_path / "p.zip").write_text("not a policy")
    err = _config_error(_config(tmp_path, "rl-hybrid@p.zip"))
    assert err.field == "schedulers[0]" and str(tmp_path / "p.zip") in err.problem


def test_an_empty_policy_path(tmp_path: Path) -> None:
    err = _config_error(_config(tmp_path, "rl-base@"))
    assert err.field == "schedulers[0]" and "no policy after '@'" in err.problem


def test_a_policy_path_is_relative_to_the_config(tmp_path: Path, monkeypatch) -> None:
    """The policy beside the config is the one loaded, from whatever directory; a
    p.zip in the working directory is not looked at."""
    _config(tmp_path / "cfg", "rl-base@p.zip")
    shutil.copy(SHIPPED, tmp_path / "cfg" / "p.zip")
    (tmp_path / "p.zip").write_text("junk in the working directory")
    monkeypatch.chdir(tmp_path)
    cfg = config.load_config(Path("cfg/c.toml"))
    assert cfg.definition()["policies"] == {
        "rl-base@p.zip": config._file_digest(tmp_path / "cfg" / "p.zip")}
    result = experiment.execute(cfg, progress=None)
    assert len(result.runs) == 1 and result.runs[0][0].scheduler == "rl-base@p.zip"


def test_a_dask_worker_takes_the_policy_from_the_configs_directory(tmp_path: Path,
                                                                    monkeypatch) -> None:
    shutil.copy(SHIPPED, tmp_path / "p.zip")
    cfg = config.load_config(_config(tmp_path, "rl-base@p.zip"))
    jobs = experiment.job_lists(cfg)
    monkeypatch.chdir("/")                                  # as a worker elsewhere
    key = experiment.run_keys(cfg)[0]
    out = experiment._task(cfg.cluster, jobs[key.seed], key, cfg.f_steps,
                           base_dir=cfg.base_dir.resolve())
    assert len(out.jobs) == 4


def test_a_stray_file_never_shadows_a_shipped_policy(tmp_path: Path, monkeypatch) -> None:
    (tmp_path / rl_sched.SHIPPED).write_text("junk")
    monkeypatch.chdir(tmp_path)
    spec = f"rl-base@{rl_sched.SHIPPED}"
    assert config.load_config(_config(tmp_path, spec)).schedulers == (spec,)
    assert rl_sched.policy_path(rl_sched.SHIPPED, tmp_path) == SHIPPED
    err = _config_error(_config(tmp_path, f"rl-base@./{rl_sched.SHIPPED}"))  # the file
    assert "not a zip file" in err.problem


def test_the_shipped_policy_twice_is_one_scheduler(tmp_path: Path) -> None:
    path = _config(tmp_path, "rl-base")
    path.write_text(path.read_text().replace(
        '["rl-base"]', f'["rl-base", "rl-base@{rl_sched.SHIPPED}"]'))
    err = _config_error(path)
    assert err.field == "schedulers[1]" and "same scheduler" in err.problem
