"""The ctypes mirrors in mltcp.host.maps match the C structs byte for byte.

Sizes and member offsets are read from the BTF that clang emits into the
compiled object, so a change on one side without the other fails here.
"""

from __future__ import annotations

import ctypes
import json
import re
import subprocess

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
    "mltcp_rule_key": maps.RuleKey,
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


def test_fixed_point_constants_match_header():
    from mltcp.core import aggressiveness
    from mltcp.core.iteration import IterationTracker

    header = (kernel_source_dir() / "mltcp.h").read_text()
    shift = int(re.search(r"#define MLTCP_FP_SHIFT (\d+)", header).group(1))
    assert shift == aggressiveness.FP_SHIFT
    tail = int(re.search(r"#define MLTCP_TAIL_SHIFT (\d+)", header).group(1))
    import inspect

    assert inspect.signature(IterationTracker).parameters["tail_shift"].default == tail
