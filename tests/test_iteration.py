"""The reference iteration tracker that the eBPF program mirrors operation for operation."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from mltcp.core.aggressiveness import FP_ONE, Aggressiveness, FixedAggressiveness
from mltcp.core.budget import BudgetLearner
from mltcp.core.errors import SpecError
from mltcp.core.iteration import HISTORY_LEN, IterationTracker

MSS = 1448
ITER_BYTES = 10_000_000  # 6906 full segments + one of 112 bytes
ACK_SPACING_NS = 10_000  # 10 us between ACKs while communicating
COMPUTE_NS = 20_000_000  # 20 ms idle (compute phase) between iterations
GAP_NS = 5_000_000  # the tracker's idle threshold
DEFAULT_F = Aggressiveness().to_fixed()  # F = 1 + ratio


def ack_sizes(total: int, mss: int = MSS) -> list[int]:
    full, tail = divmod(total, mss)
    return [mss] * full + ([tail] if tail else [])


assert sum(ack_sizes(ITER_BYTES)) == ITER_BYTES and ack_sizes(ITER_BYTES)[-1] == 112


@dataclass
class Sender:
    """Synthetic job: bursts of ACKs separated by idle compute phases."""

    tracker: IterationTracker
    now_ns: int = 1_000_000  # kernel clocks are never 0; 0 means "no ACK yet"

    def iteration(
        self, total: int = ITER_BYTES, signal_seq: int = 0, idle_ns: int = COMPUTE_NS
    ) -> list[int]:
        """Send one iteration after ``idle_ns`` of compute; return F after every ACK."""
        self.now_ns += idle_ns
        # the first send after the compute phase, with the loop's signal counter
        self.tracker.on_tx_start(self.now_ns, signal_seq=signal_seq)
        self.now_ns += ACK_SPACING_NS
        fs = []
        for size in ack_sizes(total):
            fs.append(self.tracker.on_ack(size, self.now_ns))
            self.now_ns += ACK_SPACING_NS
        return fs

    def first_ack_of_next_iteration(self, signal_seq: int = 0) -> int:
        self.now_ns += COMPUTE_NS
        self.tracker.on_tx_start(self.now_ns, signal_seq=signal_seq)
        self.now_ns += ACK_SPACING_NS
        return self.tracker.on_ack(MSS, self.now_ns)


@pytest.mark.parametrize(
    ("budget", "before_boundary", "after_boundary"),
    [
        # exact budget: each iteration wraps on its last ACK; the gap finds 0 bytes
        (ITER_BYTES, 5, 5),
        # 3 % low: wrap at 9.7 MB, the 300 kB tail is <= budget/16 (606250) and ignored
        (9_700_000, 5, 5),
        # 10 % high: no wrap; each gap boundary counts the iteration (the 5th at the next)
        (11_000_000, 4, 5),
        # unknown budget (learning): iterations count only at gap boundaries
        (0, 4, 5),
        # 20 % low: the 2 MB tail exceeds budget/16 (500 kB), so each gap counts it again
        (8_000_000, 9, 10),
        # half the real size: two exact wraps per iteration
        (5_000_000, 10, 10),
    ],
)
def test_iteration_count_with_budget_error(
    budget: int, before_boundary: int, after_boundary: int
) -> None:
    tracker = IterationTracker(budget, GAP_NS, DEFAULT_F)
    sender = Sender(tracker)
    for _ in range(5):
        sender.iteration()
    assert tracker.state.iteration == before_boundary
    sender.first_ack_of_next_iteration()
    st = tracker.state
    assert st.iteration == after_boundary
    # history holds the real per-iteration bytes whatever the budget
    assert st.history == [ITER_BYTES] * 5
    assert st.last_iter_bytes == ITER_BYTES
    assert st.bytes_in_iter == MSS
    assert st.bytes_since_gap == MSS
    assert st.total_bytes == 5 * ITER_BYTES + MSS


def test_f_rises_within_iteration_and_resets_at_wrap() -> None:
    tracker = IterationTracker(ITER_BYTES, GAP_NS, DEFAULT_F)
    sender = Sender(tracker)
    for _ in range(3):
        fs = sender.iteration()
        assert fs[0] == FP_ONE + (MSS << 16) // ITER_BYTES == FP_ONE + 9
        rising = fs[:-1]
        assert all(a <= b for a, b in zip(rising, rising[1:], strict=False))
        # 9,999,888 bytes: ratio_fp = 65535 -> F just below intercept + slope = 2.0
        assert fs[-2] == FP_ONE + 65535
        assert fs[-1] == FP_ONE  # the last ACK wraps: F back to the intercept
        assert tracker.state.bytes_in_iter == 0


def test_f_resets_at_gap_boundary_when_budget_high() -> None:
    budget = 11_000_000
    agg = Aggressiveness(slope=2.0, intercept=0.5).to_fixed()
    tracker = IterationTracker(budget, GAP_NS, agg)
    sender = Sender(tracker)
    fs = sender.iteration()
    assert fs[0] == FP_ONE // 2 + ((2 * FP_ONE * ((MSS << 16) // budget)) >> 16)
    assert all(a <= b for a, b in zip(fs, fs[1:], strict=False))
    # peak at 10/11 of the budget: 0.5 + 2 * 59578/65536
    assert fs[-1] == FP_ONE // 2 + ((2 * FP_ONE * 59578) >> 16) == 32768 + 119156
    f_next = sender.first_ack_of_next_iteration()
    assert f_next == fs[0]  # reset to the start of an iteration
    assert tracker.bytes_ratio == pytest.approx(MSS / budget)


def test_explicit_signal_marks_boundaries_without_gaps() -> None:
    tracker = IterationTracker(11_000_000, GAP_NS, DEFAULT_F)
    sender = Sender(tracker)
    for seq in range(5):
        sender.iteration(signal_seq=seq, idle_ns=ACK_SPACING_NS)  # no idle gap at all
    assert tracker.state.iteration == 4  # seq 1..4 marked the first four boundaries
    sender.now_ns += ACK_SPACING_NS
    tracker.on_ack(MSS, sender.now_ns)            # the signal is no boundary at an ACK...
    assert tracker.state.iteration == 4
    assert tracker.on_tx_start(sender.now_ns, signal_seq=5)   # ...but at the next restart
    assert tracker.state.iteration == 5
    assert tracker.state.signal_seen == 5
    assert tracker.state.history == [ITER_BYTES] * 4 + [ITER_BYTES + MSS]


def test_a_signal_before_the_last_acks_keeps_them_in_their_iteration() -> None:
    """The loop signals when its collective completed; its own last segments may still be
    unacknowledged.  Those ACKs belong to the iteration that just ended, and the next one
    starts at the next restart of sending."""
    tracker = IterationTracker(0, GAP_NS, DEFAULT_F)
    sender = Sender(tracker)
    sender.iteration()
    acks = ack_sizes(ITER_BYTES)
    for seq in (1, 2):
        sender.now_ns += COMPUTE_NS
        assert tracker.on_tx_start(sender.now_ns, signal_seq=seq - 1)   # the gap, once
        for size in acks[:-3]:
            sender.now_ns += ACK_SPACING_NS
            tracker.on_ack(size, sender.now_ns)
        assert not tracker.on_tx_start(sender.now_ns, packets_out=3, signal_seq=seq)
        for size in acks[-3:]:                          # the tail, after the signal
            sender.now_ns += ACK_SPACING_NS
            tracker.on_ack(size, sender.now_ns)
    sender.now_ns += ACK_SPACING_NS                     # no gap: the signal ends it
    assert tracker.on_tx_start(sender.now_ns, signal_seq=2)
    assert tracker.state.history == [ITER_BYTES] * 3
    assert tracker.state.iteration == 3


def _iterations_with_a_pause(tracker: IterationTracker, signal: bool) -> Sender:
    """Four iterations, each with a pause of twice the idle gap halfway through its bytes
    (DDP waiting for the backward pass between gradient buckets), every connection's
    bytes acknowledged before it; with ``signal`` the loop signals each iteration's end."""
    sender = Sender(tracker)
    acks = ack_sizes(ITER_BYTES)
    half = len(acks) // 2
    for seq in range(4):
        sender.now_ns += COMPUTE_NS
        tracker.on_tx_start(sender.now_ns, signal_seq=seq if signal else 0)
        for k, size in enumerate(acks):
            if k == half:                    # the pause: a restart after a silence
                sender.now_ns += 2 * GAP_NS
                tracker.on_tx_start(sender.now_ns, signal_seq=seq if signal else 0)
            sender.now_ns += ACK_SPACING_NS
            tracker.on_ack(size, sender.now_ns)
    return sender


