"""The papers' figures next to ours: every figure a paper reports is listed, mapped onto
the cells an experiment on its setup ran, with the improvement computed the same way."""

from __future__ import annotations

import pytest

from mltcp.lab.cluster.papers import compare as paper_compare
from mltcp.lab.cluster.papers import setups


def _cells(values: dict[tuple[str, str], float], key: str = "jct_mean_s") -> dict:
    return {cell: {key: v} for cell, v in values.items()}


def test_every_paper_figure_is_listed_and_ours_is_the_same_improvement() -> None:
    cells = _cells({("ada-srsf", "ada-dual"): 800.0, ("ada-srsf", "srsf-1"): 1000.0})
    rows = paper_compare.rows("ada-srsf", cells)
    assert len(rows) == len(setups.setup("ada-srsf").results)
    first = next(r for r in rows if (r.scheme, r.baseline, r.metric)
                 == ("Ada-SRSF", "SRSF(1)", "average JCT"))
    assert first.ours_pct == pytest.approx(20.0)              # 800 vs 1000 s: -20 %
    assert first.paper_pct == pytest.approx(100 * (1374.84 - 1098.57) / 1374.84)
    missing = next(r for r in rows if r.baseline == "SRSF(2)" and r.metric == "average JCT")
    assert missing.ours_pct is None and "ada-srsf/srsf-2" in missing.ours


def test_higher_is_better_and_unmodelled_figures_say_so() -> None:
    cells = {("ada-srsf", "ada-dual"): {"gpu_utilisation": 0.6},
             ("ada-srsf", "srsf-1"): {"gpu_utilisation": 0.5}}
    util = next(r for r in paper_compare.rows("ada-srsf", cells)
                if r.metric == "average GPU utilisation" and r.baseline == "SRSF(1)")
    assert util.ours_pct == pytest.approx(20.0)               # a gain, not a reduction
    pollux = [r for r in paper_compare.rows("cassini-poisson", {}) if r.baseline == "Pollux"]
    assert pollux and all(r.ours.startswith("not ") and r.ours_pct is None for r in pollux)
    table = paper_compare.table(paper_compare.rows("cassini-poisson", {}))
    assert table.count("\n") == len(setups.setup("cassini-poisson").results) + 1
    assert table.startswith("| paper figure | context | paper | ours [95 % CI] (N seeds) "
                            "| ours / paper [95 % CI] | our cells |")


def test_figures_of_another_experiment_of_the_paper_are_not_matched() -> None:
    cells = {("themis-cassini", "cassini"): {"iteration_mean_s": 0.4, "jct_p99_s": 10.0},
             ("themis", "fair"): {"iteration_mean_s": 0.5, "jct_p99_s": 20.0}}
    rows = [r for r in paper_compare.rows("cassini-poisson", cells)
            if r.metric == "average iteration time" and r.baseline == "Themis"]
    ours = [r for r in rows if r.ours_pct is not None]
    assert len(ours) == 1 and ours[0].context.startswith("Poisson trace, data + model")
    assert ours[0].ours_pct == pytest.approx(20.0)
    assert ours[0].ours == "themis-cassini/cassini vs themis/fair (iteration_mean_s)"
    assert all("another experiment" in r.ours for r in rows if r.ours_pct is None)
    # The headline "tail completion time up to 2.2x" is the stress test's p99 iteration
    # time (Fig. 4.13), not the Poisson trace's: listed, never matched to our p99 JCT.
    headline = [r for r in paper_compare.rows("cassini-poisson", cells)
                if r.metric == "tail completion time"]
    assert len(headline) == 2 and all(r.context.startswith("dynamic trace, DLRM and ResNet50")
                                      and r.ours_pct is None
                                      and "another experiment" in r.ours for r in headline)


