"""Runs fanned out on this host's cores (:mod:`mltcp.lab.common.parallel`): ``--parallel
N`` runs ``cluster run``'s runs and ``sweep``'s chunks on a pool of local worker
processes, without Dask, and gives the serial run's results bit for bit; a Ctrl-C during
such a run ends it within a second or so with the usual one line, exit 130 and no worker
left; the flags' bad values are one line naming the flag (exit 2).  Dask, where it is
still used (a running cluster: ``--dask ADDR``), is tested against a cluster in this
process (tests/test_cluster_report.py, tests/test_sweep.py)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from mltcp.cli import EXIT_BAD_INPUT, main
from tests.interrupt import ctrl_c_when, group_members
from tests.test_cluster_cli import LONG_CONFIG as LONG_CLUSTER
from tests.test_cluster_cli import LONG_TRACE

CLUSTER = ["cluster", "run", "small"]
SWEEP = ["sweep", "compatible-pair", "--param", "slope=0,4", "--param", "intercept=1,2",
         "--seeds", "0-2", "--format", "csv"]


def _without_provenance(path: Path) -> dict[str, Any]:
    """A report or sweep summary but for where and how it ran (provenance, the run
    set's command lines): what must not differ between a serial and a parallel run."""
    data = json.loads(path.read_text())
    data.pop("provenance")
    data.pop("runset")
    return data


def test_a_parallel_cluster_run_gives_the_serial_results_bit_for_bit(tmp_path: Path) -> None:
    serial, fanned = tmp_path / "serial", tmp_path / "parallel"
    assert main([*CLUSTER, "--out", str(serial)]) == 0
    assert main([*CLUSTER, "--out", str(fanned), "--parallel", "2"]) == 0
    tables = sorted(p.name for p in serial.glob("*.parquet"))
    assert tables == ["cells.parquet", "jobs.parquet"]
    for name in tables:
        assert (serial / name).read_bytes() == (fanned / name).read_bytes(), name
    assert _without_provenance(serial / "report.json") == \
        _without_provenance(fanned / "report.json")


def test_a_parallel_sweep_gives_the_serial_results_bit_for_bit(tmp_path: Path) -> None:
    serial, fanned = tmp_path / "serial", tmp_path / "parallel"
    assert main([*SWEEP, "--out", str(serial), "--parallel", "1"]) == 0
    assert main([*SWEEP, "--out", str(fanned), "--parallel", "2"]) == 0
    table = (serial / "sweep.csv").read_bytes()
    assert table.count(b"\n") == 13                     # a header and 4 points x 3 seeds
    assert table == (fanned / "sweep.csv").read_bytes()
    assert _without_provenance(serial / "sweep.json") == \
        _without_provenance(fanned / "sweep.json")


# Two runs of hours each (jobs of 10^9 iterations), one per worker: two seeds.
LONG_CONFIG = LONG_CLUSTER.format(network="fair", f_steps=8).replace("seeds = [0]",
                                                                     "seeds = [0, 1]")


def test_ctrl_c_stops_a_parallel_cluster_run_at_once(tmp_path: Path) -> None:
    """Each worker says how far its run is (simulated time, an ETA: the same lines as a
    run in this process); a terminal's Ctrl-C (SIGINT to the whole group) then ends the
    command within a second or so (5 s allowed: a busy 2-core machine) with one line
    and 130, the workers (which ignore SIGINT) terminated: none is left, none printed
    a traceback."""
    (tmp_path / "jobs.csv").write_text(LONG_TRACE)
    (tmp_path / "long.toml").write_text(LONG_CONFIG)
    got = ctrl_c_when(["cluster", "run", "long.toml", "--out", "out", "--parallel", "2"],
                      tmp_path, "running, simulated", wait_s=90, group=True)
    progress = next(line for line in got.stderr.splitlines() if "running" in line)
    assert progress.startswith("[") and " x " in progress and ", ETA " in progress, progress
    assert got.returncode == 130, got.stderr
    assert got.latency_s < 5, got.latency_s
    assert "Traceback" not in got.stderr, got.stderr
    assert got.stderr.splitlines()[-1] == ("mltcp: interrupted (SIGINT) after 0 of 2 runs: "
                                           "no report written")
    assert {line.split(":")[0] for line in got.stderr.splitlines() if "running" in line} \
        <= {"[1/2] fifo/random x fair, seed 0", "[2/2] fifo/random x fair, seed 1"}
    assert got.left == [], got.left


LONG_SWEEP = ["sweep", "compatible-pair", "--param", "iterations=10000", "--param", "jobs=3",
              "--param", "slope=2,4", "--f-steps", "200", "--out", "out", "--parallel", "2"]


def test_ctrl_c_stops_a_parallel_sweep_at_once(tmp_path: Path) -> None:
    """A sweep of long points (three jobs of 10^4 iterations, F re-evaluated 200 times
    in each: about 8 s a task on a 2-core machine) on two workers: Ctrl-C once they are
    at work ends it within a second or so, one line, 130, no worker left."""
    got = ctrl_c_when(LONG_SWEEP, tmp_path, " tasks, ", wait_s=90, delay_s=1.5, group=True)
    assert got.returncode == 130, got.stderr
    assert got.latency_s < 5, got.latency_s
    assert "Traceback" not in got.stderr, got.stderr
    assert got.stderr.splitlines()[-1] == "mltcp: interrupted (SIGINT)", got.stderr
    assert "0/2 tasks" in got.stderr and "2/2 tasks" not in got.stderr, got.stderr
    assert got.left == [], got.left


def test_workers_do_not_outlive_a_killed_command(tmp_path: Path) -> None:
    """SIGKILL (or the OOM killer) gives the command no teardown at all: its workers
    see it gone and exit by themselves, and the fork server after them."""
    proc = subprocess.Popen([sys.executable, "-m", "mltcp.cli", *LONG_SWEEP], cwd=tmp_path,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            process_group=0)
    try:
        assert proc.stderr is not None
        for line in proc.stderr:
            if " tasks, " in line:
                break
        time.sleep(1.5)
        assert len(group_members(proc.pid)) >= 3          # the command, server, workers
        proc.kill()
        proc.wait()
        deadline = time.monotonic() + 10
        while group_members(proc.pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert group_members(proc.pid) == []
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


BAD = [
    (["--parallel", "0"], "--parallel"),
    (["--parallel", "two"], "--parallel"),
    (["--parallel", "1025"], "--parallel"),
    (["--parallel", "2", "--dask", "tcp://host:8786"], "--dask"),
    (["--dask", "nonsense"], "--dask"),
    (["--dask", ""], "--dask"),
    (["--dask", "tcp://host:0"], "--dask"),
    (["--dask", "nosuch://host:8786"], "--dask"),
]


@pytest.mark.parametrize("command", [CLUSTER, SWEEP[:4]], ids=["cluster run", "sweep"])
@pytest.mark.parametrize(("flags", "named"), BAD, ids=[" ".join(f) for f, _ in BAD])
def test_a_bad_fan_out_flag_is_one_line_naming_it(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], command: list[str],
        flags: list[str], named: str) -> None:
    """The same flags, the same answers, in both commands: one line naming the flag,
    exit 2, before the output directory is made."""
    out = tmp_path / "out"
    assert _exit_code([*command, "--out", str(out), *flags]) == EXIT_BAD_INPUT
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("mltcp: error: ") and named in err, err
    assert not out.exists()


def test_the_sweeps_old_workers_flag_names_the_new_spelling(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert _exit_code([*SWEEP[:4], "--out", str(tmp_path), "--workers", "2"]) == \
        EXIT_BAD_INPUT
    assert capsys.readouterr().err == (
        "mltcp: error: argument --workers: is now --parallel; give --parallel 2 "
        "(see `mltcp sweep --help`)\n")


def _exit_code(argv: list[str]) -> int:
    try:
        return main(argv)
    except SystemExit as exited:                # argparse's refusals
        return int(exited.code or 0)


UNGUARDED = """
from mltcp.core.errors import MltcpError
from mltcp.lab.scenario import sweep
spec = sweep.make_spec("compatible-pair", ["slope=0,4"], "0-1")
try:
    sweep.execute(spec, parallel=2, chunk_size=1, progress=None)
    print("ran")
except MltcpError as exc:
    print(exc)
"""


def test_a_script_that_starts_its_work_unguarded_is_told_so(tmp_path: Path) -> None:
    """A researcher's script calling the sweep at its top level: each worker imports it
    (Python's multiprocessing) and starts the sweep again, which breaks the pool.  The
    message named a killed or out-of-memory worker; it now names the script and the
    guard.  The mltcp command itself is never such a script."""
    script = tmp_path / "my_sweep.py"
    script.write_text(UNGUARDED)
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          timeout=300, cwd=tmp_path)
    said = done.stdout.strip().splitlines()[-1]
    assert f"each worker imports {script}" in said and 'if __name__ == "__main__":' in said
    guarded = tmp_path / "guarded.py"
    guarded.write_text("if __name__ == '__main__':\n" +
                       "".join(f"    {line}\n" for line in UNGUARDED.strip().splitlines()))
    done = subprocess.run([sys.executable, str(guarded)], capture_output=True, text=True,
                          timeout=300, cwd=tmp_path)
    assert done.stdout.strip().splitlines()[-1] == "ran", done.stderr[-2000:]
