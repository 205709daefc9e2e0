"""Bad input of the cluster simulator, second round (issue 25): the CSV trace's
encodings and edge cases, paths that are not files, errors named by the user's field
rather than a generated job, one scheduler under two spellings, output paths that
--force must not delete, rl-train's flags, and Ctrl-C while local worker processes start.

Each test exercises the validator that owns the check; the CLI's answers (one line,
exit 2) are rows of tests/test_bad_input.py."""

from __future__ import annotations

import os
import signal
import threading
from pathlib import Path
from typing import Any

import pytest

from mltcp.cli import main
from mltcp.core.errors import SpecError
from mltcp.lab.cluster.arrivals.job_traces import decode, parse_csv, read_csv
from mltcp.lab.cluster.experiments import config, report
from mltcp.lab.cluster.experiments import runner as experiment
from mltcp.lab.cluster.experiments.registry import parse_scheduler
from mltcp.lab.common import inputfile, outdir, parallel, runset, tomlfile
from tests.interrupt import ctrl_c_when

HEADER = "name,arrival_s,model,compute_s,gradient_bytes,gpus,iterations"
ROW = "j0,0,resnet50,,,4,20"
CLUSTER = "[cluster]\nleaves = 1\nservers_per_leaf = 2\nspines = 1\ngpus_per_server = 4\n"


def _config(tmp_path: Path, jobs: str = '[jobs]\ntrace = "jobs.csv"\n',
            schedulers: str = '["fifo/first_fit"]', extra: str = "",
            cluster: str = CLUSTER) -> Path:
    path = tmp_path / "c.toml"
    path.write_text(f'name = "t"\nschedulers = {schedulers}\n{extra}\n{cluster}\n{jobs}')
    return path


def _refused(fn: Any, *args: Any, **kw: Any) -> SpecError:
    with pytest.raises(SpecError) as err:
        fn(*args, **kw)
    return err.value


# --------------------------------------------------------------------------- the CSV


def test_latin1_bytes_name_the_line_and_the_byte() -> None:
    err = _refused(decode, f"{HEADER}\nj\xe9,0,resnet50,,,4,20\n".encode("latin-1"), "t.csv")
    assert err.field == "t.csv:2" and "0xe9" in err.problem and "UTF-8" in err.fix


def test_a_byte_order_mark_is_dropped() -> None:
    text = decode(f"\ufeff{HEADER}\n{ROW}\n".encode(), "t.csv")
    assert [j.name for j in parse_csv(text)] == ["j0"]


def test_a_header_without_rows_is_refused() -> None:
    err = _refused(parse_csv, f"# a trace\n{HEADER}\n\n", "t.csv")
    assert err.field == "t.csv" and "no rows" in err.problem


@pytest.mark.parametrize(("sep", "name"), [(";", "semicolons"), ("\t", "tabs"), ("|", "'|'")])
def test_another_separator_is_named(sep: str, name: str) -> None:
    text = f"{HEADER.replace(',', sep)}\n{ROW.replace(',', sep)}\n"
    err = _refused(parse_csv, text, "t.csv")
    assert err.field == "t.csv:1" and f"separated by {name}" in err.problem


def test_a_quoted_cell_across_lines_is_named_as_such() -> None:
    err = _refused(parse_csv, f'{HEADER}\n"j\n0",0,resnet50,,,4,20\n', "t.csv")
    assert err.field == "t.csv:2 (row 1)" and "quoted cell" in err.problem


def test_a_nul_byte_is_not_valid_csv() -> None:
    err = _refused(parse_csv, f"{HEADER}\nj\x000,0,resnet50,,,4,20\n", "t.csv")
    assert err.field == "t.csv:2 (row 1)" and "NUL byte" in err.problem


def test_text_after_a_closing_quote_is_not_valid_csv() -> None:
    err = _refused(parse_csv, f'{HEADER}\n"j"0,0,resnet50,,,4,20\n', "t.csv")
    assert err.field == "t.csv:2 (row 1)" and "not valid CSV" in err.problem


