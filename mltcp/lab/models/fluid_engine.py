"""The fluid model's event engine: one run, compiled, rates recomputed only where
something changed.

Why this shape.  A cluster run has a thousand jobs, each a few flows, each crossing a
few of the fabric's links, over millions of events.  Recomputing every flow's rate at
every event, with dense (flows x links) matrices, cost the first engine seconds per
hundred events at that scale (``bench/bench_cluster_scale.py``).  Here:

* the link-flow incidence is sparse (CSR both ways: a flow's links, a link's flows);
* an event (a job's compute ends and its flows start, a flow delivers its bytes, an
  MLTCP flow's bytes_ratio reaches its next 1/f_steps mark) recomputes the rates of a
  *region* only: the event's flows (and, for MLTCP, the flows that share a link with
  them, see below), grown until the allocation is the weighted max-min one again,
  the flows outside keeping their rates (:func:`_settle`).  The test is the
  characterisation of weighted max-min: every active flow has a *bottleneck*, a full
  link on which no flow gets more per unit of weight; the allocation with that
  property is unique, so a region that passes it gives the rates a recomputation of
  the whole network would (to rounding: the test's tolerance is 1e-12 relative).
  Each flow remembers a link checked to be its bottleneck; a flow outside the region
  whose bottleneck is not one of the region's links cannot have lost it (nothing on
  that link changed) and is not checked again.  A flow without one joins the region,
  with the flows bottlenecked on its links (they are the next to move: one round
  saved for a few more rates); a region still growing after _MAX_ROUNDS rounds is
  solved as its whole contention component (the active flows reachable through shared
  links).  Each flow's progress is brought up to date lazily, from the time its rate
  was last set;
* the next event comes from an indexed min-heap over flows and jobs (a flow's key is
  its next finish or F mark at its current rate, a job's its compute end);
* max-min itself is progressive filling; the next link to fill is found by a scan in
  a region of a few dozen links, from a heap of links in a large one;
* link samples are aggregated into their periodic bins as rates change (bytes of each
  bin = the integral of the link's rate over it: the same numbers the piecewise-linear
  interpolation of the cumulative bytes gave), and only when asked for;
* the loops are compiled with numba (a well-kept JIT for numeric Python: no C
  extension to build, the functions stay readable Python), cached on disk so a process
  pays the compilation once per installation, and without numba's reference counting
  (:func:`_compiled`: it was three quarters of an event's time).

Which F an allocation uses.  The model is :mod:`mltcp.lab.models.fluid`'s (weighted
max-min by progressive filling, phases and barriers as
:mod:`mltcp.lab.models.jobphases` describes them); F is
:func:`mltcp.core.aggressiveness.f_float`, compiled.  The first engine re-evaluated
every flow's F at every event of the run; here F is re-evaluated, at an event, for
the flows that start, stop or reach an F mark and for the active flows that share a
link with them (their competition changed), and every other flow keeps its weight x F
(``w``).  That set is fixed by the event, not by how far the region grows, so the
rates are the weighted max-min of the network for those weights, however they were
found.  It gives the embedded examples the first engine's traces (to 1e-13 s:
``tests/data``); re-evaluating only the flows of the event (or, at an F mark, only
the marking flow) would not: their iteration times move by 1-2 %.  An earlier version
of this engine re-evaluated F for every flow of an F mark's contention component, and
so solved that whole component at every F mark: some 550 rates an event with the
cluster bench's random placement, against about 25 now.  A rebuilt state
(:func:`carry_over`) recomputes the carried flows' rates with the F they had.

All state lives in numpy arrays (:class:`EngineState`) so that a run can be advanced
in slices of simulated time (:func:`advance_until`): progress reports between slices,
and the cluster simulator adds and removes jobs between them.
"""

from __future__ import annotations

import math
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numba
import numpy as np
from numba import njit

from mltcp.core.aggressiveness import f_float


def cache_dir(package_dir: Path, user_cache: Path | None) -> str | None:
    """Where numba keeps the compiled engine, if not where it looks by itself.

    numba caches next to the source (``__pycache__``), else in the user's cache
    directory; where neither is writable (an installed package run by a service user
    without a home) it refuses to cache at all, and the engine would not even load.
    Then: a directory of this user's under the temporary directory."""
    pycache = package_dir / "__pycache__"
    if os.access(pycache if pycache.exists() else package_dir, os.W_OK):
        return None
    if user_cache is not None:
        probe = user_cache
        while not probe.exists() and probe.parent != probe:
            probe = probe.parent
        if os.access(probe, os.W_OK):
            return None
    return str(Path(tempfile.gettempdir()) / f"mltcp-numba-{os.getuid()}")


def _user_cache() -> Path | None:
    try:
        return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    except RuntimeError:          # no home directory
        return None


if not numba.config.CACHE_DIR:
    numba.config.CACHE_DIR = cache_dir(Path(__file__).parent, _user_cache()) or ""


def _compiled(fn):  # type: ignore[no-untyped-def]
    """``fn`` compiled for the engine: cached on disk, and without numba's reference
    counting (``_nrt=False``, as numba's own allocation-free helpers are built).  The
    engine allocates nothing once a state exists; with counting on, every call of a
    helper that takes arrays did an atomic increment and decrement per array, which
    was three quarters of an event's time at cluster scale.  A helper that allocated
    would fail to compile, not misbehave."""
    return njit(cache=True, _nrt=False)(fn)


compiled_f = _compiled(f_float)      # the one F, compiled for the engine

# advance_until's outcome
DONE, RUNNING, STUCK, TOO_MANY_EVENTS, JOB_DONE = 0, 1, 2, 3, 4

# EngineState.counters
_HEAP_SIZE, _EVENTS, _STAMP, _RECOMPUTED = 0, 1, 2, 3

_REL_TOL = 1e-9       # bytes left that count as none, relative to an iteration's bytes
_CHECK_TOL = 1e-12    # a link this close to its capacity is full, a flow this close to a
                      # link's top rate/weight has it (rounding, not modelling)
_MAX_ROUNDS = 32      # growth rounds of a region before its whole component is solved
_SCAN_LINKS = 96      # max-min finds the next link to fill by a scan up to this many links


# --------------------------------------------------------------------------- state


