"""Sweeps: grid parsing and validation, grid points as scenarios, and real runs on a pool
of local worker processes and on a Dask cluster (in this process, reached at its
address, as ``--dask ADDR`` would) whose rows equal those computed in this process."""

from __future__ import annotations

import json

import pytest

from mltcp.core.errors import SpecError
from mltcp.lab.scenario import sweep


def test_parse_grid_and_seeds() -> None:
    grid = sweep.parse_grid(["slope=0.5,1,2", "jobs=2,3"])
    assert grid == {"slope": (0.5, 1.0, 2.0), "jobs": (2, 3)}
    assert all(isinstance(v, int) for v in grid["jobs"])
    assert sweep.parse_seeds("0-3") == (0, 1, 2, 3)
    assert sweep.parse_seeds("5,1,5") == (5, 1)


@pytest.mark.parametrize(("items", "field"), [
    (["slop=1"], "param"),
    (["slope"], "param"),
    (["slope=1,x"], "param.slope"),
    (["jobs=1.5"], "param.jobs"),
    (["slope=1", "slope=2"], "param.slope"),
    ([], "param"),
])
def test_bad_grid_names_the_field(items: list[str], field: str) -> None:
    with pytest.raises(SpecError) as err:
        sweep.parse_grid(items)
    assert err.value.field == field


def test_bad_values_fail_before_any_run() -> None:
    with pytest.raises(SpecError, match="slope"):
        sweep.make_spec("compatible-pair", ["slope=1,1000"])
    with pytest.raises(SpecError, match="load"):
        sweep.make_spec("compatible-pair", ["load=-1,1"])
    with pytest.raises(SpecError, match="seeds"):
        sweep.make_spec("compatible-pair", ["slope=1"], seeds="a-b")