@pytest.mark.parametrize("cell", ["100TB", "10001GB", "1e14", "2e13"])
def test_both_forms_of_gradient_bytes_share_the_cap(cell: str) -> None:
    err = _refused(parse_csv, f"{HEADER}\nj0,0,,0.2,{cell},8,20\n", "t.csv")
    assert err.field == "t.csv:2 (row 1) column gradient_bytes" and "1e13" in err.fix


def test_byte_counts_up_to_the_cap_still_read() -> None:
    jobs = parse_csv(f"{HEADER}\nj0,0,,0.2,4.2e8,8,20\nj1,0,,0.2,10000GB,8,20\n"
                     "j2,0,,0.2,123.5,8,20\n")           # a float, as format_csv writes it
    assert [j.gradient_bytes for j in jobs] == [4.2e8, 1e13, 123.5]


def test_a_job_of_no_time_is_refused() -> None:
    err = _refused(parse_csv, f"{HEADER}\nj0,0,,0,0,4,20\n", "t.csv")
    assert err.field == "t.csv:2 (row 1) column compute_s" and "no time" in err.problem
    assert parse_csv(f"{HEADER}\nj0,0,,0,1MB,4,20\n")[0].compute_s == 0   # comm only


def test_gpus_beyond_the_cluster_name_the_line() -> None:
    err = _refused(parse_csv, f"{HEADER}\n{ROW}\nj1,1,resnet50,,,9,20\n", "t.csv", 8)
    assert err.field == "t.csv:3 (row 2) column gpus" and "cluster's 8" in err.problem


def test_the_row_count_is_checked_before_any_row_is_parsed() -> None:
    counted: list[int] = []

    def check(rows: int) -> None:
        counted.append(rows)
        raise SpecError("jobs.trace", f"{rows} rows", "fewer")

    # row 2 is bad: the count must refuse first
    text = f"{HEADER}\n{ROW}\nj1,x,resnet50,,,4,20\n# note\nj2,1,resnet50,,,4,20\n"
    assert _refused(parse_csv, text, "t.csv", 8, check).problem == "3 rows"
    assert counted == [3]


def test_a_trace_too_large_to_read_is_refused_before_reading(tmp_path: Path,
                                                           monkeypatch) -> None:
    path = tmp_path / "jobs.csv"
    path.write_text(f"{HEADER}\n{ROW}\n")
    monkeypatch.setattr("mltcp.core.validate.MEMORY_BUDGET_BYTES", 10)
    monkeypatch.setattr(inputfile, "read_bytes", lambda *a: pytest.fail("read"))
    assert "of memory" in _refused(read_csv, path, field="jobs.trace").problem


# --------------------------------------------------------------------------- file kinds


def test_each_kind_of_path_is_named(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "file").write_text("x")
    cases = {tmp_path: "a directory", tmp_path / "fifo": "a FIFO",
             Path("/dev/null"): "a character device", tmp_path / "nosuch": "no such file",
             tmp_path / "file" / "x": "a part of the path is a file"}
    for path, says in cases.items():
        assert says in _refused(inputfile.regular_file, path, "f", "a CSV", "fix").problem
    assert inputfile.regular_file(tmp_path / "file", "f", "a CSV", "fix") == tmp_path / "file"
    assert _refused(inputfile.path_text, "  ", "jobs.trace", "fix").problem == "is empty"


def test_an_unreadable_file_says_so(tmp_path: Path, monkeypatch) -> None:
    (tmp_path / "p").write_text("x")
    monkeypatch.setattr(os, "access", lambda *a: False)
    err = _refused(inputfile.regular_file, tmp_path / "p", "f", "a policy file", "fix")
    assert "cannot read" in err.problem and "permission denied" in err.problem


@pytest.mark.parametrize(("trace", "says"), [('""', "is empty"), ('"."', "a directory"),
                                             ('"/dev/null"', "a character device"),
                                             ('"fifo.csv"', "a FIFO")])
def test_a_trace_that_is_not_a_file_is_named(tmp_path: Path, trace: str, says: str) -> None:
    os.mkfifo(tmp_path / "fifo.csv")
    err = _refused(config.load_config, _config(tmp_path, f"[jobs]\ntrace = {trace}\n"))
    assert err.field == "jobs.trace" and says in err.problem


