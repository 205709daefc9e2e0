"""`pip install .` as a training host gets it: a real wheel, a throw-away venv, no checkout.

The wheel is built once per session (with build isolation, as pip does) and installed
with its dependencies into a fresh virtual environment: the host part must work with the
standard library and prometheus_client alone.  Then, run from a directory outside the
checkout with no PYTHONPATH: the package finds its eBPF sources inside the venv, the
doctor reports the pre-built objects, a lab command says which extra it needs; and, on a
host that can load eBPF, the installed ``mltcp`` loads every module, attaches a job, carries a flow
under MLTCP with the agent running, and unloads, without ever compiling (its build
cache stays empty: the wheel's pre-built CO-RE objects were used: stripped of DWARF, with
their BTF).  Two builds of one commit, from two directories, are byte-identical; a build
that cannot pre-build the objects fails, unless MLTCP_PREBUILT=0 asks for sources only.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import struct
import subprocess
import sys
import time
import venv
import zipfile
from pathlib import Path

import pytest

from tests.conftest import missing_bpf_capability

REPO = Path(__file__).resolve().parents[1]
OBJECTS = ("mltcp_reno", "mltcp_cubic", "mltcp_dctcp", "mltcp_sockops", "ecn_marker")
CAN_PREBUILD = bool(shutil.which("clang") and shutil.which("llvm-strip")
                    and shutil.which("bpftool") and Path("/sys/kernel/btf/vmlinux").exists())
NO_PREBUILD = ("the build host lacks clang, llvm-strip, bpftool or kernel BTF: no pre-built "
               "objects")
PREBUILT = "mltcp/host/bpf/prebuilt"


def _pip_wheel(out: Path, src: Path = REPO, **extra: str) -> subprocess.CompletedProcess:
    """``pip wheel`` of a checkout, with build isolation (setuptools from the index); where
    the objects cannot be pre-built, of sources only (such a build would fail)."""
    if not CAN_PREBUILD:
        extra = {"MLTCP_PREBUILT": "0", **extra}
    return subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w",
                           str(out), str(src)], capture_output=True, text=True, timeout=900,
                          env={**os.environ, **extra})


def _build_wheel(out: Path, src: Path = REPO, **extra: str) -> Path:
    proc = _pip_wheel(out, src, **extra)
    assert proc.returncode == 0, proc.stderr[-3000:]
    [whl] = out.glob("mltcp-*.whl")
    return whl


def elf_sections(data: bytes) -> set[str]:
    """The section names of a 64-bit little-endian ELF object (what an eBPF object is)."""
    assert data[:4] == b"\x7fELF" and data[4] == 2 and data[5] == 1
    shoff, = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)
    headers = [struct.unpack_from("<I20xQQ", data, shoff + i * shentsize)
               for i in range(shnum)]
    _, strtab, _ = headers[shstrndx]
    return {data[strtab + name:data.index(b"\0", strtab + name)].decode()
            for name, _, _ in headers}


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _build_wheel(tmp_path_factory.mktemp("wheel"))


@pytest.fixture(scope="module")
def host_venv(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    env_dir = tmp_path_factory.mktemp("venv")
    venv.EnvBuilder(with_pip=True).create(env_dir)
    proc = subprocess.run([str(env_dir / "bin" / "python"), "-m", "pip", "install", "-q",
                           str(wheel)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return env_dir


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "MLTCP_KERNEL_SRC")}
    return {**env, **extra}


def mltcp(venv_dir: Path, *args: str, cwd: Path, **extra: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(venv_dir / "bin" / "mltcp"), *args], capture_output=True,
                          text=True, timeout=120, cwd=cwd, env=_env(**extra))


def test_the_wheel_carries_sources_objects_unit_scenarios_and_ns3_programs(wheel: Path):
    from mltcp.host import build

    whl = zipfile.ZipFile(wheel)
    names = set(whl.namelist())
    kernel = {p.name for p in (REPO / "kernel").iterdir() if p.name.endswith((".bpf.c", ".h"))}
    assert {f"mltcp/host/bpf/src/{n}.bpf.c" for n in OBJECTS} | {"mltcp/host/bpf/src/mltcp.h"} \
        <= names
    assert {n for n in names if n.startswith("mltcp/host/bpf/src/")} == {
        f"mltcp/host/bpf/src/{n}" for n in kernel}
    assert "mltcp/host/systemd/mltcp-agent.service" in names
    assert {f"mltcp/lab/scenario/examples/{p.name}"
            for p in (REPO / "mltcp/lab/scenario/examples").glob("*.toml")} <= names
    assert {"mltcp/lab/scenario/examples/compatible-pair.toml",
            "mltcp/lab/scenario/ns3/mltcp_tcp.h",
            "mltcp/lab/scenario/ns3/scenarios/dumbbell.py",
            "mltcp/lab/scenario/ns3/scenarios/leaf_spine.py"} <= names
    metadata = whl.read("mltcp-0.1.0.dist-info/METADATA").decode()
    hard = [line for line in metadata.splitlines()
            if line.startswith("Requires-Dist:") and "extra ==" not in line]
    # a host installs nothing beyond mltcp and the pure-Python Prometheus client
    assert [h.split(":", 1)[1].strip() for h in hard] == ["prometheus_client>=0.17"]
    if not CAN_PREBUILD:
        pytest.skip(NO_PREBUILD)
    assert {f"{PREBUILT}/{n}.bpf.o" for n in OBJECTS} | {f"{PREBUILT}/manifest.json"} <= names
    manifest = json.loads(whl.read(f"{PREBUILT}/manifest.json"))
    assert set(manifest["objects"]) == set(OBJECTS)
    assert manifest["clang"] and manifest["btf_of"] and manifest["flags"] == build.CLANG_FLAGS
    # Made from the checkout's sources: what the installed runtime will match them against.
    assert {n: e["digest"] for n, e in manifest["objects"].items()} == {
        n: build.source_digest(n, REPO / "kernel") for n in OBJECTS}
    assert manifest["stripped"] == "llvm-strip -g"
    for n in OBJECTS:
        sections = elf_sections(whl.read(f"{PREBUILT}/{n}.bpf.o"))
        # BTF (types, CO-RE relocations, line info) for libbpf; no DWARF
        assert {".BTF", ".BTF.ext"} <= sections, (n, sections)
        assert not {s for s in sections if ".debug" in s}, (n, sections)


def test_the_wheel_carries_the_licence_and_the_project_metadata(wheel: Path):
    whl = zipfile.ZipFile(wheel)
    assert whl.read("mltcp-0.1.0.dist-info/licenses/LICENSE") == (REPO / "LICENSE").read_bytes()
    metadata = whl.read("mltcp-0.1.0.dist-info/METADATA").decode().splitlines()
    assert {"License-Expression: GPL-2.0-only", "License-File: LICENSE",
            "Author: MLTCP toolkit developers"} <= set(metadata)
    assert b"GNU GENERAL PUBLIC LICENSE\n                       Version 2, June 1991" \
        in (REPO / "LICENSE").read_bytes()


def _commit_time() -> str:
    return os.environ.get("SOURCE_DATE_EPOCH") or subprocess.run(
        ["git", "-C", str(REPO), "log", "-1", "--format=%ct"], capture_output=True,
        text=True, check=True).stdout.strip()


def test_two_builds_of_a_commit_are_byte_identical(wheel: Path, tmp_path: Path):
    """The session's wheel (timestamps: the last commit's time, setup.py's default in a
    checkout) and one built from a copy of the checkout in another directory, with that
    time as $SOURCE_DATE_EPOCH: the same bytes, objects included (no build path in them)."""
    files = subprocess.run(["git", "-C", str(REPO), "ls-files", "-z", "--cached", "--others",
                            "--exclude-standard"], capture_output=True, check=True).stdout
    copy = tmp_path / "elsewhere" / "mltcp-src"
    for name in filter(None, files.decode().split("\0")):
        if (REPO / name).is_file():
            (copy / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / name, copy / name)
    again = _build_wheel(tmp_path / "out", copy, SOURCE_DATE_EPOCH=_commit_time())
    first, second = zipfile.ZipFile(wheel), zipfile.ZipFile(again)
    differ = [i.filename for i, j in zip(first.infolist(), second.infolist(), strict=False)
              if (i.filename, i.date_time, i.external_attr, i.CRC)
              != (j.filename, j.date_time, j.external_attr, j.CRC)]
    assert first.namelist() == second.namelist() and differ == []
    assert wheel.read_bytes() == again.read_bytes()


@pytest.mark.skipif(not CAN_PREBUILD, reason=NO_PREBUILD)
def test_a_build_that_cannot_prebuild_the_objects_fails(tmp_path: Path):
    """No silent wheel of sources only: without clang the build stops and names the
    opt-out."""
    proc = _pip_wheel(tmp_path / "out", PATH=_path_without_compilers(tmp_path))
    assert proc.returncode != 0 and not list((tmp_path / "out").glob("*.whl"))
    out = proc.stdout + proc.stderr
    assert "cannot pre-build the eBPF objects (clang" in out and "MLTCP_PREBUILT=0" in out


def test_mltcp_prebuilt_0_gives_a_sources_only_wheel(wheel: Path, tmp_path: Path):
    """On purpose, and even right after a build that made objects (build/ outlives it)."""
    names = set(zipfile.ZipFile(_build_wheel(tmp_path, MLTCP_PREBUILT="0")).namelist())
    assert "mltcp/host/bpf/src/mltcp.h" in names
    assert not {n for n in names if n.startswith(PREBUILT)}


def _site_packages(venv_dir: Path) -> Path:
    [site] = venv_dir.glob("lib/python3*/site-packages")
    return site.resolve()         # as the package sees itself (Path(__file__).resolve())


def _path_without_compilers(tmp_path: Path) -> str:
    """PATH with the tools the doctor reads the host with, but no clang and no bpftool."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("mountpoint", "ip", "tc", "nsenter"):
        if found := shutil.which(tool):
            (bin_dir / tool).symlink_to(found)
    return str(bin_dir)


