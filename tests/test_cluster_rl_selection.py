"""The RL scheduler's JCT reward term, checkpoint selection on held-out job sets, their
``rl-train`` flags, the policy trained with both, and the bench's N and intervals."""

from __future__ import annotations

import importlib.util
import json
import sys
import tempfile
import zipfile
from pathlib import Path

import numpy as np
import pytest

from mltcp.core.errors import SpecError
from mltcp.lab.cluster.engine.simulator import ClusterSim
from mltcp.lab.cluster.experiments import registry
from mltcp.lab.cluster.experiments.config import policy_file
from mltcp.lab.cluster.papers.deepshare_rl import setup as deepshare

pytest.importorskip("gymnasium", reason="the RL scheduler needs mltcp[rl] (gymnasium)")
pytest.importorskip("sb3_contrib", reason="the RL scheduler needs mltcp[rl] (sb3-contrib)")

from mltcp.cli import main  # noqa: E402
from mltcp.lab.cluster.papers.deepshare_rl import gym_env as rl_env  # noqa: E402
from mltcp.lab.cluster.papers.deepshare_rl import imitation as rl_imitate  # noqa: E402
from mltcp.lab.cluster.papers.deepshare_rl import schedulers as rl_sched  # noqa: E402
from mltcp.lab.cluster.papers.deepshare_rl import selection as rl_select  # noqa: E402
from mltcp.lab.cluster.papers.deepshare_rl import train as rl_train  # noqa: E402

NET = deepshare.fabric()
ROUND_S = 50.0
TINY = {"jobs": 8, "duration_s": 300, "round_s": 30.0, "n_steps": 32}
QUIET = {"progress": lambda line: None, "curves": False}


def _episode(policy, jct_weight: float = 0.0, w1: float = 0.4) -> tuple[float, dict]:
    """One 24-job episode driven by ``policy(mask) -> action``: its return and last info."""
    env = rl_env.ContentionEnv(rl_env.trace_sets("normal", [0], jobs=24, duration_s=600),
                               w1=w1, round_s=ROUND_S, jct_weight=jct_weight)
    env.reset(seed=0)
    done, total, info = False, 0.0, {}
    while not done:
        _, reward, done, truncated, info = env.step(policy(env.action_masks()))
        assert not truncated
        total += reward
    return total, info


def _first_fit(mask: np.ndarray) -> int:
    return rl_sched.first_fit_action(None, mask)


# --- the reward's JCT term


def test_jct_term_integrates_to_minus_w3_times_the_mean_jct_in_rounds():
    eq2, info0 = _episode(_first_fit)
    with_jct, info = _episode(_first_fit, jct_weight=0.5)
    assert info0["reward_sum"] == pytest.approx(info0["eq2_sum"])     # W3 = 0: Eq. 2 alone
    assert info["eq2_sum"] == pytest.approx(eq2)                      # same schedule
    # Little's law on one job set: the jobs-in-system integral is the sum of the JCTs
    assert with_jct - eq2 == pytest.approx(-0.5 * info["jct_mean_s"] / ROUND_S, rel=1e-9)


def test_jobs_that_wait_longer_earn_a_lower_reward():
    # "nothing" at every step: one job at a time (the empty-cluster rule), the rest wait
    fill, info_fill = _episode(_first_fit, jct_weight=1.0, w1=0.0)
    wait, info_wait = _episode(lambda mask: 0, jct_weight=1.0, w1=0.0)
    assert info_wait["jct_mean_s"] > 2 * info_fill["jct_mean_s"]
    jct_part = {name: total - info["eq2_sum"] for name, total, info in
                (("fill", fill, info_fill), ("wait", wait, info_wait))}
    assert jct_part["wait"] < jct_part["fill"] < 0


def test_jct_weight_is_checked():
    with pytest.raises(SpecError, match="jct_weight"):
        rl_env.ContentionEnv(rl_env.trace_sets("normal", [0], jobs=4), jct_weight=-1)
    with pytest.raises(SpecError, match="jct_weight"):
        rl_train.TrainConfig(jct_weight=float("nan"))


# --- checkpoint selection