@dataclass
class EngineState:
    """One run: its structure (read-only) and its state (updated in place).

    Flows are ordered by job: the flows of job j are ``job_ptr[j]:job_ptr[j + 1]``.
    Times in seconds, bytes, capacities in payload bytes per second.
    """

    # structure
    flow_job: np.ndarray          # (F,) int64
    flow_ptr: np.ndarray          # (F+1,) int64: a flow's links are flow_links[ptr[f]:ptr[f+1]]
    flow_links: np.ndarray        # (nnz,) int64
    link_ptr: np.ndarray          # (K+1,) int64: a link's flows are link_flows[ptr[k]:ptr[k+1]]
    link_flows: np.ndarray        # (nnz,) int64
    job_ptr: np.ndarray           # (J+1,) int64
    capacity: np.ndarray          # (K,)
    flow_bytes: np.ndarray        # (F,) bytes per iteration
    weight: np.ndarray            # (F,) connections
    phase_fraction: np.ndarray    # (J, P)
    phase_compute: np.ndarray     # (J, P)
    iterations: np.ndarray        # (J,) int64
    jitter: np.ndarray            # (J, N)
    params: np.ndarray            # [slope, intercept, cap, f_steps, sample_s (0: no samples),
                                  #  stop when a job ends (0/1)]
    # records (NaN: not run)
    start: np.ndarray             # (J, N)
    comm_start: np.ndarray
    comm_end: np.ndarray
    end: np.ndarray
    phase_start: np.ndarray       # (J, N, P)
    phase_end: np.ndarray
    # state
    clock: np.ndarray             # [t]
    counters: np.ndarray          # [heap size, events, stamp, rates recomputed] int64
    rem: np.ndarray               # (F,) bytes left in the current phase
    sent: np.ndarray              # (F,) bytes sent in the current iteration
    rate: np.ndarray              # (F,)
    tlast: np.ndarray             # (F,) when rem/sent were last brought up to date
    active: np.ndarray            # (F,) bool: bytes left
    running: np.ndarray           # (J,) bool
    it: np.ndarray                # (J,) int64 current iteration
    phase: np.ndarray             # (J,) int64
    communicating: np.ndarray     # (J,) bool
    busy: np.ndarray              # (J,) int64 active flows
    heap: np.ndarray              # (F+J,) int64 items: flow f, or job j as F + j
    heap_pos: np.ndarray          # (F+J,) int64, -1: not in the heap
    heap_key: np.ndarray          # (F+J,)
    link_rate: np.ndarray         # (K,) sum of its flows' rates (kept where sampled)
    link_tlast: np.ndarray        # (K,)
    bins: np.ndarray              # (K, B) payload bytes per sample interval
    w: np.ndarray                 # (F,) weight x F, as last evaluated
    level: np.ndarray             # (F,) rate / w: the fill level the flow froze at
    bneck: np.ndarray             # (F,) int64 a link checked to be the flow's bottleneck
                                  # (-1: none known)
    refresh: np.ndarray           # (F,) bool: its next event only recomputes its rate
    # scratch for one event
    flow_mark: np.ndarray         # (F,) int64 stamp: in the region
    link_mark: np.ndarray         # (K,) int64 stamp: a link of the region
    seen: np.ndarray              # (F,) int64 stamp: queued or checked already
    queue: np.ndarray             # (K,) int64 the region's links
    comp: np.ndarray              # (F,) int64 the region's flows
    kept: np.ndarray              # (F,) int64 flows whose rate is recomputed with their F kept
    jobs_todo: np.ndarray         # (2J+2F+2,) int64 jobs and flows to look at
    left: np.ndarray              # (K,) max-min scratch
    wsum: np.ndarray              # (K,)
    unfrozen: np.ndarray          # (K,) int64
    frozen: np.ndarray            # (F,) bool
    resid: np.ndarray             # (K,) capacity left by the flows outside the region
    stat_mark: np.ndarray         # (K,) int64 stamp of the link statistics below
    stat_load: np.ndarray         # (K,) sum of its flows' rates
    stat_norm: np.ndarray         # (K,) the top level of its flows
    lheap: np.ndarray             # (K,) int64 max-min's heap of links by fill level
                                  # (or its list of links still open)
    lpos: np.ndarray              # (K,) int64
    lkey: np.ndarray              # (K,) a link's fill level
    lcount: np.ndarray            # (1,) int64

    @property
    def t(self) -> float:
        return float(self.clock[0])

    @property
    def events(self) -> int:
        return int(self.counters[_EVENTS])

    @property
    def recomputed(self) -> int:
        """Flow rates computed so far, all events together (the engine's work: the
        regions' sizes summed over the events)."""
        return int(self.counters[_RECOMPUTED])


def _csr(rows: list[list[int]], n_cols: int) -> tuple[np.ndarray, np.ndarray, np.ndarray,
                                                       np.ndarray]:
    """Row pointers and columns of ``rows``, and of the transpose."""
    ptr = np.zeros(len(rows) + 1, dtype=np.int64)
    ptr[1:] = np.cumsum([len(r) for r in rows])
    cols = np.array([c for r in rows for c in r], dtype=np.int64)
    owner = np.repeat(np.arange(len(rows), dtype=np.int64), np.diff(ptr))
    order = np.argsort(cols, kind="stable")
    t_ptr = np.zeros(n_cols + 1, dtype=np.int64)
    t_ptr[1:] = np.cumsum(np.bincount(cols, minlength=n_cols))
    return ptr, cols, t_ptr, owner[order]


