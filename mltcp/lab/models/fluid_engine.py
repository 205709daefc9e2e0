"""The fluid model's event engine: one run, compiled, rates recomputed only where
something changed.

Why this shape.  A cluster run has a thousand jobs, each a few flows, each crossing a
few of the fabric's links, over millions of events.  Recomputing every flow's rate at
every event, with dense (flows x links) matrices, cost the first engine seconds per
hundred events at that scale (``bench/bench_cluster_scale.py``).  Here:

* the link-flow incidence is sparse (CSR both ways: a flow's links, a link's flows);
* an event (a job's compute ends and its flows start, a flow delivers its bytes, an
  MLTCP flow's bytes_ratio reaches its next 1/f_steps mark) recomputes the rates of a
  *region* only, the flows outside keeping theirs (:func:`_settle`).  Each flow
  remembers its *bottleneck*, a full link on which no flow gets more per unit of
  weight, and each link the flows bottlenecked there; the region is the event's flows
  (and, for MLTCP, the flows that share a link with them, see below), the flows
  bottlenecked on their links, those bottlenecked on the links of these, and so on:
  the flows the event moves (in the cluster bench all but 3 % of a region's ~21 rates
  move).  Its max-min is solved over its flows' bottlenecks (the capacity the flows
  outside leave there), a handful of links, not its ~56: the others are checked
  against their capacities afterwards from every link's kept load (the sum of its
  flows' rates, moved with every change of rate, summed again near the capacity), and
  one that would carry too much is added.  The result passes the characterisation of
  weighted max-min, or the region grows: every active flow has a bottleneck and no
  link carries more than its capacity; the allocation with those properties is
  unique, so the rates are the ones a recomputation of the whole network would give
  (to rounding: the tests' tolerance is 1e-12 relative).  A flow whose rate moves is
  in the region, so a flow outside keeps its bottleneck.  A region flow outrun on a
  full link by a flow outside brings that flow in; a region still growing after
  _MAX_ROUNDS rounds is solved as its whole contention component (the active flows
  reachable through shared links).  Each flow's progress is brought up to date
  lazily, from the time its rate was last set;
* the next event comes from an indexed min-heap over flows and jobs (a flow's key is
  its next finish or F mark at its current rate, a job's its compute end);
* max-min itself is progressive filling; the next link to fill is found by a scan in
  a region of a few dozen links, from a heap of links in a large one;
* link samples are aggregated into their periodic bins as rates change (bytes of each
  bin = the integral of the link's rate over it: the same numbers the piecewise-linear
  interpolation of the cumulative bytes gave), and only when asked for;
* a flow's and a link's fields sit in one row each (:class:`EngineState`: ``fv``/``fi``
  and ``lv``/``li``, the same 16 numbers read as floats and as integers): an event
  reads a few dozen flows and links scattered over the network;
* the loops are compiled with numba (a well-kept JIT for numeric Python: no C
  extension to build, the functions stay readable Python), cached on disk so a process
  pays the compilation once per installation, without numba's reference counting
  (:func:`_compiled`: it was three quarters of an event's time) and with the small
  helpers compiled into their callers (:func:`_inlined`).

What it costs.  ``bench/bench_cluster_scale.py``, 1,000 jobs x 1,000 iterations at
random placement (1,676 flows on 1,536 links), MLTCP: 13.8 M events (7 F marks and a
finish per flow and iteration), 4.1 us an event (regions of ~22 flows), 56 s on the
2-core development machine; standard congestion control 4.8 s.  The version before
solved every link of the region at every fill step, checked every flow on the
region's links against sums taken afresh and grew regions a round at a time (2.4
solves an event): 18 us an event, 243 s (12 s standard).  What is left is mostly
memory latency: the first touch of each of the ~56 link rows and ~45 flow rows an
event reads (a profile's samples sit on those loads), not arithmetic.

Which F an allocation uses.  The model is :mod:`mltcp.lab.scenario.batched.fluid`'s (weighted
max-min by progressive filling, phases and barriers as
:mod:`mltcp.lab.scenario.batched.jobphases` describes them); F is
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
cluster bench's random placement, against about 22 now.  A rebuilt state
(:func:`carry_over`) recomputes the carried flows' rates with the F they had.

All state lives in numpy arrays (:class:`EngineState`) so that a run can be advanced
in slices of simulated time (:func:`advance_until`): progress reports between slices,
and the cluster simulator adds and removes jobs between them.  Within a call, the
compiled loop is entered for a slice of events at a time, sized to return to Python
about every :data:`SLICE_S` of wall time, so that Ctrl-C and the teardown signals
(:mod:`mltcp.core.signals`) are handled during a run of hours; the slices do not
change the results (a call stops before an event, with all its state in the arrays).
"""

from __future__ import annotations

import math
import os
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numba
import numpy as np
from numba import njit
from numba.core import event as numba_event

from mltcp.core import console
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


_ENGINE: set[Any] = set()      # every dispatcher of the engine (what the notice watches)


def _compiled(fn):  # type: ignore[no-untyped-def]
    """``fn`` compiled for the engine: cached on disk, and without numba's reference
    counting (``_nrt=False``, as numba's own allocation-free helpers are built).  The
    engine allocates nothing once a state exists; with counting on, every call of a
    helper that takes arrays did an atomic increment and decrement per array, which
    was three quarters of an event's time at cluster scale.  A helper that allocated
    would fail to compile, not misbehave.  Divisions follow IEEE (numpy's error model:
    no test and exception path per division; the engine divides by nothing that can be
    0 except where a flow has weight 0, which gets no rate either way)."""
    dispatcher = njit(cache=True, _nrt=False, error_model="numpy")(fn)
    _ENGINE.add(dispatcher)
    return dispatcher


def _inlined(fn):  # type: ignore[no-untyped-def]
    """A small helper of the engine's, compiled into its callers (a call that passes a
    few arrays, each a dozen machine words, cost more than the helper's work)."""
    dispatcher = njit(cache=True, _nrt=False, error_model="numpy", inline="always")(fn)
    _ENGINE.add(dispatcher)
    return dispatcher


compiled_f = _compiled(f_float)      # the one F, compiled for the engine

# advance_until's outcome
DONE, RUNNING, STUCK, TOO_MANY_EVENTS, JOB_DONE = 0, 1, 2, 3, 4

# EngineState.counters
_HEAP_SIZE, _EVENTS, _STAMP, _RECOMPUTED = 0, 1, 2, 3

# Columns of a flow's row (EngineState.fi and .fv: the same 16 numbers per flow, read as
# integers and as floats; the first 8, one cache line, what a look at a flow outside the
# region reads): its links' span in flow_links, bytes left (0/1), stamp (in the region),
# the next flow on its bottleneck's list (-1: the end); its rate, rate / w (the level it
# froze at), w (weight x F, as last evaluated); frozen (max-min), the link it froze on in
# its last solve, its bottleneck (a link checked to be; -1: none known); bytes left in the
# phase, bytes sent in the iteration, when those were brought up to date, bytes per
# iteration, its rate before the event.
_P0, _P1, _ACTIVE, _MARK, _BNEXT = 0, 1, 2, 3, 4                          # fi
_RATE, _LEVEL, _W = 5, 6, 7                                               # fv
_FROZEN, _FZ, _BNECK = 8, 9, 10                                           # fi
_REM, _SENT, _TLAST, _BYTES, _ROLD = 11, 12, 13, 14, 15                   # fv
# Columns of a link's row (EngineState.li and .lv; the first line what every link of a
# region is read for): its flows' span in link_flows, stamps (a link of the region, a
# constraint of its solve, listed near its capacity), the first flow bottlenecked there
# (-1: none); its capacity, load (its active flows' rates, summed); max-min's unfrozen
# flows and place in okey; the capacity the flows outside the region leave, their top
# rate/weight, the region's top rate/weight, max-min's capacity left and weight unfrozen.
_Q0, _Q1, _LMARK, _BMARK, _NMARK, _BHEAD = 0, 1, 2, 3, 4, 5               # li
_CAP, _LOAD = 6, 7                                                        # lv
_UNFROZEN, _OPOS = 8, 9                                                   # li
_RESID, _OUTMAX, _INMAX, _LEFT, _WSUM = 10, 11, 12, 13, 14                # lv

