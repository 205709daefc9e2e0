"""A real OpenSSH server in a fabric host's namespace: training hosts to SSH into.

The ``hosts`` backend reaches its machines over SSH; here, the machines are network
namespaces of an emulated fabric (:mod:`mltcp.lab.scenario.emulation.fabric`), each running the
distribution's own ``sshd`` (Debian's openssh-server) with a host key and a client key
generated for the occasion.  As in a real cluster, SSH goes over a management network
(one veth from this namespace to each host, 10.254.<i>.0/30, sshd bound to the host's
end) and the training traffic over the data plane (the fabric and its bottleneck).
The backend cannot tell these from remote machines: the same client, keys,
known_hosts and commands.

:class:`SshdLab` writes everything it needs into one directory (keys, configs, an
inventory file for the hosts it serves) and stops its servers on close.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from mltcp.core.errors import CapabilityError
from mltcp.lab.scenario.emulation import fabric as fabrics
from mltcp.lab.scenario.emulation import netns

SSHD = "/usr/sbin/sshd"
ALLOWED_CC = Path("/proc/sys/net/ipv4/tcp_allowed_congestion_control")
# A namespace may make only an *allowed* congestion control its default (the kernel
# refuses a restricted one outside the initial namespace, EPERM), while a real host's
# root may choose any: the lab allows the standard schemes' algorithms while it runs.
LAB_CCS = ("reno", "cubic")
PRIVSEP_DIR = Path("/run/sshd")      # Debian's sshd refuses to start without it


def missing() -> str | None:
    """Why this host cannot run namespace sshd hosts, or None."""
    for tool in (SSHD, shutil.which("ssh"), shutil.which("ssh-keygen"), shutil.which("scp")):
        if not tool or not Path(tool).exists():
            return ("OpenSSH (server and client) is not installed: "
                    "bash scripts/setup.sh installs openssh-server and openssh-client")
    return None


@dataclass
class SshdHost:
    """One namespace host's server: reached at ``mgmt_addr``, trains on ``data_addr``."""

    node: str
    mgmt_addr: str
    data_addr: str
    port: int
    proc: subprocess.Popen
    root_dev: str


