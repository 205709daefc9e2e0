"""One ns-3 run, in its own process: build the scenario's network, run its jobs, write
the common trace.

ns-3 keeps global simulator state and cppyy can abort the interpreter on a C++
fault, so every run is a fresh ``python -m mltcp.lab.ns3.worker SPEC.json`` process
(started by :mod:`mltcp.lab.ns3.launch`) that receives its resolved plan
(:mod:`mltcp.lab.plan`): placement, starts, jitter, idle gaps, ECN thresholds and each
ring flow's path come from there.  It prints ``progress <sim seconds>`` lines
on stderr while it runs and writes the trace to the path in the spec.

Network: every node of :func:`mltcp.lab.graph.graph_for` becomes an ns-3 node, every link
a point-to-point link at its rate (unshaped host links at the topology's host rate)
with ``LINK_DELAY`` of propagation delay.  Shaped links get a FIFO queue disc of the
scenario's queue size in bytes (as the testbed's bfifo), or, where the topology marks
ECN (``ecn_threshold_bytes``; 30 KB for DCTCP without one), a RED queue disc used as a
step marker at that backlog (instantaneous queue), with ECN negotiated by every host.
"""

from __future__ import annotations

import json
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from mltcp.lab import plan as plans
from mltcp.lab.graph import NetworkGraph, directed_id
from mltcp.lab.plan import JobPlan, RunPlan
from mltcp.lab.scenario import Scheme
from mltcp.lab.trace import (
    FlowSample,
    FlowTrace,
    IterationRecord,
    JobTrace,
    LinkSample,
    LinkTrace,
    Trace,
    provenance,
)

HERE = Path(__file__).resolve().parent
LINK_DELAY = "5us"                 # per link: a data-centre base RTT of a few tens of µs
DEVICE_QUEUE = "4p"                # the NIC ring below the queue disc: keep it small
SAMPLE_S = 0.01
CC_TYPES = {"reno": "ns3::TcpLinuxReno", "cubic": "ns3::TcpCubic", "dctcp": "ns3::TcpDctcp"}
MLTCP_TYPES = {"reno": "ns3::MltcpReno", "cubic": "ns3::MltcpCubic", "dctcp": "ns3::MltcpDctcp"}
RCV_BUF_BYTES = 64 << 20
LINUX_RTO_MIN_MS = 200


def load_ns3():
    """Import ns-3 and compile the MLTCP classes into it (a few seconds)."""
    import cppyy
    from ns import ns

    cppyy.add_include_path(str(HERE))
    cppyy.include(str(HERE / "mltcp_sim.h"))
    for name in ("MltcpReno", "MltcpCubic", "MltcpDctcp", "MltcpJobConfig", "FlowPathRouting"):
        getattr(cppyy.gbl.ns3, name).GetTypeId()     # registers the TypeId
    return ns, cppyy.gbl


def cc_type(scheme: Scheme) -> str:
    """The ns-3 class of a scheme (MLTCP classes run unmodified on flows of no job)."""
    return (MLTCP_TYPES if scheme.mltcp else CC_TYPES)[scheme.cc]


def _queue_disc(ns, topo, k: int | None, rate_mbit: float):
    tch = ns.TrafficControlHelper()
    limit = topo.queue_bytes
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
                             "LinkDelay", ns.TimeValue(ns.Time(LINK_DELAY)))
    else:
        tch.SetRootQueueDisc("ns3::FifoQueueDisc",
                             "MaxSize", ns.QueueSizeValue(ns.QueueSize(f"{limit}B")))
    return tch


@dataclass
class Network:
    """The scenario's network in ns-3: nodes by name, each host's address, the queue
    discs of the shaped links by directed link id, and per link its two devices and
    interface addresses (end a first)."""

    graph: NetworkGraph
    nodes: dict
    host_addr: dict
    queues: dict
    ends: dict            # link id -> (devices, interfaces)


