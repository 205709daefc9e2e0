"""Cluster experiments: the config is checked field by field before anything runs; an
experiment runs every scheduler x network x seed on the seed's one job list, here or
on Dask, with the same numbers; the report's JSON, markdown and plots agree with the
runs and with each other."""

from __future__ import annotations

import copy
import dataclasses
import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from mltcp.core.errors import SpecError
from mltcp.lab.cluster.engine.simulator import ClusterResult, JobOutcome
from mltcp.lab.cluster.experiments import config, report
from mltcp.lab.cluster.experiments import runner as experiment
from mltcp.lab.cluster.papers import setups

# a and b share server 1's NIC under first_fit (6 GPUs each on 4-GPU servers); b comes
# a little later, so MLTCP can shift it; c waits for GPUs; d fits beside them.
TRACE = """name,arrival_s,gpus,compute_s,gradient_bytes,iterations,model
a,0,6,0.1,50e6,20,resnet
b,0.03,6,0.1,50e6,20,resnet
c,0.5,8,0.05,20e6,10,vgg
d,1,2,0.05,10e6,10,
"""
CLUSTER = {"leaves": 2, "servers_per_leaf": 2, "spines": 1, "gpus_per_server": 4,
           "server_gbit": 10}
POISSON = {"n": 6, "jobs_per_hour": 3600, "models": {"resnet50": 2, "camembert": 1},
           "gpus": {"2": 1, "6": 2}, "iterations": [5, 10]}


def _data(**over: Any) -> dict[str, Any]:
    data = {"name": "tiny", "schedulers": ["fifo/first_fit", "srtf/first_fit+backfill"],
            "networks": ["fair", "mltcp"], "seeds": [0], "cluster": dict(CLUSTER),
            "jobs": {"poisson": copy.deepcopy(POISSON)}}
    return {**data, **over}


def _trace(tmp_path: Path, text: str = TRACE) -> Path:
    path = tmp_path / "jobs.csv"
    path.write_text(text)
    return path


# --------------------------------------------------------------------------- config


def _set(data: dict[str, Any], dotted: str, value: Any) -> dict[str, Any]:
    """``data`` with ``a.b[0].c`` set (or deleted, for value ...)."""
    *path, last = dotted.replace("[", ".").replace("]", "").split(".")
    node: Any = data
    for part in path:
        node = node[int(part)] if isinstance(node, list) else node[part]
    key: Any = int(last) if isinstance(node, list) else last
    if value is ...:
        del node[key]
    else:
        node[key] = value
    return data


@pytest.mark.parametrize(("where", "value", "field"), [
    ("schedulerz", ["fifo/first_fit"], "schedulerz"),
    ("cluster.leaves", ..., "cluster.leaves"),
    ("cluster.spines", 0, "cluster.spines"),
    ("cluster.racks", 2, "cluster.racks"),
    ("cluster", 3, "cluster"),
    ("jobs.trace", "x.csv", "jobs"),                   # two sources
    ("jobs.poisson", ..., "jobs"),                     # none
    ("jobs.poisson.n", 0, "jobs.poisson.n"),
    ("jobs.poisson.jobs_per_hour", math.nan, "jobs.poisson.jobs_per_hour"),
    ("jobs.poisson.load", 0.5, "jobs.poisson"),                # and jobs_per_hour
    ("jobs.poisson.jobs_per_hour", ..., "jobs.poisson"),       # neither
    ("jobs.poisson.colour", "red", "jobs.poisson.colour"),
    ("jobs.poisson.models", {}, "jobs.poisson.models"),
    ("jobs.poisson.models.alexnet-9000", 1, "jobs.poisson.models.alexnet-9000"),
    ("jobs.poisson.models.resnet50", 0, "jobs.poisson.models.resnet50"),
    ("jobs.poisson.models", ["bert", "bert"], "jobs.poisson.models[1]"),
    ("jobs.poisson.gpus.17", 1, "jobs.poisson.gpus.17"),      # > the cluster's 16
    ("jobs.poisson.gpus", ["two"], "jobs.poisson.gpus[0]"),
    ("jobs.poisson.iterations", [10, 5], "jobs.poisson.iterations[1]"),
    ("jobs.poisson.iterations", "many", "jobs.poisson.iterations"),
    ("jobs.poisson.seed", -1, "jobs.poisson.seed"),
    ("jobs.poisson.models", ..., "jobs.poisson.models"),
    ("schedulers", [], "schedulers"),
    ("schedulers", ["fifo/nowhere"], "schedulers[0]"),
    ("schedulers", ["fifo/first_fit", "las/random+sometimes"], "schedulers[1]"),
    ("schedulers", ["fifo/first_fit", "fifo/first_fit"], "schedulers[1]"),
    ("networks", ["fair", "tcp"], "networks[1]"),
    ("seeds", [-1], "seeds[0]"),
    ("seeds", [0, 0], "seeds[1]"),
    ("seeds", "a-b", "seeds"),
    ("f_steps", 1.5, "f_steps"),
    ("name", "Has Spaces", "name"),
])
def test_a_bad_field_is_one_line_naming_it(where: str, value: Any, field: str) -> None:
    with pytest.raises(SpecError) as err:
        config.parse_config(_set(_data(), where, value))
    assert err.value.field == field
    assert "\n" not in str(err.value) and err.value.fix