def test_cassinis_iteration_times_are_pooled_over_iterations() -> None:
    from mltcp.lab.cluster.engine.simulator import ClusterResult, JobOutcome
    from mltcp.lab.cluster.experiments import report

    # a: 100 iterations of 1 s; b: 300 of 2 s; c: 2 iterations of 9 s (under 1 %)
    jobs = (JobOutcome("a", 2, 2, 0.0, 0.0, 100.0, held_s=100.0, iterations=100),
            JobOutcome("b", 2, 2, 0.0, 0.0, 600.0, held_s=600.0, iterations=300),
            JobOutcome("c", 2, 2, 0.0, 0.0, 18.0, held_s=18.0, iterations=2))
    summary = report.iteration_summary(ClusterResult(jobs, 8, 0))
    assert summary["mean"] == pytest.approx(718.0 / 402)
    assert summary["p99"] == pytest.approx(2.0)          # 99 % of iterations take <= 2 s
    none = (JobOutcome("a", 2, 2, 0.0, 0.0, 1.0, held_s=1.0),)   # iterations not recorded
    assert report.iteration_summary(ClusterResult(none, 8, 0)) == {"mean": None, "p99": None}
    assert paper_compare.METRICS["average iteration time"] == ("iteration_mean_s", False)
    assert paper_compare.METRICS["p99 iteration time"] == ("iteration_p99_s", False)


def test_deepshare_rls_jct_is_compared_as_end_minus_arrival_and_as_time_on_gpus() -> None:
    cells = {("rl-base", "fair"): {"jct_mean_s": 80.0, "held_mean_s": 9.0,
                                   "jct_p90_s": 100.0, "held_p90_s": 10.0},
             ("deepshare-srtf", "fair"): {"jct_mean_s": 100.0, "held_mean_s": 10.0,
                                          "jct_p90_s": 100.0, "held_p90_s": 20.0}}
    rows = {(r.scheme, r.baseline, r.metric): r
            for r in paper_compare.rows("deepshare-normal", cells)}
    assert rows["RL-base", "SRTF", "average JCT"].ours_pct == pytest.approx(20.0)
    assert rows["RL-base", "SRTF", "average JCT"].paper_pct == pytest.approx(15.4)
    assert rows["RL-base", "SRTF", "average JCT (time on GPUs)"].ours_pct == \
        pytest.approx(10.0)
    assert rows["RL-base", "SRTF", "p90 JCT (time on GPUs)"].ours_pct == pytest.approx(50.0)
    assert rows["RL-base", "LAS", "p90 JCT"].ours.startswith("not run here")
    assert not paper_compare.rows("deepshare-heavy", cells)       # plotted only


def test_vclos_jrt_is_time_on_gpus() -> None:
    cells = {("vclos", "fair"): {"held_mean_s": 94.0, "jct_mean_s": 150.0},
             ("vclos-balanced", "fair"): {"held_mean_s": 100.0, "jct_mean_s": 200.0},
             ("vclos-sr", "fair"): {"held_mean_s": 98.0, "jct_mean_s": 170.0}}
    rows = {(r.scheme, r.baseline, r.metric): r
            for r in paper_compare.rows("vclos-cluster512-fifo", cells)}
    jrt = rows["vClos", "Balanced ECMP", "average JRT"]
    assert jrt.ours_pct == pytest.approx(6.0) and jrt.paper_pct == pytest.approx(6.17)
    assert jrt.ours == "vclos/fair vs vclos-balanced/fair (held_mean_s)"
    assert rows["vClos", "Source Routing", "average JRT"].ours_pct == pytest.approx(100 * 4 / 98)
    assert rows["OCS-vClos", "Source Routing", "average JRT"].ours.startswith("not run here")