def build_network(ns, plan: RunPlan) -> Network:
    """ns-3 nodes and links for the plan's network, routed by global routing (shortest
    paths; with several, the first: see :func:`route_flows` for multipath)."""
    topo, graph = plan.topology, plan.graph
    nodes = {}
    for name in [*graph.hosts, *graph.switches]:
        container = ns.NodeContainer()
        container.Create(1)
        nodes[name] = container.Get(0)
    # Order matters in ns-3: devices, then the internet stack, then queue discs, then
    # addresses (assigning an address installs a default queue disc where none is).
    devices = []
    for link in graph.links:
        rate = link.rate_mbit or topo.host_link_mbit
        p2p = ns.PointToPointHelper()
        p2p.SetDeviceAttribute("DataRate", ns.StringValue(f"{rate}Mbps"))
        p2p.SetDeviceAttribute("Mtu", ns.UintegerValue(topo.mtu_bytes))
        p2p.SetChannelAttribute("Delay", ns.StringValue(LINK_DELAY))
        p2p.SetQueue("ns3::DropTailQueue<Packet>", "MaxSize", ns.StringValue(DEVICE_QUEUE))
        pair = ns.NodeContainer()
        pair.Add(nodes[link.a])
        pair.Add(nodes[link.b])
        devices.append(p2p.Install(pair))
    stack = ns.InternetStackHelper()
    for node in nodes.values():
        stack.Install(node)
    addr = ns.Ipv4AddressHelper()
    host_addr, queues, ends = {}, {}, {}
    for k, (link, devs) in enumerate(zip(graph.links, devices, strict=True)):
        if link.rate_mbit:
            discs = _queue_disc(ns, topo, plan.ecn_threshold_bytes, link.rate_mbit).Install(devs)
            queues[directed_id(link, link.a, link.b)] = discs.Get(0)
            queues[directed_id(link, link.b, link.a)] = discs.Get(1)
        addr.SetBase(ns.Ipv4Address(f"10.{k // 250}.{k % 250}.0"), ns.Ipv4Mask("255.255.255.0"))
        ifs = addr.Assign(devs)
        ends[link.id] = (devs, ifs)
        for end, index in ((link.a, 0), (link.b, 1)):
            if end in graph.hosts and end not in host_addr:
                host_addr[end] = ifs.GetAddress(index)
    ns.Ipv4GlobalRoutingHelper.PopulateRoutingTables()
    return Network(graph, nodes, host_addr, queues, ends)


def route_flows(gbl, net: Network, job: JobPlan) -> None:
    """Pin each ring flow of a job to its own path through a multipath fabric.

    Every switch the flow crosses gets a FlowPathRouting entry (source host,
    destination host) -> next hop, for the path the plan drew for it
    (:func:`mltcp.lab.graph.ring_flow_path`: one path per flow as a switch's flow hash
    gives, and the same path as the fluid model's run of this seed).  ACKs go back on
    global routing's first path."""
    for flow in job.flows:
        src, dst = net.host_addr[flow.src], net.host_addr[flow.dst]
        for a, _next, link in flow.hops:
            if a not in net.graph.switches:
                continue
            devs, ifs = net.ends[link.id]
            here, there = (0, 1) if link.a == a else (1, 0)
            gbl.ns3.FlowPathRouting.On(net.nodes[a]).Add(src, dst, devs.Get(here),
                                                           ifs.GetAddress(there))


def _job_config(ns, gbl, job_id: int, node_id: int, budget: int, agg, gap_ns: int) -> None:
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


def _create(cls):
    """A simulation object that C++ ``Ptr`` copies may outlive Python's name for.

    Constructed from Python, the object belongs to Python, which deletes it when its
    last Python name goes while C++ ``Ptr`` copies (the watcher's job list) still count
    on it: their later release wrote into freed memory, and glibc aborted with
    "corrupted double-linked list" in a fresh-clone CI run.  Python gives up ownership
    here; the object lives until the worker process exits.  (``ns3::Create<T>()``
    would refcount it properly, but cppyy stores data members assigned through a
    ``Ptr`` proxy on the proxy, not on the C++ object.)"""
    obj = cls()
    obj.__python_owns__ = False
    return obj