def test_a_good_config_parses_with_its_defaults(tmp_path: Path) -> None:
    data = _data(jobs={"trace": "jobs.csv"})
    del data["networks"], data["seeds"]
    _trace(tmp_path)
    cfg = config.parse_config(data, tmp_path)
    assert cfg.networks == ("fair", "mltcp") and cfg.seeds == (0,) and cfg.f_steps == 8
    assert cfg.jobs.path == tmp_path / "jobs.csv"                  # relative to the file
    assert cfg.cluster.gpus == 16
    assert config.parse_config(_data(seeds="2-4")).seeds == (2, 3, 4)


@pytest.mark.parametrize("jobs", [{"poisson": POISSON}, {"poisson": {**POISSON, "seed": 3}},
                                  {"poisson": {**{k: v for k, v in POISSON.items()
                                                  if k != "jobs_per_hour"}, "load": 0.7}},
                                  {"trace": "jobs.csv"}])
def test_what_a_config_writes_back_parses_to_the_same_config(tmp_path: Path,
                                                            jobs: dict[str, Any]) -> None:
    _trace(tmp_path)
    cfg = config.parse_config(_data(jobs=copy.deepcopy(jobs), description="x"), tmp_path)
    assert config.parse_config(json.loads(json.dumps(cfg.to_dict()))) == cfg


def test_a_file_names_itself_in_its_errors(tmp_path: Path) -> None:
    path = tmp_path / "exp.toml"
    path.write_text('schedulers = ["fifo/first_fit"]\n[cluster]\nleaves = 2\n'
                    'servers_per_leaf = 2\nspines = 0\n[jobs]\ntrace = "jobs.csv"\n')
    with pytest.raises(SpecError) as err:
        config.load_config(path)
    assert err.value.field == "cluster.spines" and str(path) in str(err.value)
    path.write_text("schedulers = [\n")
    with pytest.raises(SpecError, match="TOML"):
        config.load_config(path)
    with pytest.raises(SpecError, match="small"):               # lists the examples
        config.load_config(tmp_path / "none.toml")


def test_a_trace_is_read_once_at_parse_and_a_bad_row_fails_there(tmp_path: Path) -> None:
    cfg = config.parse_config(_data(jobs={"trace": "jobs.csv"}), _trace(tmp_path).parent)
    jobs = cfg.jobs.requests(0)
    assert jobs == cfg.jobs.requests(5)                          # the same for every seed
    assert [(j.name, j.arrival_s, j.gpus, j.model) for j in jobs] == [
        ("a", 0.0, 6, "resnet"), ("b", 0.03, 6, "resnet"), ("c", 0.5, 8, "vgg"), ("d", 1.0, 2, "")]
    assert jobs[0].gradient_bytes == 50e6 and jobs[2].iterations == 10
    _trace(tmp_path, TRACE.replace("c,0.5,8", "c,0.5,eight"))
    with pytest.raises(SpecError) as err:
        config.parse_config(_data(jobs={"trace": "jobs.csv"}), tmp_path)
    assert "jobs.csv" in err.value.field and "gpus" in err.value.field
    with pytest.raises(SpecError) as err:
        config.parse_config(_data(jobs={"trace": "gone.csv"}), tmp_path)
    assert err.value.field == "jobs.trace"