_REL_TOL = 1e-9       # bytes left that count as none, relative to an iteration's bytes
_CHECK_TOL = 1e-12    # a link this close to its capacity is full, a flow this close to a
                      # link's top rate/weight has it (rounding, not modelling)
_NEAR = 1e-9          # a link this close to its capacity has its load summed again
_MAX_ROUNDS = 32      # growth rounds of a region before its whole component is solved
_SCAN_LINKS = 96      # max-min finds the next link to fill by a scan up to this many links

# Responsiveness: one compiled call processes at most a slice of events, sized so that it
# returns to Python about every SLICE_S of wall time (Python's signal handlers, Ctrl-C
# among them, run only between calls).  The slice starts small, at most doubles a call
# and shrinks at once; where a call stops changes nothing in the results (a call stops
# before an event, with all its state in the arrays).  Tests shrink SLICE_EVENTS_MAX.
SLICE_S = 0.1
SLICE_EVENTS_MIN, SLICE_EVENTS_MAX = 64, 1 << 22


# --------------------------------------------------------------------------- state


@dataclass
class EngineState:
    """One run: its structure (read-only) and its state (updated in place).

    Flows are ordered by job: the flows of job j are ``job_ptr[j]:job_ptr[j + 1]``.
    Times in seconds, bytes, capacities in payload bytes per second.  A flow's and a
    link's fields live in one row each (``fi``/``fv``, ``li``/``lv``; columns ``_P0``
    ... above); ``rate``, ``rem``, ``capacity`` and the like are views of them.
    """

    # structure
    flow_job: np.ndarray          # (F,) int64
    flow_ptr: np.ndarray          # (F+1,) int64: a flow's links are flow_links[ptr[f]:ptr[f+1]]
    flow_links: np.ndarray        # (nnz,) int64
    link_ptr: np.ndarray          # (K+1,) int64: a link's flows are link_flows[ptr[k]:ptr[k+1]]
    link_flows: np.ndarray        # (nnz,) int64
    job_ptr: np.ndarray           # (J+1,) int64
    weight: np.ndarray            # (F,) connections
    phase_fraction: np.ndarray    # (J, P)
    phase_compute: np.ndarray     # (J, P)
    iterations: np.ndarray        # (J,) int64
    jitter: np.ndarray            # (J, N)
    params: np.ndarray            # [slope, intercept, cap, f_steps, sample_s (0: no samples),
                                  #  stop when a job ends (0/1), ring (0/1)]
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
    fi: np.ndarray                # (F, 16) int64 a flow's row (columns _P0 ... above)
    fv: np.ndarray                # (F, 16) the same memory as floats
    li: np.ndarray                # (K, 16) int64 a link's row (columns _Q0 ... above)
    lv: np.ndarray                # (K, 16) the same memory as floats
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
    bins: np.ndarray              # (R, B) payload bytes per sample interval, sampled links
    bin_row: np.ndarray           # (K,) int64 a link's row of bins, -1: not sampled
    bprev: np.ndarray             # (F,) int64 the previous flow on its bottleneck's list
    refresh: np.ndarray           # (F,) bool: its next event only recomputes its rate
    # scratch for one event
    seen: np.ndarray              # (F,) int64 stamp: queued already
    queue: np.ndarray             # (K,) int64 the region's links
    comp: np.ndarray              # (F,) int64 the region's flows
    kept: np.ndarray              # (F,) int64 flows whose rate is recomputed with their F kept
    jobs_todo: np.ndarray         # (2J+2F+2,) int64 jobs and flows to look at
    blinks: np.ndarray            # (K,) int64 the constraints of the region's solve
    near: np.ndarray              # (K,) int64 links that came near their capacity
    lheap: np.ndarray             # (K,) int64 max-min's heap of links by fill level
                                  # (or its list of links still open)
    lpos: np.ndarray              # (K,) int64
    lkey: np.ndarray              # (K,) a link's fill level
    lcount: np.ndarray            # (1,) int64
    okey: np.ndarray              # (K,) max-min's levels of the links still open (scan)
    # responsiveness
    slice_events: int = SLICE_EVENTS_MIN  # events one compiled call may process

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

    # views of the packed rows
    @property
    def rate(self) -> np.ndarray:
        """(F,) each flow's rate (a view)."""
        return self.fv[:, _RATE]

    @property
    def level(self) -> np.ndarray:
        """(F,) rate / w: the fill level a flow froze at (a view)."""
        return self.fv[:, _LEVEL]

    @property
    def w(self) -> np.ndarray:
        """(F,) weight x F, as last evaluated (a view)."""
        return self.fv[:, _W]

    @property
    def rem(self) -> np.ndarray:
        """(F,) bytes left in the current phase (a view)."""
        return self.fv[:, _REM]

    @property
    def sent(self) -> np.ndarray:
        """(F,) bytes sent in the current iteration (a view)."""
        return self.fv[:, _SENT]

    @property
    def tlast(self) -> np.ndarray:
        """(F,) when rem and sent were last brought up to date (a view)."""
        return self.fv[:, _TLAST]

    @property
    def flow_bytes(self) -> np.ndarray:
        """(F,) bytes per iteration (a view)."""
        return self.fv[:, _BYTES]

    @property
    def active(self) -> np.ndarray:
        """(F,) bool: bytes left (a copy)."""
        return self.fi[:, _ACTIVE] != 0

    @property
    def bneck(self) -> np.ndarray:
        """(F,) a link checked to be the flow's bottleneck, -1: none known (a view)."""
        return self.fi[:, _BNECK]

    @property
    def capacity(self) -> np.ndarray:
        """(K,) each link's capacity (a view)."""
        return self.lv[:, _CAP]

    @property
    def load(self) -> np.ndarray:
        """(K,) each link's active flows' rates, summed (a view)."""
        return self.lv[:, _LOAD]


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


def _rows(n: int) -> tuple[np.ndarray, np.ndarray]:
    """(n, 16) zeros whose rows start on 64-byte boundaries (two cache lines a row), as
    integers and as floats (the same memory)."""
    buf = np.zeros((max(n, 1) + 1) * 16, dtype=np.int64)
    skip = (-buf.ctypes.data % 64) // 8
    ints = buf[skip:skip + max(n, 1) * 16].reshape(max(n, 1), 16)
    return ints, ints.view(np.float64)


def _packed(flow_ptr: np.ndarray, link_ptr: np.ndarray, capacity: np.ndarray,
            flow_bytes: np.ndarray) -> dict[str, np.ndarray]:
    """The flows' and the links' rows of a run at time 0 (EngineState's fi, fv, li, lv)."""
    n_flows, n_links = len(flow_ptr) - 1, len(link_ptr) - 1
    (fi, fv), (li, lv) = _rows(n_flows), _rows(n_links)
    fv[:n_flows, _W] = 1.0
    fv[:n_flows, _BYTES] = flow_bytes
    fi[:n_flows, _P0], fi[:n_flows, _P1] = flow_ptr[:-1], flow_ptr[1:]
    fi[:, _FROZEN] = 1
    fi[:, _BNECK] = fi[:, _BNEXT] = -1
    lv[:n_links, _CAP] = capacity
    li[:n_links, _Q0], li[:n_links, _Q1] = link_ptr[:-1], link_ptr[1:]
    li[:, _BHEAD] = -1
    return {"fv": fv[:n_flows], "fi": fi[:n_flows], "lv": lv[:n_links], "li": li[:n_links]}


