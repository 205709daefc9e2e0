"""Classification rules without a kernel: the syntax of --dst/--port/--local-port, what a
rule reads as, how every job's rules are compiled into the kernel's prefix trie and port
lists, and the precedence the kernel's look-up gives (its Python mirror, checked against
a direct definition of the precedence on random rule sets)."""

from __future__ import annotations

import ctypes
import ipaddress
import json
import random
import socket
import subprocess
import sys

import pytest

from mltcp.core.errors import SpecError
from mltcp.host import jobfile, jobs, maps, rules


def dst(text: str) -> rules.Rule:
    return rules.parse_dst(text, "dst")


# --------------------------------------------------------------------------- syntax


@pytest.mark.parametrize("text,reads", [
    ("10.0.0.0/24", "dst 10.0.0.0/24 and any port"),
    ("10.0.0.0/24:29500", "dst 10.0.0.0/24 and port 29500"),
    ("10.0.0.0/24:29500-29600", "dst 10.0.0.0/24 and port 29500-29600"),
    ("10.0.0.7", "dst 10.0.0.7 (one host) and any port"),
    ("10.0.0.7:29500", "dst 10.0.0.7 (one host) and port 29500"),
    ("10.0.0.0:29500", "dst 10.0.0.0 (one host) and port 29500"),
    ("fd00::/64", "dst fd00::/64 and any port"),
    ("fd00::7", "dst fd00::7 (one host) and any port"),
    ("[fd00::/64]:29500", "dst fd00::/64 and port 29500"),
    ("[fd00::7]:29500-29510", "dst fd00::7 (one host) and port 29500-29510"),
    ("[fd00::/64]", "dst fd00::/64 and any port"),
    (" 10.1.0.0/16:80 ", "dst 10.1.0.0/16 and port 80"),
    # IPv4-mapped IPv6 is the IPv4 rule (the kernel matches such sockets as IPv4)
    ("[::ffff:10.0.0.0/120]:80", "dst 10.0.0.0/24 and port 80"),
    ("::ffff:10.0.0.7", "dst 10.0.0.7 (one host) and any port"),
])
def test_one_dst_is_one_rule_of_address_and_port(text, reads):
    assert dst(text).describe() == reads


@pytest.mark.parametrize("text,problem,fix", [
    ("10.0.0.1/24", "10.0.0.1/24 has host bits set (the prefix is 10.0.0.0/24)",
     "write 10.0.0.0/24 for the network or 10.0.0.1 for the one host"),
    ("[fd00::1/64]:80", "fd00::1/64 has host bits set (the prefix is fd00::/64)",
     "write fd00::/64 for the network or fd00::1 for the one host"),
    ("fd00::/64:80", "'fd00::/64:80': an IPv6 prefix with a port needs brackets",
     "write [fd00::/64]:80"),
    ("10.0.0.0/24:29600-29500", "'29600-29500' runs backwards", "write 29500-29600"),
    ("10.0.0.0/24:x", "'x' is not a port or a port range", "e.g. 29500 or 29500-29600"),
    ("10.0.0.0/24:0", "'0' is out of range", "(1..65535)"),
    ("10.0.0.0/24:65536", "'65536' is out of range", "(1..65535)"),
    ("10.0.0.0/24:", "'' is not a port", "29500-29600"),
    ("[fd00::7]80", "after [IPV6] comes :PORT or nothing", "[fd00::/64]:29500"),
    ("[fd00::7]:", "ends in ':' without a port", "[fd00::/64]:29500"),
    ("10.0.0.0/33", "'10.0.0.0/33' is not an address or prefix", "10.0.0.0/24:29500-29600"),
    ("banana:80", "'banana' is not an address or prefix", "10.0.0.0/24:29500-29600"),
    ("0.0.0.0/0", "matches every connection", "a port in each rule"),
    ("", "'' is not an address", "10.0.0.7:29500"),
])
def test_a_bad_dst_is_one_line_naming_the_flag_and_the_fix(text, problem, fix):
    with pytest.raises(SpecError) as info:
        dst(text)
    err = info.value
    assert err.field == "dst" and problem in err.problem and fix in err.fix, str(err)
    assert "\n" not in str(err)


def test_port_flags_take_a_port_or_a_range():
    assert rules.port_rule("29500-29600", "port").describe() == "port 29500-29600 (any address)"
    assert rules.port_rule(29500, "port").ports == (29500, 29500)
    assert rules.port_rule("29500-29510", "local_port", local=True).describe() == \
        "local port 29500-29510"
    for bad in ("0", "70000", "10-5", "a-b", 1.5, True, "80-"):
        with pytest.raises(SpecError) as info:
            rules.port_rule(bad, "port")
        assert info.value.field == "port"


