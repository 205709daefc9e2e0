"""flowstats on hand-made TCP_INFO samples: which pairs count, and the growth they give."""

from __future__ import annotations

import pytest

from mltcp.lab.scenario.emulation import flowstats


def _sample(cwnd: int, delivered: int, ssthresh: int = 10, ca_state: int = 0,
            conn: int = 0) -> dict:
    return {"conn": conn, "cwnd": cwnd, "delivered": delivered, "ssthresh": ssthresh,
            "ca_state": ca_state}


def test_growth_counts_only_congestion_avoidance_pairs_without_a_reduction() -> None:
    samples = [
        _sample(20, 0), _sample(21, 20),          # +1 over 20 delivered at ~20.5: 0.976 rounds
        _sample(22, 41),                          # +1 over 21 delivered
        _sample(11, 60, ssthresh=11),             # reduction: ssthresh changed, skipped
        _sample(30, 90, ssthresh=11, ca_state=1),  # not Open: skipped (both pairs around it)
        _sample(31, 120, ssthresh=11),
        _sample(5, 130, ssthresh=20),             # ssthresh changes again: skipped
        _sample(8, 140, ssthresh=20),             # slow start (cwnd < ssthresh): skipped
    ]
    g = flowstats.ca_growth(samples)
    assert g.pairs == 2
    rounds = 20 / 20.5 + 21 / 21.5
    assert g.rounds == pytest.approx(rounds)
    assert g.per_round == pytest.approx(2 / rounds)


def test_growth_per_delivered_skips_short_pairs_and_other_connections() -> None:
    samples = [
        _sample(40, 0), _sample(60, 50),          # 20 over 50: 0.4
        _sample(70, 60),                          # 10 over 10: too few delivered
        _sample(100, 120),                        # 30 over 60: 0.5
        _sample(10, 0, conn=1), _sample(90, 100, conn=1),  # 0.8, on connection 1
    ]
    assert flowstats.growth_per_delivered(samples, min_delivered=50, conn=0) == [0.4, 0.5]
    assert sorted(flowstats.growth_per_delivered(samples, min_delivered=50)) == [0.4, 0.5, 0.8]
    assert flowstats.growth_per_delivered(samples, min_delivered=5, conn=0) == [0.4, 1.0, 0.5]
    assert flowstats.share_growing_faster(samples, 0.45) == pytest.approx(2 / 3)
    assert flowstats.share_growing_faster(samples, 0.45, conn=0) == 0.5
    assert flowstats.share_growing_faster([], 0.45) == 0.0


def _acked(t: float, acked: int, conn: int = 0) -> dict:
    return {"t": t, "conn": conn, "bytes_acked": acked}


def _iteration(index: int, start: float, end: float) -> dict:
    return {"index": index, "comm_start": start, "comm_end": end}


def test_the_longest_ack_silence_is_found_inside_communication_across_connections() -> None:
    report = {"iterations": [_iteration(0, 1.0, 2.0), _iteration(1, 3.0, 4.0)], "samples": [
        # iteration 0: connection 0 stalls from 1.1 to 1.6, but connection 1 moves at 1.3,
        # so the job's longest ACK-less time is 1.3 -> 1.6
        _acked(0.5, 0), _acked(0.5, 0, conn=1),
        _acked(1.1, 10), _acked(1.1, 0, conn=1),
        _acked(1.3, 10), _acked(1.3, 5, conn=1),
        _acked(1.6, 20), _acked(1.6, 5, conn=1),
        _acked(1.9, 30), _acked(1.9, 5, conn=1),
        # the compute between iterations is silent and does not count
        _acked(2.9, 30), _acked(2.9, 5, conn=1),
        # iteration 1: no progress until 3.7 (late start), then steady
        _acked(3.2, 30), _acked(3.2, 5, conn=1),
        _acked(3.7, 40), _acked(3.7, 5, conn=1),
        _acked(3.9, 50), _acked(3.9, 5, conn=1),
    ]}
    silence, where = flowstats.longest_ack_silence(report)
    assert (round(silence, 6), where) == (0.7, 1)
    report["iterations"] = report["iterations"][:1]
    silence, where = flowstats.longest_ack_silence(report)
    assert (round(silence, 6), where) == (0.3, 0)


def test_an_iteration_that_ends_without_a_later_sample_counts_up_to_its_end() -> None:
    report = {"iterations": [_iteration(0, 1.0, 2.0)],
              "samples": [_acked(0.9, 0), _acked(1.2, 10)]}
    assert flowstats.longest_ack_silence(report) == pytest.approx((0.8, 0))
    assert flowstats.longest_ack_silence({"iterations": [], "samples": []}) == (0.0, None)
