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
a fix, before anything connects anywhere.  ``key`` and ``known_hosts`` are files on this
machine: taken relative to the inventory's directory (after ``~``), and checked to be
readable regular files then, not by ssh after it connected.  ``data_addr`` must be an
address a host can own and its peers reach (not 0.0.0.0, loopback, multicast, ...), and
``ssh`` an IP address or a DNS name (not ``10.0.0.256``, which is neither).
"""

from __future__ import annotations

import ipaddress
import os
import re
import stat
import tomllib
from dataclasses import dataclass
from pathlib import Path

from mltcp.core import validate
from mltcp.core.errors import SpecError

_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_.-]{0,62}")
_USER = re.compile(r"[a-z_][a-z0-9_.-]{0,31}")
# Linux's dev_valid_name: 1-15 bytes, no '/', ':' or whitespace, not '.' or '..'
# (narrowed here to the characters interface names use).
_IFACE = re.compile(r"[A-Za-z0-9_.@-]{1,15}")
_DNS_LABEL = re.compile(r"[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?")
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
    """An IP address (v4 or v6) or a DNS name: labels of letters, digits and '-', at
    most 253 characters, and a last label that is not all digits (no top-level domain
    is), so that ``10.0.0.256`` and ``999``, which ssh would hand to the resolver (or
    read as 0.0.3.231), are refused as neither."""
    s = validate.text(value, field, example)
    try:
        addr = ipaddress.ip_address(s)
    except ValueError:
        pass
    else:
        if addr.is_unspecified or addr.is_multicast or s == "255.255.255.255":
            raise SpecError(field, f"{s} is not an address a host can have (unspecified, "
                            "multicast or broadcast)", f"give the host's address, e.g. {example}")
        return s
    if len(s) > 253:
        raise SpecError(field, f"is {len(s)} characters: a host name has at most 253",
                        f"use the host's name or address, e.g. {example}")
    labels = s[:-1].split(".") if s.endswith(".") else s.split(".")
    if s and all(_DNS_LABEL.fullmatch(x) for x in labels):
        if not labels[-1].isdigit():
            return s
        raise SpecError(field, f"{s!r} is neither an IP address (four numbers of 0-255) nor "
                        "a host name (whose last label is never all digits)",
                        f"use e.g. {example}")
    raise SpecError(field, f"{s!r} is neither an IP address nor a host name",
                    f"use e.g. {example}")


def _path(value: object, field: str, example: str) -> str:
    s = validate.text(value, field, example)
    if not s or "\0" in s:
        raise SpecError(field, "must be a non-empty path", f"use e.g. {example}")
    return s


def _python(value: object, field: str) -> str:
    """The interpreter's path on the hosts: one path, run with the backend's own flags
    (``-m mltcp.workloads.ddp ...``), so no options and no spaces in it."""
    example = '"/opt/mltcp/.venv/bin/python"'
    s = _path(value, field, example)
    if any(c.isspace() for c in s):
        raise SpecError(field, f"{s!r} holds whitespace: it is run as one path, not a command "
                        "line", f"give the interpreter's path alone, e.g. {example} (for a "
                        "path with spaces, a symlink without them)")
    return s


def _local_file(value: object, field: str, example: str, base: Path, what: str) -> str:
    """A file this machine's ssh reads (a private key, known_hosts): ``~`` expanded, a
    relative path taken from the inventory's directory, and it must be a readable
    regular file now; ssh would otherwise fail, or ignore it, only after connecting.
    Returned as the absolute path ssh is given."""
    s = _path(value, field, example)
    path = base / Path(os.path.expanduser(s))
    shown = s if str(path) == s else f"{s} ({path})"
    try:
        st = path.stat()
    except FileNotFoundError:
        raise SpecError(field, f"{shown}: no such file",
                        f"give {what} (relative to the inventory's directory, or ~/...), "
                        f"e.g. {example}") from None
    except OSError as exc:
        raise SpecError(field, f"{shown}: {exc.strerror or exc}",
                        f"give {what} this user can read, e.g. {example}") from None
    if not stat.S_ISREG(st.st_mode):
        kind = "a directory" if stat.S_ISDIR(st.st_mode) else "not a regular file"
        raise SpecError(field, f"{shown} is {kind}", f"give {what}, e.g. {example}")
    if not os.access(path, os.R_OK):
        raise SpecError(field, f"{shown}: cannot be read by this user (Permission denied)",
                        f"give {what} this user can read, e.g. {example}")
    return str(path)


def _key(value: object, field: str, base: Path) -> str:
    """The private key: a readable file, and not readable by others when it is this
    user's, which ssh refuses ('UNPROTECTED PRIVATE KEY FILE') and then ignores."""
    path = _local_file(value, field, '"~/.ssh/id_ed25519"', base, "the SSH private key")
    st = os.stat(path)
    if st.st_uid == os.getuid() and st.st_mode & 0o077:
        raise SpecError(field, f"{path} is open to others (mode {stat.S_IMODE(st.st_mode):o}): "
                        "ssh ignores such a key", f"chmod 600 {path}")
    return path


def _common(data: dict, field: str, base: dict, directory: Path) -> dict:
    """The keys a host may inherit from [defaults], validated (local files relative to
    ``directory``, the inventory's)."""
    out = dict(base)
    if "user" in data:
        out["user"] = validate.name(data["user"], f"{field}.user", _USER,
                                    "a login name (lower case, digits, _ . -)", '"root"')
    if "port" in data:
        out["port"] = validate.port(data["port"], f"{field}.port", "22")
    if "key" in data:
        out["key"] = _key(data["key"], f"{field}.key", directory)
    if "python" in data:
        out["python"] = _python(data["python"], f"{field}.python")
    if "known_hosts" in data:
        out["known_hosts"] = _known_hosts(data["known_hosts"], f"{field}.known_hosts",
                                          directory)
    return out