def test_the_installed_package_stands_alone(host_venv: Path, tmp_path: Path):
    helped = mltcp(host_venv, "--help", cwd=tmp_path)
    assert helped.returncode == 0 and "job" in helped.stdout
    assert mltcp(host_venv, "job", "attach", "--help", cwd=tmp_path).returncode == 0
    site = _site_packages(host_venv)
    where = subprocess.run([str(host_venv / "bin" / "python"), "-c",
                            "from mltcp.host import build; print(build.kernel_source_dir())"],
                           capture_output=True, text=True, cwd=tmp_path, env=_env(), check=True)
    assert Path(where.stdout.strip()).is_relative_to(site)      # the venv's, not the checkout
    doctor = mltcp(host_venv, "doctor", "--no-build", "--json", cwd=tmp_path)
    checks = {c["name"]: c for c in json.loads(doctor.stdout)["checks"]}
    assert {"privileges", "btf", "sources", "clang", "bpftool", "libbpf"} <= set(checks)
    assert checks["sources"]["ok"] and str(site) in checks["sources"]["detail"]
    lab = mltcp(host_venv, "run", "compatible-pair", "--backend", "fluid", "--out",
                str(tmp_path / "out"), cwd=tmp_path)
    assert lab.returncode == 3 and "mltcp[lab]" in lab.stderr and lab.stderr.count("\n") == 1