def test_points_become_scenarios() -> None:
    spec = sweep.make_spec("compatible-pair", ["slope=0,2", "load=0.5", "jobs=3"])
    assert len(spec.points()) == 2
    sc, scheme = sweep.variant(spec, {"slope": 2.0, "load": 0.5, "jobs": 3})
    assert scheme.mltcp and scheme.slope == 2.0
    assert [j.name for j in sc.jobs] == ["j1", "j2", "j3"]
    base = spec.scenario.jobs[0]
    assert all(j.bytes_per_worker == base.bytes_per_worker // 2 for j in sc.jobs)
    assert sc.topology.hosts >= 6          # every copy gets its own hosts


def test_rows_separate_fair_from_mltcp() -> None:
    spec = sweep.make_spec("compatible-pair", ["slope=0,4"], seeds="0-1")
    rows = [r for c in sweep.chunks(spec) for r in sweep.run_chunk(spec, c)]
    assert [(r["slope"], r["seed"]) for r in rows] == [(0.0, 0), (0.0, 1), (4.0, 0), (4.0, 1)]
    fair, mltcp = rows[:2], rows[2:]
    assert all(not r["converged"] and r["ratio_to_dedicated"] > 1.3 for r in fair)
    assert all(r["converged"] and r["ratio_to_dedicated"] < 1.1 for r in mltcp)
    assert all(r["convergence_iteration"] < 20 for r in mltcp)


def test_a_parallel_sweep_writes_table_summary_and_plots(tmp_path) -> None:
    pd = pytest.importorskip("pandas", reason="the sweep extra (pandas) is not installed")
    spec = sweep.make_spec("compatible-pair", ["slope=0,1,4", "intercept=1,2"], seeds="0-1")
    seen = []
    rows = sweep.execute(spec, parallel=2, chunk_size=3,
                         progress=lambda done, total, _t: seen.append((done, total)))
    assert seen[0] == (0, 4) and seen[-1] == (4, 4)       # 12 runs in chunks of 3
    local = [r for c in sweep.chunks(spec, 100) for r in sweep.run_chunk(spec, c)]
    assert rows == local               # same numbers, same (grid) order
    path = sweep.write(spec, rows, tmp_path, "parquet")
    table = pd.read_parquet(path)
    assert len(table) == 12 and {"slope", "intercept", "seed", "convergence_iteration",
                                 "ratio_to_dedicated"} <= set(table.columns)
    summary = json.loads((tmp_path / "sweep.json").read_text())
    assert summary["schema"] == "mltcp.sweep/2" and len(summary["points"]) == 6
    assert summary["provenance"]["backend"] == "fluid"
    for point in summary["points"]:
        assert point["n"] == 2 and point["convergence_over"].endswith("of 2 converged")
        for column, _ in sweep.AGGREGATED:
            lo, mean, hi = (point[f"{column}_ci_lo"], point[column], point[f"{column}_ci_hi"])
            assert mean is None or lo is None or lo <= mean <= hi
    for name in ("convergence", "ratio", "converged", "interleaved"):
        for suffix in ("png", "pdf"):
            assert (tmp_path / f"{name}.{suffix}").stat().st_size > 1000
    csv = sweep.write(spec, rows, tmp_path / "csv", "csv")
    assert len(pd.read_csv(csv)) == 12


def test_chunks_follow_what_a_chunk_costs_on_the_backend() -> None:
    """Fluid (a chunk costs about its runs one after the other): two chunks per worker.
    DCQCN (its lanes are one vector: a chunk costs about one run, 4 runs took 44 s in one
    chunk and 88 s in two): one chunk per structure, however many workers there are."""
    from mltcp.lab.scenario.backends.dcqcn import DcqcnBackend
    from mltcp.lab.scenario.backends.fluid import FluidBackend

    assert DcqcnBackend.capabilities.vector_lanes and not FluidBackend.capabilities.vector_lanes
    spec = sweep.make_spec("compatible-pair", ["slope=0,1,4", "jobs=2,3"], seeds="0-3")
    per_structure = 3 * 4                          # slopes x seeds of one job count
    for slots, expected in ((1, 2), (2, 4), (4, 8)):
        parts = sweep._chunk_parts(spec, None, False, slots)
        assert len(parts) == expected and sum(map(len, parts)) == 2 * per_structure
    whole = sweep._chunk_parts(spec, None, True, 4)
    assert sorted(map(len, whole)) == [per_structure, per_structure]   # jobs=2, jobs=3
    assert len(sweep._chunk_parts(spec, 5, True, 4)) == 6              # as asked


def test_one_chunk_runs_here_without_a_pool(monkeypatch) -> None:
    """A vector-lane backend's sweep of one structure is one chunk: --parallel 2 runs it
    in this process (a pool would only add its start), with the backend's progress lines
    under the sweep's; the rows are those of chunks of any size."""
    import dataclasses

    from mltcp.lab.common import parallel
    from mltcp.lab.scenario.backends.fluid import FluidBackend

    monkeypatch.setattr(FluidBackend, "capabilities",
                        dataclasses.replace(FluidBackend.capabilities, vector_lanes=True))

    def no_pool(*_a, **_k):  # type: ignore[no-untyped-def]
        raise AssertionError("a pool was started for one chunk")

    monkeypatch.setattr(parallel, "fan_out", no_pool)
    spec = sweep.make_spec("compatible-pair", ["slope=0,4"], seeds="0-1")
    seen = []
    rows = sweep.execute(spec, parallel=2,
                         progress=lambda done, total, _t: seen.append((done, total)))
    assert seen == [(0, 1), (1, 1)]
    assert rows == [r for c in sweep.chunks(spec, 1) for r in sweep.run_chunk(spec, c)]


def test_progress_inside_a_chunk_is_throttled(monkeypatch, capsys) -> None:
    """A chunk's lines go through the runner's live line: off a terminal, one a 10 s."""
    from mltcp.lab.scenario import runner

    monkeypatch.setattr(runner, "_last_line", [0.0])
    for k in range(5):
        runner.live_progress(f"line {k}")
    assert capsys.readouterr().err.splitlines() == ["line 0"]


def test_a_sweep_without_its_table_writer_is_refused_before_it_runs(monkeypatch) -> None:
    """A sweep needs no Dask on this host's cores, but it writes its table with pandas
    (and pyarrow for Parquet): missing, one line before any run says how to get them."""
    import importlib.util

    from mltcp.core.errors import CapabilityError

    found = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "pyarrow" else found(name, *a))
    sweep.require("csv")
    with pytest.raises(CapabilityError, match=r"with pyarrow, not installed: pip install "
                                              r"'mltcp\[sweep\]'"):
        sweep.require("parquet")