def test_rules_are_normalised_so_equal_rules_compare_equal():
    assert dst("10.0.0.7:80") == rules.Rule("10.0.0.7", 80) == rules.Rule("10.0.0.7/32", 80, 80)
    assert dst("[FD00:0::7]:80") == rules.Rule("fd00::7", 80)
    assert rules.Rule(port=7) == rules.Rule(port=7, port_hi=7)
    assert dst("10.0.0.0/24").ports == rules.ANY_PORT
    with pytest.raises(SpecError, match="a local-port rule has no address"):
        rules.Rule("10.0.0.7", 80, local=True)
    with pytest.raises(SpecError, match="matches every connection"):
        rules.Rule()


def test_a_host_that_looks_like_a_network_gets_a_note():
    assert dst("10.0.0.0:29500").warning() == (
        "10.0.0.0 has no prefix length, so it is one host; for the network write "
        "10.0.0.0/24:29500")
    assert "fd00::/64" in dst("[fd00::]:80").warning()
    assert dst("10.0.0.7:29500").warning() is None
    assert dst("10.0.0.0/24:29500").warning() is None


def test_separate_flags_are_alternatives_and_attach_says_so():
    """--dst X --port P is two rules (OR); --dst X:P is one (AND)."""
    spec = jobfile.spec_from_fields({"name": "bert", "budget": 1000,
                                     "dst": ["10.0.0.0:29500", "10.0.0.0/24:29500-29600"],
                                     "port": ["29700"], "local_port": [7000]})
    assert spec.describe_rules() == [
        "rule 1: dst 10.0.0.0 (one host) and port 29500",
        "rule 2: dst 10.0.0.0/24 and port 29500-29600",
        "rule 3: port 29700 (any address)",
        "rule 4: local port 7000",
        "a connection that matches any one of these rules joins the job",
        "note: 10.0.0.0 has no prefix length, so it is one host; for the network write "
        "10.0.0.0/24:29500",
    ]
    one = jobfile.spec_from_fields({"name": "b", "budget": 1000, "dst": ["10.0.0.0/24:80"]})
    assert one.describe_rules() == ["rule 1: dst 10.0.0.0/24 and port 80"]


def test_a_job_file_takes_ranges_and_prefixes(tmp_path):
    path = tmp_path / "jobs.toml"
    path.write_text("[[job]]\nname = 'a'\nbudget = 5000\n"
                    "dst = ['10.0.0.0/24:29500-29600', '[fd00::/64]:29500']\n"
                    "port = [29700, '29800-29810']\nlocal_port = '7000-7010'\n")
    [spec] = jobfile.load_file(path).jobs
    assert spec.rules == (rules.Rule("10.0.0.0/24", 29500, 29600), rules.Rule("fd00::/64", 29500),
                          rules.Rule(port=29700), rules.Rule(port=29800, port_hi=29810),
                          rules.Rule(port=7000, port_hi=7010, local=True))
    path.write_text("[[job]]\nname = 'a'\nbudget = 5000\ndst = ['10.0.0.1/24:80']\n")
    with pytest.raises(SpecError) as info:
        jobfile.load_file(path)
    assert info.value.field == f"{path}: job[0].dst" and "host bits set" in info.value.problem
    path.write_text("[[job]]\nname = 'a'\nbudget = 5000\nlocal_port = ['9-1']\n")
    with pytest.raises(SpecError, match="job\\[0\\].local_port: '9-1' runs backwards"):
        jobfile.load_file(path)


def test_rules_survive_the_registry_and_old_entries_still_load():
    spec = jobfile.spec_from_fields({"name": "a", "budget": 1000,
                                     "dst": ["10.0.0.0/24:29500-29600"], "local_port": [7]})
    assert jobs.JobSpec.from_json(json.loads(json.dumps(spec.to_json()))) == spec
    old = {**spec.to_json(), "rules": [{"address": "10.0.0.7", "port": 80, "local": False}]}
    assert jobs.JobSpec.from_json(old).rules == (rules.Rule("10.0.0.7/32", 80, 80),)


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "mltcp.cli", *args], capture_output=True,
                          text=True, timeout=60)


@pytest.mark.parametrize("flags,line", [
    (["--port", "29600-29500"], "mltcp: error: argument --port: '29600-29500' runs backwards; "
                                "write 29500-29600 (see `mltcp job attach --help`)"),
    (["--local-port", "0"], "mltcp: error: argument --local-port: '0' is out of range; give a "
                            "port or a range of ports, e.g. 29500 or 29500-29600 (1..65535) "
                            "(see `mltcp job attach --help`)"),
    (["--dst", "10.0.0.1/24:80"], "mltcp: error: dst: 10.0.0.1/24 has host bits set (the "
                                  "prefix is 10.0.0.0/24); write 10.0.0.0/24 for the network "
                                  "or 10.0.0.1 for the one host"),
])
def test_cli_refuses_bad_rules_in_one_line_before_touching_anything(flags, line):
    proc = _cli("job", "attach", "x", "--budget", "1MB", *flags)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [line]


