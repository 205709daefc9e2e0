"""The netns testbed: run one plan on real kernel TCP in network namespaces.

One run = one plan (a scenario under one scheme and seed, or one job alone) and
produces one common trace (:mod:`mltcp.lab.scenario.trace`).  Per run:

1. build the plan's network (:mod:`mltcp.lab.scenario.emulation.fabric`); where the plan marks
   ECN, the BPF marker on every shaped egress;
2. register the MLTCP module the scheme needs (and only for that run if it was not
   loaded before);
3. for MLTCP schemes, attach one MLTCP job per worker: a real host's job config counts
   that host's bytes, and every emulated host shares one kernel, so each worker gets
   its own job, classified by its ring successor's address and the job's port, with
   the per-worker budget of the collective and the plan's idle gap;
4. start one traffic job per scenario job (:mod:`mltcp.lab.scenario.emulation.traffic`) with a
   common time 0 and the plan's start offsets and jitter draws, and sample every shaped
   link (throughput, queue, ECN marks, drops) meanwhile;
5. write the trace, and always tear everything down again, also on errors, Ctrl-C,
   SIGTERM and SIGHUP (the CLI unwinds on them: :mod:`mltcp.core.signals`): the job
   drivers' process group, the namespaces, the jobs, the markers, the module.

The run claims its namespaces and jobs before it creates them, and holds the claim
while it lives (:mod:`mltcp.lab.scenario.emulation.owners`): `mltcp testbed clean` removes only
the leftovers of runs that are gone (SIGKILL, power loss), and names the live ones.

Standard DCTCP runs as mltcp_dctcp on flows of no job: this kernel has no native
DCTCP, and an unmatched MLTCP flow is the standard algorithm.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from mltcp.core import signals
from mltcp.host import datapath, jobs, maps, rules
from mltcp.host.namespaces import list_netns
from mltcp.lab.common.provenance import provenance
from mltcp.lab.scenario.emulation import netns, owners, traffic
from mltcp.lab.scenario.emulation.fabric import Fabric, Port, for_topology
from mltcp.lab.scenario.plan import JobPlan, RunPlan
from mltcp.lab.scenario.spec import Scheme
from mltcp.lab.scenario.trace import IterationRecord, JobTrace, LinkSample, LinkTrace, Trace

JOB_PREFIX = "tb-"            # MLTCP jobs the testbed attaches (testbed clean removes them)
BASE_PORT = 9000
SAMPLE_S = 0.05
SETUP_S = 1.0                 # head start for the jobs to connect before time 0

Progress = Callable[[str], None]
Markers = dict[tuple[str, str], maps.MarkerKey]     # (node, dev) -> the marker's key


@dataclass(frozen=True)
class LiveRun:
    """A run in progress as a ``during`` hook of :func:`run_plan` sees it."""

    fabric: Fabric
    t0: float
    """The jobs' common time 0 on ``time.monotonic()``'s clock (trace times count from it)."""
    markers: Markers


During = Callable[[LiveRun], contextlib.AbstractContextManager[object]]


def module_for(scheme: Scheme) -> tuple[str | None, str]:
    """(MLTCP module to load or None, socket CC name)."""
    if scheme.mltcp or scheme.cc == "dctcp":
        return scheme.cc, f"mltcp_{scheme.cc}"
    return None, scheme.cc


class _LinkSampler(threading.Thread):
    """Samples every shaped egress: cumulative bytes -> throughput, backlog, drops, marks."""

    def __init__(self, fab: Fabric, t0: float, markers: Markers) -> None:
        super().__init__(daemon=True)
        self.fab, self.t0, self.markers = fab, t0, markers
        self.stop = threading.Event()
        self.ports = {f"{lid}:{p.node}->{p.peer_node}": p for lid, p in fab.shaped_ports()}
        self.samples: dict[str, list[LinkSample]] = {k: [] for k in self.ports}
        self.last: dict[str, tuple[float, int]] = {}

    def sample(self) -> None:
        now = time.monotonic()
        stats = {node: self.fab.qdisc_stats(node)
                 for node in {p.node for p in self.ports.values()}}
        marks = marker_counts(self.markers)
        for key, port in self.ports.items():
            st = stats[port.node].get(port.dev)
            sent = st.bytes if st else 0
            prev = self.last.get(key)
            rate = 0.0 if prev is None else 8 * (sent - prev[1]) / max(now - prev[0], 1e-6)
            self.last[key] = (now, sent)
            self.samples[key].append(LinkSample(
                t=now - self.t0, throughput_bps=rate, queue_bytes=st.backlog if st else 0,
                ecn_marks=marks.get((port.node, port.dev), 0), drops=st.drops if st else 0))

    def run(self) -> None:
        """Sample from time 0 (the jobs' common start) every SAMPLE_S until stopped."""
        if self.stop.wait(max(0.0, self.t0 - time.monotonic())):
            return
        while True:
            with contextlib.suppress(Exception):  # a sample lost to a busy host is fine
                self.sample()
            if self.stop.wait(SAMPLE_S):
                return


def marker_counts(markers: Markers) -> dict[tuple[str, str], int]:
    """CE marks each marker has set so far, by (node, device)."""
    if not markers or not maps.pin_path("mltcp_markers").exists():
        return {}
    with maps.PinnedMap("mltcp_markers") as mm:
        out = {}
        for where, key in markers.items():
            m = mm.get(key, maps.Marker)
            out[where] = int(m.marked) if m else 0
        return out


def run_plan(plan: RunPlan, progress: Progress | None = None,
             watch: Callable[[], None] | None = None, during: During | None = None) -> Trace:
    """Run one plan on the testbed; its common trace.  ``watch`` is called about every
    50 ms while the jobs run (``mltcp demo --live`` shows the datapath's state).
    ``during`` makes a context entered once the network and its ECN markers are up,
    before the jobs connect, and left when they are done, before anything is torn down
    (packet captures on the wires: tests/test_wire.py)."""
    say = progress or (lambda _msg: None)
    scenario, scheme, seed = plan.scenario, plan.scheme, plan.seed
    module, cc = module_for(scheme)
    if module:
        datapath.require_bpf()
    owner = owners.RunOwner()      # held until everything below is gone again
    we_loaded: list[str] = []      # unloaded at the end
    attached: list[str] = []
    markers: Markers = {}
    try:
        if module:
            with signals.deferred():    # loaded and noted, or neither
                we_loaded = datapath.load([module]).loaded
        with for_topology(plan.topology, graph=plan.graph, owner=owner) as fab:
            if plan.ecn_threshold_bytes is not None:
                markers = attach_markers(fab, plan.ecn_threshold_bytes)
            t0 = time.monotonic() + SETUP_S
            specs = []
            for job in plan.active_jobs:
                port = BASE_PORT + job.index
                if scheme.mltcp:
                    _attach_workers(job, scheme, fab, port, attached, owner)
                specs.append(traffic.TrafficSpec(
                    name=job.name, workers=[fab.endpoint(h, port) for h in job.hosts], cc=cc,
                    connections=job.spec.connections, iterations=job.spec.iterations,
                    bytes_per_worker=job.comm_bytes_per_worker,
                    compute_ms=job.spec.compute_ms,
                    compute_jitter_ms=list(job.compute_jitter_ms), t0=t0,
                    start_offset_ms=job.start_ms,
                    listener_cc=cc if scheme.cc == "dctcp" else None))
            sampler = _LinkSampler(fab, t0, markers)
            expected = max(j.spec.iterations * (j.spec.compute_ms / 1000)
                           for j in plan.active_jobs)
            with contextlib.ExitStack() as hooks:
                if during is not None:   # entered before the jobs start (and connect)
                    hooks.enter_context(during(LiveRun(fab, t0, markers)))
                # The job drivers join the fabric's process group: one teardown stops them.
                with traffic.Launch(specs, group=fab.group) as launch:
                    sampler.start()
                    try:
                        next_say = time.monotonic() + 1.0
                        while launch.running():
                            time.sleep(SAMPLE_S / 2)   # stop sampling as soon as jobs are done
                            if watch is not None:
                                watch()
                            if time.monotonic() >= next_say:
                                next_say += 1.0
                                say(f"{scenario.name} / {scheme.name} / seed {seed}: "
                                    f"{max(0.0, time.monotonic() - t0):.0f} s "
                                    f"(compute alone ~{expected:.0f} s)")
                    finally:
                        sampler.stop.set()
                        sampler.join(timeout=5)
                    sampler.sample()
                    reports = launch.wait()
            job_traces = [JobTrace(name=job.name, links=job.links,
                                   iterations=tuple(IterationRecord(**it)
                                                    for it in report["iterations"]))
                          for job, report in zip(plan.active_jobs, reports, strict=True)]
            rates = {link.id: link.rate_mbit for link in fab.links}
            link_traces = tuple(
                LinkTrace(id=key, capacity_bps=(rates[key.split(":", 1)[0]] or 0.0) * 1e6,
                          samples=tuple(samples))
                for key, samples in sampler.samples.items()
                if key in plan.record_links)          # the scenario's record_links
            return Trace(scenario=scenario.name, scheme=scheme.name, backend="netns", seed=seed,
                         jobs=tuple(job_traces), links=link_traces,
                         provenance=provenance({"topology": scenario.topology.to_dict()}),
                         params=plan.trace_params())
    finally:
        # The same teardown after a normal end, an error, Ctrl-C, SIGTERM or SIGHUP (the
        # CLI turns those into an unwinding); a signal meanwhile waits for its end.
        with signals.deferred():
            _teardown(attached, markers, we_loaded, owner)


def _teardown(attached: list[str], markers: Markers, we_loaded: list[str],
              owner: owners.RunOwner) -> None:
    """Detach the run's jobs, forget its markers, unload what it loaded; then drop its
    claim (the fabric, its processes and namespaces went first)."""
    for name in attached:
        with contextlib.suppress(Exception):
            jobs.detach(name)
    if markers:
        with contextlib.suppress(Exception):
            datapath.forget_markers(list(markers.values()))
    if we_loaded:
        with contextlib.suppress(Exception):
            datapath.unload(we_loaded)
    owner.close()


def attach_markers(fab: Fabric, k_bytes: int) -> Markers:
    """An ECN marker (CE above ``k_bytes`` queued) on every shaped port of ``fab``: what
    a run whose scenario sets ``ecn_threshold_bytes`` needs, and what a caller that
    builds its own fabric (the hosts bench) attaches itself.  All or none."""
    markers: Markers = {}
    ports: list[Port] = [p for _lid, p in fab.shaped_ports()]
    try:
        for port in ports:
            with signals.deferred():    # attached and noted, or neither
                markers[(port.node, port.dev)] = datapath.attach_marker(
                    port.dev, k_bytes, netns=fab.ns(port.node))
    except BaseException:
        datapath.forget_markers(list(markers.values()))
        raise
    return markers


def _attach_workers(job: JobPlan, scheme: Scheme, fab: Fabric, port: int,
                    attached: list[str], owner: owners.RunOwner) -> None:
    """One MLTCP job per worker, each claimed by the run before it is attached and named
    in ``attached`` as soon as it is (so that a failure half way detaches exactly those,
    and `testbed clean` leaves them alone while the run lives)."""
    agg = scheme.aggressiveness
    for flow in job.flows:
        name = f"{JOB_PREFIX}{job.name}-w{flow.worker}"
        owner.claim(jobs=[name])
        with signals.deferred():
            jobs.attach(jobs.JobSpec(name=name, cc=scheme.cc, budget=job.comm_bytes_per_worker,
                                     slope=agg.slope, intercept=agg.intercept, cap=agg.cap,
                                     gap_ms=job.idle_gap_ms, stale_s=0,
                                     rules=(rules.Rule(fab.host_addr(flow.dst), port),)))
            attached.append(name)


@dataclass(frozen=True)
class CleanReport:
    """What ``mltcp testbed clean`` removed, and what it kept because its run is alive."""

    removed: list[str]
    kept: list[str]            # "3 namespaces and 2 jobs of run 1234 (alive)"


def clean(force: bool = False) -> CleanReport:
    """Remove leftovers of killed runs: traffic jobs, namespaces, testbed jobs (and rules),
    ECN markers of the removed namespaces, scratch directories.  Namespaces and jobs a
    live run claimed (:mod:`mltcp.lab.scenario.emulation.owners`) stay unless ``force``."""
    runs = owners.records()
    live = [] if force else [r for r in runs if r.alive]
    removed, kept = [], []
    for pid in traffic.pids():
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
            removed.append(f"traffic job process {pid}")
    found = [ns for ns in list_netns() if ns.startswith(netns.PROJECT_PREFIX)]
    spaces = owners.sort_out(found, live, "namespaces")
    for ns in spaces.remove:
        netns.delete_netns(ns)
        removed.append(f"namespace {ns}")
    ours = owners.Sorted()
    with contextlib.suppress(Exception):    # no registry yet: no jobs
        names = [n for n in jobs.Registry().read() if n.startswith(JOB_PREFIX)]
        ours = owners.sort_out(names, live, "jobs")
        for name in ours.remove:
            jobs.detach(name)
            removed.append(f"job {name}")
    for run in live:
        n_ns, n_jobs = len(spaces.kept.get(run.id, [])), len(ours.kept.get(run.id, []))
        if (n_ns or n_jobs) and run.holder is not None:
            kept.append(f"kept {n_ns} namespaces and {n_jobs} jobs of run {run.holder.pid} "
                        "(alive)")
    removed += [f"ECN marker of interface {key.ifindex} in a removed namespace"
                for key in datapath.forget_stale_markers()]
    for path in traffic.stale_scratch():
        shutil.rmtree(path, ignore_errors=True)
        removed.append(f"scratch directory {path}")
    for run in runs:
        if not run.alive or force:
            owners.forget(run)
    return CleanReport(removed, kept)
