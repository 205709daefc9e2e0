"""`mltcp doctor`: can this host run MLTCP, and if not, why and how to fix it."""

from __future__ import annotations

import ctypes.util
import os
import platform
import shutil
import subprocess
from dataclasses import asdict, dataclass
from pathlib import Path

from mltcp.core.errors import MltcpError
from mltcp.host import build, datapath, maps
from mltcp.host.build import BTF_PATH, OBJECTS, build_object

KFUNCS = (b"cubictcp_cong_avoid", b"tcp_reno_cong_avoid", b"tcp_slow_start")


@dataclass
class Check:
    name: str
    ok: bool
    detail: str
    fix: str = ""
    warn: bool = False      # runs, but with a risk the operator should know about


SRSO_STATE = Path("/sys/devices/system/cpu/vulnerabilities/spec_rstack_overflow")


def kernel_fault_check() -> Check:
    """The kernel fault of docs/known-issues.md: on Linux 6.18 with the SRSO return-thunk
    mitigation a BPF congestion control's ssthresh()/undo_cwnd() return is sometimes a
    stale stack word (both values seen are addresses in an SRSO return thunk).  mltcp's
    modules set the window from their own state (cong_control) and contain it; any other
    BPF congestion control on the host is exposed, and the operator should know."""
    try:
        srso = SRSO_STATE.read_text().strip()
    except OSError:
        srso = ""
    thunk = platform.machine() == "x86_64" and ("Safe RET" in srso or "IBPB" in srso)
    if not thunk:
        return Check("kernelfault", True, "no SRSO return thunk "
                     f"({srso or 'no spec_rstack_overflow entry'}): the BPF CC return-value "
                     "fault of docs/known-issues.md was not seen on such hosts")
    try:
        registered = {i.name.decode() for i in datapath.struct_ops_maps()}
    except (OSError, MltcpError):    # no privilege to list the kernel's maps
        registered = set()
    others = sorted(registered - {datapath.cc_name(m) for m in datapath.MODULES})
    health = maps.read_health()
    seen = health.ssthresh_overrides + health.cwnd_contained
    detail = (f"Linux {platform.release()}, SRSO '{srso}': BPF congestion controls can be "
              "handed a garbage ssthresh()/undo_cwnd() return under ECN (docs/known-issues.md)"
              f"; mltcp's modules contain it (contained {seen} time(s) since load)")
    if others:
        return Check("kernelfault", True, detail + f"; other BPF CCs here are exposed: "
                     f"{', '.join(others)}", "use mltcp's modules or native CCs under ECN; "
                     "see docs/kernel-fault/ to reproduce and report", warn=True)
    return Check("kernelfault", True, detail, "see docs/kernel-fault/ to reproduce and report",
                 warn=True)


def _kernel_version() -> tuple[int, int]:
    parts = platform.release().split(".")
    return int(parts[0]), int("".join(ch for ch in parts[1] if ch.isdigit()) or 0)