def new_state(flow_job: np.ndarray, flow_links: list[list[int]], capacity: np.ndarray,
              flow_bytes: np.ndarray, weight: np.ndarray, phase_fraction: np.ndarray,
              phase_compute: np.ndarray, iterations: np.ndarray, start: np.ndarray,
              jitter: np.ndarray, slope: float, intercept: float, cap: float,
              f_steps: int, sample_s: float, n_iter: int = 0,
              stop_on_job_done: bool = False, ring: int = 0) -> EngineState:
    """A run at time 0: every job with iterations computes its first phase.
    ``n_iter``: records for this many iterations (at least the most any job runs);
    ``stop_on_job_done``: :func:`advance_until` returns JOB_DONE after the event in which
    a job ran its last iteration (the cluster simulator schedules then); ``ring`` > 0:
    keep only the last ``ring`` iterations' records and extra compute (``jitter``),
    iteration i in column ``i % ring`` (:func:`column`), an extra compute cleared once
    used: the cluster simulator needs a job's latest iterations, and records for every
    iteration of thousands of long jobs, rebuilt at every scheduling moment, were most of
    its time and memory."""
    n_flows, n_links, n_jobs = len(flow_job), len(capacity), len(iterations)
    n_iter = ring if ring > 0 else max(int(iterations.max(initial=0)), 1, n_iter)
    n_phases = phase_compute.shape[1]
    flow_job = np.asarray(flow_job, dtype=np.int64)
    if n_flows and (np.diff(flow_job) < 0).any():
        raise ValueError("flows must be ordered by job")
    job_ptr = np.searchsorted(flow_job, np.arange(n_jobs + 1)).astype(np.int64)
    flow_ptr, links, link_ptr, link_flows = _csr(flow_links, n_links)

    def nan(*shape: int) -> np.ndarray:
        return np.full(shape, np.nan)

    def ints(n: int, fill: int = 0) -> np.ndarray:
        return np.full(max(n, 1), fill, dtype=np.int64)

    jit = np.zeros((n_jobs, n_iter))
    jit[:, :jitter.shape[1]] = jitter[:, :n_iter]
    n_items = n_flows + n_jobs
    st = EngineState(
        flow_job=flow_job, flow_ptr=flow_ptr, flow_links=links, link_ptr=link_ptr,
        link_flows=link_flows, job_ptr=job_ptr, capacity=np.asarray(capacity, float),
        flow_bytes=np.asarray(flow_bytes, float), weight=np.asarray(weight, float),
        phase_fraction=np.asarray(phase_fraction, float),
        phase_compute=np.asarray(phase_compute, float),
        iterations=np.asarray(iterations, dtype=np.int64), jitter=jit,
        params=np.array([slope, intercept, cap, f_steps, sample_s, float(stop_on_job_done),
                         float(ring > 0)], dtype=float),
        start=nan(n_jobs, n_iter), comm_start=nan(n_jobs, n_iter),
        comm_end=nan(n_jobs, n_iter), end=nan(n_jobs, n_iter),
        phase_start=nan(n_jobs, n_iter, n_phases), phase_end=nan(n_jobs, n_iter, n_phases),
        clock=np.zeros(1), counters=np.zeros(4, dtype=np.int64),
        rem=np.zeros(n_flows), sent=np.zeros(n_flows), rate=np.zeros(n_flows),
        tlast=np.zeros(n_flows), active=np.zeros(n_flows, dtype=np.bool_),
        running=np.asarray(iterations) > 0, it=np.zeros(n_jobs, dtype=np.int64),
        phase=np.zeros(n_jobs, dtype=np.int64),
        communicating=np.zeros(n_jobs, dtype=np.bool_), busy=np.zeros(n_jobs, dtype=np.int64),
        heap=np.zeros(n_items, dtype=np.int64), heap_pos=np.full(n_items, -1, dtype=np.int64),
        heap_key=np.full(n_items, np.inf), link_rate=np.zeros(n_links),
        link_tlast=np.zeros(n_links), bins=np.zeros((n_links, 0)), w=np.ones(n_flows),
        level=np.zeros(n_flows),
        bneck=np.full(n_flows, -1, dtype=np.int64), refresh=np.zeros(n_flows, dtype=np.bool_),
        flow_mark=np.zeros(n_flows, dtype=np.int64), link_mark=np.zeros(n_links, dtype=np.int64),
        seen=np.zeros(n_flows, dtype=np.int64),
        queue=ints(n_links), comp=ints(n_flows), kept=ints(n_flows),
        jobs_todo=ints(2 * n_jobs + 2 * n_flows + 2),
        left=np.zeros(n_links), wsum=np.zeros(n_links),
        unfrozen=np.zeros(n_links, dtype=np.int64), frozen=np.ones(n_flows, dtype=np.bool_),
        resid=np.zeros(n_links), stat_mark=np.zeros(n_links, dtype=np.int64),
        stat_load=np.zeros(n_links), stat_norm=np.zeros(n_links), **_link_heap(n_links))
    begin = np.asarray(start, float) + st.phase_compute[:, 0] + st.jitter[:, 0]
    for j in np.flatnonzero(st.running):
        st.start[j, 0] = start[j]
        _heap_set(st.heap, st.heap_pos, st.heap_key, st.counters, n_flows + j, begin[j])
    return st


def column(st: EngineState, i: int) -> int:
    """The record column of iteration ``i`` (``i`` itself unless the state keeps a ring
    of the last iterations)."""
    return i % st.end.shape[1]


def _link_heap(n_links: int) -> dict[str, np.ndarray]:
    return {"lheap": np.zeros(n_links, dtype=np.int64),
            "lpos": np.full(n_links, -1, dtype=np.int64), "lkey": np.full(n_links, np.inf),
            "lcount": np.zeros(1, dtype=np.int64)}


def advance_until(st: EngineState, t_stop: float, max_events: int) -> int:
    """Process every event up to ``t_stop`` (simulated seconds): DONE when no job has
    anything left, RUNNING when the next event lies beyond ``t_stop``, STUCK when flows
    with bytes left get no capacity, TOO_MANY_EVENTS past ``max_events``, JOB_DONE after
    a job's last iteration where the state was made with ``stop_on_job_done``."""
    sample_s = st.params[4]
    while True:
        horizon = t_stop
        nxt = _next_key(st)
        if sample_s > 0 and math.isfinite(nxt):
            # Samples are flushed at event times: the bins must reach every event this
            # call processes.  Grown (doubling) to reach at least the next one; the
            # compiled loop stops where they end, and goes on once they are grown.
            have = st.bins.shape[1]
            need = int(min(t_stop, nxt) / sample_s) + 3
            if need > have:
                grown = np.zeros((st.bins.shape[0], max(need, 2 * have, 64)))
                grown[:, :have] = st.bins
                st.bins = grown
            horizon = min(t_stop, (st.bins.shape[1] - 2) * sample_s)
        status = _advance(
            st.flow_job, st.flow_ptr, st.flow_links, st.link_ptr, st.link_flows, st.job_ptr,
            st.capacity, st.flow_bytes, st.weight, st.phase_fraction, st.phase_compute,
            st.iterations, st.jitter, st.params, st.start, st.comm_start, st.comm_end,
            st.end, st.phase_start, st.phase_end, st.clock, st.counters, st.rem, st.sent,
            st.rate, st.tlast, st.active, st.running, st.it, st.phase, st.communicating,
            st.busy, st.heap, st.heap_pos, st.heap_key, st.link_rate, st.link_tlast, st.bins,
            st.w, st.level, st.bneck, st.refresh, st.flow_mark, st.link_mark, st.seen, st.queue,
            st.comp, st.kept, st.jobs_todo, st.left, st.wsum, st.unfrozen, st.frozen,
            st.resid, st.stat_mark, st.stat_load, st.stat_norm, st.lheap, st.lpos, st.lkey,
            st.lcount, float(horizon), int(max_events))
        if status != RUNNING or horizon >= t_stop:
            return status


