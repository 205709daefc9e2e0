"""The netns backend end to end: one short real run per scheme, cleanup, `mltcp run`."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import signal
import subprocess
import sys
import time
from importlib import resources

import pytest

from mltcp.core.errors import MltcpError, SpecError
from mltcp.host import datapath, jobs, rules
from mltcp.host.namespaces import list_netns
from mltcp.lab.scenario import metrics
from mltcp.lab.scenario.emulation import owners, testbed, traffic
from mltcp.lab.scenario.plan import compute_jitter_ms
from mltcp.lab.scenario.runner import run_one
from mltcp.lab.scenario.spec import load_scenario
from mltcp.lab.scenario.trace import load_trace

pytestmark = pytest.mark.kernel


def short(name: str, iterations: int = 3, bottleneck_mbit: float = 300):
    """The scenario with few iterations on a 300 Mbit/s bottleneck: per-segment senders
    cannot always fill 1 Gbit/s on 2 busy cores, and without a queue DCTCP sees no marks."""
    sc = load_scenario(name)
    topo = dataclasses.replace(sc.topology, bottleneck_mbit=bottleneck_mbit)
    return dataclasses.replace(sc, topology=topo, jobs=tuple(
        dataclasses.replace(j, iterations=iterations) for j in sc.jobs))


def _no_leftovers() -> None:
    assert not [ns for ns in list_netns() if ns.startswith("mltcp-")]
    assert not [n for n in jobs.Registry().read() if n.startswith(testbed.JOB_PREFIX)]


@pytest.mark.parametrize("scenario,scheme", [
    ("compatible-pair", "cubic"), ("compatible-pair", "mltcp-cubic"),
    ("compatible-pair", "mltcp-reno"), ("compatible-pair", "cassini"),
    ("dctcp-pair", "dctcp"), ("dctcp-pair", "mltcp-dctcp"),
])
def test_one_short_run_per_scheme(clean_datapath, scenario, scheme):
    sc = short(scenario)
    trace = run_one("netns", sc, sc.scheme(scheme), 1)
    assert (trace.scenario, trace.scheme, trace.backend, trace.seed) == (scenario, scheme,
                                                                         "netns", 1)
    assert [j.name for j in trace.jobs] == ["a", "b"]
    for job in trace.jobs:
        assert [it.index for it in job.iterations] == [0, 1, 2]
        assert all(it.bytes == 2 * 10_000_000 for it in job.iterations)
        # TCP_INFO of the job's senders: counted per iteration (this kernel has total_rto).
        assert all(it.retransmits is not None and it.rtos is not None for it in job.iterations)
        assert all(it.rtos <= it.retransmits for it in job.iterations)
        # Each ring crosses the bottleneck in both directions.
        assert set(job.links) == {"bottleneck:swL->swR", "bottleneck:swR->swL"}
    for link in trace.links:
        assert link.capacity_bps == 3e8 and len(link.samples) >= 5
    summary = metrics.summarize(trace)
    util = summary["overall"]["utilisation"]
    assert all(0.2 < u < 1.05 for u in util.values()), util
    if "dctcp" in scheme:
        assert sum(summary["overall"]["ecn_marks"].values()) > 0
    assert trace.provenance["kernel"] and trace.params["name"] == scheme
    if scheme == "cassini":     # Cassini's shifts run on the kernel too
        assert trace.params["schedule"] == "cassini" and trace.params["shifts_ms"]["b"] > 0
        assert trace.job("b").iterations[0].start > trace.params["shifts_ms"]["b"] / 1000
    _no_leftovers()
    assert datapath.settle() == []   # the run loaded its module, so it unloaded it


def test_a_failing_run_leaves_nothing_behind(clean_datapath, monkeypatch):
    monkeypatch.setattr(testbed, "module_for", lambda scheme: ("reno", "no-such-cc"))
    sc = short("compatible-pair", 2)
    with pytest.raises(MltcpError, match="no-such-cc"):
        run_one("netns", sc, sc.scheme("mltcp-reno"), 0)
    _no_leftovers()
    assert datapath.settle() == []


def test_testbed_clean_removes_what_a_killed_run_left(clean_datapath):
    datapath.load(["reno"])
    subprocess.run(["ip", "netns", "add", "mltcp-killed-h1"], check=True)
    jobs.attach(jobs.JobSpec(name=f"{testbed.JOB_PREFIX}x-w0", cc="reno", budget=1000,
                             rules=(rules.Rule(port=9999),)))
    proc = subprocess.run([sys.executable, "-m", "mltcp.cli", "testbed", "clean"],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert "namespace mltcp-killed-h1" in proc.stdout and "job tb-x-w0" in proc.stdout
    _no_leftovers()


def _drivers() -> list[int]:
    """Every traffic job process on the host (orphaned or not)."""
    return traffic.pids(orphans_only=False)


def test_a_killed_run_takes_its_drivers_along_and_clean_removes_the_rest(clean_datapath,
                                                                         tmp_path):
    text = (resources.files("mltcp.lab.scenario") / "examples" / "compatible-pair.toml").read_text()
    spec = tmp_path / "long.toml"
    spec.write_text(text.replace("bottleneck_mbit = 1000", "bottleneck_mbit = 300"))
    assert _drivers() == []
    run = subprocess.Popen([sys.executable, "-m", "mltcp.cli", "run", str(spec), "--scheme",
                            "mltcp-reno", "--out", str(tmp_path / "out")],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 30
    while len(_drivers()) < 2 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert len(_drivers()) == 2, "the run never started its two job drivers"
    time.sleep(2)                          # mid-communication: megabytes in flight
    run.kill()
    run.wait()
    deadline = time.monotonic() + 5
    while _drivers() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _drivers() == []                # they died with their testbed
    proc = subprocess.run([sys.executable, "-m", "mltcp.cli", "testbed", "clean"],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert "namespace mltcp-" in proc.stdout and "job tb-a-w0" in proc.stdout
    # compatible-pair marks ECN: the killed run's markers went with its namespaces.
    assert "ECN marker of interface" in proc.stdout
    assert "scratch directory" in proc.stdout and not traffic.stale_scratch()
    _no_leftovers()
    datapath.unload(["reno"])              # the killed run had loaded it
    # The drivers' sockets were reset, not orphaned: nothing keeps the module alive.
    assert datapath.settle() == []


def test_mltcp_run_writes_traces_and_summary(clean_datapath, tmp_path):
    scenario = tmp_path / "tiny.toml"
    scenario.write_text("""
