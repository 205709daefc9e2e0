"""Reference iteration tracker: where in its training iteration a job is, per ACK.

The eBPF program mirrors :meth:`IterationTracker.on_ack` and
:meth:`IterationTracker.on_tx_start` operation for operation, so
this module is the executable specification of the kernel's per-job state machine.

An iteration ends at a *boundary*, which has three sources:

1. **Budget wrap.** ``bytes_in_iter`` reaches the budget: the iteration's data is out,
   so the iteration counter advances and the excess carries into the next iteration.
2. **Idle gap.** A connection of the job starts sending again after it had nothing
   outstanding (the kernel's CA_EVENT_TX_START with packets_out == 0), and the job
   has seen no ACK and no such start for more than ``gap_ns``: the job was computing,
   so whatever it sent since the last boundary was one iteration. This resynchronises
   the tracker when the budget is slightly wrong or unknown (budget 0, learning mode).
   Detecting the gap at the restart of sending, not at the first ACK after a silence,
   keeps loss stalls (an RTO leaves packets outstanding) from looking like compute
   phases, and the restart itself counts as activity, so the job's other connections
   starting a moment later do not add boundaries.
3. **Explicit signal.** The training loop bumps a per-job sequence number (via a map)
   when an iteration's communication is over; any change is a boundary at the job's
   next restart of sending (the TX_START above, also without an idle gap).  Not at the
   next ACK: when the loop learns that its collective completed, its own last segments
   can still be unacknowledged, and a boundary there would cut off that tail (measured
   on DDP: up to ~0.5 MB early, and now and then the tail counted as an iteration).
   Back-to-back iterations whose connections never go idle keep the signal pending;
   the budget wrap still ends their iterations.  A job that signals (``signals``, the
   kernel config's ``MLTCP_JOB_SIGNALS``: declared at attach, or set by the control
   plane at its first signal) takes its boundaries from the signal alone: the idle-gap
   rule (2.) is off for it, so a pause longer than the gap inside its communication
   (DDP waiting for the backward pass between gradient buckets) does not split the
   iteration.  The budget wrap (1.) stays as the safety net for a missed signal.

A gap/signal boundary after a wrap usually finds only a small tail (the budget was a
little low, or headers/rounding differ). Tails of at most ``budget >> tail_shift``
(budget/16 by default) belong to the iteration the wrap already counted, so a budget
up to ~6 % low still counts exactly one iteration per real iteration.

``history`` records the bytes between gap/signal boundaries, not between wraps: these
are the real per-iteration byte counts that :class:`mltcp.core.budget.BudgetLearner`
learns the budget from.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from mltcp.core import validate
from mltcp.core.aggressiveness import FP_ONE, MAX_BUDGET_BYTES, FixedAggressiveness
from mltcp.core.errors import SpecError

HISTORY_LEN = 8
MAX_TAIL_SHIFT = 32


@dataclass
class JobTrackerState:
    """Per-job state, field for field the kernel map value (history is its ring)."""

    bytes_in_iter: int = 0
    bytes_since_gap: int = 0
    iteration: int = 0
    last_ack_ns: int = 0
    last_iter_bytes: int = 0
    total_bytes: int = 0
    signal_seen: int = 0
    f_fp: int = FP_ONE
    history: list[int] = field(default_factory=list)


def _check_budget(budget: int) -> int:
    validate.at_least(budget, "budget", 0, "pass bytes, e.g. 10000000, or 0 to learn it")
    if budget > MAX_BUDGET_BYTES:
        raise SpecError(
            "budget", f"must be in [0, {MAX_BUDGET_BYTES}] (got {budget})",
            "use 0 to learn the budget, or at most 1 TiB",
        )
    return budget


class IterationTracker:
    """Tracks one job's iteration progress and the F it should apply to each ACK."""

    def __init__(
        self, budget: int, gap_ns: int, agg: FixedAggressiveness, tail_shift: int = 4,
        signals: bool = False,
    ) -> None:
        self._budget = _check_budget(budget)
        validate.at_least(gap_ns, "gap_ns", 1,
                          "use a gap shorter than the compute phase, e.g. 5000000 (5 ms)")
        if not isinstance(agg, FixedAggressiveness):
            raise SpecError(
                "agg", f"must be a FixedAggressiveness (got {type(agg).__name__})",
                "pass Aggressiveness(...).to_fixed()",
            )
        validate.integer(tail_shift, "tail_shift", 0, MAX_TAIL_SHIFT,
                         "4 (tails up to budget/16 are tolerated)")
        self.gap_ns = gap_ns
        self.agg = agg
        self.tail_shift = tail_shift
        self.signals = bool(signals)   # the config's MLTCP_JOB_SIGNALS: no gap boundaries
        self.state = JobTrackerState()

    @property
    def budget(self) -> int:
        """Bytes per iteration; 0 means unknown (learning), in which case F is 1."""
        return self._budget

    def set_budget(self, budget: int) -> None:
        """Install a new (e.g. learned) budget; takes effect from the next ACK.

        The state is left alone, as the kernel does when userspace rewrites the map:
        if ``bytes_in_iter`` already exceeds the new budget, the next ACK wraps.
        """
        self._budget = _check_budget(budget)

    @property
    def bytes_ratio(self) -> float:
        """Fraction of the budget sent this iteration (0.0 while the budget is unknown)."""
        return self.state.bytes_in_iter / self._budget if self._budget else 0.0

    def _boundary(self) -> None:
        """End the current iteration (idle gap or explicit signal)."""
        st = self.state
        if st.bytes_since_gap > 0:
            st.history.append(st.bytes_since_gap)
            del st.history[:-HISTORY_LEN]
            st.last_iter_bytes = st.bytes_since_gap
        if st.bytes_in_iter > (self._budget >> self.tail_shift):
            st.iteration += 1
        # else: a small tail after a wrap belongs to the iteration already counted
        st.bytes_in_iter = 0
        st.bytes_since_gap = 0

    def on_tx_start(self, now_ns: int, packets_out: int = 0, signal_seq: int | None = None
                    ) -> bool:
        """A connection of the job starts sending after being idle; True if that was a
        boundary (an end-of-iteration signal is pending, or the job had been silent for
        more than ``gap_ns`` and does not signal).

        ``packets_out`` is what the connection still has outstanding: a restart with
        data in flight is a loss recovery (after an RTO), never a compute gap.
        ``signal_seq`` is the job's current signal counter (not an event flag; None: as
        last seen): a different value than the last one seen is a pending signal.
        """
        st = self.state
        if packets_out:
            return False
        if now_ns < st.last_ack_ns:
            raise SpecError(
                "now_ns", f"went backwards ({now_ns} < {st.last_ack_ns})",
                "pass a monotonic clock such as time.monotonic_ns()",
            )
        signalled = signal_seq is not None and signal_seq != st.signal_seen
        if signalled:
            st.signal_seen = signal_seq  # type: ignore[assignment]
        idle = (not self.signals and st.last_ack_ns != 0
                and now_ns - st.last_ack_ns > self.gap_ns)
        boundary = signalled or idle
        if boundary:
            self._boundary()
            st.f_fp = self.agg.f_fixed(0, self._budget)
        st.last_ack_ns = now_ns  # the restart is activity: the job's other flows add no gap
        return boundary

    def on_ack(self, delta_bytes: int, now_ns: int, stale: bool = False) -> int:
        """Account ``delta_bytes`` newly acked at ``now_ns`` and return the new F (Q16.16).

        ``stale`` means the job's budget or config is not trusted right now, so F is 1.
        """
        st = self.state
        if delta_bytes < 0:
            raise SpecError("delta_bytes", f"must be >= 0 (got {delta_bytes})", "pass bytes acked")
        if now_ns < st.last_ack_ns:
            raise SpecError(
                "now_ns", f"went backwards ({now_ns} < {st.last_ack_ns})",
                "pass a monotonic clock such as time.monotonic_ns()",
            )
        budget = self._budget
        st.bytes_in_iter += delta_bytes
        st.bytes_since_gap += delta_bytes
        st.total_bytes += delta_bytes
        if budget > 0 and st.bytes_in_iter >= budget:  # wrap: the budget is used up
            st.iteration += 1
            st.bytes_in_iter -= budget
            if st.bytes_in_iter >= budget:
                st.bytes_in_iter = 0
        st.last_ack_ns = now_ns
        st.f_fp = FP_ONE if (budget == 0 or stale) else self.agg.f_fixed(st.bytes_in_iter, budget)
        return st.f_fp
