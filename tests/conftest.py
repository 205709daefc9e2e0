"""Shared fixtures.

Kernel tests run for real (root, CAP_BPF, BTF, clang, bpftool); where one of
those is missing they skip with a reason that names it.  They use their own
pin prefix and state directory so they never touch a production setup, and
the session ends by proving that nothing of mltcp is left in the kernel.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from pathlib import Path

os.environ.setdefault("MLTCP_PIN_ROOT", "/sys/fs/bpf/mltcp-test")
_OWN_STATE_DIR = None
if "MLTCP_STATE_DIR" not in os.environ:
    _OWN_STATE_DIR = os.environ["MLTCP_STATE_DIR"] = tempfile.mkdtemp(prefix="mltcp-state-")

import pytest  # noqa: E402

from mltcp.core import procstat  # noqa: E402

# Test files that use this host's kernel datapath, network namespaces, sshd or root-only
# state (a build cache in /var/cache, a tuner's port): their tests are marked ``host``
# and run one at a time (names and pins would collide).  A new file of that kind joins
# this list (a kernel-marked test is host wherever it is).  tests/test_bad_input.py is
# not one: each row runs the CLI with a state directory and pin root of its own, and is
# refused before it touches anything.
HOST_FILES = frozenset({
    "test_agent", "test_build_cache", "test_classify", "test_cli_json",
    "test_datapath", "test_dcqcn_tuner", "test_demo", "test_fabric", "test_host_races",
    "test_hosts_backend", "test_hosts_ssh", "test_jobfile", "test_jobs", "test_kernel_abi",
    "test_kernel_behaviour", "test_kernel_fault", "test_qdiscs", "test_signal_socket",
    "test_testbed", "test_traffic", "test_wheel", "test_wire",
})
# The host files whose tests *measure* the datapath (rates, shares, windows, every
# packet captured): marked ``quiet`` as well, they run with nothing else on the machine
# (a busy CPU would be what they read).  scripts/test (scripts/suite.py) runs them
# first, alone; the other host tests one at a time beside the pure-Python tests, which
# run on every core (pytest-xdist).  A file whose tests wait for a quiet host
# (``quiet_host``) or capture packets belongs here.
QUIET_FILES = frozenset({"test_kernel_behaviour", "test_kernel_fault", "test_traffic",
                         "test_wire"})


def pytest_collection_modifyitems(config, items):  # type: ignore[no-untyped-def]
    """Mark the tests of HOST_FILES, and every kernel test, ``host``; those of
    QUIET_FILES ``quiet`` too."""
    for item in items:
        stem = Path(str(item.fspath)).stem
        if stem in HOST_FILES or item.get_closest_marker("kernel"):
            item.add_marker(pytest.mark.host)
        if stem in QUIET_FILES:
            item.add_marker(pytest.mark.quiet)


def pytest_sessionfinish(session, exitstatus):  # type: ignore[no-untyped-def]
    """The session's own job-registry directory goes with it."""
    if _OWN_STATE_DIR:
        shutil.rmtree(_OWN_STATE_DIR, ignore_errors=True)


def missing_bpf_capability() -> str | None:
    """Why real-kernel eBPF tests cannot run here, or None."""
    if os.geteuid() != 0:
        return "needs root (CAP_BPF, CAP_NET_ADMIN, CAP_SYS_ADMIN) to load eBPF"
    from mltcp.host import datapath

    caps = datapath.effective_caps()
    if not caps >> datapath.CAP_BPF & 1:
        return "needs CAP_BPF to load eBPF programs"
    if not Path("/sys/kernel/btf/vmlinux").exists():
        return "needs kernel BTF (/sys/kernel/btf/vmlinux, CONFIG_DEBUG_INFO_BTF)"
    for tool, pkg in (("clang", "clang"), ("bpftool", "bpftool")):
        if not shutil.which(tool):
            return f"needs {tool} (Debian package {pkg}) to build eBPF objects"
    return None


@pytest.fixture(scope="session")
def bpf_host():
    """Skip unless this host can build and load eBPF; clean everything at the end."""
    why = missing_bpf_capability()
    if why:
        pytest.skip(why)
    from mltcp.host import datapath, jobs

    foreign = [c for c in datapath.available_ccs() if c.startswith("mltcp_")]
    if foreign and not datapath.maps.PIN_ROOT.exists():
        pytest.fail(f"{', '.join(foreign)} registered outside the tests: "
                    "run `mltcp unload --all` before the test suite")
    datapath.unload_all()
    yield
    jobs.Registry().clear()
    datapath.unload_all()
    assert datapath.settle() == [], "mltcp left residue in the kernel"


@pytest.fixture
def clean_datapath(bpf_host):
    """Each test starts and ends with nothing of mltcp in the kernel."""
    from mltcp.host import datapath, jobs

    yield
    jobs.Registry().clear()
    datapath.unload_all()
    left = datapath.settle()
    assert left == [], f"residue after test: {left}"


def _yielding_ticks() -> int:
    """CPU time (clock ticks) so far of the processes at SCHED_IDLE: scripts/suite.py's
    work beside the quiet group, which yields to any other task, so it is not load."""
    ticks = 0
    for pid in Path("/proc").glob("[0-9]*"):
        found = procstat.fields(pid.name)
        try:
            if found and int(found[procstat.POLICY]) == os.SCHED_IDLE:
                ticks += int(found[procstat.UTIME]) + int(found[procstat.STIME])
        except (IndexError, ValueError):
            continue                                 # cut short: gone since the listing
    return ticks


def _cpu_idle_fraction(window_s: float) -> float:
    """The CPUs' idle share over the next ``window_s``, counting the time they gave to
    SCHED_IDLE processes as idle."""
    def sample() -> tuple[int, int]:
        fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
        # idle + iowait, and what yielding processes used; total
        return fields[3] + fields[4] + _yielding_ticks(), sum(fields)
    idle0, total0 = sample()
    time.sleep(window_s)
    idle1, total1 = sample()
    return (idle1 - idle0) / max(total1 - total0, 1)


@pytest.fixture
def quiet_host():
    """Wait (up to 10 s) until the CPUs are mostly idle before a throughput measurement.

    Why: deleting network namespaces finishes asynchronously in a kernel worker; right
    after a test that tore down a fabric, that cleanup can take one of this machine's
    two cores for seconds, and a 1 Gbit/s or per-segment measurement then reads the
    host's CPU, not TCP.  Tests measure behaviour, so they wait for quiet instead of
    widening their bands.
    """
    deadline = time.monotonic() + 10
    while _cpu_idle_fraction(0.25) < 0.8 and time.monotonic() < deadline:
        pass
