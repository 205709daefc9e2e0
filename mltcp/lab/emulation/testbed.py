"""The netns backend: run a scenario on real kernel TCP in network namespaces.

One run = one scenario x one scheme x one seed, and produces one common trace
(mltcp.lab.trace).  Per run:

1. build the fabric of the scenario's topology (mltcp.lab.emulation.fabric); ECN step marking
   on every shaped egress when the scheme is DCTCP;
2. register the MLTCP module the scheme needs (and only for that run if it was
   not loaded before);
3. for MLTCP schemes, attach one MLTCP job per worker: a real host's job config
   counts that host's bytes, and every emulated host shares one kernel, so each
   worker gets its own job, classified by its ring successor's address and the
   job's port, with the per-worker budget of the collective;
4. start one job driver process per job (mltcp.lab.emulation.jobdriver) with a common time 0
   (seeded jitter of up to 1 ms per job breaks exact ties between seeds) and
   sample every shaped link (throughput, queue, ECN marks, drops) meanwhile;
5. write the trace, and always tear everything down again, also on errors and
   Ctrl-C (leftovers of a killed run: `mltcp testbed clean`).

Standard DCTCP runs as mltcp_dctcp on flows of no job: this kernel has no
native DCTCP, and an unmatched MLTCP flow is the standard algorithm.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

from mltcp.core.errors import MltcpError
from mltcp.host import datapath, jobs, maps
from mltcp.lab.emulation.fabric import Fabric, dumbbell, leaf_spine
from mltcp.lab.emulation.jobdriver import DRIVER_MODULE, DriverSpec, WorkerSpec
from mltcp.lab.plan import JobPlan, RunPlan
from mltcp.lab.scenario import Scenario, Scheme
from mltcp.lab.trace import IterationRecord, JobTrace, LinkSample, LinkTrace, Trace, provenance

JOB_PREFIX = "tb-"            # MLTCP jobs the testbed attaches (testbed clean removes them)
BASE_PORT = 9000
SAMPLE_S = 0.05
SETUP_S = 1.0                 # head start for the drivers to connect before time 0

Progress = Callable[[str], None]


def build_fabric(scenario: Scenario) -> Fabric:
    topo = scenario.topology
    if topo.kind == "dumbbell":
        # Host links are unshaped veths (faster than any bottleneck here).
        return dumbbell(topo.hosts, topo.bottleneck_mbit, topo.queue_packets,
                        gso_max_segs=topo.gso_max_segs, rto_min_ms=topo.rto_min_ms,
                        mtu_bytes=topo.mtu_bytes)
    return leaf_spine(topo.leaves, topo.spines, topo.hosts_per_leaf, topo.host_link_mbit,
                      topo.oversubscription, topo.queue_packets, gso_max_segs=topo.gso_max_segs,
                      rto_min_ms=topo.rto_min_ms, mtu_bytes=topo.mtu_bytes)


def _module(scheme: Scheme) -> tuple[str | None, str]:
    """(MLTCP module to load or None, socket CC name)."""
    if scheme.mltcp or scheme.cc == "dctcp":
        return scheme.cc, f"mltcp_{scheme.cc}"
    return None, scheme.cc


class _LinkSampler(threading.Thread):
    """Samples every shaped egress: cumulative bytes -> throughput, backlog, drops, marks."""

    def __init__(self, fab: Fabric, t0: float, marked: bool) -> None:
        super().__init__(daemon=True)
        self.fab, self.t0, self.marked = fab, t0, marked
        self.stop = threading.Event()
        self.ports = {f"{lid}:{p.node}->{p.peer_node}": p for lid, p in fab.shaped_ports()}
        self.samples: dict[str, list[LinkSample]] = {k: [] for k in self.ports}
        self.last: dict[str, tuple[float, int]] = {}

    def sample(self) -> None:
        now = time.monotonic()
        stats = {node: self.fab.qdisc_stats(node)
                 for node in {p.node for p in self.ports.values()}}
        marks = _marker_counts() if self.marked else {}
        for key, port in self.ports.items():
            st = stats[port.node].get(port.dev, {})
            sent = int(st.get("bytes", 0))
            prev = self.last.get(key)
            rate = 0.0 if prev is None else 8 * (sent - prev[1]) / max(now - prev[0], 1e-6)
            self.last[key] = (now, sent)
            self.samples[key].append(LinkSample(
                t=now - self.t0, throughput_bps=rate, queue_bytes=int(st.get("backlog", 0)),
                ecn_marks=marks.get((port.node, port.dev), 0), drops=int(st.get("drops", 0))))

    def run(self) -> None:
        """Sample from time 0 (the jobs' common start) every SAMPLE_S until stopped."""
        if self.stop.wait(max(0.0, self.t0 - time.monotonic())):
            return
        while True:
            with contextlib.suppress(Exception):  # a sample lost to a busy host is fine
                self.sample()
            if self.stop.wait(SAMPLE_S):
                return


_MARKED: dict[tuple[str, str], maps.MarkerKey] = {}   # (node, dev) -> marker key


def _marker_counts() -> dict[tuple[str, str], int]:
    out = {}
    if not maps.pin_path("mltcp_markers").exists():
        return out
    with maps.PinnedMap("mltcp_markers") as mm:
        for where, key in _MARKED.items():
            m = mm.get(key, maps.Marker)
            out[where] = int(m.marked) if m else 0
    return out


def run_plan(plan: RunPlan, progress: Progress | None = None) -> Trace:
    """Run one plan (a scenario under a scheme and seed, or one job alone for the
    dedicated baseline) on the testbed; its common trace."""
    say = progress or (lambda _msg: None)
    scenario, scheme, seed = plan.scenario, plan.scheme, plan.seed
    module, cc = _module(scheme)
    if module:
        datapath.require_bpf()
    we_loaded = []
    if module and module not in datapath.loaded_modules():
        we_loaded = datapath.load([module])
    attached: list[str] = []
    try:
        with build_fabric(scenario) as fab:
            threshold = plan.ecn_threshold_bytes
            if threshold is not None:
                _attach_markers(fab, threshold)
            specs = []
            t0 = time.monotonic() + SETUP_S
            tmp = Path(tempfile.mkdtemp(prefix="mltcp-tb-"))
            for job in plan.active_jobs:
                port = BASE_PORT + job.index
                workers = [WorkerSpec(f"/run/netns/{fab.ns(h)}", fab.host_addr(h), port)
                           for h in job.hosts]
                if scheme.mltcp:
                    attached += _attach_workers(job, scheme, fab, port)
                specs.append(DriverSpec(
                    job=job.name, workers=workers, cc=cc, connections=job.spec.connections,
                    compute_ms=job.spec.compute_ms, bytes_per_worker=job.comm_bytes_per_worker,
                    iterations=job.spec.iterations, t0=t0,
                    start_offset_ms=job.start_ms, compute_jitter_ms=list(job.compute_jitter_ms),
                    out=str(tmp / f"{job.name}.json"),
                    listener_cc=cc if scheme.cc == "dctcp" else None))
            sampler = _LinkSampler(fab, t0, threshold is not None)
            procs = []
            for spec in specs:
                path = tmp / f"{spec.job}.spec.json"
                path.write_text(spec.to_json())
                procs.append(subprocess.Popen([sys.executable, "-m", DRIVER_MODULE,
                                               str(path)], stderr=subprocess.PIPE, text=True))
            sampler.start()
            expected = max(j.spec.iterations * (j.spec.compute_ms / 1000)
                           for j in plan.active_jobs)
            next_say = time.monotonic() + 1.0
            while any(p.poll() is None for p in procs):
                time.sleep(SAMPLE_S / 2)   # stop sampling as soon as the jobs are done
                if time.monotonic() >= next_say:
                    next_say += 1.0
                    say(f"{scenario.name} / {scheme.name} / seed {seed}: "
                        f"{max(0.0, time.monotonic() - t0):.0f} s "
                        f"(compute alone ~{expected:.0f} s)")
            sampler.stop.set()
            sampler.join(timeout=5)
            sampler.sample()
            for spec, proc in zip(specs, procs, strict=True):
                if proc.returncode != 0:
                    raise MltcpError(f"job {spec.job} failed: {proc.stderr.read().strip()}")
            job_traces = []
            for spec, job in zip(specs, plan.active_jobs, strict=True):
                result = json.loads(Path(spec.out).read_text())
                job_traces.append(JobTrace(
                    name=spec.job, links=job.links,
                    iterations=tuple(IterationRecord(**it) for it in result["iterations"])))
            link_traces = tuple(
                LinkTrace(id=key, capacity_bps=_capacity(fab, key) * 1e6,
                          samples=tuple(samples))
                for key, samples in sampler.samples.items())
            return Trace(scenario=scenario.name, scheme=scheme.name, backend="netns", seed=seed,
                         jobs=tuple(job_traces), links=link_traces,
                         provenance=provenance({"topology": scenario.topology.to_dict()}),
                         params=plan.trace_params())
    finally:
        for name in attached:
            with contextlib.suppress(Exception):
                jobs.detach(name)
        if _MARKED:
            with contextlib.suppress(Exception):
                datapath.forget_markers(list(_MARKED.values()))
            _MARKED.clear()
        if we_loaded:
            with contextlib.suppress(Exception):
                datapath.unload(we_loaded)


def _capacity(fab: Fabric, key: str) -> float:
    link_id = key.split(":", 1)[0]
    return next(link.rate_mbit for link in fab.links if link.id == link_id) or 0.0


def _attach_markers(fab: Fabric, k_bytes: int) -> None:
    for _lid, port in fab.shaped_ports():
        _MARKED[(port.node, port.dev)] = datapath.attach_marker(port.dev, k_bytes,
                                                                netns=fab.ns(port.node))


def _attach_workers(job: JobPlan, scheme: Scheme, fab: Fabric, port: int) -> list[str]:
    names = []
    agg = scheme.aggressiveness
    for flow in job.flows:
        name = f"{JOB_PREFIX}{job.name}-w{flow.worker}"
        jobs.attach(jobs.JobSpec(name=name, cc=scheme.cc, budget=job.comm_bytes_per_worker,
                                 slope=agg.slope, intercept=agg.intercept, cap=agg.cap,
                                 gap_ms=job.idle_gap_ms, stale_s=0,
                                 rules=(maps.Rule(fab.host_addr(flow.dst), port),)))
        names.append(name)
    return names


def job_driver_pids(orphans_only: bool = True) -> list[int]:
    """PIDs of job drivers (python -m mltcp.lab.emulation.jobdriver) on this host.
    ``orphans_only``: those whose testbed is gone, re-parented to init; a running
    testbed's drivers are its children and are left alone."""
    pids = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            argv = (proc / "cmdline").read_bytes().split(b"\0")
            ppid = int((proc / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        if DRIVER_MODULE.encode() in argv[:4] and (ppid == 1 or not orphans_only):
            pids.append(int(proc.name))
    return pids


def clean() -> list[str]:
    """Remove leftovers of killed runs: job drivers, namespaces, testbed jobs (and rules),
    ECN markers of the removed namespaces."""
    import os
    import signal

    from mltcp.lab.emulation.netns import cleanup_leftovers

    removed = []
    for pid in job_driver_pids():
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
            removed.append(f"job driver process {pid}")
    removed += [f"namespace {ns}" for ns in cleanup_leftovers()]
    with contextlib.suppress(Exception):
        for name in list(jobs.Registry().read()):
            if name.startswith(JOB_PREFIX):
                jobs.detach(name)
                removed.append(f"job {name}")
    removed += [f"ECN marker of interface {key.ifindex} in a removed namespace"
                for key in datapath.forget_stale_markers()]
    return removed
