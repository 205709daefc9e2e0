"""``-j/--json``: every read command's output is one JSON document per line with the
keys README's "Scripting" table documents, the flag works before and after the command,
and a command without JSON output refuses it.  The real CLI runs in a fresh process
(unprivileged: what it reads here is real); the commands that change the datapath are
checked as root (they skip elsewhere, naming what is missing)."""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from mltcp.cli import build_parser
from mltcp.host import jobs, rules

REPO = Path(__file__).resolve().parents[1]
JOB_KEYS = {"id", "name", "cc", "budget", "learn", "slope", "intercept", "cap", "gap_ms",
            "stale_s", "cgroup", "whole_host", "signal", "rules", "description"}
RULE = dataclasses.asdict(rules.Rule(port=29500))
STATUS_KEYS = {"name", "id", "cc", "budget", "learning", "learned_budget", "iteration",
               "bytes_ratio", "f", "stale", "flows"}


def _env(state_dir: Path) -> dict[str, str]:
    """A state directory of the test's own, and a pin root where nothing is pinned (the
    kernel tests' pins, /sys/fs/bpf/mltcp-test, may exist meanwhile)."""
    return {**os.environ, "PYTHONPATH": str(REPO), "MLTCP_STATE_DIR": str(state_dir),
            "MLTCP_PIN_ROOT": str(state_dir.parent / "no-pins")}


def cli(tmp_path: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "mltcp.cli", *argv], capture_output=True,
                          text=True, timeout=120, env=_env(tmp_path / "state"), cwd=tmp_path)


def document(proc: subprocess.CompletedProcess[str], rc: int = 0) -> object:
    assert proc.returncode == rc, proc.stderr
    lines = proc.stdout.splitlines()
    assert len(lines) == 1, f"not one line: {proc.stdout!r}"
    return json.loads(lines[0])


def test_the_flag_goes_before_or_after_the_command_into_one_value() -> None:
    parse = build_parser().parse_args
    assert parse(["-j", "status"]).json is True
    assert parse(["--json", "job", "list"]).json is True
    assert parse(["status", "-j"]).json is True and parse(["job", "list", "--json"]).json
    assert parse(["status"]).json is False and parse(["dcqcn", "knobs"]).json is False
    # demo's own --json FILE (where --live writes its samples) is not the global flag
    demo = parse(["demo", "--live", "--json", "samples.json"])
    assert demo.json is False and demo.json_file == "samples.json"


def test_doctor(tmp_path: Path) -> None:
    proc = cli(tmp_path, "-j", "doctor", "--no-build")
    doc = document(proc, rc=proc.returncode)
    assert set(doc) == {"ok", "checks"} and doc["checks"]
    assert all(set(c) == {"name", "ok", "detail", "fix", "warn"} for c in doc["checks"])
    # the exit code is the verdict: 0 only when every check passed
    assert proc.returncode == (0 if doc["ok"] else 1)
    assert doc["ok"] == all(c["ok"] for c in doc["checks"])


def test_job_list_shows_the_registry(tmp_path: Path) -> None:
    """A registry written here (no kernel needed to read it back): the job's fields."""
    assert document(cli(tmp_path, "-j", "job", "list")) == {}
    spec = jobs.JobSpec(name="resnet", budget=1_000_000, rules=(rules.Rule(port=29500),))
    # jobs.json as jobs.Registry writes it; "datapath": null is what the CLI's pin root
    # (nothing pinned) gives, so the registry reads it back as live
    (tmp_path / "state").mkdir(exist_ok=True)
    (tmp_path / "state" / "jobs.json").write_text(json.dumps({"datapath": None, "jobs": {
        "resnet": {"id": 3, "spec": spec.to_json(), "learned_budget": 0, "links": [],
                   "origin": None}}}))
    for argv in (("-j", "job", "list"), ("job", "list", "--json")):
        doc = document(cli(tmp_path, *argv))
        assert set(doc) == {"resnet"} and set(doc["resnet"]) == JOB_KEYS
        assert doc["resnet"]["id"] == 3 and doc["resnet"]["budget"] == 1_000_000
        assert doc["resnet"]["rules"] == [RULE]


