"""Classification and the stale-job fail-safe in the real kernel.

* Built here (clang, bpftool; no root): the datapath and the classify probe compile,
  and the rule structs' layout in the objects' BTF is the ctypes mirrors'.
* Loaded (root): the kernel's own look-up (``mltcp_rule_lookup``, run through
  BPF_PROG_TEST_RUN in tests/bpf/classify_probe.bpf.c) gives what the Python mirror
  gives on random rule sets; sockets over loopback get the job their prefix and port
  say, and no other; a stale or disabled job's new socket runs the kernel's native
  algorithm and is counted, a fresh job's runs the MLTCP module.
"""

from __future__ import annotations

import contextlib
import ctypes
import ipaddress
import json
import random
import shutil
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from mltcp.host import build, datapath, exposition, jobfile, jobs, maps, rules, telemetry
from mltcp.host.build import kernel_source_dir

PROBE = Path(__file__).resolve().parent / "bpf" / "classify_probe.bpf.c"


def _missing_toolchain() -> str | None:
    for tool, pkg in (("clang", "clang"), ("bpftool", "bpftool")):
        if not shutil.which(tool):
            return f"needs {tool} (Debian package {pkg}) to build eBPF objects"
    if not build.BTF_PATH.exists():
        return "needs kernel BTF (/sys/kernel/btf/vmlinux, CONFIG_DEBUG_INFO_BTF)"
    return None


def _compile_probe(out: Path) -> Path:
    header = build.vmlinux_header(out)
    obj = out / "classify_probe.bpf.o"
    subprocess.run(["clang", *build.CLANG_FLAGS, "-I", str(header.parent), "-I",
                    str(kernel_source_dir()), "-c", str(PROBE), "-o", str(obj)], check=True)
    return obj


# --------------------------------------------------------------------------- built here

needs_toolchain = pytest.mark.skipif(_missing_toolchain() is not None,
                                     reason=_missing_toolchain() or "")


@needs_toolchain
def test_the_classifier_and_the_probe_build_and_the_rule_layout_matches(tmp_path, monkeypatch):
    """Compiles only (nothing is loaded): the sockops classifier and every module that
    calls mltcp_classify, and the probe; the rule structs in their BTF match maps.py."""
    monkeypatch.setenv("MLTCP_BUILD_DIR", str(tmp_path))
    objs = {name: build.build_object(name) for name in build.OBJECTS}
    probe = _compile_probe(tmp_path)
    for obj in (objs["mltcp_sockops"], objs["mltcp_cubic"], probe):
        out = subprocess.run(["bpftool", "-j", "btf", "dump", "file", str(obj)], check=True,
                             capture_output=True, text=True).stdout
        structs = {t["name"]: t for t in json.loads(out)["types"] if t.get("kind") == "STRUCT"}
        for cname, mirror in (("mltcp_prefix_key", maps.PrefixKey),
                              ("mltcp_port_rule", maps.PortRule),
                              ("mltcp_port_rules", maps.PortRules),
                              ("mltcp_job_state", maps.JobState)):
            c = structs[cname]
            assert c["size"] == ctypes.sizeof(mirror), (obj.name, cname)
            for member in c["members"]:
                if member["name"] != "lock":
                    assert member["bits_offset"] == getattr(mirror, member["name"]).offset * 8


def test_header_limits_are_the_python_limits():
    import re

    header = (kernel_source_dir() / "mltcp.h").read_text()

    def define(name: str) -> int:
        return int(re.search(rf"#define {name} (\d+)", header).group(1))

    assert define("MLTCP_PORT_RULES") == rules.MAX_PORT_RULES == maps.PORT_RULES
    assert define("MLTCP_MAX_PREFIXES") == rules.MAX_PREFIXES
    assert define("MLTCP_PREFIX_BITS") == rules.FAMILY_BITS + 128
    assert define("MLTCP_ABI_VERSION") == maps.ABI_VERSION == 2


# --------------------------------------------------------------------------- loaded