def test_a_toml_byte_order_mark_is_dropped(tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    path.write_bytes(b'\xef\xbb\xbfname = "t"\n')
    assert tomlfile.read_toml(path, "config", []) == {"name": "t"}


def test_a_trace_of_too_many_rows_is_refused_by_count(tmp_path: Path, monkeypatch) -> None:
    (tmp_path / "jobs.csv").write_text(HEADER + "\n" + "\n".join(
        f"j{i},{i},resnet50,,,4,10" for i in range(200)) + "\n")
    monkeypatch.setattr("mltcp.lab.cluster.arrivals.job_traces._row",
                        lambda *a: pytest.fail("a row was parsed"))
    err = _refused(config.load_config, _config(tmp_path, extra='seeds = "0-9999"'))
    assert err.field.startswith("jobs.trace x seeds") and "200 jobs" in err.problem


# --------------------------------------------------------------------------- user's fields


def test_a_setup_on_a_smaller_cluster_is_named_by_the_setup(tmp_path: Path) -> None:
    cfg = config.load_config(_config(
        tmp_path, '[jobs]\nsetup = { name = "deepshare-normal", first = 4 }\n',
        '["deepshare-las"]'))
    err = _refused(experiment.job_lists, cfg)
    assert err.field == "jobs.setup" and "more than the cluster's 8" in err.problem
    assert "drop [cluster]" in err.fix


def test_a_rate_that_spreads_jobs_past_1e9_s_is_refused_by_the_rate(tmp_path: Path) -> None:
    poisson = ('[jobs.poisson]\nn = 4\njobs_per_hour = 1e-9\nmodels = { "resnet50" = 1 }\n'
               'gpus = [4]\niterations = [10, 20]\n')
    err = _refused(config.load_config, _config(tmp_path, poisson))
    assert err.field == "jobs.poisson.jobs_per_hour" and "past the 1e+09 s" in err.problem
    err = _refused(config.load_config, _config(tmp_path, poisson.replace(
        "jobs_per_hour = 1e-9", "load = 1e-9")))
    assert err.field == "jobs.poisson.load" and "a load of at least" in err.fix


def test_an_unlucky_draw_past_1e9_s_names_the_rate(monkeypatch) -> None:
    from mltcp.lab.cluster.arrivals import job_traces

    def far(*a: Any) -> list:
        raise SpecError("jobs[j1-resnet50].arrival_s", "must be <= 1e9 (got 2e9)", "x")

    monkeypatch.setattr(job_traces, "poisson_trace", far)
    jobs = config.PoissonJobs(2, 1.0, None, load=0.5)   # type: ignore[arg-type]
    err = _refused(jobs.requests, 3)
    assert err.field == "jobs.poisson.load" and "seed 3" in err.problem


# --------------------------------------------------------------------------- schedulers


def _fabric() -> Any:
    from mltcp.lab.cluster.engine.leafspine import LeafSpine

    return LeafSpine(leaves=1, servers_per_leaf=2, spines=1, gpus_per_server=4)


@pytest.mark.parametrize("spec", ["fifo/first_fit+preempt+preempt",
                                  "fifo/first_fit+backfill+preempt+backfill"])
def test_a_flag_given_twice_is_refused(spec: str) -> None:
    assert "given twice" in _refused(parse_scheduler, spec, _fabric()).problem


def test_flag_order_is_one_scheduler() -> None:
    a = parse_scheduler("fifo/first_fit+backfill+preempt", _fabric())
    b = parse_scheduler("fifo/first_fit+preempt+backfill", _fabric())
    assert a.identity == b.identity != parse_scheduler("fifo/first_fit", _fabric()).identity


def test_two_spellings_of_one_scheduler_are_refused(tmp_path: Path) -> None:
    (tmp_path / "jobs.csv").write_text(f"{HEADER}\n{ROW}\n")
    err = _refused(config.load_config, _config(
        tmp_path, schedulers='["fifo/first_fit", "fifo/first_fit+backfill+preempt", '
                             '"fifo/first_fit+preempt+backfill"]'))
    assert err.field == "schedulers[2]" and "schedulers[1]" in err.problem


def test_fair_alone_gets_the_right_advice() -> None:
    alone = {"vs_fair": [], "config": {"networks": ["fair"]}}
    assert '"mltcp"' in report.vs_fair_table(alone) and '"fair" to' not in \
        report.vs_fair_table(alone)
    assert '"fair" to' in report.vs_fair_table({"vs_fair": [],
                                                "config": {"networks": ["mltcp"]}})


# --------------------------------------------------------------------------- outputs


@pytest.mark.parametrize("force", [False, True])
def test_a_directory_with_a_results_name_is_never_deleted(tmp_path: Path, force: bool) -> None:
    (tmp_path / "report.json").mkdir()
    (tmp_path / "report.json" / "mine").write_text("precious")
    rs = runset.new("cluster", "t", {}, "cluster-sim")
    err = _refused(runset.claim, tmp_path, rs, force)
    assert err.field == "--out" and "is a directory" in err.problem
    assert (tmp_path / "report.json" / "mine").read_text() == "precious"


def test_a_symlink_with_a_results_name_is_refused(tmp_path: Path) -> None:
    (tmp_path / "keep").mkdir()
    out = tmp_path / "out"
    out.mkdir()
    (out / "summary.md").symlink_to(tmp_path / "keep")
    err = _refused(runset.claim, out, runset.new("cluster", "t", {}, "cluster-sim"), True)
    assert "symbolic link" in err.problem and (tmp_path / "keep").is_dir()


def test_force_still_removes_the_labs_own_results(tmp_path: Path) -> None:
    (tmp_path / "report.json").write_text("{}")
    (tmp_path / "traces").mkdir()
    (tmp_path / "notes.txt").write_text("mine")
    runset.claim(tmp_path, runset.new("cluster", "t", {}, "cluster-sim"), True)
    assert not (tmp_path / "report.json").exists() and not (tmp_path / "traces").exists()
    assert (tmp_path / "notes.txt").read_text() == "mine"


def test_an_empty_out_is_named() -> None:
    assert _refused(outdir.make_out_dir, "").problem == "is empty"


# --------------------------------------------------------------------------- rl-train flags


RL = ["cluster", "rl-train", "--timesteps", "64", "--jobs", "2", "--n-steps", "16",
      "--duration-s", "10"]


@pytest.mark.parametrize(("argv", "flag"), [
    (["--name", ""], "--name"), (["--name", "../../x"], "--name"), (["--name", "a/b"], "--name"),
    (["--name", "."], "--name"), (["--name", ".."], "--name"), (["--name", "p.zip"], "--name"),
    (["--name", "x" * 101], "--name"), (["--name", " "], "--name"),
    (["--name", ".hidden"], "--name"), (["--select-every", "5"], "--select-every"),
    (["--select-by", "rl-base"], "--select-by"),
    (["--warm-start-epochs", "3"], "--warm-start-epochs"),
    (["--n-steps", "1000000"], "--n-steps")])
def test_rl_train_refuses_before_making_out(tmp_path: Path, capsys: pytest.CaptureFixture,
                                           argv: list[str], flag: str) -> None:
    out = tmp_path / "o"
    assert main([*RL, "--out", str(out), *argv]) == 2
    line = capsys.readouterr().err.strip()
    assert line.startswith(f"mltcp: error: {flag}: ") and "\n" not in line
    assert not out.exists()


@pytest.mark.parametrize("taken", ["policy.zip", "policy.json", "policy-curves.png",
                                   "policy-curves.pdf"])
def test_rl_train_refuses_an_output_held_by_a_directory(tmp_path: Path, capsys,
                                                       taken: str) -> None:
    (tmp_path / taken).mkdir()
    assert main([*RL, "--out", str(tmp_path)]) == 2
    assert f"{taken} is a directory" in capsys.readouterr().err


def test_a_name_of_100_characters_is_a_name() -> None:
    from mltcp.lab.cluster.papers.deepshare_rl import train as rl_train

    assert rl_train.policy_name("x" * 100) == "x" * 100
    assert rl_train.policy_name("deepshare-normal-w0.4") == "deepshare-normal-w0.4"
    assert "stem: p" in _refused(rl_train.policy_name, "p.ZIP").fix


def test_n_steps_above_timesteps_suggests_a_rollout_that_fits() -> None:
    from mltcp.lab.cluster.papers.deepshare_rl import train as rl_train

    err = _refused(rl_train.TrainConfig, timesteps=1000)        # the default n_steps 2048
    assert err.field == "n_steps" and "e.g. 512" in err.fix
    assert rl_train.TrainConfig(timesteps=2048).n_steps == 2048


def test_a_heartbeat_speaks_only_when_due(monkeypatch) -> None:
    from mltcp.lab.cluster.papers.deepshare_rl import train as rl_train

    clock = [100.0]
    monkeypatch.setattr(rl_train.time, "monotonic", lambda: clock[0])
    said: list[str] = []
    beat = rl_train.Heartbeat(said.append)
    beat.maybe(lambda: "early")
    clock[0] += rl_train.Heartbeat.EVERY_S
    beat.maybe(lambda: "due")
    beat.maybe(lambda: "again")
    clock[0] += rl_train.Heartbeat.EVERY_S - 1
    beat.reset()
    clock[0] += 2
    beat.maybe(lambda: "after a reset")
    assert said == ["due"]


# ------------------------------------------------------------ Ctrl-C on local worker processes


def test_a_local_pool_starts_with_sigint_caught_here_and_ignored_by_its_workers() -> None:
    """While a local pool starts, this process keeps its SIGINT handler (a Ctrl-C then
    stops the start), and its workers, forked by the fork server started then, ignore
    SIGINT."""
    if threading.current_thread() is not threading.main_thread():
        pytest.skip("signal handlers are set from the main thread only")
    before = signal.getsignal(signal.SIGINT)
    with parallel.fan_out(1, None) as pool:
        assert signal.getsignal(signal.SIGINT) is before
        forked = pool.submit(signal.getsignal, signal.SIGINT).result()
    assert forked is signal.SIG_IGN
    assert signal.getsignal(signal.SIGINT) is before


def test_a_stopped_pool_leaves_no_worker_behind() -> None:
    """Left by an exception (a Ctrl-C), a local pool terminates its workers at once,
    a run in them unfinished, and waits for them: none is left."""
    with pytest.raises(KeyboardInterrupt), parallel.fan_out(2, None) as pool:
        pids = [pool.submit(os.getpid) for _ in range(4)]
        busy = pool.submit(_sleep, 600)
        pids = {f.result() for f in pids}
        raise KeyboardInterrupt
    assert busy.cancelled() or busy.done()
    for pid in pids:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)


