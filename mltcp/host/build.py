"""Build the eBPF objects in kernel/ with clang against this kernel's BTF.

Objects are rebuilt only when a source, the kernel's BTF or the compiler
flags change (a content hash names each object), so every `mltcp load`
can call :func:`build_object` without paying for a compile.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from pathlib import Path

from mltcp.core.errors import CapabilityError, MltcpError

BTF_PATH = Path("/sys/kernel/btf/vmlinux")
CLANG_FLAGS = ["-O2", "-g", "-Wall", "-Werror", "-target", "bpf", "-D__TARGET_ARCH_x86"]
SHARED_HEADER = "mltcp.h"


def kernel_source_dir() -> Path:
    """kernel/ of this checkout (or $MLTCP_KERNEL_SRC)."""
    env = os.environ.get("MLTCP_KERNEL_SRC")
    src = Path(env) if env else Path(__file__).resolve().parents[2] / "kernel"
    if not (src / SHARED_HEADER).is_file():
        raise MltcpError(
            f"eBPF sources not found in {src}: run from a checkout of mltcp "
            "or set MLTCP_KERNEL_SRC to its kernel/ directory"
        )
    return src


def build_dir() -> Path:
    env = os.environ.get("MLTCP_BUILD_DIR")
    out = Path(env) if env else kernel_source_dir() / "build"
    out.mkdir(parents=True, exist_ok=True)
    return out


def _digest(*parts: bytes) -> str:
    h = hashlib.sha256()
    for p in parts:
        h.update(p)
        h.update(b"\0")
    return h.hexdigest()[:16]


def require_tool(name: str, package: str) -> str:
    path = shutil.which(name)
    if not path:
        raise CapabilityError(
            f"{name} not found: install the Debian package {package} (scripts/setup.sh does it)"
        )
    return path


def vmlinux_header() -> Path:
    """vmlinux.h generated from the running kernel's BTF, cached by the BTF's hash."""
    if not BTF_PATH.exists():
        raise CapabilityError(
            f"{BTF_PATH} missing: the kernel needs CONFIG_DEBUG_INFO_BTF=y for eBPF struct_ops"
        )
    btf_hash = _digest(BTF_PATH.read_bytes())
    out_dir = build_dir() / f"btf-{btf_hash}"
    header = out_dir / "vmlinux.h"
    if header.exists():
        return header
    bpftool = require_tool("bpftool", "bpftool")
    out_dir.mkdir(parents=True, exist_ok=True)
    text = subprocess.run(
        [bpftool, "btf", "dump", "file", str(BTF_PATH), "format", "c"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    tmp = header.with_suffix(".tmp")
    tmp.write_text(text)
    tmp.replace(header)
    return header


def build_object(name: str) -> Path:
    """Compile kernel/<name>.bpf.c (if needed) and return the object's path."""
    src_dir = kernel_source_dir()
    src = src_dir / f"{name}.bpf.c"
    if not src.is_file():
        raise MltcpError(f"no eBPF source {src.name} in {src_dir}")
    header = vmlinux_header()
    key = _digest(
        src.read_bytes(),
        (src_dir / SHARED_HEADER).read_bytes(),
        header.parent.name.encode(),
        " ".join(CLANG_FLAGS).encode(),
    )
    obj = build_dir() / f"{name}-{key}.bpf.o"
    if obj.exists():
        return obj
    clang = require_tool("clang", "clang")
    tmp = obj.with_suffix(".tmp")
    proc = subprocess.run(
        [clang, *CLANG_FLAGS, "-I", str(header.parent), "-I", str(src_dir), "-c", str(src),
         "-o", str(tmp)],
        capture_output=True,
        text=True,
    )
    if proc.returncode != 0:
        raise MltcpError(f"clang failed to build {src.name}:\n{proc.stderr.strip()}")
    tmp.replace(obj)
    return obj