def test_given_the_seeds_ours_carries_n_and_a_paired_interval() -> None:
    from mltcp.lab.common import stats

    mine = {0: 800.0, 1: 900.0, 2: 760.0}          # ada-dual's mean JCT per seed
    base = {0: 1000.0, 1: 1050.0, 2: 990.0}        # srsf-1's
    util_mine, util_base = {0: 0.6, 1: 0.62, 2: 0.58}, {0: 0.5, 1: 0.55, 2: 0.5}
    per_seed = {("ada-srsf", "ada-dual"): {s: {"jct_mean_s": mine[s],
                                               "gpu_utilisation": util_mine[s]} for s in mine},
                ("ada-srsf", "srsf-1"): {s: {"jct_mean_s": base[s],
                                             "gpu_utilisation": util_base[s]} for s in base}}
    cells = {cell: {k: sum(v[k] for v in runs.values()) / 3 for k in ("jct_mean_s",
                                                                       "gpu_utilisation")}
             for cell, runs in per_seed.items()}
    rows = paper_compare.rows("ada-srsf", cells, per_seed)
    jct = next(r for r in rows if (r.scheme, r.baseline, r.metric)
               == ("Ada-SRSF", "SRSF(1)", "average JCT"))
    ratio = stats.bootstrap_ratio(list(mine.values()), list(base.values()))
    assert jct.n == 3 and jct.ours_ci == pytest.approx((100 * (1 - ratio.hi),
                                                        100 * (1 - ratio.lo)))
    assert jct.ours_ci[0] <= jct.ours_pct <= jct.ours_ci[1]
    util = next(r for r in rows if r.metric == "average GPU utilisation"
                and r.baseline == "SRSF(1)")
    assert util.ours_ci[0] <= util.ours_pct <= util.ours_ci[1] and util.ours_pct > 0
    line = next(x for x in paper_compare.table(rows).splitlines()
                if "Ada-SRSF vs SRSF(1), average JCT" in x)
    assert (f"{jct.ours_pct:+.1f} % [{jct.ours_ci[0]:+.1f}, {jct.ours_ci[1]:+.1f}] (N=3)"
            in line)
    # a row of a report written before intervals (no n, no ours_ci) still reads
    old = {k: v for k, v in jct.to_json().items()
           if k not in ("n", "ours_ci", "ratio", "ratio_ci")}
    assert paper_compare.Row(**old).ours_ci is None
    assert paper_compare.Row.from_json(old).ratio_ci is None


def test_every_row_shows_the_gap_to_the_paper_as_ours_over_the_papers_improvement() -> None:
    per_seed = {("ada-srsf", "ada-dual"): {0: {"jct_mean_s": 800.0}, 1: {"jct_mean_s": 900.0},
                                           2: {"jct_mean_s": 760.0}},
                ("ada-srsf", "srsf-1"): {0: {"jct_mean_s": 1000.0}, 1: {"jct_mean_s": 1050.0},
                                         2: {"jct_mean_s": 990.0}}}
    cells = {cell: {"jct_mean_s": sum(v["jct_mean_s"] for v in runs.values()) / 3}
             for cell, runs in per_seed.items()}
    rows = paper_compare.rows("ada-srsf", cells, per_seed)
    jct = next(r for r in rows if (r.scheme, r.baseline, r.metric)
               == ("Ada-SRSF", "SRSF(1)", "average JCT"))
    assert jct.ratio == pytest.approx(jct.ours_pct / jct.paper_pct)
    assert jct.ratio_ci == pytest.approx(tuple(end / jct.paper_pct for end in jct.ours_ci))
    assert jct.ratio_ci[0] <= jct.ratio <= jct.ratio_ci[1]
    # in report.json: paper, ours and the ratio with its ends; read back the same
    data = jct.to_json()
    assert (data["paper_pct"], data["ours_pct"]) == (jct.paper_pct, jct.ours_pct)
    assert data["ratio"] == jct.ratio and data["ratio_ci"] == list(jct.ratio_ci)
    assert paper_compare.Row.from_json(data) == jct
    # in summary.md: a ratio column; empty where either side is missing
    line = next(x for x in paper_compare.table(rows).splitlines()
                if "Ada-SRSF vs SRSF(1), average JCT" in x)
    assert f"| {jct.ratio:.2f} [{jct.ratio_ci[0]:.2f}, {jct.ratio_ci[1]:.2f}] |" in line
    missing = next(r for r in rows if r.ours_pct is None)
    assert missing.ratio is None and missing.to_json()["ratio"] is None
    # a paper improvement of the other sign keeps the interval's ends in order
    flipped = paper_compare.Row("c", "m", "a", "b", "s", -20.0, 10.0, "x", 3, (5.0, 15.0))
    assert flipped.ratio == pytest.approx(-0.5)
    assert flipped.ratio_ci == pytest.approx((-0.75, -0.25))
