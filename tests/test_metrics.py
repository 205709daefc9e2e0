"""Metric definitions on hand-made traces whose answers are worked out in the comments."""

from __future__ import annotations

import json

import numpy as np
import pytest

from mltcp.core.errors import SpecError
from mltcp.lab.scenario import metrics as m
from mltcp.lab.scenario.trace import IterationRecord, JobTrace, LinkSample, LinkTrace, Trace


def job(name: str, comms: list[tuple[float, float]], links: tuple[str, ...] = ("L",),
        period: float = 2.0, nbytes: int = 1000) -> JobTrace:
    """Iteration i spans [period*i, period*(i+1)) and communicates over comms[i]."""
    return JobTrace(name, links, tuple(
        IterationRecord(i, period * i, a, b, period * (i + 1), nbytes)
        for i, (a, b) in enumerate(comms)))


def trace(*jobs: JobTrace, links: tuple[LinkTrace, ...] = ()) -> Trace:
    return Trace("hand", "mltcp", "fluid", 0, jobs, links)


# --------------------------------------------------------------------------- overlap


def test_perfectly_interleaved() -> None:
    # a communicates in the first half of every 2 s iteration, b in the second half; the
    # intervals only touch at instants (measure 0), so overlap is 0 and both converge at 0.
    a = job("a", [(2 * i, 2 * i + 1) for i in range(6)])
    b = job("b", [(2 * i + 1, 2 * i + 2) for i in range(6)])
    t = trace(a, b)
    assert m.overlap(t, "a") == [0.0] * 6
    assert m.overlap(t, "b") == [0.0] * 6
    assert m.convergence_iteration(t, "a") == 0
    assert m.scenario_convergence(t) == 0


def test_identical_synchronized() -> None:
    # same communication intervals: every moment of a's communication is b's too -> 1.0.
    comms = [(2 * i, 2 * i + 1) for i in range(8)]
    t = trace(job("a", comms), job("b", comms))
    assert m.overlaps(t) == {"a": [1.0] * 8, "b": [1.0] * 8}
    assert m.convergence_iteration(t, "a") is None
    assert m.scenario_convergence(t) is None


def test_partial_overlap_exact_fractions() -> None:
    # a [0, 1] vs b [0.75, 1.5]: shared 0.25 s -> a: 0.25 / 1 = 0.25, b: 0.25 / 0.75 = 1/3.
    t = trace(job("a", [(0.0, 1.0)]), job("b", [(0.75, 1.5)]))
    assert m.overlap(t, "a") == pytest.approx([0.25])
    assert m.overlap(t, "b") == pytest.approx([1 / 3])


def test_union_not_double_counted() -> None:
    # a [0, 1]; b [0.2, 0.6]; c [0.4, 0.8].  Others of a: union [0.2, 0.8] = 0.6 s -> 0.6
    # (summing b and c would give 0.4 + 0.4 = 0.8).  b and c lie inside a: overlap 1.
    t = trace(job("a", [(0.0, 1.0)]), job("b", [(0.2, 0.6)]), job("c", [(0.4, 0.8)]))
    assert m.overlap(t, "a") == pytest.approx([0.6])
    assert m.overlap(t, "b") == pytest.approx([1.0])
    assert m.overlap(t, "c") == pytest.approx([1.0])


def test_overlap_with_several_iterations_of_the_other_job() -> None:
    # a: one iteration communicating over [0, 4]; b: iterations with comm [0.5, 1] and
    # [2, 3], then [3.5, 5] that sticks out of a's phase.  Covered: 0.5 + 1 + 0.5 = 2 -> 0.5.
    a = job("a", [(0.0, 4.0)], period=6.0)
    b = JobTrace("b", ("L",), (
        IterationRecord(0, 0.0, 0.5, 1.0, 1.5, 1),
        IterationRecord(1, 1.5, 2.0, 3.0, 3.0, 1),
        IterationRecord(2, 3.0, 3.5, 5.0, 5.0, 1),
    ))
    t = trace(a, b)
    assert m.overlap(t, "a") == pytest.approx([0.5])
    # b's phases each lie inside a's except [3.5, 5]: 0.5 of 1.5 -> 1/3.
    assert m.overlap(t, "b") == pytest.approx([1.0, 1.0, 1 / 3])


