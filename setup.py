"""Wheel build hook: the eBPF sources, their pre-built CO-RE objects and the ns-3
scenario programs go inside the package.

``pyproject.toml`` declares the package; this file only adds a ``build_py`` step.  A
wheel (``pip install .``, ``pip wheel .``) then carries:

* ``mltcp/host/bpf/src/``: a copy of ``kernel/`` (the sources stay the truth there);
* ``mltcp/host/bpf/prebuilt/``: every datapath object compiled from that copy with the
  runtime's own :func:`mltcp.host.build.compile_object`, and ``manifest.json`` with
  each object's source digest, the clang version and the kernel whose BTF made
  vmlinux.h.  The objects are CO-RE, so a host without clang loads them; without clang,
  bpftool or kernel BTF here the wheel ships sources only (and says so), and
  ``MLTCP_PREBUILT=0`` skips the pre-build on purpose;
* ``mltcp/lab/scenario/ns3/scenarios/``: a copy of ``ns3_scenarios/``, the programs the ns3
  backend runs.

Editable installs use the checkout's directories directly.
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

ROOT = Path(__file__).resolve().parent
# (directory of the checkout, files, where they go inside the built package)
COPIES = (("kernel", ("*.bpf.c", "*.h"), "mltcp/host/bpf/src"),
          ("ns3_scenarios", ("*.py",), "mltcp/lab/scenario/ns3/scenarios"))
# Where the objects are compiled from (a COPIES entry) and where they go.
SOURCES, PREBUILT = "mltcp/host/bpf/src", "mltcp/host/bpf/prebuilt"


class BuildPy(build_py):
    def run(self) -> None:
        super().run()
        if getattr(self, "editable_mode", False):
            return
        out = Path(self.build_lib)
        for src, globs, dest in COPIES:
            target = out / dest
            if not (ROOT / dest).exists():
                # Generated only here, so start afresh: build/ outlives a build, and a
                # removed source (or last build's objects, below) must not ride along.
                shutil.rmtree(target, ignore_errors=True)
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
                                         ("bpftool", shutil.which("bpftool")),
                                         (str(build.BTF_PATH), build.BTF_PATH.exists()))
                   if not ok]
        if missing:
            print(f"mltcp: WARNING: no pre-built eBPF objects in this wheel ({', '.join(missing)} "
                  "missing): hosts installing it need clang to load the modules",
                  file=sys.stderr)
            return
        src, dest = out / SOURCES, out / PREBUILT
        clang = subprocess.run(["clang", "--version"], capture_output=True,
                               text=True).stdout.splitlines()[0]
        objects = {}
        with tempfile.TemporaryDirectory() as tmp:
            header = build.vmlinux_header(Path(tmp))
            for name in build.OBJECTS:
                build.compile_object(name, src, header, dest / f"{name}.bpf.o")
                objects[name] = {"digest": build.source_digest(name, src)}
        (dest / build.MANIFEST).write_text(json.dumps(
            {"objects": objects, "clang": clang, "btf_of": platform.release(),
             "flags": build.CLANG_FLAGS}, indent=1) + "\n")


setup(cmdclass={"build_py": BuildPy})
