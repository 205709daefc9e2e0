"""Wheel build hook: the eBPF sources, their pre-built CO-RE objects and the ns-3
scenario programs go inside the package.

``pyproject.toml`` declares the package; this file only adds a ``build_py`` step.  A
wheel (``pip install .``, ``pip wheel .``) then carries:

* ``mltcp/host/bpf/src/``: a copy of ``kernel/`` (the sources stay the truth there);
* ``mltcp/host/bpf/prebuilt/``: every datapath object compiled from that copy with the
  runtime's own :func:`mltcp.host.build.compile_object`, and ``manifest.json`` with
  each object's source digest, the clang version and the kernel whose BTF made
  vmlinux.h.  The objects are CO-RE, so a host without clang loads them; they ship
  without DWARF (``llvm-strip -g``: BTF and its line info, what libbpf and the verifier
  use, stay).  A wheel build without clang, llvm-strip, bpftool or kernel BTF here
  fails; ``MLTCP_PREBUILT=0`` builds a wheel of sources only, on purpose (hosts
  installing it compile the objects with clang);
* ``mltcp/lab/scenario/ns3/scenarios/``: a copy of ``ns3_scenarios/``, the programs the ns3
  backend runs.

Editable installs use the checkout's directories directly.

Two wheel builds of one commit are byte-identical (tests/test_wheel.py): the zip's
timestamps are ``$SOURCE_DATE_EPOCH``, in a checkout the last commit's time unless set;
the objects name their sources by relative paths only (:func:`mltcp.host.build.compile_object`)
and carry no DWARF with the build directory in it.
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.errors import PlatformError

ROOT = Path(__file__).resolve().parent
# (directory of the checkout, files, where they go inside the built package)
COPIES = (("kernel", ("*.bpf.c", "*.h"), "mltcp/host/bpf/src"),
          ("ns3_scenarios", ("*.py",), "mltcp/lab/scenario/ns3/scenarios"))
# Where the objects are compiled from (a COPIES entry) and where they go.
SOURCES, PREBUILT = "mltcp/host/bpf/src", "mltcp/host/bpf/prebuilt"


class BuildPy(build_py):
    def run(self) -> None:
        editable = getattr(self, "editable_mode", False)
        if not editable:
            # build/ outlives a build (pip builds a checkout in place): a module, source or
            # object removed since must not ride along in this wheel.
            shutil.rmtree(Path(self.build_lib) / "mltcp", ignore_errors=True)
        super().run()
        if editable:
            return
        out = Path(self.build_lib)
        for src, globs, dest in COPIES:
            target = out / dest
            target.mkdir(parents=True, exist_ok=True)
            for pattern in globs:
                for path in sorted((ROOT / src).glob(pattern)):
                    shutil.copy2(path, target / path.name)
        self._prebuild(out)

    def _prebuild(self, out: Path) -> None:
        # Never ship objects of an earlier build: this build makes them all, or none.
        shutil.rmtree(out / PREBUILT, ignore_errors=True)
        if os.environ.get("MLTCP_PREBUILT") == "0":
            print("mltcp: MLTCP_PREBUILT=0: the wheel carries eBPF sources only", file=sys.stderr)
            return
        sys.path.insert(0, str(ROOT))
        from mltcp.host import build

        if not Path(build.__file__).resolve().is_relative_to(ROOT):
            # The objects must come from this tree's compile_object, the runtime's own.
            raise RuntimeError(f"mltcp.host.build imported from {build.__file__}, not {ROOT}")
        missing = [what for what, ok in (("clang", shutil.which("clang")),
                                         ("llvm-strip", shutil.which("llvm-strip")),
                                         ("bpftool", shutil.which("bpftool")),
                                         (str(build.BTF_PATH), build.BTF_PATH.exists()))
                   if not ok]
        if missing:
            # Never a silent fallback: a wheel without objects makes every host compile.
            raise PlatformError(
                f"mltcp: cannot pre-build the eBPF objects ({', '.join(missing)} missing): "
                "install them (Debian: clang llvm bpftool; scripts/setup.sh), or build a "
                "wheel of eBPF sources only on purpose with MLTCP_PREBUILT=0 (hosts "
                "installing it then need clang)")
        src, dest = out / SOURCES, out / PREBUILT
        clang = subprocess.run(["clang", "--version"], capture_output=True,
                               text=True).stdout.splitlines()[0]
        objects = {}
        with tempfile.TemporaryDirectory() as tmp:
            header = build.vmlinux_header(Path(tmp))
            for name in build.OBJECTS:
                obj = build.compile_object(name, src, header, dest / f"{name}.bpf.o")
                # DWARF out (most of an object's size, and it names the build directory);
                # .BTF and .BTF.ext stay: libbpf's CO-RE and struct_ops need them.
                subprocess.run(["llvm-strip", "-g", str(obj)], check=True)
                objects[name] = {"digest": build.source_digest(name, src)}
        (dest / build.MANIFEST).write_text(json.dumps(
            {"objects": objects, "clang": clang, "btf_of": platform.release(),
             "flags": build.CLANG_FLAGS, "stripped": "llvm-strip -g"}, indent=1) + "\n")


def _source_date_epoch() -> None:
    """The wheel's zip timestamps (setuptools' wheel writer reads $SOURCE_DATE_EPOCH): if
    unset, the last commit's time in a checkout, so that two builds of a commit are equal."""
    if ("SOURCE_DATE_EPOCH" in os.environ or not (ROOT / ".git").exists()
            or not shutil.which("git")):
        return
    last = subprocess.run(["git", "-C", str(ROOT), "log", "-1", "--format=%ct"],
                          capture_output=True, text=True)
    if last.returncode == 0 and last.stdout.strip().isdigit():
        os.environ["SOURCE_DATE_EPOCH"] = last.stdout.strip()


_source_date_epoch()
setup(cmdclass={"build_py": BuildPy})