def test_zero_length_comm_is_zero_overlap() -> None:
    t = trace(job("a", [(0.5, 0.5)]), job("b", [(0.0, 1.0)]))
    assert m.overlap(t, "a") == [0.0]
    assert m.overlap(t, "b") == [0.0]     # a's empty phase covers nothing of b's


def test_jobs_not_sharing_a_link_do_not_overlap() -> None:
    comms = [(2 * i, 2 * i + 1) for i in range(5)]
    a = job("a", comms, links=("L1", "access-a"))
    b = job("b", comms, links=("L2",))
    c = job("c", comms, links=("L2", "access-c"))
    t = trace(a, b, c)
    assert m.overlap(t, "a") == [0.0] * 5            # a shares nothing with b or c
    assert m.overlap(t, "b") == [1.0] * 5            # b and c share L2
    assert [j.name for j in m.sharing_jobs(t, "c")] == ["b"]
    assert m.convergence_iteration(t, "a") == 0


# --------------------------------------------------------------------------- convergence


STEADY = [0.9, 0.5, 0.3, 0.05, 0.0, 0.02, 0.09, 0.0, 0.0]


def test_first_interleaved_at_three() -> None:
    # at or below 0.10 from index 3 on, for indices 3..7 (5 iterations) -> 3.
    assert m.first_interleaved(range(9), STEADY) == 3
    # only 4 iterations below (3..6) are not enough.
    assert m.first_interleaved(range(7), STEADY[:7]) is None


def test_a_blip_of_two_resets_first_interleaved_one_is_a_tolerated_spike() -> None:
    values = STEADY[:5] + [0.4, 0.4] + [0.0] * 5   # blip at 5-6; below again from 7 to 11
    assert m.first_interleaved(range(12), values) == 7
    assert m.first_interleaved(range(11), values[:11]) is None   # 7..10 is only 4
    spike = STEADY[:5] + [0.4] + [0.0] * 3          # one record: tolerated
    assert m.first_interleaved(range(9), spike) == 3


def test_threshold_and_k_parameters() -> None:
    assert m.first_interleaved(range(9), STEADY, threshold=0.35) == 2   # 0.3 <= 0.35 from 2
    assert m.first_interleaved(range(9), STEADY, k=1) == 3
    values = [0.2, 0.11, 0.1, 0.0]
    assert m.first_interleaved(range(4), values, k=2) == 2      # 0.1 is at the threshold
    assert m.held_from(range(4), values, k=2) == 2
    assert m.first_interleaved(range(4), values, threshold=0.2, k=4) == 0
    assert m.held_from(range(4), values, threshold=0.2, k=4) == 0
    for fn in (m.first_interleaved, m.held_from):
        with pytest.raises(SpecError, match="^k: "):
            fn(range(4), values, k=0)
        with pytest.raises(SpecError, match="^threshold: "):
            fn(range(4), values, threshold=0.0)
        with pytest.raises(SpecError, match="^values: "):
            fn(range(4), values[:3])


def test_gap_in_indices_restarts_the_first_interleaved_count() -> None:
    # indices 0,1,2 then 4,5 (3 missing): no 3 consecutive present below threshold before 4.
    assert m.first_interleaved([0, 1, 2, 4, 5], [0.0] * 5, k=3) == 0
    assert m.first_interleaved([0, 1, 3, 4, 5], [0.0] * 5, k=3) == 3
    assert m.held_from([0, 1, 3, 4, 5], [0.5, 0.0, 0.0, 0.0, 0.0], k=3) == 3


DRIFTS_BACK = [0.9, 0.6] + [0.0] * 8 + [0.3, 0.5, 0.7, 0.8] + [0.5] * 6


