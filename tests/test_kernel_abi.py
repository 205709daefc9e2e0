"""The ctypes mirrors in mltcp.host.maps match the C structs byte for byte.

Sizes and member offsets are read from the BTF that clang emits into the
compiled object, so a change on one side without the other fails here.
"""

from __future__ import annotations

import ctypes
import json
import re
import subprocess
from pathlib import Path

import pytest

from mltcp.host import maps
from mltcp.host.build import build_object, kernel_source_dir
from tests.conftest import missing_bpf_capability

pytestmark = pytest.mark.skipif(missing_bpf_capability() is not None,
                                reason=missing_bpf_capability() or "")

MIRRORS = {
    "mltcp_job_cfg": maps.JobCfg,
    "mltcp_job_state": maps.JobState,
    "mltcp_flow_info": maps.FlowInfo,
    "mltcp_prefix_key": maps.PrefixKey,
    "mltcp_port_rule": maps.PortRule,
    "mltcp_port_rules": maps.PortRules,
    "mltcp_health": maps.Health,
}


def _btf_structs(obj) -> dict[str, dict]:
    out = subprocess.run(["bpftool", "-j", "btf", "dump", "file", str(obj)], check=True,
                         capture_output=True, text=True).stdout
    return {t["name"]: t for t in json.loads(out)["types"] if t.get("kind") == "STRUCT"}


@pytest.mark.parametrize("cname,mirror", MIRRORS.items())
def test_struct_layout_matches(cname, mirror):
    structs = _btf_structs(build_object("mltcp_reno"))
    assert cname in structs, f"struct {cname} not in the object's BTF"
    c = structs[cname]
    size = ctypes.sizeof(mirror)
    assert c["size"] == size, f"{cname}: C {c['size']} B, ctypes {size} B"
    for member in c["members"]:
        name = member["name"]
        if name == "lock":
            continue  # struct bpf_spin_lock, mirrored as a u32
        py = getattr(mirror, name)
        assert member["bits_offset"] == py.offset * 8, f"{cname}.{name}"


def test_marker_layout_matches():
    c = _btf_structs(build_object("ecn_marker"))["mltcp_marker"]
    assert c["size"] == ctypes.sizeof(maps.Marker)
    for member in c["members"]:
        assert member["bits_offset"] == getattr(maps.Marker, member["name"]).offset * 8


def test_abi_version_matches_header():
    header = (kernel_source_dir() / "mltcp.h").read_text()
    version = int(re.search(r"#define MLTCP_ABI_VERSION (\d+)", header).group(1))
    assert version == maps.ABI_VERSION
    assert int(re.search(r"#define MLTCP_HISTORY (\d+)", header).group(1)) == maps.HISTORY
    assert int(re.search(r"#define MLTCP_MAX_JOBS (\d+)", header).group(1)) == maps.MAX_JOBS
    assert int(re.search(r"#define MLTCP_PORT_RULES (\d+)", header).group(1)) == maps.PORT_RULES


def test_fixed_point_constants_match_header():
    from mltcp.core import aggressiveness
    from mltcp.core.iteration import IterationTracker

    header = (kernel_source_dir() / "mltcp.h").read_text()
    shift = int(re.search(r"#define MLTCP_FP_SHIFT (\d+)", header).group(1))
    assert shift == aggressiveness.FP_SHIFT
    tail = int(re.search(r"#define MLTCP_TAIL_SHIFT (\d+)", header).group(1))
    import inspect

    assert inspect.signature(IterationTracker).parameters["tail_shift"].default == tail


class _FCase(ctypes.Structure):
    _fields_ = [("bytes", ctypes.c_uint64), ("budget", ctypes.c_uint64),
                ("slope_fp", ctypes.c_uint32), ("intercept_fp", ctypes.c_uint32),
                ("cap_fp", ctypes.c_uint32), ("f_fp", ctypes.c_uint32)]


class _TestRunOpts(ctypes.Structure):
    """libbpf's struct bpf_test_run_opts (1.1)."""

    _fields_ = [("sz", ctypes.c_size_t), ("data_in", ctypes.c_void_p),
                ("data_out", ctypes.c_void_p), ("data_size_in", ctypes.c_uint32),
                ("data_size_out", ctypes.c_uint32), ("ctx_in", ctypes.c_void_p),
                ("ctx_out", ctypes.c_void_p), ("ctx_size_in", ctypes.c_uint32),
                ("ctx_size_out", ctypes.c_uint32), ("retval", ctypes.c_uint32),
                ("repeat", ctypes.c_int), ("duration", ctypes.c_uint32),
                ("flags", ctypes.c_uint32), ("cpu", ctypes.c_uint32),
                ("batch_size", ctypes.c_uint32)]


def test_the_kernels_f_is_the_python_f(tmp_path, bpf_host):
    """One F: the datapath's mltcp_f_fixed (compiled from kernel/mltcp_f.h into a test
    program, run by the kernel with BPF_PROG_TEST_RUN) gives, case for case, what
    mltcp.core.aggressiveness.f_fixed gives, on a grid that reaches every bound."""
    from mltcp.core.aggressiveness import f_fixed
    from mltcp.host import build
    from mltcp.host.libbpf import libbpf
    from tests.test_one_f import f_grid

    src = Path(__file__).resolve().parent / "bpf" / "f_probe.bpf.c"
    obj = tmp_path / "f_probe.bpf.o"
    header = build.vmlinux_header()
    subprocess.run(["clang", *build.CLANG_FLAGS, "-I", str(header.parent), "-I",
                    str(kernel_source_dir()), "-c", str(src), "-o", str(obj)], check=True)
    lib = libbpf()
    L = lib.lib
    L.bpf_prog_test_run_opts.restype = ctypes.c_int
    L.bpf_prog_test_run_opts.argtypes = [ctypes.c_int, ctypes.POINTER(_TestRunOpts)]
    handle = lib.check_ptr(L.bpf_object__open_file(str(obj).encode(), None), "open f_probe")
    try:
        m = None
        while m := L.bpf_object__next_map(handle, m):   # no pins: these maps are the probe's
            L.bpf_map__set_pin_path(m, None)
        lib.check(L.bpf_object__load(handle), "load f_probe")
        prog = lib.check_ptr(L.bpf_object__find_program_by_name(handle, b"mltcp_f_probe"),
                             "prog")
        fd = L.bpf_program__fd(prog)
        for slope, intercept, cap, nbytes, budget in f_grid():
            case = _FCase(nbytes, budget, slope, intercept, cap, 0)
            opts = _TestRunOpts(sz=ctypes.sizeof(_TestRunOpts), ctx_in=ctypes.addressof(case),
                                ctx_size_in=ctypes.sizeof(case))
            lib.check(L.bpf_prog_test_run_opts(fd, ctypes.byref(opts)), "test run")
            assert case.f_fp == f_fixed(nbytes, budget, slope, intercept, cap), (
                slope, intercept, cap, nbytes, budget)
    finally:
        L.bpf_object__close(handle)