def test_a_paper_setup_brings_its_jobs_and_its_cluster() -> None:
    from mltcp.lab.cluster.papers import setups

    key = setups.names()[0]
    data = _data(jobs={"setup": key})
    del data["cluster"]
    cfg = config.parse_config(data)
    assert cfg.cluster == setups.setup(key).fabric
    assert cfg.jobs.requests(1) == setups.jobs(key, 1)
    with pytest.raises(SpecError) as err:
        config.parse_config(_data(jobs={"setup": "no-such-setup"}))
    assert err.value.field == "jobs.setup" and key in err.value.fix
    first = config.parse_config({**data, "jobs": {"setup": {"name": key, "first": 7}}})
    by_arrival = sorted(setups.jobs(key, 2), key=lambda j: (j.arrival_s, j.name))
    assert first.jobs.requests(2) == by_arrival[:7]
    assert config.parse_config(first.to_dict()) == first
    for bad, field_ in (({"name": key, "first": 0}, "jobs.setup.first"),
                        ({"first": 3}, "jobs.setup.name"),
                        ({"name": key, "last": 3}, "jobs.setup")):
        with pytest.raises(SpecError) as err:
            config.parse_config({**data, "jobs": {"setup": bad}})
        assert err.value.field.startswith(field_)
    del data["jobs"]["setup"]
    data["jobs"]["poisson"] = POISSON
    with pytest.raises(SpecError) as err:                        # no setup: no cluster
        config.parse_config(data)
    assert err.value.field == "cluster"


def test_poisson_jobs_follow_the_runs_seed_unless_the_trace_fixes_its_own() -> None:
    cfg = config.parse_config(_data())
    a, b, again = cfg.jobs.requests(0), cfg.jobs.requests(1), cfg.jobs.requests(0)
    assert a == again and a != b and len(a) == 6
    assert {j.model for j in a} <= {"resnet50", "camembert"} and {j.gpus for j in a} <= {2, 6}
    assert all(5 <= j.iterations <= 10 for j in a)
    fixed = config.parse_config(_set(_data(), "jobs.poisson.seed", 7))
    assert fixed.jobs.requests(0) == fixed.jobs.requests(1)


def test_a_load_sets_the_rate_in_proportion() -> None:
    def rate(load: float) -> float:
        data = _set(_data(), "jobs.poisson.jobs_per_hour", ...)
        return config.parse_config(_set(data, "jobs.poisson.load", load)).jobs.jobs_per_hour
    assert rate(0.8) == pytest.approx(2 * rate(0.4))
    assert rate(0.4) > 0


# --------------------------------------------------------------------------- metrics


def test_the_added_metrics_on_known_outcomes() -> None:
    jobs = (JobOutcome("a", 4, 1, 0.0, 1.0, 5.0, dedicated_s=2.0, held_s=4.0),
            JobOutcome("b", 4, 1, 1.0, 1.0, 3.0, dedicated_s=2.0, held_s=2.0, preemptions=2),
            JobOutcome("c", 4, 1, 2.0, 4.0, 4.0, dedicated_s=0.0))       # no dedicated time
    res = ClusterResult(jobs, gpus=8, events=0)
    assert report.jwt_mean(res) == pytest.approx((1.0 + 0.0 + 2.0) / 3)
    assert report.slowdown_summary(res) == {"mean": pytest.approx((2.5 + 1.0) / 2),
                                            "p99": pytest.approx(np.percentile([2.5, 1.0], 99))}
    assert report.preemptions(res) == 2
    m = report.run_metrics(res)
    assert m["jct_mean_s"] == res.jct_summary()["mean"] and m["makespan_s"] == 5.0
    nothing = ClusterResult(jobs[2:], gpus=8, events=0)
    assert report.slowdown_summary(nothing) == {"mean": None, "p99": None}


# --------------------------------------------------------------------------- end to end


