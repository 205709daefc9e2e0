"""The ``dcqcn`` backend: a scenario's training jobs over the DCQCN model, as common traces.

Why a backend of its own: the tuner (``mltcp dcqcn run``) scales a RoCE NIC's rate
increase by F(bytes_ratio), and whether that interleaves jobs on RoCE depends on
DCQCN's dynamics (cuts on CNPs, fast recovery, timers), which neither the fluid
backend's weighted shares nor TCP's windows have.  Every scheme runs DCQCN here: a
scheme's ``cc`` names the TCP algorithm of the TCP backends and is ignored; ``mltcp =
true`` puts the scheme's F on the job's queue pairs through the tuner's own
:class:`~mltcp.core.dcqcn.policy.DcqcnPolicy` (mode, F quantisation, knob rounding), and
``mltcp = false`` is standard DCQCN (F = 1).

Jobs are the fluid backend's (this module builds on :func:`.fluid.build_batch`):
worker i of a ring sends its bytes to worker i+1 over the scenario's network; an
iteration is one or more phases of compute (plus the seeded jitter) then
communication, and a phase ends when all the job's bytes are delivered (barrier);
start offsets, ECMP paths and jitter come from the same functions, so a seed means
the same start on every backend.  DCQCN specifics:

* each of a worker's ``connections`` is a queue pair with its own DCQCN state,
  carrying an equal part of the worker's bytes;
* the NIC's line rate is the topology's ``host_link_mbit``; every link the fluid model
  shapes is a switch queue of ``queue_packets`` x 1514 B with DCQCN's ECN marking; on a
  dumbbell (whose host links are not shaped) queue pairs of one host first share
  its NIC, an unmarked queue at line rate;
* bytes_ratio is what the tuner sees: the payload the worker's queue pairs sent since
  the iteration began (the NIC's transmit counter, retransmissions included), wrapping
  at the budget like :class:`mltcp.core.iteration.IterationTracker`, F in its Q16.16
  arithmetic, sampled every tuner poll (2 ms), quantised by the policy;
* payload travels in RoCE packets (1024 B + 58 B of headers), so a link carries
  ~946 Mbit/s of payload per Gbit/s; link samples count wire bits;
* a flow's last bytes leave a queue in proportion to its share of the queue (the
  model's service), so a phase ends once less than half a packet of it is left.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from mltcp.core import validate
from mltcp.core.aggressiveness import FP_ONE, Aggressiveness, f_fixed
from mltcp.core.dcqcn.policy import DEFAULT_F_STEP, DEFAULT_POLL_NS, DcqcnPolicy, Mode
from mltcp.core.errors import SpecError
from mltcp.lab.common.provenance import provenance
from mltcp.lab.models.dcqcn.model import DcqcnModel, Fabric
from mltcp.lab.models.dcqcn.params import QUEUE_SLOT_BYTES, ModelParams, ScaledKnobs
from mltcp.lab.scenario.batched.jobphases import JobPhases
from mltcp.lab.scenario.batched.lanes import (
    Batch,
    Structure,
    build_batch,
    link_rates_bps,
    run_grouped,
    sample_intervals,
)
from mltcp.lab.scenario.plan import RunPlan
from mltcp.lab.scenario.spec import Scheme
from mltcp.lab.scenario.trace import IterationRecord, JobTrace, LinkSample, LinkTrace, Trace

__all__ = ["DcqcnOptions", "run_many", "run_mode", "tracker_f"]

DEFAULT_SAMPLE_S = 0.01
_nz = np.count_nonzero


@dataclass(frozen=True)
class DcqcnOptions:
    """How MLTCP drives the model, and how the trace samples it.

    ``mode``/``f_step``/``poll_s``: the tuner's policy mode, F quantisation step and
    poll period (defaults: the tuner's).  ``sample_s``: link sample period.
    ``max_steps``: a safety stop.
    """

    params: ModelParams = field(default_factory=ModelParams)
    mode: Mode = Mode.TIMER
    f_step: float = DEFAULT_F_STEP
    poll_s: float = DEFAULT_POLL_NS / 1e9
    sample_s: float = DEFAULT_SAMPLE_S
    max_steps: int = 100_000_000

    def __post_init__(self) -> None:
        if not isinstance(self.params, ModelParams):
            raise SpecError("params", f"{type(self.params).__name__} is not ModelParams",
                            "build it with ModelParams(...)")
        policy = DcqcnPolicy(Aggressiveness(0.0, 1.0), mode=self.mode, f_step=self.f_step)
        object.__setattr__(self, "mode", policy.mode)
        for name, lo, hi, fix in (("poll_s", 1e-5, 1.0, "use e.g. 0.002 (the tuner's 2 ms)"),
                                  ("sample_s", 1e-4, 60.0, "use e.g. 0.01 (10 ms samples)")):
            validate.number(getattr(self, name), name, lo, hi, fix=fix)
        validate.at_least(self.max_steps, "max_steps", 1, "use e.g. 100000000")

    def to_dict(self) -> dict:
        return {"rate_control": "DCQCN (mltcp.lab.models.dcqcn.model)", **self.params.to_dict(),
                "policy_mode": self.mode.value, "f_step": self.f_step, "poll_s": self.poll_s,
                "sample_s": self.sample_s}


def tracker_f(sent: np.ndarray, budget: np.ndarray, slope_fp: np.ndarray,
              intercept_fp: np.ndarray, cap_fp: np.ndarray) -> np.ndarray:
    """F after ``sent`` bytes of an iteration, vectorised, exactly as
    :class:`mltcp.core.iteration.IterationTracker` (wrap at the budget, and to 0 past two
    budgets) and :meth:`mltcp.core.aggressiveness.FixedAggressiveness.f_fixed` (Q16.16)
    compute it; integer arrays, broadcast together."""
    counter = np.where(sent >= budget, sent - budget, sent)
    counter = np.where(counter >= budget, 0, counter)
    return f_fixed(counter, budget, slope_fp, intercept_fp, cap_fp) / FP_ONE


# --------------------------------------------------------------------------- layout


@dataclass
class _Layout:
    """One group of runs (lanes) as queue pairs on a fabric, with the fluid batch that
    holds their jobs (phases, starts, jitter, iterations).  The fabric's links are the
    scenario's (in the order of ``structs[l].link_ids``), then any virtual NIC links."""

    plans: list[RunPlan]
    batch: Batch
    structs: list[Structure]
    fabric: Fabric
    qp_flow: np.ndarray           # (Q,) the ring flow (job, worker) of each queue pair
    qp_bytes: np.ndarray          # (L, Q) payload per iteration

    @property
    def member(self) -> np.ndarray:
        """(Q, J): queue pair -> its job."""
        jobs = np.asarray(self.structs[0].flow_job)[self.qp_flow]
        out = np.zeros((len(jobs), len(self.batch.job_names)))
        out[np.arange(len(jobs)), jobs] = 1.0
        return out

    @property
    def owner(self) -> np.ndarray:
        """(Q, W): queue pair -> its ring flow (the worker whose counter it feeds)."""
        out = np.zeros((len(self.qp_flow), len(self.batch.flow_job)))
        out[np.arange(len(self.qp_flow)), self.qp_flow] = 1.0
        return out


def _group_key(plan: RunPlan, s: Structure) -> tuple:
    """Runs that can share one model: same jobs, links and paths (routing is per model)."""
    return (tuple(j.name for j in plan.jobs), s.link_ids, s.flow_job, s.flow_links, s.weight,
            tuple(j.hosts for j in plan.jobs))


def _layout(plans: list[RunPlan], structs: list[Structure]) -> _Layout:
    batch, structs = build_batch(plans, structs)
    s0, plan0 = structs[0], plans[0]
    conns = [int(w) for w in s0.weight]
    qp_flow = np.repeat(np.arange(len(conns)), conns)
    flow_host = [h for job in plan0.jobs for h in job.hosts]   # structure()'s order
    sender = [flow_host[f] for f in qp_flow]
    paths = [list(s0.flow_links[f]) for f in qp_flow]
    n_links = len(s0.link_ids)
    nic_link: dict[str, int] = {}
    for q, host in enumerate(sender):
        if (sender.count(host) > 1 and plan0.topology.kind == "dumbbell") or not paths[q]:
            nic_link.setdefault(host, n_links + len(nic_link))
            paths[q] = [nic_link[host], *paths[q]]
    lanes = len(plans)
    line = np.array([[p.topology.host_link_mbit * 1e6 / 8] * len(qp_flow) for p in plans])
    cap = np.zeros((lanes, n_links + len(nic_link)))
    buf = np.full_like(cap, np.inf)
    for lane, (p, s) in enumerate(zip(plans, structs, strict=True)):
        rate = {link.id: link.rate_mbit for link in p.graph.links}
        cap[lane, :n_links] = [rate[lid.split(":", 1)[0]] * 1e6 / 8 for lid in s.link_ids]
        cap[lane, n_links:] = line[lane, 0]
        buf[lane, :n_links] = p.topology.queue_packets * QUEUE_SLOT_BYTES
    fabric = Fabric(paths=paths, capacity_Bps=cap, buffer_bytes=buf, line_Bps=line,
                    seed=np.array([p.seed for p in plans]),
                    marking=np.arange(cap.shape[1]) < n_links)
    conn = np.array(conns, dtype=float)[qp_flow]
    return _Layout(list(plans), batch, structs, fabric, qp_flow,
                   batch.flow_bytes[:, qp_flow] / conn)


# --------------------------------------------------------------------------- the jobs


@dataclass
class _Records:
    """Per lane, job and iteration: start, comm_start, comm_end, end; per phase too;
    per lane, link snapshots (time, cumulative bytes, queue, marks, drops)."""

    start: np.ndarray
    comm_start: np.ndarray
    comm_end: np.ndarray
    end: np.ndarray
    phase_start: np.ndarray
    phase_end: np.ndarray
    snaps: list[list[tuple[float, np.ndarray, np.ndarray, np.ndarray, np.ndarray]]]


class _Jobs(JobPhases):
    """Phases of every job of every lane over one :class:`DcqcnModel`."""

    def __init__(self, lay: _Layout, opt: DcqcnOptions) -> None:
        self.lay, self.opt, b = lay, opt, lay.batch
        self.model = DcqcnModel(lay.fabric, opt.params)
        n_lanes, n_jobs = b.iterations.shape
        n_iter = max(int(b.iterations.max(initial=0)), 1)
        shape = (n_lanes, n_jobs, n_iter)
        self.rec = _Records(*(np.full(shape, np.nan) for _ in range(4)),
                            *(np.full((*shape, b.phase_compute.shape[2]), np.nan)
                              for _ in range(2)),
                            snaps=[[] for _ in range(n_lanes)])
        self.member = lay.member                                 # (Q, J)
        self.member_b = self.member > 0
        self.owner = lay.owner                                   # (Q, W)
        self.wire = opt.params.wire_per_payload
        self.want = np.zeros_like(lay.qp_bytes)                  # wire bytes left to send
        self.inflight = np.zeros_like(lay.qp_bytes)              # sent, not delivered
        self.tx = np.zeros((n_lanes, len(b.flow_job)))           # wire bytes sent, per worker
        self.done_tol = self.model.pkt / 2
        self._init_phases(b)
        self.live = self.running.any(axis=1)
        self.comm_lane = np.zeros(n_lanes, dtype=bool)
        self._init_f()
        self.next_poll = np.zeros(n_lanes)
        self.next_sample = np.zeros(n_lanes)

    # -- F ---------------------------------------------------------------------------

    def _init_f(self) -> None:
        aggs = [p.scheme.aggressiveness for p in self.lay.plans]
        fixed = [a.to_fixed() for a in aggs]
        self.slope_fp = np.array([[f.slope_fp] for f in fixed], dtype=np.int64)
        self.intercept_fp = np.array([[f.intercept_fp] for f in fixed], dtype=np.int64)
        self.cap_fp = np.array([[f.cap_fp] for f in fixed], dtype=np.int64)
        self.scaled = np.array([p.scheme.mltcp for p in self.lay.plans])
        f_max = max(a.intercept + a.slope if a.cap is None else a.cap for a in aggs)
        # A scheme may name its own policy mode; the rest use the options' mode.
        modes = np.array([Mode(run_mode(p.scheme, self.opt)) for p in self.lay.plans])
        self.knobs = {mode: (modes == mode, ScaledKnobs(
            DcqcnPolicy(aggs[0], mode=mode, f_step=self.opt.f_step),
            self.opt.params.all_knobs, max(f_max, 1.0))) for mode in set(modes)}
        self.budget = np.maximum(self.lay.batch.flow_bytes, 1.0).astype(np.int64)

    def f_now(self) -> np.ndarray:
        """(L, W) F of every worker, from its transmit counter (payload, as the budget)."""
        return tracker_f((self.tx * (1 / self.wire)).astype(np.int64), self.budget,
                         self.slope_fp, self.intercept_fp, self.cap_fp)

    def poll(self, lanes: np.ndarray) -> None:
        """The tuner's poll in ``lanes``: F -> knobs of every queue pair."""
        if not _nz(lanes & self.scaled):
            return
        f = self.f_now() @ self.owner.T
        for in_mode, knobs in self.knobs.values():
            todo = lanes & self.scaled & in_mode
            if _nz(todo):
                ai, hai, timer, byte_reset = knobs.lookup(f)
                self.model.set_increase(ai, hai, timer, byte_reset,
                                        where=np.broadcast_to(todo[:, None], ai.shape))

    # -- phases ----------------------------------------------------------------------

    def _clock(self) -> np.ndarray:
        return self.model.t

    def _recorder(self) -> _Records:
        return self.rec

    def _qps_of(self, jobs: np.ndarray) -> np.ndarray:
        return (jobs.astype(float) @ self.member.T) > 0

    def settle(self) -> None:
        """Apply every phase change due at the lanes' clocks (zero-length phases too).

        ``compute_end`` is inf for a job that is not computing, so one comparison finds
        the due ones; a communicating job is finished when none of its queue pairs has
        bytes to send or more than half a packet in flight."""
        b, now = self.lay.batch, self.model.t[:, None]
        while True:
            busy = ((self.want > 0) | (self.inflight > self.done_tol)) @ self.member_b
            finished = self.communicating & ~busy
            due = self.compute_end <= now + 1e-12
            n_fin, n_due = _nz(finished), _nz(due)
            if not (n_fin or n_due):
                return
            if n_fin:
                self._finish(finished, now)
            if n_due:
                self.compute_end = np.where(due, np.inf, self.compute_end)
                frac = self._begin_phases(b, due, now)
                qps = self._qps_of(due)
                self.want = np.where(qps, self.lay.qp_bytes * self.wire
                                     * (frac @ self.member.T), self.want)
                first = self._qps_of(due & (self.phase == 0))
                self.tx = np.where((first.astype(float) @ self.owner) > 0, 0.0, self.tx)
            self.comm_lane = self.communicating.any(axis=1)

    def _finish(self, finished: np.ndarray, now: np.ndarray) -> None:
        leftover = self._qps_of(finished)
        self.model.flush(leftover)
        self.inflight = np.where(leftover, 0.0, self.inflight)
        self._end_phases(self.lay.batch, finished, now)
        self.live = self.running.any(axis=1)

    # -- time ------------------------------------------------------------------------

    def snapshot(self, lanes: np.ndarray) -> None:
        m = self.model
        for lane in np.nonzero(lanes)[0]:
            self.rec.snaps[lane].append((float(m.t[lane]), m.link_bytes[lane].copy(),
                                         m.queue[lane].copy(), m.link_marks[lane].copy(),
                                         m.link_drops[lane].copy()))

    def run(self, progress: Callable[[float], None] | None) -> _Records:
        m, opt = self.model, self.opt
        self.settle()
        self.poll(np.ones(len(m.t), dtype=bool))
        self.snapshot(np.ones(len(m.t), dtype=bool))
        self.next_sample[:] = opt.sample_s
        self.next_poll[:] = opt.poll_s
        n_lanes = len(m.t)
        for step in range(opt.max_steps):
            live = self.live
            n_live = _nz(live)
            if not n_live:
                return self.rec
            if n_live > _nz(self.comm_lane & live) and self._jump(live):
                self.settle()
            sent, delivered, dropped = m.step(self.want, None if n_live == n_lanes else live)
            self.want -= sent
            if dropped is m._no_drops:
                self.inflight += sent - delivered
            else:
                self.want += dropped
                self.inflight += sent - dropped - delivered
            self.tx += sent @ self.owner
            self.settle()
            due = m.t >= self.next_poll - 1e-12
            if _nz(due):
                self.poll(due)
                self.next_poll = np.where(due, self.next_poll + opt.poll_s, self.next_poll)
            due = m.t >= self.next_sample - 1e-12
            if _nz(due):
                self.snapshot(due)
                self.next_sample = np.where(due, self.next_sample + opt.sample_s,
                                            self.next_sample)
            if progress is not None and step % 20000 == 0:
                progress(float(m.t[live].min()))
        raise SpecError("max_steps", f"the model did not finish within {opt.max_steps} steps",
                        "raise DcqcnOptions.max_steps or run fewer iterations")

    def _jump(self, live: np.ndarray) -> bool:
        """Lanes where every job computes and nothing is in flight jump to the next
        compute end (the model advances their DCQCN timers in closed form)."""
        idle = live & ~self.comm_lane
        idle &= self.model.quiet()
        if not _nz(idle):
            return False
        until = np.where(self.computing, self.compute_end, np.inf).min(axis=1)
        d = np.where(idle & np.isfinite(until), until - self.model.t, 0.0)
        jump = d > self.model.dt
        if not _nz(jump):
            return False
        # The tuner keeps polling through a compute phase: its first poll after the last
        # bytes sees the counter at the budget (wrapped: F at bytes_ratio 0), and no poll
        # after that changes anything until bytes move again.
        self.poll(jump)
        self.snapshot(jump)
        self.model.idle(jump, d)
        # Link samples that fell in the jump are filled in from the snapshots on both sides.
        t = self.model.t
        self.next_poll = np.where(jump, np.ceil(t / self.opt.poll_s) * self.opt.poll_s,
                                  self.next_poll)
        self.snapshot(jump)
        self.next_sample = np.where(jump, (np.floor(t / self.opt.sample_s + 1e-9) + 1)
                                    * self.opt.sample_s, self.next_sample)
        return True


# --------------------------------------------------------------------------- traces


def _link_samples(snaps: list, k: int, sample_s: float) -> list[LinkSample]:
    """Periodic samples from the snapshots: throughput from the cumulative wire bytes,
    queue/marks/drops as of the last snapshot at or before each sample time."""
    times = np.array([s[0] for s in snaps])
    grid, sent = sample_intervals(times, np.array([s[1][k] for s in snaps]), sample_s)
    idx = np.searchsorted(times, grid + 1e-12, side="right") - 1
    out = []
    for g, b, i in zip(grid, sent, idx, strict=True):
        _, _, queue, marks, drops = snaps[max(i, 0)]
        out.append(LinkSample(t=float(g), throughput_bps=float(max(b, 0.0) * 8 / sample_s),
                              queue_bytes=int(queue[k]), ecn_marks=int(marks[k]),
                              drops=int(drops[k])))
    return out


def _traces(lay: _Layout, rec: _Records, opt: DcqcnOptions) -> list[Trace]:
    b = lay.batch
    base = provenance({"dcqcn": opt.to_dict()})
    out = []
    for lane, plan in enumerate(lay.plans):
        jobs = []
        for j, job in enumerate(plan.jobs):
            if b.iterations[lane, j] == 0:
                continue
            n_phases = len(job.spec.phase_list())
            recs = []
            for k in range(int(b.iterations[lane, j])):
                phases = None
                if n_phases > 1:
                    phases = tuple((float(a), float(e)) for a, e in zip(
                        rec.phase_start[lane, j, k, :n_phases],
                        rec.phase_end[lane, j, k, :n_phases], strict=True))
                recs.append(IterationRecord(
                    k, float(rec.start[lane, j, k]), float(rec.comm_start[lane, j, k]),
                    float(rec.comm_end[lane, j, k]), float(rec.end[lane, j, k]),
                    bytes=int(job.comm_bytes_per_worker * job.spec.workers), phases=phases))
            jobs.append(JobTrace(name=job.name, links=job.links, iterations=tuple(recs)))
        rates = link_rates_bps(plan)
        links = tuple(LinkTrace(id=lid, capacity_bps=rates[lid.split(":", 1)[0]],
                                samples=tuple(_link_samples(rec.snaps[lane], k,
                                                            opt.sample_s)))
                      for k, lid in enumerate(lay.structs[lane].link_ids)
                      if lid in plan.record_links)
        out.append(Trace(
            scenario=plan.scenario.name, scheme=plan.scheme.name, backend="dcqcn",
            seed=plan.seed, jobs=tuple(jobs), links=links,
            provenance={**base, "topology": plan.topology.to_dict()},
            params={**plan.trace_params(), "rate_control": "dcqcn",
                    "dcqcn_policy": {"mode": run_mode(plan.scheme, opt), "f_step": opt.f_step,
                                     "applied": plan.scheme.mltcp}}))
    return out


# --------------------------------------------------------------------------- entry points


def run_mode(scheme: Scheme, options: DcqcnOptions) -> str:
    """The tuner's policy mode for ``scheme``: its own ``dcqcn_mode``, else the options'."""
    return scheme.dcqcn_mode or options.mode.value


def run_many(plans: Sequence[RunPlan], options: DcqcnOptions | None = None,
             progress: Callable[[float], None] | None = None) -> list[Trace]:
    """Traces of ``plans`` in their order; plans that share jobs, links and paths advance
    as lanes of one model (one numpy step moves all of them)."""
    opt = options or DcqcnOptions()

    def run_group(group: list[RunPlan], structs: list[Structure]) -> list[Trace]:
        lay = _layout(group, structs)
        return _traces(lay, _Jobs(lay, opt).run(progress), opt)

    return run_grouped(plans, _group_key, run_group)