def test_selection_keeps_the_lowest_mean_jct_and_the_earlier_of_a_tie():
    sel = rl_select.Selection((200, 201))
    taken: list[int] = []
    for steps, jcts in ((10, [5.0, 7.0]), (20, [2.0, 4.0]), (30, [3.0, 3.0]),
                        (40, [9.0, 1.0])):
        sel.offer(steps, jcts, lambda steps=steps: taken.append(steps) or bytes([steps]))
    assert sel.picked.timesteps == 20 and sel.best_policy == bytes([20])
    assert taken == [10, 20]                     # a snapshot only when kept; 30 ties 20
    record = sel.record()
    assert [c["score_s"] for c in record["checkpoints"]] == [6.0, 3.0, 3.0, 5.0]
    assert record["picked"] == {"timesteps": 20, "score_s": 3.0}


@pytest.mark.parametrize(("train", "select", "field"), [
    ((100, 101), (9, 200), "select_sets"), ((0, 100), (200,), "sets"),
    ((100, 101), (101, 200), "select_sets")])
def test_training_and_selection_sets_stay_off_the_evaluation_sets(train, select, field):
    with pytest.raises(SpecError, match=field):
        rl_select.check_sets(train, select)
    with pytest.raises(SpecError, match=field):
        rl_train.TrainConfig(sets=train, select_sets=select)


def test_the_conventional_ranges_are_disjoint():
    ranges = [set(deepshare.EVAL_SETS), set(deepshare.TRAIN_SETS), set(deepshare.SELECT_SETS)]
    assert sum(map(len, ranges)) == len(set().union(*ranges))
    assert rl_train.TRAIN_SETS == deepshare.TRAIN_SETS


def _params(policy: Path) -> dict[str, np.ndarray]:
    from sb3_contrib import MaskablePPO
    model = MaskablePPO.load(policy, device="cpu")
    return {k: v.numpy().copy() for k, v in model.policy.state_dict().items()}


def test_training_writes_the_checkpoint_with_the_best_evaluation(tmp_path, monkeypatch):
    scores = iter([8.0, 7.0, 3.0, 5.0, 4.0])
    seen: list[tuple[int, dict]] = []

    def judged(act, cfg, progress=None):         # scripted scores; remember each policy
        model = act.__self__.model
        seen.append((model.num_timesteps, {k: v.numpy().copy()
                                           for k, v in model.policy.state_dict().items()}))
        return [next(scores)] * len(cfg.select_sets)

    monkeypatch.setattr(rl_train, "evaluate_checkpoint", judged)
    cfg = rl_train.TrainConfig(**TINY, timesteps=128, select_sets=(200, 201), select_every=32)
    lines: list[str] = []
    result = rl_train.train(cfg, tmp_path, "picked", progress=lines.append)
    record = json.loads((tmp_path / "picked.json").read_text())
    steps = [c["timesteps"] for c in record["selection"]["checkpoints"]]
    assert steps == [s for s, _ in seen] == [0, 32, 64, 96, 128]      # the first, the last
    assert record["selection"]["picked"]["timesteps"] == 64 == result.selection.picked.timesteps
    written, best = _params(result.policy), seen[2][1]
    assert all(np.array_equal(written[k], best[k]) for k in best)
    assert not all(np.array_equal(written[k], seen[-1][1][k]) for k in best)
    assert any("[checkpoint 64 steps]" in line and "best so far" in line for line in lines)
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "picked-curves.pdf", "picked-curves.png", "picked.json", "picked.zip"]


def test_selection_runs_only_training_and_selection_sets(tmp_path, monkeypatch):
    asked: list[int] = []
    real = deepshare.job_set

    def job_set(trace, index, *a, **kw):
        asked.append(index)
        return real(trace, index, *a, **kw)

    monkeypatch.setattr(deepshare, "job_set", job_set)
    cfg = rl_train.TrainConfig(**TINY, timesteps=64, sets=(100, 101),
                               select_sets=(200, 201), select_every=32)
    result = rl_train.train(cfg, tmp_path, "honest", **QUIET)
    assert set(asked) <= {100, 101, 200, 201} and {200, 201} <= set(asked)
    assert not set(asked) & set(deepshare.EVAL_SETS)
    # and the scores are the deployed scheduler's mean JCT on those sets
    act = rl_sched.load_policy(result.policy)
    picked = result.selection.picked
    assert picked.jct_mean_s == rl_select.evaluate(act, (200, 201), jobs=8, duration_s=300,
                                                   round_s=30.0)