def new_state(flow_job: np.ndarray, flow_links: list[list[int]], capacity: np.ndarray,
              flow_bytes: np.ndarray, weight: np.ndarray, phase_fraction: np.ndarray,
              phase_compute: np.ndarray, iterations: np.ndarray, start: np.ndarray,
              jitter: np.ndarray, slope: float, intercept: float, cap: float,
              f_steps: int, sample_s: float, n_iter: int = 0,
              stop_on_job_done: bool = False, ring: int = 0,
              sampled: np.ndarray | None = None) -> EngineState:
    """A run at time 0: every job with iterations computes its first phase.
    ``sample_s`` > 0: the links ``sampled`` (indices; None: every link) keep their
    payload bytes per ``sample_s`` interval (:func:`finish_bins`), in that order;
    ``n_iter``: records for this many iterations (at least the most any job runs);
    ``stop_on_job_done``: :func:`advance_until` returns JOB_DONE after the event in which
    a job ran its last iteration (the cluster simulator schedules then); ``ring`` > 0:
    keep only the last ``ring`` iterations' records and extra compute (``jitter``),
    iteration i in column ``i % ring`` (:func:`column`), an extra compute cleared once
    used: the cluster simulator needs a job's latest iterations, and records for every
    iteration of thousands of long jobs, rebuilt at every scheduling moment, were most of
    its time and memory."""
    ensure_compiled()
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
    rows = (np.arange(n_links) if sampled is None else np.asarray(sampled, dtype=np.int64)) \
        if sample_s > 0 else np.zeros(0, dtype=np.int64)
    bin_row = np.full(n_links, -1, dtype=np.int64)
    bin_row[rows] = np.arange(len(rows))
    n_items = n_flows + n_jobs
    st = EngineState(
        flow_job=flow_job, flow_ptr=flow_ptr, flow_links=links, link_ptr=link_ptr,
        link_flows=link_flows, job_ptr=job_ptr, weight=np.asarray(weight, float),
        phase_fraction=np.asarray(phase_fraction, float),
        phase_compute=np.asarray(phase_compute, float),
        iterations=np.asarray(iterations, dtype=np.int64), jitter=jit,
        params=np.array([slope, intercept, cap, f_steps, sample_s, float(stop_on_job_done),
                         float(ring > 0)], dtype=float),
        start=nan(n_jobs, n_iter), comm_start=nan(n_jobs, n_iter),
        comm_end=nan(n_jobs, n_iter), end=nan(n_jobs, n_iter),
        phase_start=nan(n_jobs, n_iter, n_phases), phase_end=nan(n_jobs, n_iter, n_phases),
        clock=np.zeros(1), counters=np.zeros(4, dtype=np.int64),
        **_packed(flow_ptr, link_ptr, np.asarray(capacity, float),
                  np.asarray(flow_bytes, float)),
        running=np.asarray(iterations) > 0, it=np.zeros(n_jobs, dtype=np.int64),
        phase=np.zeros(n_jobs, dtype=np.int64),
        communicating=np.zeros(n_jobs, dtype=np.bool_), busy=np.zeros(n_jobs, dtype=np.int64),
        heap=np.zeros(n_items, dtype=np.int64), heap_pos=np.full(n_items, -1, dtype=np.int64),
        heap_key=np.full(n_items, np.inf), link_rate=np.zeros(n_links),
        link_tlast=np.zeros(n_links), bins=np.zeros((len(rows), 0)), bin_row=bin_row,
        bprev=ints(n_flows, -1), refresh=np.zeros(n_flows, dtype=np.bool_),
        seen=ints(n_flows), queue=ints(n_links), comp=ints(n_flows), kept=ints(n_flows),
        jobs_todo=ints(2 * n_jobs + 2 * n_flows + 2), blinks=ints(n_links), near=ints(n_links),
        **_link_heap(n_links))
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
            "lcount": np.zeros(1, dtype=np.int64), "okey": np.zeros(n_links)}


def advance_until(st: EngineState, t_stop: float, max_events: int,
                  on_slice: Callable[[], None] | None = None) -> int:
    """Process every event up to ``t_stop`` (simulated seconds): DONE when no job has
    anything left, RUNNING when the next event lies beyond ``t_stop``, STUCK when flows
    with bytes left get no capacity, TOO_MANY_EVENTS past ``max_events``, JOB_DONE after
    a job's last iteration where the state was made with ``stop_on_job_done``.

    The compiled loop is entered once per slice of events (:data:`SLICE_S`), so a long
    call still lets Python handle signals several times a second; ``on_slice`` is
    called after each (a caller's progress report: it may read, not change, ``st``)."""
    while True:
        horizon = _grow_bins(st, t_stop)
        budget = min(max_events, st.events + min(st.slice_events, SLICE_EVENTS_MAX))
        status = _advance_slice(st, horizon, budget)
        if on_slice is not None:
            on_slice()
        if status == TOO_MANY_EVENTS and budget < max_events:
            continue                      # the slice ended, not the run's budget
        if status != RUNNING or horizon >= t_stop:
            return status


def _grow_bins(st: EngineState, t_stop: float) -> float:
    """How far the next compiled call may go: ``t_stop``, or, where links are sampled,
    as far as the bins reach.  Samples are flushed at event times: the bins must reach
    every event a call processes.  Grown (doubling) to reach at least the next one; the
    compiled loop stops where they end, and goes on once they are grown."""
    sample_s = st.params[4]
    nxt = _next_key(st)
    if not (sample_s > 0 and math.isfinite(nxt)):
        return t_stop
    have = st.bins.shape[1]
    need = int(min(t_stop, nxt) / sample_s) + 3
    if need > have:
        grown = np.zeros((st.bins.shape[0], max(need, 2 * have, 64)))
        grown[:, :have] = st.bins
        st.bins = grown
    return min(t_stop, (st.bins.shape[1] - 2) * sample_s)


def _advance_slice(st: EngineState, horizon: float, budget: int) -> int:
    """One compiled call (events up to ``horizon``, at most ``budget`` events in all),
    timed to size the next slice so that each call takes about :data:`SLICE_S`."""
    before, began = st.events, time.monotonic()
    status = _advance(
        st.flow_job, st.fi, st.flow_links, st.li, st.link_flows, st.job_ptr, st.lv,
        st.fv, st.weight, st.phase_fraction, st.phase_compute, st.iterations, st.jitter,
        st.params, st.start, st.comm_start, st.comm_end, st.end, st.phase_start,
        st.phase_end, st.clock, st.counters, st.running, st.it, st.phase,
        st.communicating, st.busy, st.heap, st.heap_pos, st.heap_key, st.link_rate,
        st.link_tlast, st.bins, st.bin_row, st.bprev, st.refresh, st.seen, st.queue, st.comp,
        st.kept, st.jobs_todo, st.blinks, st.near, st.lheap, st.lpos, st.lkey, st.lcount,
        st.okey, float(horizon), int(budget))
    st.slice_events = next_slice(st.slice_events, st.events - before,
                                 time.monotonic() - began)
    return status