@pytest.mark.kernel
def test_the_kernels_lookup_is_the_python_mirror(tmp_path, bpf_host):
    """Random rule sets written as attach writes them; every query answered by the
    kernel's mltcp_rule_lookup equals rules.Table.lookup (IPv4, IPv6, IPv4-mapped,
    listening sockets, local ports)."""
    from mltcp.host.libbpf import libbpf
    from tests.test_kernel_abi import _TestRunOpts
    from tests.test_rules import _random_rules

    obj = _compile_probe(tmp_path)
    lib = libbpf()
    L = lib.lib
    L.bpf_prog_test_run_opts.restype = ctypes.c_int
    L.bpf_prog_test_run_opts.argtypes = [ctypes.c_int, ctypes.POINTER(_TestRunOpts)]
    handle = lib.check_ptr(L.bpf_object__open_file(str(obj).encode(), None), "open probe")
    try:
        m = None
        while m := L.bpf_object__next_map(handle, m):   # the probe's own maps, not pinned
            L.bpf_map__set_pin_path(m, None)
        lib.check(L.bpf_object__load(handle), "load classify probe")
        prog = lib.check_ptr(L.bpf_object__find_program_by_name(
            handle, b"mltcp_classify_probe"), "prog")
        fd = L.bpf_program__fd(prog)
        trie = L.bpf_map__fd(lib.check_ptr(L.bpf_object__find_map_by_name(
            handle, b"mltcp_prefix_rules"), "trie"))
        local = L.bpf_map__fd(lib.check_ptr(L.bpf_object__find_map_by_name(
            handle, b"mltcp_local_rules"), "local"))
        rng = random.Random(7)
        for _ in range(60):
            table = rules.compile_rules(_random_rules(rng, rng.randrange(1, 12)))
            for key in lib.map_keys(trie, maps.PrefixKey):
                lib.map_delete(trie, key)
            for pid, entries in table.prefixes.items():
                lib.map_update(trie, rules.encode_prefix(pid), rules.encode_ports(entries))
            lib.map_update(local, ctypes.c_uint32(0), rules.encode_ports(table.local))
            for _ in range(50):
                addr = rng.choice([None, f"10.{rng.randrange(2)}.{rng.randrange(4)}.1",
                                   f"::ffff:10.0.{rng.randrange(4)}.{rng.randrange(9)}",
                                   f"fd00:0:{rng.randrange(3)}::{rng.randrange(5)}"])
                rport, lport = rng.randrange(95, 205), rng.randrange(95, 205)
                ip = ipaddress.ip_address(addr or "0.0.0.0")
                family = socket.AF_INET if ip.version == 4 else socket.AF_INET6
                # The probe's arguments: family, the four address words, ports, has_remote.
                case = (ctypes.c_uint64 * 8)(family, *maps.addr_words(ip.packed), rport, lport,
                                             addr is not None)
                opts = _TestRunOpts(sz=ctypes.sizeof(_TestRunOpts),
                                    ctx_in=ctypes.addressof(case), ctx_size_in=ctypes.sizeof(case))
                lib.check(L.bpf_prog_test_run_opts(fd, ctypes.byref(opts)), "test run")
                assert opts.retval == table.lookup(addr, rport, lport), (addr, rport, lport,
                                                                         table)
    finally:
        L.bpf_object__close(handle)


PORT = 29700          # ports used below: 29700-29800, below the ephemeral range
TCP_CONGESTION = getattr(socket, "TCP_CONGESTION", 13)


@pytest.fixture
def loaded(clean_datapath):
    datapath.load(["reno", "cubic"])
    yield


@contextlib.contextmanager
def listening(addr: str, port: int) -> Iterator[socket.socket]:
    family = socket.AF_INET6 if ":" in addr else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind((addr, port))
        s.listen(8)
        yield s


def cc_of(s: socket.socket) -> str:
    return s.getsockopt(socket.IPPROTO_TCP, TCP_CONGESTION, 16).rstrip(b"\0").decode()


def connect_cc(addr: str, port: int, asked: str = "reno", family: int | None = None) -> str:
    """The algorithm a new connection to addr:port runs: the program asks for ``asked``
    (what it keeps when no job takes it) and connects; the classifier acts at connect."""
    family = family or (socket.AF_INET6 if ":" in addr else socket.AF_INET)
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.IPPROTO_TCP, TCP_CONGESTION, asked.encode())
        s.settimeout(5)
        s.connect((addr, port))
        return cc_of(s)


