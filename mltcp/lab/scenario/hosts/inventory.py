"""The inventory of the ``hosts`` backend: which machines a scenario's jobs run on.

One TOML file lists the training hosts: how to reach each over SSH (management
address, user, port, key), where its data-plane traffic flows (the address gloo/NCCL
bind to and its interface: the one whose congestion control MLTCP changes), how many
GPUs it has, and which Python on it has ``mltcp`` (and ``mltcp[torch]``) installed.
``[defaults]`` fills what every host shares::

    [defaults]
    user = "root"
    key = "~/.ssh/mltcp_ed25519"
    python = "/opt/mltcp/.venv/bin/python"

    [[hosts]]
    name = "gpu1"
    ssh = "10.0.0.11"
    data_addr = "192.168.50.11"
    data_iface = "ens1f0"
    gpus = 8

The file is validated once, every refusal naming its field (``hosts[1].data_addr``) and
a fix, before anything connects anywhere.
"""

from __future__ import annotations

import ipaddress
import re
import tomllib
from dataclasses import dataclass
from pathlib import Path

from mltcp.core import validate
from mltcp.core.errors import SpecError

_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_.-]{0,62}")
_USER = re.compile(r"[a-z_][a-z0-9_.-]{0,31}")
_IFACE = re.compile(r"[A-Za-z0-9_.:@-]{1,15}")
_HOST_KEYS = ("name", "ssh", "user", "port", "key", "python", "data_addr", "data_iface",
              "gpus", "known_hosts")
_DEFAULT_KEYS = ("user", "port", "key", "python", "known_hosts")


@dataclass(frozen=True)
class HostSpec:
    """One training host.

    ``ssh`` is the address (or DNS name) SSH reaches; ``data_addr`` the address the
    collective library's traffic uses (often a second NIC); ``known_hosts`` a file of
    host keys to check against (strict checking), None to accept a new key once.
    """

    name: str
    ssh: str
    data_addr: str
    data_iface: str
    user: str = "root"
    port: int = 22
    key: str | None = None
    python: str = "python3"
    gpus: int = 0
    known_hosts: str | None = None

    @property
    def destination(self) -> str:
        return f"{self.user}@{self.ssh}"


@dataclass(frozen=True)
class Inventory:
    hosts: tuple[HostSpec, ...]
    source: str = "<inventory>"

    def host(self, name: str) -> HostSpec:
        for h in self.hosts:
            if h.name == name:
                return h
        raise SpecError("placement", f"no host named {name!r} in {self.source}",
                        f"use one of: {', '.join(h.name for h in self.hosts)}")

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(h.name for h in self.hosts)


def _address(value: object, field: str, example: str) -> str:
    """An IP address (v4 or v6) or a DNS name."""
    s = validate.text(value, field, example)
    try:
        ipaddress.ip_address(s)
        return s
    except ValueError:
        pass
    labels = s.rstrip(".").split(".")
    if s and all(re.fullmatch(r"[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?", x) for x in labels):
        return s
    raise SpecError(field, f"{s!r} is neither an IP address nor a host name",
                    f"use e.g. {example}")


def _path(value: object, field: str, example: str) -> str:
    s = validate.text(value, field, example)
    if not s or "\0" in s:
        raise SpecError(field, "must be a non-empty path", f"use e.g. {example}")
    return s


def _common(data: dict, field: str, base: dict) -> dict:
    """The keys a host may inherit from [defaults], validated."""
    out = dict(base)
    if "user" in data:
        out["user"] = validate.name(data["user"], f"{field}.user", _USER,
                                    "a login name (lower case, digits, _ . -)", '"root"')
    if "port" in data:
        out["port"] = validate.port(data["port"], f"{field}.port", "22")
    if "key" in data:
        out["key"] = _path(data["key"], f"{field}.key", '"~/.ssh/id_ed25519"')
    if "python" in data:
        out["python"] = _path(data["python"], f"{field}.python",
                              '"/opt/mltcp/.venv/bin/python"')
    if "known_hosts" in data:
        out["known_hosts"] = _path(data["known_hosts"], f"{field}.known_hosts",
                                   '"~/.ssh/known_hosts"')
    return out


def parse_inventory(data: object, source: str = "<inventory>") -> Inventory:
    """Validate an inventory given as the dict tomllib produces."""
    if not isinstance(data, dict):
        raise SpecError("inventory", "must be a TOML table", "see docs/testbed.md")
    validate.known_keys(data, "", ("defaults", "hosts"))
    defaults = data.get("defaults", {})
    if not isinstance(defaults, dict):
        raise SpecError("defaults", "must be a table", 'use [defaults] with user = "root"')
    validate.known_keys(defaults, "defaults", _DEFAULT_KEYS)
    base = _common(defaults, "defaults", {})
    raw_hosts = data.get("hosts")
    if not isinstance(raw_hosts, list) or not raw_hosts:
        raise SpecError("hosts", "at least one [[hosts]] entry is needed",
                        'add [[hosts]] with name, ssh, data_addr and data_iface')
    hosts: list[HostSpec] = []
    for i, raw in enumerate(raw_hosts):
        field = f"hosts[{i}]"
        if not isinstance(raw, dict):
            raise SpecError(field, "must be a table", "write it as [[hosts]]")
        validate.known_keys(raw, field, _HOST_KEYS)
        for key in ("name", "ssh", "data_addr", "data_iface"):
            if key not in raw:
                raise SpecError(f"{field}.{key}", "missing", f"add {key} = ... to {field}")
        name = validate.name(raw["name"], f"{field}.name", _NAME,
                             "a letter then letters, digits, _ . -", '"gpu1"')
        if name in (h.name for h in hosts):
            raise SpecError(f"{field}.name", f"{name!r} is listed twice",
                            "give every host its own name")
        common = _common(raw, field, base)
        hosts.append(HostSpec(
            name=name,
            ssh=_address(raw["ssh"], f"{field}.ssh", '"10.0.0.11"'),
            data_addr=_data_addr(raw["data_addr"], f"{field}.data_addr"),
            data_iface=validate.name(raw["data_iface"], f"{field}.data_iface", _IFACE,
                                     "an interface name of up to 15 characters", '"eth1"'),
            gpus=validate.integer(raw.get("gpus", 0), f"{field}.gpus", 0, 64, "8"),
            **common))
    addrs = [h.data_addr for h in hosts]
    for i, a in enumerate(addrs):
        if addrs.index(a) != i:
            raise SpecError(f"hosts[{i}].data_addr", f"{a} is also hosts[{addrs.index(a)}]'s",
                            "give every host its own data-plane address")
    return Inventory(tuple(hosts), source)


def _data_addr(value: object, field: str) -> str:
    """The data plane is addressed by IP: the datapath's rules and the collective
    library's bind address are addresses, not names."""
    s = validate.text(value, field, '"192.168.50.11"')
    try:
        return str(ipaddress.ip_address(s))
    except ValueError:
        raise SpecError(field, f"{s!r} is not an IP address",
                        'use the address of the data-plane NIC, e.g. "192.168.50.11"') from None


def load_inventory(path: str | Path) -> Inventory:
    """Read and validate an inventory file (one-line errors for a missing or bad file)."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise SpecError("--inventory", f"cannot read {p}: {exc.strerror or exc}",
                        "give the path of an inventory TOML file") from None
    except UnicodeDecodeError:
        raise SpecError("--inventory", f"{p} is not UTF-8 text",
                        "give the path of an inventory TOML file") from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise SpecError("--inventory", f"{p} is not valid TOML ({exc})",
                        "fix the syntax at the position named") from None
    return parse_inventory(data, str(p))