def next_slice(current: int, events: int, elapsed_s: float) -> int:
    """The next slice's events: what would have taken :data:`SLICE_S` at this call's
    pace, at most twice ``current`` (a fast call may be a cheap stretch), within
    [SLICE_EVENTS_MIN, SLICE_EVENTS_MAX].  A call that used less than its slice stopped
    for another reason and says little about pace: the slice stays unless it was slow."""
    if events <= 0:
        paced = current
    else:
        paced = int(events * SLICE_S / elapsed_s) if elapsed_s > 0 else 2 * current
        if events < current:
            paced = min(paced, current)
    return min(max(SLICE_EVENTS_MIN, min(paced, 2 * current)), SLICE_EVENTS_MAX)


def set_event(st: EngineState, item: int, t: float) -> None:
    """Give flow ``item`` (or job ``F + j``) its next event at ``t`` (inf: none)."""
    _heap_set(st.heap, st.heap_pos, st.heap_key, st.counters, item, t)


def carry_over(old: EngineState, new: EngineState, pairs: list[tuple[int, int]],
               t: float) -> None:
    """Jobs that go on from ``old`` into ``new`` (a state made for another set of jobs,
    the same jobs' flows in the same order), at time ``t``: ``pairs`` = (job in old,
    job in new).  Each job's records, iteration, phase, compute deadline and extra
    compute still to come (:func:`delay_next_comm`'s holds among it), each flow's bytes
    left and sent (brought up to ``t``; ``old`` is consumed) and weight x F move over;
    every active flow gets an event at ``t``, so its rate is computed again there
    (with the F it had: a rebuild is no event of the flow's, and does not re-evaluate
    F where a run without the rebuild would not have)."""
    n_old, n_new = len(old.flow_job), len(new.flow_job)
    new.clock[0] = t
    for jo, jn in pairs:
        for rec in ("start", "comm_start", "comm_end", "end", "phase_start", "phase_end"):
            getattr(new, rec)[jn] = getattr(old, rec)[jo]
        for var in ("it", "phase", "running", "communicating", "busy"):
            getattr(new, var)[jn] = getattr(old, var)[jo]
        new.jitter[jn] = old.jitter[jo]
        set_event(new, n_new + jn,
                  old.heap_key[n_old + jo] if old.heap_pos[n_old + jo] >= 0 else math.inf)
        for a, b in zip(range(old.job_ptr[jo], old.job_ptr[jo + 1]),
                        range(new.job_ptr[jn], new.job_ptr[jn + 1]), strict=True):
            on = old.fi[a, _ACTIVE]
            if on:
                _bring(a, t, old.fv)
                set_event(new, b, t)
                new.refresh[b] = True
            new.fi[b, _ACTIVE] = on
            new.fv[b, _REM], new.fv[b, _SENT] = old.fv[a, _REM], old.fv[a, _SENT]
            new.fv[b, _TLAST], new.fv[b, _W] = t, old.fv[a, _W]


def set_clock(st: EngineState, t: float) -> None:
    """Start the run of a fresh state at ``t`` instead of 0 (its jobs' starts were given
    as absolute times)."""
    st.clock[0] = t


# -- a job's progress, for a caller that schedules around the run (the cluster
#    simulator); jobs by index, iterations counted from 0.


def iterations_done(st: EngineState, j: int) -> int:
    """How many iterations job ``j`` has finished."""
    return int(st.it[j])


def is_running(st: EngineState, j: int) -> bool:
    """Whether job ``j`` has iterations left."""
    return bool(st.running[j])


def iteration_span(st: EngineState, j: int, i: int) -> tuple[float, float]:
    """Start and end of job ``j``'s iteration ``i`` (NaN where not run; a state with a
    ring keeps only its last iterations)."""
    c = column(st, i)
    return float(st.start[j, c]), float(st.end[j, c])


def job_iterations(st: EngineState, j: int) -> tuple[np.ndarray, np.ndarray]:
    """Starts and ends of job ``j``'s iterations (copies; NaN where not run; a state with
    a ring keeps only its last iterations, in ring columns)."""
    return st.start[j].copy(), st.end[j].copy()


def next_comm_start(st: EngineState, j: int) -> float:
    """When running job ``j``'s communication starts: the one it computes towards (its
    compute's end), or, while it communicates, the current one's start plus what its
    next iteration will compute longer (the holds asked for it so far)."""
    item = len(st.flow_job) + j
    if st.heap_pos[item] >= 0:
        return float(st.heap_key[item])
    i = int(st.it[j])
    return float(st.comm_start[j, column(st, i)] + st.jitter[j, column(st, i + 1)])


def delay_next_comm(st: EngineState, j: int, hold_s: float) -> None:
    """Hold job ``j``'s next communication back by ``hold_s``: a computing job's compute
    ends later; a communicating job's next iteration computes longer."""
    item = len(st.flow_job) + j
    if st.heap_pos[item] >= 0:
        set_event(st, item, float(st.heap_key[item]) + hold_s)
    else:
        st.jitter[j, column(st, int(st.it[j]) + 1)] += hold_s


def _next_key(st: EngineState) -> float:
    return float(st.heap_key[st.heap[0]]) if st.counters[_HEAP_SIZE] else math.inf


def finish_bins(st: EngineState) -> np.ndarray:
    """The sampled links' bytes per sample interval up to the run's last event (flushed),
    one row per link in the order ``new_state`` was given them."""
    _flush_all(st.link_rate, st.link_tlast, st.bins, st.bin_row, st.clock[0], st.params[4])
    return st.bins


def weighted_max_min(weights: np.ndarray, flow_links: list[list[int]],
                     capacity: np.ndarray) -> np.ndarray:
    """Rates of weighted max-min fairness over the whole network (flows with weight 0
    get 0): the function the engine runs on each region, for tests and tools."""
    ensure_compiled()
    flow_ptr, links, link_ptr, link_flows = _csr(flow_links, len(capacity))
    n_flows = len(weights)
    comp = np.flatnonzero(np.asarray(weights) > 0).astype(np.int64)
    link_list = np.unique(links[np.isin(np.repeat(np.arange(n_flows), np.diff(flow_ptr)),
                                        comp)]).astype(np.int64)
    rows = _packed(flow_ptr, link_ptr, np.asarray(capacity, float), np.zeros(n_flows))
    rows["fv"][:, _W] = weights
    rows["lv"][:, _RESID] = capacity
    rows["li"][:, _BMARK] = 1
    _max_min(comp, len(comp), link_list, len(link_list), rows["li"], 1, rows["fv"],
             rows["fi"], links, link_flows, rows["lv"], *_link_heap(len(capacity)).values(),
             np.zeros(max(len(links), 1), dtype=np.int64), 1)
    return rows["fv"][:, _RATE].copy()


# --------------------------------------------------------------------------- heap


@_inlined
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


