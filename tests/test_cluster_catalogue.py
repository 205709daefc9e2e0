"""The model catalogue (numbers derived from the papers as their docstrings say) and the
papers' setups (jobs that fit their clusters, reported results that agree with
themselves)."""

from __future__ import annotations

from collections import Counter

import pytest

from mltcp.core.errors import SpecError
from mltcp.lab.cluster.arrivals import catalogue
from mltcp.lab.cluster.arrivals import job_traces as traces
from mltcp.lab.cluster.arrivals.catalogue import MIB, ModelProfile, job_request, profile
from mltcp.lab.cluster.engine.simulator import JobRequest
from mltcp.lab.cluster.papers import setups
from mltcp.lab.cluster.papers.ada_srsf import setup as ada_setup
from mltcp.lab.cluster.papers.cassini import setup as cassini_setup
from mltcp.lab.cluster.papers.vclos import setup as vclos_setup
from mltcp.lab.common import references

# --- catalogue ----------------------------------------------------------------------


def test_the_catalogue_covers_the_papers_models() -> None:
    cassini = {"vgg11", "vgg16", "vgg19", "resnet50", "wideresnet101", "bert", "roberta",
               "xlm", "camembert", "gpt1", "gpt2", "gpt3", "dlrm"}             # thesis §4.5.1
    ada = {"ada/vgg16", "ada/resnet50", "ada/inception-v3", "ada/lstm-ptb"}    # ada-srsf Table III
    deepshare = {f"deepshare/{m}" for m in ("gnn", "img", "dlrm", "lm", "fsdp", "moe")}
    assert cassini | ada | deepshare <= set(catalogue.names())
    for mix in (vclos_setup.VCLOS_MIX, cassini_setup.CASSINI_MIX):
        assert set(mix.models.values) <= set(catalogue.names())


def test_an_unknown_model_names_the_catalogue() -> None:
    with pytest.raises(SpecError) as err:
        profile("vgg17")
    assert err.value.field == "model"
    assert "vgg16" in err.value.fix and "ada/lstm-ptb" in err.value.fix
    with pytest.raises(SpecError):
        profile(16)  # type: ignore[arg-type]


def test_every_profile_cites_a_paper_and_says_how_the_simulator_runs_it() -> None:
    for p in catalogue.CATALOGUE.values():
        assert p.source.split()[0] in references.BY_KEY, p.name
        assert p.treatment == catalogue.COLLECTIVES[p.collective]
        assert p.derived, f"{p.name}: every profile derives something (say what)"


def test_fp32_gradients_are_four_bytes_a_parameter_where_so_derived() -> None:
    # All but two: DLRM's bytes come from Table 3.1's times, FSDP moves 1.5x its gradients.
    for p in catalogue.CATALOGUE.values():
        if p.name in ("dlrm", "deepshare/fsdp"):
            assert p.gradient_bytes != pytest.approx(4 * p.parameters), p.name
        else:
            assert p.gradient_bytes == pytest.approx(4 * p.parameters), p.name
    fsdp = profile("deepshare/fsdp")
    assert fsdp.gradient_bytes == pytest.approx(1.5 * 4 * fsdp.parameters)


def test_two_papers_agree_on_vgg16_when_their_megabytes_are_mebibytes() -> None:
    # ada-srsf Table III's 526.4 MB and thesis Table 4.2's 528 MB: the same model within 0.5 %
    # read as MiB, while VGG16's 138.4 M parameters x 4 B would be 553 "MB" of 10^6.
    a, c = profile("ada/vgg16").parameters, profile("vgg16").parameters
    assert a == pytest.approx(c, rel=5e-3)
    assert 137e6 < a < 139.5e6
    assert profile("ada/vgg16").gradient_bytes == 526.4 * MIB


def test_ada_profiles_are_table_iii_and_eq_2() -> None:
    p = profile("ada/vgg16")
    assert p.compute_s == pytest.approx(0.0358 + 0.0537)          # t_f + t_b
    assert p.comm_s == pytest.approx(6.69e-4 + 8.53e-10 * 526.4 * MIB)
    assert p.comm_s == pytest.approx(0.4715, abs=1e-4)
    assert (p.gpu, p.link_gbit, p.batch) == ("Tesla V100-16GB", 10.0, "16")
    assert profile("ada/lstm-ptb").batch == "64"
    assert profile("ada/resnet50").compute_s == pytest.approx(0.0624)