def set_event(st: EngineState, item: int, t: float) -> None:
    """Give flow ``item`` (or job ``F + j``) its next event at ``t`` (inf: none)."""
    _heap_set(st.heap, st.heap_pos, st.heap_key, st.counters, item, t)


def carry_over(old: EngineState, new: EngineState, pairs: list[tuple[int, int]],
               t: float) -> None:
    """Jobs that go on from ``old`` into ``new`` (a state made for another set of jobs,
    the same jobs' flows in the same order), at time ``t``: ``pairs`` = (job in old,
    job in new).  Each job's records, iteration, phase and compute deadline, each
    flow's bytes left and sent (brought up to ``t``; ``old`` is consumed) and weight
    x F move over; every active flow gets an event at ``t``, so its rate is computed
    again there (with the F it had: a rebuild is no event of the flow's, and does not
    re-evaluate F where a run without the rebuild would not have)."""
    n_old, n_new = len(old.flow_job), len(new.flow_job)
    new.clock[0] = t
    for jo, jn in pairs:
        for rec in ("start", "comm_start", "comm_end", "end", "phase_start", "phase_end"):
            getattr(new, rec)[jn] = getattr(old, rec)[jo]
        for var in ("it", "phase", "running", "communicating", "busy"):
            getattr(new, var)[jn] = getattr(old, var)[jo]
        set_event(new, n_new + jn,
                  old.heap_key[n_old + jo] if old.heap_pos[n_old + jo] >= 0 else math.inf)
        for a, b in zip(range(old.job_ptr[jo], old.job_ptr[jo + 1]),
                        range(new.job_ptr[jn], new.job_ptr[jn + 1]), strict=True):
            if old.active[a]:
                _bring(a, t, old.rem, old.sent, old.rate, old.tlast)
                set_event(new, b, t)
                new.refresh[b] = True
            new.rem[b], new.sent[b], new.active[b] = old.rem[a], old.sent[a], old.active[a]
            new.tlast[b], new.w[b] = t, old.w[a]


def _next_key(st: EngineState) -> float:
    return float(st.heap_key[st.heap[0]]) if st.counters[_HEAP_SIZE] else math.inf


def finish_bins(st: EngineState) -> np.ndarray:
    """Every link's bytes per sample interval up to the run's last event (flushed)."""
    _flush_all(st.link_rate, st.link_tlast, st.bins, st.clock[0], st.params[4])
    return st.bins


def weighted_max_min(weights: np.ndarray, flow_links: list[list[int]],
                     capacity: np.ndarray) -> np.ndarray:
    """Rates of weighted max-min fairness over the whole network (flows with weight 0
    get 0): the function the engine runs on each region, for tests and tools."""
    flow_ptr, links, link_ptr, link_flows = _csr(flow_links, len(capacity))
    n_flows = len(weights)
    comp = np.flatnonzero(np.asarray(weights) > 0).astype(np.int64)
    link_list = np.unique(links[np.isin(np.repeat(np.arange(n_flows), np.diff(flow_ptr)),
                                        comp)]).astype(np.int64)
    rate = np.zeros(n_flows)
    _max_min(comp, len(comp), link_list, len(link_list), np.asarray(weights, float),
             flow_ptr, links, link_ptr, link_flows, np.asarray(capacity, float), rate,
             np.zeros(n_flows), np.zeros(len(capacity)), np.zeros(len(capacity)),
             np.zeros(len(capacity), dtype=np.int64), np.ones(n_flows, dtype=np.bool_),
             *_link_heap(len(capacity)).values())
    return rate


# --------------------------------------------------------------------------- heap


@_compiled
def _heap_swap(heap, pos, a, b):  # type: ignore[no-untyped-def]
    ia, ib = heap[a], heap[b]
    heap[a], heap[b] = ib, ia
    pos[ib], pos[ia] = a, b


@_compiled
def _heap_sift(heap, pos, key, size, i):  # type: ignore[no-untyped-def]
    while i > 0:                                      # up
        parent = (i - 1) // 2
        if key[heap[i]] < key[heap[parent]]:
            _heap_swap(heap, pos, i, parent)
            i = parent
        else:
            break
    while True:                                       # down
        child = 2 * i + 1
        if child >= size:
            break
        if child + 1 < size and key[heap[child + 1]] < key[heap[child]]:
            child += 1
        if key[heap[child]] < key[heap[i]]:
            _heap_swap(heap, pos, i, child)
            i = child
        else:
            break


@_compiled
def _heap_set(heap, pos, key, counters, item, value):  # type: ignore[no-untyped-def]
    """Give ``item`` the key ``value`` (inf: take it out)."""
    size = counters[0]
    i = pos[item]
    key[item] = value
    if value == np.inf:
        if i < 0:
            return
        last = size - 1
        if i != last:
            _heap_swap(heap, pos, i, last)
        pos[item] = -1
        counters[0] = last
        if i != last:
            _heap_sift(heap, pos, key, last, i)
        return
    if i < 0:
        heap[size] = item
        pos[item] = size
        counters[0] = size + 1
        _heap_sift(heap, pos, key, size + 1, size)
    else:
        _heap_sift(heap, pos, key, size, i)


# --------------------------------------------------------------------------- rates


