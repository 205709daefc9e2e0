"""Classification rules: which connections belong to a job, by address prefix and port range.

A rule is *one* condition set, all of which must hold (AND): a remote address prefix
and a remote port range (``--dst 10.0.0.0/24:29500-29600``), a remote port range alone
(``--port 29500-29600``: any address), or a local (listening) port range
(``--local-port 29500``).  A job's rules are alternatives (OR): a connection that
matches any one of them joins the job.

Syntax of ``--dst`` (IPv6 in brackets whenever a port follows, so the colons of the
address are never read as a port)::

    10.0.0.7            one host, any port        10.0.0.0/24:29500-29600
    10.0.0.7:29500      one host, one port        fd00::7   fd00::/64   (no port)
    10.0.0.0/24         a network, any port       [fd00::/64]:29500   [fd00::7]:29500-29510

An address without a prefix length is one host, also when it ends in .0; a prefix with
host bits set (10.0.0.1/24) is refused: it is a typo for 10.0.0.0/24 or for the host.

Precedence, when rules of several jobs overlap (what :func:`compile_rules` encodes and
the kernel's ``mltcp_rule_lookup`` applies): the remote rules first, the longest
address prefix that holds the remote address (a port-only rule is a prefix of length
0), then among its rules and those of the shorter prefixes the narrowest port range;
only a connection that no remote rule takes is tried against the local-port rules,
narrowest range first.  Identical rules of two jobs are refused.

Limits (the kernel's, refused with a one-line error): MAX_PREFIXES distinct prefixes
(both families), and MAX_PORT_RULES port ranges per prefix counting the rules of every
shorter prefix that contains it and the port-only rules (the kernel keeps them in the
prefix's own list, so one look-up answers); MAX_PORT_RULES local-port rules.
"""

from __future__ import annotations

import ctypes
import ipaddress
import socket
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from mltcp.core import validate
from mltcp.core.errors import SpecError
from mltcp.host import maps

MAX_PORT_RULES = 32       # MLTCP_PORT_RULES in kernel/mltcp.h
MAX_PREFIXES = 1024       # MLTCP_MAX_PREFIXES
FAMILY_BITS = 32          # the trie key's family word, counted in its prefixlen
ANY_PORT = (0, 65535)

Network = ipaddress.IPv4Network | ipaddress.IPv6Network
DST_FIX = ("write ADDR[/LEN][:PORT[-PORT]] with IPv6 in brackets before a port, e.g. "
           "10.0.0.0/24:29500-29600, 10.0.0.7:29500, [fd00::/64]:29500 or fd00::/64")


def _network(text: str) -> Network:
    """An address or prefix; an IPv4-mapped IPv6 prefix is the IPv4 one (the kernel
    matches ::ffff:a.b.c.d connections against IPv4 rules)."""
    try:
        net = ipaddress.ip_network(text, strict=True)
    except ValueError as exc:
        if "host bits set" not in str(exc):
            raise SpecError("rule", f"{text!r} is not an address or prefix", DST_FIX) from None
        loose = ipaddress.ip_network(text, strict=False)
        host = text.partition("/")[0]
        raise SpecError("rule", f"{text} has host bits set (the prefix is {loose})",
                        f"write {loose} for the network or {host} for the one host") from None
    mapped = ipaddress.ip_network("::ffff:0:0/96")
    if net.version == 6 and net.subnet_of(mapped):           # type: ignore[arg-type]
        v4 = ipaddress.ip_network(f"{net.network_address.ipv4_mapped}/{net.prefixlen - 96}")
        return v4
    return net


