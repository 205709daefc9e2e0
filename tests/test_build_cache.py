"""Where compiled eBPF objects are cached (``mltcp.host.build.build_dir``), that root
trusts only a cache no other user can write, and that two first builds racing on one
cache never leave a corrupt object.  Compiling runs for real (clang, bpftool, the
kernel's BTF; nothing is loaded); what only root can see skips elsewhere."""

from __future__ import annotations

import hashlib
import os
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from mltcp.host import build

REPO = Path(__file__).resolve().parents[1]
ROOT = os.geteuid() == 0
needs_root = pytest.mark.skipif(not ROOT, reason="needs root: the root-only cache rules")


def _missing_toolchain() -> str | None:
    if not build.BTF_PATH.exists():
        return "needs kernel BTF (/sys/kernel/btf/vmlinux) to build eBPF objects"
    for tool, pkg in (("clang", "clang"), ("bpftool", "bpftool")):
        if not shutil.which(tool):
            return f"needs {tool} (Debian package {pkg}) to build eBPF objects"
    return None


needs_toolchain = pytest.mark.skipif(_missing_toolchain() is not None,
                                     reason=_missing_toolchain() or "")


def _installed_sources(tmp_path: Path) -> Path:
    """The kernel sources where a wheel puts them: inside site-packages."""
    src = tmp_path / "venv/lib/python3/site-packages/mltcp/host/bpf/src"
    shutil.copytree(REPO / "kernel", src, ignore=shutil.ignore_patterns("build"))
    return src