@_compiled
def _max_min(comp, n_comp, links, n_links, w, flow_ptr, flow_links, link_ptr, link_flows,
             capacity, rate, level, left, wsum, unfrozen, frozen, lheap, lpos, lkey,
             lcount):  # type: ignore[no-untyped-def]
    """Weighted max-min rates of the flows ``comp[:n_comp]`` over ``links[:n_links]``
    by progressive filling: every unfrozen flow's rate is w x the fill level; the link
    whose (capacity - frozen rates) / (unfrozen weight) is smallest fills first, its
    flows freeze at that level; repeat.  Flows outside must have ``frozen`` set (they
    are left as they are); the component's flows are frozen again on return.

    The next link to fill is found by scanning the links still open where they are
    few (a region of a few dozen links: cheaper than a heap's upkeep), from a min-heap
    by level otherwise (a component of K links and nnz incidences costs O(nnz log K),
    not O(K^2)).  Ties go to the link listed first either way."""
    for i in range(n_links):
        k = links[i]
        left[k] = capacity[k]
        wsum[k] = 0.0
        unfrozen[k] = 0
    for i in range(n_comp):
        f = comp[i]
        frozen[f] = False
        rate[f] = 0.0
        level[f] = 0.0
        for p in range(flow_ptr[f], flow_ptr[f + 1]):
            k = flow_links[p]
            wsum[k] += w[f]
            unfrozen[k] += 1
    if n_links <= _SCAN_LINKS:
        _fill_scan(links, n_links, w, flow_ptr, flow_links, link_ptr, link_flows, rate, level,
                   left, wsum, unfrozen, frozen, lheap, lkey)
    else:
        _fill_heap(links, n_links, w, flow_ptr, flow_links, link_ptr, link_flows, rate, level,
                   left, wsum, unfrozen, frozen, lheap, lpos, lkey, lcount)
    for i in range(n_comp):
        frozen[comp[i]] = True


@_compiled
def _freeze(k, fill, w, flow_ptr, flow_links, link_ptr, link_flows, rate, level, left, wsum,
            unfrozen, frozen, lkey):  # type: ignore[no-untyped-def]
    """Link k fills at ``fill``: its unfrozen flows freeze at w x fill, their share
    leaves their other links, whose levels (``lkey``) move."""
    for p in range(link_ptr[k], link_ptr[k + 1]):
        f = link_flows[p]
        if frozen[f]:
            continue
        frozen[f] = True
        r = w[f] * fill
        rate[f] = r
        level[f] = fill
        for q in range(flow_ptr[f], flow_ptr[f + 1]):
            k2 = flow_links[q]
            left[k2] -= r
            wsum[k2] -= w[f]
            unfrozen[k2] -= 1
            if unfrozen[k2] > 0:
                lkey[k2] = max(left[k2], 0.0) / wsum[k2]


@_compiled
def _fill_scan(links, n_links, w, flow_ptr, flow_links, link_ptr, link_flows, rate, level,
               left, wsum, unfrozen, frozen, open_, lkey):  # type: ignore[no-untyped-def]
    n_open = 0
    for i in range(n_links):
        k = links[i]
        if unfrozen[k] > 0:
            open_[n_open] = k
            n_open += 1
            lkey[k] = max(left[k], 0.0) / wsum[k]
    fill = 0.0
    while n_open > 0:
        best = -1
        best_level = np.inf
        n = 0
        for i in range(n_open):                  # drop the links whose flows all froze
            k = open_[i]
            if unfrozen[k] == 0:
                continue
            open_[n] = k
            if lkey[k] < best_level:
                best_level = lkey[k]
                best = n
            n += 1
        n_open = n
        if n_open == 0:
            break
        fill = max(best_level, fill)             # never below the level reached (rounding)
        _freeze(open_[best], fill, w, flow_ptr, flow_links, link_ptr, link_flows, rate,
                level, left, wsum, unfrozen, frozen, lkey)


@_compiled
def _fill_heap(links, n_links, w, flow_ptr, flow_links, link_ptr, link_flows, rate, level,
               left, wsum, unfrozen, frozen, lheap, lpos, lkey,
               lcount):  # type: ignore[no-untyped-def]
    for i in range(n_links):
        k = links[i]
        if unfrozen[k] > 0:
            _heap_set(lheap, lpos, lkey, lcount, k, max(left[k], 0.0) / wsum[k])
    while lcount[0] > 0:
        k = lheap[0]
        fill = lkey[k]
        _heap_set(lheap, lpos, lkey, lcount, k, np.inf)
        for p in range(link_ptr[k], link_ptr[k + 1]):
            f = link_flows[p]
            if frozen[f]:
                continue
            frozen[f] = True
            r = w[f] * fill
            rate[f] = r
            level[f] = fill
            for q in range(flow_ptr[f], flow_ptr[f + 1]):
                k2 = flow_links[q]
                left[k2] -= r
                wsum[k2] -= w[f]
                unfrozen[k2] -= 1
                if k2 == k:
                    continue
                if unfrozen[k2] == 0:
                    _heap_set(lheap, lpos, lkey, lcount, k2, np.inf)
                else:       # never below the level reached (rounding)
                    _heap_set(lheap, lpos, lkey, lcount, k2,
                              max(max(left[k2], 0.0) / wsum[k2], fill))


@_compiled
def _residual(k, stamp, link_ptr, link_flows, capacity, active, flow_mark,
              rate):  # type: ignore[no-untyped-def]
    """Link k's capacity less the rates of its active flows outside the region."""
    r = capacity[k]
    for p in range(link_ptr[k], link_ptr[k + 1]):
        g = link_flows[p]
        if active[g] and flow_mark[g] != stamp:
            r -= rate[g]
    return r


@_compiled
def _bottlenecked_on(a, b, stamp, n_comp, comp, flow_ptr, flow_links, link_ptr, link_flows,
                     active, flow_mark, bneck):  # type: ignore[no-untyped-def]
    """The active flows outside the region whose bottleneck is a link of the region's
    flows ``comp[a:b]`` join it (not brought to t yet): when those flows' rates move,
    theirs move next.  Returns the region's new count of flows."""
    for i in range(a, b):
        h = comp[i]
        for q in range(flow_ptr[h], flow_ptr[h + 1]):
            k = flow_links[q]
            for p in range(link_ptr[k], link_ptr[k + 1]):
                g = link_flows[p]
                if active[g] and flow_mark[g] != stamp and bneck[g] == k:
                    flow_mark[g] = stamp
                    comp[n_comp] = g
                    n_comp += 1
    return n_comp


