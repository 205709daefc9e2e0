"""Running a plan on ns-3: the pieces every ns-3 scenario program shares.

A scenario program (``ns3_scenarios/dumbbell.py``, ``ns3_scenarios/leaf_spine.py``)
states its topology explicitly with :class:`Wiring`; this module does the rest the
same way for all of them:

* :func:`load` imports ns-3 and compiles the MLTCP classes (mltcp_sim.h) into it, with
  F's parameter bounds rendered from the Python spec (:func:`cxx_defines`), so the
  attribute checkers of ``ns3::MltcpJobConfig`` accept exactly what
  :class:`mltcp.core.aggressiveness.Aggressiveness` accepts;
* :func:`configure` sets the TCP defaults (segment size from the MTU, delayed ACKs,
  Linux-like receive buffers, the minimum RTO, ECN where links mark);
* :class:`Wiring` builds nodes, point-to-point links, queue discs (a byte FIFO, or RED
  as a step ECN marker at the plan's threshold) and addresses in the order ns-3 needs;
* :func:`simulate` adds the plan's jobs (placement, starts, jitter, per-phase bytes,
  the MLTCP job configs, each ring flow pinned to its drawn path on a multipath
  fabric), runs the simulator with progress lines and a simulated-time limit, and
  returns the common trace.

The worker process (:mod:`mltcp.lab.scenario.ns3.worker`) calls the program the plan's topology
kind names (:mod:`mltcp.lab.scenario.ns3.programs`), so the programs researchers edit are the
ones the ``ns3`` backend runs; it runs many plans, with :func:`reset` between them.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mltcp.core.aggressiveness import MAX_CAP, MAX_INTERCEPT, MAX_SLOPE, MIN_INTERCEPT
from mltcp.core.errors import MltcpError
from mltcp.lab.common.provenance import provenance
from mltcp.lab.scenario.graph import LinkSpec, NetworkGraph, directed_id
from mltcp.lab.scenario.plan import JobPlan, RunPlan
from mltcp.lab.scenario.spec import Scheme
from mltcp.lab.scenario.trace import (
    FlowSample,
    FlowTrace,
    IterationRecord,
    JobTrace,
    LinkSample,
    LinkTrace,
    Trace,
)

HERE = Path(__file__).resolve().parent
NS3_VERSION = "3.44"
SAMPLE_S = 0.01
CC_TYPES = {"reno": "ns3::TcpLinuxReno", "cubic": "ns3::TcpCubic", "dctcp": "ns3::TcpDctcp"}
MLTCP_TYPES = {"reno": "ns3::MltcpReno", "cubic": "ns3::MltcpCubic", "dctcp": "ns3::MltcpDctcp"}
RCV_BUF_BYTES = 64 << 20
LINUX_RTO_MIN_MS = 200
BASE_PORT = 9000


# --------------------------------------------------------------------------- the C++ model


def cxx_defines() -> str:
    """F's parameter bounds as the C++ macros mltcp_tracker.h requires: one source of
    truth (mltcp.core.aggressiveness), rendered into ns-3's attribute checkers."""
    bounds = {"MLTCP_MAX_SLOPE": MAX_SLOPE, "MLTCP_MIN_INTERCEPT": MIN_INTERCEPT,
              "MLTCP_MAX_INTERCEPT": MAX_INTERCEPT, "MLTCP_MAX_CAP": MAX_CAP}
    return "".join(f"#ifndef {k}\n#define {k} {float(v)!r}\n#endif\n" for k, v in bounds.items())


def include(cppyy: Any, header: str = "mltcp_sim.h") -> None:
    """Compile one of the model's headers into the process, bounds defined first."""
    cppyy.add_include_path(str(HERE))
    cppyy.cppdef(cxx_defines())
    cppyy.include(str(HERE / header))


def load() -> tuple[Any, Any]:
    """Import ns-3 and compile the MLTCP classes into it (a few seconds): (ns, cppyy.gbl)."""
    import cppyy
    from ns import ns

    include(cppyy)
    for name in ("MltcpReno", "MltcpCubic", "MltcpDctcp", "MltcpJobConfig", "FlowPathRouting"):
        getattr(cppyy.gbl.ns3, name).GetTypeId()     # registers the TypeId
    return ns, cppyy.gbl