@dataclass(frozen=True)
class Rule:
    """One rule: every condition it names must hold.

    ``address``: a prefix (``10.0.0.0/24``, ``fd00::/64``; a host is ``/32``/``/128``) or
    None for any address; ``port``..``port_hi``: the port range (``port_hi`` 0: the one
    port ``port``; ``port`` 0: any port); ``local``: the ports are the local (listening)
    ports and there is no address.  Normalised on construction (``10.0.0.7`` becomes
    ``10.0.0.7/32``), so equal rules compare equal whichever way they were written."""

    address: str | None = None
    port: int = 0
    port_hi: int = 0
    local: bool = False

    def __post_init__(self) -> None:
        if self.address is not None:
            if self.local:
                raise SpecError("rule", "a local-port rule has no address",
                                "give the address in its own --dst rule")
            object.__setattr__(self, "address", _network(str(self.address)).with_prefixlen)
        if self.port_hi == 0 and self.port:
            object.__setattr__(self, "port_hi", self.port)
        if self.port or self.port_hi:
            validate.port_range(f"{self.port}-{self.port_hi}", "rule")
        if self.port == 0 and (self.address is None or self.network.prefixlen == 0):
            raise SpecError("rule", "matches every connection",
                            "give an address prefix longer than /0 or a port in each rule")

    @property
    def network(self) -> Network:
        assert self.address is not None
        return ipaddress.ip_network(self.address)

    @property
    def ports(self) -> tuple[int, int]:
        return (self.port, self.port_hi) if self.port else ANY_PORT

    @property
    def single_host(self) -> bool:
        net = self.network
        return net.prefixlen == net.max_prefixlen

    def _ports_text(self) -> str:
        lo, hi = self.ports
        if (lo, hi) == ANY_PORT:
            return "any port"
        return f"port {lo}" if lo == hi else f"port {lo}-{hi}"

    def describe(self) -> str:
        """How the rule reads: ``dst 10.0.0.0/24 and port 29500-29600``,
        ``dst 10.0.0.7 (one host) and any port``, ``port 29500 (any address)``."""
        if self.local:
            return f"local {self._ports_text()}"
        if self.address is None:
            return f"{self._ports_text()} (any address)"
        net = self.network
        dst = f"{net.network_address} (one host)" if self.single_host else net.with_prefixlen
        return f"dst {dst} and {self._ports_text()}"

    def warning(self) -> str | None:
        """A likely mistake worth a line: a single host whose address looks like a network."""
        if self.address is None or not self.single_host:
            return None
        host = self.network.network_address
        looks_like_net = (host.packed[-1] == 0 if host.version == 4
                          else host.packed[-2:] == b"\0\0")
        if not looks_like_net:
            return None
        guess = ipaddress.ip_network(f"{host}/{24 if host.version == 4 else 64}", strict=False)
        return (f"{host} has no prefix length, so it is one host; for the network write "
                f"{guess}" + (f":{self.port}" if host.version == 4 and self.port else ""))

    def identity(self) -> tuple:
        """What makes two rules the same rule (two jobs may not both own it)."""
        return (self.address, self.ports, self.local)


def parse_dst(text: object, field_name: str) -> Rule:
    """One ``--dst ADDR[/LEN][:PORT[-PORT]]`` (``[IPV6[/LEN]]:PORT[-PORT]``) -> one rule."""
    if not isinstance(text, str) or not text.strip():
        raise SpecError(field_name, f"{text!r} is not an address", DST_FIX)
    s = text.strip()
    if s.startswith("["):
        addr, close, rest = s[1:].partition("]")
        if not close or (rest and not rest.startswith(":")):
            raise SpecError(field_name, f"{s!r}: after [IPV6] comes :PORT or nothing",
                            DST_FIX)
        ports = rest[1:] if rest else None
        if ports == "":
            raise SpecError(field_name, f"{s!r} ends in ':' without a port", DST_FIX)
    elif s.count(":") == 1:                      # IPv4[/LEN]:PORT
        addr, _, ports = s.partition(":")
    elif ":" in s:                               # bare IPv6[/LEN], no port
        addr, ports = s, None
        if "/" in s and ":" in s.partition("/")[2]:
            raise SpecError(field_name, f"{s!r}: an IPv6 prefix with a port needs brackets",
                            f"write [{s.rpartition(':')[0]}]:{s.rpartition(':')[2]}")
    else:
        addr, ports = s, None
    try:
        lo, hi = validate.port_range(ports, field_name) if ports is not None else (0, 0)
        return Rule(address=addr, port=lo, port_hi=hi)
    except SpecError as exc:
        raise SpecError(field_name, exc.problem, exc.fix) from None


def port_rule(text: object, field_name: str, local: bool = False) -> Rule:
    """One ``--port`` / ``--local-port`` value (a port or a range) -> one rule."""
    lo, hi = validate.port_range(text, field_name)
    return Rule(port=lo, port_hi=hi, local=local)


# -- compiled into the kernel's maps --------------------------------------------------

PrefixId = tuple[int, bytes, int]      # (family, 16 address bytes, prefix length)
PortEntry = tuple[int, int, int]       # (lo, hi, job id)


def _prefix_ids(rule: Rule) -> list[PrefixId]:
    """The trie prefixes a remote rule is stored under (a port-only rule: both families)."""
    if rule.address is None:
        return [(socket.AF_INET, bytes(16), 0), (socket.AF_INET6, bytes(16), 0)]
    net = rule.network
    fam = socket.AF_INET if net.version == 4 else socket.AF_INET6
    return [(fam, net.network_address.packed.ljust(16, b"\0"), net.prefixlen)]


def _contains(outer: PrefixId, inner: PrefixId) -> bool:
    fam, addr, plen = outer
    if fam != inner[0] or plen > inner[2]:
        return False
    whole, rest = divmod(plen, 8)
    if addr[:whole] != inner[1][:whole]:
        return False
    return not rest or (addr[whole] >> (8 - rest)) == (inner[1][whole] >> (8 - rest))