# --------------------------------------------------------------------------- the table


def _owned(*items: tuple[str, int]) -> list[tuple[rules.Rule, int]]:
    """("10.0.0.0/24:80", 1), ("port 80", 2), ("local 7000", 3) -> rules with job ids."""
    out = []
    for text, job in items:
        if text.startswith("port "):
            out.append((rules.port_rule(text[5:], "port"), job))
        elif text.startswith("local "):
            out.append((rules.port_rule(text[6:], "local_port", local=True), job))
        else:
            out.append((dst(text), job))
    return out


def test_longest_prefix_then_narrowest_port_wins():
    table = rules.compile_rules(_owned(
        ("10.0.0.0/8", 1), ("10.0.0.0/24:29500-29600", 2), ("10.0.0.0/24:29550", 3),
        ("port 29550", 4), ("local 7000-7010", 5), ("local 7005", 6),
        ("[fd00::/64]:29500", 7), ("fd00::7", 8)))
    assert table.lookup("10.0.0.5", 29550, 1) == 3      # /24, the one port
    assert table.lookup("10.0.0.5", 29501, 1) == 2      # /24, the range
    assert table.lookup("10.0.0.5", 29700, 1) == 1      # not in the /24's ports: the /8
    assert table.lookup("10.1.0.5", 29550, 1) == 1      # the /8 beats the port-only rule
    assert table.lookup("11.0.0.1", 29550, 1) == 4      # no prefix: the port-only rule
    assert table.lookup("11.0.0.1", 80, 7005) == 6      # no remote rule: local, narrowest
    assert table.lookup("11.0.0.1", 80, 7001) == 5
    assert table.lookup(None, 0, 7001) == 5             # a listening socket: local only
    assert table.lookup(None, 0, 29550) == 0
    assert table.lookup("::ffff:10.0.0.5", 29550, 1) == 3   # IPv4-mapped is IPv4
    assert table.lookup("fd00::1", 29500, 1) == 7
    assert table.lookup("fd00::7", 29500, 1) == 8       # /128 beats /64
    assert table.lookup("fd00::1", 29550, 1) == 4
    assert table.lookup("fd01::1", 29501, 1) == 0


def _direct(owned: list[tuple[rules.Rule, int]], addr: str | None, rport: int,
            lport: int) -> int:
    """The precedence as documented, computed directly from the rules: of the remote rules
    that hold the connection, the longest prefix, then the narrowest range, the lower
    first port, the lower job id; else the narrowest local rule."""
    ip = None if addr is None else ipaddress.ip_address(addr)
    if ip is not None and ip.version == 6 and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    remote, local = [], []
    for rule, job in owned:
        lo, hi = rule.ports
        if rule.local:
            if lo <= lport <= hi:
                local.append((hi - lo, lo, job))
        elif ip is not None and lo <= rport <= hi:
            plen = 0 if rule.address is None else rule.network.prefixlen
            if rule.address is None or ip in rule.network:
                remote.append((-plen, hi - lo, lo, job))
    best = min(remote or local, default=None)
    return best[-1] if best else 0


def _random_rules(rng: random.Random, n: int) -> list[tuple[rules.Rule, int]]:
    out: dict[tuple, tuple[rules.Rule, int]] = {}
    for _ in range(n):
        kind = rng.random()
        lo = rng.choice([0, 0, 100, 110, 120, 150])
        hi = lo + rng.choice([0, 5, 10, 40]) if lo else 0
        if kind < 0.15:
            rule = rules.Rule(port=lo or 100, port_hi=hi or (lo or 100), local=True)
        elif kind < 0.3:
            rule = rules.Rule(port=lo or 110, port_hi=hi or (lo or 110))
        elif kind < 0.75:
            plen = rng.choice([8, 16, 20, 24, 28, 32])
            net = ipaddress.ip_network(f"10.{rng.randrange(2)}.{rng.randrange(4)}.0/{plen}",
                                       strict=False)
            if plen == 8 and not lo:
                lo, hi = 100, 200
            rule = rules.Rule(net.with_prefixlen, lo, hi)
        else:
            plen = rng.choice([32, 48, 64, 120, 128])
            net = ipaddress.ip_network(f"fd00:0:{rng.randrange(3)}::{rng.randrange(4)}/{plen}",
                                       strict=False)
            rule = rules.Rule(net.with_prefixlen, lo, hi)
        out.setdefault(rule.identity(), (rule, rng.randrange(1, 9)))
    return list(out.values())