def reset(ns: Any, gbl: Any) -> None:
    """Return ns-3 to a fresh process's state, so that one worker process runs plan after
    plan with the traces a fresh process gives (bit for bit: tests/test_ns3_workers.py).

    What ns-3 keeps across simulations, and how it goes:

    * ``Simulator::Destroy()``: the event list, the clock (back to 0, event ids from 0)
      and everything registered for destruction with it: the node list (the next node
      is node 0 again, and node ids key the MLTCP trackers), the channel list, global
      routing's database;
    * ``Config::Reset()``: every attribute's default and every global value (RngSeed,
      RngRun) as before any SetDefault/SetGlobal (a plan without ECN must not inherit
      the previous plan's ``UseEcn``);
    * ``RngSeedManager::ResetNextStreamIndex()``: random variables are numbered from
      stream 0 again, so each one draws the same numbers as in a fresh process;
    * ``Names::Clear()`` (nothing here names objects; a program might);
    * ``MltcpJobs::Clear()``: the model's own static table of trackers by (job, node).

    Left as they are, and harmless: GlobalRouteManager's router-id counter (ns-3 has no
    reset; ids keep counting up, in the same order, so routes and ECMP's first path are
    the same) and Packet's uid counter (ids no model here reads).  TypeIds and the
    compiled classes stay: they are the same for every plan."""
    ns.Simulator.Destroy()
    ns.Config.Reset()
    ns.RngSeedManager.ResetNextStreamIndex()
    ns.Names.Clear()
    gbl.ns3.MltcpJobs.Clear()


def cc_type(scheme: Scheme) -> str:
    """The ns-3 class of a scheme (MLTCP classes run unmodified on flows of no job)."""
    return (MLTCP_TYPES if scheme.mltcp else CC_TYPES)[scheme.cc]


def configure(ns: Any, plan: RunPlan) -> None:
    """The run's seed and TCP defaults; call before any node is built."""
    topo = plan.topology
    ns.RngSeedManager.SetSeed(1 + plan.seed)
    ns.Config.SetDefault("ns3::TcpSocket::SegmentSize", ns.UintegerValue(topo.mss_bytes))
    ns.Config.SetDefault("ns3::TcpSocket::DelAckCount", ns.UintegerValue(1))
    # Linux autotunes its buffers; ns-3's default 128 KB receive window would cap every
    # flow below the bottleneck's queue, so congestion control would never act.
    ns.Config.SetDefault("ns3::TcpSocket::RcvBufSize", ns.UintegerValue(RCV_BUF_BYTES))
    # ns-3's minimum RTO is 1 s; Linux's is 200 ms unless the scenario lowers it.
    rto_ms = topo.rto_min_ms or LINUX_RTO_MIN_MS
    ns.Config.SetDefault("ns3::TcpSocketBase::MinRto", ns.TimeValue(ns.MilliSeconds(rto_ms)))
    if plan.ecn_threshold_bytes is not None:
        # Hosts negotiate ECN wherever links mark (as the testbed's hosts, tcp_ecn=1).
        ns.Config.SetDefault("ns3::TcpSocketBase::UseEcn", ns.StringValue("On"))


# --------------------------------------------------------------------------- the network


@dataclass
class Network:
    """The plan's network in ns-3: nodes by name, each host's address, the queue discs of
    the shaped links by directed link id, and per link its two devices and interface
    addresses (end a first)."""

    graph: NetworkGraph
    nodes: dict[str, Any]
    host_addr: dict[str, Any]
    queues: dict[str, Any]
    ends: dict[str, tuple[Any, Any]]
    link_delay: str


def queue_disc(ns: Any, plan: RunPlan, rate_mbit: float, link_delay: str) -> Any:
    """A shaped link's queue: a FIFO of the scenario's queue size in bytes (as the
    testbed's bfifo), or, where the plan marks ECN, RED used as a step marker at that
    backlog (instantaneous queue, no early drops)."""
    topo = plan.topology
    tch = ns.TrafficControlHelper()
    limit = topo.queue_bytes
    k = plan.ecn_threshold_bytes
    if k is not None:
        tch.SetRootQueueDisc("ns3::RedQueueDisc",
                             "MaxSize", ns.QueueSizeValue(ns.QueueSize(f"{limit}B")),
                             "UseEcn", ns.BooleanValue(True),
                             "UseHardDrop", ns.BooleanValue(False),
                             "MeanPktSize", ns.UintegerValue(topo.frame_bytes),
                             # Thresholds are in the queue's unit: bytes here.
                             "MinTh", ns.DoubleValue(k),
                             "MaxTh", ns.DoubleValue(k),
                             "QW", ns.DoubleValue(1.0),
                             "LinkBandwidth", ns.DataRateValue(ns.DataRate(f"{rate_mbit}Mbps")),
                             "LinkDelay", ns.TimeValue(ns.Time(link_delay)))
    else:
        tch.SetRootQueueDisc("ns3::FifoQueueDisc",
                             "MaxSize", ns.QueueSizeValue(ns.QueueSize(f"{limit}B")))
    return tch