@dataclass
class SshdLab:
    """sshd on ``nodes`` of ``net``, reachable with the key in ``workdir``."""

    net: fabrics.Fabric
    workdir: Path
    nodes: tuple[str, ...]
    port: int = 22
    python: str = "python3"
    servers: dict[str, SshdHost] = field(default_factory=dict)
    allowed_before: str | None = None

    @property
    def client_key(self) -> Path:
        return self.workdir / "id_ed25519"

    @property
    def known_hosts(self) -> Path:
        return self.workdir / "known_hosts"

    def start(self) -> SshdLab:
        why = missing()
        if why:
            raise CapabilityError(why)
        self.workdir.mkdir(mode=0o700, parents=True, exist_ok=True)
        PRIVSEP_DIR.mkdir(mode=0o755, exist_ok=True)
        self._allow_lab_ccs()
        _keygen(self.client_key, "mltcp lab client")
        host_key = self.workdir / "ssh_host_ed25519_key"
        _keygen(host_key, "mltcp lab host")
        authorized = self.workdir / "authorized_keys"
        authorized.write_text(self.client_key.with_suffix(".pub").read_text())
        authorized.chmod(0o600)
        host_pub = host_key.with_suffix(".pub").read_text().split()[:2]
        lines = []
        for i, node in enumerate(self.nodes):
            mgmt_addr, root_dev = self._management_link(i, node)
            lines.append(f"[{mgmt_addr}]:{self.port} {' '.join(host_pub)}" if self.port != 22
                         else f"{mgmt_addr} {' '.join(host_pub)}")
            cfg = self.workdir / f"sshd_{node}.conf"
            cfg.write_text("\n".join([
                f"ListenAddress {mgmt_addr}", f"Port {self.port}", f"HostKey {host_key}",
                f"AuthorizedKeysFile {authorized}", f"PidFile {self.workdir}/sshd_{node}.pid",
                "PermitRootLogin prohibit-password", "PasswordAuthentication no",
                "KbdInteractiveAuthentication no", "UsePAM no", "StrictModes no",
                "AcceptEnv MLTCP_* NCCL_* GLOO_*", "Subsystem sftp internal-sftp",
                "MaxSessions 64", "MaxStartups 64", "LogLevel ERROR", ""]))
            proc = self.net.run(node, [SSHD, "-D", "-e", "-f", str(cfg)],
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
            self.servers[node] = SshdHost(node, mgmt_addr, self.net.host_addr(node), self.port,
                                          proc, root_dev)
        self.known_hosts.write_text("\n".join(lines) + "\n")
        for server in self.servers.values():
            self._wait_listening(server)
        return self

    def _allow_lab_ccs(self) -> None:
        allowed = ALLOWED_CC.read_text().split()
        available = Path("/proc/sys/net/ipv4/tcp_available_congestion_control").read_text()
        wanted = [cc for cc in LAB_CCS if cc not in allowed and cc in available.split()]
        if wanted:
            self.allowed_before = " ".join(allowed)
            ALLOWED_CC.write_text(" ".join(allowed + wanted))

    def _management_link(self, index: int, node: str) -> tuple[str, str]:
        """A veth from this namespace to ``node`` (10.254.<index>.1 here, .2 there)."""
        root_dev = f"mg{os.getpid() % 100000}-{index}"
        netns.run_cmd(["ip", "link", "add", "name", root_dev, "type", "veth", "peer", "name",
                       "mgmt0", "netns", self.net.ns(node)])
        netns.run_cmd(["ip", "addr", "add", f"10.254.{index}.1/30", "dev", root_dev])
        netns.run_cmd(["ip", "link", "set", root_dev, "up"])
        netns.ip_batch(self.net.ns(node), [f"addr add 10.254.{index}.2/30 dev mgmt0",
                                           "link set mgmt0 up"])
        return f"10.254.{index}.2", root_dev

    def _wait_listening(self, server: SshdHost, timeout_s: float = 10) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if server.proc.poll() is not None:
                err = server.proc.stderr.read() if server.proc.stderr else ""
                raise CapabilityError(f"sshd on {server.node} exited: {err.strip()}")
            out = self.net.check_output(server.node, ["ss", "-Hltn", f"sport = :{server.port}"])
            if out.strip():
                return
            time.sleep(0.05)
        raise CapabilityError(f"sshd on {server.node} did not listen within {timeout_s:g} s")

    def data_iface(self, node: str) -> str:
        """The host's data-plane interface: its port on the fabric."""
        return next(p.dev for pair in self.net.ports.values() for p in pair if p.node == node)

    def inventory_toml(self) -> str:
        """An inventory of these hosts for the ``hosts`` backend (user root, this key)."""
        out = ["[defaults]", 'user = "root"', f'key = "{self.client_key}"',
               f'known_hosts = "{self.known_hosts}"', f'python = "{self.python}"',
               f"port = {self.port}", ""]
        for node, server in self.servers.items():
            out += ["[[hosts]]", f'name = "{node}"', f'ssh = "{server.mgmt_addr}"',
                    f'data_addr = "{server.data_addr}"', f'data_iface = "{self.data_iface(node)}"',
                    ""]
        return "\n".join(out)

    def close(self) -> None:
        for server in self.servers.values():
            subprocess.run(["ip", "link", "del", server.root_dev], capture_output=True,
                           check=False)
            if server.proc.poll() is None:
                server.proc.terminate()
                try:
                    server.proc.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    server.proc.kill()
                    server.proc.wait()
        self.servers.clear()
        if self.allowed_before is not None:
            ALLOWED_CC.write_text(self.allowed_before)
            self.allowed_before = None

    def __enter__(self) -> SshdLab:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()


def _keygen(path: Path, comment: str) -> None:
    if path.exists():
        return
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment,
                    "-f", str(path)], check=True, capture_output=True)
