"""``mltcp cluster run`` and ``mltcp cluster schedulers``: the example config runs end
to end into a directory; bad input is one line on stderr and exit 2, before any run."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from mltcp.cli import build_parser, main
from mltcp.lab.cluster.experiments import config
from tests.interrupt import ctrl_c_when

SMALL = Path(config.examples_dir().joinpath("small.toml"))


def test_the_example_runs_into_a_directory(tmp_path: Path, capsys: pytest.CaptureFixture
                                           ) -> None:
    out = tmp_path / "small"
    assert main(["cluster", "run", "small", "--out", str(out)]) == 0
    stdout, stderr = capsys.readouterr()
    cfg = config.load_config(SMALL)
    runs = len(cfg.schedulers) * len(cfg.networks) * len(cfg.seeds)
    assert f"[{runs}/{runs}] " in stderr                             # progress, per run
    # A line per run; with numba's cache cold (a new installation, as on CI), the
    # engine's compile says so first, two lines of its own (tests/test_fluid_engine.py).
    progress = [line for line in stderr.strip().splitlines()
                if not line.startswith(("compiling the fluid engine", "compiled the fluid engine"))]
    assert len(progress) == runs and all(line.startswith("[") for line in progress), progress
    report = json.loads((out / "report.json").read_text())
    assert report["config"] == cfg.to_dict() and len(report["runs"]) == runs
    assert all(len(r["jobs"]) == cfg.jobs.n for r in report["runs"])
    for c in report["cells"]:
        assert f"| {c['scheduler']} | {c['network']} |" in stdout
    # fifo/random: a row per network, and one for MLTCP over fair
    assert (out / "summary.md").read_text().count("| fifo/random |") == 3
    assert (out / "jct_cdf.png").stat().st_size > 5000
    assert (out / "slowdown_cdf.png").stat().st_size > 5000
    assert (out / "jct_cdf.pdf").is_file() and (out / "slowdown_cdf.pdf").is_file()
    assert len(list(out.glob("jobs.*"))) == 1 and len(list(out.glob("cells.*"))) == 1
    assert f"{runs} runs -> {out / 'report.json'}" in stdout
    manifest = json.loads((out / "runset.json").read_text())
    assert (manifest["kind"], manifest["name"], manifest["backend"]) == ("cluster", "small",
                                                                        "cluster-sim")
    assert set(manifest["schemes"]) == set(cfg.networks)
    assert manifest["invocations"][0]["argv"] == ["mltcp", "cluster", "run", "small",
                                                  "--out", str(out)]
    assert report["runset"] == manifest and report["partial"] is None


def test_a_config_given_by_path_runs_the_same(tmp_path: Path) -> None:
    assert main(["cluster", "run", str(SMALL), "--out", str(tmp_path)]) == 0
    assert json.loads((tmp_path / "report.json").read_text())["config"]["name"] == "small"


@pytest.mark.parametrize(("edit", "field"), [
    (('"fifo/random"', '"fifo/anywhere"'), "schedulers[0]"),
    (('"mltcp"]', '"tcp"]'), "networks[1]"),
    (("n = 12", "n = 0"), "jobs.poisson.n"),
    (("spines = 1", "spines = 1\nracks = 2"), "cluster.racks"),
])
def test_a_bad_config_is_one_line_and_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture,
                                             edit: tuple[str, str], field: str) -> None:
    text = SMALL.read_text()
    assert edit[0] in text
    path = tmp_path / "bad.toml"
    path.write_text(text.replace(*edit, 1))
    assert main(["cluster", "run", str(path), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"mltcp: error: {field}: ") and err.count("\n") == 1
    assert str(path) in err and not (tmp_path / "out").exists()       # nothing ran


@pytest.mark.parametrize("argv", [
    ["--parallel", "0"],
    ["--parallel", "two"],
    ["--parallel", "2", "--dask", "tcp://x:8786"],
])
def test_bad_flags_are_one_line_and_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture,
                                           argv: list[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["cluster", "run", "small", "--out", str(tmp_path / "o"), *argv])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("mltcp: error: argument") and err.count("\n") == 1


def test_an_out_that_cannot_be_a_directory_is_bad_input(tmp_path: Path,
                                                        capsys: pytest.CaptureFixture) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    assert main(["cluster", "run", "small", "--out", str(blocker)]) == 2
    assert "--out" in capsys.readouterr().err


def test_a_missing_config_lists_the_examples(capsys: pytest.CaptureFixture) -> None:
    assert main(["cluster", "run", "no-such-experiment", "--out", "unused"]) == 2
    err = capsys.readouterr().err
    assert "config:" in err and "small" in err and err.count("\n") == 1


def test_schedulers_lists_what_the_registries_know(capsys: pytest.CaptureFixture) -> None:
    from mltcp.lab.cluster.experiments.registry import NAMED, NETWORKS
    from mltcp.lab.cluster.schedulers.orders import ORDERS
    from mltcp.lab.cluster.schedulers.placement import POLICIES

    assert main(["cluster", "schedulers"]) == 0
    text = capsys.readouterr().out
    for name in [*ORDERS, *POLICIES, *NETWORKS, *NAMED, "+preempt", "+backfill"]:
        assert name in text
    assert main(["-j", "cluster", "schedulers"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert listed == {"orders": list(ORDERS), "placements": list(POLICIES),
                      "flags": ["preempt", "backfill"], "named": sorted(NAMED),
                      "networks": list(NETWORKS)}
    assert main(["-j", "cluster", "run", "small", "--out", "unused"]) == 2   # no JSON there


def test_the_subcommands_are_registered() -> None:
    progs = set()
    todo = [build_parser()]
    while todo:
        parser = todo.pop()
        progs.add(parser.prog)
        for action in parser._actions:
            if hasattr(action, "choices") and isinstance(action.choices, dict):
                todo.extend(action.choices.values())
    assert {"mltcp cluster run", "mltcp cluster schedulers"} <= progs


@pytest.mark.parametrize(("argv", "names"), [
    (["--w1", "2"], "--w1"), (["--trace", "busy"], "--trace"),
    (["--timesteps", "3"], "--timesteps"), (["--round-s", "0"], "--round-s")])
def test_rl_train_bad_flags_are_one_line(tmp_path: Path, capsys: pytest.CaptureFixture,
                                         argv: list[str], names: str) -> None:
    pytest.importorskip("sb3_contrib", reason="rl-train needs mltcp[rl] (sb3-contrib)")
    with pytest.raises(SystemExit) as exit_:
        main(["cluster", "rl-train", "--out", str(tmp_path / "o"), *argv])
    assert exit_.value.code == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and names in err
    assert not (tmp_path / "o").exists()            # nothing half done


def test_rl_train_writes_a_policy_and_the_command_that_reproduces_it(
        tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    pytest.importorskip("sb3_contrib", reason="rl-train needs mltcp[rl] (sb3-contrib)")
    import json
    out = tmp_path / "p"
    assert main(["cluster", "rl-train", "--out", str(out), "--name", "tiny", "--jobs", "8",
                 "--duration-s", "300", "--round-s", "30", "--timesteps", "96",
                 "--n-steps", "32"]) == 0
    record = json.loads((out / "tiny.json").read_text())
    assert record["command"].startswith("mltcp cluster rl-train --out ")
    assert "--timesteps 96" in record["command"] and "--round-s 30.0" in record["command"]
    assert (out / "tiny.zip").is_file() and (out / "tiny-curves.png").is_file()
    assert (out / "tiny-curves.pdf").read_bytes()[:5] == b"%PDF-"
    assert not [p for p in out.iterdir() if p.name.startswith(".")]   # no temporaries
    assert "rl-base@" in capsys.readouterr().out


# --------------------------------------------------------------------------- run sets


def test_a_directory_of_another_run_set_is_refused_unless_forced(
        tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    out = tmp_path / "out"
    assert main(["cluster", "run", "small", "--out", str(out)]) == 0
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    first = json.loads(before["runset.json"])
    other = tmp_path / "other.toml"        # the same name, other jobs: another run set
    other.write_text(SMALL.read_text().replace("iterations = [20, 40]", "iterations = [5, 10]"))
    capsys.readouterr()
    assert main(["cluster", "run", str(other), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("mltcp: error: --out: ")
    assert "holds another run set: cluster small" in err and "--force" in err
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before    # untouched, no run

    assert main(["cluster", "run", str(other), "--out", str(out), "--force"]) == 0
    manifest = json.loads((out / "runset.json").read_text())
    assert manifest["digest"] != first["digest"] and len(manifest["invocations"]) == 1
    written = json.loads((out / "report.json").read_text())
    assert written["config"]["jobs"]["poisson"]["iterations"] == [5, 10]

    # the same config again adds an invocation to the same run set, no flag needed
    assert main(["cluster", "run", str(other), "--out", str(out)]) == 0
    again = json.loads((out / "runset.json").read_text())
    assert again["digest"] == manifest["digest"] and len(again["invocations"]) == 2


def test_results_without_a_manifest_are_refused(tmp_path: Path,
                                                capsys: pytest.CaptureFixture) -> None:
    (tmp_path / "report.json").write_text("{}")
    (tmp_path / "notes.txt").write_text("mine")
    assert main(["cluster", "run", "small", "--out", str(tmp_path)]) == 2
    assert "results without a runset.json" in capsys.readouterr().err
    assert main(["cluster", "run", "small", "--out", str(tmp_path), "--force"]) == 0
    assert (tmp_path / "notes.txt").read_text() == "mine"            # not a result


# --------------------------------------------------------------------------- interrupted


def _interrupt_third_run(monkeypatch: pytest.MonkeyPatch, stop: Any) -> None:
    """Make the experiment's third run call ``stop`` (raise or send a signal) first."""
    from mltcp.lab.cluster.experiments import runner

    calls: list[int] = []
    simulate = runner.simulate

    def interrupted(*a: Any, **kw: Any) -> Any:
        calls.append(1)
        if len(calls) == 3:
            stop()
        return simulate(*a, **kw)

    monkeypatch.setattr(runner, "simulate", interrupted)