@dataclass
class _Link:
    spec: LinkSpec
    rate_mbit: float
    shaped: bool
    devices: Any


@dataclass
class Wiring:
    """Builds a program's network in the order ns-3 requires: nodes, devices per link,
    then the internet stack, queue discs, addresses and routes (:meth:`finish`).

    A program adds every node and every link of the plan's graph, by the graph's names
    (the trace names links ``"<link id>:<from>-><to>"`` on every backend); ``shaped``
    links get :func:`queue_disc` on both ends."""

    ns: Any
    plan: RunPlan
    link_delay: str = "5us"          # per link: a data-centre base RTT of a few tens of µs
    device_queue: str = "4p"         # the NIC ring below the queue disc: keep it small
    nodes: dict[str, Any] = field(default_factory=dict)
    links: list[_Link] = field(default_factory=list)

    def node(self, name: str) -> Any:
        container = self.ns.NodeContainer()
        container.Create(1)
        self.nodes[name] = container.Get(0)
        return self.nodes[name]

    def link(self, link_id: str, rate_mbit: float, shaped: bool) -> None:
        """A point-to-point link between the graph link's two ends."""
        ns, spec = self.ns, self.plan.graph.link(link_id)
        p2p = ns.PointToPointHelper()
        p2p.SetDeviceAttribute("DataRate", ns.StringValue(f"{rate_mbit}Mbps"))
        p2p.SetDeviceAttribute("Mtu", ns.UintegerValue(self.plan.topology.mtu_bytes))
        p2p.SetChannelAttribute("Delay", ns.StringValue(self.link_delay))
        p2p.SetQueue("ns3::DropTailQueue<Packet>", "MaxSize", ns.StringValue(self.device_queue))
        pair = ns.NodeContainer()
        pair.Add(self.nodes[spec.a])
        pair.Add(self.nodes[spec.b])
        self.links.append(_Link(spec, rate_mbit, shaped, p2p.Install(pair)))

    def finish(self) -> Network:
        ns, graph = self.ns, self.plan.graph
        built, wanted = [lk.spec.id for lk in self.links], [lk.id for lk in graph.links]
        nodes = {*graph.hosts, *graph.switches}
        if sorted(built) != sorted(wanted) or set(self.nodes) != nodes:
            raise MltcpError(
                "the scenario program must build exactly the plan's network: missing "
                f"{sorted(set(wanted) - set(built)) + sorted(nodes - set(self.nodes))}, extra "
                f"{sorted(set(built) - set(wanted)) + sorted(set(self.nodes) - nodes)}")
        stack = ns.InternetStackHelper()
        for node in self.nodes.values():
            stack.Install(node)
        addr = ns.Ipv4AddressHelper()
        host_addr, queues, ends = {}, {}, {}
        for k, lk in enumerate(self.links):
            spec = lk.spec
            if lk.shaped:
                discs = queue_disc(ns, self.plan, lk.rate_mbit, self.link_delay).Install(
                    lk.devices)
                queues[directed_id(spec, spec.a, spec.b)] = discs.Get(0)
                queues[directed_id(spec, spec.b, spec.a)] = discs.Get(1)
            # Order matters in ns-3: assigning an address installs a default queue disc
            # where none is, so the queue discs come first.
            addr.SetBase(ns.Ipv4Address(f"10.{k // 250}.{k % 250}.0"),
                         ns.Ipv4Mask("255.255.255.0"))
            ifs = addr.Assign(lk.devices)
            ends[spec.id] = (lk.devices, ifs)
            for end, index in ((spec.a, 0), (spec.b, 1)):
                if end in graph.hosts and end not in host_addr:
                    host_addr[end] = ifs.GetAddress(index)
        ns.Ipv4GlobalRoutingHelper.PopulateRoutingTables()
        return Network(graph, self.nodes, host_addr, queues, ends, self.link_delay)


def pin_flow_paths(gbl: Any, net: Network, job: JobPlan) -> None:
    """Pin each ring flow of a job to its own path through a multipath fabric.

    Every switch the flow crosses gets a FlowPathRouting entry (source host,
    destination host) -> next hop, for the path the plan drew for it
    (:func:`mltcp.lab.scenario.graph.ring_flow_path`: one path per flow as a switch's flow hash
    gives, and the same path as the fluid model's run of this seed).  ACKs go back on
    global routing's first path.  (ns-3's own ECMP sprays packets and reorders TCP.)"""
    for flow in job.flows:
        src, dst = net.host_addr[flow.src], net.host_addr[flow.dst]
        for a, _next, link in flow.hops:
            if a not in net.graph.switches:
                continue
            devs, ifs = net.ends[link.id]
            here, there = (0, 1) if link.a == a else (1, 0)
            gbl.ns3.FlowPathRouting.On(net.nodes[a]).Add(src, dst, devs.Get(here),
                                                           ifs.GetAddress(there))


