"""The RL contention-aware scheduler (deepshare-rl): its setup, state/action encoding,
Gymnasium environment, schedulers, a smoke training and the shipped policy."""

from __future__ import annotations

import json

import numpy as np
import pytest

from mltcp.core.errors import SpecError
from mltcp.lab.cluster.arrivals import catalogue
from mltcp.lab.cluster.engine.gpu_jobs import JobRequest, PlacedJob
from mltcp.lab.cluster.engine.scheduling import Allocation, Decision, QueuedJob
from mltcp.lab.cluster.engine.simulator import ClusterSim
from mltcp.lab.cluster.experiments import registry, report
from mltcp.lab.cluster.papers.deepshare_rl import encoding as rl_encoding  # noqa: E402
from mltcp.lab.cluster.papers.deepshare_rl import setup as deepshare  # noqa: E402
from mltcp.lab.cluster.papers.deepshare_rl.encoding import CSMeter, Layout

gym = pytest.importorskip("gymnasium", reason="the RL scheduler needs mltcp[rl] (gymnasium)")
pytest.importorskip("sb3_contrib", reason="the RL scheduler needs mltcp[rl] (sb3-contrib)")

from mltcp.lab.cluster.papers.deepshare_rl import gym_env as rl_env  # noqa: E402
from mltcp.lab.cluster.papers.deepshare_rl import schedulers as rl_sched  # noqa: E402
from mltcp.lab.cluster.papers.deepshare_rl import train as rl_train  # noqa: E402

NET = deepshare.fabric()
LAYOUT = Layout.of(NET)


def _job(name: str, gpus: int, model: str = "deepshare/fsdp", iterations: int = 100
         ) -> JobRequest:
    p = catalogue.profile(model)
    return JobRequest(name, 0.0, gpus, p.compute_s, p.gradient_bytes, iterations, model)


# --- the paper's setup


def test_job_sets_follow_the_trace_and_repeat():
    a, b = deepshare.job_set("low", 3, 200), deepshare.job_set("low", 3, 200)
    assert a == b and len(a) == 200
    assert {j.gpus for j in a} <= set(deepshare.DEMANDS)
    assert all(j.arrival_s == 0 for j in a)
    light = sum(j.model in ("deepshare/gnn", "deepshare/img") for j in a)
    assert light > 200 * 0.5                    # low: GNN and IMG are 8 of 12 parts
    heavy = deepshare.job_set("heavy", 3, 200)
    assert sum(j.model in ("deepshare/fsdp", "deepshare/moe") for j in heavy) > 100


