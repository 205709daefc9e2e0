"""vClos's communication calibrated on the paper's testbed, and the dedicated baseline on
collision-free paths: the share a multi-server job spends communicating makes ECMP cost
it what the testbed measured (vclos Table 4), and ECMP's collisions among a job's own
flows count against ECMP, not in the job's dedicated time."""

from __future__ import annotations

import dataclasses

import pytest

from mltcp.core.errors import SpecError
from mltcp.lab.cluster.engine.gpu_jobs import JobRequest, PlacedJob
from mltcp.lab.cluster.engine.leafspine import LeafSpine
from mltcp.lab.cluster.engine.network import Network
from mltcp.lab.cluster.engine.simulator import ClusterSim
from mltcp.lab.cluster.experiments.config import load_config
from mltcp.lab.cluster.papers.vclos import calibration
from mltcp.lab.cluster.papers.vclos.schedulers import SCHEDULERS, cluster512
from mltcp.lab.cluster.papers.vclos.setup import VCLOS_FABRIC, VCLOS_MIX, vclos_jobs

# Two leaves of two 4-GPU servers, 4 rails over 8 spines (leaf-spine links as fast as a
# NIC): a 12-GPU job needs three servers, so its ring crosses leaves one hop each way.
SMALL = LeafSpine(leaves=2, servers_per_leaf=2, spines=8, gpus_per_server=4,
                  server_gbit=10, rails=4)


def test_the_collision_factor_is_what_the_engines_ecmp_does() -> None:
    # the exact expectation against the engine's hash over 1,000 seeds (sampling error
    # ~1.5 %)
    for fabric in (SMALL, cluster512()):
        job = calibration.reference_job(fabric)
        sampled = sum(job.alone_iteration_s(fabric, seed) for seed in range(1000)) / 1000
        factor = calibration.collision_factor(fabric)
        assert sampled / job.dedicated_iteration_s(fabric) == pytest.approx(factor, rel=0.05)
    # 8 flows over 32 spines, twice: most often one pair shares a link (half rate)
    assert 1.9 < calibration.collision_factor(cluster512()) < 2.0
    # one rail, one flow up each leaf: nothing to collide with
    one = LeafSpine(leaves=2, servers_per_leaf=2, spines=2, gpus_per_server=4)
    assert calibration.collision_factor(one) == pytest.approx(1.0)


def test_ecmp_costs_a_calibrated_job_what_it_cost_on_the_testbed() -> None:
    target = calibration.TESTBED_ECMP_SLOWDOWN
    assert target == pytest.approx(95.12 / 74.72)                 # vclos Table 4
    share = calibration.model_shares(SMALL, {"ada/vgg16": target})["ada/vgg16"]
    raw = JobRequest("big", 0.0, 12, 0.2, 500e6, 30, "ada/vgg16")
    req = calibration.calibrated(raw, SMALL, share)
    slowdowns = []
    for seed in range(300):
        job = dataclasses.replace(req, name=f"big{seed}")
        ecmp = ClusterSim(SMALL, [job], SCHEDULERS["vclos-ecmp"](SMALL), Network(),
                          seed=seed).run().jobs[0]
        assert ecmp.servers == 3                                  # across both leaves
        slowdowns.append(ecmp.run_slowdown)
        if seed < 5:                                              # vClos: collision-free
            alone = ClusterSim(SMALL, [job], SCHEDULERS["vclos"](SMALL), Network(),
                               seed=seed).run().jobs[0]
            assert alone.run_slowdown == pytest.approx(1.0, rel=1e-9)
            assert alone.dedicated_s == pytest.approx(ecmp.dedicated_s, rel=1e-9)
    assert sum(slowdowns) / len(slowdowns) == pytest.approx(target, abs=0.03)
    assert min(slowdowns) == pytest.approx(1.0) and max(slowdowns) > target  # hash luck