# --------------------------------------------------------------------------- the jobs


def _job_config(ns: Any, gbl: Any, job_id: int, node_id: int, budget: int, agg: Any,
                gap_ns: int) -> None:
    """The job's tracker on one host, through MltcpJobConfig's attributes (named after
    the Python spec), as an ns-3 script would set them."""
    cfg = gbl.ns3.CreateObject[gbl.ns3.MltcpJobConfig]()
    for name, value in (("JobId", ns.UintegerValue(job_id)),
                        ("NodeId", ns.UintegerValue(node_id)),
                        ("Budget", ns.UintegerValue(budget)),
                        ("Slope", ns.DoubleValue(agg.slope)),
                        ("Intercept", ns.DoubleValue(agg.intercept)),
                        ("Cap", ns.DoubleValue(agg.cap or 0.0)),
                        ("IdleGap", ns.TimeValue(ns.NanoSeconds(gap_ns)))):
        cfg.SetAttribute(name, value)
    cfg.Install()


def _create(cls: Any) -> Any:
    """A simulation object that C++ ``Ptr`` copies may outlive Python's name for.

    Constructed from Python, the object belongs to Python, which deletes it when its
    last Python name goes while C++ ``Ptr`` copies (the watcher's job list) still count
    on it: their later release wrote into freed memory, and glibc aborted with
    "corrupted double-linked list" in a fresh-clone CI run.  Python gives up ownership
    here; the object lives until the process exits.  (``ns3::Create<T>()`` would
    refcount it properly, but cppyy stores data members assigned through a ``Ptr``
    proxy on the proxy, not on the C++ object.)"""
    obj = cls()
    obj.__python_owns__ = False
    return obj


def _add_jobs(ns: Any, gbl: Any, plan: RunPlan, net: Network) -> list[tuple[JobPlan, Any]]:
    scheme = plan.scheme
    multipath = plan.topology.kind != "dumbbell"
    agg = scheme.aggressiveness
    jobs = []
    for jp in plan.active_jobs:
        job = jp.spec
        tj = _create(gbl.ns3.TrainingJob)
        for h in jp.hosts:
            tj.nodes.push_back(net.nodes[h])
            tj.addrs.push_back(net.host_addr[h])
        tj.port = BASE_PORT + jp.index
        for phase, nbytes in zip(job.phase_list(), jp.phase_bytes, strict=True):
            tj.phase_compute_s.push_back(phase.compute_ms / 1000)
            tj.phase_bytes.push_back(nbytes)
        tj.connections = job.connections
        tj.iterations = job.iterations
        for x in jp.compute_jitter_ms:
            tj.jitter_s.push_back(x / 1000)
        tj.cc_type = cc_type(scheme)
        if scheme.mltcp:
            tj.job_id = jp.index + 1
            gap_ns = int(jp.idle_gap_ms * 1e6)
            for h in jp.hosts:
                _job_config(ns, gbl, jp.index + 1, net.nodes[h].GetId(),
                            jp.comm_bytes_per_worker, agg, gap_ns)
        if multipath:
            pin_flow_paths(gbl, net, jp)
        tj.Start(jp.start_ms / 1000)
        jobs.append((jp, tj))
    return jobs


