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
