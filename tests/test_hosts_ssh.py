"""The hosts backend's SSH layer against real sshd servers in namespace hosts.

Every host of a dumbbell fabric runs Debian's sshd on its own address
(:mod:`mltcp.lab.scenario.emulation.sshd`); the backend's
:class:`~mltcp.lab.scenario.hosts.ssh.Session`
reaches them with the OpenSSH client and one shared connection per host, exactly as it
reaches remote machines.
"""

from __future__ import annotations

import dataclasses
import os
import sys
import time
from pathlib import Path

import pytest

from mltcp.lab.scenario.emulation import fabric, sshd
from mltcp.lab.scenario.hosts import inventory, remote, ssh

pytestmark = [
    pytest.mark.skipif(os.geteuid() != 0, reason="network namespaces need root"),
    pytest.mark.skipif(sshd.missing() is not None, reason=str(sshd.missing())),
]


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    with (fabric.dumbbell(2, 1000, 100) as net,
          sshd.SshdLab(net, tmp_path_factory.mktemp("sshd"), ("h1", "h2"),
                       python=sys.executable) as servers):
        inv_path = servers.workdir / "inventory.toml"
        inv_path.write_text(servers.inventory_toml())
        yield net, servers, inventory.load_inventory(inv_path)


def test_commands_run_inside_each_host_over_one_shared_connection(lab, tmp_path) -> None:
    net, _servers, inv = lab
    for host in inv.hosts:
        with ssh.Session(host, tmp_path / "ctl") as session:
            addrs = session.run(["ip", "-o", "-4", "addr", "show"]).stdout
            assert host.data_addr in addrs          # the command ran in that namespace
            other = next(h for h in inv.hosts if h is not host)
            assert other.data_addr not in addrs
            assert session.control_path.is_socket()
            t0 = time.monotonic()
            for _ in range(5):                      # channels on the master: no handshake
                assert session.run(["true"]).returncode == 0
            assert time.monotonic() - t0 < 5
            failed = session.run(["sh", "-c", "echo oops >&2; exit 3"], check=False)
            assert failed.returncode == 3 and failed.stderr.strip() == "oops"
            with pytest.raises(ssh.HostError, match=rf"^host {host.name}: sh -c .* exited 3: oops"):
                session.run(["sh", "-c", "echo oops >&2; exit 3"])
            quoted = session.run(["printf", "%s|", "a b", "$HOME", "'q'"]).stdout
            assert quoted == "a b|$HOME|'q'|"
        assert not session.control_path.exists()


def test_files_go_both_ways(lab, tmp_path) -> None:
    _net, _servers, inv = lab
    src = tmp_path / "payload.bin"
    src.write_bytes(os.urandom(200_000))
    with ssh.Session(inv.hosts[0], tmp_path / "ctl") as session:
        remote = f"/tmp/mltcp-ssh-test-{os.getpid()}.bin"
        session.put(src, remote)
        session.get(remote, tmp_path / "back.bin")
        session.run(["rm", "-f", remote])
    assert (tmp_path / "back.bin").read_bytes() == src.read_bytes()


def test_a_wrong_key_or_host_key_is_one_line(lab, tmp_path) -> None:
    net, servers, inv = lab
    stranger = tmp_path / "stranger"
    sshd._keygen(stranger, "not authorized")
    bad_key = dataclasses.replace(inv.hosts[0], key=str(stranger))
    with pytest.raises(ssh.HostError, match=r"^host h1 \(root@.* port 22\): SSH failed: .*"
                                            r"Permission denied"):
        ssh.Session(bad_key, tmp_path / "ctl1", connect_timeout_s=5).open()
    wrong = tmp_path / "known_hosts"
    other = tmp_path / "other_host"
    sshd._keygen(other, "another host")
    key_type, key = other.with_suffix(".pub").read_text().split()[:2]
    wrong.write_text(f"{inv.hosts[0].ssh} {key_type} {key}\n")
    spoofed = dataclasses.replace(inv.hosts[0], known_hosts=str(wrong))
    with pytest.raises(ssh.HostError, match=r"SSH failed: Host key verification failed; "
                                            r"check the host's key in known_hosts$"):
        ssh.Session(spoofed, tmp_path / "ctl2", connect_timeout_s=5).open()


def test_a_host_that_goes_dark_is_a_one_line_error(lab, tmp_path) -> None:
    """The management link of h2 goes down under a live connection: the next command fails
    within ServerAliveInterval x ServerAliveCountMax seconds, naming the host."""
    net, _servers, inv = lab
    h2 = inv.host("h2")
    dev = "mgmt0"      # the management link: SSH's path
    with ssh.Session(h2, tmp_path / "ctl") as session:
        session.run(["true"])
        net.check_output("h2", ["ip", "link", "set", dev, "down"])
        try:
            t0 = time.monotonic()
            with pytest.raises(ssh.HostError, match=r"^host h2: "):
                session.run(["sleep", "60"], timeout_s=60)
            assert time.monotonic() - t0 < ssh.ALIVE_INTERVAL_S * (ssh.ALIVE_COUNT + 2) + 5
        finally:
            net.check_output("h2", ["ip", "link", "set", dev, "up"])


def test_hosts_describe_themselves_and_run_their_own_doctor(lab, tmp_path) -> None:
    """Facts and doctor come back as JSON from each host's own Python and mltcp; the
    namespace hosts share this kernel, which the boot id tells."""
    _net, _servers, inv = lab
    facts = []
    for host in inv.hosts:
        with ssh.Session(host, tmp_path / "ctl") as session:
            rh = remote.RemoteHost(host, session)
            facts.append(rh.facts())
            doctor = rh.doctor()
            assert {c["name"] for c in doctor["checks"]} >= {"privileges", "kernel", "btf"}
    boot_id = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    assert [f.boot_id for f in facts] == [boot_id, boot_id]
    assert remote.kernels(facts) == {boot_id: ["h1", "h2"]}
    assert all(f.mltcp and f.kernel == os.uname().release for f in facts)