def test_a_run_that_interleaves_then_drifts_back_has_not_converged() -> None:
    # The regression of issue 22: interleaved for 8 iterations (2..9), then back into
    # overlap to the end.  The old definition (any k in a row) called it converged at 2.
    assert m.first_interleaved(range(20), DRIFTS_BACK) == 2
    assert m.held_from(range(20), DRIFTS_BACK) is None
    # ... and if it interleaves again and holds, it converges there, not at 2.
    again = DRIFTS_BACK + [0.0] * 6
    assert m.first_interleaved(range(26), again) == 2
    assert m.held_from(range(26), again) == 20


def test_isolated_spikes_are_tolerated_but_not_a_drift_or_the_end() -> None:
    spike = [0.8, 0.0, 0.0, 0.4, 0.0, 0.0, 0.0, 0.0]      # one slow iteration at 3
    assert m.held_from(range(8), spike) == 1
    assert m.first_interleaved(range(8), spike) == 1      # the spike does not restart k
    two = [0.8, 0.0, 0.0, 0.4, 0.4, 0.0, 0.0, 0.0, 0.0, 0.0]   # two in a row: a drift
    assert m.held_from(range(10), two) == 5
    assert m.held_from(range(8), [0.8] + [0.0] * 6 + [0.4]) is None   # the last record
    assert m.held_from(range(6), [0.4, 0.0, 0.0, 0.0, 0.0, 0.0]) == 1
    assert m.held_from(range(4), [0.0] * 4) is None                    # fewer than k
    # one spike in every k records at most: alternating above and below is no convergence
    alternating = [0.8] + [0.0, 0.15] * 10 + [0.0]
    assert m.held_from(range(22), alternating) is None
    assert m.first_interleaved(range(22), alternating) is None
    sparse = [0.8] + ([0.0] * 5 + [0.15]) * 3 + [0.0]          # one in six: tolerated
    assert m.held_from(range(20), sparse) == 1
    assert m.held_from([], []) is None


def test_convergence_never_precedes_first_interleaving() -> None:
    rng = np.random.default_rng(7)
    for _ in range(300):
        n = int(rng.integers(0, 40))
        values = list(rng.choice([0.0, 0.05, 0.1, 0.3, 0.9], size=n))
        held, first = m.held_from(range(n), values), m.first_interleaved(range(n), values)
        if held is not None:
            assert first is not None and first <= held
            assert values[held] <= 0.1 and n - held >= 5


def test_convergence_on_a_trace() -> None:
    # a and b synchronized for iterations 0..2 (overlap 1), interleaved from 3 on (0):
    # both converge at 3.  c alone on another link converges at 0.  Scenario: max = 3.
    a = job("a", [(2 * i, 2 * i + 1) for i in range(8)])
    b = job("b", [(2 * i, 2 * i + 1) if i < 3 else (2 * i + 1, 2 * i + 2) for i in range(8)])
    c = job("c", [(2 * i, 2 * i + 1) for i in range(8)], links=("other",))
    t = trace(a, b, c)
    assert m.overlap(t, "a") == [1.0, 1.0, 1.0, 0.0, 0.0, 0.0, 0.0, 0.0]
    assert m.convergence_iteration(t, "b") == 3
    assert m.convergence_iteration(t, "c") == 0
    assert m.scenario_convergence(t) == 3
    assert m.scenario_first_interleaved(t) == 3
    assert m.scenario_convergence(t, k=6) is None        # 3..7 is only 5 iterations
    assert m.scenario_first_interleaved(t, k=6) is None


# --------------------------------------------------------------------------- iteration time


def timed_job(name: str, durations: list[float]) -> JobTrace:
    recs, t = [], 0.0
    for i, d in enumerate(durations):
        recs.append(IterationRecord(i, t, t, t + d / 2, t + d, 100))
        t += d
    return JobTrace(name, ("L",), tuple(recs))