@_compiled
def _settle(t, stamp, n_comp, n_queue, comp, queue, flow_ptr, flow_links, link_ptr,
            link_flows, capacity, active, flow_mark, link_mark, seen, bneck, rem, sent,
            rate, tlast, w, level, resid, left, wsum, unfrozen, frozen, lheap, lpos, lkey,
            lcount, stat_mark, stat_load, stat_norm, counters):  # type: ignore[no-untyped-def]
    """New rates for the region (flows ``comp[:n_comp]``, links ``queue[:n_queue]``),
    the flows outside keeping theirs, the region grown until the allocation is the
    weighted max-min one: every active flow has a bottleneck, a full link on which no
    flow gets more per unit of weight (the allocation with that property is unique).

    First the flows bottlenecked on the region's links join (the event moves them
    first).  Per round: the region's max-min over what the flows outside leave; then
    every flow on the region's links is checked, except a flow outside whose last
    checked bottleneck (``bneck``) is not a region link (nothing on that link changed,
    so it still is one).  A flow outside without a bottleneck joins the region; a flow
    inside without one is outrun on a full link by flows outside, and those join; with
    each joiner, the flows bottlenecked on its links.  A region still growing after
    _MAX_ROUNDS rounds is solved as its whole contention component.  Returns the
    region's final counts."""
    n_resid = 0
    rounds = 0
    lo = 1.0 - _CHECK_TOL
    n0 = n_comp
    n_comp = _bottlenecked_on(0, n0, stamp, n_comp, comp, flow_ptr, flow_links, link_ptr,
                              link_flows, active, flow_mark, bneck)
    for i in range(n0, n_comp):
        h = comp[i]
        _bring(h, t, rem, sent, rate, tlast)
        n_queue = _queue_links(h, stamp, flow_ptr, flow_links, link_mark, queue, n_queue)
    while True:
        for i in range(n_resid, n_queue):
            k = queue[i]
            resid[k] = _residual(k, stamp, link_ptr, link_flows, capacity, active,
                                 flow_mark, rate)
        n_resid = n_queue
        _max_min(comp, n_comp, queue, n_queue, w, flow_ptr, flow_links, link_ptr,
                 link_flows, resid, rate, level, left, wsum, unfrozen, frozen, lheap, lpos,
                 lkey, lcount)
        counters[_STAMP] += 1                    # fresh link statistics and checks
        check = counters[_STAMP]
        before = n_comp
        for i in range(n_queue):
            k = queue[i]
            for p in range(link_ptr[k], link_ptr[k + 1]):
                g = link_flows[p]
                if not active[g] or seen[g] == check:
                    continue
                inside = flow_mark[g] == stamp
                if not inside and bneck[g] >= 0 and link_mark[bneck[g]] != stamp:
                    continue
                seen[g] = check
                mine = level[g]
                found = -1
                for q in range(flow_ptr[g], flow_ptr[g + 1]):
                    k2 = flow_links[q]
                    if stat_mark[k2] != check:   # the link's load and top rate/weight
                        stat_mark[k2] = check
                        load = 0.0
                        norm = 0.0
                        for p2 in range(link_ptr[k2], link_ptr[k2 + 1]):
                            h = link_flows[p2]
                            if active[h]:
                                load += rate[h]
                                if level[h] > norm:
                                    norm = level[h]
                        stat_load[k2] = load
                        stat_norm[k2] = norm
                    if stat_load[k2] >= capacity[k2] * lo and mine >= stat_norm[k2] * lo:
                        found = k2
                        break
                if found >= 0:
                    bneck[g] = found
                    continue
                if not inside:                   # joins (brought in below)
                    flow_mark[g] = stamp
                    comp[n_comp] = g
                    n_comp += 1
                    continue
                for q in range(flow_ptr[g], flow_ptr[g + 1]):
                    k2 = flow_links[q]
                    if stat_mark[k2] != check or stat_load[k2] < capacity[k2] * lo:
                        continue
                    for p2 in range(link_ptr[k2], link_ptr[k2 + 1]):
                        h = link_flows[p2]
                        if active[h] and flow_mark[h] != stamp and level[h] * lo > mine:
                            flow_mark[h] = stamp
                            comp[n_comp] = h
                            n_comp += 1
        if n_comp == before:
            return n_comp, n_queue
        n_comp = _bottlenecked_on(before, n_comp, stamp, n_comp, comp, flow_ptr, flow_links,
                                  link_ptr, link_flows, active, flow_mark, bneck)
        for i in range(before, n_comp):          # the new members: brought to t, their
            h = comp[i]                          # capacity handed back to the region
            _bring(h, t, rem, sent, rate, tlast)
            for q in range(flow_ptr[h], flow_ptr[h + 1]):
                k = flow_links[q]
                if link_mark[k] == stamp:
                    resid[k] += rate[h]
                else:
                    link_mark[k] = stamp
                    queue[n_queue] = k
                    n_queue += 1
        rounds += 1
        if rounds < _MAX_ROUNDS:
            continue
        # Still growing: the change reaches far; solving the whole contention component
        # at once costs less than checking again.  Its flows' bottlenecks are unknown.
        n_comp, n_queue = _whole_component(t, stamp, n_comp, n_queue, comp, queue,
                                           flow_ptr, flow_links, link_ptr, link_flows,
                                           active, flow_mark, link_mark, rem, sent, rate,
                                           tlast)
        for i in range(n_queue):
            k = queue[i]
            resid[k] = _residual(k, stamp, link_ptr, link_flows, capacity, active,
                                 flow_mark, rate)
        _max_min(comp, n_comp, queue, n_queue, w, flow_ptr, flow_links, link_ptr,
                 link_flows, resid, rate, level, left, wsum, unfrozen, frozen, lheap, lpos,
                 lkey, lcount)
        for i in range(n_comp):
            bneck[comp[i]] = -1
        return n_comp, n_queue


# --------------------------------------------------------------------------- samples


@_compiled
def _flush_link(link_rate, link_tlast, bins, k, t, sample_s):  # type: ignore[no-untyped-def]
    """Add link k's bytes from its last rate change to t into its sample bins (bin i
    holds (i s, (i+1) s])."""
    a = link_tlast[k]
    r = link_rate[k]
    link_tlast[k] = t
    if r <= 0.0 or t <= a:
        return
    i = int(a / sample_s)
    n = bins.shape[1]
    while i < n:
        lo = i * sample_s
        hi = lo + sample_s
        seg = min(t, hi) - max(a, lo)
        if seg > 0.0:
            bins[k, i] += r * seg
        if hi >= t:
            break
        i += 1


@_compiled
def _flush_all(link_rate, link_tlast, bins, t, sample_s):  # type: ignore[no-untyped-def]
    if sample_s <= 0.0:
        return
    for k in range(link_rate.shape[0]):
        _flush_link(link_rate, link_tlast, bins, k, t, sample_s)


# --------------------------------------------------------------------------- events