def test_an_experiment_writes_json_markdown_and_plots_that_agree(tmp_path: Path) -> None:
    cfg = config.parse_config(_data(jobs={"trace": str(_trace(tmp_path))}))
    seen: list[tuple[int, int, str]] = []
    result = experiment.execute(cfg, progress=lambda d, t, k, r, s: seen.append((d, t, k.label)))
    assert [s[:2] for s in seen] == [(i, 4) for i in range(1, 5)]
    assert [k for k, _ in result.runs] == experiment.run_keys(cfg)
    assert len({(k.scheduler, k.network) for k, _ in result.runs}) == 4

    out = tmp_path / "out"
    written = report.write(result, out)
    saved = json.loads((out / "report.json").read_text())
    assert saved == json.loads(json.dumps(written)) and saved["schema"] == report.SCHEMA
    assert saved["config"]["jobs"] == {"trace": str(tmp_path / "jobs.csv")}
    assert len(saved["runs"]) == 4 and len(saved["cells"]) == 4
    for run in saved["runs"]:
        res = result.result(run["scheduler"], run["network"], run["seed"])
        assert [j["name"] for j in run["jobs"]] == ["a", "b", "c", "d"]
        for j in run["jobs"]:
            assert j["jct_s"] == pytest.approx(j["end_s"] - j["arrival_s"])
            assert j["slowdown"] == pytest.approx(j["jct_s"] / j["dedicated_s"])
        assert run["metrics"]["jct_mean_s"] == pytest.approx(
            np.mean([j["jct_s"] for j in run["jobs"]]))
        assert run["metrics"]["jct_p99_s"] == res.jct_summary()["p99"]
        assert run["metrics"]["gpu_utilisation"] == res.gpu_utilisation()
        cell = next(c for c in saved["cells"] if (c["scheduler"], c["network"]) ==
                    (run["scheduler"], run["network"]))
        assert {m: cell[m] for m in report.METRICS} == run["metrics"]     # one seed

    cells = {(c["scheduler"], c["network"]): c for c in saved["cells"]}
    assert len(saved["vs_fair"]) == 2
    for r in saved["vs_fair"]:
        mine, fair = cells[r["scheduler"], "mltcp"], cells[r["scheduler"], "fair"]
        assert r["network"] == "mltcp"
        assert r["jct_mean_ratio"] == pytest.approx(mine["jct_mean_s"] / fair["jct_mean_s"])
        assert r["jct_p99_ratio"] == pytest.approx(mine["jct_p99_s"] / fair["jct_p99_s"])
        assert r["run_slowdown_ratio"] == pytest.approx(mine["run_slowdown_mean"]
                                                        / fair["run_slowdown_mean"])
        assert r["per_seed"] == [{"seed": 0, "jct_mean_ratio": r["jct_mean_ratio"],
                                  "jct_p99_ratio": r["jct_p99_ratio"],
                                  "run_slowdown_ratio": r["run_slowdown_ratio"]}]
        assert r["jct_mean_ratio"] < 1.0       # a and b share a NIC: MLTCP shifts b

    md = (out / "summary.md").read_text()
    for (sched, net), c in cells.items():
        assert f"| {sched} | {net} | 1 | {report._seconds(c['jct_mean_s'])} |" in md
    for r in saved["vs_fair"]:
        assert f"| {r['scheduler']} | mltcp | 1 | {r['jct_mean_ratio']:.3f} |" in md
    assert saved["partial"] is None and not md.startswith("**PARTIAL")
    for name in ("jct_cdf", "slowdown_cdf"):
        data = (out / f"{name}.png").read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 5000
        assert (out / f"{name}.pdf").read_bytes()[:5] == b"%PDF-"
        assert f"]({name}.png)" in md
    assert not [p for p in out.iterdir() if p.name.startswith(".")]     # no temporaries


def test_cells_are_means_over_seeds_and_no_fair_means_no_ratios(tmp_path: Path) -> None:
    cfg = config.parse_config(_data(schedulers=["fifo/random"], networks=["mltcp"],
                                    seeds=[0, 1]))
    result = experiment.execute(cfg, progress=None)
    assert result.result("fifo/random", "mltcp", 0) != result.result("fifo/random", "mltcp", 1)
    rep = report.build(result)
    runs = [r["metrics"] for r in rep["runs"]]
    [cell] = rep["cells"]
    for m in ("jct_mean_s", "jct_p99_s", "makespan_s", "gpu_utilisation", "jwt_mean_s"):
        assert cell[m] == pytest.approx((runs[0][m] + runs[1][m]) / 2)
    assert rep["vs_fair"] == [] and "No fair-sharing runs" in report.markdown(rep)