def test_loss_counts_sum_and_know_when_they_are_missing() -> None:
    recs = [IterationRecord(0, 0.0, 0.5, 1.0, 1.0, 10, retransmits=7, rtos=0),
            IterationRecord(1, 1.0, 1.5, 2.0, 2.0, 10, retransmits=3, rtos=1)]
    assert m.loss_counts(JobTrace("a", ("L",), tuple(recs))) == {"retransmits": 10, "rtos": 1}
    # One iteration without the counters: a sum would undercount, so there is none.
    partial = (*recs, IterationRecord(2, 2.0, 2.5, 3.0, 3.0, 10))
    assert m.loss_counts(JobTrace("a", ("L",), partial)) == {"retransmits": None, "rtos": None}
    assert m.loss_counts(job("b", [(0.5, 1.0)])) == {"retransmits": None, "rtos": None}


def test_iteration_stats() -> None:
    # times 1, 2, 3, 4, 10: mean 4, median 3; p99 linear: position 0.99 * 4 = 3.96
    # -> 4 + 0.96 * (10 - 4) = 9.76.
    s = m.iteration_stats(timed_job("a", [1, 2, 3, 4, 10]))
    assert (s.iterations, s.mean, s.p50) == (5, pytest.approx(4.0), pytest.approx(3.0))
    assert s.p99 == pytest.approx(9.76)


def test_skip_warm_up() -> None:
    # skip 1 leaves 2, 3, 4, 10: mean 4.75, median 3.5, p99 at 0.99 * 3 = 2.97 -> 4 + 0.97 * 6.
    s = m.iteration_stats(timed_job("a", [1, 2, 3, 4, 10]), skip=1)
    assert s.iterations == 4
    assert (s.mean, s.p50, s.p99) == pytest.approx((4.75, 3.5, 9.82))
    empty = m.iteration_stats(timed_job("a", [1, 2]), skip=2)
    assert (empty.iterations, empty.mean, empty.p99) == (0, None, None)
    with pytest.raises(SpecError, match="^skip: "):
        m.iteration_stats(timed_job("a", [1]), skip=-1)


def test_ratio_to_dedicated() -> None:
    # dedicated: a alone takes 2 s per iteration, b 1 s.  Shared: a mean 3 s -> 1.5; b mean
    # (1 + 3) / 2 = 2 s -> 2.0; mean ratio 1.75.
    ded = m.dedicated_means([trace(timed_job("a", [2, 2, 2])), trace(timed_job("b", [1, 1]))])
    assert ded == {"a": 2.0, "b": 1.0}
    shared = trace(timed_job("a", [3, 3]), timed_job("b", [1, 3]))
    assert m.ratios_to_dedicated(shared, ded) == {"a": 1.5, "b": 2.0}
    assert m.ratios_to_dedicated(shared, {"a": 2.0}) == {"a": 1.5, "b": None}
    assert m.ratio_to_dedicated(shared.job("b"), 1.0, skip=1) == 3.0
    summary = m.summarize(shared, ded)
    assert summary["overall"]["mean_ratio_to_dedicated"] == pytest.approx(1.75)
    assert m.summarize(shared, {"a": 2.0})["overall"]["mean_ratio_to_dedicated"] is None
    with pytest.raises(SpecError) as err:
        m.ratios_to_dedicated(shared, {"a": 0.0})
    assert err.value.field == "dedicated['a']"
    with pytest.raises(SpecError, match="two dedicated traces"):
        m.dedicated_means([trace(timed_job("a", [1])), trace(timed_job("a", [2]))])


# --------------------------------------------------------------------------- links


def link() -> LinkTrace:
    # capacity 100 b/s; first sample at 0.25, so a window edge at 0 lies before observation.
    rows = [  # t,   bps, marks, drops
        (0.25, 100, 3, 1),
        (0.5, 50, 3, 1),
        (1.0, 20, 5, 1),
        (1.5, 40, 6, 2),
        (1.6, 0, 9, 2),
        (2.0, 60, 12, 2),
        (2.7, 0, 12, 4),
    ]
    return LinkTrace("L", 100.0, tuple(LinkSample(t, bps, 0, mk, dr) for t, bps, mk, dr in rows))