def test_status_and_each_watch_refresh_is_one_line(tmp_path: Path) -> None:
    assert document(cli(tmp_path, "-j", "status")) == []
    assert document(cli(tmp_path, "status", "--json")) == []
    # Ctrl-C is sent below: the child must not inherit SIGINT ignored (as every command
    # of a suite started in the background by a shell without job control does).
    proc = subprocess.Popen([sys.executable, "-m", "mltcp.cli", "-j", "status", "--watch",
                             "0.05"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=_env(tmp_path / "state"), cwd=tmp_path,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        assert proc.stdout is not None
        refreshes = [json.loads(proc.stdout.readline()) for _ in range(3)]
    finally:
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=30)
    assert refreshes == [[], [], []]
    assert proc.returncode == 130 and err == "mltcp: interrupted (SIGINT)\n"


def test_backends(tmp_path: Path) -> None:
    listed = document(cli(tmp_path, "-j", "backends"))
    assert [e["name"] for e in listed] == ["netns", "fluid", "ns3", "dcqcn", "hosts"]
    assert all(set(e) == {"name", "summary"} for e in listed)
    checked = document(cli(tmp_path, "backends", "--check", "-j"))
    assert all(set(e) == {"name", "summary", "ready", "why"} for e in checked)
    fluid = next(e for e in checked if e["name"] == "fluid")
    assert fluid["ready"] is True and fluid["why"] is None


def test_dcqcn_probe_and_knobs(tmp_path: Path) -> None:
    probe = document(cli(tmp_path, "-j", "dcqcn", "probe", "--backend", "defaults"))
    assert set(probe) == {"backend", "base", "iface", "pci", "knobs"}
    assert probe["knobs"]["rpg_time_reset"] == 300
    knobs = document(cli(tmp_path, "dcqcn", "knobs", "--json"))
    assert {k["name"] for k in knobs} >= {"rpg_time_reset", "rpg_ai_rate"}
    assert all(set(k) == {"name", "side", "unit", "min", "max", "default", "sysfs",
                          "debugfs", "scaling", "source", "about"} for k in knobs)


def test_apply_dry_run_says_what_would_change(tmp_path: Path) -> None:
    """Rules by address and port only: nothing of the host is needed to plan it."""
    path = tmp_path / "jobs.toml"
    path.write_text('[[job]]\nname = "bert"\ncc = "reno"\nbudget = "1MB"\n'
                    'dst = ["10.0.0.7:29500"]\n')
    doc = document(cli(tmp_path, "-j", "apply", str(path), "--dry-run"))
    assert set(doc) == {"dry_run", "loaded", "attached", "replaced", "detached", "unchanged"}
    assert doc["dry_run"] is True and doc["attached"] == ["bert"]
    assert doc["replaced"] == doc["detached"] == doc["unchanged"] == []
    assert set(doc["loaded"]) <= {"mltcp_reno"}


@pytest.mark.parametrize("argv", [["-j", "metrics"], ["metrics", "--json"],
                                  ["-j", "agent"], ["-j", "dcqcn", "run", "--budget", "1MB"],
                                  ["-j", "demo"], ["-j", "dcqcn", "restore"]])
def test_a_command_without_json_refuses_the_flag(tmp_path: Path, argv: list[str]) -> None:
    proc = cli(tmp_path, *argv)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.count("\n") == 1 and "json" in proc.stderr, proc.stderr


def test_an_error_under_json_is_still_one_line_with_its_code(tmp_path: Path) -> None:
    (tmp_path / "state").mkdir()
    (tmp_path / "state" / "jobs.json").write_text('{"datapath": null, "jobs": {')
    proc = cli(tmp_path, "-j", "job", "list")
    assert proc.returncode == 1 and proc.stdout == ""
    assert proc.stderr.count("\n") == 1 and "jobs.json" in proc.stderr


# --------------------------------------------------------------- root: the datapath


@pytest.mark.kernel
def test_load_attach_status_signal_detach_unload_confirm_in_json(clean_datapath,
                                                                 tmp_path: Path) -> None:
    def run(*argv: str) -> Any:
        proc = subprocess.run([sys.executable, "-m", "mltcp.cli", "-j", *argv],
                              capture_output=True, text=True, timeout=120,
                              env={**os.environ, "PYTHONPATH": str(REPO)})
        return document(proc)

    assert run("load", "cubic") == {"loaded": ["mltcp_cubic"], "already": []}
    assert run("load", "cubic") == {"loaded": [], "already": ["mltcp_cubic"]}
    attached = run("job", "attach", "j1", "--budget", "1MB", "--port", "7391")
    assert attached["attached"] == "j1" and set(attached) == JOB_KEYS | {"attached"}
    [status] = run("status")
    assert set(status) >= STATUS_KEYS and status["name"] == "j1" and status["flows"] == []
    assert set(run("job", "list")["j1"]) == JOB_KEYS
    signalled = run("job", "signal", "j1")
    assert signalled["job"] == "j1" and signalled["seq"] >= 1
    assert run("apply", str(_declared(tmp_path)), "--dry-run")["attached"] == ["j2"]
    assert run("job", "detach", "j1") == {"detached": ["j1"]}
    assert run("unload", "cubic") == {"unloaded": ["mltcp_cubic"]}
    assert run("unload", "--all")["jobs"] == []


def _declared(tmp_path: Path) -> Path:
    path = tmp_path / "jobs.toml"
    path.write_text('[[job]]\nname = "j2"\nbudget = "1MB"\nport = [7392]\n')
    return path