def test_jobs_that_do_not_fit_fail_before_any_run(tmp_path: Path) -> None:
    """A trace's job too large for the cluster is refused when the config is read,
    naming its line (issue 25); a config made in code is refused before any run, naming
    the job source, not a job."""
    big = _trace(tmp_path, TRACE.replace("d,1,2,", "d,1,20,"))
    with pytest.raises(SpecError, match=r"jobs\.csv:5 \(row 4\) column gpus"):
        config.parse_config(_data(jobs={"trace": str(big)}))
    cfg = config.parse_config(_data(jobs={"trace": str(_trace(tmp_path))}))
    jobs = tuple(dataclasses.replace(j, gpus=20) if j.name == "d" else j
                 for j in cfg.jobs.requests(0))
    made = dataclasses.replace(cfg, jobs=config.TraceJobs(big, jobs))
    ran: list[object] = []
    with pytest.raises(SpecError, match=r"^jobs\.trace: job d \(seed 0\) asks for 20 GPUs"):
        experiment.execute(made, progress=lambda *a: ran.append(a))
    assert ran == []


def test_dask_runs_give_the_same_results_and_bring_back_a_workers_bad_input(
        tmp_path: Path) -> None:
    distributed = pytest.importorskip("distributed", reason="dask (the sweep extra) is not "
                                                            "installed")
    cfg = config.parse_config(_data(jobs={"trace": str(_trace(tmp_path))}))
    with distributed.LocalCluster(n_workers=1, threads_per_worker=1, processes=False,
                                  dashboard_address=None) as cluster:
        seen: list[int] = []
        on_dask = experiment.execute(cfg, dask_address=cluster.scheduler_address,
                                     progress=lambda d, t, k, r, s: seen.append(d))
        assert seen == [1, 2, 3, 4]
        assert on_dask.runs == experiment.execute(cfg, progress=None).runs
        # A run whose scheduler only the worker builds: its SpecError comes back whole.
        broken = config.ExperimentConfig(cfg.name, cfg.cluster, cfg.jobs,
                                         ("fifo/first_fit", "fifo/nowhere"), ("fair",))
        with pytest.raises(SpecError) as err:
            experiment.execute(broken, dask_address=cluster.scheduler_address, progress=None)
        assert err.value.field == "scheduler" and "fifo/nowhere x fair" in err.value.problem


def test_a_paper_setup_experiment_puts_the_papers_figures_next_to_ours(tmp_path: Path) -> None:
    cfg = config.parse_config({"name": "ada", "schedulers": ["ada-srsf"],
                               "networks": ["ada-dual", "srsf-1"],
                               "jobs": {"setup": {"name": "ada-srsf", "first": 3}}})
    written = report.write(experiment.execute(cfg, progress=None), tmp_path)
    assert written["schema"] == report.SCHEMA
    figures = written["paper_figures"]
    assert len(figures) == len(setups.setup("ada-srsf").results)
    cells = {(c["scheduler"], c["network"]): c for c in written["cells"]}
    first = next(f for f in figures if (f["scheme"], f["baseline"], f["metric"])
                 == ("Ada-SRSF", "SRSF(1)", "average JCT"))
    mine, base = (cells["ada-srsf", n]["jct_mean_s"] for n in ("ada-dual", "srsf-1"))
    assert first["ours_pct"] == pytest.approx(100 * (base - mine) / base)
    assert first["ratio"] == pytest.approx(first["ours_pct"] / first["paper_pct"])
    summary = (tmp_path / "summary.md").read_text()
    assert "The paper's figures next to ours" in summary
    assert "| ours / paper [95 % CI] |" in summary and f"| {first['ratio']:.2f} |" in summary