def _sleep(seconds: float) -> None:
    import time

    time.sleep(seconds)


# The child marks the moment its pool forked its first worker on stderr, and holds there
# 1 s more: a start that the Ctrl-C 0.2 s later lands in on any machine, with a worker
# process there to receive it too (a terminal signals the whole group).
HELD_START = """
import sys, time
from concurrent.futures import process
_spawn = process.ProcessPoolExecutor._spawn_process
def _held(self):
    _spawn(self)
    print("a local pool is starting", file=sys.stderr, flush=True)
    time.sleep(1)
process.ProcessPoolExecutor._spawn_process = _held
"""


def test_ctrl_c_while_a_local_pool_starts_stops_the_command(tmp_path: Path) -> None:
    """The first Ctrl-C (SIGINT to the process group) while ``--parallel``'s worker
    processes start ends the command within a second or so (5 s allowed: a busy 2-core
    machine) with the usual one line and 130; its workers print nothing, and none is
    left."""
    got = ctrl_c_when(["cluster", "run", "small", "--out", "out", "--parallel", "2"],
                      tmp_path, "a local pool is starting", wait_s=60, delay_s=0.2,
                      prelude=HELD_START, group=True)
    assert got.returncode == 130, got.stderr
    assert got.latency_s < 5, got.latency_s
    assert "Traceback" not in got.stderr, got.stderr
    assert got.stderr.splitlines()[-1].startswith("mltcp: interrupted (SIGINT) after 0 of "), \
        got.stderr
    assert got.stderr.splitlines()[-1].endswith(" runs: no report written"), got.stderr
    assert got.left == [], got.left