name = "tiny"
seeds = [0, 1]
[topology]
kind = "dumbbell"
bottleneck_mbit = 500
queue_packets = 100
hosts = 4
[[jobs]]
name = "a"
compute_ms = 40
bytes_per_iteration = "2MB"
workers = 2
iterations = 2
[[jobs]]
name = "b"
compute_ms = 40
bytes_per_iteration = "2MB"
workers = 2
iterations = 2
[[schemes]]
name = "mltcp-reno"
cc = "reno"
mltcp = true
""")
    out = tmp_path / "out"
    proc = subprocess.run([sys.executable, "-m", "mltcp.cli", "run", str(scenario), "--out",
                           str(out), "--seed", "0", "--dedicated"], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    names = sorted(p.name for p in (out / "traces").iterdir())
    assert names == ["dedicated-a-seed0.json", "dedicated-b-seed0.json",
                     "mltcp-reno-seed0.json"]
    doc = json.loads((out / "report.json").read_text())
    assert doc["schema"] == "mltcp.report/2" and doc["scenario"] == "tiny"
    assert set(doc["dedicated_means"]) == {"a", "b"}
    # The ratio is the shared run's mean over the dedicated run's mean, as the
    # traces on disk record them (their values are timing, so only the
    # arithmetic is asserted: a slow iteration on a busy host is not a failure).
    shared = load_trace(out / "traces" / "mltcp-reno-seed0.json").job("a")
    alone = load_trace(out / "traces" / "dedicated-a-seed0.json").job("a")
    assert len(shared.iterations) == len(alone.iterations) == 2
    assert doc["dedicated_means"]["a"] == pytest.approx(alone.iteration_times().mean())
    assert doc["runs"]["mltcp-reno/seed0"]["jobs"]["a"]["ratio_to_dedicated"] == \
        pytest.approx(shared.iteration_times().mean() / alone.iteration_times().mean())
    assert doc["schemes"]["mltcp-reno"]["speedup"] is None  # no standard scheme to compare
    assert doc["provenance"]["kernel"]
    for name in ("summary.md", "timeline.png", "overlap.png", "cdf.png"):
        assert (out / name).stat().st_size > 0
    assert "| mltcp-reno |" in (out / "summary.md").read_text()
    _no_leftovers()


def test_model_parallel_phases_are_refused_before_anything_is_built():
    sc = load_scenario("model-parallel")
    with pytest.raises(SpecError) as err:
        run_one("netns", sc, sc.scheme("cubic"), 0)
    assert err.value.field == "jobs[0].phases" and "fluid" in err.value.fix
    _no_leftovers()


def test_compute_jitter_is_the_seeded_sequence(clean_datapath):
    """The job driver sleeps compute + the jitter every backend draws for this seed."""
    sc = short("compatible-pair", iterations=4)
    sc = dataclasses.replace(sc, jobs=tuple(dataclasses.replace(j, compute_jitter_ms=30.0)
                                            for j in sc.jobs))
    trace = run_one("netns", sc, sc.scheme("cubic"), 3, only_job="a")
    drawn = compute_jitter_ms(sc, 3)["a"]
    assert len({round(x) for x in drawn}) > 1          # it really varies
    for it, jitter in zip(trace.job("a").iterations, drawn, strict=True):
        slept_ms = (it.comm_start - it.start) * 1000
        assert 120 + jitter - 1 <= slept_ms <= 120 + jitter + 20, (slept_ms, jitter)
    _no_leftovers()


def _long_run(tmp_path, iterations: int = 40) -> subprocess.Popen[str]:
    """`mltcp run` of the compatible pair (300 Mbit/s, one seed, MLTCP-Reno: a module,
    jobs, ECN markers, two job drivers), in a process of its own."""
    text = (resources.files("mltcp.lab.scenario") / "examples" / "compatible-pair.toml").read_text()
    spec = tmp_path / "long.toml"
    spec.write_text(text.replace("bottleneck_mbit = 1000", "bottleneck_mbit = 300")
                    .replace("iterations = 40", f"iterations = {iterations}"))
    return subprocess.Popen([sys.executable, "-m", "mltcp.cli", "run", str(spec), "--scheme",
                             "mltcp-reno", "--seed", "0", "--out", str(tmp_path / "out")],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _until_running(run: subprocess.Popen[str]) -> tuple[list[str], int]:
    """Wait until the run has its namespaces, jobs, module and both drivers; return its
    namespaces and its process group."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        assert run.poll() is None, run.communicate()
        spaces = [ns for ns in list_netns() if ns.startswith(f"mltcp-{run.pid}-")]
        tb_jobs = [n for n in jobs.Registry().read() if n.startswith(testbed.JOB_PREFIX)]
        if len(_drivers()) == 2 and spaces and len(tb_jobs) == 4 and \
                "mltcp_reno" in datapath.available_ccs():
            time.sleep(1)                         # mid-communication: megabytes in flight
            return spaces, os.getpgid(_drivers()[0])
        time.sleep(0.1)
    run.kill()
    pytest.fail("the run never got its namespaces, jobs, module and drivers up")