PICK = """
import json
from mltcp.host import build
print(json.dumps({n: str(build.build_object(n)) for n in build.OBJECTS}))
print(build.origin())
"""


def test_a_host_without_clang_uses_the_prebuilt_objects(host_venv: Path, tmp_path: Path):
    """What `mltcp load` resolves, without loading anything: every object is the wheel's,
    with no clang or bpftool on PATH and nothing written to the build cache."""
    if not CAN_PREBUILD:
        pytest.skip(NO_PREBUILD)
    cache = tmp_path / "build-cache"
    cache.mkdir()
    env = {"PATH": _path_without_compilers(tmp_path), "MLTCP_BUILD_DIR": str(cache)}
    picked = subprocess.run([str(host_venv / "bin" / "python"), "-c", PICK], cwd=tmp_path,
                            env=_env(**env), capture_output=True, text=True, timeout=60)
    assert picked.returncode == 0, picked.stderr
    objects, origin = picked.stdout.splitlines()
    prebuilt = _site_packages(host_venv) / PREBUILT
    assert json.loads(objects) == {n: str(prebuilt / f"{n}.bpf.o") for n in OBJECTS}
    assert origin.startswith("pre-built CO-RE objects")
    assert list(cache.iterdir()) == []
    doctor = mltcp(host_venv, "doctor", "--no-build", "--json", cwd=tmp_path, **env)
    checks = {c["name"]: c for c in json.loads(doctor.stdout)["checks"]}
    for tool in ("clang", "bpftool"):
        assert checks[tool]["ok"], checks[tool]
        assert checks[tool]["detail"] == f"pre-built CO-RE objects (wheel); {tool} not needed"
    assert "pre-built" in checks["sources"]["detail"]