def _known_hosts(value: object, field: str, base: Path) -> str:
    """The hosts' keys, checked strictly (StrictHostKeyChecking=yes): a file without one
    would have ssh refuse every host."""
    path = _local_file(value, field, '"~/.ssh/known_hosts"', base,
                       "a known_hosts file of the hosts' keys")
    try:
        with open(path, "rb") as f:
            keys = any(line.strip() and not line.lstrip().startswith(b"#")
                       for line in f)
    except OSError as exc:
        raise SpecError(field, f"{path}: {exc.strerror or exc}",
                        "give a known_hosts file this user can read") from None
    if not keys:
        raise SpecError(field, f"{path} holds no host keys: ssh, checking strictly, would "
                        "refuse every host", f"add them (ssh-keyscan -H HOST >> {path}), or "
                        "drop known_hosts to accept each host's key the first time")
    return path


def parse_inventory(data: object, source: str = "<inventory>",
                    directory: str | Path | None = None) -> Inventory:
    """Validate an inventory given as the dict tomllib produces; ``directory`` (default:
    the working directory) is where its relative ``key`` and ``known_hosts`` are."""
    where = Path.cwd() if directory is None else Path(directory)
    if not isinstance(data, dict):
        raise SpecError("inventory", "must be a TOML table", "see docs/testbed.md")
    validate.known_keys(data, "", ("defaults", "hosts"))
    defaults = data.get("defaults", {})
    if not isinstance(defaults, dict):
        raise SpecError("defaults", "must be a table", 'use [defaults] with user = "root"')
    validate.known_keys(defaults, "defaults", _DEFAULT_KEYS)
    base = _common(defaults, "defaults", {}, where)
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
        common = _common(raw, field, base, where)
        hosts.append(HostSpec(
            name=name,
            ssh=_address(raw["ssh"], f"{field}.ssh", '"10.0.0.11"'),
            data_addr=_data_addr(raw["data_addr"], f"{field}.data_addr"),
            data_iface=_iface(raw["data_iface"], f"{field}.data_iface"),
            gpus=validate.integer(raw.get("gpus", 0), f"{field}.gpus", 0, 64, "8"),
            **common))
    addrs = [ipaddress.ip_address(h.data_addr) for h in hosts]
    for i, a in enumerate(addrs):
        if addrs.index(a) != i:
            raise SpecError(f"hosts[{i}].data_addr", f"{a} is also hosts[{addrs.index(a)}]'s",
                            "give every host its own data-plane address")
    return Inventory(tuple(hosts), source)


def _iface(value: object, field: str) -> str:
    if isinstance(value, str) and ":" in value:
        raise SpecError(field, f"{value!r} is an address label, not an interface (Linux "
                        "interface names have no ':')",
                        f'give the interface it labels, e.g. "{value.split(":")[0] or "eth1"}"')
    s = validate.name(value, field, _IFACE, "an interface name of up to 15 characters "
                      "(letters, digits, _ . @ -)", '"eth1"')
    if s in (".", ".."):
        raise SpecError(field, f"{s!r} is not an interface name (Linux refuses '.' and '..')",
                        'use the data-plane NIC\'s name, as `ip link` shows it, e.g. "eth1"')
    return s


def _data_addr(value: object, field: str) -> str:
    """The data plane is addressed by IP: the datapath's rules and the collective
    library's bind address are addresses, not names.  And an address one host owns and
    the others reach: the master's is every rank's rendezvous (``--master_addr``), so
    not 0.0.0.0 or ::, loopback, multicast, broadcast or reserved; not link-local IPv6,
    and no zone (``%eth0``), which names an interface of one host only; an IPv4 address
    written as IPv4-mapped IPv6 is asked for as itself (one spelling per address)."""
    fix = 'use the address of the data-plane NIC, e.g. "192.168.50.11"'
    s = validate.text(value, field, '"192.168.50.11"')
    try:
        addr = ipaddress.ip_address(s)
    except ValueError:
        raise SpecError(field, f"{s!r} is not an IP address", fix) from None
    if isinstance(addr, ipaddress.IPv6Address):
        if addr.scope_id is not None:
            raise SpecError(field, f"{s} has a zone (%{addr.scope_id}), which names an "
                            "interface of this machine, not of the hosts",
                            f"{fix} (a global or unique-local IPv6 address, fd00::/8)")
        if addr.ipv4_mapped is not None:
            raise SpecError(field, f"{s} is the IPv4 address {addr.ipv4_mapped} written as IPv6",
                            f'write it as "{addr.ipv4_mapped}"')
    why = ("unspecified (any address)" if addr.is_unspecified else
           "loopback (this machine only)" if addr.is_loopback else
           "multicast" if addr.is_multicast else
           "broadcast" if s == "255.255.255.255" else
           "link-local IPv6 (reachable only with a zone)" if addr.version == 6
           and addr.is_link_local else
           "reserved" if addr.is_reserved or (addr.version == 4
                                              and addr in ipaddress.ip_network("0.0.0.0/8"))
           else None)
    if why:
        raise SpecError(field, f"{s} is not a host's address: {why}", fix)
    return str(addr)


def load_inventory(path: str | Path) -> Inventory:
    """Read and validate an inventory file (one-line errors for a missing or bad file)."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8-sig")   # a BOM (Windows editors) is not TOML's
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
    return parse_inventory(data, str(p), p.resolve().parent)