@_inlined
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
def _max_min(comp, n_comp, links, n_links, li, bstamp, fv, fi, flow_links, link_flows, lv, lheap,
             lpos, lkey, lcount, okey, near, nstamp):  # type: ignore[no-untyped-def]
    """Weighted max-min rates of the flows ``comp[:n_comp]`` over the capacities
    ``_RESID`` of ``links[:n_links]`` (the links marked ``_BMARK == bstamp``: a flow's
    other links are no constraints here; every flow needs one) by progressive filling:
    every unfrozen flow's rate is w x the fill level; the link whose (capacity - frozen
    rates) / (unfrozen weight) is smallest fills first, its flows freeze at that level
    (``_FZ``: the link they froze on; ``_INMAX``: a link's top level among them);
    repeat.  Flows outside must be frozen (they are left as they are); the component's
    flows are frozen again on return.  As a flow freezes, the ``_LOAD`` of each of its
    links moves by its new rate less ``_ROLD``; the links that come near their capacity
    are listed in ``near`` (stamp ``nstamp``); returns how many.

    The next link to fill is found by scanning the links still open where they are
    few (a region of a few dozen links: cheaper than a heap's upkeep), from a min-heap
    by level otherwise (a component of K links and nnz incidences costs O(nnz log K),
    not O(K^2)).  Ties go to the link listed first either way."""
    for i in range(n_links):
        k = links[i]
        lv[k, _LEFT] = lv[k, _RESID]
        lv[k, _WSUM] = 0.0
        li[k, _UNFROZEN] = 0
        lv[k, _INMAX] = 0.0
    for i in range(n_comp):
        f = comp[i]
        fi[f, _FROZEN] = 0
        fv[f, _RATE] = 0.0
        fv[f, _LEVEL] = 0.0
        for p in range(fi[f, _P0], fi[f, _P1]):
            k = flow_links[p]
            if li[k, _BMARK] == bstamp:
                lv[k, _WSUM] += fv[f, _W]
                li[k, _UNFROZEN] += 1
    if n_links <= _SCAN_LINKS:
        n_near = _fill_scan(links, n_links, li, bstamp, fv, fi, flow_links, link_flows, lv, lheap,
                            okey, near, nstamp)
    else:
        n_near = _fill_heap(links, n_links, li, bstamp, fv, fi, flow_links, link_flows, lv, lheap,
                            lpos, lkey, lcount, near, nstamp)
    for i in range(n_comp):
        fi[comp[i], _FROZEN] = 1
    return n_near


@_compiled
def _fill_scan(links, n_links, li, bstamp, fv, fi, flow_links, link_flows, lv, open_, okey, near,
               nstamp):  # type: ignore[no-untyped-def]
    """Progressive filling over a few links: the open links' levels sit in one dense
    array (``okey``, in the links' order; a link whose flows all froze reads inf), so
    finding the next link to fill is a scan of consecutive numbers.  The first of the
    lowest fills first, as in the heap."""
    n_open = 0
    for i in range(n_links):
        k = links[i]
        if li[k, _UNFROZEN] > 0:
            open_[n_open] = k
            li[k, _OPOS] = n_open
            okey[n_open] = max(lv[k, _LEFT], 0.0) / lv[k, _WSUM]
            n_open += 1
    n_live = n_open
    n_near = 0
    fill = 0.0
    while n_live > 0:
        best = -1
        best_level = np.inf
        for i in range(n_open):
            x = okey[i]
            if x < best_level:
                best_level = x
                best = i
        if best < 0:
            break
        fill = max(best_level, fill)             # never below the level reached (rounding)
        k = open_[best]
        for p in range(li[k, _Q0], li[k, _Q1]):
            f = link_flows[p]
            if fi[f, _FROZEN]:
                continue
            r = _freeze(f, k, fill, fv, fi)
            d = r - fv[f, _ROLD]
            for q in range(fi[f, _P0], fi[f, _P1]):
                k2 = flow_links[q]
                n_near = _move_load(k2, d, lv, li, near, n_near, nstamp)
                if li[k2, _BMARK] != bstamp:
                    continue
                _release(k2, r, fv[f, _W], fill, lv, li)
                if li[k2, _UNFROZEN] > 0:
                    okey[li[k2, _OPOS]] = max(lv[k2, _LEFT], 0.0) / lv[k2, _WSUM]
                else:
                    okey[li[k2, _OPOS]] = np.inf
                    n_live -= 1
        if 2 * n_live < n_open:                  # drop the links whose flows all froze
            n = 0
            for i in range(n_open):
                k2 = open_[i]
                if li[k2, _UNFROZEN] > 0:
                    open_[n] = k2
                    okey[n] = okey[i]
                    li[k2, _OPOS] = n
                    n += 1
            n_open = n
    return n_near


@_compiled
def _fill_heap(links, n_links, li, bstamp, fv, fi, flow_links, link_flows, lv, lheap, lpos, lkey,
               lcount, near, nstamp):  # type: ignore[no-untyped-def]
    for i in range(n_links):
        k = links[i]
        if li[k, _UNFROZEN] > 0:
            _heap_set(lheap, lpos, lkey, lcount, k, max(lv[k, _LEFT], 0.0) / lv[k, _WSUM])
    n_near = 0
    while lcount[0] > 0:
        k = lheap[0]
        fill = lkey[k]
        _heap_set(lheap, lpos, lkey, lcount, k, np.inf)
        for p in range(li[k, _Q0], li[k, _Q1]):
            f = link_flows[p]
            if fi[f, _FROZEN]:
                continue
            r = _freeze(f, k, fill, fv, fi)
            d = r - fv[f, _ROLD]
            for q in range(fi[f, _P0], fi[f, _P1]):
                k2 = flow_links[q]
                n_near = _move_load(k2, d, lv, li, near, n_near, nstamp)
                if li[k2, _BMARK] != bstamp:
                    continue
                _release(k2, r, fv[f, _W], fill, lv, li)
                if k2 == k:
                    continue
                if li[k2, _UNFROZEN] == 0:
                    _heap_set(lheap, lpos, lkey, lcount, k2, np.inf)
                else:       # never below the level reached (rounding)
                    _heap_set(lheap, lpos, lkey, lcount, k2,
                              max(max(lv[k2, _LEFT], 0.0) / lv[k2, _WSUM], fill))
    return n_near


@_inlined
def _freeze(f, k, fill, fv, fi):  # type: ignore[no-untyped-def]
    """Flow f freezes at level ``fill`` on link k (the link that filled): its rate is its
    weight x the level.  Returns the rate.  Both fill orders (scan, heap) freeze here."""
    fi[f, _FROZEN] = 1
    r = fv[f, _W] * fill
    fv[f, _RATE] = r
    fv[f, _LEVEL] = fill
    fi[f, _FZ] = k
    return r


@_inlined
def _release(k, r, w, fill, lv, li):  # type: ignore[no-untyped-def]
    """Link k of the region loses a flow that froze at rate r (weight w) at level
    ``fill``: what is left of its capacity and its unfrozen weight shrink."""
    lv[k, _LEFT] -= r
    lv[k, _WSUM] -= w
    li[k, _UNFROZEN] -= 1
    lv[k, _INMAX] = fill


@_inlined
def _move_load(k, d, lv, li, near, n_near, nstamp):  # type: ignore[no-untyped-def]
    """Link k's load moves by d (a flow's new rate less its rate before the event); a
    link that comes near its capacity joins ``near`` (once: stamp ``nstamp``).  Returns
    the count of ``near``."""
    x = lv[k, _LOAD] + d
    lv[k, _LOAD] = x
    if x > lv[k, _CAP] * (1.0 - _NEAR) and li[k, _NMARK] != nstamp:
        li[k, _NMARK] = nstamp
        near[n_near] = k
        n_near += 1
    return n_near


@_inlined
def _outside(k, stamp, li, link_flows, fi, fv):  # type: ignore[no-untyped-def]
    """The sum of the rates and the top rate/weight of link k's active flows outside the
    region."""
    r = 0.0
    top = 0.0
    for p in range(li[k, _Q0], li[k, _Q1]):
        g = link_flows[p]
        if fi[g, _ACTIVE] and fi[g, _MARK] != stamp:
            r += fv[g, _RATE]
            if fv[g, _LEVEL] > top:
                top = fv[g, _LEVEL]
    return r, top


@_inlined
def _load(k, li, link_flows, fi, fv):  # type: ignore[no-untyped-def]
    """Link k's active flows' rates, summed."""
    x = 0.0
    for p in range(li[k, _Q0], li[k, _Q1]):
        g = link_flows[p]
        if fi[g, _ACTIVE]:
            x += fv[g, _RATE]
    return x


