"""The eBPF objects the datapath loads: pre-built CO-RE objects, or built here with clang.

Where they come from, in order:

1. **Pre-built** (a wheel): the wheel carries the sources (``mltcp/host/bpf/src/``, a
   copy of the checkout's ``kernel/``) and the objects compiled from them when the wheel
   was built (``mltcp/host/bpf/prebuilt/``, with ``manifest.json``).  Objects compiled
   from a bpftool-generated ``vmlinux.h`` with ``-g`` are CO-RE: libbpf relocates their
   kernel-structure accesses against the running kernel's BTF at load, so a host needs
   no compiler.  A pre-built object is used only when the digest of its inputs (the
   source, every header, the flags) equals that of the sources in use, so an edited
   source or header is never shadowed by a stale object.
2. **Built here** with clang against this kernel's BTF, cached by a content hash (the
   sources, the BTF, the flags), so every ``mltcp load`` can call :func:`build_object`
   without paying for a compile.  This is the development path and the fallback.
   Where the cache lives is :func:`build_dir`; root loads what it finds there, so as
   root a cache another user could write to is refused (:func:`untrusted_reason`).

``setup.py`` builds the wheel's objects with :func:`compile_object`, the same function.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import secrets
import shutil
import stat
import subprocess
from pathlib import Path

from mltcp.core.errors import CapabilityError, MltcpError

BTF_PATH = Path("/sys/kernel/btf/vmlinux")
# -fdebug-compilation-dir=.: compile_object names the sources relative to their directory,
# so no build path lands in an object (its BTF line info names ./<file>): equal sources give
# equal objects wherever they are built (setup.py's reproducible wheels).
CLANG_FLAGS = ["-O2", "-g", "-Wall", "-Werror", "-target", "bpf", "-D__TARGET_ARCH_x86",
               "-fdebug-compilation-dir=."]
SHARED_HEADER = "mltcp.h"   # the ABI and maps header: marks a directory of eBPF sources
# Every object the datapath loads (doctor and the wheel build these).
OBJECTS = ("mltcp_reno", "mltcp_cubic", "mltcp_dctcp", "mltcp_sockops", "ecn_marker")
PACKAGE_BPF = Path(__file__).resolve().parent / "bpf"
CHECKOUT_KERNEL = Path(__file__).resolve().parents[2] / "kernel"
MANIFEST = "manifest.json"
# Root's cache for an installed package: root-owned, 0755, like every /var/cache entry
# (root's ~/.cache is no place for what a system service loads into the kernel).
SYSTEM_CACHE = Path("/var/cache/mltcp/bpf")
CACHE_DIR_MODE = 0o755


class UntrustedCacheError(MltcpError):
    """A root process was about to load objects from a directory another user can write."""


def kernel_source_dir() -> Path:
    """$MLTCP_KERNEL_SRC, else the sources a wheel carries, else the checkout's kernel/."""
    env = os.environ.get("MLTCP_KERNEL_SRC")
    for src in ([Path(env)] if env else [PACKAGE_BPF / "src", CHECKOUT_KERNEL]):
        if (src / SHARED_HEADER).is_file():
            return src
    raise MltcpError(
        f"eBPF sources not found ({PACKAGE_BPF / 'src'} or {CHECKOUT_KERNEL}): reinstall "
        "mltcp, or set MLTCP_KERNEL_SRC to a checkout's kernel/ directory")


def prebuilt_dir() -> Path:
    return PACKAGE_BPF / "prebuilt"


def _is_checkout(src: Path) -> bool:
    """``src`` is a kernel/ directory one may write next to: not the copy inside an
    installed package (site-packages is the package manager's, and may be read-only or
    shared by users), and writable."""
    src = src.resolve()
    installed = src.is_relative_to(PACKAGE_BPF) or bool(
        {"site-packages", "dist-packages"} & set(src.parts))
    return not installed and os.access(src, os.W_OK)


def user_cache() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "mltcp" / "bpf"


def build_dir() -> Path:
    """Where objects compiled here are cached, created if missing:

    * ``$MLTCP_BUILD_DIR`` if set;
    * ``build/`` beside the sources of a writable checkout (the development path);
    * an installed package run as root: :data:`SYSTEM_CACHE` (``/var/cache/mltcp/bpf``,
      directories 0755);
    * an installed package run by a user: ``${XDG_CACHE_HOME:-~/.cache}/mltcp/bpf``;

    never site-packages.  As root the directory must be safe to load from: see
    :func:`untrusted_reason` (a checkout's build/ may also belong to the checkout's
    owner, who controls its sources anyway)."""
    env = os.environ.get("MLTCP_BUILD_DIR")
    src = None if env else kernel_source_dir()
    if env:
        out = Path(env)
    elif src is not None and _is_checkout(src):
        out = src / "build"
    elif os.geteuid() == 0:
        out = SYSTEM_CACHE
    else:
        out = user_cache()
    if os.geteuid() != 0:
        out.mkdir(parents=True, exist_ok=True)
        return out
    _make_dirs(out)
    owners = {0}
    if env is None and src is not None and out == src / "build":
        owners.add(src.stat().st_uid)
    why = untrusted_reason(out, owners)
    if why:
        raise UntrustedCacheError(
            f"eBPF build cache {out} {why}: root must not load objects another user could "
            f"replace; fix: chown root:root {out} && chmod 0755 {out} (and its parents), or "
            "set MLTCP_BUILD_DIR to a root-owned directory")
    return out


