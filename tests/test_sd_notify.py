"""systemd's notify protocol (mltcp.host.sd_notify) and the agent's use of it, without
systemd and without a kernel: a Unix datagram socket stands in for systemd's, and the
agent runs with no datapath loaded (an empty pin root: its refresh has no job to renew)."""

from __future__ import annotations

import logging
import os
import re
import socket
import threading
import time
import uuid

import pytest

from mltcp.host import jobs, maps, sd_notify
from mltcp.host.agent import Agent


def _listener(address: str) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(address)
    sock.settimeout(10)
    return sock


def _recv(sock: socket.socket) -> list[str]:
    return sock.recv(4096).decode().split("\n")


def test_without_notify_socket_every_call_is_a_no_op() -> None:
    n = sd_notify.Notifier(environ={"WATCHDOG_USEC": "1000000"})
    assert not n.enabled
    assert not (n.ready("x") or n.reloading() or n.stopping() or n.status("x") or n.watchdog())
    assert n.watchdog_due_in() is None and n._sock is None
    n.close()


def test_addresses_and_the_watchdog_period_from_the_environment() -> None:
    assert sd_notify.socket_address("/run/systemd/notify") == "/run/systemd/notify"
    assert sd_notify.socket_address("@/org/freedesktop/systemd1/notify") == \
        "\0/org/freedesktop/systemd1/notify"
    for unspoken in ("", "@", "vsock:2:1234", "relative/path"):
        assert sd_notify.socket_address(unspoken) is None
    me = str(os.getpid())
    assert sd_notify.watchdog_seconds({"WATCHDOG_USEC": "30000000"}) == 30.0
    assert sd_notify.watchdog_seconds({"WATCHDOG_USEC": "500000", "WATCHDOG_PID": me}) == 0.5
    # another process is meant, or nothing (or nonsense) is asked
    assert sd_notify.watchdog_seconds({"WATCHDOG_USEC": "500000", "WATCHDOG_PID": "1"}) is None
    for value in ("", "0", "-5", "soon"):
        assert sd_notify.watchdog_seconds({"WATCHDOG_USEC": value}) is None


def test_messages_reach_a_path_socket(tmp_path) -> None:
    path = str(tmp_path / "notify")
    sock = _listener(path)
    n = sd_notify.Notifier(environ={"NOTIFY_SOCKET": path})
    try:
        assert n.enabled and n.watchdog_s is None
        assert n.ready("serving\n on two lines")
        assert _recv(sock) == ["READY=1", "STATUS=serving on two lines"]
        assert n.reloading("reloading /etc/mltcp/jobs.toml")
        reloading = _recv(sock)
        assert reloading[0] == "RELOADING=1" and re.fullmatch(r"MONOTONIC_USEC=\d+",
                                                              reloading[1])
        assert reloading[2] == "STATUS=reloading /etc/mltcp/jobs.toml"
        assert n.status("degraded: x") and not n.status("degraded: x")   # said once
        assert _recv(sock) == ["STATUS=degraded: x"]
        assert n.stopping()
        assert _recv(sock) == ["STOPPING=1"]
    finally:
        n.close()
        sock.close()


def test_the_watchdog_pings_every_half_period() -> None:
    """WATCHDOG_USEC = 10 s: a ping at once, then one each 5 s, however often asked."""
    name = f"@mltcp-test-{uuid.uuid4().hex}"
    sock = _listener("\0" + name[1:])
    now = [100.0]
    n = sd_notify.Notifier(environ={"NOTIFY_SOCKET": name, "WATCHDOG_USEC": "10000000"},
                           clock=lambda: now[0])
    try:
        assert n.watchdog_s == 10.0 and n.watchdog_due_in() == 0.0
        sent = []
        for t in (100.0, 101.0, 104.9, 105.0, 107.0, 109.99, 110.0, 110.1, 116.0):
            now[0] = t
            if n.watchdog():
                sent.append(t)
        assert sent == [100.0, 105.0, 110.0, 116.0]
        now[0] = 117.5
        assert n.watchdog_due_in() == pytest.approx(3.5)     # 116 + 5 - 117.5
        assert [_recv(sock) for _ in sent] == [["WATCHDOG=1"]] * len(sent)
    finally:
        n.close()
        sock.close()