def run_checks(compile_objects: bool = True) -> list[Check]:
    checks: list[Check] = []
    caps = datapath.effective_caps()
    missing = [n for b, n in ((datapath.CAP_BPF, "CAP_BPF"), (datapath.CAP_NET_ADMIN,
               "CAP_NET_ADMIN"), (datapath.CAP_SYS_ADMIN, "CAP_SYS_ADMIN")) if not caps >> b & 1]
    checks.append(Check("privileges", not missing,
                        "root with CAP_BPF, CAP_NET_ADMIN, CAP_SYS_ADMIN" if not missing
                        else f"missing {', '.join(missing)}", "run as root"))
    major, minor = _kernel_version()
    checks.append(Check("kernel", (major, minor) >= (5, 13), f"Linux {platform.release()}",
                        "struct_ops congestion control with kfuncs needs Linux >= 5.13"))
    btf = BTF_PATH.exists()
    checks.append(Check("btf", btf, str(BTF_PATH) + (" present" if btf else " missing"),
                        "boot a kernel built with CONFIG_DEBUG_INFO_BTF=y"))
    if btf:
        blob = BTF_PATH.read_bytes()
        absent = [k.decode() for k in KFUNCS if k not in blob]
        checks.append(Check("kfuncs", not absent,
                            "cubictcp_*, tcp_reno_* callable from struct_ops" if not absent
                            else f"kernel BTF lacks {', '.join(absent)}",
                            "build the kernel with CONFIG_TCP_CONG_CUBIC=y (built in)"))
    bpffs = subprocess.run(["mountpoint", "-q", "/sys/fs/bpf"]).returncode == 0
    checks.append(Check("bpffs", bpffs or not missing,
                        "/sys/fs/bpf mounted" if bpffs else "/sys/fs/bpf not mounted "
                        "(mltcp load mounts it)", "mount -t bpf bpf /sys/fs/bpf"))
    try:
        cg2 = f"cgroup v2 at {datapath.cgroup2_root()}"
    except MltcpError as exc:
        cg2 = ""
        cg2_why = str(exc)
    checks.append(Check("cgroup2", bool(cg2), cg2 or cg2_why,
                        "mount cgroup2 (needed for `job attach --cgroup`)"))
    # With the wheel's pre-built CO-RE objects nothing is compiled on the host, so clang
    # and bpftool (vmlinux.h) are optional; without them (a checkout) they are required.
    try:
        src = build.kernel_source_dir()
        prebuilt = all(build.prebuilt_object(n) is not None for n in OBJECTS)
        checks.append(Check("sources", True, f"eBPF sources in {src}; objects " + (
            "pre-built (CO-RE, from the wheel)" if prebuilt else "compiled here with clang")))
    except MltcpError as exc:
        prebuilt = False
        checks.append(Check("sources", False, str(exc).splitlines()[0],
                            "reinstall mltcp, or set MLTCP_KERNEL_SRC to a checkout's kernel/"))
    for tool, pkg in (("clang", "clang"), ("bpftool", "bpftool"), ("tc", "iproute2"),
                      ("nsenter", "util-linux")):
        path = shutil.which(tool)
        if prebuilt and tool in ("clang", "bpftool"):
            checks.append(Check(tool, True, f"pre-built CO-RE objects (wheel); {tool} not "
                                "needed" + (f" ({path})" if path else "")))
            continue
        checks.append(Check(tool, bool(path), path or "not found",
                            f"apt-get install {pkg} (scripts/setup.sh installs everything)"))
    lib = ctypes.util.find_library("bpf")
    checks.append(Check("libbpf", bool(lib), lib or "libbpf.so not found",
                        "apt-get install libbpf1"))
    if compile_objects and btf and (prebuilt or (shutil.which("clang")
                                                 and shutil.which("bpftool"))):
        try:
            for name in OBJECTS:
                build_object(name)
            checks.append(Check("build", True, f"{len(OBJECTS)} eBPF objects: "
                                f"{build.origin()}"))
        except MltcpError as exc:
            checks.append(Check("build", False, str(exc).splitlines()[0],
                                "fix the toolchain (clang >= 14, libbpf-dev headers)"))
    try:
        loaded = datapath.loaded_modules()
        checks.append(Check("modules", True, "loaded: " + (", ".join(
            datapath.cc_name(m) for m in loaded) or "none (run `mltcp load all`)")))
    except OSError as exc:
        checks.append(Check("modules", False, str(exc), "is /proc mounted?"))
    netns = os.geteuid() == 0 and bool(shutil.which("ip"))
    checks.append(Check("netns", netns, "can create network namespaces (testbed)" if netns
                        else "cannot create network namespaces", "run as root with iproute2"))
    checks.append(kernel_fault_check())
    return checks


def as_json(checks: list[Check]) -> dict:
    return {"ok": all(c.ok for c in checks), "checks": [asdict(c) for c in checks]}


def as_table(checks: list[Check]) -> str:
    lines = []
    for c in checks:
        mark = ("!  " if c.warn else "ok ") if c.ok else "NO "
        line = f"{mark} {c.name:<11} {c.detail}"
        if (not c.ok or c.warn) and c.fix:
            line += f"  -> {c.fix}"
        lines.append(line)
    verdict = "this host can run MLTCP" if all(c.ok for c in checks) else \
        "this host cannot run MLTCP yet: fix the NO lines"
    return "\n".join(lines + [verdict])
