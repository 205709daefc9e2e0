"""Real-kernel tests of the namespace dumbbell and the traffic generator over it.

No mocks: these build namespaces, shape with HTB and move real TCP traffic, so
they need root.  One dumbbell is shared by the measurement tests to keep the
module well under a minute.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from mltcp.core.errors import CapabilityError, SpecError
from mltcp.lab.emulation.netns import (
    BottleneckSpec,
    Dumbbell,
    NetnsError,
    cleanup_leftovers,
    list_netns,
    nsenter_argv,
    require_netns,
)


def _netns_unusable() -> str | None:
    try:
        require_netns()
    except CapabilityError:
        return "needs root (CAP_NET_ADMIN) to create network namespaces"
    return None


_SKIP = _netns_unusable()
if _SKIP:
    pytest.skip(_SKIP, allow_module_level=True)

REPO = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "PYTHONPATH": str(REPO)}
OUR_PREFIX = f"mltcp-{os.getpid()}-"
RATE_MBIT = 1000
MB20 = 20_000_000


def traffic(*args: str) -> list[str]:
    return [sys.executable, "-m", "mltcp.lab.emulation.traffic", *args]


def ours() -> list[str]:
    return [ns for ns in list_netns() if ns.startswith(OUR_PREFIX)]


@pytest.fixture(scope="module")
def net() -> Iterator[Dumbbell]:
    with Dumbbell(n_senders=2, bottleneck=BottleneckSpec(rate_mbit=RATE_MBIT)) as d:
        sink = d.run(d.receivers[0], traffic("sink", "--port", "5001"),
                     stdout=subprocess.PIPE, text=True, env=ENV)
        assert json.loads(sink.stdout.readline()) == {"event": "listening", "port": 5001}
        yield d
    assert not any(ns.startswith(d.tag) for ns in list_netns())


def send(net: Dumbbell, host: str, *args: str) -> subprocess.Popen[str]:
    argv = traffic("send", "--dst", net.receivers[0].addr, "--port", "5001", *args)
    return net.run(host, argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                   env=ENV)


def report(proc: subprocess.Popen[str]) -> dict:
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    return json.loads(out)


# --------------------------------------------------------------------------- topology


def test_topology_names_and_addresses(net: Dumbbell) -> None:
    assert net.tag.startswith(OUR_PREFIX)
    assert [h.name for h in net.senders] == ["s1", "s2"]
    assert [h.name for h in net.receivers] == ["r1"]
    assert set(net.namespaces) <= set(list_netns())
    assert all(ns.startswith(net.tag) for ns in net.namespaces)
    assert net.router_ns == f"{net.tag}-rt"
    assert net.receivers[0].addr.startswith("10.201.")
    routes = net.check_output("s1", ["ip", "route", "get", net.receivers[0].addr])
    assert f"via {net.senders[0].gateway}" in routes


def test_bottleneck_is_htb_with_bfifo(net: Dumbbell) -> None:
    out = net.check_output("rt", ["tc", "-j", "qdisc", "show", "dev", net.bottleneck_dev])
    kinds = {q["kind"] for q in json.loads(out)}
    assert kinds == {"htb", "bfifo"}
    # iproute2 6.1 prints HTB classes only as text, even with -j.
    cls = net.check_output("rt", ["tc", "-d", "class", "show", "dev", net.bottleneck_dev])
    assert "rate 1Gbit ceil 1Gbit" in cls
    assert "burst 500000b" in cls and "cburst 500000b" in cls
    assert "quantum 100000" in cls
    # The links toward the senders are not shaped.
    sender_side = net.check_output("rt", ["tc", "-j", "qdisc", "show", "dev", "s1"])
    assert "htb" not in sender_side


def test_ecn_sysctls_set_and_default_cc_untouched(net: Dumbbell) -> None:
    assert net.check_output("s1", ["sysctl", "-n", "net.ipv4.tcp_ecn"]).strip() == "1"
    assert net.check_output("r1", ["sysctl", "-n", "net.ipv4.tcp_ecn_fallback"]).strip() == "0"
    root_default = Path("/proc/sys/net/ipv4/tcp_congestion_control").read_text().strip()
    ns_default = net.check_output("s1", ["sysctl", "-n", "net.ipv4.tcp_congestion_control"])
    assert ns_default.strip() == root_default


# --------------------------------------------------------------------------- traffic


def test_single_flow_goodput_near_htb_rate(net: Dumbbell) -> None:
    before = net.tc_stats()
    rep = report(send(net, "s1", "--duration", "3", "--cc", "cubic"))
    after = net.tc_stats()
    ratio = rep["goodput_bps"] / (RATE_MBIT * 1e6)
    assert 0.85 <= ratio <= 0.99, ratio
    assert rep["cc"] == "cubic" and rep["conns"] == 1 and rep["iterations"] == []
    assert 2.9 <= rep["duration_s"] <= 3.2
    assert len(rep["samples"]) >= 250
    assert all(s["cwnd"] >= 1 for s in rep["samples"])
    # Everything ACKed crossed the bottleneck: HTB saw at least the payload.
    assert after.bytes - before.bytes >= rep["bytes_acked_total"]
    assert after.packets > before.packets


def _overlap_s(reps: list[dict]) -> float:
    """Seconds during which every sender was sending (CLOCK_MONOTONIC is host-wide)."""
    start = max(r["t0_monotonic"] for r in reps)
    end = min(r["t0_monotonic"] + r["duration_s"] for r in reps)
    return max(0.0, end - start)


def _two_sender_trial() -> tuple[list[dict], int]:
    spec = BottleneckSpec(rate_mbit=RATE_MBIT, queue_packets=100)
    with Dumbbell(n_senders=2, bottleneck=spec) as net:
        sink = net.run(net.receivers[0], traffic("sink", "--port", "5001"),
                       stdout=subprocess.PIPE, text=True, env=ENV)
        assert json.loads(sink.stdout.readline())["event"] == "listening"
        procs = [send(net, h.name, "--duration", "3", "--cc", "cubic") for h in net.senders]
        reps = [report(p) for p in procs]
        return reps, net.tc_stats().drops


def test_two_senders_share_the_bottleneck(quiet_host) -> None:
    """Both senders get a real share of one bottleneck.

    Uses a 100-packet (150 KB, 1.2 ms) buffer: behind the default 1000-packet
    (12 ms) buffer only a handful of loss events happen in 3 s, so two CUBIC
    flows keep their slow-start split (measured up to 77/23) for the whole run.
    The senders are separate Python processes; on a loaded host one can start a
    second late (CI once saw 0.65 + 0.65 Gbit/s: they barely overlapped), so a
    trial in which they overlapped for less than 2.5 of their 3 s is re-run.
    """
    for _ in range(3):
        reps, drops = _two_sender_trial()
        if _overlap_s(reps) >= 2.5:
            break
    else:
        pytest.fail(f"the two senders never overlapped 2.5 s in 3 trials: {reps}")
    rates = [r["goodput_bps"] for r in reps]
    total = sum(rates)
    # >= 0.7: Python senders at 1 Gbit/s share 2 busy cores with the emulated network.
    assert total / (RATE_MBIT * 1e6) >= 0.7, rates
    # Together they never beat the shaper over the time either was sending.
    union_s = max(r["t0_monotonic"] + r["duration_s"] for r in reps) - min(
        r["t0_monotonic"] for r in reps)
    acked = sum(r["bytes_acked_total"] for r in reps)
    assert acked * 8 / union_s / (RATE_MBIT * 1e6) <= 0.99, (rates, union_s)
    for r in rates:
        assert 0.25 <= r / total <= 0.75, rates
    assert drops > 0  # they really contended for the shared queue


def test_iteration_mode_records_each_iteration(net: Dumbbell) -> None:
    rep = report(send(net, "s1", "--cc", "cubic", "--conns", "2", "--iterations", "5",
                      "--bytes-per-iteration", str(MB20), "--compute-ms", "50"))
    its = rep["iterations"]
    assert [it["index"] for it in its] == list(range(5))
    for it in its:
        assert it["bytes"] == MB20
        assert it["comm_end"] > it["comm_start"] >= it["start"] + 0.05
        assert it["end"] >= it["comm_end"]
        # 20 MB cannot be ACKed faster than the bottleneck allows.
        assert it["comm_end"] - it["comm_start"] >= MB20 * 8 / (RATE_MBIT * 1e6)
    assert rep["bytes_acked_total"] == 5 * MB20
    assert {s["conn"] for s in rep["samples"]} == {0, 1}


def test_unknown_cc_is_one_line_naming_cc(net: Dumbbell) -> None:
    proc = send(net, "s1", "--duration", "1", "--cc", "no_such_cc")
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 2
    assert err.count("\n") == 1 and "--cc" in err and "no_such_cc" in err


# --------------------------------------------------------------------------- lifecycle


def test_namespaces_gone_after_close() -> None:
    d = Dumbbell(n_senders=1, prefix=f"{OUR_PREFIX}close")
    names = d.namespaces
    assert set(names) <= set(list_netns())
    sleeper = d.run("s1", ["sleep", "60"])
    d.close()
    d.close()  # idempotent
    assert not set(names) & set(list_netns())
    assert sleeper.poll() is not None


def test_namespaces_gone_after_exception_in_with() -> None:
    with pytest.raises(RuntimeError, match="boom"), Dumbbell(n_senders=1) as d:
        names = d.namespaces
        raise RuntimeError("boom")
    assert not set(names) & set(list_netns())


def test_half_built_dumbbell_is_removed() -> None:
    tag = f"{OUR_PREFIX}half"
    squatter = f"{tag}-s2"  # created after rt and s1, so the build fails half way
    subprocess.run(["ip", "netns", "add", squatter], check=True)
    try:
        with pytest.raises(NetnsError, match="already exists"):
            Dumbbell(n_senders=2, prefix=tag)
        assert [ns for ns in list_netns() if ns.startswith(tag)] == [squatter]
    finally:
        subprocess.run(["ip", "netns", "del", squatter], check=True)


def test_sigterm_cleans_up() -> None:
    tag = f"{OUR_PREFIX}sigterm"
    code = (
        "import sys, time; from mltcp.lab.emulation.netns import Dumbbell\n"
        f"d = Dumbbell(n_senders=1, prefix={tag!r})\n"
        "print('ready', flush=True); time.sleep(60)\n"
    )
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True,
                             env=ENV)
    assert child.stdout is not None and child.stdout.readline().strip() == "ready"
    assert any(ns.startswith(tag) for ns in list_netns())
    child.send_signal(signal.SIGTERM)
    assert child.wait(timeout=15) == -signal.SIGTERM
    assert not any(ns.startswith(tag) for ns in list_netns())


def test_cleanup_leftovers_removes_prefixed_namespace() -> None:
    prefix = f"{OUR_PREFIX}leftover-"
    name = f"{prefix}x"
    subprocess.run(["ip", "netns", "add", name], check=True)
    sleeper = subprocess.Popen(nsenter_argv(name, ["sleep", "60"]))
    time.sleep(0.05)
    assert cleanup_leftovers(prefix) == [name]
    assert name not in list_netns()
    assert sleeper.wait(timeout=5) != 0
    assert cleanup_leftovers(prefix) == []


def test_cleanup_leftovers_refuses_foreign_prefix() -> None:
    with pytest.raises(SpecError, match="prefix"):
        cleanup_leftovers("")


# --------------------------------------------------------------------------- validation


@pytest.mark.parametrize(("kwargs", "field"), [
    ({"rate_mbit": 0}, "rate_mbit"),
    ({"rate_mbit": 40_001}, "rate_mbit"),
    ({"rate_mbit": "fast"}, "rate_mbit"),
    ({"burst_bytes": 9_999}, "burst_bytes"),
    ({"queue_packets": 9}, "queue_packets"),
    ({"queue_packets": 10.5}, "queue_packets"),
])
def test_bottleneck_spec_errors_name_the_field(kwargs: dict, field: str) -> None:
    with pytest.raises(SpecError) as info:
        BottleneckSpec(**kwargs)
    assert info.value.field == field
    assert str(info.value).startswith(field)


def test_bottleneck_spec_defaults() -> None:
    spec = BottleneckSpec()
    assert (spec.rate_mbit, spec.burst_bytes, spec.queue_packets) == (1000, 500_000, 1000)
    assert spec.rate_bps == 1e9


def test_dumbbell_counts_validated() -> None:
    with pytest.raises(SpecError, match="n_senders"):
        Dumbbell(n_senders=0)
    with pytest.raises(SpecError, match="n_receivers"):
        Dumbbell(n_receivers=100)


def test_zz_nothing_left_but_the_shared_dumbbell(net: Dumbbell) -> None:
    """Runs last in file order; the module fixture checks its own teardown."""
    assert [ns for ns in ours() if not ns.startswith(net.tag)] == []