def _records_of(run: subprocess.Popen[str]) -> list[owners.RunRecord]:
    return [r for r in owners.records() if r.id.startswith(f"{run.pid}-")]


def _group_is_empty(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return True
    return False


@pytest.mark.parametrize("signo", [signal.SIGTERM, signal.SIGHUP, signal.SIGINT])
def test_a_signalled_run_tears_everything_down(clean_datapath, tmp_path, signo):
    """SIGTERM (kill, systemd), SIGHUP (a dropped SSH session) and Ctrl-C take the same
    path: no namespace, job, marker, module, pin, driver or run record survives."""
    assert _drivers() == []
    run = _long_run(tmp_path)
    _spaces, pgid = _until_running(run)
    assert pgid not in (os.getpgid(0), os.getpgid(run.pid))   # the drivers' own group
    run.send_signal(signo)
    _out, err = run.communicate(timeout=60)
    assert run.returncode == 128 + signo, err
    assert f"interrupted ({signal.Signals(signo).name})" in err
    _no_leftovers()
    assert _drivers() == [] and _group_is_empty(pgid)
    assert "mltcp_reno" not in datapath.available_ccs()       # the run had loaded it
    assert datapath.settle() == []                            # no pin, marker or map left
    assert _records_of(run) == []                             # its claim went last
    assert not traffic.stale_scratch()


def test_a_second_signal_does_not_cut_the_teardown_short(clean_datapath, tmp_path):
    run = _long_run(tmp_path)
    _until_running(run)
    run.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + 60
    while run.poll() is None and time.monotonic() < deadline:   # teardown, then exit
        time.sleep(0.01)
        for impatient in (signal.SIGTERM, signal.SIGHUP):
            with contextlib.suppress(ProcessLookupError):
                run.send_signal(impatient)
    _out, err = run.communicate(timeout=60)
    assert run.returncode == 128 + signal.SIGTERM, err
    _no_leftovers()
    assert _drivers() == [] and datapath.settle() == [] and _records_of(run) == []


def test_testbed_clean_spares_a_live_run(clean_datapath, tmp_path):
    """`testbed clean` while a run goes on removes a dead run's leftovers only, says which
    run it kept, and the run still finishes; afterwards there is nothing left to remove."""
    run = _long_run(tmp_path, iterations=30)
    spaces, _pgid = _until_running(run)
    subprocess.run(["ip", "netns", "add", "mltcp-killed-h1"], check=True)   # a dead run's
    proc = subprocess.run([sys.executable, "-m", "mltcp.cli", "testbed", "clean"],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert "namespace mltcp-killed-h1" in proc.stdout
    assert f"kept {len(spaces)} namespaces and 4 jobs of run {run.pid} (alive)" in proc.stdout
    assert set(spaces) <= set(list_netns()) and run.poll() is None
    assert len([n for n in jobs.Registry().read() if n.startswith(testbed.JOB_PREFIX)]) == 4
    _out, err = run.communicate(timeout=300)
    assert run.returncode == 0, err               # the run was not disturbed
    assert (tmp_path / "out" / "traces" / "mltcp-reno-seed0.json").exists()
    again = subprocess.run([sys.executable, "-m", "mltcp.cli", "testbed", "clean"],
                           capture_output=True, text=True)
    assert again.returncode == 0 and again.stdout.strip() == "removed nothing", again.stdout
    _no_leftovers()
    assert datapath.settle() == [] and _records_of(run) == []