def attach(name: str, cc: str, *dst: str, **fields) -> jobs.JobRecord:
    spec = jobfile.spec_from_fields({"name": name, "cc": cc, "budget": 10**9,
                                     "dst": list(dst), **fields})
    return jobs.attach(spec)


def _age_config(job_id: int, seconds: float = 5.0, abi: int | None = None) -> None:
    """The agent went away ``seconds`` ago (or the config is of another ABI)."""
    with maps.PinnedMap("mltcp_job_cfg") as m:
        cfg = m.get(ctypes.c_uint32(job_id), maps.JobCfg)
        cfg.refreshed_ns -= int(seconds * 1e9)
        if abi is not None:
            cfg.abi = abi
        m.put(ctypes.c_uint32(job_id), cfg)


def _fallbacks(name: str) -> int:
    return next(s.stale_fallbacks for s in telemetry.collect() if s.name == name)


@pytest.mark.kernel
def test_a_prefix_and_port_range_rule_takes_only_its_connections(loaded):
    attach("range", "cubic", f"127.0.0.0/24:{PORT}-{PORT + 10}")
    with listening("127.0.0.1", PORT + 5), listening("127.0.0.1", PORT + 11), \
            listening("127.0.1.1", PORT + 5):
        assert connect_cc("127.0.0.1", PORT + 5) == "mltcp_cubic"
        assert connect_cc("127.0.0.1", PORT + 11) == "reno"      # port outside the range
        assert connect_cc("127.0.1.1", PORT + 5) == "reno"       # address outside the /24
    jobs.detach("range")
    with maps.PinnedMap("mltcp_prefix_rules") as trie:
        assert trie.keys(maps.PrefixKey) == []
    with listening("127.0.0.1", PORT + 5):
        assert connect_cc("127.0.0.1", PORT + 5) == "reno"       # detached: rules gone


@pytest.mark.kernel
def test_an_ipv6_prefix_with_a_port_and_ipv4_mapped_sockets(loaded):
    try:
        with listening("::1", PORT):
            pass
    except OSError as exc:
        pytest.skip(f"needs IPv6 on loopback (::1): {exc.strerror}")
    attach("v6", "cubic", f"[::1/128]:{PORT}", f"127.0.0.0/24:{PORT + 1}")
    with listening("::1", PORT), listening("::1", PORT + 2), listening("127.0.0.1", PORT + 1):
        assert connect_cc("::1", PORT) == "mltcp_cubic"
        assert connect_cc("::1", PORT + 2) == "reno"
        # A dual-stack socket talking IPv4 (::ffff:127.0.0.1) matches the IPv4 rule.
        assert connect_cc("::ffff:127.0.0.1", PORT + 1, family=socket.AF_INET6) == "mltcp_cubic"


@pytest.mark.kernel
def test_the_longer_prefix_wins_then_the_narrower_port_range(loaded):
    attach("wide", "reno", "127.0.0.0/8")                          # any port
    attach("narrow", "cubic", f"127.0.0.0/24:{PORT}-{PORT + 20}")
    attach("port", "reno", port=[f"{PORT + 3}"])                   # any address
    attach("one", "cubic", f"127.0.0.0/24:{PORT + 1}")
    with listening("127.0.0.1", PORT), listening("127.0.0.1", PORT + 1), \
            listening("127.0.0.1", PORT + 3), listening("127.0.0.1", PORT + 30), \
            listening("127.0.1.1", PORT):
        # ask for cubic: only the jobs' modules differ from what the program asked
        assert connect_cc("127.0.0.1", PORT, "cubic") == "mltcp_cubic"       # /24 range
        assert connect_cc("127.0.0.1", PORT + 1, "cubic") == "mltcp_cubic"   # /24, one port
        assert connect_cc("127.0.0.1", PORT + 3, "cubic") == "mltcp_cubic"   # /24 beats port-only
        assert connect_cc("127.0.0.1", PORT + 30, "cubic") == "mltcp_reno"   # only the /8
        assert connect_cc("127.0.1.1", PORT, "cubic") == "mltcp_reno"        # outside the /24
    ids = {n: r.id for n, r in jobs.Registry().read().items()}
    table = jobs.rules_table(jobs.Registry().read())
    assert table.lookup("127.0.0.1", PORT + 1, 1) == ids["one"]
    assert table.lookup("127.0.0.1", PORT, 1) == ids["narrow"]
    assert table.lookup("10.9.9.9", PORT + 3, 1) == ids["port"]


