"""`pip install .` as a training host gets it: a real wheel, a throw-away venv, no checkout.

The wheel is built once per session (with build isolation, as pip does) and installed
with ``--no-deps`` into a fresh virtual environment: the host part must work with the
standard library alone.  Then, run from a directory outside the checkout with no
PYTHONPATH: the package finds its eBPF sources inside the venv, the doctor reports the
pre-built objects, a lab command says which extra it needs; and, on a host that can
load eBPF, the installed ``mltcp`` loads every module, attaches a job, carries a flow
under MLTCP with the agent running, and unloads, without ever compiling (its build
cache stays empty: the wheel's pre-built CO-RE objects were used).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
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
CAN_PREBUILD = bool(shutil.which("clang") and shutil.which("bpftool")
                    and Path("/sys/kernel/btf/vmlinux").exists())


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    proc = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w",
                           str(out), str(REPO)], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    [whl] = out.glob("mltcp-*.whl")
    return whl


@pytest.fixture(scope="module")
def host_venv(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    env_dir = tmp_path_factory.mktemp("venv")
    venv.EnvBuilder(with_pip=True).create(env_dir)
    proc = subprocess.run([str(env_dir / "bin" / "python"), "-m", "pip", "install", "-q",
                           "--no-deps", str(wheel)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return env_dir


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "MLTCP_KERNEL_SRC")}
    return {**env, **extra}


def mltcp(venv_dir: Path, *args: str, cwd: Path, **extra: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(venv_dir / "bin" / "mltcp"), *args], capture_output=True,
                          text=True, timeout=120, cwd=cwd, env=_env(**extra))


def test_the_wheel_carries_sources_objects_unit_scenarios_and_ns3_programs(wheel: Path):
    names = set(zipfile.ZipFile(wheel).namelist())
    assert {f"mltcp/host/bpf/src/{n}.bpf.c" for n in OBJECTS} | {
        "mltcp/host/bpf/src/mltcp.h"} <= names
    assert "mltcp/host/systemd/mltcp-agent.service" in names
    assert {"mltcp/lab/scenarios/compatible-pair.toml", "mltcp/lab/ns3/mltcp_tcp.h",
            "mltcp/lab/ns3/scenarios/dumbbell.py",
            "mltcp/lab/ns3/scenarios/leaf_spine.py"} <= names
    if not CAN_PREBUILD:
        pytest.skip("the build host lacks clang, bpftool or kernel BTF: no pre-built objects")
    assert {f"mltcp/host/bpf/prebuilt/{n}.bpf.o" for n in OBJECTS} <= names
    manifest = json.loads(zipfile.ZipFile(wheel).read("mltcp/host/bpf/prebuilt/manifest.json"))
    assert set(manifest["objects"]) == set(OBJECTS) and manifest["clang"]
    metadata = zipfile.ZipFile(wheel).read("mltcp-0.1.0.dist-info/METADATA").decode()
    hard = [line for line in metadata.splitlines()
            if line.startswith("Requires-Dist:") and "extra ==" not in line]
    assert hard == []          # a host installs nothing beyond mltcp itself


def test_the_installed_package_stands_alone(host_venv: Path, tmp_path: Path):
    helped = mltcp(host_venv, "--help", cwd=tmp_path)
    assert helped.returncode == 0 and "job" in helped.stdout
    assert mltcp(host_venv, "job", "attach", "--help", cwd=tmp_path).returncode == 0
    where = subprocess.run([str(host_venv / "bin" / "python"), "-c",
                            "from mltcp.host import build; print(build.kernel_source_dir())"],
                           capture_output=True, text=True, cwd=tmp_path, env=_env(), check=True)
    assert Path(where.stdout.strip()).is_relative_to(host_venv)      # not the checkout
    doctor = mltcp(host_venv, "doctor", "--no-build", "--json", cwd=tmp_path)
    checks = {c["name"]: c for c in json.loads(doctor.stdout)["checks"]}
    assert {"privileges", "btf", "clang", "libbpf"} <= set(checks)
    lab = mltcp(host_venv, "run", "compatible-pair", "--backend", "fluid", "--out",
                str(tmp_path / "out"), cwd=tmp_path)
    assert lab.returncode == 3 and "mltcp[lab]" in lab.stderr and lab.stderr.count("\n") == 1


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
        pytest.skip("the build host lacks clang, bpftool or kernel BTF: no pre-built objects")
    cache = tmp_path / "build-cache"
    cache.mkdir()
    extra = {"MLTCP_BUILD_DIR": str(cache)}
    port, nbytes = 7451, 4_000_000
    ns = f"mltcp-wheel-{os.getpid()}"

    def run(*args: str) -> subprocess.CompletedProcess:
        done = mltcp(host_venv, *args, cwd=tmp_path, **extra)
        assert done.returncode == 0, (args, done.stderr)
        return done

    run("load", "all")
    agent = subprocess.Popen([str(host_venv / "bin" / "mltcp"), "agent", "--interval", "0.2"],
                             cwd=tmp_path, env=_env(**extra), stderr=subprocess.PIPE, text=True)
    subprocess.run(["ip", "netns", "add", ns], check=True)
    try:
        run("job", "attach", "wheeltest", "--port", str(port), "--budget", "1MB", "--cc",
            "cubic", "--stale-s", "5")
        subprocess.run(["ip", "-n", ns, "link", "set", "lo", "up"], check=True)
        flow = subprocess.run(["nsenter", f"--net=/run/netns/{ns}", sys.executable, "-c",
                               FLOW, str(port), str(nbytes)], capture_output=True, text=True,
                              timeout=60, check=True)
        cc, received = flow.stdout.split()
        assert cc == "mltcp_cubic" and int(received) == nbytes   # the classifier switched it
        time.sleep(0.5)                                         # an agent refresh or two
        [status] = json.loads(run("status", "--json").stdout)
        assert status["name"] == "wheeltest" and not status["stale"]
        assert status["total_bytes"] >= nbytes and status["iteration"] >= 3   # 1 MB budget
    finally:
        subprocess.run(["ip", "netns", "del", ns], check=False)
        agent.send_signal(signal.SIGTERM)
        agent.wait(timeout=10)
    assert agent.returncode == 0, agent.stderr.read()
    run("unload", "--all")
    assert list(cache.iterdir()) == []      # nothing was compiled: the wheel's objects loaded