@_compiled
def _unload(n_comp, comp, fi, flow_links, fv, lv):  # type: ignore[no-untyped-def]
    """The loads of the links of the flows ``comp[:n_comp]`` as they were before their
    rates moved (from ``_ROLD``)."""
    for i in range(n_comp):
        g = comp[i]
        d = fv[g, _RATE] - fv[g, _ROLD]
        for q in range(fi[g, _P0], fi[g, _P1]):
            lv[flow_links[q], _LOAD] -= d


@_inlined
def _set_bneck(g, k, fi, li, bprev):  # type: ignore[no-untyped-def]
    """Flow g's bottleneck is link k (-1: unknown): it moves to k's list of the flows
    bottlenecked there."""
    old = fi[g, _BNECK]
    if old == k:
        return
    if old >= 0:
        a = bprev[g]
        b = fi[g, _BNEXT]
        if a >= 0:
            fi[a, _BNEXT] = b
        else:
            li[old, _BHEAD] = b
        if b >= 0:
            bprev[b] = a
    if k >= 0:
        b = li[k, _BHEAD]
        fi[g, _BNEXT] = b
        bprev[g] = -1
        if b >= 0:
            bprev[b] = g
        li[k, _BHEAD] = g
    fi[g, _BNECK] = k


@_compiled
def _close(t, stamp, n_scan, n_comp, n_queue, comp, queue, fi, flow_links, li,
           fv):  # type: ignore[no-untyped-def]
    """The active flows outside the region bottlenecked on one of its links
    ``queue[n_scan:]`` join it (brought to t), their links join the queue and are
    looked at in turn: when the rates of a link's flows move, the rates of the flows
    bottlenecked there move next, and so on along the bottlenecks.  Returns the new
    counts of the region's flows and links."""
    while n_scan < n_queue:
        k = queue[n_scan]
        n_scan += 1
        g = li[k, _BHEAD]
        while g >= 0:
            if fi[g, _ACTIVE] and fi[g, _MARK] != stamp:
                fi[g, _MARK] = stamp
                _bring(g, t, fv)
                comp[n_comp] = g
                n_comp += 1
                n_queue = _queue_links(g, stamp, fi, flow_links, li, queue, n_queue)
            g = fi[g, _BNEXT]
    return n_comp, n_queue


@_compiled
def _settle(t, stamp, n_comp, n_queue, comp, queue, fi, flow_links, li, link_flows, lv, bprev, fv,
            blinks, near, lheap, lpos, lkey, lcount, okey,
            counters):  # type: ignore[no-untyped-def]
    """New rates for the region (flows ``comp[:n_comp]``, links ``queue[:n_queue]``),
    the flows outside keeping theirs, the region grown until the allocation is the
    weighted max-min one: every active flow has a bottleneck (a full link on which no
    flow gets more per unit of weight) and no link carries more than its capacity (the
    allocation with those properties is unique).

    First the flows bottlenecked on the region's links join, and those bottlenecked on
    theirs, and so on (:func:`_close`: the event moves them).  Per round: the region's
    max-min over the capacity the flows outside leave on its flows' remembered
    bottlenecks (every link of a flow without one), not on its other links (most of
    them: a flow's bottleneck seldom moves), whose loads are then checked (from the
    kept ``_LOAD``, summed again near the capacity): one that would carry too much
    becomes a constraint, and the region is solved again.  Then every flow of the
    region is checked on the links of its solve: it has a bottleneck where it froze (or
    on another of them), or flows outside outrun it on a full link, and those join,
    with the flows bottlenecked on their links, for another round.  A region still
    growing after _MAX_ROUNDS rounds is solved as its whole contention component.
    Every link's ``_LOAD`` stays the sum of its active flows' rates: moved by the
    region's changes, set from the solve on its constraints.  Returns the region's
    final counts."""
    rounds = 0
    lo = 1.0 - _CHECK_TOL
    hi = 1.0 + _CHECK_TOL
    n_scan = 0           # queue links looked at for the flows bottlenecked on them
    n_old = 0            # region flows whose rates before the event are in rold
    while True:
        n_comp, n_queue = _close(t, stamp, n_scan, n_comp, n_queue, comp, queue, fi, flow_links, li,
                                 fv)
        n_scan = n_queue
        for i in range(n_old, n_comp):
            g = comp[i]
            fv[g, _ROLD] = fv[g, _RATE]
        n_old = n_comp
        counters[_STAMP] += 1
        check = counters[_STAMP]
        n_b = 0
        for i in range(n_comp):                  # the constraints: known bottlenecks
            g = comp[i]
            k = fi[g, _BNECK]
            if k >= 0:
                if li[k, _BMARK] != check:
                    li[k, _BMARK] = check
                    blinks[n_b] = k
                    n_b += 1
                continue
            for q in range(fi[g, _P0], fi[g, _P1]):
                k = flow_links[q]
                if li[k, _BMARK] != check:
                    li[k, _BMARK] = check
                    blinks[n_b] = k
                    n_b += 1
        while True:
            if n_b > _SCAN_LINKS:                # too many: all the region's links are
                n_b = 0
                for i in range(n_queue):
                    k = queue[i]
                    li[k, _BMARK] = check
                    blinks[n_b] = k
                    n_b += 1
            for i in range(n_b):
                k = blinks[i]
                s, top = _outside(k, stamp, li, link_flows, fi, fv)
                lv[k, _RESID] = lv[k, _CAP] - s
                lv[k, _OUTMAX] = top
            # The links' loads move by the region's changes of rate as its flows freeze;
            # a link that comes near its capacity and was no constraint is summed again.
            counters[_STAMP] += 1
            n_near = _max_min(comp, n_comp, blinks, n_b, li, check, fv, fi, flow_links, link_flows,
                              lv, lheap, lpos, lkey, lcount, okey, near, counters[_STAMP])
            over = False                         # links that carry too much: constraints
            for i in range(n_near):
                k = near[i]
                if li[k, _BMARK] != check and _load(k, li, link_flows, fi, fv) > lv[k, _CAP] * hi:
                    li[k, _BMARK] = check
                    blinks[n_b] = k
                    n_b += 1
                    over = True
            if not over:
                break
            _unload(n_comp, comp, fi, flow_links, fv, lv)
        before = n_comp
        for i in range(before):                  # the region's flows: a bottleneck each
            g = comp[i]
            mine = fv[g, _LEVEL]
            found = -1
            k = fi[g, _FZ]
            if lv[k, _LEFT] <= lv[k, _CAP] * _CHECK_TOL and \
                    mine >= max(lv[k, _OUTMAX], lv[k, _INMAX]) * lo:
                found = k
            else:
                for q in range(fi[g, _P0], fi[g, _P1]):
                    k = flow_links[q]
                    if li[k, _BMARK] == check and lv[k, _LEFT] <= lv[k, _CAP] * _CHECK_TOL and \
                            mine >= max(lv[k, _OUTMAX], lv[k, _INMAX]) * lo:
                        found = k
                        break
            if found >= 0:
                _set_bneck(g, found, fi, li, bprev)
                continue
            # Outrun on its full links by flows outside: those join.
            for q in range(fi[g, _P0], fi[g, _P1]):
                k = flow_links[q]
                if li[k, _BMARK] != check or lv[k, _OUTMAX] * lo <= mine or \
                        lv[k, _LEFT] > lv[k, _CAP] * _CHECK_TOL:
                    continue
                for p in range(li[k, _Q0], li[k, _Q1]):
                    h = link_flows[p]
                    if fi[h, _ACTIVE] and fi[h, _MARK] != stamp and fv[h, _LEVEL] * lo > mine:
                        fi[h, _MARK] = stamp
                        comp[n_comp] = h
                        n_comp += 1
        if n_comp == before:
            for i in range(n_b):                 # the constraints' loads, as solved
                k = blinks[i]
                lv[k, _LOAD] = lv[k, _CAP] - lv[k, _LEFT]
            for i in range(n_near):              # and those summed again
                k = near[i]
                if li[k, _BMARK] != check:
                    lv[k, _LOAD] = _load(k, li, link_flows, fi, fv)
            return n_comp, n_queue
        _unload(before, comp, fi, flow_links, fv, lv)
        for i in range(before, n_comp):          # the new members: brought to t
            h = comp[i]
            _bring(h, t, fv)
            n_queue = _queue_links(h, stamp, fi, flow_links, li, queue, n_queue)
        rounds += 1
        if rounds < _MAX_ROUNDS:
            continue
        # Still growing: the change reaches far; solving the whole contention component
        # at once costs less than checking again.
        n_comp, n_queue = _whole_component(t, stamp, n_comp, n_queue, comp, queue, fi, flow_links,
                                           li, link_flows, fv)
        counters[_STAMP] += 1
        check = counters[_STAMP]
        for i in range(n_queue):
            k = queue[i]
            li[k, _BMARK] = check
            s, top = _outside(k, stamp, li, link_flows, fi, fv)
            lv[k, _RESID] = lv[k, _CAP] - s
        counters[_STAMP] += 1
        _max_min(comp, n_comp, queue, n_queue, li, check, fv, fi, flow_links, link_flows, lv, lheap,
                 lpos, lkey, lcount, okey, near, counters[_STAMP])
        counters[_STAMP] += 1
        check = counters[_STAMP]
        for i in range(n_queue):                 # its loads, and its flows' bottlenecks
            k = queue[i]
            s = 0.0
            top = 0.0
            for p in range(li[k, _Q0], li[k, _Q1]):
                g = link_flows[p]
                if fi[g, _ACTIVE]:
                    s += fv[g, _RATE]
                    top = max(top, fv[g, _LEVEL])
            lv[k, _LOAD] = s
            lv[k, _OUTMAX] = top
        for i in range(n_comp):
            g = comp[i]
            found = fi[g, _FZ]
            for q in range(fi[g, _P0], fi[g, _P1]):
                k = flow_links[q]
                if lv[k, _LOAD] >= lv[k, _CAP] * lo and fv[g, _LEVEL] >= lv[k, _OUTMAX] * lo:
                    found = k
                    break
            _set_bneck(g, found, fi, li, bprev)
        return n_comp, n_queue


