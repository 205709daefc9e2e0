"""DCQCN, time-stepped and vectorised: reaction points, notification points, ECN switches.

Why a model: the tuner (:mod:`mltcp.host.dcqcn.tuner`) rewrites a NIC's rate-increase knobs by
F(bytes_ratio), and whether that makes training jobs interleave on RoCE cannot be
checked without ConnectX NICs and a switch.  This model runs the same knob values
(:mod:`mltcp.lab.models.dcqcn.params`) through DCQCN as the DCQCN paper (Zhu et al.,
SIGCOMM'15) describes it and as the mlx5 knobs parameterise it.

Reaction point (RP, the sender's NIC), per flow (one queue pair):

* rates: current ``rc`` and target ``rt``.  A flow that never saw a CNP, or whose rate
  climbed back to ``rpg_max_rate`` (0: line rate), is *not rate limited* and sends at
  line rate;
* the first CNP of a flow that is not rate limited sets alpha to
  ``initial_alpha_value`` / 1024 and the rate to ``rate_to_set_on_first_cnp``
  (0: leaves it at line rate), without a cut, and starts the flow's DCQCN timers;
* alpha, every ``dce_tcp_rtt``: ``alpha = g * alpha + (1 - g) * [a CNP arrived]``,
  ``g = dce_tcp_g / 1024``;
* every ``rate_reduce_monitor_period``, if a CNP arrived since the last check: the
  target is clamped to the current rate when ``clamp_tgt_rate`` is set or the flow
  increased since its last cut (by the byte counter, or by the timer with
  ``clamp_tgt_rate_after_time_inc``), then
  ``rc *= 1 - min(alpha * 1024 / 2^rpg_gd, rpg_min_dec_fac / 100)`` (alpha / 2 at the
  default rpg_gd = 11, at most half at the default rpg_min_dec_fac = 50), floored at
  ``rpg_min_rate``; the increase counters and timers restart;
* rate-increase events come from the timer (every ``rpg_time_reset``) and the byte
  counter (every ``rpg_byte_reset`` bytes sent; 0: off), counted per source since the
  last cut (T and B).  While both counts are below ``rpg_threshold`` an event is *fast
  recovery* (``rc = (rt + rc) / 2``); once one reached it, *additive increase*
  (``rt += AI`` first); once both exceed it, *hyper increase* (``rt += HAI * i``,
  ``i = min(T, B) - rpg_threshold``); ``rt`` is capped at line rate.  AI, HAI and the
  timer are per flow: that is where MLTCP's F enters (:meth:`DcqcnModel.set_increase`).

Notification point (NP, the receiver): a CNP for a flow when a marked packet of it
arrives, at most one per ``min_time_between_cnps``; it reaches the RP one feedback
delay later (the path's round trip by default).

Switch: per directed link, a fluid FIFO holding each flow's bytes, served at the
link's rate (flows share the service in proportion to their queued bytes), RED-ECN
marking from the queue (Kmin/Kmax/Pmax; at dequeue, so the feedback delay is the base
round trip), tail drop when the buffer overflows.  A flow crossing several links
reaches the next one a step after leaving the previous one.  PFC is out of scope: a
lossless fabric would pause senders instead of dropping, and nothing here models pause
frames; dropped bytes are sent again, without a NIC's go-back-N or timeout.

Simplifications, on purpose: marks are drawn per step (the chance that the packets a
flow delivered in the step, a Poisson stream, held a marked one) from generators keyed by (seed,
block of steps), so a run's randomness does not depend on the other runs of its
batch; at most one CNP per flow per step (pacing of 2 us allows two in a 4 us step,
so at high rates alpha can grow a little slower than on a NIC); rates are fluid and
a flow leaves rate limiting within 1 Mb/s (the knobs' resolution) of its maximum.

Many independent runs advance together as *lanes* (first axis of the arrays), like
:mod:`mltcp.lab.scenario.batched.fluid`: each lane has its own clock, and a lane with
nothing in flight can jump over a compute phase in closed form (:meth:`DcqcnModel.idle`).  Every
lane of a
model routes its flows alike (one incidence matrix; the jobs layer batches runs with
different ECMP paths separately), which turns every per-link sum into one matrix
product.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from mltcp.core.errors import SpecError
from mltcp.lab.models.dcqcn.params import MBPS, US, ModelParams

_RELEASE_BPS = 1 * MBPS      # within one Mb/s of the maximum the rate limiter is released
_TINY = 1e-30
_nz = np.count_nonzero   # ~4x cheaper than ndarray.any() on the small arrays of a step


@dataclass
class Fabric:
    """The static network of L lanes: F flows (queue pairs) over K directed links.

    ``paths[f]``: the links flow f crosses, in order (the same in every lane).  Rates
    are wire bytes per second; ``line_Bps`` is each flow's NIC line rate.
    """

    paths: Sequence[Sequence[int]]
    capacity_Bps: np.ndarray      # (L, K)
    buffer_bytes: np.ndarray      # (L, K)
    line_Bps: np.ndarray          # (L, F)
    seed: np.ndarray              # (L,) int
    marking: np.ndarray | None = None   # (K,) False: a link that never marks (a NIC)

    def __post_init__(self) -> None:
        self.paths = [list(p) for p in self.paths]
        n_links = self.capacity_Bps.shape[1] if np.ndim(self.capacity_Bps) == 2 else 0
        self.marking = (np.ones(n_links, dtype=bool) if self.marking is None
                        else np.asarray(self.marking, dtype=bool))
        self.capacity_Bps = np.asarray(self.capacity_Bps, dtype=float)
        self.buffer_bytes = np.asarray(self.buffer_bytes, dtype=float)
        self.line_Bps = np.asarray(self.line_Bps, dtype=float)
        self.seed = np.asarray(self.seed, dtype=np.int64)
        n_lanes, n_links = self.capacity_Bps.shape
        n_flows = len(self.paths)
        want = {"buffer_bytes": (n_lanes, n_links), "line_Bps": (n_lanes, n_flows),
                "seed": (n_lanes,), "marking": (n_links,)}
        for name, shape in want.items():
            if getattr(self, name).shape != shape:
                raise SpecError(f"fabric.{name}", f"shape {getattr(self, name).shape}",
                                f"give shape {shape}")
        if (self.capacity_Bps <= 0).any() or (self.line_Bps <= 0).any():
            raise SpecError("fabric.capacity_Bps", "a link or NIC has no capacity",
                            "give every link and NIC a rate > 0")
        for f, links in enumerate(self.paths):
            if not links or len(set(links)) != len(links) \
                    or not all(0 <= k < n_links for k in links):
                raise SpecError(f"fabric.paths[{f}]", f"{links} is not a loop-free path over "
                                f"links 0..{n_links - 1}", "give every flow its links in order")

    @property
    def lanes(self) -> int:
        return self.capacity_Bps.shape[0]


class _Segments:
    """(flow, link) pairs, one per hop: the unit the switch queues bytes in."""

    def __init__(self, paths: list[list[int]], n_links: int) -> None:
        flow, link, prev, last = [], [], [], []
        for f, links in enumerate(paths):
            for i, k in enumerate(links):
                flow.append(f)
                link.append(k)
                prev.append(len(flow) - 2 if i else -1)
                last.append(i == len(links) - 1)
        n_seg, n_flows = len(flow), len(paths)
        self.count = n_seg
        # One link per flow: segment s is flow s, and the flow-segment maps are identities.
        self.multihop = n_seg > n_flows
        self.on_link = np.zeros((n_seg, n_links))         # segment -> its link
        self.on_link[np.arange(n_seg), link] = 1.0
        self.to_seg = self.on_link.T.copy()               # link -> its segments
        self.owner = np.zeros((n_seg, n_flows))           # segment -> its flow
        self.owner[np.arange(n_seg), flow] = 1.0
        self.first = np.zeros((n_flows, n_seg))           # flow -> its first segment
        self.last = np.zeros((n_seg, n_flows))            # last segment -> its flow
        for s in range(n_seg):
            if prev[s] < 0:
                self.first[flow[s], s] = 1.0
            if last[s]:
                self.last[s, flow[s]] = 1.0
        self.prev = np.maximum(np.array(prev), 0)
        self.has_prev = np.array(prev) >= 0
        self.not_last = ~np.array(last)
        self.path = np.zeros((n_links, n_flows))          # link -> flows crossing it
        self.path[link, flow] = 1.0


class _Uniforms:
    """Uniform draws per (lane, step, flow), from one generator per lane and block of
    steps, keyed by (seed, block): a lane draws the same numbers whatever other lanes
    share its batch, at the cost of one array slice per step."""

    BLOCK = 4096

    def __init__(self, seeds: np.ndarray, n_flows: int) -> None:
        self.seeds = [int(s) for s in seeds]
        self.n_flows = n_flows
        self.block_no = -1
        self.block = np.empty((len(self.seeds), self.BLOCK, n_flows))

    def at(self, step: int) -> np.ndarray:
        """(L, F) draws of global step ``step``."""
        block_no, i = divmod(step, self.BLOCK)
        if block_no != self.block_no:
            for lane, seed in enumerate(self.seeds):
                rng = np.random.default_rng(np.random.SeedSequence([seed, block_no, 0xDC]))
                self.block[lane] = rng.random((self.BLOCK, self.n_flows))
            self.block_no = block_no
        return self.block[:, i]


class DcqcnModel:
    """The state of every flow, link and CNP in flight, and the step that moves it.

    Units: seconds, wire bytes, bytes per second.  Per lane: ``t`` (its clock); per
    flow: ``rc``, ``rt``, ``alpha``, ``limited``; per link: ``queue`` and the cumulative
    ``link_bytes``, ``link_marks`` (marked packets) and ``link_drops`` (dropped packets)
    the traces sample.  A lane's random draws follow the global step count: every lane
    not paused steps at every step, so they are the same whatever its batch.
    """

    def __init__(self, fabric: Fabric, params: ModelParams) -> None:
        self.fabric, self.params = fabric, params
        n_lanes, n_flows = fabric.line_Bps.shape
        kn = params.all_knobs
        self.dt = params.step
        self.pkt = float(params.packet_bytes)
        self.seg = seg = _Segments(fabric.paths, fabric.capacity_Bps.shape[1])
        # -- RP constants
        self.g = kn["dce_tcp_g"] / 1024
        self.alpha_period = kn["dce_tcp_rtt"] * US
        self.alpha0 = kn["initial_alpha_value"] / 1024
        self.cut_per_alpha = 1024 / 2.0 ** kn["rpg_gd"]
        self.max_cut = kn["rpg_min_dec_fac"] / 100
        self.min_rate = kn["rpg_min_rate"] * MBPS
        self.first_rate = kn["rate_to_set_on_first_cnp"] * MBPS
        self.threshold = kn["rpg_threshold"]
        self.hai_linear = params.hyper_increase == "linear"
        self.byte_counter = kn["rpg_byte_reset"] > 0   # 0 turns it off for every flow
        self.monitor_every = max(1, int(round(kn["rate_reduce_monitor_period"] * US / self.dt)))
        self.cnp_gap = kn["min_time_between_cnps"] * US
        self.clamp = bool(kn["clamp_tgt_rate"])
        self.clamp_ati = bool(kn["clamp_tgt_rate_after_time_inc"])
        self.line = fabric.line_Bps
        self.max_rate = (np.minimum(kn["rpg_max_rate"] * MBPS, self.line) if kn["rpg_max_rate"]
                         else self.line.copy())
        self.decay = self.g ** (self.dt / self.alpha_period)
        # -- switch constants
        self.cap_dt = fabric.capacity_Bps * self.dt
        kmin, kmax = params.marking.thresholds(fabric.capacity_Bps * 8, self.pkt)
        self.kmin = np.where(fabric.marking, kmin, np.inf)
        self.kmax = np.where(fabric.marking, kmax, np.inf)
        self.ramp = params.marking.pmax / (kmax - kmin)
        self.buffer = fabric.buffer_bytes
        hops = np.array([len(p) for p in fabric.paths])
        delay = (np.full(n_flows, params.feedback_delay_s) if params.feedback_delay_s
                 is not None else 2 * params.link_delay_s * hops)
        self.delay_steps = np.maximum(np.rint(delay / self.dt).astype(int), 1)
        self.ring_len = int(self.delay_steps.max()) + 1
        # -- per-flow knobs MLTCP scales; the jobs layer sets them
        self.ai = np.full((n_lanes, n_flows), kn["rpg_ai_rate"] * MBPS)
        self.hai = np.full((n_lanes, n_flows), kn["rpg_hai_rate"] * MBPS)
        # The rate-increase timer counts whole nanoseconds (in floats, exact to 2^53 ns):
        # a 300 us timer fires after exactly 75 steps of 4 us, never one step late
        # because 75 additions of 4e-6 s fall short of 3e-4 s.
        self.dt_ns = float(round(self.dt * 1e9))
        self.timer = np.full((n_lanes, n_flows), kn["rpg_time_reset"] * 1000.0)
        self.byte_reset = np.full((n_lanes, n_flows), float(kn["rpg_byte_reset"]))
        # -- RP state
        self.rc = self.line.copy()
        self.rt = self.line.copy()
        self.alpha = np.full((n_lanes, n_flows), self.alpha0)
        self.limited = np.zeros((n_lanes, n_flows), dtype=bool)
        self.cnp_flag = np.zeros((n_lanes, n_flows), dtype=bool)
        # The increase counters and timers live in one array so that a restart is one
        # operation; the names are views into it (only ever updated in place).
        self._ctr = np.zeros((n_lanes, n_flows, 4))
        self.t_count = self._ctr[:, :, 0]     # timer events since the last cut
        self.b_count = self._ctr[:, :, 1]     # byte-counter events since the last cut
        self.timer_acc = self._ctr[:, :, 2]   # ns since the last timer event
        self.byte_acc = self._ctr[:, :, 3]    # bytes since the last byte-counter event
        # -- NP, and the CNPs in flight: ring[:, slot] holds those arriving at that step
        self.last_cnp = np.full((n_lanes, n_flows), -np.inf)
        self.ring = np.zeros((n_lanes, self.ring_len, n_flows), dtype=bool)
        self.in_flight = 0                                      # CNPs in the ring
        self.steps = 0
        self.t = np.zeros(n_lanes)                              # seconds, per lane
        self.uniforms = _Uniforms(fabric.seed, n_flows)
        # -- switch state
        self.queue_s = np.zeros((n_lanes, seg.count))           # bytes per segment
        self.depart_s = np.zeros((n_lanes, seg.count))          # left it last step
        self.queue = np.zeros_like(self.cap_dt)                 # (L, K) bytes per link
        self._no_drops = np.zeros((n_lanes, n_flows))       # read-only
        # -- cumulative counters
        self.link_bytes = np.zeros_like(self.cap_dt)
        self._marked_bytes = np.zeros_like(self.cap_dt)
        self.link_drops = np.zeros_like(self.cap_dt)
        self.flow_bytes = np.zeros((n_lanes, n_flows))          # delivered
        self.cnps = np.zeros((n_lanes, n_flows))
        # per flow: rate cuts, and increase events by stage (what F can and cannot reach)
        self.events = {name: np.zeros((n_lanes, n_flows)) for name in ("cut", "additive", "hyper")}
        self._increases = np.zeros((n_lanes, n_flows))

    # ------------------------------------------------------------------ queries

    def event_counts(self) -> dict[str, np.ndarray]:
        """(L, F) per kind: rate cuts, and increase events by stage (fast recovery,
        additive, hyper): what F can reach (AI/HAI steps in rates mode, the number of
        events in timer mode) and what it cannot."""
        fr = self._increases - self.events["additive"] - self.events["hyper"]
        return {"cut": self.events["cut"].copy(), "fast_recovery": fr,
                "additive": self.events["additive"].copy(), "hyper": self.events["hyper"].copy()}

    @property
    def link_marks(self) -> np.ndarray:
        """(L, K) packets marked so far (expected count: marks are a probability)."""
        return self._marked_bytes / self.pkt

    def quiet(self) -> np.ndarray:
        """(L,) lanes where nothing is in flight: no queued or travelling bytes, no CNP
        on its way or waiting for the RP's next check.  Such a lane can :meth:`idle`."""
        busy = (self.queue_s > 0).any(axis=1) | self.cnp_flag.any(axis=1)
        if self.in_flight:
            busy |= self.ring.any(axis=(1, 2))
        if self.seg.multihop:
            busy |= (self.depart_s > 0).any(axis=1)
        return ~busy

    def set_increase(self, ai_mbps: np.ndarray, hai_mbps: np.ndarray,
                     time_reset_us: np.ndarray, byte_reset: np.ndarray | None = None,
                     where: np.ndarray | None = None) -> None:
        """Install per-flow rate-increase knobs (what the tuner writes), (L, F) each, for
        the flows in ``where`` (default: all).  A new timer period or byte count applies
        from the running counter's next check; ``byte_reset`` None leaves the byte counts, and
        a byte counter that the knobs turned off (0) stays off."""
        if where is None:
            where = np.ones(self.ai.shape, dtype=bool)
        self.ai = np.where(where, np.asarray(ai_mbps, dtype=float) * MBPS, self.ai)
        self.hai = np.where(where, np.asarray(hai_mbps, dtype=float) * MBPS, self.hai)
        self.timer = np.where(where, np.asarray(time_reset_us, dtype=float) * 1000.0,
                              self.timer)
        if byte_reset is not None and self.byte_counter:
            self.byte_reset = np.where(where, np.maximum(np.asarray(byte_reset, dtype=float),
                                                         1.0), self.byte_reset)

    def flush(self, flows: np.ndarray) -> None:
        """Count what is left of ``flows`` (L, F) in the queues as delivered: the jobs
        layer ends a phase when less than half a packet of it is left, which the
        model's proportional service would otherwise drain only asymptotically."""
        segs = (flows.astype(float) @ self.seg.owner.T) > 0
        left = np.where(segs, self.queue_s + self.depart_s, 0.0)
        if not left.any():
            return
        self.flow_bytes += left @ self.seg.owner
        self.queue_s = np.where(segs, 0.0, self.queue_s)
        self.depart_s = np.where(segs, 0.0, self.depart_s)
        self.queue = self.queue_s @ self.seg.on_link

    # ------------------------------------------------------------------ the step

    def step(self, want: np.ndarray, active: np.ndarray | None = None) -> tuple[
            np.ndarray, np.ndarray, np.ndarray]:
        """Advance the lanes in ``active`` (default: all) by one step.

        ``want`` (L, F): wire bytes each flow still has to send (>= 0); a flow sends at
        most its current rate's worth.  Lanes not ``active`` must be :meth:`quiet`;
        they do not move.  Returns (sent, delivered, dropped) wire bytes per flow.
        """
        gate: np.ndarray | None = None
        if active is None:
            dt: float | np.ndarray = self.dt
        else:
            gate = active[:, None].astype(float)
            dt = self.dt * gate
        sent = np.minimum(self.rc * dt, want)
        delivered, dropped, p_link = self._switch(sent, gate)
        self._notify(delivered, p_link, active)
        self._react(sent, dt, active)
        self.steps += 1
        self.t += dt if active is None else dt[:, 0]
        self.flow_bytes += delivered
        return sent, delivered, dropped

    def _switch(self, sent: np.ndarray, gate: np.ndarray | None
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
        """Queues: arrivals, service, drops, marking.  Returns (delivered, dropped per
        flow, marking probability per link or None when no queue is above Kmin)."""
        seg = self.seg
        if seg.multihop:
            arrive = sent @ seg.first + self.depart_s[:, seg.prev] * seg.has_prev
        else:
            arrive = sent
        q_link = self.queue
        p = None
        if _nz(q_link > self.kmin):
            p = np.minimum((q_link - self.kmin) * self.ramp, 1.0)
            np.maximum(p, 0.0, out=p)
            p[q_link > self.kmax] = 1.0
        content = self.queue_s + arrive
        total = content @ seg.on_link                               # (L, K)
        served_k = np.minimum(self.cap_dt if gate is None else self.cap_dt * gate, total)
        served = content * ((served_k / np.maximum(total, _TINY)) @ seg.to_seg)
        self.queue_s = content - served
        self.queue = total - served_k
        dropped = None
        if _nz(self.queue > self.buffer):
            excess = np.maximum(self.queue - self.buffer, 0.0)
            arr_k = arrive @ seg.on_link
            frac = np.minimum(excess / np.maximum(arr_k, _TINY), 1.0)
            lost = arrive * (frac @ seg.to_seg)
            self.queue_s = np.maximum(self.queue_s - lost, 0.0)
            self.queue = self.queue_s @ seg.on_link
            self.link_drops += (lost @ seg.on_link) / self.pkt
            dropped = lost @ seg.owner
        if seg.multihop:
            self.depart_s = served * seg.not_last
            delivered = served @ seg.last
        else:
            delivered = served
        self.link_bytes += served_k
        if p is not None:
            self._marked_bytes += served_k * p
        return delivered, (self._no_drops if dropped is None else dropped), p

    def _notify(self, delivered: np.ndarray, p_link: np.ndarray | None,
                active: np.ndarray | None) -> None:
        """NP: a CNP when a delivered packet carries a mark (paced); into the ring."""
        slot = self.steps % self.ring_len
        if self.in_flight:
            self._arrived = self.ring[:, slot].copy()
            self.ring[:, slot] = False
            self.in_flight -= int(np.count_nonzero(self._arrived))
        else:
            self._arrived = None
        if p_link is None:
            return
        if self.seg.multihop:       # a packet is marked if any of its links marks it
            p_flow = -np.expm1(np.log(np.maximum(1.0 - p_link, 1e-300)) @ self.seg.path)
        else:
            p_flow = p_link @ self.seg.path
        # Marked packets as a Poisson stream of mean (packets delivered) x p: with less
        # than one packet per step, a step holds a marked packet only that often.
        chance = -np.expm1(-(delivered * (1.0 / self.pkt)) * p_flow)
        gen = self.uniforms.at(self.steps) < chance
        if active is not None:
            gen &= active[:, None]
        if self.cnp_gap > self.dt:
            gen &= self.t[:, None] - self.last_cnp >= self.cnp_gap - 1e-12
        if _nz(gen):
            lanes, flows = np.nonzero(gen)
            if self.cnp_gap > self.dt:
                self.last_cnp[lanes, flows] = self.t[lanes]
            self.cnps += gen
            self.ring[lanes, (self.steps + self.delay_steps[flows]) % self.ring_len,
                      flows] = True
            self.in_flight += len(lanes)

    def _react(self, sent: np.ndarray, dt: float | np.ndarray,
               active: np.ndarray | None) -> None:
        """RP: first CNPs, alpha, the periodic decrease check, the increase events."""
        if active is None:
            self.alpha *= self.decay
        else:
            self.alpha *= self.g ** (dt / self.alpha_period)
        cnp = self._arrived
        if cnp is not None and _nz(cnp):
            first = cnp & ~self.limited
            later = cnp & self.limited
            if _nz(first):
                self.limited |= first
                self.alpha[first] = self.alpha0
                if self.first_rate:
                    rate = np.minimum(self.first_rate, self.line)
                    self.rc[first] = rate[first]
                    self.rt[first] = rate[first]
                self._restart(first)
            self.alpha += (1 - self.g) * later
            self.cnp_flag |= later
        if self.steps % self.monitor_every == self.monitor_every - 1 and _nz(self.cnp_flag):
            cut = self.cnp_flag.copy() if active is None else self.cnp_flag & active[:, None]
            self._cut(cut)
        self.timer_acc += self.dt_ns if active is None else self.dt_ns * active[:, None]
        self.byte_acc += sent
        due = self.timer_acc >= self.timer
        if self.byte_counter:
            due |= self.byte_acc >= self.byte_reset
        due &= self.limited
        if _nz(due):
            self._increase()

    def _restart(self, mask: np.ndarray) -> None:
        """Restart the increase counters and timers of the flows in ``mask``."""
        self._ctr *= ~mask[:, :, None]

    def _cut(self, cut: np.ndarray) -> None:
        if self.clamp:
            clamp = cut
        else:
            clamp = self.b_count > 0
            if self.clamp_ati:
                clamp |= self.t_count > 0
            clamp &= cut
        self.rt = np.where(clamp, self.rc, self.rt)
        frac = np.minimum(self.alpha * self.cut_per_alpha, self.max_cut)
        self.rc = np.where(cut, np.maximum(self.rc * (1 - frac), self.min_rate), self.rc)
        self.cnp_flag &= ~cut
        self.events["cut"] += cut
        self._restart(cut)

    def _increase(self) -> None:
        """Every increase event due, one per flow per pass (timer events first)."""
        # Exactly the test of _react (acc >= period <=> floor(acc / period) >= 1), with no
        # tolerance: a lane's events must not depend on whether another lane had one.
        lim = self.limited
        n_t = np.floor(self.timer_acc / self.timer) * lim
        self.timer_acc -= n_t * self.timer
        if self.byte_counter:
            n_b = np.floor(self.byte_acc / self.byte_reset) * lim
            self.byte_acc -= n_b * self.byte_reset
        else:
            n_b = np.zeros_like(n_t)
        # Flows not rate limited keep their counters at 0: nothing to recover.
        self._ctr *= lim[:, :, None]
        thr = self.threshold
        while True:
            ev_t = n_t > 0
            ev_b = ~ev_t & (n_b > 0)
            ev = ev_t | ev_b
            if not _nz(ev):
                return
            lo = np.minimum(self.t_count, self.b_count)
            hyper = ev & (lo > thr)
            additive = ev & ~hyper & (np.maximum(self.t_count, self.b_count) >= thr)
            step_hai = self.hai * (lo - thr) if self.hai_linear else self.hai
            rt = self.rt + hyper * step_hai + additive * self.ai
            self.rt = np.minimum(rt, self.line)
            self.rc = np.where(ev, (self.rc + self.rt) / 2, self.rc)
            self._increases += ev
            self.events["hyper"] += hyper
            self.events["additive"] += additive
            self.t_count += ev_t
            self.b_count += ev_b
            n_t = n_t - ev_t
            n_b = n_b - ev_b
            released = ev & (self.rc >= self.max_rate - _RELEASE_BPS)
            if _nz(released):
                self._release(released)
                n_t = n_t * ~released
                n_b = n_b * ~released

    def _release(self, mask: np.ndarray) -> None:
        """The rate climbed back to the maximum: the flow is no longer rate limited."""
        self.limited &= ~mask
        self.rc = np.where(mask, self.line, self.rc)
        self.rt = np.where(mask, self.line, self.rt)
        self.cnp_flag &= ~mask
        self._restart(mask)

    # ------------------------------------------------------------------ idle lanes

    def idle(self, lanes: np.ndarray, duration: np.ndarray) -> None:
        """Jump the ``lanes`` (which must be :meth:`quiet`, and send nothing meanwhile)
        ``duration`` seconds ahead: alpha decays and the timer's increase events happen
        as they would step by step, at a cost that does not grow with the duration."""
        if not lanes.any():
            return
        if (lanes & ~self.quiet()).any():
            raise SpecError("lanes", "a lane with bytes or CNPs in flight cannot jump",
                            "step it until DcqcnModel.quiet() says so")
        d = np.where(lanes, np.maximum(duration, 0.0), 0.0)[:, None]
        self.alpha *= self.g ** (d / self.alpha_period)
        self.timer_acc += np.rint(d * 1e9)
        self._increase()
        self.t += d[:, 0]