def test_utilisation_per_iteration() -> None:
    # windows [0,1) [1,2) [2,3) [3,4): samples {0.25, 0.5} -> 75/100; {1.0, 1.5, 1.6} -> 20/100
    # (the sample at 1.0 belongs to the window starting there); {2.0, 2.7} -> 30/100; none.
    ref = job("a", [(i, i + 0.5) for i in range(4)], period=1.0)
    assert m.utilisation_per_iteration(link(), ref) == pytest.approx([0.75, 0.2, 0.3, None])
    # whole run: (100 + 50 + 20 + 40 + 0 + 60 + 0) / 7 / 100.
    assert m.run_utilisation(link()) == pytest.approx(270 / 7 / 100)
    assert m.utilisation(LinkTrace("e", 1.0, ()), 0, 1) is None


def test_marks_and_drops_per_iteration() -> None:
    # C(t) = last sample at or before t; before the first sample, the first sample's value.
    # marks: C(0)=3 C(1)=5 C(2)=12 C(3)=12 C(4)=12 -> 2, 7, 0, 0 (sum 9 = 12 - 3).
    # drops: C(0)=1 C(1)=1 C(2)=2 C(3)=4 C(4)=4 -> 0, 1, 2, 0 (sum 3 = 4 - 1).
    ref = job("a", [(i, i + 0.5) for i in range(4)], period=1.0)
    assert m.ecn_marks_per_iteration(link(), ref) == [2, 7, 0, 0]
    assert m.drops_per_iteration(link(), ref) == [0, 1, 2, 0]
    assert m.run_counter(link(), "ecn_marks") == 9
    assert m.run_counter(link(), "drops") == 3


def test_counter_window_edges() -> None:
    ln = link()
    assert m.counter_delta(ln, "ecn_marks", 1.2, 1.8) == 4     # C(1.8)=9 (t=1.6) - C(1.2)=5
    assert m.counter_delta(ln, "drops", 2.69, 2.7) == 2        # sample exactly at the end: in
    assert m.counter_delta(ln, "drops", 2.7, 2.71) == 0        # ... and not in the next window
    assert m.counter_delta(ln, "drops", 5.0, 9.0) == 0         # after the last sample
    assert m.counter_at(ln, "ecn_marks", -1.0) == 3            # before the first sample
    assert m.counter_delta(LinkTrace("e", 1.0, ()), "drops", 0, 1) is None
    with pytest.raises(SpecError, match="^counter: "):
        m.counter_delta(ln, "queue_bytes", 0, 1)  # type: ignore[arg-type]


# --------------------------------------------------------------------------- fairness


def test_jain() -> None:
    assert m.jain([5.0, 5.0, 5.0]) == pytest.approx(1.0)
    assert m.jain([9.0, 0.0, 0.0, 0.0]) == pytest.approx(1 / 4)     # one hog of 4
    assert m.jain([1.0, 2.0, 3.0]) == pytest.approx(36 / 42)        # 6^2 / (3 * 14)
    assert m.jain([0.0, 0.0]) == 1.0
    with pytest.raises(SpecError, match="^values: empty"):
        m.jain([])
    with pytest.raises(SpecError, match="^values: "):
        m.jain([1.0, -1.0])


def test_trace_jain() -> None:
    # a: 1000 B in 1 s and 3000 B in 1 s -> 8 * 4000 / 2 = 16000 b/s; b: 1000 B per 1 s
    # -> 8000 b/s.  Jain (24000)^2 / (2 * (16000^2 + 8000^2)) = 576 / 640 = 0.9.
    a = JobTrace("a", ("L",), (IterationRecord(0, 0, 0, 1, 2, 1000),
                               IterationRecord(1, 2, 2, 3, 4, 3000)))
    b = job("b", [(1, 2), (3, 4)], nbytes=1000)
    t = trace(a, b)
    assert m.comm_throughput_bps(a) == pytest.approx(16000)
    assert m.trace_jain(t) == pytest.approx(0.9)
    # window [0, 2) holds a's iteration 0 (8000 b/s) and b's iteration 0 (8000 b/s): fair.
    assert m.trace_jain(t, (0.0, 2.0)) == pytest.approx(1.0)
    assert m.trace_jain(t, (10.0, 20.0)) is None
    # per iteration: index 0 -> 8000 vs 8000 = 1; index 1 -> 24000 vs 8000 -> 0.8.
    assert m.jain_per_iteration(t) == pytest.approx({0: 1.0, 1: 0.8})