def test_a_tiny_selected_policy_reproduces_and_selection_changes_no_training(tmp_path):
    judged = rl_train.TrainConfig(**TINY, timesteps=128, jct_weight=1.0, select_sets=(200,),
                                  select_every=64)
    a = rl_train.train(judged, tmp_path / "a", "p", **QUIET)
    b = rl_train.train(judged, tmp_path / "b", "p", **QUIET)
    assert a.selection.record() == b.selection.record()
    pa, pb = _params(a.policy), _params(b.policy)
    assert all(np.array_equal(pa[k], pb[k]) for k in pa)
    # Judging a checkpoint draws no random numbers: the picked policy is the one a
    # training stopped at that step gives, its episodes the same up to there.
    steps = a.selection.picked.timesteps
    short = rl_train.train(rl_train.TrainConfig(**TINY, timesteps=steps, jct_weight=1.0),
                           tmp_path / "short", "p", **QUIET)
    ps = _params(short.policy)
    assert all(np.array_equal(pa[k], ps[k]) for k in pa)
    assert [e.reward for e in short.episodes] == \
        [e.reward for e in a.episodes if e.timesteps <= steps]


def test_training_leaves_no_sb3_log_folder(tmp_path, monkeypatch):
    temp = tmp_path / "temp"
    temp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temp))
    rl_train.train(rl_train.TrainConfig(**TINY, timesteps=64), tmp_path / "out", "quiet",
                   **QUIET)
    assert list(temp.iterdir()) == []


# --- warm start: imitating the rule first


def test_discounted_returns():
    assert rl_imitate.discounted([1.0, 0.0, 2.0], 0.5) == [1.5, 1.0, 2.0]


def test_warm_start_teaches_the_policy_the_rule(tmp_path):
    from sb3_contrib import MaskablePPO

    env = rl_env.ContentionEnv(rl_env.trace_sets("normal", [100, 101], jobs=16,
                                                 duration_s=300), round_s=30.0, jct_weight=1)
    demos = rl_imitate.demonstrate(env, rl_sched.first_fit_action, 2, 0.99)
    assert len(demos.actions) == len(demos.obs) == len(demos.returns) > 16
    assert all(m[a] for m, a in zip(demos.masks, demos.actions, strict=True))
    model = MaskablePPO("MlpPolicy", env, seed=0, device="cpu")
    before = rl_imitate.pretrain(model.policy, demos, 1, 0)
    after = rl_imitate.pretrain(model.policy, demos, 60, 0)
    assert after[0] < before[0] and after[1] >= 0.95         # cross-entropy, agreement


def test_warm_start_is_recorded_and_reproduces(tmp_path):
    cfg = rl_train.TrainConfig(**TINY, timesteps=64, sets=(100, 101),
                               warm_start="deepshare-first-fit", warm_start_epochs=5)
    a = rl_train.train(cfg, tmp_path / "a", "p", **QUIET)
    b = rl_train.train(cfg, tmp_path / "b", "p", **QUIET)
    record = json.loads((tmp_path / "a" / "p.json").read_text())
    assert record["warm_start"]["rule"] == "deepshare-first-fit"
    assert record["warm_start"]["episodes"] == 2 and record["warm_start"]["epochs"] == 5
    assert a.warm_start == b.warm_start
    pa, pb = _params(a.policy), _params(b.policy)
    assert all(np.array_equal(pa[k], pb[k]) for k in pa)
    with pytest.raises(SpecError, match="warm_start"):
        rl_train.TrainConfig(warm_start="deepshare-best-fit")


# --- rl-train's flags


@pytest.mark.parametrize(("argv", "names"), [
    (["--jct-weight", "-1"], "--jct-weight"), (["--jct-weight", "x"], "--jct-weight"),
    (["--select-sets", "a-b"], "--select-sets"), (["--select-every", "0"], "--select-every"),
    (["--select-by", "rl-greedy"], "--select-by"),
    (["--warm-start", "deepshare-best-fit"], "--warm-start"),
    (["--warm-start-epochs", "0"], "--warm-start-epochs")])