def _make_dirs(path: Path) -> None:
    """``mkdir -p`` whose new directories are 0755 whatever the umask (root's cache must
    not come out group-writable under umask 002)."""
    missing = []
    for p in [path, *path.parents]:
        if p.exists():
            break
        missing.append(p)
    for p in reversed(missing):
        try:
            p.mkdir(mode=CACHE_DIR_MODE)
        except FileExistsError:
            continue                      # a concurrent first build made it
        os.chmod(p, CACHE_DIR_MODE)


def untrusted_reason(path: Path, owners: set[int]) -> str | None:
    """Why a process may not trust what it reads under ``path``, or None: ``path`` and
    each directory above it must belong to one of ``owners`` or root, and be writable by
    nobody else (group- or world-writable only with the sticky bit, as /tmp is, and
    not ``path`` itself), else another user could swap in an object of theirs."""
    path = Path(os.path.abspath(path))
    for i, p in enumerate([path, *path.parents]):
        st = p.lstat()
        if stat.S_ISLNK(st.st_mode):
            st = p.stat()   # a link's target is what counts; its own mode is 0777
        if st.st_uid not in owners | {0}:
            return f"is owned by uid {st.st_uid}" if i == 0 else \
                f"is inside {p}, owned by uid {st.st_uid}"
        writable = st.st_mode & (stat.S_IWGRP | stat.S_IWOTH)
        if writable and (i == 0 or not st.st_mode & stat.S_ISVTX):
            who = "group- and world-" if writable == stat.S_IWGRP | stat.S_IWOTH else \
                "group-" if writable == stat.S_IWGRP else "world-"
            return f"is {who}writable (mode {stat.S_IMODE(st.st_mode):04o})" if i == 0 \
                else f"is inside {p}, {who}writable (mode {stat.S_IMODE(st.st_mode):04o})"
    return None


def _digest(*parts: bytes) -> str:
    h = hashlib.sha256()
    for p in parts:
        h.update(p)
        h.update(b"\0")
    return h.hexdigest()[:16]


def source_digest(name: str, src_dir: Path | None = None) -> str:
    """What an object is made of, independent of the kernel it will run on (CO-RE):
    its source, every header of the source directory (``*.h``, by name, each with its
    name: the modules include several, so a change to any of them rebuilds) and the
    compiler flags."""
    src_dir = src_dir or kernel_source_dir()
    src = src_dir / f"{name}.bpf.c"
    if not src.is_file():
        raise MltcpError(f"no eBPF source {src.name} in {src_dir}")
    headers = sorted(src_dir.glob("*.h"), key=lambda p: p.name)
    return _digest(src.read_bytes(), *(part for h in headers
                                       for part in (h.name.encode(), h.read_bytes())),
                   " ".join(CLANG_FLAGS).encode())


def abi_version(src_dir: Path | None = None) -> int | None:
    """``MLTCP_ABI_VERSION`` of the sources in use (``mltcp.h``), the layout every object
    built from them expects (``maps.ABI_VERSION`` must equal it), or None if unreadable."""
    header = (src_dir or kernel_source_dir()) / SHARED_HEADER
    try:
        found = re.search(r"^#define\s+MLTCP_ABI_VERSION\s+(\d+)", header.read_text(), re.M)
    except OSError:
        return None
    return int(found.group(1)) if found else None


def datapath_digest(src_dir: Path | None = None) -> str:
    """One digest for the whole datapath: of every object's :func:`source_digest` (what
    decides whether a pre-built object is used), in :data:`OBJECTS` order.  Two installs
    with the same one load the same objects."""
    return _digest(*(source_digest(name, src_dir).encode() for name in OBJECTS))


def require_tool(name: str, package: str) -> str:
    path = shutil.which(name)
    if not path:
        raise CapabilityError(
            f"{name} not found: install the Debian package {package} (scripts/setup.sh does it)"
        )
    return path


def _temp_beside(dest: Path) -> tuple[int, str]:
    """A new file of this call's own in ``dest``'s directory (so ``os.replace`` onto
    ``dest`` is atomic), created with the umask's mode like any file, not mkstemp's 0600:
    a cache in a checkout or $MLTCP_BUILD_DIR may be shared with other users (root's
    are 0644 whatever the umask)."""
    mode = 0o644 if os.geteuid() == 0 else 0o666   # root's objects: nobody else writes
    while True:
        tmp = dest.parent / f".{dest.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp"
        try:
            return os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode), str(tmp)
        except FileExistsError:
            continue