@_compiled
def _bring(f, t, rem, sent, rate, tlast):  # type: ignore[no-untyped-def]
    """Flow f's progress up to t at its current rate."""
    d = rate[f] * (t - tlast[f])
    if d > 0.0:
        rem[f] -= d
        sent[f] += d
    tlast[f] = t


@_compiled
def _delivered(left, nbytes):  # type: ignore[no-untyped-def]
    """``left`` bytes of a flow of ``nbytes`` per iteration are nothing left (to a
    tolerance of 1e-9 of an iteration's bytes)."""
    return left <= nbytes * _REL_TOL + 1e-6


@_compiled
def _queue_links(f, stamp, flow_ptr, flow_links, link_mark, queue,
                 n_queue):  # type: ignore[no-untyped-def]
    """Flow f's links not yet in the region join its queue; returns the queue's length."""
    for p in range(flow_ptr[f], flow_ptr[f + 1]):
        k = flow_links[p]
        if link_mark[k] != stamp:
            link_mark[k] = stamp
            queue[n_queue] = k
            n_queue += 1
    return n_queue


@_compiled
def _whole_component(t, stamp, n_comp, n_queue, comp, queue, flow_ptr, flow_links, link_ptr,
                     link_flows, active, flow_mark, link_mark, rem, sent, rate,
                     tlast):  # type: ignore[no-untyped-def]
    """The region grows into its whole contention component: every active flow
    reachable from its links through shared links (brought to t).  Returns the new
    counts of the region's flows and links."""
    head = 0
    while head < n_queue:
        k = queue[head]
        head += 1
        for p in range(link_ptr[k], link_ptr[k + 1]):
            h = link_flows[p]
            if not active[h] or flow_mark[h] == stamp:
                continue
            flow_mark[h] = stamp
            _bring(h, t, rem, sent, rate, tlast)
            comp[n_comp] = h
            n_comp += 1
            n_queue = _queue_links(h, stamp, flow_ptr, flow_links, link_mark, queue,
                                   n_queue)
    return n_comp, n_queue