# --------------------------------------------------------------------------- summary


def test_summarize_is_json_and_complete() -> None:
    a = job("a", [(2 * i, 2 * i + 1) for i in range(6)])
    b = job("b", [(2 * i, 2 * i + 1) if i < 1 else (2 * i + 1, 2 * i + 2) for i in range(6)])
    samples = tuple(LinkSample(0.5 * i, 50.0, 0, i, 0) for i in range(24))
    t = trace(a, b, links=(LinkTrace("L", 100.0, samples), LinkTrace("idle", 1e3, ())))
    s = m.summarize(t, {"a": 2.0, "b": 1.0}, k=3)
    json.dumps(s, allow_nan=False)
    assert s["schema"] == "mltcp.summary/1"
    assert s["settings"] == {"threshold": 0.10, "k": 3, "skip": 0}
    ja = s["jobs"]["a"]
    assert ja["overlap"] == [1.0, 0, 0, 0, 0, 0] and ja["indices"] == list(range(6))
    assert ja["convergence_iteration"] == 1
    assert ja["mean"] == 2.0 and ja["ratio_to_dedicated"] == 1.0
    assert s["jobs"]["b"]["ratio_to_dedicated"] == 2.0
    assert s["overall"]["convergence_iteration"] == 1
    assert s["overall"]["mean_ratio_to_dedicated"] == 1.5
    assert s["overall"]["jain"] == pytest.approx(1.0)
    assert s["overall"]["utilisation"] == {"L": 0.5, "idle": None}
    # marks count up by one per 0.5 s sample: 4 per 2 s iteration, 23 over the run.
    assert s["overall"]["ecn_marks"] == {"L": 23, "idle": None}
    assert s["links"]["L"]["reference_job"] == "a"
    assert s["links"]["L"]["ecn_marks_per_iteration"] == [4] * 5 + [3]
    assert s["links"]["L"]["utilisation_per_iteration"] == [0.5] * 6
    assert s["links"]["idle"]["reference_job"] is None
    assert set(ja) == {"iterations", "measured_iterations", "mean", "p50", "p99",
                       "dedicated_mean", "ratio_to_dedicated", "indices", "overlap",
                       "convergence_iteration", "first_interleaved_iteration",
                       "comm_throughput_bps", "retransmits", "rtos"}
    no_ded = m.summarize(t)
    assert no_ded["jobs"]["a"]["ratio_to_dedicated"] is None


def test_overlap_counts_communication_phases_not_the_gaps_between() -> None:
    # a: iteration [0, 4) communicates in [0, 1] and [2, 3] (compute in between).
    # b communicates over [0.5, 2.5]: it covers 0.5 s of each of a's phases -> 1 of 2 s.
    a = JobTrace("a", ("L",), (IterationRecord(0, 0.0, 0.0, 3.0, 4.0, 10,
                                               phases=((0.0, 1.0), (2.0, 3.0))),))
    b = job("b", [(0.5, 2.5)], period=4.0)
    assert m.overlap(trace(a, b), "a") == [0.5]
    # b's whole [0.5, 2.5] lies inside a's [0, 3] span but only 1 s of it meets a's phases.
    assert m.overlap(trace(a, b), "b") == [0.5]
    # b inside a's compute gap: no overlap at all.
    c = job("c", [(1.0, 2.0)], period=4.0)
    assert m.overlap(trace(a, c), "a") == [0.0] and m.overlap(trace(a, c), "c") == [0.0]