def test_cassini_profiles_reproduce_the_papers_iteration_times() -> None:
    # thesis Table 3.1 (unfair, compatible groups) = compute + Table 4.3's communication
    for name, iteration in (("vgg16-b1400", 0.274), ("vgg16-b1700", 0.329), ("vgg19", 0.329),
                            ("wideresnet101", 0.273), ("resnet50", 0.165), ("bert", 0.157)):
        assert profile(name).iteration_s == pytest.approx(iteration), name
    assert profile("vgg19").comm_s == pytest.approx(0.168)
    vgg16 = profile("vgg16")                                        # Fig. 4.3
    assert (vgg16.compute_s, vgg16.iteration_s) == (pytest.approx(0.141), pytest.approx(0.255))


def test_dlrm_is_derived_from_fair_and_unfair_sharing() -> None:
    p = profile("dlrm")
    assert p.compute_s + p.comm_s == pytest.approx((1.001 + 1.019) / 2)   # interleaved
    assert p.compute_s + 2 * p.comm_s == pytest.approx((1.301 + 1.300) / 2)  # both at half rate
    assert p.gradient_bytes == pytest.approx(p.comm_s * 50e9 / 8)
    assert 890 * MIB <= p.gradient_bytes <= 1962 * MIB            # Table 4.2's range
    assert p.collective == "embedding"


def test_models_without_times_take_vgg16s_down_up_split() -> None:
    for name in ("vgg11", "xlm", "camembert", "gpt1", "gpt2", "gpt3", "roberta"):
        p = profile(name)
        assert p.compute_s / p.comm_s == pytest.approx(141 / 114), name
    assert profile("gpt3").comm_s == pytest.approx(1952 * MIB * 8 / 50e9)  # 2-server ring
    assert profile("roberta").comm_s == pytest.approx(0.164)               # Table 4.3
    assert profile("gpt3").collective == "hybrid"


def test_deepshare_profiles_keep_table_is_bandwidth_and_ratio() -> None:
    for name, mb_s, ratio in (("gnn", 24.63, 0.57), ("img", 211.25, 2.43),
                              ("dlrm", 170.28, 13.36), ("moe", 929.48, 13.79)):
        p = profile(f"deepshare/{name}")
        assert p.gradient_bytes / p.iteration_s == pytest.approx(mb_s * 1e6)
        assert p.comm_s / p.compute_s == pytest.approx(ratio)
    assert profile("deepshare/dlrm").parameters == 333.32e6
    assert profile("deepshare/moe").collective == "alltoall"


def test_vclos_profiles_scale_the_v100_measurements() -> None:
    assert profile("vclos/resnet50").compute_s == pytest.approx(
        2 * profile("ada/resnet50").compute_s)                    # batch 16 -> 32
    assert profile("vclos/resnet101").compute_s == pytest.approx(
        2 * profile("vclos/resnet50").compute_s)                  # 7.6 / 3.8 GFLOPs
    assert profile("vclos/bert").gradient_bytes == 1.2e9           # 300 M parameters


def test_ring_allreduce_time() -> None:
    assert catalogue.ring_allreduce_s(1e9, 1, 10) == 0.0
    assert catalogue.ring_allreduce_s(1e9, 2, 10) == pytest.approx(0.8)
    assert catalogue.ring_allreduce_s(1e9, 4, 10) == pytest.approx(1.2)


def test_a_profile_becomes_a_job_request() -> None:
    req = job_request("ada/vgg16", name="a", arrival_s=3.0, gpus=8, iterations=100)
    p = profile("ada/vgg16")
    assert req == JobRequest("a", 3.0, 8, p.compute_s, p.gradient_bytes, 100, "ada/vgg16")
    assert job_request(p, name="b", arrival_s=0, gpus=1, iterations=1).model == "ada/vgg16"
    with pytest.raises(SpecError) as err:
        job_request("vgg16", name="c", arrival_s=0, gpus=0, iterations=10)
    assert err.value.field == "jobs[c].gpus"
    with pytest.raises(SpecError):
        job_request("nope", name="d", arrival_s=0, gpus=1, iterations=10)


def test_a_profile_checks_its_fields() -> None:
    good = dict(name="m", model="M", parameters=1e6, gradient_bytes=4e6, compute_s=0.1,
                batch="8", gpu="x", link_gbit=10.0, collective="allreduce",
                gpu_counts=(1,), source="thesis")
    ModelProfile(**good)
    for key, bad in (("collective", "ring"), ("gpu_counts", ()), ("compute_s", 0.0),
                     ("comm_s", -1.0), ("gpu_counts", (0,))):
        with pytest.raises(SpecError):
            ModelProfile(**{**good, key: bad})


# --- paper setups -------------------------------------------------------------------