def test_mltcp_build_dir_wins(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MLTCP_BUILD_DIR", str(tmp_path / "a/b"))
    monkeypatch.setenv("MLTCP_KERNEL_SRC", str(_installed_sources(tmp_path)))
    assert build.build_dir() == tmp_path / "a/b" and (tmp_path / "a/b").is_dir()


@pytest.mark.skipif(ROOT, reason="as root an installed package caches in /var/cache "
                                 "(test_root_caches_an_installed_package_in_var_cache)")
def test_a_user_caches_an_installed_package_in_xdg_cache_home(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MLTCP_BUILD_DIR", raising=False)
    monkeypatch.setenv("MLTCP_KERNEL_SRC", str(_installed_sources(tmp_path)))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert build.build_dir() == tmp_path / "xdg/mltcp/bpf"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert build.build_dir() == tmp_path / "home/.cache/mltcp/bpf"


def _other_owned(path: Path) -> set[int]:
    """Owners to trust such that ``path`` belongs to another user: as root the path is
    given away to nobody; as a user, only root (and a made-up uid) are trusted."""
    if ROOT:
        os.chown(path, 65534, 65534)
        return {0}
    return {0, 54321}


def test_a_cache_others_can_write_is_untrusted(tmp_path: Path) -> None:
    me = {os.geteuid()}
    cache = tmp_path / "cache"
    cache.mkdir(mode=0o755)
    os.chmod(cache, 0o755)
    assert build.untrusted_reason(cache, me) is None
    os.chmod(cache, 0o775)
    assert "group-writable (mode 0775)" in build.untrusted_reason(cache, me)
    os.chmod(cache, 0o777)
    assert "group- and world-writable" in build.untrusted_reason(cache, me)
    os.chmod(cache, 0o1777)   # sticky protects entries, not the directory's own files
    assert "writable" in build.untrusted_reason(cache, me)
    os.chmod(cache, 0o755)
    inner = cache / "bpf"
    inner.mkdir(mode=0o755)
    os.chmod(cache, 0o777)    # anyone could rename bpf/ away and put their own there
    assert f"inside {cache}, group- and world-writable" in build.untrusted_reason(inner, me)
    os.chmod(cache, 0o1777)   # as in /tmp: others cannot rename what is not theirs
    assert build.untrusted_reason(inner, me) is None
    os.chmod(cache, 0o755)
    owners = _other_owned(inner)
    assert "owned by uid" in build.untrusted_reason(inner, owners)


@needs_root
def test_root_refuses_a_build_dir_another_user_can_write(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cache = tmp_path / "cache"
    cache.mkdir()
    monkeypatch.setenv("MLTCP_BUILD_DIR", str(cache))
    os.chmod(cache, 0o755)
    assert build.build_dir() == cache
    os.chmod(cache, 0o777)
    with pytest.raises(build.UntrustedCacheError, match=f"{cache} is group- and world-"
                       "writable .*chown root:root"):
        build.build_dir()
    os.chmod(cache, 0o755)
    os.chown(cache, 65534, 65534)
    with pytest.raises(build.UntrustedCacheError, match="owned by uid 65534"):
        build.build_dir()


@needs_root
def test_root_caches_an_installed_package_in_var_cache(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MLTCP_BUILD_DIR", raising=False)
    monkeypatch.setenv("MLTCP_KERNEL_SRC", str(_installed_sources(tmp_path)))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    created = [p for p in (Path("/var/cache/mltcp"), build.SYSTEM_CACHE) if not p.exists()]
    old = os.umask(0o002)      # a group-writable umask must not make a writable cache
    try:
        assert build.build_dir() == build.SYSTEM_CACHE == Path("/var/cache/mltcp/bpf")
        for p in (Path("/var/cache/mltcp"), build.SYSTEM_CACHE):
            st = p.stat()
            assert st.st_uid == 0 and (st.st_mode & 0o7777 == 0o755 or p not in created)
        assert not (tmp_path / "xdg").exists()
    finally:
        os.umask(old)
        for p in reversed(created):
            if p.exists() and not any(p.iterdir()):
                p.rmdir()


@needs_root
@needs_toolchain
def test_root_rebuilds_a_cached_object_another_user_owns(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MLTCP_BUILD_DIR", str(tmp_path / "cache"))
    obj = build.build_object("mltcp_reno")
    assert obj.stat().st_uid == 0 and obj.stat().st_mode & 0o022 == 0
    os.chown(obj, 65534, 65534)
    again = build.build_object("mltcp_reno")
    assert again == obj and obj.stat().st_uid == 0


# ------------------------------------------------------------- two first builds at once

CHILD = """
import hashlib, sys, time
from pathlib import Path
from mltcp.host import build
from tests.test_build_cache import elf_problem
go = Path(sys.argv[1])
while not go.exists():
    time.sleep(0.001)
obj = build.build_object("mltcp_reno")
data = obj.read_bytes()     # what a loader would open right now
print(obj, hashlib.sha256(data).hexdigest(), elf_problem(data) or "complete")
"""


def elf_problem(data: bytes) -> str:
    """Why ``data`` is not a complete 64-bit little-endian ELF relocatable, or ''."""
    if data[:4] != b"\x7fELF" or len(data) < 64:
        return "no ELF header"
    if data[4] != 2 or data[5] != 1:
        return "not ELF64 little-endian"
    shoff, = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum = struct.unpack_from("<HH", data, 0x3A)
    if shnum == 0 or shoff + shnum * shentsize > len(data):
        return f"section table beyond the end ({len(data)} bytes)"
    for i in range(shnum):
        kind, = struct.unpack_from("<I", data, shoff + i * shentsize + 4)
        offset, size = struct.unpack_from("<QQ", data, shoff + i * shentsize + 0x18)
        if kind != 8 and offset + size > len(data):   # 8: SHT_NOBITS
            return f"section {i} beyond the end"
    return ""


@needs_toolchain
@pytest.mark.parametrize("round_", range(3))
def test_two_first_builds_at_once_leave_one_complete_object(tmp_path: Path,
                                                            round_: int) -> None:
    """Two processes start building into one empty cache at the same instant (vmlinux.h
    and the object); each reads the object it was given back at once, as ``mltcp load``
    would, and it must be complete: the same bytes clang gives when built alone."""
    cache, go = tmp_path / "cache", tmp_path / "go"
    env = {**os.environ, "PYTHONPATH": str(REPO), "MLTCP_BUILD_DIR": str(cache)}
    kids = [subprocess.Popen([sys.executable, "-c", CHILD, str(go)], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, env=env, cwd=REPO)
            for _ in range(2)]
    go.touch()
    outs = [k.communicate(timeout=300) for k in kids]
    for kid, (out, err) in zip(kids, outs, strict=True):
        assert kid.returncode == 0, err
        assert out.split()[2] == "complete", out
    paths, digests = {o.split()[0] for o, _ in outs}, {o.split()[1] for o, _ in outs}
    assert len(paths) == 1 and len(digests) == 1, outs
    obj = Path(paths.pop())
    assert hashlib.sha256(obj.read_bytes()).hexdigest() in digests
    assert not [p.name for p in cache.rglob("*.tmp")], "a temp file was left behind"
    # clang is deterministic: the object built alone, from the same cache, is the same
    alone = build.compile_object("mltcp_reno", build.kernel_source_dir(),
                                 next(cache.glob("btf-*/vmlinux.h")), tmp_path / "alone.o")
    assert hashlib.sha256(alone.read_bytes()).hexdigest() in digests