def test_a_job_is_an_hour_alone_on_two_nodes():
    for job in deepshare.job_set("normal", 0, 30):
        placed = PlacedJob(job.name, ((0, job.gpus // 2), (1, job.gpus // 2)),
                           job.compute_s, job.gradient_bytes, 1)
        alone = placed.dedicated_iteration_s(NET)
        assert job.iterations * alone == pytest.approx(3600, rel=0.01)
        assert job.compute_s >= deepshare.MIN_ITERATION_S or job.model not in (
            "deepshare/gnn", "deepshare/img")


def test_bad_trace_names_the_field():
    with pytest.raises(SpecError, match="trace"):
        deepshare.job_set("busy", 0)


def test_node_sets_are_pairs_and_the_quad():
    sets = deepshare.node_sets(4)
    assert len(sets) == 7 and (0, 1, 2, 3) in sets and all(len(s) in (2, 4) for s in sets)
    assert deepshare.per_node(16, 2, 8) == 8 and deepshare.per_node(2, 4, 8) is None
    assert deepshare.per_node(32, 2, 8) is None


def test_spread_placement_takes_as_many_nodes_as_it_can():
    sim = ClusterSim(NET, [_job("a", 8)], deepshare.baseline("las", NET), registry.network(
        "fair", NET)).start()
    sim.admit()
    view = sim.view()
    assert deepshare.spread_place(view, view.queue[0]).gpus == ((0, 2), (1, 2), (2, 2), (3, 2))
    view.free[:] = [8, 1, 8, 0]
    assert deepshare.spread_place(view, view.queue[0]).gpus == ((0, 4), (2, 4))


# --- encoding


def _queued(*gpus: int) -> list[QueuedJob]:
    return [QueuedJob(_job(f"q{i}", g)) for i, g in enumerate(gpus)]


def test_candidates_are_the_first_of_each_demand():
    queue = _queued(4, 4, 2, 16, 2)
    cands = rl_encoding.candidates(LAYOUT, queue)
    assert [c.name if c else None for c in cands] == ["q2", "q0", None, "q3"]


def test_mask_allows_only_what_fits():
    cands = rl_encoding.candidates(LAYOUT, _queued(2, 16))
    free = np.array([8, 8, 3, 0])
    mask = rl_encoding.action_mask(LAYOUT, free, cands)
    assert mask[0]
    for a in np.flatnonzero(mask[1:]) + 1:
        k, nodes = LAYOUT.decode(a)
        assert 3 not in nodes
        if k == 3:
            assert nodes == (0, 1)              # 16 GPUs: two whole free nodes only
    assert LAYOUT.encode(0, (0, 2)) in np.flatnonzero(mask)
    assert not mask[LAYOUT.encode(0, (0, 3))]


def test_observation_shows_jobs_cs_and_candidates():
    sim = ClusterSim(NET, [_job("a", 4), _job("b", 8, "deepshare/img")],
                     deepshare.baseline("las", NET), registry.network("fair", NET)).start()
    sim.admit()
    sim.apply(Decision(((sim.view().queue[0], Allocation(((0, 2), (1, 2)))),)))
    view = sim.view()
    cands = rl_encoding.candidates(LAYOUT, view.queue)
    obs = rl_encoding.observation(LAYOUT, view.running, {"a": 1.5}, cands)
    g, fsdp, img = 8, rl_encoding.model_code("deepshare/fsdp"), rl_encoding.model_code(
        "deepshare/img")
    assert list(obs[0, :3]) == [fsdp, fsdp, 0] and obs[2, :g].sum() == 0
    assert obs[1, g] == pytest.approx(0.5) and obs[0, g + 2] == 0
    assert obs[1, 2 * g + 3] == img and obs[2, 2 * g + 1] == img    # 2 x 4 and 4 x 2
    assert obs.shape == LAYOUT.shape


# --- contention sensitivity as the scheduler measures it


def _run_pair(nodes_b: tuple[int, ...]) -> dict[str, float]:
    jobs = [_job("a", 8, iterations=4000), _job("b", 8, "deepshare/moe", 4000)]
    sim = ClusterSim(NET, jobs, deepshare.baseline("las", NET), registry.network(
        "fair", NET)).start()
    sim.admit()
    q = {j.name: j for j in sim.view().queue}
    sim.apply(Decision(((q["a"], Allocation(((0, 4), (1, 4)))),
                                    (q["b"], Allocation(tuple((n, 4) for n in nodes_b))))))
    meter = CSMeter(NET, 60.0)
    for t in (0.0, 60.0, 120.0):
        sim.advance(t, 10**8)
        meter.update(sim.running(), sim.t)
    return dict(meter.cs)


def test_cs_meter_sees_sharing_and_not_separation():
    shared, apart = _run_pair((0, 1)), _run_pair((2, 3))
    assert apart["a"] == pytest.approx(1.0, abs=0.02)
    assert apart["b"] == pytest.approx(1.0, abs=0.02)
    assert shared["a"] > 1.2 and shared["b"] > 1.2


# --- the environment


def _env(**kw) -> rl_env.ContentionEnv:
    return rl_env.ContentionEnv(rl_env.trace_sets("normal", [0], jobs=24, duration_s=600),
                                round_s=50, **kw)


def test_env_passes_gymnasiums_checks():
    from gymnasium.utils.env_checker import check_env
    check_env(_env(), skip_render_check=True)


def test_an_episode_runs_every_job_and_reports():
    env = _env()
    env.reset(seed=0)
    done, steps, total = False, 0, 0.0
    while not done:
        action = rl_sched.first_fit_action(None, env.action_masks())
        obs, reward, done, truncated, info = env.step(action)
        assert env.observation_space.contains(obs) and not truncated
        total += reward
        steps += 1
    assert len(env.run.result().jobs) == 24
    assert info["reward_sum"] == pytest.approx(total) and info["utilisation"] > 0.5
    assert info["jct_mean_s"] > 0


def test_waiting_on_an_empty_cluster_still_places_a_job():
    env = _env()
    env.reset(seed=0)
    env.step(0)                                 # "nothing" with nothing running
    assert env.run.segments


def test_a_placement_step_earns_nothing_until_time_runs():
    env = _env(preempt_cs=None)
    env.reset(seed=0)
    mask = env.action_masks()
    _, reward, *_ = env.step(int(np.flatnonzero(mask[1:])[0] + 1))
    assert reward == 0.0 and env.run.t == 0.0
    _, reward, *_ = env.step(0)                 # time runs: Eq. 2 paid, util > 0
    assert env.run.t > 0 and reward > 0


def test_return_is_the_utilisation_integral_when_contention_weighs_nothing():
    env = _env(w1=0.0)
    env.reset(seed=0)
    done, total = False, 0.0
    while not done:
        _, reward, done, _, info = env.step(rl_sched.first_fit_action(None, env.action_masks()))
        total += reward
    result = env.run.result()
    # Eq. 2's utilisation paid per stretch of time, in rounds: GPU-seconds held / (GPUs x T)
    assert total == pytest.approx(result.gpu_utilisation() * result.makespan_s / 50, rel=1e-9)


def test_an_episode_that_never_ends_is_truncated():
    env = _env(max_steps=5)
    env.reset(seed=0)
    for _ in range(5):
        *_, done, truncated, _ = env.step(0)
    assert truncated and not done


def test_reward_weighs_contention_against_utilisation():
    env = _env(w1=1.0, preempt_cs=None)         # utilisation not counted at all
    env.reset(seed=0)
    _, reward, *_ = env.step(0)
    assert reward <= 0


# --- schedulers


def _sim(scheduler, n: int = 24, scheme: str = "fair"):
    jobs = deepshare.job_set("normal", 0, n, duration_s=600)
    return ClusterSim(NET, jobs, scheduler, registry.network(scheme, NET)).run()


def test_rl_base_waits_when_its_policy_says_nothing_but_hybrid_fills():
    never = lambda obs, mask: 0                  # noqa: E731
    base = rl_sched.RLScheduler("rl-base", NET, never, round_s=50)
    hybrid = rl_sched.RLScheduler("rl-hybrid", NET, never, hybrid=True, round_s=50)
    r_base, r_hybrid = _sim(base), _sim(hybrid)
    assert len(r_base.jobs) == len(r_hybrid.jobs) == 24
    # RL-base ran one job at a time (only the empty-cluster rule placed anything)
    spans = sorted((j.start_s, j.end_s) for j in r_base.jobs)
    assert all(a[1] <= b[0] + 1e-6 for a, b in zip(spans, spans[1:], strict=False))
    assert r_hybrid.gpu_utilisation() > 2 * r_base.gpu_utilisation()


def test_preemption_threshold_sends_contended_jobs_back():
    first = rl_sched.first_fit_action
    rule = rl_sched.RLScheduler("rl-base", NET, first, round_s=50, preempt_cs=1.05)
    never = rl_sched.RLScheduler("rl-base", NET, first, round_s=50, preempt_cs=None)
    assert report.preemptions(_sim(rule)) > 0 and report.preemptions(_sim(never)) == 0


def test_rules_in_the_same_action_space_are_named_schedulers():
    first = registry.scheduler("deepshare-first-fit", NET)
    result = _sim(first)
    assert len(result.jobs) == 24 and first.decisions > 0
    # smallest demand first: the 2-GPU jobs start before any 16-GPU one waits its turn
    starts = {j.gpus: [] for j in result.jobs}
    for j in result.jobs:
        starts[j.gpus].append(j.start_s)
    assert min(starts[2]) == 0.0 and np.mean(starts[2]) < np.mean(starts[16])
    assert len(_sim(registry.scheduler("deepshare-random", NET)).jobs) == 24


def test_registry_errors_name_the_policy_and_cluster(tmp_path):
    with pytest.raises(SpecError, match="policy"):
        registry.scheduler(f"rl-base@{tmp_path}/missing.zip", NET)
    from mltcp.lab.cluster.engine.leafspine import LeafSpine
    with pytest.raises(SpecError, match="cluster"):
        registry.scheduler("rl-hybrid", LeafSpine(leaves=1, servers_per_leaf=8, spines=1,
                                                  gpus_per_server=4))


# --- training and the shipped policy


def test_smoke_training_writes_a_policy_that_schedules(tmp_path):
    cfg = rl_train.TrainConfig(jobs=16, duration_s=600, round_s=50, timesteps=256,
                               n_steps=64)
    lines: list[str] = []
    result = rl_train.train(cfg, tmp_path, "smoke", progress=lines.append)
    assert result.policy.is_file() and (tmp_path / "smoke-curves.png").stat().st_size > 0
    assert (tmp_path / "smoke-curves.pdf").is_file()
    assert sorted(p.name for p in tmp_path.iterdir()) == [      # whole files, no temporaries
        "smoke-curves.pdf", "smoke-curves.png", "smoke.json", "smoke.zip"]
    record = json.loads((tmp_path / "smoke.json").read_text())
    assert record["config"]["timesteps"] == 256 and record["train_s"] > 0
    assert result.episodes and lines and lines[0].startswith("[episode 1,")
    sched = registry.scheduler(f"rl-hybrid@{result.policy}", NET)
    assert len(_sim(sched, 16).jobs) == 16 and sched.decisions > 0


def test_shipped_policy_schedules_a_job_set():
    record = json.loads(rl_sched.shipped_path().with_suffix(".json").read_text())
    assert record["command"].startswith("mltcp cluster rl-train")
    for name in ("rl-base", "rl-hybrid"):
        sched = registry.scheduler(name, NET)
        result = _sim(sched, 32)
        assert len(result.jobs) == 32
        assert sched.decisions > 0 and sched.inference_s > 0