@pytest.mark.parametrize("key", list(setups.SETUPS))
def test_each_setup_builds_the_same_jobs_for_a_seed_and_they_fit(key: str) -> None:
    s = setups.setup(key)
    jobs = s.jobs(3)
    assert jobs == setups.jobs(key, 3)
    assert jobs != s.jobs(4)
    assert max(j.gpus for j in jobs) <= s.fabric.gpus
    assert len({j.name for j in jobs}) == len(jobs)
    assert all(j.model in catalogue.CATALOGUE for j in jobs)
    assert s.schemes and s.mapping and s.workload_assumptions
    # deepshare-rl gives numbers for its normal and low traces only (the others are plots)
    assert s.results or key in ("deepshare-heavy", "deepshare-medium")


def test_ada_srsf_setup_is_the_papers_workload() -> None:
    s = ada_setup.ADA_SRSF
    assert (s.fabric.servers, s.fabric.gpus_per_server, s.fabric.server_gbit) == (16, 4, 10.0)
    jobs = s.jobs(0)
    assert len(jobs) == 160
    assert Counter(j.gpus for j in jobs) == {1: 80, 2: 14, 4: 26, 8: 30, 16: 8, 32: 2}
    assert all(1 <= j.arrival_s <= 1200 for j in jobs)
    assert all(1000 <= j.iterations <= 6000 for j in jobs)
    assert {j.model for j in jobs} == set(ada_setup.ADA_MODELS)


def test_vclos_setup_is_cluster512_at_120_s_gaps_near_saturation() -> None:
    s = vclos_setup.VCLOS_CLUSTER512
    f = s.fabric
    assert (f.gpus, f.leaves, f.servers_per_leaf * f.gpus_per_server) == (512, 16, 32)
    assert f.uplink_gbit * f.spines == 32 * 100.0          # 32 spines x 100 Gbit/s a leaf
    jobs = s.jobs(0)
    assert len(jobs) == 5000
    assert traces.mean_gap_s(jobs) == pytest.approx(120.0, rel=0.05)
    offered = vclos_setup.VCLOS_MIX.mean_gpu_seconds(100.0, f.gpus_per_server) / 120.0 / f.gpus
    assert 0.8 < offered < 1.0                             # "steady state with queuing"


def test_cassini_setup_offers_its_load() -> None:
    s = cassini_setup.CASSINI_POISSON
    f = s.fabric
    assert (f.servers, f.gpus_per_server, f.server_gbit, f.oversubscription) == (24, 1, 50.0,
                                                                                2.0)
    mix = cassini_setup.CASSINI_MIX
    assert len(mix.models.values) == 13 and mix.gpus.values == tuple(range(1, 13))
    jobs = cassini_setup.cassini_jobs(0, n=2000, load=0.8)
    rate = traces.jobs_per_hour_for_load(0.8, 24, mix, 50.0, 1)
    assert traces.mean_gap_s(jobs) == pytest.approx(3600 / rate, rel=0.06)
    with pytest.raises(SpecError) as err:
        cassini_setup.cassini_jobs(0, load=0.5)
    assert err.value.field == "load"


def test_reported_figures_agree_with_the_papers_own_values() -> None:
    checked = 0
    for s in setups.SETUPS.values():
        for r in s.results:
            assert r.source.split()[0] in references.BY_KEY, r.source
            assert r.stated_pct is not None or r.stated_factor is not None or \
                r.improvement_pct is not None
            if r.stated_pct is not None and r.improvement_pct is not None:
                assert r.improvement_pct == pytest.approx(r.stated_pct, abs=0.05), r.line()
                checked += 1
            if r.stated_factor is not None and r.improvement_factor is not None:
                assert r.improvement_factor == pytest.approx(r.stated_factor, abs=0.01), r.line()
                checked += 1
    assert checked >= 10


def test_a_reported_result_prints_one_line() -> None:
    r = ada_setup.ADA_RESULTS[0]
    assert r.improvement_pct == pytest.approx(20.09, abs=0.01)
    line = r.line()
    assert "Ada-SRSF vs SRSF(1)" in line and "1098.57 vs 1374.84 s" in line
    assert "20.1 %" in line and "ada-srsf Table V" in line and "\n" not in line
    up = next(r for r in ada_setup.ADA_RESULTS if r.higher_is_better)
    assert up.improvement_factor == pytest.approx(up.scheme_value / up.baseline_value)


def test_an_unknown_setup_names_the_setups() -> None:
    assert setups.names() == tuple(setups.SETUPS)
    with pytest.raises(SpecError) as err:
        setups.jobs("ada", 0)
    assert "ada-srsf" in err.value.fix