# --------------------------------------------------------------------------- samples


@_compiled
def _flush_link(link_rate, link_tlast, bins, row, k, t, sample_s):  # type: ignore[no-untyped-def]
    """Add link k's bytes from its last rate change to t into its sample bins (row
    ``row``; bin i holds (i s, (i+1) s]); a link not sampled (row < 0) only moves on."""
    a = link_tlast[k]
    r = link_rate[k]
    link_tlast[k] = t
    if r <= 0.0 or t <= a or row < 0:
        return
    i = int(a / sample_s)
    n = bins.shape[1]
    while i < n:
        lo = i * sample_s
        hi = lo + sample_s
        seg = min(t, hi) - max(a, lo)
        if seg > 0.0:
            bins[row, i] += r * seg
        if hi >= t:
            break
        i += 1


@_compiled
def _flush_all(link_rate, link_tlast, bins, bin_row, t, sample_s):  # type: ignore[no-untyped-def]
    if sample_s <= 0.0:
        return
    for k in range(link_rate.shape[0]):
        _flush_link(link_rate, link_tlast, bins, bin_row[k], k, t, sample_s)


# --------------------------------------------------------------------------- events


@_inlined
def _bring(f, t, fv):  # type: ignore[no-untyped-def]
    """Flow f's progress up to t at its current rate."""
    d = fv[f, _RATE] * (t - fv[f, _TLAST])
    if d > 0.0:
        fv[f, _REM] -= d
        fv[f, _SENT] += d
    fv[f, _TLAST] = t


@_inlined
def _delivered(left, nbytes):  # type: ignore[no-untyped-def]
    """``left`` bytes of a flow of ``nbytes`` per iteration are nothing left (to a
    tolerance of 1e-9 of an iteration's bytes)."""
    return left <= nbytes * _REL_TOL + 1e-6


@_inlined
def _queue_links(f, stamp, fi, flow_links, li, queue, n_queue):  # type: ignore[no-untyped-def]
    """Flow f's links not yet in the region join its queue; returns the queue's length."""
    for p in range(fi[f, _P0], fi[f, _P1]):
        k = flow_links[p]
        if li[k, _LMARK] != stamp:
            li[k, _LMARK] = stamp
            queue[n_queue] = k
            n_queue += 1
    return n_queue


@_compiled
def _whole_component(t, stamp, n_comp, n_queue, comp, queue, fi, flow_links, li, link_flows,
                     fv):  # type: ignore[no-untyped-def]
    """The region grows into its whole contention component: every active flow
    reachable from its links through shared links (brought to t).  Returns the new
    counts of the region's flows and links."""
    head = 0
    while head < n_queue:
        k = queue[head]
        head += 1
        for p in range(li[k, _Q0], li[k, _Q1]):
            h = link_flows[p]
            if not fi[h, _ACTIVE] or fi[h, _MARK] == stamp:
                continue
            fi[h, _MARK] = stamp
            _bring(h, t, fv)
            comp[n_comp] = h
            n_comp += 1
            n_queue = _queue_links(h, stamp, fi, flow_links, li, queue, n_queue)
    return n_comp, n_queue