def test_a_scheduler_spec_is_parsed_once_and_each_run_builds_its_own(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # A config parses each scheduler once when it is read (the check builds one, which
    # the first run gets); every run gets a scheduler of its own (schedulers keep a
    # run's state), and nothing builds one to check the jobs.
    from mltcp.lab.cluster.experiments import registry
    from mltcp.lab.cluster.schedulers.queue import QueueScheduler

    built: list[QueueScheduler] = []

    def counting(fabric: Any) -> QueueScheduler:
        sched = registry.scheduler("fifo/first_fit", fabric)
        built.append(sched)
        return sched

    monkeypatch.setitem(registry.NAMED, "counted", counting)
    cfg = config.parse_config(_data(schedulers=["counted"], seeds=[0, 1]))
    assert len(built) == 1                           # parsed and checked once
    experiment.execute(cfg, progress=None)
    assert len(built) == 4                           # 2 networks x 2 seeds, one each
    assert len({id(s) for s in built}) == 4


# --------------------------------------------------------------------------- spread


def test_every_mean_over_seeds_carries_n_and_a_bootstrap_interval(tmp_path: Path) -> None:
    from mltcp.lab.common import stats

    cfg = config.parse_config(_data(schedulers=["fifo/random"], seeds=[0, 1, 2]))
    rep = report.write(experiment.execute(cfg, progress=None), tmp_path)
    per_run = {(r["network"], r["seed"]): r["metrics"] for r in rep["runs"]}
    assert rep["settings"] == {"confidence": stats.LEVEL,
                               "bootstrap_resamples": stats.RESAMPLES}
    for cell in rep["cells"]:
        assert cell["n"] == 3 and cell["seeds"] == [0, 1, 2]
        for m in report.METRICS:
            spread = cell["spread"][m]
            values = [per_run[cell["network"], s][m] for s in (0, 1, 2)]
            assert spread == stats.bootstrap(values).to_dict()
            assert spread["n"] == 3 and cell[m] == spread["mean"]
            assert spread["ci_lo"] <= spread["mean"] <= spread["ci_hi"]
        assert cell["spread"]["jct_mean_s"]["ci_lo"] < cell["spread"]["jct_mean_s"]["ci_hi"]
    [ratios] = rep["vs_fair"]
    assert ratios["n"] == 3
    for name, metric in report.RATIOS.items():
        mine = [per_run["mltcp", s][metric] for s in (0, 1, 2)]
        fair = [per_run["fair", s][metric] for s in (0, 1, 2)]
        assert ratios[name] == pytest.approx(np.mean(mine) / np.mean(fair))
        spread = ratios["spread"][name]
        assert spread == stats.bootstrap_ratio(mine, fair).to_dict()
        assert spread["ci_lo"] <= ratios[name] <= spread["ci_hi"]
    md = (tmp_path / "summary.md").read_text()
    assert "N = seeds per cell; [lo, hi] = the 95% bootstrap confidence interval" in md
    jct = rep["cells"][0]["spread"]["jct_mean_s"]
    assert (f"| fifo/random | fair | 3 | {report._sec(jct['mean'])} "
            f"[{report._sec(jct['ci_lo'])}, {report._sec(jct['ci_hi'])}] s |") in md
    r = ratios["spread"]["jct_mean_ratio"]
    assert f"| 3 | {r['mean']:.3f} [{r['ci_lo']:.3f}, {r['ci_hi']:.3f}] |" in md


def test_a_metric_a_run_lacks_is_left_out_of_n_not_counted_as_zero() -> None:
    jobs = (JobOutcome("a", 4, 1, 0.0, 1.0, 5.0, dedicated_s=2.0, held_s=4.0),)
    none = (JobOutcome("a", 4, 1, 0.0, 1.0, 3.0, dedicated_s=0.0, held_s=2.0),)
    cfg = config.parse_config(_data(schedulers=["fifo/random"], networks=["fair"],
                                    seeds=[0, 1]))
    runs = ((experiment.RunKey("fifo/random", "fair", 0), ClusterResult(jobs, 8, 0)),
            (experiment.RunKey("fifo/random", "fair", 1), ClusterResult(none, 8, 0)))
    [cell] = report.build(experiment.ExperimentResult(cfg, runs))["cells"]
    assert cell["n"] == 2 and cell["spread"]["jct_mean_s"]["n"] == 2
    assert cell["slowdown_mean"] == pytest.approx(2.5)           # seed 0's alone
    assert cell["spread"]["slowdown_mean"] == {"n": 1, "mean": pytest.approx(2.5),
                                               "ci_lo": None, "ci_hi": None, "level": 0.95}


# --------------------------------------------------------------------------- tables


def _number(value: Any) -> Any:
    """A table's value as written (CSV gives strings back; empty is None)."""
    if value in ("", None):
        return None
    try:
        return float(value)
    except (TypeError, ValueError):
        return value


@pytest.mark.parametrize("parquet", [True, False])
def test_the_tidy_tables_hold_a_row_per_job_per_run_and_per_cell(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, parquet: bool) -> None:
    from mltcp.lab.common import tables

    if parquet:
        pytest.importorskip("pyarrow", reason="pyarrow (the sweep extra) is not installed")
    else:
        monkeypatch.setattr(tables, "has_parquet", lambda: False)
        (tmp_path / "jobs.parquet").write_text("stale")          # an earlier report's
    cfg = config.parse_config(_data(jobs={"trace": str(_trace(tmp_path))}, seeds=[0, 1]))
    rep = report.write(experiment.execute(cfg, progress=None), tmp_path)
    suffix = ".parquet" if parquet else ".csv"
    assert sorted(p.name for p in tmp_path.glob("*s.*") if p.stem in ("jobs", "cells")) == \
        [f"cells{suffix}", f"jobs{suffix}"]                     # the other format is gone
    assert f"`jobs{suffix}`, `cells{suffix}`" in (tmp_path / "summary.md").read_text()

    jobs = tables.read_table(tmp_path / f"jobs{suffix}")
    assert list(jobs[0]) == report.job_columns()
    assert len(jobs) == 2 * 2 * 2 * 4               # schedulers x networks x seeds x jobs
    assert {"arrival_s", "start_s", "end_s", "jct_s", "jwt_s", "slowdown", "gpus",
            "held_s", "dedicated_s", "preemptions", "model"} <= set(jobs[0])
    written = {(r["scheduler"], r["network"], int(_number(r["seed"])), r["job"]): r
               for r in jobs}
    for run in rep["runs"]:
        for job in run["jobs"]:
            row = written[run["scheduler"], run["network"], run["seed"], job["name"]]
            for key in ("arrival_s", "start_s", "end_s", "jct_s", "slowdown", "gpus"):
                assert _number(row[key]) == pytest.approx(job[key])

    cells = tables.read_table(tmp_path / f"cells{suffix}")
    assert list(cells[0]) == report.cell_columns() and len(cells) == len(rep["cells"]) == 4
    by_cell = {(c["scheduler"], c["network"]): c for c in rep["cells"]}
    for row in cells:
        cell = by_cell[row["scheduler"], row["network"]]
        assert _number(row["n"]) == 2
        for m in report.METRICS:
            for part in ("mean", "ci_lo", "ci_hi"):
                assert _number(row[f"{m}_{part}"]) == pytest.approx(cell["spread"][m][part])
        ratio = _number(row["jct_mean_ratio_mean"])
        if row["network"] == "fair":
            assert ratio is None
        else:
            assert ratio == pytest.approx(next(
                r["jct_mean_ratio"] for r in rep["vs_fair"]
                if r["scheduler"] == row["scheduler"]))


# --------------------------------------------------------------------------- interrupted


def _stop_after(runs: int, stop: BaseException) -> Any:
    """A progress callback that raises ``stop`` once ``runs`` runs have finished."""
    def progress(done: int, total: int, key: Any, result: Any, elapsed: float) -> None:
        if done == runs:
            raise stop
    return progress


def test_an_interrupted_experiment_keeps_its_finished_runs_in_a_partial_report(
        tmp_path: Path) -> None:
    import signal

    cfg = config.parse_config(_data(jobs={"trace": str(_trace(tmp_path))}))
    whole = experiment.execute(cfg, progress=None)
    with pytest.raises(experiment.RunsInterrupted) as stopped:
        experiment.execute(cfg, progress=_stop_after(2, KeyboardInterrupt()))
    assert isinstance(stopped.value, KeyboardInterrupt)
    assert stopped.value.signo == signal.SIGINT and stopped.value.exit_code == 130
    partial = stopped.value.result
    assert partial.runs == whole.runs[:2] and partial.runs_total == 4
    assert partial.partial == {"runs_done": 2, "runs_total": 4} and not partial.complete

    out = tmp_path / "out"
    rep = report.write(partial, out)
    saved = json.loads((out / "report.json").read_text())
    assert saved["partial"] == {"runs_done": 2, "runs_total": 4} == rep["partial"]
    assert len(saved["runs"]) == 2
    # both finished runs are fifo/first_fit's (schedulers outermost): its two cells
    assert [(c["scheduler"], c["network"], c["n"]) for c in saved["cells"]] == [
        ("fifo/first_fit", "fair", 1), ("fifo/first_fit", "mltcp", 1)]
    assert [r["scheduler"] for r in saved["vs_fair"]] == ["fifo/first_fit"]
    md = (out / "summary.md").read_text()
    assert md.splitlines()[0].startswith("**PARTIAL: interrupted after 2 of 4 runs.**")
    assert "| srtf/first_fit+backfill |" not in md
    assert (out / "jct_cdf.png").stat().st_size > 5000 and (out / "slowdown_cdf.pdf").is_file()
    from mltcp.lab.common import tables
    assert len(tables.read_table(next(out.glob("jobs.*")))) == 2 * 4


def test_a_teardown_signal_carries_its_own_exit_code() -> None:
    import signal

    from mltcp.core.signals import Terminated

    cfg = config.parse_config(_data(schedulers=["fifo/first_fit"], networks=["fair"]))
    with pytest.raises(experiment.RunsInterrupted) as stopped:
        experiment.execute(cfg, progress=_stop_after(1, Terminated(signal.SIGTERM)))
    assert stopped.value.signo == signal.SIGTERM and stopped.value.exit_code == 143
    # the only run finished: the result is whole, nothing is partial
    assert len(stopped.value.result.runs) == 1 and stopped.value.result.partial is None


def test_an_interrupted_dask_experiment_keeps_what_finished_and_cancels_the_rest(
        tmp_path: Path) -> None:
    distributed = pytest.importorskip("distributed", reason="dask (the sweep extra) is not "
                                                            "installed")
    cfg = config.parse_config(_data(jobs={"trace": str(_trace(tmp_path))}, seeds=[0, 1]))
    whole = dict(experiment.execute(cfg, progress=None).runs)
    with distributed.LocalCluster(n_workers=1, threads_per_worker=1, processes=False,
                                  dashboard_address=None) as cluster:
        with pytest.raises(experiment.RunsInterrupted) as stopped:
            experiment.execute(cfg, dask_address=cluster.scheduler_address,
                               progress=_stop_after(2, KeyboardInterrupt()))
        with distributed.Client(cluster.scheduler_address) as client:
            # nothing of the experiment is left running or queued on the cluster
            assert not any(client.processing().values())
    result = stopped.value.result
    assert result.runs_total == 8 and 2 <= len(result.runs) <= 8
    assert [k for k, _ in result.runs] == [k for k in experiment.run_keys(cfg)
                                           if k in dict(result.runs)]    # config order
    for key, res in result.runs:
        assert res == whole[key]
    rep = report.build(result)
    assert len(rep["runs"]) == len(result.runs)
    assert rep["partial"] == (None if len(result.runs) == 8
                              else {"runs_done": len(result.runs), "runs_total": 8})


# --------------------------------------------------------------------------- run sets


def test_the_definition_changes_with_what_decides_the_runs_and_only_that(
        tmp_path: Path) -> None:
    from mltcp.lab.common import runset

    def digest(**over: Any) -> str:
        return runset.digest(config.parse_config(_data(**over), tmp_path).definition())

    base = digest()
    assert digest(description="another text") == base
    changed = [digest(f_steps=4), digest(seeds=[0, 1]), digest(networks=["fair"]),
               digest(schedulers=["fifo/first_fit"]),
               digest(cluster={**CLUSTER, "server_gbit": 25}),
               digest(jobs={"poisson": {**POISSON, "n": 7}})]
    assert len({base, *changed}) == 1 + len(changed)
    _trace(tmp_path)
    before = digest(jobs={"trace": "jobs.csv"})
    _trace(tmp_path, TRACE.replace("d,1,2,", "d,1,4,"))       # the same path, edited
    assert digest(jobs={"trace": "jobs.csv"}) != before


def test_a_run_set_names_the_simulator_the_schemes_as_run_and_the_seeds() -> None:
    cfg = config.parse_config(_data(seeds=[3, 1]))
    rs = experiment.runset_of(cfg)
    assert (rs.kind, rs.name, rs.backend, rs.seeds) == ("cluster", "tiny", "cluster-sim",
                                                        (1, 3))
    assert rs.schemes["fair"]["f"] is None
    assert rs.schemes["mltcp"]["f"]["slope"] > 0


def test_a_retrained_policy_at_the_same_path_is_another_run_set(tmp_path: Path) -> None:
    from mltcp.lab.common import runset

    cfg = config.parse_config(_data())
    policy = tmp_path / "policy.zip"
    rl = config.ExperimentConfig(cfg.name, cfg.cluster, cfg.jobs,
                                 ("fifo/first_fit", f"rl-hybrid@{policy}"))
    policy.write_bytes(b"first training")
    first = runset.digest(rl.definition())
    assert rl.definition()["policies"] == {f"rl-hybrid@{policy}": config._file_digest(policy)}
    policy.write_bytes(b"second training")
    assert runset.digest(rl.definition()) != first
    assert "policies" not in cfg.definition()                # no RL scheduler, no file
