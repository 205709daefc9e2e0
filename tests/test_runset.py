"""Run sets: one output directory holds one run set (issue 22); the shared pieces
(atomic writes, bootstrap intervals) that make its files trustworthy."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

from mltcp.cli import EXIT_BAD_INPUT, main
from mltcp.core.errors import SpecError
from mltcp.lab.common import atomic, runset, stats


def _fluid_run(out, scenario: str = "compatible-pair", *flags: str) -> int:
    return main(["run", scenario, "--backend", "fluid", "--scheme", "cubic", "--out", str(out),
                 *flags])


def test_a_second_scenario_into_the_same_directory_is_refused(tmp_path, capsys) -> None:
    """Issue 22's reproduction: the second report was titled after the first scenario
    and counted both scenarios' runs as one cubic row."""
    out = tmp_path / "o"
    assert _fluid_run(out, "compatible-pair", "--seed", "0") == 0
    before = sorted(p.name for p in (out / "traces").iterdir())
    report = (out / "report.json").read_bytes()
    capsys.readouterr()
    assert _fluid_run(out, "incompatible-pair", "--seed", "1") == EXIT_BAD_INPUT
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert "--out" in err and "holds another run set: scenario compatible-pair" in err
    assert "not scenario incompatible-pair" in err and "--force" in err
    # nothing half done: the first run set is as it was
    assert sorted(p.name for p in (out / "traces").iterdir()) == before
    assert (out / "report.json").read_bytes() == report


def test_more_runs_of_the_same_run_set_are_added(tmp_path) -> None:
    out = tmp_path / "o"
    assert _fluid_run(out, "compatible-pair", "--seed", "0") == 0
    assert main(["run", "compatible-pair", "--backend", "fluid", "--scheme", "mltcp-cubic",
                 "--seed", "1", "--out", str(out)]) == 0
    recorded = runset.read(out)
    assert recorded.seeds == (0, 1) and set(recorded.schemes) == {"cubic", "mltcp-cubic"}
    assert recorded.schemes["mltcp-cubic"]["f"]["slope"] == 4.0
    assert len(recorded.invocations) == 2 and "--seed" in recorded.invocations[1]["argv"]
    report = json.loads((out / "report.json").read_text())
    assert set(report["schemes"]) == {"cubic", "mltcp-cubic"}
    assert report["runset"]["digest"] == recorded.digest


def test_another_backend_is_another_run_set(tmp_path, capsys) -> None:
    out = tmp_path / "o"
    assert _fluid_run(out, "compatible-pair", "--seed", "0") == 0
    assert main(["run", "compatible-pair", "--backend", "dcqcn", "--scheme", "cubic",
                 "--seed", "0", "--out", str(out)]) == EXIT_BAD_INPUT
    assert "backend fluid), not scenario compatible-pair" in capsys.readouterr().err


def test_force_replaces_the_other_run_set_and_keeps_other_files(tmp_path) -> None:
    out = tmp_path / "o"
    assert _fluid_run(out, "compatible-pair", "--seed", "0") == 0
    (out / "notes.txt").write_text("mine")
    assert _fluid_run(out, "incompatible-pair", "--seed", "1", "--force") == 0
    assert [p.name for p in (out / "traces").iterdir()] == ["cubic-seed1.json"]
    assert runset.read(out).name == "incompatible-pair"
    assert json.loads((out / "report.json").read_text())["scenario"] == "incompatible-pair"
    assert (out / "notes.txt").read_text() == "mine"


def test_results_without_a_manifest_are_refused(tmp_path) -> None:
    (tmp_path / "traces").mkdir()
    (tmp_path / "traces" / "cubic-seed0.json").write_text("{}")
    rs = runset.new("scenario", "x", {"a": 1}, "fluid")
    with pytest.raises(SpecError, match=r"^--out: .* holds another run set: results "
                                        r"without a runset\.json"):
        runset.claim(tmp_path, rs)
    runset.claim(tmp_path, rs, force=True)
    assert not (tmp_path / "traces").exists() and runset.read(tmp_path).name == "x"


def test_a_damaged_manifest_is_one_line_and_force_clears_it(tmp_path) -> None:
    (tmp_path / runset.MANIFEST).write_text('{"schema": "mltcp.runset/1", "kind"')
    rs = runset.new("sweep", "x", {"a": 1}, "fluid")
    with pytest.raises(SpecError, match=r"runset\.json: cannot be read"):
        runset.claim(tmp_path, rs)
    assert runset.claim(tmp_path, rs, force=True).kind == "sweep"


def test_an_empty_or_unrelated_directory_is_claimed(tmp_path) -> None:
    (tmp_path / "README").write_text("x")
    rs = runset.new("cluster", "small", {"b": 2}, "cluster-sim", seeds=[3, 1])
    assert runset.claim(tmp_path, rs).seeds == (1, 3)
    assert runset.digest({"b": 2, "c": [1]}) == runset.digest({"c": [1], "b": 2})
    assert runset.digest({"b": 2}) != runset.digest({"b": 3})


def test_the_sweep_claims_its_directory_too(tmp_path, capsys) -> None:
    out = tmp_path / "o"
    assert _fluid_run(out, "compatible-pair", "--seed", "0") == 0
    capsys.readouterr()
    assert main(["sweep", "compatible-pair", "--param", "slope=1", "--parallel", "1",
                 "--out", str(out)]) == EXIT_BAD_INPUT
    assert "not sweep compatible-pair" in capsys.readouterr().err


# --------------------------------------------------------------------------- atomic


def test_an_atomic_write_is_whole_or_absent(tmp_path) -> None:
    path = tmp_path / "r.json"
    atomic.write_json(path, {"a": 1})
    with pytest.raises(RuntimeError), atomic.replacing(path) as tmp:
        tmp.write_text('{"a": 2, "b"')
        raise RuntimeError("killed half way")
    assert json.loads(path.read_text()) == {"a": 1}
    assert os.listdir(tmp_path) == ["r.json"]                # no temporary left behind
    with pytest.raises(ValueError):
        atomic.write_json(path, {"a": float("nan")})         # strict JSON, as every reader
    assert json.loads(path.read_text()) == {"a": 1}


# --------------------------------------------------------------------------- stats


def test_bootstrap_interval_is_seeded_and_covers_the_mean() -> None:
    rng = np.random.default_rng(1)
    values = rng.normal(10, 2, size=30)
    a, b = stats.bootstrap(values), stats.bootstrap(values)
    assert a == b and a.n == 30 and a.lo < a.mean < a.hi
    # the percentile interval of a mean is about +- 1.96 standard errors
    se = values.std(ddof=1) / np.sqrt(values.size)
    assert a.hi - a.lo == pytest.approx(2 * 1.96 * se, rel=0.15)
    assert stats.bootstrap([None, 1.0]).text() == "1 (N=1)"
    assert stats.bootstrap([]).to_dict()["mean"] is None


def test_bootstrap_ratio_resamples_pairs() -> None:
    spread = stats.bootstrap_ratio([2.0, 4.0, 6.0], [1.0, 2.0, 3.0])
    assert (spread.mean, spread.lo, spread.hi) == (2.0, 2.0, 2.0)   # paired: exactly 2
    unpaired = stats.bootstrap_ratio([2.0, 4.0, 6.0], [3.0, 2.0, 1.0])
    assert unpaired.lo < 2.0 < unpaired.hi
    with pytest.raises(ValueError):
        stats.bootstrap_ratio([1.0], [1.0, 2.0])
