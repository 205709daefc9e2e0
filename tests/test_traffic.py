"""Tests of the traffic generator on loopback (no namespaces, no root needed).

The TCP_INFO parser reads the kernel ABI by offset, so it is checked against a
live kernel socket and against ``ss``, an independent reader of the same data.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from mltcp.core.errors import SpecError
from mltcp.lab.emulation.traffic import (
    SendConfig,
    TcpInfo,
    _size_arg,
    connect,
    parse_tcp_info,
    read_tcp_info,
    set_congestion,
    wait_acked,
)

REPO = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "PYTHONPATH": str(REPO)}


def traffic(*args: str) -> list[str]:
    return [sys.executable, "-m", "mltcp.lab.emulation.traffic", *args]


@pytest.fixture
def discard_server() -> Iterator[tuple[int, list[int], threading.Thread]]:
    """An in-process loopback sink; yields its port and the per-connection byte counts."""
    srv = socket.create_server(("127.0.0.1", 0))
    received: list[int] = []

    def serve() -> None:
        with srv:
            conn, _ = srv.accept()
            total = 0
            with conn:
                while chunk := conn.recv(1 << 20):
                    total += len(chunk)
            received.append(total)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield srv.getsockname()[1], received, thread
    thread.join(timeout=5)


@pytest.fixture
def sink() -> Iterator[int]:
    proc = subprocess.Popen(traffic("sink", "--port", "0", "--bind", "127.0.0.1"),
                            stdout=subprocess.PIPE, text=True, env=ENV)
    assert proc.stdout is not None
    event = json.loads(proc.stdout.readline())
    assert event["event"] == "listening"
    yield event["port"]
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=5) == 0
    assert json.loads(proc.stdout.readline())["event"] == "stopped"


# --------------------------------------------------------------------------- TCP_INFO


def test_tcp_info_reads_sane_values_on_loopback(
    discard_server: tuple[int, list[int], threading.Thread],
) -> None:
    port, received, server = discard_server
    sent = 3_000_000
    with connect("127.0.0.1", port, "reno") as sock:  # reno: selectable without privilege
        fresh = read_tcp_info(sock)
        assert fresh.state == 1  # TCP_ESTABLISHED
        assert fresh.snd_cwnd >= 1 and fresh.snd_mss > 0
        assert fresh.bytes_acked == 1  # the SYN's sequence number
        sock.sendall(bytes(sent))
        done = wait_acked(sock, deadline=None)
        assert done.unacked == 0 and done.notsent_bytes == 0
        assert done.bytes_sent == sent
        assert done.bytes_acked - fresh.bytes_acked == sent
        assert done.snd_cwnd >= 1 and 0 < done.rtt_us < 1_000_000
        assert done.total_retrans == 0
        assert read_tcp_info(sock).bytes_acked == done.bytes_acked
        _check_against_ss(port, done)
    server.join(timeout=5)
    assert received == [sent]


def _check_against_ss(port: int, info: TcpInfo) -> None:
    """``ss -ti`` decodes the same struct; agreeing on several fields pins the offsets."""
    if shutil.which("ss") is None:
        return
    out = subprocess.run(["ss", "-tinH", "dst", f"127.0.0.1:{port}"],
                         capture_output=True, text=True, check=True).stdout
    fields = dict(re.findall(r"\b(cwnd|bytes_acked|bytes_sent|mss):(\d+)", out))
    assert int(fields["cwnd"]) == info.snd_cwnd
    assert int(fields["bytes_acked"]) == info.bytes_acked
    assert int(fields["bytes_sent"]) == info.bytes_sent
    assert int(fields["mss"]) == info.snd_mss


def test_parse_tcp_info_rejects_short_and_tolerates_old_kernels() -> None:
    with pytest.raises(ValueError, match="need"):
        parse_tcp_info(bytes(100))
    old = bytearray(160)  # a 4.x-era struct: ends before delivery_rate
    old[80:84] = (10).to_bytes(4, sys.byteorder)
    info = parse_tcp_info(bytes(old))
    assert info.snd_cwnd == 10 and info.bytes_sent == 0 and info.delivered_ce == 0


def test_unknown_cc_raises_spec_error_naming_cc() -> None:
    with socket.socket() as sock, pytest.raises(SpecError) as err:
        set_congestion(sock, "no_such_cc")
    assert err.value.field == "--cc"
    assert "no_such_cc" in str(err.value) and "reno" in str(err.value)


# --------------------------------------------------------------------------- CLI


def test_send_duration_mode_over_loopback(sink: int, tmp_path: Path) -> None:
    out = tmp_path / "r.json"
    subprocess.run(traffic("send", "--dst", "127.0.0.1", "--port", str(sink), "--cc", "reno",
                           "--conns", "2", "--duration", "0.5", "--out", str(out)),
                   check=True, env=ENV, timeout=30)
    rep = json.loads(out.read_text())
    assert set(rep) >= {"cc", "conns", "iterations", "bytes_acked_total", "duration_s",
                        "goodput_bps", "samples", "t0_monotonic"}
    assert rep["cc"] == "reno" and rep["conns"] == 2 and rep["iterations"] == []
    assert rep["bytes_acked_total"] > 0 and rep["goodput_bps"] > 0
    assert {s["conn"] for s in rep["samples"]} == {0, 1}
    sample = rep["samples"][-1]
    assert set(sample) == {"t", "conn", "cwnd", "rtt_us", "bytes_acked", "retrans", "ssthresh",
                           "ca_state", "delivered", "delivered_ce"}
    assert sample["delivered"] > 0 and sample["ssthresh"] > 0


def test_send_iteration_mode_over_loopback(sink: int) -> None:
    proc = subprocess.run(
        traffic("send", "--dst", "127.0.0.1", "--port", str(sink), "--cc", "reno",
                "--conns", "3", "--iterations", "3", "--bytes-per-iteration", "1M",
                "--compute-ms", "20", "--sample-ms", "5"),
        check=True, env=ENV, timeout=30, capture_output=True, text=True)
    rep = json.loads(proc.stdout)
    its = rep["iterations"]
    assert len(its) == 3
    for prev, it in zip([None, *its], its, strict=False):
        assert it["bytes"] == 1_000_000
        assert it["comm_end"] > it["comm_start"] >= it["start"] + 0.02
        if prev:
            assert it["start"] >= prev["end"]
    assert rep["bytes_acked_total"] == 3_000_000
    # Samples count data bytes per connection (no SYN): 1M splits 333334/333333/333333.
    last = {s["conn"]: s["bytes_acked"] for s in rep["samples"]}
    assert all(v <= 3 * 333_334 for v in last.values())


def test_sink_cc_is_inherited_by_accepted_sockets() -> None:
    proc = subprocess.Popen(traffic("sink", "--port", "0", "--bind", "127.0.0.1", "--cc", "reno"),
                            stdout=subprocess.PIPE, text=True, env=ENV)
    try:
        assert proc.stdout is not None
        port = json.loads(proc.stdout.readline())["port"]
        default = Path("/proc/sys/net/ipv4/tcp_congestion_control").read_text().strip()
        with connect("127.0.0.1", port, default) as sock:  # the default is always allowed
            sock.sendall(bytes(100_000))
            wait_acked(sock)
            accepted = subprocess.run(["ss", "-tinH", "src", f"127.0.0.1:{port}"],
                                      capture_output=True, text=True, check=True).stdout
            assert re.search(r"\sreno\s", accepted), accepted
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=5) == 0


def test_cli_errors_are_one_line() -> None:
    bad_cc = subprocess.run(traffic("send", "--dst", "127.0.0.1", "--port", "9", "--cc", "nope",
                                    "--duration", "1"),
                            capture_output=True, text=True, env=ENV, timeout=30)
    assert bad_cc.returncode == 2
    assert bad_cc.stderr.startswith("error: --cc:") and bad_cc.stderr.count("\n") == 1
    missing = subprocess.run(traffic("send", "--dst", "127.0.0.1", "--port", "9", "--cc", "reno",
                                     "--iterations", "2"),
                             capture_output=True, text=True, env=ENV, timeout=30)
    assert missing.returncode == 2 and "--bytes-per-iteration" in missing.stderr


# --------------------------------------------------------------------------- parsing


def test_size_argument_uses_the_project_byte_parser() -> None:
    assert _size_arg("20000000") == 20_000_000
    assert _size_arg("20M") == _size_arg("20MB") == 20_000_000
    assert _size_arg("16Mi") == _size_arg("16MiB") == 16 * 2**20
    assert _size_arg("1.5k") == 1500
    with pytest.raises(argparse.ArgumentTypeError, match="size: cannot parse"):
        _size_arg("lots")


@pytest.mark.parametrize(("kwargs", "field"), [
    ({"port": 0, "duration_s": 1}, "--port"),
    ({"conns": 0, "duration_s": 1}, "--conns"),
    ({}, "--duration"),
    ({"duration_s": 1, "iterations": 2, "bytes_per_iteration": 10}, "--duration"),
    ({"iterations": 0, "bytes_per_iteration": 10}, "--iterations"),
    ({"iterations": 2, "conns": 4, "bytes_per_iteration": 3}, "--bytes-per-iteration"),
    ({"duration_s": 1, "compute_ms": -1}, "--compute-ms"),
    ({"duration_s": 1, "sample_ms": 0}, "--sample-ms"),
])
def test_send_config_errors_name_the_flag(kwargs: dict, field: str) -> None:
    base = {"dst": "127.0.0.1", "port": 5001, "cc": "cubic"}
    with pytest.raises(SpecError) as err:
        SendConfig(**{**base, **kwargs})
    assert err.value.field == field