def _replace_atomically(data: bytes, dest: Path) -> None:
    """Write ``dest`` through a temp file of its own in the same directory: two
    processes building at once never leave a half-written file under the final name."""
    fd, tmp = _temp_beside(dest)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, dest)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _cached(path: Path) -> bool:
    """``path`` exists (complete: files get their name by an atomic rename) and, for
    root, is root's and writable by nobody else; one that is not is built again."""
    try:
        st = path.stat()
    except FileNotFoundError:
        return False
    if os.geteuid() != 0:
        return True
    return st.st_uid == 0 and not st.st_mode & (stat.S_IWGRP | stat.S_IWOTH)


def vmlinux_header(out_dir: Path | None = None) -> Path:
    """vmlinux.h generated from the running kernel's BTF, cached by the BTF's hash."""
    if not BTF_PATH.exists():
        raise CapabilityError(
            f"{BTF_PATH} missing: the kernel needs CONFIG_DEBUG_INFO_BTF=y for eBPF struct_ops"
        )
    btf_hash = _digest(BTF_PATH.read_bytes())
    out_dir = (out_dir or build_dir()) / f"btf-{btf_hash}"
    header = out_dir / "vmlinux.h"
    if _cached(header):
        return header
    bpftool = require_tool("bpftool", "bpftool")
    if os.geteuid() == 0:
        _make_dirs(out_dir)
    else:
        out_dir.mkdir(parents=True, exist_ok=True)
    text = subprocess.run([bpftool, "btf", "dump", "file", str(BTF_PATH), "format", "c"],
                          check=True, capture_output=True).stdout
    _replace_atomically(text, header)
    return header


def compile_object(name: str, src_dir: Path, header: Path, dest: Path) -> Path:
    """clang ``src_dir/<name>.bpf.c`` against ``header`` (vmlinux.h) into ``dest``.

    The runtime's cache and the wheel build (``setup.py``) both compile through here.
    clang runs in ``src_dir`` on relative names (with ``-fdebug-compilation-dir=.``), so
    the object holds no path of the build (BTF line info reads the lines from there).
    clang writes a temp file of this call's own beside ``dest``, renamed over it when
    complete: a fixed temp name let two first builds interleave and leave a corrupt
    object cached for good."""
    clang = require_tool("clang", "clang")
    dest.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = _temp_beside(dest)
    os.close(fd)
    try:
        proc = subprocess.run([clang, *CLANG_FLAGS, "-I", os.path.abspath(header.parent),
                               "-I", ".", "-c", f"{name}.bpf.c", "-o", os.path.abspath(tmp)],
                              capture_output=True, text=True, cwd=src_dir)
        if proc.returncode != 0:
            raise MltcpError(f"clang failed to build {name}.bpf.c (in {src_dir}):\n"
                             f"{proc.stderr.strip()}")
        if os.geteuid() == 0:
            os.chmod(tmp, 0o644)   # clang renames its own file onto tmp: the umask's mode
        os.replace(tmp, dest)
    finally:
        Path(tmp).unlink(missing_ok=True)
    return dest


def prebuilt_object(name: str) -> Path | None:
    """The wheel's pre-built object of ``name`` if it was built from the sources in use.

    The digest is the sources' and flags' only (:func:`source_digest`), not the running
    kernel's BTF: CO-RE objects are relocated at load.  Sources edited since the wheel was
    built ($MLTCP_KERNEL_SRC) differ, so clang builds them instead.  An unreadable
    manifest counts as none (compiling is always safe; trusting a damaged one is not).
    """
    manifest = prebuilt_dir() / MANIFEST
    obj = prebuilt_dir() / f"{name}.bpf.o"
    if not (manifest.is_file() and obj.is_file()):
        return None
    try:
        entry = json.loads(manifest.read_text())["objects"][name]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if isinstance(entry, dict) and entry.get("digest") == source_digest(name):
        return obj
    return None


def build_object(name: str) -> Path:
    """The object of ``kernel/<name>.bpf.c``: pre-built if the wheel has it, else
    compiled here (once per source, BTF and flags)."""
    prebuilt = prebuilt_object(name)
    if prebuilt is not None:
        return prebuilt
    src_dir = kernel_source_dir()
    header = vmlinux_header()
    key = _digest(source_digest(name, src_dir).encode(), header.parent.name.encode())
    obj = build_dir() / f"{name}-{key}.bpf.o"
    if _cached(obj):
        return obj
    return compile_object(name, src_dir, header, obj)


def origin() -> str:
    """How this install gets its objects (pre-built, compiled here, or some of each), for
    the doctor."""
    ready = [n for n in OBJECTS if prebuilt_object(n) is not None]
    compiled = f"compiled here with clang from {kernel_source_dir()}"
    if len(ready) == len(OBJECTS):
        return f"pre-built CO-RE objects ({prebuilt_dir()})"
    if not ready:
        return compiled
    rest = [n for n in OBJECTS if n not in ready]
    return (f"{', '.join(ready)} pre-built CO-RE ({prebuilt_dir()}); {', '.join(rest)} "
            f"{compiled} (their sources differ from the wheel's)")