def test_calibration_splits_a_multi_server_iteration_and_keeps_its_length() -> None:
    plain, tuned = vclos_jobs(3, n=300, calibrated=False), vclos_jobs(3, n=300)
    shares = calibration.model_shares(VCLOS_FABRIC, dict.fromkeys(
        VCLOS_MIX.models.values, calibration.TESTBED_ECMP_SLOWDOWN))
    per = VCLOS_FABRIC.gpus_per_server
    multi = 0
    for a, b in zip(plain, tuned, strict=True):
        assert (a.name, a.arrival_s, a.gpus, a.iterations, a.model) == \
            (b.name, b.arrival_s, b.gpus, b.iterations, b.model)
        if a.gpus <= per:
            assert a == b                                       # no network: untouched
            continue
        multi += 1
        servers = tuple((s, per) for s in range(-(-a.gpus // per)))     # whole servers
        before = PlacedJob(a.name, servers, a.compute_s, a.gradient_bytes, 1)
        after = PlacedJob(b.name, servers, b.compute_s, b.gradient_bytes, 1)
        dedicated = after.dedicated_iteration_s(VCLOS_FABRIC)
        assert dedicated == pytest.approx(before.dedicated_iteration_s(VCLOS_FABRIC))
        assert 1 - b.compute_s / dedicated == pytest.approx(shares[a.model])
    assert multi > 50
    assert all(0.25 < s < 0.32 for s in shares.values())         # ~0.29 on CLUSTER512


def test_a_bad_calibration_names_its_field() -> None:
    factor = calibration.collision_factor(VCLOS_FABRIC)
    for bad in (1.0, 0.9, factor, float("nan")):
        with pytest.raises(SpecError) as err:
            calibration.communication_share(bad, factor, "vclos.ecmp_slowdown[x]")
        assert err.value.field == "vclos.ecmp_slowdown[x]" and "1.273" in err.value.fix
    with pytest.raises(SpecError, match=r"ecmp_slowdown\[m\]"):
        calibration.model_shares(VCLOS_FABRIC, {"m": 3.0})
    with pytest.raises(SpecError) as err:
        calibration.reference_job(LeafSpine(leaves=1, servers_per_leaf=4, spines=1))
    assert err.value.field == "cluster.leaves"
    narrow = LeafSpine(leaves=2, servers_per_leaf=1, spines=2, oversubscription=4)
    with pytest.raises(SpecError) as err:
        calibration.collision_factor(narrow)
    assert err.value.field == "cluster.oversubscription"
    with pytest.raises(SpecError, match="share"):
        calibration.calibrated(JobRequest("j", 0.0, 16, 0.1, 1e6, 1), VCLOS_FABRIC, 1.0)


def test_the_dedicated_baseline_is_collision_free_for_every_routing() -> None:
    # A job whose own rails ECMP hashes onto one link has the dedicated time of the same
    # job source-routed without collisions; on its hashed paths it runs longer, and its
    # run slowdown says so (it was 1 when collisions among its own flows counted as
    # dedicated).
    req = JobRequest("x", 0.0, 12, 0.05, 400e6, 20)
    collided = 0
    for seed in range(12):
        ecmp = ClusterSim(SMALL, [req], SCHEDULERS["vclos-ecmp"](SMALL), Network(),
                          seed=seed).run().jobs[0]
        routed = ClusterSim(SMALL, [req], SCHEDULERS["vclos"](SMALL), Network(),
                            seed=seed).run().jobs[0]
        assert ecmp.dedicated_s == pytest.approx(routed.dedicated_s, rel=1e-12)
        assert routed.held_s == pytest.approx(routed.dedicated_s, rel=1e-9)
        assert ecmp.held_s >= ecmp.dedicated_s * (1 - 1e-9)
        collided += ecmp.run_slowdown > 1.1
    assert collided >= 4


def test_the_full_trace_is_offered_beside_the_shipped_thousand() -> None:
    shipped, full = load_config("vclos-cluster512"), load_config("vclos-cluster512-full")
    assert shipped.jobs.first == 1000 and full.jobs.first is None
    assert full.jobs.name == shipped.jobs.name == "vclos-cluster512-fifo"
    assert full.cluster == shipped.cluster == VCLOS_FABRIC
    assert len(full.jobs.requests(0)) == 5000
    assert set(full.schedulers) == set(shipped.schedulers)