def run(spec: dict) -> Trace:
    plan = plans.from_dict(spec["plan"])
    scenario, scheme, seed = plan.scenario, plan.scheme, plan.seed
    ns, gbl = load_ns3()
    ns.RngSeedManager.SetSeed(1 + seed)
    ns.Config.SetDefault("ns3::TcpSocket::SegmentSize",
                         ns.UintegerValue(scenario.topology.mss_bytes))
    ns.Config.SetDefault("ns3::TcpSocket::DelAckCount", ns.UintegerValue(1))
    # Linux autotunes its buffers; ns-3's default 128 KB receive window would cap every
    # flow below the bottleneck's queue, so congestion control would never act.
    ns.Config.SetDefault("ns3::TcpSocket::RcvBufSize", ns.UintegerValue(RCV_BUF_BYTES))
    # ns-3's minimum RTO is 1 s; Linux's is 200 ms unless the scenario lowers it.
    rto_ms = scenario.topology.rto_min_ms or LINUX_RTO_MIN_MS
    ns.Config.SetDefault("ns3::TcpSocketBase::MinRto", ns.TimeValue(ns.MilliSeconds(rto_ms)))
    if plan.ecn_threshold_bytes is not None:
        # Hosts negotiate ECN wherever links mark (as the testbed's hosts, tcp_ecn=1).
        ns.Config.SetDefault("ns3::TcpSocketBase::UseEcn", ns.StringValue("On"))
    net = build_network(ns, plan)
    multipath = scenario.topology.kind != "dumbbell"
    agg = scheme.aggressiveness
    jobs = []
    for jp in plan.active_jobs:
        job = jp.spec
        tj = _create(gbl.ns3.TrainingJob)
        for h in jp.hosts:
            tj.nodes.push_back(net.nodes[h])
            tj.addrs.push_back(net.host_addr[h])
        tj.port = 9000 + jp.index
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
            route_flows(gbl, net, jp)
        tj.Start(jp.start_ms / 1000)
        jobs.append((jp, tj))
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
    horizon = spec["max_sim_s"]
    started = time.monotonic()
    t = 0.0
    while t < horizon and not all(tj.done for _, tj in jobs):
        t = min(t + spec.get("progress_step_s", 0.5), horizon)
        ns.Simulator.Stop(ns.Seconds(t) - ns.Simulator.Now())     # Stop takes a delay
        ns.Simulator.Run()
        print(f"progress {ns.Simulator.Now().GetSeconds():.3f} {time.monotonic() - started:.1f}",
              file=sys.stderr, flush=True)
    simulation_wall_s = time.monotonic() - started       # without import and compile
    times = list(sampler.times)
    job_traces, flows = [], []
    for jp, tj in jobs:
        job, hosts = jp.spec, jp.hosts
        if not tj.done:
            raise RuntimeError(f"job {job.name} finished {tj.rec_comm_end.size()} of "
                               f"{job.iterations} iterations within {horizon} s simulated")
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
        prev_t, prev_b, samples = 0.0, 0, []
        for i, ts in enumerate(times):
            sent = int(sampler.sent[q][i])
            bps = 8 * (sent - prev_b) / max(ts - prev_t, 1e-9)
            samples.append(LinkSample(ts, bps, int(sampler.backlog[q][i]),
                                      int(sampler.marks[q][i]), int(sampler.drops[q][i])))
            prev_t, prev_b = ts, sent
        links.append(LinkTrace(lid, rates[lid.split(":", 1)[0]] * 1e6, tuple(samples)))
    # No Simulator::Destroy(): the process ends with os._exit once the trace is written,
    # and nothing needs ns-3's teardown.
    return Trace(scenario=scenario.name, scheme=scheme.name, backend="ns3", seed=seed,
                 jobs=tuple(job_traces), links=tuple(links),
                 provenance=provenance({"topology": scenario.topology.to_dict(),
                                        "ns3": {"version": "3.44", "link_delay": LINK_DELAY,
                                                "cc_type": cc_type(scheme),
                                                "simulation_wall_s": simulation_wall_s}}),
                 params=plan.trace_params(), flows=tuple(flows))


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        print("usage: python -m mltcp.lab.ns3.worker SPEC.json", file=sys.stderr)
        return 2
    spec = json.loads(Path(argv[0]).read_text())
    trace = run(spec)
    trace.save(spec["out"])
    return 0


if __name__ == "__main__":
    code = main()
    # Leave without running finalizers: the trace is written, and interpreter teardown
    # of cppyy proxies to ns-3 objects only risks an abort after the fact.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