def simulate(ns: Any, gbl: Any, plan: RunPlan, net: Network, max_sim_s: float,
             program: str = "", progress_step_s: float = 0.5,
             progress: Callable[[float, float], None] | None = None) -> Trace:
    """Add the plan's jobs to the built network, run until they are done (or
    ``max_sim_s`` of simulated time, an error), and return the common trace.
    ``program`` names the scenario program that built the network (provenance);
    ``progress(simulated_s, wall_s)`` is called every ``progress_step_s`` simulated."""
    jobs = _add_jobs(ns, gbl, plan, net)
    sampler = _create(gbl.ns3.Sampler)
    link_ids = sorted(net.queues)
    for lid in link_ids:
        sampler.queues.push_back(net.queues[lid])
    for _, tj in jobs:
        sampler.jobs.push_back(tj)
    sampler.period_s = SAMPLE_S
    sampler.Start()
    watcher = _create(gbl.ns3.DoneWatcher)
    for _, tj in jobs:
        watcher.jobs.push_back(tj)
    watcher.sampler = sampler
    watcher.Start()
    started = time.monotonic()
    t = 0.0
    while t < max_sim_s and not all(tj.done for _, tj in jobs):
        t = min(t + progress_step_s, max_sim_s)
        ns.Simulator.Stop(ns.Seconds(t) - ns.Simulator.Now())     # Stop takes a delay
        ns.Simulator.Run()
        if progress is not None:
            progress(ns.Simulator.Now().GetSeconds(), time.monotonic() - started)
    simulation_wall_s = time.monotonic() - started       # without import and compile
    times = list(sampler.times)
    job_traces, flows = [], []
    for jp, tj in jobs:
        job, hosts = jp.spec, jp.hosts
        if not tj.done:
            raise RuntimeError(f"job {job.name} finished {tj.rec_comm_end.size()} of "
                               f"{job.iterations} iterations within {max_sim_s} s simulated")
        n_phases = len(job.phase_list())
        recs = []
        for k in range(job.iterations):
            start, cs, ce = tj.rec_start[k], tj.rec_comm_start[k], tj.rec_comm_end[k]
            phases = None
            if n_phases > 1:
                phases = tuple((tj.rec_phase_start[k * n_phases + p],
                                tj.rec_phase_end[k * n_phases + p]) for p in range(n_phases))
            recs.append(IterationRecord(k, start, cs, ce, ce,
                                        job.comm_bytes_per_worker() * job.workers,
                                        phases=phases))
        job_traces.append(JobTrace(job.name, jp.links, tuple(recs)))
        for i in range(len(hosts)):
            for c in range(job.connections):
                cwnd = sampler.cwnd[len(flows)]
                flows.append(FlowTrace(f"{job.name}/{i}.{c}", job.name, hosts[i],
                                       hosts[(i + 1) % len(hosts)],
                                       tuple(FlowSample(ts, int(cwnd[n]))
                                             for n, ts in enumerate(times))))
    rates = {lk.id: lk.rate_mbit for lk in net.graph.links}
    links = []
    for q, lid in enumerate(link_ids):
        if lid not in plan.record_links:       # the scenario's record_links
            continue
        prev_t, prev_b, samples = 0.0, 0, []
        for i, ts in enumerate(times):
            sent = int(sampler.sent[q][i])
            bps = 8 * (sent - prev_b) / max(ts - prev_t, 1e-9)
            samples.append(LinkSample(ts, bps, int(sampler.backlog[q][i]),
                                      int(sampler.marks[q][i]), int(sampler.drops[q][i])))
            prev_t, prev_b = ts, sent
        links.append(LinkTrace(lid, rates[lid.split(":", 1)[0]] * 1e6, tuple(samples)))
    scenario, scheme = plan.scenario, plan.scheme
    return Trace(scenario=scenario.name, scheme=scheme.name, backend="ns3", seed=plan.seed,
                 jobs=tuple(job_traces), links=tuple(links),
                 provenance=provenance({"topology": scenario.topology.to_dict(),
                                        "ns3": {"version": NS3_VERSION, "program": program,
                                                "link_delay": net.link_delay,
                                                "cc_type": cc_type(scheme),
                                                "simulation_wall_s": simulation_wall_s}}),
                 params=plan.trace_params(), flows=tuple(flows))


def comparable(trace: Trace) -> dict:
    """A trace's JSON less what two runs of one plan may differ in (the provenance's
    host, time and command, the simulation loop's wall time): equal for a run in a
    fresh process and in a reused worker (tests/test_ns3_workers.py)."""
    data = trace.to_dict()
    ns3 = dict(data.pop("provenance")["ns3"])
    ns3.pop("simulation_wall_s", None)
    return {**data, "ns3": ns3}


def max_sim_seconds(plan: RunPlan) -> float:
    """Simulated time after which a run that has not finished is an error: twice the
    worst case in which every iteration of every job shares the bottleneck with all
    the others, plus start offsets and jitter, plus 5 s."""
    jobs = [j.spec for j in plan.jobs]
    all_comm_s = sum(j.comm_bytes_per_worker() for j in jobs) * 8 / (
        plan.topology.bottleneck_mbit * 1e6)
    longest = max((p.start_offset_ms + j.iterations * (j.compute_ms + 3 * j.compute_jitter_ms))
                  / 1000 + j.iterations * all_comm_s for p, j in zip(plan.jobs, jobs,
                                                                     strict=True))
    return 2 * longest + 5.0


def progress_to_stderr(simulated_s: float, wall_s: float) -> None:
    """The worker's progress line, which the launcher parses."""
    print(f"progress {simulated_s:.3f} {wall_s:.1f}", file=sys.stderr, flush=True)