def test_a_sweep_on_a_dask_cluster_gives_the_same_rows() -> None:
    """``--dask ADDR``: the chunks go to the Dask cluster at that address (here one in
    this process, with a single-threaded worker), the spec sent once; same rows."""
    distributed = pytest.importorskip("distributed",
                                      reason="the sweep extra (dask) is not installed")
    spec = sweep.make_spec("compatible-pair", ["slope=0,4"], seeds="0-1")
    with distributed.LocalCluster(n_workers=1, threads_per_worker=2, processes=False,
                                  dashboard_address=None) as cluster:
        seen = []
        rows = sweep.execute(spec, dask_address=cluster.scheduler_address,
                             progress=lambda done, total, _t: seen.append((done, total)))
    assert seen[-1][0] == seen[-1][1] == 4                # two chunks per worker thread
    assert rows == sweep.execute(spec, parallel=1, progress=None)


@pytest.mark.parametrize(("params", "field"), [
    (["compute_ms=nan"], "param.compute_ms"),
    (["load=inf"], "param.load"),
    (["intercept=0"], "param.intercept"),
    (["slope=1", "cap=0.5"], "schemes[0].cap"),              # cap below the intercept of 1
    (["compute_ms=40"], "jobs[0].compute_ms"),               # model-parallel jobs have phases
])
def test_every_point_is_validated_as_a_scenario_before_any_run(params: list[str],
                                                               field: str) -> None:
    scenario = "model-parallel" if field.startswith("jobs") else "compatible-pair"
    with pytest.raises(SpecError) as err:
        sweep.make_spec(scenario, params)
    assert err.value.field == field and "\n" not in str(err.value)
    if not field.startswith("param"):
        assert "sweep point" in err.value.problem      # which point of the grid


def test_a_sweep_refuses_the_backend_that_drives_this_hosts_kernel() -> None:
    with pytest.raises(SpecError, match="^backend: .*one run at a time"):
        sweep.make_spec("compatible-pair", ["slope=1"], backend="netns")


def test_mltcp_parameters_over_a_standard_scheme_are_refused() -> None:
    """Issue 22's reproduction: `--scheme cubic --param slope=1,2` ran MLTCP and recorded
    cubic.  F's parameters now only vary an MLTCP scheme; other axes run the standard
    scheme as named."""
    with pytest.raises(SpecError, match=r"^--scheme: 'cubic' is a standard scheme .*"
                                        r"drop --param slope"):
        sweep.make_spec("compatible-pair", ["slope=1,2"], scheme="cubic")
    spec = sweep.make_spec("compatible-pair", ["load=1"], scheme="cubic")
    [chunk] = sweep.chunks(spec)
    [row] = sweep.run_chunk(spec, chunk)
    assert (row["scheme"], row["congestion_control"]) == ("cubic", "cubic")
    assert not row["converged"]                     # standard cubic stays in lock-step


def test_rows_record_the_scheme_as_run() -> None:
    spec = sweep.make_spec("compatible-pair", ["slope=2"])
    [row] = sweep.run_chunk(spec, sweep.chunks(spec)[0])
    assert (row["scheme"], row["congestion_control"]) == ("mltcp-cubic", "mltcp_cubic")
    assert row["first_interleaved_iteration"] is not None


def test_aggregate_says_how_many_converged_beside_the_convergence_iteration() -> None:
    rows = [{"slope": 1.0, "seed": s, "convergence_iteration": c, "converged": c is not None,
             "first_interleaved_iteration": c, "ratio_to_dedicated": 1.0 + s / 10,
             "mean_iteration_s": 0.2, "overlap_last5": 0.0}
            for s, c in enumerate((4, None, 6, None))]
    [point] = sweep.aggregate(rows, ["slope"])
    assert point["n"] == 4 and point["converged"] == 0.5
    assert point["converged_runs"] == 2 and point["convergence_mean"] == 5.0
    assert point["convergence_over"] == "2 of 4 converged"
    assert point["ratio_to_dedicated_ci_lo"] < point["ratio_to_dedicated"] \
        < point["ratio_to_dedicated_ci_hi"]