@_compiled
def _advance(flow_job, fi, flow_links, li, link_flows, job_ptr, lv, fv, weight, phase_fraction,
             phase_compute, iterations, jitter, params, rec_start, rec_comm_start, rec_comm_end,
             rec_end, rec_phase_start, rec_phase_end, clock, counters, running, it, phase,
             communicating, busy, heap, heap_pos, heap_key, link_rate, link_tlast, bins, bin_row,
             bprev,
             refresh, seen, queue, comp, kept, jobs_todo, blinks, near, lheap, lpos, lkey, lcount,
             okey, t_stop, max_events):  # type: ignore[no-untyped-def]
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
                if fi[f, _ACTIVE]:
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
                    if not fi[f, _ACTIVE] or fi[f, _MARK] == stamp:
                        continue
                    _bring(f, t, fv)
                    if _delivered(fv[f, _REM], fv[f, _BYTES]):
                        fi[f, _MARK] = stamp
                        n_queue = _queue_links(f, stamp, fi, flow_links, li, queue, n_queue)
                        refresh[f] = False
                        fv[f, _REM] = 0.0
                        fi[f, _ACTIVE] = 0
                        for p in range(fi[f, _P0], fi[f, _P1]):
                            lv[flow_links[p], _LOAD] -= fv[f, _RATE]
                        fv[f, _RATE] = 0.0
                        _heap_set(heap, heap_pos, heap_key, counters, f, np.inf)
                        busy[flow_job[f]] -= 1
                        jobs_todo[n_todo] = flow_job[f]
                        n_todo += 1
                    elif refresh[f]:              # carried over: F as it was
                        refresh[f] = False
                        kept[n_kept] = f
                        n_kept += 1
                    else:
                        fi[f, _MARK] = stamp
                        n_queue = _queue_links(f, stamp, fi, flow_links, li, queue, n_queue)
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
                            fv[f, _SENT] = 0.0            # a new iteration: bytes_ratio from 0
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
                    r = fv[f, _BYTES] * frac
                    fv[f, _TLAST] = t
                    fv[f, _RATE] = 0.0
                    if fi[f, _P0] == fi[f, _P1]:
                        fv[f, _REM] = 0.0                 # crosses no shaped link: no constraint,
                        fv[f, _SENT] += r                 # delivered at once
                    elif not _delivered(r, fv[f, _BYTES]):
                        fv[f, _REM] = r
                        fi[f, _ACTIVE] = 1
                        busy[j] += 1
                        fi[f, _MARK] = stamp
                        comp[n_comp] = f
                        n_comp += 1
                        n_queue = _queue_links(f, stamp, fi, flow_links, li, queue, n_queue)
                    else:
                        fv[f, _REM] = 0.0
                if busy[j] == 0:
                    jobs_todo[n_todo] = j
                    n_todo += 1
            # Flows on the region's links that deliver their last bytes now too (to the
            # tolerance) stop in this event, not a fraction of a nanosecond later.
            for i in range(n_scanned, n_queue):
                k = queue[i]
                for p in range(li[k, _Q0], li[k, _Q1]):
                    g = link_flows[p]
                    if fi[g, _ACTIVE] and fi[g, _MARK] != stamp and seen[g] != stamp and \
                            _delivered(fv[g, _REM] - fv[g, _RATE] * (t - fv[g, _TLAST]),
                                       fv[g, _BYTES]):
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
                for p in range(li[k, _Q0], li[k, _Q1]):
                    h = link_flows[p]
                    if fi[h, _ACTIVE] and fi[h, _MARK] != stamp:
                        fi[h, _MARK] = stamp
                        _bring(h, t, fv)
                        comp[n_comp] = h
                        n_comp += 1
        for i in range(n_comp):
            f = comp[i]
            fv[f, _W] = weight[f] * compiled_f(fv[f, _SENT] / fv[f, _BYTES] if fv[f, _BYTES] > 0
                                          else 0.0, slope, intercept, cap)
        for i in range(n_comp):      # the neighbours' links, after the loop above
            n_queue = _queue_links(comp[i], stamp, fi, flow_links, li, queue, n_queue)
        for i in range(n_kept):
            f = kept[i]
            if fi[f, _ACTIVE] and fi[f, _MARK] != stamp:
                fi[f, _MARK] = stamp
                comp[n_comp] = f
                n_comp += 1
                n_queue = _queue_links(f, stamp, fi, flow_links, li, queue, n_queue)
        n_comp, n_queue = _settle(t, stamp, n_comp, n_queue, comp, queue, fi, flow_links, li,
                                  link_flows, lv, bprev, fv, blinks, near, lheap, lpos, lkey,
                                  lcount, okey, counters)
        counters[_RECOMPUTED] += n_comp
        for i in range(n_queue if sample_s > 0.0 else 0):   # (only samples use them)
            k = queue[i]
            _flush_link(link_rate, link_tlast, bins, bin_row[k], k, t, sample_s)
            total = 0.0
            for p in range(li[k, _Q0], li[k, _Q1]):
                f = link_flows[p]
                if fi[f, _ACTIVE]:
                    total += fv[f, _RATE]
            link_rate[k] = total
        for i in range(n_comp):
            f = comp[i]
            r = fv[f, _RATE]
            key = np.inf
            if r > 0.0:
                key = t + fv[f, _REM] / r
                if mltcp and f_steps > 0:
                    step = fv[f, _BYTES] / f_steps
                    mark = (math.floor(fv[f, _SENT] / step + 1e-9) + 1.0) * step
                    key = min(key, t + (mark - fv[f, _SENT]) / r)
                if key <= t:
                    # Hours into a run, a flow's last fraction of a byte (or of a step to
                    # its F mark) can take less than the clock's resolution at t: the
                    # event would come back at t with nothing moved, forever.  The next
                    # representable instant moves it (rate x one ulp >= what is left).
                    key = np.nextafter(t, np.inf)
            _heap_set(heap, heap_pos, heap_key, counters, f, key)
        if job_done and params[5] > 0.0:
            return JOB_DONE


# --------------------------------------------------------------------------- compiling

# What compiling the whole engine takes (numba's cache empty), about: 30 s on the 2-core
# development machine.  Said before it starts, so that a first command does not look hung.
COMPILE_S = 30


class _CompileNotice(numba_event.Listener):
    """One line on stderr when numba starts compiling the engine, and one with the time
    it took when it is done, only then: numba fires its "numba:compile" event only where
    its cache had no entry for the function and argument types (a cache hit loads the
    machine code and fires none).  Compiling a function compiles the functions it calls
    that are not cached, each an event of its own inside the first: the lines go with
    the outermost.  While :func:`ensure_compiled` warms the engine up, its compiles are
    one, so a first command says so once."""

    def __init__(self) -> None:
        self.depth = 0
        self.began: float | None = None
        self.held = False           # ensure_compiled's warm-up: one notice for all of it

    def on_start(self, event: Any) -> None:
        if not _ours(event):
            return
        self.depth += 1
        if self.began is None:
            self.began = time.monotonic()
            console.line(f"compiling the fluid engine (once per installation, ~{COMPILE_S} s)...")

    def on_end(self, event: Any) -> None:
        if not _ours(event):
            return
        self.depth -= 1
        if not self.depth and not self.held:
            self.finish(failed=event.is_failed)

    def finish(self, failed: bool = False) -> None:
        """The line that ends a notice (none where nothing compiled or it failed)."""
        if self.began is not None and not failed:
            console.line(f"compiled the fluid engine in {time.monotonic() - self.began:.0f} s")
        self.began = None


def _ours(event: Any) -> bool:
    """Whether a compile event is of one of the engine's functions."""
    data = event.data
    return isinstance(data, dict) and data.get("dispatcher") in _ENGINE


_NOTICE = _CompileNotice()
numba_event.register("numba:compile", _NOTICE)
_warm = False


def ensure_compiled() -> None:
    """Every compiled function the engine's calls use, ready: loaded from numba's cache
    or, on a miss (a new installation, a changed source, another CPU), compiled now, with
    one line on stderr before and one after (:class:`_CompileNotice`).  Once per process,
    on the first state made (:func:`new_state`, :func:`weighted_max_min`); a caller that
    starts worker processes calls it first, so that they load the engine rather than all
    compile it at once.  The warm-up is a run of two jobs that goes through every call a
    wing makes, with the argument types the wings give."""
    global _warm
    if _warm:
        return
    _warm = True                    # the warm-up's own states come back here
    _NOTICE.held = True
    ok = False
    try:
        _warm_up()
        ok = True
    finally:
        _NOTICE.held = False
        _NOTICE.finish(failed=not ok)
        _warm = ok


def _warm_up() -> None:
    flow_links = [[0, 1], [1]]
    capacity = np.array([1e6, 1e6])

    def state(**extra: Any) -> EngineState:
        return new_state(np.array([0, 1]), flow_links, capacity, np.array([1e4, 1e4]),
                         np.ones(2), np.ones((2, 1)), np.full((2, 1), 0.01),
                         np.array([2, 2]), np.zeros(2), np.zeros((2, 2)), 1.0, 1.0, 2.0, 4,
                         0.005, **extra)

    first = state()
    advance_until(first, 0.015, 1_000)         # both jobs communicate at 0.015 s
    delay_next_comm(first, 0, 0.001)
    second = state(ring=2, stop_on_job_done=True)
    carry_over(first, second, [(0, 0), (1, 1)], first.t)
    advance_until(second, math.inf, 1_000)
    finish_bins(second)
    weighted_max_min(np.ones(2), flow_links, capacity)