def test_the_compiled_table_gives_the_documented_precedence_on_random_rule_sets():
    rng = random.Random(12)
    queries = 0
    for _ in range(300):
        owned = _random_rules(rng, rng.randrange(1, 12))
        table = rules.compile_rules(owned)
        for _ in range(40):
            addr = rng.choice([None, f"10.{rng.randrange(2)}.{rng.randrange(4)}.{rng.randrange(9)}",
                               f"::ffff:10.0.{rng.randrange(4)}.{rng.randrange(9)}",
                               f"fd00:0:{rng.randrange(3)}::{rng.randrange(5)}", "192.0.2.1"])
            rport, lport = rng.randrange(95, 205), rng.randrange(95, 205)
            assert table.lookup(addr, rport, lport) == _direct(owned, addr, rport, lport), (
                owned, addr, rport, lport)
            queries += 1
    assert queries == 12_000


def test_identical_rules_of_two_jobs_are_refused_the_same_rule_twice_is_one():
    with pytest.raises(SpecError) as info:
        rules.compile_rules(_owned(("10.0.0.0/24:80", 1), ("10.0.0.0/24:80", 2)),
                            names={1: "a", 2: "b"})
    assert str(info.value) == ("rule: dst 10.0.0.0/24 and port 80 (job 'b') already belongs "
                               "to job 'a'; detach a or change the rule")
    table = rules.compile_rules(_owned(("10.0.0.7:80", 1), ("10.0.0.7:80", 1)))
    assert list(table.prefixes.values()) == [[(80, 80, 1)]]
    # Overlapping but different rules are fine: precedence decides.
    rules.compile_rules(_owned(("10.0.0.0/24:80", 1), ("10.0.0.0/24:80-81", 2)))


def test_limits_are_refused_with_one_line():
    many_ports = [(rules.Rule("10.0.0.0/24", p), 1) for p in range(1, 30)]
    many_ports += [(rules.Rule(port=p), 2) for p in range(100, 104)]   # inherited by the /24
    with pytest.raises(SpecError) as info:
        rules.compile_rules(many_ports)
    assert "33 port rules apply to 10.0.0.0/24" in info.value.problem
    assert "the kernel holds 32" in info.value.problem and "\n" not in str(info.value)
    rules.compile_rules(many_ports[:-1])                                # 32 fit
    hosts = [(rules.Rule(f"10.{i // 256}.{i % 256}.1"), 1) for i in range(rules.MAX_PREFIXES + 1)]
    with pytest.raises(SpecError, match="1025 address prefixes, the kernel holds 1024"):
        rules.compile_rules(hosts)
    local = [(rules.Rule(port=p, local=True), 1) for p in range(1, 34)]
    with pytest.raises(SpecError, match="33 local-port rules, the kernel holds 32"):
        rules.compile_rules(local)


def test_the_table_is_encoded_as_the_kernel_reads_it():
    table = rules.compile_rules(_owned(("10.0.0.0/24:29500-29600", 2), ("10.0.0.0/8", 1),
                                       ("[fd00::/64]:80", 3), ("port 7", 4), ("local 9-10", 5)))
    net24 = (socket.AF_INET, bytes([10, 0, 0, 0]).ljust(16, b"\0"), 24)
    key = rules.encode_prefix(net24)
    assert ctypes.sizeof(maps.PrefixKey) == 24 and ctypes.sizeof(maps.PortRules) == 8 + 32 * 8
    # prefixlen counts the family word; the address is in network byte order in memory
    assert bytes(key) == ((32 + 24).to_bytes(4, "little") + socket.AF_INET.to_bytes(4, "little")
                          + bytes([10, 0, 0, 0]) + bytes(12))
    v6 = rules.encode_prefix((socket.AF_INET6, ipaddress.ip_address("fd00::").packed, 64))
    assert v6.prefixlen == 96 and bytes(v6)[8:10] == b"\xfd\x00"
    value = rules.encode_ports(table.prefixes[net24])
    assert value.count == 3
    assert [(value.rule[i].lo, value.rule[i].hi, value.rule[i].job_id) for i in range(3)] == \
        [(29500, 29600, 2), (0, 65535, 1), (7, 7, 4)]
    any4 = table.prefixes[(socket.AF_INET, bytes(16), 0)]
    any6 = table.prefixes[(socket.AF_INET6, bytes(16), 0)]
    assert any4 == any6 == [(7, 7, 4)]                   # port-only: both families, /0
    assert rules.encode_prefix((socket.AF_INET, bytes(16), 0)).prefixlen == 32
    assert table.local == [(9, 10, 5)]
