"""Bounded memory for every in-range input (issue 24, item 2): an input whose fields are
each in range but together would fill memory is refused before anything is allocated,
in one line naming the fields and the size it would need (exit 2); a large input within
the budget is still accepted; runs that fit alone but not together run in chunks.

The refusals run the real CLI under an address-space limit below the allocations they
used to attempt (6.24 GiB of link samples, a 2 GiB fabric array, a list of 10^11 seeds),
so a check that came after the allocation would fail here with a MemoryError."""

from __future__ import annotations

import dataclasses
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

import pytest

from mltcp.core import validate
from mltcp.core.errors import SpecError
from mltcp.lab.cluster.engine.leafspine import LeafSpine
from mltcp.lab.cluster.engine.simulator import check_requests
from mltcp.lab.cluster.experiments.config import parse_config
from mltcp.lab.scenario import backends, footprint, sweep
from mltcp.lab.scenario.backends.fluid import FluidBackend
from mltcp.lab.scenario.plan import resolve
from mltcp.lab.scenario.runner import check_memory, plan_runs
from mltcp.lab.scenario.spec import load_scenario, parse_scenario

REPO = Path(__file__).resolve().parents[1]
SCENARIO = (REPO / "mltcp/lab/scenario/examples/compatible-pair.toml").read_text()
SMALL_CLUSTER = (REPO / "mltcp/lab/cluster/experiments/examples/small.toml").read_text()
LIMIT_AS = 2 << 30          # the CLI starts in ~1.5 GiB of address space (numba, LLVM)
QUICK_S = 30                # a refusal takes about a second; materialising took minutes


def scenario_file(tmp_path: Path, compute_ms: int, iterations: int) -> Path:
    path = tmp_path / "s.toml"
    path.write_text(SCENARIO.replace("compute_ms = 120", f"compute_ms = {compute_ms}")
                    .replace("iterations = 40", f"iterations = {iterations}"))
    return path


def cli(*argv: str | Path, cwd: Path) -> tuple[int, str, float]:
    """The real CLI in a fresh process under LIMIT_AS: exit code, stderr, seconds."""
    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (LIMIT_AS, LIMIT_AS))

    began = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "mltcp.cli", *map(str, argv)],
                          capture_output=True, text=True, cwd=cwd, timeout=300,
                          preexec_fn=limit, env={**os.environ, "PYTHONPATH": str(REPO)})
    return proc.returncode, proc.stderr, time.monotonic() - began


def assert_refused(code: int, err: str, seconds: float, *fields: str) -> None:
    """Exit 2, one line naming every field, no traceback, quickly."""
    assert "Traceback" not in err and "MemoryError" not in err, err
    assert err.count("\n") == 1 and err.startswith("mltcp: error: "), err
    for name in fields:
        assert name in err, (name, err)
    assert code == 2, (code, err)
    assert seconds < QUICK_S, seconds


# --------------------------------------------------------------------------- the cases


def test_long_scenario_is_refused_before_its_link_samples(tmp_path: Path) -> None:
    """compute_ms = 600000 and iterations = 10000, each within the validator's limits: 69
    days of 10 ms link samples, which a fluid run used to allocate until it failed."""
    path = scenario_file(tmp_path, 600_000, 10_000)
    code, err, seconds = cli("run", path, "--backend", "fluid", "--out", tmp_path / "out",
                             "--scheme", "cubic", "--scheme", "mltcp-cubic", cwd=tmp_path)
    assert_refused(code, err, seconds, "jobs[0].iterations x jobs[0].compute_ms",
                   "10000 iterations", "1,200,167,292 link samples", "limit 2 GiB")
    assert not (tmp_path / "out" / "traces").exists()


def test_huge_cluster_is_refused_before_its_fabric(tmp_path: Path) -> None:
    """4096 leaves x 1024 servers x 64 GPUs, each field in range: 268 million GPUs."""
    path = tmp_path / "c.toml"
    path.write_text(SMALL_CLUSTER.replace("leaves = 2", "leaves = 4096")
                    .replace("servers_per_leaf = 2", "servers_per_leaf = 1024")
                    .replace("gpus_per_server = 4", "gpus_per_server = 64"))
    code, err, seconds = cli("cluster", "run", path, "--out", tmp_path / "out", cwd=tmp_path)
    assert_refused(code, err, seconds, "cluster.leaves x servers_per_leaf x gpus_per_server",
                   "268,435,456 GPUs", "GiB")


@pytest.mark.parametrize("argv", [
    ("sweep", "compatible-pair", "--out", "{out}", "--param", "slope=1",
     "--seeds", "0-99999999999"),
    ("demo", "--out", "{out}", "--seeds", "0-99999999999"),
    ("cluster", "rl-train", "--out", "{out}", "--select-sets", "0-99999999999"),
], ids=["sweep", "demo", "rl-train"])
def test_a_huge_seed_range_is_counted_not_expanded(argv: tuple[str, ...],
                                                   tmp_path: Path) -> None:
    code, err, seconds = cli(*(a.replace("{out}", str(tmp_path / "out")) for a in argv),
                             cwd=tmp_path)
    assert_refused(code, err, seconds, "0-99999999999", "100000000000 seeds", "10000")


