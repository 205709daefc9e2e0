"""The training hook's and the DDP workload's environment variables, second round of bad
input (issue 25).  No ``mltcp`` command reads them (torchrun and the hosts backend set
them for ``python -m mltcp.workloads.ddp``), so this file is their table:

* ``MLTCP_START_AT``/``--start-at``: at most a day ahead (:data:`MAX_START_AHEAD_S`);
  before, 99999999999 passed and overflowed ``time.sleep`` after the rendezvous and the
  model (a traceback per rank), and 4000000000 waited 70 years;
* ``WORLD_SIZE`` and ``RANK``: refused as those variables, out of range too (a world of
  more than 65536 ranks, as ``--workers``), never replaced: ``--describe`` planned for 2
  workers when ``WORLD_SIZE`` was not a number, and named ``--workers`` for ``0``;
* ``MLTCP_AGENT_SOCKET``: a path no Unix socket can have (over 107 bytes) is refused when
  the hook starts, not found out by every signal failing while training goes on;
* Ctrl-C of the workload: one line and exit 130, not a traceback per rank.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from mltcp import hook
from mltcp.core.errors import SpecError
from mltcp.core.workload import MAX_START_AHEAD_S, parse, start_time
from tests.interrupt import ctrl_c_group_when_ready

REPO = Path(__file__).resolve().parents[1]
HOOK_VARS = ("MLTCP_HOOK_OUT", "MLTCP_JOB", "MLTCP_HOOK_SIGNAL", "MLTCP_AGENT_SOCKET", "RANK",
             "WORLD_SIZE", "MLTCP_START_AT", "MLTCP_START_GO")
CNN = ["--model", "resnet18"]


@pytest.fixture(autouse=True)
def clean_env(monkeypatch) -> None:
    for name in HOOK_VARS:
        monkeypatch.delenv(name, raising=False)


# -- RANK and WORLD_SIZE ------------------------------------------------------------


@pytest.mark.parametrize(("env", "match"), [
    ({"WORLD_SIZE": "99999999999999999999999"},
     r"^WORLD_SIZE: must be <= 65536 \(got 99999999999999999999999\); the launcher"),
    ({"WORLD_SIZE": "65537"}, r"^WORLD_SIZE: must be <= 65536"),
    ({"RANK": "65536", "WORLD_SIZE": "65536"}, r"^RANK: must be <= 65535"),
    ({"RANK": "99999999999999999999"}, r"^RANK: must be <= 65535"),
    ({"WORLD_SIZE": "0"}, r"^WORLD_SIZE: must be >= 1 \(got 0\)"),
    ({"WORLD_SIZE": "two"}, r"^WORLD_SIZE: 'two' is not an integer"),
])
def test_a_launcher_variable_out_of_range_is_refused_as_itself(monkeypatch, env: dict,
                                                               match: str) -> None:
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(SpecError, match=match):
        hook.from_env()


def test_the_largest_world_is_taken(monkeypatch) -> None:
    monkeypatch.setenv("WORLD_SIZE", "65536")
    monkeypatch.setenv("RANK", "65535")
    h = hook.from_env()
    assert (h.rank, h.world_size) == (65535, 65536)
    h.close()


@pytest.mark.parametrize(("value", "match"), [
    ("abc", r"^WORLD_SIZE: 'abc' is not an integer"),
    ("0", r"^WORLD_SIZE: must be >= 1 \(got 0\)"),
    ("-3", r"^WORLD_SIZE: must be >= 1"),
    ("1.5", r"^WORLD_SIZE: '1.5' is not an integer"),
    ("70000", r"^WORLD_SIZE: must be <= 65536"),
])
def test_describe_names_world_size_and_never_replaces_it(monkeypatch, value: str,
                                                         match: str) -> None:
    monkeypatch.setenv("WORLD_SIZE", value)
    with pytest.raises(SpecError, match=match):
        parse([*CNN, "--describe"])


def test_describe_plans_for_world_size_or_the_flag(monkeypatch) -> None:
    assert parse([*CNN, "--describe"]).workers == 2           # unset: 2, as documented
    monkeypatch.setenv("WORLD_SIZE", "8")
    assert parse([*CNN, "--describe"]).workers == 8
    monkeypatch.setenv("WORLD_SIZE", "abc")                   # the flag wins, unread
    assert parse([*CNN, "--describe", "--workers", "4"]).workers == 4
    with pytest.raises(SpecError, match=r"^--workers: must be between 1 and 65536"):
        parse([*CNN, "--describe", "--workers", "0"])


# -- MLTCP_START_AT -----------------------------------------------------------------


@pytest.mark.parametrize(("value", "words"), [
    ("99999999999", "years ahead"),          # the example: time.sleep overflowed
    ("1e11", "years ahead"),                 # the old bound itself
    ("4000000000", "70 years ahead"),        # waited until 2096
    ("1.7e12", "^MLTCP_START_AT: must be > 0 and <= 100000000000"),   # milliseconds
    ("nan", "must be > 0"),
    ("-5", "must be > 0"),
    ("soon", "is not a time"),
])
def test_a_start_no_run_should_wait_for_is_refused(monkeypatch, value: str,
                                                   words: str) -> None:
    monkeypatch.setenv("MLTCP_START_AT", value)
    with pytest.raises(SpecError, match=r"^MLTCP_START_AT: ") as err:
        parse(CNN)
    assert words.lstrip("^") in str(err.value), str(err.value)
    if "ahead" in words:
        assert "at most a day ahead" in err.value.fix


def test_the_flag_is_bounded_as_the_variable() -> None:
    with pytest.raises(SpecError, match=r"^--start-at: 99999999999 is \d+ years ahead"):
        parse([*CNN, "--start-at", "99999999999"])


def test_a_start_within_a_day_or_in_the_past_is_taken(monkeypatch) -> None:
    now = time.time()
    for at in (now + 3600, now + MAX_START_AHEAD_S - 60, now - 86_400 * 400, 1.0):
        monkeypatch.setenv("MLTCP_START_AT", repr(at))
        assert parse(CNN).start_at == at
    assert start_time(1000.0 + MAX_START_AHEAD_S, "x", now=1000.0) == 1000.0 + MAX_START_AHEAD_S
    with pytest.raises(SpecError, match=r"^x: .* is 24 hours ahead"):
        start_time(1001.0 + MAX_START_AHEAD_S, "x", now=1000.0)


def test_a_go_file_needs_a_latest_start_and_a_path(monkeypatch) -> None:
    """MLTCP_START_GO only brings the start forward: without MLTCP_START_AT a missing
    go file would hold the ranks for ever, so the pair is refused, naming the variable."""
    monkeypatch.setenv("MLTCP_START_GO", "/tmp/go")
    with pytest.raises(SpecError, match=r"^MLTCP_START_GO: needs a latest start") as err:
        parse(CNN)
    assert "MLTCP_START_AT" in err.value.fix
    with pytest.raises(SpecError, match=r"^--start-go: needs a latest start"):
        parse([*CNN, "--start-go", "/tmp/go"])
    monkeypatch.setenv("MLTCP_START_AT", repr(time.time() + 60))
    assert parse(CNN).start_go == "/tmp/go"
    with pytest.raises(SpecError, match=r"^--start-go: is empty"):
        parse([*CNN, "--start-go", " "])


def test_the_workload_refuses_it_in_one_line_before_anything_runs() -> None:
    """The command itself: exit 2 and one line, before the rendezvous (no variables of
    it are set: a bad start time is found first)."""
    proc = subprocess.run([sys.executable, "-m", "mltcp.workloads.ddp", *CNN],
                          capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PYTHONPATH": str(REPO),
                               "MLTCP_START_AT": "99999999999"})
    assert proc.returncode == 2, proc.stderr
    [line] = proc.stderr.splitlines()
    assert line.startswith("python -m mltcp.workloads.ddp: error: MLTCP_START_AT: 99999999999 "
                           "is ") and line.endswith(" years ahead; give a time at most a day "
                                                    "ahead, in seconds since the epoch, e.g. "
                                                    "$(date -d '+30 sec' +%s)"), line


# -- the agent's socket -------------------------------------------------------------


def _long_socket(tmp_path: Path, size: int) -> str:
    path = str(tmp_path / "s")
    return path + "x" * (size - len(os.fsencode(path)))


def test_a_socket_path_no_unix_socket_can_have_is_refused(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("MLTCP_HOOK_SIGNAL", "1")
    monkeypatch.setenv("MLTCP_JOB", "j")
    monkeypatch.setenv("MLTCP_AGENT_SOCKET", _long_socket(tmp_path, 108))
    with pytest.raises(SpecError, match=r"^MLTCP_AGENT_SOCKET: .* is 108 bytes, longer than a "
                                        r"Unix socket's 107; give the agent's --signal-socket"):
        hook.from_env()
    with pytest.raises(SpecError, match=r"^agent_socket: .* is 200 bytes"):
        hook.IterationHook(job="j", signal=True, agent_socket=_long_socket(tmp_path, 200))


def test_a_socket_path_of_107_bytes_is_taken_and_reached(tmp_path: Path, monkeypatch) -> None:
    """The limit is the kernel's: a 107-byte path binds, and the hook's signal reaches it
    (relative to a short working directory, as sun_path counts the bytes given)."""
    path = _long_socket(tmp_path, 107)
    try:
        server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        server.bind(path)
    except OSError as exc:
        pytest.skip(f"cannot bind a socket here: {exc}")
    server.close()
    monkeypatch.setenv("MLTCP_AGENT_SOCKET", path)
    h = hook.from_env(job="j", signal=True)
    assert h.signalling
    h.close()


def test_an_unused_socket_path_is_not_checked(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("MLTCP_AGENT_SOCKET", _long_socket(tmp_path, 300))
    hook.from_env().close()        # no signalling: the path is never used


# -- Ctrl-C -------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_ctrl_c_while_waiting_for_the_start_is_one_line_and_130(tmp_path: Path) -> None:
    """A terminal's Ctrl-C (SIGINT to the process group) while the rank waits for its
    start: the hook's records closed, one line, exit 130; before, a [rank0] traceback."""
    pytest.importorskip("torch", reason="needs PyTorch: pip install 'mltcp[torch]'")
    env = {**os.environ, "PYTHONPATH": str(REPO), "RANK": "0", "WORLD_SIZE": "1",
           "LOCAL_RANK": "0", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(_free_port()),
           "GLOO_SOCKET_IFNAME": "lo", "MLTCP_START_AT": repr(time.time() + 600)}
    code, err = ctrl_c_group_when_ready(
        [sys.executable, "-m", "mltcp.workloads.ddp", "--model", "transformer", "--preset",
         "tiny", "--iterations", "2", "--hook-out", str(tmp_path / "rec")],
        "start: ready at", env, delay_s=0.5)
    assert code == 130, err
    assert err.splitlines() == ["python -m mltcp.workloads.ddp: interrupted (SIGINT)"], err
    assert (tmp_path / "rec" / "hook-rank0.jsonl").exists()
