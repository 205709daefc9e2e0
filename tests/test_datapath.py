"""Register/unregister the real eBPF modules; input validation; rollback; residue."""

from __future__ import annotations

import socket
import subprocess
import sys

import pytest

from mltcp.core.errors import MltcpError, SpecError
from mltcp.host import datapath, jobs, maps

pytestmark = pytest.mark.kernel


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "mltcp.cli", *args], capture_output=True,
                          text=True)


@pytest.mark.parametrize("module", datapath.MODULES)
def test_register_is_visible_usable_and_leaves_no_residue(clean_datapath, module):
    for _ in range(20):
        assert datapath.load([module]).loaded == [module]
        assert datapath.cc_name(module) in datapath.available_ccs()
        # A socket can select it by name.
        with socket.socket() as s:
            name = datapath.cc_name(module).encode()
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, name)
            got = s.getsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, 16).rstrip(b"\0")
            assert got.decode() == datapath.cc_name(module)
        assert datapath.unload([module]) == [module]
        assert datapath.cc_name(module) not in datapath.available_ccs()
    assert datapath.settle() == []


def test_load_all_then_unload_all(clean_datapath):
    assert datapath.load(["all"]).loaded == list(datapath.MODULES)
    assert set(datapath.loaded_modules()) == set(datapath.MODULES)
    pins = {p.name for p in maps.PIN_ROOT.iterdir()}
    assert set(maps.SHARED_MAPS) <= pins
    datapath.unload_all()
    assert datapath.settle() == []
    assert not maps.PIN_ROOT.exists()


def test_unknown_module_is_rejected_before_touching_the_kernel(clean_datapath):
    with pytest.raises(SpecError, match="module: unknown congestion control 'vegas'"):
        datapath.load(["cubic", "vegas"])
    assert datapath.residue() == []


def test_load_is_idempotent_and_says_what_was_loaded_already(clean_datapath):
    """A second `mltcp load` (the unit's ExecStartPre after an agent restart) succeeds,
    registers only what is missing and leaves the first registration in place."""
    first = datapath.load(["cubic"])
    ops_pin = maps.PIN_ROOT / "ops" / "mltcp_cubic"
    inode = ops_pin.stat().st_ino
    again = datapath.load(["reno", "cubic"])
    assert (first.loaded, first.already) == (["cubic"], [])
    assert (again.loaded, again.already) == (["reno"], ["cubic"])
    assert ops_pin.stat().st_ino == inode          # not registered a second time
    assert sorted(datapath.loaded_modules()) == ["cubic", "reno"]
    proc = _cli("load", "all")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == ["loaded mltcp_dctcp", "mltcp_reno was loaded already",
                                        "mltcp_cubic was loaded already"]


def test_a_module_registered_without_our_pin_is_refused(clean_datapath):
    datapath.load(["cubic"])
    pin = maps.PIN_ROOT / "ops" / "mltcp_cubic"
    moved = pin.with_name("elsewhere")
    pin.rename(moved)                # registered, but not where mltcp looks
    try:
        with pytest.raises(MltcpError, match="mltcp_cubic registered without mltcp's pin"):
            datapath.load(["all"])
        assert datapath.loaded_modules() == ["cubic"]   # nothing registered half way
    finally:
        moved.rename(pin)


def test_failure_half_way_unregisters_what_was_registered(clean_datapath, monkeypatch):
    real = datapath._register

    def flaky(module: str) -> None:
        if module == "dctcp":
            raise MltcpError("injected failure while registering dctcp")
        real(module)

    monkeypatch.setattr(datapath, "_register", flaky)
    with pytest.raises(MltcpError, match="injected"):
        datapath.load(["all"])
    assert datapath.loaded_modules() == []
    assert datapath.settle() == []


def test_cli_errors_are_one_line(bpf_host):
    for args, field in ((["load", "vegas"], "module"), (["unload"], "modules")):
        proc = _cli(*args)
        assert proc.returncode == 2
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith(f"mltcp: error: {field}:"), proc.stderr


def test_cli_unload_all_gets_out_of_a_damaged_job_registry(clean_datapath):
    """A truncated jobs.json is a one-line error naming the file and the way out, and
    `unload --all` is that way out."""
    assert _cli("load", "reno").returncode == 0
    registry = jobs.Registry()
    registry.dir.mkdir(parents=True, exist_ok=True)
    registry.path.write_text('{"datapath": 12, "jobs": {"a": {"id"')
    proc = _cli("job", "list")
    assert proc.returncode == 1
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and f"job registry {registry.path} is unreadable" in lines[0]
    assert "mltcp unload --all" in lines[0]
    assert _cli("unload", "--all").returncode == 0
    assert not registry.path.exists() and registry.read() == {}
    assert datapath.settle() == []


def test_doctor_json_reports_every_check(bpf_host):
    import json

    proc = _cli("doctor", "--json")
    report = json.loads(proc.stdout)
    names = {c["name"] for c in report["checks"]}
    assert {"privileges", "btf", "kfuncs", "clang", "bpftool", "libbpf", "build"} <= names
    assert all(c["ok"] for c in report["checks"] if c["name"] in ("btf", "kfuncs", "build"))