def test_a_failed_send_is_logged_once_and_never_raises(tmp_path, caplog) -> None:
    n = sd_notify.Notifier(environ={"NOTIFY_SOCKET": str(tmp_path / "nobody-listens")})
    with caplog.at_level(logging.WARNING, logger="mltcp.host.sd_notify"):
        assert not n.ready() and not n.stopping()
    assert len(caplog.records) == 1 and "cannot notify systemd" in caplog.text


def test_the_agent_says_ready_pings_the_watchdog_reloads_and_stops(tmp_path, monkeypatch):
    """The agent under a Type=notify unit: READY=1 once its metrics socket is bound and the
    first refresh is done, WATCHDOG=1 every half of WATCHDOG_USEC even with a refresh
    interval longer than that, RELOADING=1 ... READY=1 around a reload, STOPPING=1 last."""
    name = f"@mltcp-test-{uuid.uuid4().hex}"
    sock = _listener("\0" + name[1:])
    monkeypatch.setenv("NOTIFY_SOCKET", name)
    monkeypatch.setenv("WATCHDOG_USEC", "1000000")          # a ping every 0.5 s
    monkeypatch.setenv("WATCHDOG_PID", str(os.getpid()))
    monkeypatch.setattr(maps, "PIN_ROOT", tmp_path / "no-datapath")
    agent = Agent(interval_s=30, metrics_port=0, registry=jobs.Registry(tmp_path / "state"),
                  signal_socket=None)
    ticks, pings = [], []
    tick, send = agent.tick, agent.notifier.send

    def counted_tick() -> dict[str, int]:
        ticks.append(time.monotonic())
        return tick()

    def timed_send(*assignments: str) -> bool:
        if assignments == ("WATCHDOG=1",):     # when the notifier's clock said it was due
            pings.append(agent.notifier._next_ping - agent.notifier.watchdog_s / 2)
        return send(*assignments)

    monkeypatch.setattr(agent, "tick", counted_tick)
    monkeypatch.setattr(agent.notifier, "send", timed_send)
    thread = threading.Thread(target=agent.run, name="agent")
    thread.start()
    try:
        ready = _recv(sock)
        assert ready[0] == "READY=1" and len(ticks) == 1
        port = agent.metrics_port
        assert ready[1] == ("STATUS=refreshing job configs every 30 s; "
                            f"metrics on http://127.0.0.1:{port}/metrics")
        socket.create_connection(("127.0.0.1", port), timeout=5).close()   # it serves
        messages = [_recv(sock) for _ in range(4)]
        assert messages == [["WATCHDOG=1"]] * 4
        # Four pings, 0.5 s apart at least, and still the one refresh of the start: the
        # loop wakes for the watchdog, not only for its 30 s interval.
        assert len(ticks) == 1
        assert all(b - a >= 0.5 - 1e-9 for a, b in zip(pings, pings[1:], strict=False))
        agent.reload()
        while (msg := _recv(sock)) == ["WATCHDOG=1"]:
            pass
        assert msg[0] == "RELOADING=1"
        assert msg[2] == "STATUS=reloading: no --config, nothing to apply"
        while (msg := _recv(sock)) == ["WATCHDOG=1"]:
            pass
        assert msg[0] == "READY=1" and len(ticks) == 2      # a reload refreshes at once
    finally:
        agent.stop()
        thread.join(timeout=10)
    assert not thread.is_alive()
    rest = []
    sock.settimeout(0.5)
    try:
        while True:
            rest.append(_recv(sock))
    except TimeoutError:
        pass
    sock.close()
    assert rest and rest[-1] == ["STOPPING=1", "STATUS=stopping"]
    assert all(m == ["WATCHDOG=1"] for m in rest[:-1])