def test_an_edited_source_is_compiled_not_shadowed(host_venv: Path, tmp_path: Path):
    """$MLTCP_KERNEL_SRC with one source changed: that object no longer matches the
    wheel's digest, so the runtime would compile it (here: asks for clang) instead of
    loading the stale pre-built one; the others stay pre-built."""
    if not CAN_PREBUILD:
        pytest.skip(NO_PREBUILD)
    src = tmp_path / "kernel"
    shutil.copytree(_site_packages(host_venv) / "mltcp/host/bpf/src", src)
    with (src / "mltcp_reno.bpf.c").open("a") as f:
        f.write("\n/* edited */\n")
    probe = ("from mltcp.host import build\n"
             "print(sorted(n for n in build.OBJECTS if build.prebuilt_object(n) is None))")
    picked = subprocess.run([str(host_venv / "bin" / "python"), "-c", probe], cwd=tmp_path,
                            env=_env(MLTCP_KERNEL_SRC=str(src)), capture_output=True,
                            text=True, timeout=60, check=True)
    assert picked.stdout.strip() == "['mltcp_reno']"


FLOW = """
import socket, sys, threading
port, nbytes = int(sys.argv[1]), int(sys.argv[2])
srv = socket.create_server(("127.0.0.1", port))
got = []
def sink():
    conn, _ = srv.accept()
    total = 0
    while chunk := conn.recv(1 << 20):
        total += len(chunk)
    got.append(total)
t = threading.Thread(target=sink)
t.start()
c = socket.socket()
c.setsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, b"cubic")   # a plain program
c.connect(("127.0.0.1", port))
cc = c.getsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, 16).rstrip(b"\\0").decode()
c.sendall(bytes(nbytes))
c.close()
t.join()
print(cc, got[0])
"""


@pytest.mark.kernel
@pytest.mark.skipif(missing_bpf_capability() is not None,
                    reason=missing_bpf_capability() or "")
def test_load_attach_carry_a_flow_and_unload_from_the_wheel(host_venv: Path, tmp_path: Path,
                                                           clean_datapath):
    if not CAN_PREBUILD:
        pytest.skip(NO_PREBUILD)
    cache = tmp_path / "build-cache"
    cache.mkdir()
    extra = {"MLTCP_BUILD_DIR": str(cache)}
    port, nbytes = 7451, 4_000_000
    ns = f"mltcp-wheeltest-{os.getpid()}"
    agent_log = tmp_path / "agent.log"

    def run(*args: str) -> subprocess.CompletedProcess:
        done = mltcp(host_venv, *args, cwd=tmp_path, **extra)
        assert done.returncode == 0, (args, done.stderr)
        return done

    run("load", "all")
    with agent_log.open("w") as log:     # a file, not a pipe nobody drains while it runs
        agent = subprocess.Popen([str(host_venv / "bin" / "mltcp"), "agent", "--interval",
                                  "0.2"], cwd=tmp_path, env=_env(**extra), stderr=log,
                                 stdout=log)
    try:
        subprocess.run(["ip", "netns", "add", ns], check=True)
        run("job", "attach", "wheeltest", "--port", str(port), "--budget", "1MB", "--cc",
            "cubic", "--stale-s", "5")
        subprocess.run(["ip", "-n", ns, "link", "set", "lo", "up"], check=True)
        flow = subprocess.run(["nsenter", f"--net=/run/netns/{ns}", sys.executable, "-c",
                               FLOW, str(port), str(nbytes)], capture_output=True, text=True,
                              timeout=60)
        assert flow.returncode == 0, flow.stderr
        cc, received = flow.stdout.split()
        assert cc == "mltcp_cubic" and int(received) == nbytes   # the classifier switched it
        time.sleep(0.5)                                         # an agent refresh or two
        [status] = json.loads(run("status", "--json").stdout)
        assert status["name"] == "wheeltest" and not status["stale"]
        # 4 MB against a 1 MB budget: a boundary per budget, but over loopback one ACK can
        # cover hundreds of KB (64 KB segments), so a wrap may land late: at least two.
        assert status["total_bytes"] >= nbytes and status["iteration"] >= 2
        metrics = run("metrics").stdout        # prometheus_client came with the wheel
        assert 'mltcp_job_budget_bytes{cc="cubic",job="wheeltest"} 1e+06' in metrics
    finally:
        subprocess.run(["ip", "netns", "del", ns], check=False, capture_output=True)
        agent.send_signal(signal.SIGTERM)
        try:
            agent.wait(timeout=10)
        except subprocess.TimeoutExpired:
            agent.kill()
            agent.wait()
    assert agent.returncode == 0, agent_log.read_text()
    run("unload", "--all")
    assert list(cache.iterdir()) == []      # nothing was compiled: the wheel's objects loaded