@_compiled
def _advance(flow_job, flow_ptr, flow_links, link_ptr, link_flows, job_ptr, capacity,
             flow_bytes, weight, phase_fraction, phase_compute, iterations, jitter, params,
             rec_start, rec_comm_start, rec_comm_end, rec_end, rec_phase_start,
             rec_phase_end, clock, counters, rem, sent, rate, tlast, active, running, it,
             phase, communicating, busy, heap, heap_pos, heap_key, link_rate, link_tlast,
             bins, w, level, bneck, refresh, flow_mark, link_mark, seen, queue, comp, kept,
             jobs_todo, left, wsum, unfrozen, frozen, resid, stat_mark, stat_load,
             stat_norm, lheap, lpos, lkey, lcount, t_stop,
             max_events):  # type: ignore[no-untyped-def]
    """Events up to t_stop.  Per event: the flows and jobs it concerns change state
    (a flow delivers its bytes or reaches an F mark, a job's compute ends and its flows
    start); those flows form the region, with (MLTCP) the active flows that share a
    link with them, whose F is re-evaluated; the region is grown until the allocation
    is the weighted max-min one again (:func:`_settle`), and only its flows get new
    rates and events."""
    slope, intercept, cap = params[0], params[1], params[2]
    f_steps = int(params[3])
    sample_s = params[4]
    mltcp = slope != 0.0 or intercept != 1.0
    n_flows = flow_job.shape[0]
    n_jobs = job_ptr.shape[0] - 1
    n_phases = phase_compute.shape[1]
    n_jit = jitter.shape[1]
    ring = params[6] > 0.0          # records and jitter in columns i % their width
    n_rec = rec_end.shape[1]
    t = clock[0]
    while True:
        if counters[_HEAP_SIZE] == 0:
            for f in range(n_flows):
                if active[f]:
                    return STUCK
            return DONE
        t_next = heap_key[heap[0]]
        if t_next > t_stop:
            return RUNNING
        if counters[_EVENTS] >= max_events:
            return TOO_MANY_EVENTS
        counters[_EVENTS] += 1
        if t_next > t:
            t = t_next
        clock[0] = t
        due = t + 1e-12 * (1.0 + abs(t))
        counters[_STAMP] += 1
        stamp = counters[_STAMP]
        n_queue = 0          # the region's links (and the links of flows that stopped)
        n_todo = 0           # to look at: job j, or flow f as n_jobs + f
        n_comp = 0           # the region's flows
        n_kept = 0           # flows whose rate is recomputed with their F as it is
        n_scanned = 0
        job_done = False
        # Every item due now: flows (a finish, an F mark, or a recomputation after a
        # rebuild) and jobs (compute ends).
        while counters[_HEAP_SIZE] > 0 and heap_key[heap[0]] <= due:
            item = heap[0]
            _heap_set(heap, heap_pos, heap_key, counters, item, np.inf)
            jobs_todo[n_todo] = n_jobs + item if item < n_flows else item - n_flows
            n_todo += 1
        while True:
            while n_todo > 0:
                n_todo -= 1
                j = jobs_todo[n_todo]
                if j >= n_jobs:
                    # A flow: brought to t; it stops if it has delivered its bytes (its
                    # links join the region: its capacity is handed out, and its job
                    # looks at its barrier), else it is at an F mark and joins.
                    f = j - n_jobs
                    if not active[f] or flow_mark[f] == stamp:
                        continue
                    _bring(f, t, rem, sent, rate, tlast)
                    if _delivered(rem[f], flow_bytes[f]):
                        flow_mark[f] = stamp
                        n_queue = _queue_links(f, stamp, flow_ptr, flow_links, link_mark,
                                               queue, n_queue)
                        refresh[f] = False
                        rem[f] = 0.0
                        active[f] = False
                        rate[f] = 0.0
                        _heap_set(heap, heap_pos, heap_key, counters, f, np.inf)
                        busy[flow_job[f]] -= 1
                        jobs_todo[n_todo] = flow_job[f]
                        n_todo += 1
                    elif refresh[f]:              # carried over: F as it was
                        refresh[f] = False
                        kept[n_kept] = f
                        n_kept += 1
                    else:
                        flow_mark[f] = stamp
                        n_queue = _queue_links(f, stamp, flow_ptr, flow_links, link_mark,
                                               queue, n_queue)
                        comp[n_comp] = f
                        n_comp += 1
                    continue
                if communicating[j] and busy[j] == 0:
                    # Barrier: the phase is over; the next phase or iteration computes.
                    communicating[j] = False
                    i = it[j]
                    c = i % n_rec
                    rec_phase_end[j, c, phase[j]] = t
                    if phase[j] == n_phases - 1:
                        rec_comm_end[j, c] = t
                        rec_end[j, c] = t
                        it[j] = i + 1
                        if it[j] >= iterations[j]:
                            running[j] = False
                            job_done = True
                            continue
                        for f in range(job_ptr[j], job_ptr[j + 1]):
                            sent[f] = 0.0            # a new iteration: bytes_ratio from 0
                        phase[j] = 0
                        c = (i + 1) % n_rec
                        rec_start[j, c] = t
                        rec_comm_start[j, c] = np.nan
                        rec_comm_end[j, c] = np.nan
                        rec_end[j, c] = np.nan
                        for q in range(n_phases):
                            rec_phase_start[j, c, q] = np.nan
                            rec_phase_end[j, c, q] = np.nan
                        if ring:
                            cj = (i + 1) % n_jit
                            compute = phase_compute[j, 0] + jitter[j, cj]
                            jitter[j, cj] = 0.0
                        else:
                            compute = phase_compute[j, 0] + jitter[j, min(i + 1, n_jit - 1)]
                    else:
                        phase[j] += 1
                        compute = phase_compute[j, phase[j]]
                    ends = t + compute
                    if ends > due:
                        _heap_set(heap, heap_pos, heap_key, counters, n_flows + j, ends)
                        continue
                    jobs_todo[n_todo] = j            # no compute: the next phase starts now
                    n_todo += 1
                    continue
                if communicating[j] or not running[j] or heap_pos[n_flows + j] >= 0:
                    continue                         # still waiting for flows, or computing
                # Its compute ended: the phase's communication starts.
                communicating[j] = True
                c = it[j] % n_rec
                if phase[j] == 0:
                    rec_comm_start[j, c] = t
                rec_phase_start[j, c, phase[j]] = t
                frac = phase_fraction[j, phase[j]]
                for f in range(job_ptr[j], job_ptr[j + 1]):
                    r = flow_bytes[f] * frac
                    tlast[f] = t
                    rate[f] = 0.0
                    if flow_ptr[f] == flow_ptr[f + 1]:
                        rem[f] = 0.0                 # crosses no shaped link: no constraint,
                        sent[f] += r                 # delivered at once
                    elif not _delivered(r, flow_bytes[f]):
                        rem[f] = r
                        active[f] = True
                        busy[j] += 1
                        flow_mark[f] = stamp
                        comp[n_comp] = f
                        n_comp += 1
                        n_queue = _queue_links(f, stamp, flow_ptr, flow_links, link_mark, queue,
                                               n_queue)
                    else:
                        rem[f] = 0.0
                if busy[j] == 0:
                    jobs_todo[n_todo] = j
                    n_todo += 1
            # Flows on the region's links that deliver their last bytes now too (to the
            # tolerance) stop in this event, not a fraction of a nanosecond later.
            for i in range(n_scanned, n_queue):
                k = queue[i]
                for p in range(link_ptr[k], link_ptr[k + 1]):
                    g = link_flows[p]
                    if active[g] and flow_mark[g] != stamp and seen[g] != stamp and \
                            _delivered(rem[g] - rate[g] * (t - tlast[g]), flow_bytes[g]):
                        seen[g] = stamp
                        jobs_todo[n_todo] = n_jobs + g
                        n_todo += 1
            n_scanned = n_queue
            if n_todo == 0:
                break
        if mltcp:
            # The active flows that share a link with the event's flows: their
            # competition changed, and their F is re-evaluated with the event's.
            for i in range(n_queue):
                k = queue[i]
                for p in range(link_ptr[k], link_ptr[k + 1]):
                    h = link_flows[p]
                    if active[h] and flow_mark[h] != stamp:
                        flow_mark[h] = stamp
                        _bring(h, t, rem, sent, rate, tlast)
                        comp[n_comp] = h
                        n_comp += 1
        for i in range(n_comp):
            f = comp[i]
            w[f] = weight[f] * compiled_f(sent[f] / flow_bytes[f] if flow_bytes[f] > 0
                                          else 0.0, slope, intercept, cap)
        for i in range(n_comp):      # the neighbours' links, after the loop above
            n_queue = _queue_links(comp[i], stamp, flow_ptr, flow_links, link_mark, queue,
                                   n_queue)
        for i in range(n_kept):
            f = kept[i]
            if active[f] and flow_mark[f] != stamp:
                flow_mark[f] = stamp
                comp[n_comp] = f
                n_comp += 1
                n_queue = _queue_links(f, stamp, flow_ptr, flow_links, link_mark, queue,
                                       n_queue)
        n_comp, n_queue = _settle(t, stamp, n_comp, n_queue, comp, queue, flow_ptr,
                                  flow_links, link_ptr, link_flows, capacity, active,
                                  flow_mark, link_mark, seen, bneck, rem, sent, rate, tlast,
                                  w, level, resid, left, wsum, unfrozen, frozen, lheap, lpos,
                                  lkey, lcount, stat_mark, stat_load, stat_norm, counters)
        counters[_RECOMPUTED] += n_comp
        for i in range(n_queue if sample_s > 0.0 else 0):   # (only samples use them)
            k = queue[i]
            _flush_link(link_rate, link_tlast, bins, k, t, sample_s)
            total = 0.0
            for p in range(link_ptr[k], link_ptr[k + 1]):
                f = link_flows[p]
                if active[f]:
                    total += rate[f]
            link_rate[k] = total
        for i in range(n_comp):
            f = comp[i]
            r = rate[f]
            key = np.inf
            if r > 0.0:
                key = t + rem[f] / r
                if mltcp and f_steps > 0:
                    step = flow_bytes[f] / f_steps
                    mark = (math.floor(sent[f] / step + 1e-9) + 1.0) * step
                    key = min(key, t + (mark - sent[f]) / r)
                if key <= t:
                    # Hours into a run, a flow's last fraction of a byte (or of a step to
                    # its F mark) can take less than the clock's resolution at t: the
                    # event would come back at t with nothing moved, forever.  The next
                    # representable instant moves it (rate x one ulp >= what is left).
                    key = np.nextafter(t, np.inf)
            _heap_set(heap, heap_pos, heap_key, counters, f, key)
        if job_done and params[5] > 0.0:
            return JOB_DONE