def test_a_pause_inside_communication_splits_an_iteration_by_the_gap_rule() -> None:
    tracker = IterationTracker(0, GAP_NS, DEFAULT_F)
    _iterations_with_a_pause(tracker, signal=False)
    half = sum(ack_sizes(ITER_BYTES)[:len(ack_sizes(ITER_BYTES)) // 2])
    assert tracker.state.iteration == 7           # 4 iterations counted as 7 boundaries
    assert tracker.state.history[:2] == [half, ITER_BYTES - half]


@pytest.mark.parametrize("budget", [0, 11_000_000, ITER_BYTES])
def test_a_signalling_job_takes_its_boundaries_from_the_signal_alone(budget: int) -> None:
    """With the job signalling, the pause is no boundary: each iteration is counted once,
    at the restart after its signal, whatever the budget (the wrap only when the budget
    is exact, and the signal's boundary after it finds no tail)."""
    tracker = IterationTracker(budget, GAP_NS, DEFAULT_F, signals=True)
    sender = _iterations_with_a_pause(tracker, signal=True)
    assert tracker.state.history == [ITER_BYTES] * 3
    assert tracker.state.iteration == (4 if budget == ITER_BYTES else 3)
    assert tracker.on_tx_start(sender.now_ns + COMPUTE_NS, signal_seq=4)
    assert tracker.state.iteration == 4 and tracker.state.history == [ITER_BYTES] * 4


def test_a_signalling_job_that_misses_signals_still_wraps_at_the_budget() -> None:
    """The budget is the safety net: no signal and no gap boundary, one wrap per
    iteration's bytes."""
    tracker = IterationTracker(ITER_BYTES, GAP_NS, DEFAULT_F, signals=True)
    _iterations_with_a_pause(tracker, signal=False)
    assert tracker.state.iteration == 4
    assert tracker.state.history == []               # no gap or signal boundary at all


def test_without_signal_or_gap_no_boundary() -> None:
    tracker = IterationTracker(0, GAP_NS, DEFAULT_F)
    sender = Sender(tracker)
    for _ in range(3):
        sender.iteration(idle_ns=ACK_SPACING_NS)
    assert tracker.state.iteration == 0
    assert tracker.state.bytes_in_iter == 3 * ITER_BYTES
    assert tracker.state.history == []


def test_gap_and_signal_together_count_once() -> None:
    tracker = IterationTracker(0, GAP_NS, DEFAULT_F)
    tracker.on_ack(1000, 1_000)
    assert tracker.on_tx_start(1_000 + 2 * GAP_NS, signal_seq=7)
    tracker.on_ack(1000, 2_000 + 2 * GAP_NS)
    assert not tracker.on_tx_start(3_000 + 2 * GAP_NS, signal_seq=7)
    assert tracker.state.iteration == 1
    assert tracker.state.history == [1000]


def test_signal_seq_is_a_counter_not_a_flag() -> None:
    """Any change is a boundary, including going back to 0."""
    tracker = IterationTracker(0, GAP_NS, DEFAULT_F)
    assert tracker.on_tx_start(1_000, signal_seq=3)  # 0 -> 3: boundary, but nothing sent yet
    assert tracker.state.iteration == 0
    tracker.on_ack(100, 1_000)
    assert not tracker.on_tx_start(1_500, signal_seq=3)
    tracker.on_ack(100, 2_000)
    assert tracker.on_tx_start(3_000, signal_seq=0)  # 3 -> 0: boundary
    assert tracker.state.iteration == 1
    assert tracker.state.history == [200]


def test_gap_must_exceed_threshold() -> None:
    tracker = IterationTracker(0, GAP_NS, DEFAULT_F)
    tracker.on_ack(100, 1_000)
    assert not tracker.on_tx_start(1_000 + GAP_NS)  # exactly gap_ns: not a boundary
    tracker.on_ack(100, 1_000 + GAP_NS)
    assert tracker.state.iteration == 0
    assert tracker.on_tx_start(1_001 + 2 * GAP_NS)  # gap_ns + 1: boundary
    tracker.on_ack(100, 1_001 + 2 * GAP_NS)
    assert tracker.state.iteration == 1


def test_ack_silence_alone_is_no_boundary() -> None:
    """Only a restart of sending after idle ends an iteration, not a quiet spell of ACKs."""
    tracker = IterationTracker(0, GAP_NS, DEFAULT_F)
    tracker.on_ack(100, 1_000)
    tracker.on_ack(100, 1_000 + 10 * GAP_NS)
    assert tracker.state.iteration == 0


def test_restart_with_data_outstanding_is_a_loss_stall_not_a_gap() -> None:
    """After an RTO the kernel retransmits with packets_out > 0: no boundary."""
    tracker = IterationTracker(0, GAP_NS, DEFAULT_F)
    tracker.on_ack(100, 1_000)
    assert not tracker.on_tx_start(1_000 + 40 * GAP_NS, packets_out=12)
    tracker.on_ack(100, 2_000 + 40 * GAP_NS)
    assert tracker.state.iteration == 0
    assert tracker.state.bytes_since_gap == 200


def test_several_connections_restarting_count_one_boundary() -> None:
    tracker = IterationTracker(0, GAP_NS, DEFAULT_F)
    tracker.on_ack(5000, 1_000)
    t = 1_000 + 3 * GAP_NS
    assert tracker.on_tx_start(t)
    assert not tracker.on_tx_start(t + 50_000)  # the job's second connection
    assert not tracker.on_tx_start(t + 90_000)  # and its third
    assert (tracker.state.iteration, tracker.state.history) == (1, [5000])


def test_first_ack_at_time_zero_does_not_arm_gap_detection() -> None:
    """last_ack_ns == 0 means "no ACK yet" (kernel clocks never read 0)."""
    tracker = IterationTracker(0, GAP_NS, DEFAULT_F)
    tracker.on_ack(100, 0)
    assert not tracker.on_tx_start(10 * GAP_NS)
    tracker.on_ack(100, 10 * GAP_NS)
    assert tracker.state.iteration == 0


@pytest.mark.parametrize(("tail", "counted"), [(1000, False), (1001, True)])
def test_tail_tolerance_is_budget_over_16(tail: int, counted: bool) -> None:
    budget = 16_000  # budget >> 4 == 1000
    tracker = IterationTracker(budget, GAP_NS, DEFAULT_F)
    tracker.on_ack(budget + tail, 1_000)  # wraps once, leaving the tail
    assert (tracker.state.iteration, tracker.state.bytes_in_iter) == (1, tail)
    tracker.on_tx_start(1_000 + 2 * GAP_NS)
    tracker.on_ack(1, 1_000 + 2 * GAP_NS)
    assert tracker.state.iteration == (2 if counted else 1)


def test_tail_shift_parameter() -> None:
    tracker = IterationTracker(16_000, GAP_NS, DEFAULT_F, tail_shift=2)  # tolerate 4000
    tracker.on_ack(16_000 + 3_000, 1_000)
    tracker.on_tx_start(1_000 + 2 * GAP_NS)
    tracker.on_ack(1, 1_000 + 2 * GAP_NS)
    assert tracker.state.iteration == 1


def test_huge_ack_wraps_once_and_clears() -> None:
    tracker = IterationTracker(1000, GAP_NS, DEFAULT_F)
    f = tracker.on_ack(2500, 1_000)
    assert (tracker.state.iteration, tracker.state.bytes_in_iter) == (1, 0)
    assert f == FP_ONE  # intercept at ratio 0


def test_history_keeps_last_eight_newest_last() -> None:
    tracker = IterationTracker(0, GAP_NS, DEFAULT_F)
    for i in range(1, 12):
        tracker.on_tx_start(1_000 * i, signal_seq=i)
        tracker.on_ack(i * 100, 1_000 * i)
    tracker.on_tx_start(1_000 * 12, signal_seq=12)
    assert len(tracker.state.history) == HISTORY_LEN == 8
    assert tracker.state.history == [i * 100 for i in range(4, 12)]
    assert tracker.state.last_iter_bytes == 1100


def test_stale_returns_one_but_keeps_tracking() -> None:
    tracker = IterationTracker(ITER_BYTES, GAP_NS, DEFAULT_F)
    assert tracker.on_ack(ITER_BYTES // 2, 1_000, stale=True) == FP_ONE
    assert tracker.state.f_fp == FP_ONE
    assert tracker.state.bytes_in_iter == ITER_BYTES // 2
    assert tracker.on_ack(0, 2_000) == FP_ONE + FP_ONE // 2  # 1.5 once trusted again


def test_budget_zero_means_f_one() -> None:
    tracker = IterationTracker(0, GAP_NS, Aggressiveness(slope=3.0, intercept=2.0).to_fixed())
    fs = Sender(tracker).iteration()
    assert set(fs) == {FP_ONE}
    assert tracker.bytes_ratio == 0.0


def test_learn_then_set_budget() -> None:
    """End to end: learn from boundary history, install the budget, F starts to work."""
    tracker = IterationTracker(0, GAP_NS, DEFAULT_F)
    sender = Sender(tracker)
    learner = BudgetLearner()
    for _ in range(5):
        sender.iteration()
    sender.first_ack_of_next_iteration()
    for sample in tracker.state.history:
        learner.add(sample)
    assert learner.learned() == ITER_BYTES
    tracker.set_budget(ITER_BYTES)
    fs = sender.iteration(total=ITER_BYTES - MSS, idle_ns=ACK_SPACING_NS)
    assert tracker.state.iteration == 6  # the iteration begun by the first ACK wrapped
    assert fs[-1] == FP_ONE
    assert max(fs) == FP_ONE + 65535


def test_set_budget_below_progress_wraps_on_next_ack() -> None:
    tracker = IterationTracker(0, GAP_NS, DEFAULT_F)
    tracker.on_ack(5000, 1_000)
    tracker.set_budget(2000)
    assert tracker.bytes_ratio == 2.5  # transiently above 1 until the next ACK
    tracker.on_ack(0, 2_000)  # 5000 - 2000 = 3000 >= budget -> cleared
    assert (tracker.state.iteration, tracker.state.bytes_in_iter) == (1, 0)


@pytest.mark.parametrize("budget", [-1, (1 << 40) + 1, 1.5, True])
def test_budget_validation(budget: int) -> None:
    with pytest.raises(SpecError, match="^budget: "):
        IterationTracker(budget, GAP_NS, DEFAULT_F)
    tracker = IterationTracker(0, GAP_NS, DEFAULT_F)
    with pytest.raises(SpecError, match="^budget: "):
        tracker.set_budget(budget)


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"gap_ns": 0}, "gap_ns"),
        ({"gap_ns": -5}, "gap_ns"),
        ({"tail_shift": 33}, "tail_shift"),
        ({"tail_shift": -1}, "tail_shift"),
        ({"agg": Aggressiveness()}, "agg"),  # float form, not the kernel's fixed point
    ],
)
def test_constructor_validation(kwargs: dict[str, object], field: str) -> None:
    args: dict[str, object] = {"budget": 1000, "gap_ns": GAP_NS, "agg": DEFAULT_F}
    args.update(kwargs)
    with pytest.raises(SpecError, match=f"^{field}: "):
        IterationTracker(**args)  # type: ignore[arg-type]


def test_on_ack_validation() -> None:
    tracker = IterationTracker(1000, GAP_NS, FixedAggressiveness(FP_ONE, FP_ONE))
    with pytest.raises(SpecError, match="^delta_bytes: "):
        tracker.on_ack(-1, 1_000)
    tracker.on_ack(1, 5_000)
    with pytest.raises(SpecError, match="^now_ns: "):
        tracker.on_ack(1, 4_999)