@pytest.fixture
def signal_handlers() -> Any:
    """The teardown signals' handlers put back after a test that ended the CLI by one
    (the CLI leaves them ignored on its way out: mltcp.core.signals)."""
    import signal

    from mltcp.core import signals

    before = {s: signal.getsignal(s) for s in signals.TEARDOWN_SIGNALS}
    yield
    for s, handler in before.items():
        signal.signal(s, handler)


def test_ctrl_c_writes_a_partial_report_and_exits_130(
        tmp_path: Path, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch,
        signal_handlers: Any) -> None:
    def ctrl_c() -> None:
        raise KeyboardInterrupt

    _interrupt_third_run(monkeypatch, ctrl_c)
    out = tmp_path / "out"
    assert main(["cluster", "run", "small", "--out", str(out)]) == 130
    stdout, stderr = capsys.readouterr()
    assert stderr.splitlines()[-1] == (f"mltcp: interrupted (SIGINT) after 2 of 4 runs: "
                                       f"partial report in {out / 'report.json'}")
    assert "| scheduler |" not in stdout                 # no table of a whole experiment
    report = json.loads((out / "report.json").read_text())
    assert report["partial"] == {"runs_done": 2, "runs_total": 4} and len(report["runs"]) == 2
    assert (out / "summary.md").read_text().startswith("**PARTIAL: interrupted after 2 of 4")
    assert (out / "jct_cdf.png").is_file() and len(list(out.glob("jobs.*"))) == 1