@dataclass
class Table:
    """The rules of every job as the kernel holds them: each prefix's port list in
    precedence order (its own rules and those of every prefix containing it) and the
    local-port list.  ``lookup`` is the kernel's look-up, in Python."""

    prefixes: dict[PrefixId, list[PortEntry]] = field(default_factory=dict)
    local: list[PortEntry] = field(default_factory=list)

    def lookup(self, addr: str | None, rport: int, lport: int) -> int:
        """The job id the kernel gives a connection to ``addr``:``rport`` from local port
        ``lport`` (``addr`` None: a listening socket), 0 for none."""
        if addr is not None:
            ip = ipaddress.ip_address(addr)
            if ip.version == 6 and ip.ipv4_mapped is not None:
                ip = ip.ipv4_mapped
            fam = socket.AF_INET if ip.version == 4 else socket.AF_INET6
            query = (fam, ip.packed.ljust(16, b"\0"), 128 if fam == socket.AF_INET6 else 32)
            best = max((p for p in self.prefixes if _contains(p, query)),
                       key=lambda p: p[2], default=None)
            if best is not None:
                job = _first_match(self.prefixes[best], rport)
                if job:
                    return job
        return _first_match(self.local, lport)


def _first_match(entries: Sequence[PortEntry], port: int) -> int:
    for lo, hi, job in entries:
        if lo <= port <= hi:
            return job
    return 0


def _order(entry: tuple[int, PortEntry]) -> tuple[int, int, int, int]:
    """Precedence: longer prefix, then narrower range, then lower first port, then job."""
    plen, (lo, hi, job) = entry
    return (-plen, hi - lo, lo, job)


def compile_rules(owned: Iterable[tuple[Rule, int]], field_name: str = "rule",
                  names: Mapping[int, str] | None = None) -> Table:
    """Every job's rules -> the kernel's table; refuses identical rules of two jobs and
    anything beyond the kernel's limits (one line naming what and how to fix it).
    ``names``: job id -> name, for the messages."""
    seen: dict[tuple, int] = {}
    own: dict[PrefixId, list[PortEntry]] = {}
    local: list[PortEntry] = []
    for rule, job in owned:
        ident = rule.identity()
        owner = seen.get(ident)
        if owner is not None and owner != job:
            def name(i: int) -> str:
                return names[i] if names and i in names else f"id {i}"
            raise SpecError(field_name, f"{rule.describe()} (job {name(job)!r}) already "
                            f"belongs to job {name(owner)!r}",
                            f"detach {name(owner)} or change the rule")
        if owner == job:
            continue
        seen[ident] = job
        lo, hi = rule.ports
        if rule.local:
            local.append((lo, hi, job))
            continue
        for pid in _prefix_ids(rule):
            own.setdefault(pid, []).append((lo, hi, job))
    if len(own) > MAX_PREFIXES:
        raise SpecError(field_name, f"{len(own)} address prefixes, the kernel holds "
                        f"{MAX_PREFIXES}", "merge hosts into shorter prefixes")
    if len(local) > MAX_PORT_RULES:
        raise SpecError(field_name, f"{len(local)} local-port rules, the kernel holds "
                        f"{MAX_PORT_RULES}", "merge ports into ranges")
    table = Table(local=[e for _, e in sorted(((0, e) for e in local), key=_order)])
    by_len = sorted(own, key=lambda p: p[2])
    for pid in own:
        entries = [(c[2], e) for c in by_len if _contains(c, pid) for e in own[c]]
        if len(entries) > MAX_PORT_RULES:
            fam, addr, plen = pid
            net = ipaddress.ip_network((addr[:4] if fam == socket.AF_INET else addr, plen))
            what = (f"{len(entries)} port-only rules" if plen == 0 else
                    f"{len(entries)} port rules apply to {net} (its own, those of the "
                    "prefixes that contain it and the port-only rules)")
            raise SpecError(field_name, f"{what}; the kernel holds {MAX_PORT_RULES}",
                            "merge ports into ranges or prefixes into shorter ones")
        table.prefixes[pid] = [e for _, e in sorted(entries, key=_order)]
    return table


def encode_prefix(pid: PrefixId) -> maps.PrefixKey:
    fam, addr, plen = pid
    key = maps.PrefixKey(prefixlen=FAMILY_BITS + plen, family=fam)
    key.addr[:] = maps.addr_words(addr)
    return key


def encode_ports(entries: Sequence[PortEntry]) -> maps.PortRules:
    value = maps.PortRules(count=len(entries))
    for i, (lo, hi, job) in enumerate(entries):
        value.rule[i] = maps.PortRule(lo=lo, hi=hi, job_id=job)
    return value


def write(table: Table) -> None:
    """Make the kernel's rule maps hold ``table``: every entry written first (each
    replaced whole by the kernel), then prefixes no rule uses any more deleted."""
    with maps.PinnedMap("mltcp_prefix_rules") as trie:
        wanted = {bytes(encode_prefix(pid)): pid for pid in table.prefixes}
        for pid, entries in table.prefixes.items():
            trie.put(encode_prefix(pid), encode_ports(entries))
        for key in trie.keys(maps.PrefixKey):
            if bytes(key) not in wanted:
                trie.delete(key)
    with maps.PinnedMap("mltcp_local_rules") as local:
        local.put(ctypes.c_uint32(0), encode_ports(table.local))