def test_bad_reward_and_selection_flags_are_one_line(tmp_path, capsys, argv, names):
    with pytest.raises(SystemExit) as exit_:
        main(["cluster", "rl-train", "--out", str(tmp_path / "o"), *argv])
    assert exit_.value.code == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and names in err
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("sets", ["0-4", "9,200", "105"])
def test_selection_sets_on_evaluation_or_training_sets_are_refused(tmp_path, capsys, sets):
    assert main(["cluster", "rl-train", "--out", str(tmp_path / "o"),
                 "--select-sets", sets]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "--select-sets" in err and "job set" in err
    assert not (tmp_path / "o").exists()                 # refused before anything is made


def test_rl_train_records_the_reward_and_selection_flags(tmp_path, capsys):
    out = tmp_path / "p"
    assert main(["cluster", "rl-train", "--out", str(out), "--name", "tiny", "--jobs", "8",
                 "--duration-s", "300", "--round-s", "30", "--timesteps", "64",
                 "--n-steps", "32", "--jct-weight", "0.5", "--select-sets", "200-201",
                 "--select-every", "32"]) == 0
    record = json.loads((out / "tiny.json").read_text())
    cmd = record["command"]
    assert "--jct-weight 0.5" in cmd and "--select-sets 200,201" in cmd
    assert "--select-every 32 --select-by rl-hybrid" in cmd
    assert record["config"]["jct_weight"] == 0.5 and record["config"]["select_sets"] == [200, 201]
    assert record["selection"]["picked"]["timesteps"] in (32, 64)
    assert "the checkpoint at" in capsys.readouterr().out


# --- the shipped policies


def test_the_jct_policy_is_shipped_with_its_record_and_selection_curve():
    path = rl_sched.shipped_path(rl_sched.SHIPPED_JCT)
    record = json.loads(path.with_suffix(".json").read_text())
    cfg = record["config"]
    assert cfg["jct_weight"] > 0 and cfg["w1"] == deepshare.W1
    assert set(cfg["select_sets"]).isdisjoint(deepshare.EVAL_SETS)
    assert set(cfg["select_sets"]).isdisjoint(cfg["sets"])
    assert record["command"].startswith("mltcp cluster rl-train")
    assert "--jct-weight" in record["command"] and "--select-sets" in record["command"]
    sel = record["selection"]
    scores = [c["score_s"] for c in sel["checkpoints"]]
    assert sel["picked"]["score_s"] == min(scores) and len(scores) >= 2
    assert path.with_name(f"{rl_sched.SHIPPED_JCT}-curves.png").is_file()
    with zipfile.ZipFile(path) as z:                   # a whole SB3 checkpoint
        assert "policy.pth" in z.namelist()


def test_a_shipped_policy_is_named_in_a_scheduler_spec():
    spec = f"rl-hybrid@{rl_sched.SHIPPED_JCT}"
    assert policy_file(spec) == rl_sched.shipped_path(rl_sched.SHIPPED_JCT)
    sched = registry.scheduler(spec, NET)
    jobs = deepshare.job_set("normal", 0, 24, duration_s=600)
    result = ClusterSim(NET, jobs, sched, registry.network("fair", NET)).run()
    assert len(result.jobs) == 24 and sched.decisions > 0
    assert policy_file("rl-base") == rl_sched.shipped_path()


# --- the bench's tables


def _bench():
    path = Path(__file__).resolve().parents[1] / "bench" / "bench_rl_scheduler.py"
    spec = importlib.util.spec_from_file_location("bench_rl_scheduler", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("bench_rl_scheduler", module)
    spec.loader.exec_module(module)
    return module


def test_bench_reports_n_and_intervals():
    bench = _bench()
    ch = bench.change([9.0, 10.0, 11.0], [10.0, 10.0, 10.0])
    assert ch["n"] == 3 and ch["pct"] == pytest.approx(0.0)
    assert ch["ci_lo"] < 0 < ch["ci_hi"]
    spread = {"n": 3, "mean": 7200.0, "ci_lo": 3600.0, "ci_hi": 10800.0}
    assert bench._ci(spread, 3600) == "2.00 [1.00, 3.00]"
    assert bench._pct(ch).startswith("+0.0 % [")
    assert bench.rl_specs(["x/p.zip"]) == {"rl-base@p": "rl-base@x/p.zip",
                                           "rl-hybrid@p": "rl-hybrid@x/p.zip"}
    assert list(bench.rl_specs(["deepshare-normal-w0.4"]))[0] == "rl-base@deepshare-normal-w0.4"


# --- the learning rate


def test_learning_rate_is_checked_and_reaches_ppo(tmp_path):
    with pytest.raises(SpecError, match="learning_rate"):
        rl_train.TrainConfig(learning_rate=0.0)
    with pytest.raises(SpecError, match="learning_rate"):
        rl_train.TrainConfig(learning_rate=float("inf"))
    from sb3_contrib import MaskablePPO

    slow = rl_train.train(rl_train.TrainConfig(**TINY, timesteps=64, learning_rate=1e-5),
                          tmp_path, "slow", **QUIET)
    assert MaskablePPO.load(slow.policy, device="cpu").learning_rate == pytest.approx(1e-5)
    record = json.loads((tmp_path / "slow.json").read_text())
    assert record["config"]["learning_rate"] == pytest.approx(1e-5)