def test_a_cluster_configs_seed_range_is_counted_not_expanded(tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    path.write_text(SMALL_CLUSTER.replace("seeds = [0]", 'seeds = "0-99999999999"'))
    code, err, seconds = cli("cluster", "run", path, "--out", tmp_path / "out", cwd=tmp_path)
    assert_refused(code, err, seconds, "seeds", "100000000000 seeds")


# --------------------------------------------------------------------------- seed lists


def test_seed_ranges_are_checked_by_their_count_and_bounds() -> None:
    began = time.monotonic()
    for text, says in (("0-99999999999", "over 10000"), ("0-10000", "10001 seeds"),
                       ("0-9999,20000", "10001 seeds"),
                       ("4294967290-4294967296", "4294967296, over 4294967295")):
        with pytest.raises(SpecError, match=says) as refused:
            validate.seeds(text, "--sets")
        assert refused.value.field == "--sets"
    assert time.monotonic() - began < 1
    assert len(validate.seeds("0-9999")) == validate.MAX_SEEDS        # the limit itself
    assert validate.seeds("4294967295") == (validate.MAX_SEED,)
    assert validate.seeds("3,3,1") == (3, 1)
    with pytest.raises(SpecError, match="no non-negative seed"):
        validate.seeds("5-1")


def test_seed_lists_in_files_are_capped_too() -> None:
    many = list(range(validate.MAX_SEEDS + 1))
    with pytest.raises(SpecError, match="over 10000") as refused:
        parse_scenario({**load_scenario("compatible-pair").to_dict(), "seeds": many})
    assert refused.value.field == "seeds"


def test_a_sweep_of_too_many_runs_is_refused_before_its_points() -> None:
    values = ",".join(str(0.001 * i) for i in range(1, 1001))
    began = time.monotonic()
    with pytest.raises(SpecError, match="1000 slope values x 10000 seeds") as refused:
        sweep.make_spec("compatible-pair", [f"slope={values}"], "0-9999")
    assert refused.value.field == "param" and time.monotonic() - began < 5


# --------------------------------------------------------------------------- scenarios


def test_large_but_allowed_scenarios_are_accepted() -> None:
    """compatible-pair at the iteration limit (~2,000 s of 10 ms samples) fits, alone and
    as its whole run set (5 schemes x 5 seeds, the report holding every trace)."""
    long = parse_scenario({**load_scenario("compatible-pair").to_dict(), "jobs": [
        {**j, "iterations": 10_000} for j in load_scenario("compatible-pair").to_dict()["jobs"]]})
    engine = FluidBackend()
    plan = resolve(long, long.schemes[0], 0)
    fp = footprint.check_run(plan, engine.link_sample_s(), True)
    assert 1_500 < fp.duration_s < 3_000 and fp.peak_bytes < validate.MEMORY_BUDGET_BYTES
    check_memory(engine, long, list(long.seeds), dedicated=True)
    assert validate.MEMORY_BUDGET_BYTES == 2 * 2**30


def test_a_run_set_the_report_cannot_hold_is_refused_before_its_plans() -> None:
    long = parse_scenario({**load_scenario("compatible-pair").to_dict(), "jobs": [
        {**j, "iterations": 10_000} for j in load_scenario("compatible-pair").to_dict()["jobs"]]})
    began = time.monotonic()
    with pytest.raises(SpecError, match="runs .*whose traces the report reads") as refused:
        check_memory(FluidBackend(), long, list(range(1000)), dedicated=False)
    assert refused.value.field == "seeds x schemes" and time.monotonic() - began < 5


def test_many_jobs_of_many_iterations_are_refused_on_their_records() -> None:
    data = load_scenario("compatible-pair").to_dict()
    data["topology"]["hosts"] = 1024
    job = {**data["jobs"][0], "compute_ms": 1, "iterations": 10_000, "bytes_per_iteration": 1000}
    data["jobs"] = [{**job, "name": f"j{i}"} for i in range(512)]
    many = parse_scenario(data)
    plan = resolve(many, many.schemes[0], 0)
    with pytest.raises(SpecError, match="5,120,000 iteration records") as refused:
        backends.get("fluid", record_links=False).check(plan)
    assert refused.value.field == "jobs x iterations"


def test_thousands_of_jobs_are_refused_before_their_plans() -> None:
    """A few MB of [[jobs]] tables of 10,000 iterations each: their plans' jitter draws
    alone would be GBs, so the scenario is refused before a plan is made."""
    data = load_scenario("compatible-pair").to_dict()
    data["jobs"] = [{**data["jobs"][0], "name": f"j{i}", "iterations": 10_000}
                    for i in range(2000)]
    many = parse_scenario(data)
    began = time.monotonic()
    with pytest.raises(SpecError, match="2000 jobs of up to 10000 iterations") as refused:
        check_memory(FluidBackend(record_links=False), many, [0], dedicated=False)
    assert refused.value.field == "jobs x iterations" and time.monotonic() - began < 1


def test_a_busy_link_sets_the_bound_when_contention_does() -> None:
    """Compute of 1 ms, yet 64 jobs of 10 MB a iteration share one 1 Gbit/s bottleneck:
    the run lasts at least the bottleneck's bytes, not 10,000 x 1 ms."""
    data = load_scenario("compatible-pair").to_dict()
    data["topology"]["hosts"] = 128
    job = {**data["jobs"][0], "compute_ms": 1, "iterations": 10_000}
    data["jobs"] = [{**job, "name": f"j{i}"} for i in range(64)]
    busy = parse_scenario(data)
    plan = resolve(busy, busy.schemes[0], 0)
    duration, job_plan = footprint.min_duration_s(plan)
    assert job_plan is None and duration > 64 * 10_000 * 10e6 / 125e6
    with pytest.raises(SpecError, match="busiest link") as refused:
        FluidBackend().check(plan)
    assert refused.value.field == "jobs.iterations x jobs.bytes_per_iteration"


def test_runs_that_fit_alone_run_in_chunks_with_the_same_traces(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """With a budget that holds one run but not two, the fluid backend runs the plans
    one chunk at a time: each trace is what one batch of all of them gives."""
    scenario = load_scenario("compatible-pair").with_schemes(["cubic", "mltcp-cubic"])
    plans = plan_runs(scenario, [0], dedicated=False)
    whole = dict(FluidBackend().run(plans))
    peak = max(footprint.of(p, 0.01, True).peak_bytes for p in plans)
    monkeypatch.setattr(validate, "MEMORY_BUDGET_BYTES", int(2.5 * peak))
    costs = [footprint.of(p, 0.01, True).peak_bytes for p in plans]
    assert footprint.chunks(costs) == [[0], [1]]
    for plan in plans:
        FluidBackend().check(plan)
    chunked = dict(FluidBackend().run(plans))
    for i in range(len(plans)):
        assert chunked[i].jobs == whole[i].jobs and chunked[i].links == whole[i].links


def test_a_fluid_run_that_outlasts_its_bound_stops_at_the_budget(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """A fair pair runs ~1.4 times its lower bound: with a budget just over the bound's
    samples the run is admitted, then stopped when its samples reach the budget."""
    scenario = load_scenario("compatible-pair").with_schemes(["cubic"])
    [plan] = plan_runs(scenario, [0], dedicated=False)
    fp = footprint.of(plan, 0.01, True)
    monkeypatch.setattr(validate, "MEMORY_BUDGET_BYTES", int(1.15 * fp.peak_bytes))
    FluidBackend().check(plan)
    with pytest.raises(SpecError, match="link samples") as refused:
        dict(FluidBackend().run([plan]))
    assert refused.value.field == "jobs.iterations"


# --------------------------------------------------------------------------- clusters


def test_large_but_allowed_clusters_are_accepted() -> None:
    big = LeafSpine(64, 1024, 8, gpus_per_server=64)           # 4 million GPUs
    assert big.memory_bytes < validate.MEMORY_BUDGET_BYTES
    cfg = parse_config({**_small(), "jobs": {"poisson": {**_small()["jobs"]["poisson"],
                                                         "n": 100_000}}})
    assert cfg.jobs.n == 100_000


@pytest.mark.parametrize(("fields", "says"), [
    ({"leaves": 4096, "servers_per_leaf": 1024, "spines": 1}, "servers_per_leaf x rails"),
    ({"leaves": 4096, "servers_per_leaf": 1, "spines": 1024}, "cluster.leaves x spines"),
    ({"leaves": 1024, "servers_per_leaf": 1024, "spines": 1, "gpus_per_server": 64},
     "servers_per_leaf x gpus_per_server"),
])
def test_a_fabric_names_the_fields_that_size_it(fields: dict, says: str) -> None:
    with pytest.raises(SpecError, match="of memory") as refused:
        LeafSpine(**fields)
    assert says in refused.value.field


def test_too_many_jobs_are_refused_before_they_are_drawn() -> None:
    data = _small()
    data["jobs"]["poisson"]["n"] = 10**7
    began = time.monotonic()
    with pytest.raises(SpecError, match="10,000,000 jobs x 4 runs") as refused:
        parse_config(data)
    assert refused.value.field.startswith("jobs.poisson.n") and time.monotonic() - began < 5



def test_the_simulator_checks_a_job_list_made_in_code(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """A job list that reaches the simulator without a config (the RL environment, a
    benchmark) is checked there, with the same estimate."""
    fabric = LeafSpine(2, 2, 1, gpus_per_server=4)
    jobs = parse_config(_small()).jobs.requests(0)
    check_requests(fabric, jobs)
    monkeypatch.setattr(validate, "MEMORY_BUDGET_BYTES", fabric.memory_bytes + 1000 * 2048)
    many = [dataclasses.replace(jobs[0], name=f"j{i}") for i in range(1001)]
    with pytest.raises(SpecError, match="1,001 jobs x 1 runs") as refused:
        check_requests(fabric, many)
    assert refused.value.field == "jobs"


def _small() -> dict:
    import tomllib

    return tomllib.loads(SMALL_CLUSTER)