def test_sigterm_unwinds_the_same_way_and_exits_143(
        tmp_path: Path, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch,
        signal_handlers: Any) -> None:
    import os
    import signal

    _interrupt_third_run(monkeypatch, lambda: os.kill(os.getpid(), signal.SIGTERM))
    out = tmp_path / "out"
    assert main(["cluster", "run", "small", "--out", str(out)]) == 143
    assert "interrupted (SIGTERM) after 2 of 4 runs: partial report in" in \
        capsys.readouterr().err
    assert json.loads((out / "report.json").read_text())["partial"]["runs_done"] == 2


def test_interrupted_before_any_run_finished_writes_no_report(
        tmp_path: Path, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch,
        signal_handlers: Any) -> None:
    from mltcp.lab.cluster.experiments import runner

    def ctrl_c(*a: Any, **kw: Any) -> Any:
        raise KeyboardInterrupt

    monkeypatch.setattr(runner, "simulate", ctrl_c)
    assert main(["cluster", "run", "small", "--out", str(tmp_path)]) == 130
    assert "after 0 of 4 runs: no report written" in capsys.readouterr().err
    assert not (tmp_path / "report.json").exists()


LONG_TRACE = ("name,arrival_s,model,compute_s,gradient_bytes,gpus,iterations\n"
              "j0,0,,0.2,100MB,6,1000000000\nj1,0,,0.2,100MB,6,1000000000\n")
LONG_CONFIG = """name = "long"
schedulers = ["fifo/random"]
networks = ["{network}"]
seeds = [0]
f_steps = {f_steps}

[cluster]
leaves = 2
servers_per_leaf = 2
spines = 1
gpus_per_server = 4
server_gbit = 10
oversubscription = 2

[jobs]
trace = "jobs.csv"
"""


@pytest.mark.parametrize("network, f_steps", [("fair", 8), ("mltcp", 1_000_000)])
def test_ctrl_c_stops_a_run_of_hours_within_a_second(tmp_path: Path, network: str,
                                                     f_steps: int) -> None:
    # Two jobs of 10^9 iterations (and, with MLTCP, F in a million steps: an event at
    # every step): the run takes hours, says so while it runs (simulated time against
    # the least it can take, iterations, an ETA), and Ctrl-C ends it at once, the
    # compiled engine returning to Python every ~0.1 s (5 s allowed: a busy machine).
    (tmp_path / "jobs.csv").write_text(LONG_TRACE)
    (tmp_path / "long.toml").write_text(LONG_CONFIG.format(network=network, f_steps=f_steps))
    got = ctrl_c_when(["cluster", "run", "long.toml", "--out", "out"], tmp_path,
                      "running, simulated")
    progress = next(line for line in got.stderr.splitlines() if "running" in line)
    assert progress.startswith(f"[1/1] fifo/random x {network}, seed 0: running, simulated ")
    assert "(at least 2e+08 s in all)" in progress and "of 2000000000 iterations" in progress
    assert " %), ETA " in progress
    assert got.returncode == 130, got.stderr
    assert got.latency_s < 5, got.latency_s
    assert got.stderr.splitlines()[-1] == ("mltcp: interrupted (SIGINT) after 0 of 1 runs: "
                                           "no report written")