@pytest.mark.kernel
def test_a_local_port_range_takes_the_listener_and_its_connections(loaded):
    attach("srv", "cubic", local_port=[f"{PORT + 10}-{PORT + 12}"])
    with listening("127.0.0.1", PORT + 11) as srv, listening("127.0.0.1", PORT + 13) as other:
        assert cc_of(srv) == "mltcp_cubic"
        assert cc_of(other) != "mltcp_cubic"
        with socket.create_connection(("127.0.0.1", PORT + 11), timeout=5):
            conn, _ = srv.accept()
            with conn:
                assert cc_of(conn) == "mltcp_cubic"


@pytest.mark.kernel
@pytest.mark.parametrize("module,native,asked", [("cubic", "cubic", "reno"),
                                                  ("reno", "reno", "cubic")])
def test_a_stale_jobs_new_connections_run_the_native_algorithm(loaded, module, native, asked):
    """The agent is gone: new connections get the kernel's own algorithm (not what the
    program asked for, not the module), counted; the connection opened while the job was
    fresh keeps its module (F = 1 from now on); a refresh brings the module back."""
    rec = attach("st", module, f"127.0.0.0/24:{PORT}", stale_s=1)
    with listening("127.0.0.1", PORT), socket.socket() as early:
        early.setsockopt(socket.IPPROTO_TCP, TCP_CONGESTION, asked.encode())
        early.connect(("127.0.0.1", PORT))
        assert cc_of(early) == f"mltcp_{module}"            # fresh: the module
        _age_config(rec.id)
        assert telemetry.collect()[0].stale
        assert connect_cc("127.0.0.1", PORT, asked) == native
        assert connect_cc("127.0.0.1", PORT, asked) == native
        assert cc_of(early) == f"mltcp_{module}"            # existing flow: left as it was
        assert _fallbacks("st") == 2
        metrics = exposition.render()
        assert f'mltcp_job_stale_fallbacks_total{{cc="{module}",job="st"}} 2.0' in metrics
        jobs.refresh()
        assert connect_cc("127.0.0.1", PORT, asked) == f"mltcp_{module}"
        assert _fallbacks("st") == 2


@pytest.mark.kernel
def test_a_disabled_config_also_falls_back(loaded):
    """A config the datapath cannot use (written for another ABI) is treated as stale."""
    rec = attach("abi", "cubic", f"127.0.0.0/24:{PORT}", stale_s=0)
    _age_config(rec.id, 0, abi=maps.ABI_VERSION + 1)
    with listening("127.0.0.1", PORT):
        assert connect_cc("127.0.0.1", PORT, "reno") == "cubic"
    assert _fallbacks("abi") == 1


@pytest.mark.kernel
def test_cli_attach_prints_each_rule_as_it_reads_it(loaded):
    proc = subprocess.run([sys.executable, "-m", "mltcp.cli", "job", "attach", "bert",
                           "--budget", "1MB", "--dst", f"10.0.0.0:{PORT}",
                           "--dst", f"10.0.0.0/24:{PORT}-{PORT + 100}", "--port", f"{PORT}"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[1:6] == [
        f"  rule 1: dst 10.0.0.0 (one host) and port {PORT}",
        f"  rule 2: dst 10.0.0.0/24 and port {PORT}-{PORT + 100}",
        f"  rule 3: port {PORT} (any address)",
        "  a connection that matches any one of these rules joins the job",
        "  note: 10.0.0.0 has no prefix length, so it is one host; for the network write "
        f"10.0.0.0/24:{PORT}"]
