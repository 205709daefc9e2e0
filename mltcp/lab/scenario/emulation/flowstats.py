"""Measurements on sender traces (:mod:`.traffic` reports): window growth, shares, cwnd.

These turn TCP_INFO samples into the quantities the datapath is specified by,
so tests and benchmarks can state MLTCP's behaviour in numbers.
"""

from __future__ import annotations

import bisect
import statistics
from collections.abc import Iterator
from dataclasses import dataclass

TCP_CA_OPEN = 0


@dataclass(frozen=True)
class Growth:
    """Congestion-avoidance window growth: segments added per round trip (per cwnd of ACKs)."""

    per_round: float
    rounds: float     # round trips the estimate is based on
    pairs: int        # sample pairs used


def _ca_pairs(samples: list[dict], conn: int | None) -> Iterator[tuple[dict, dict, int]]:
    """Consecutive sample pairs of one connection spent growing in congestion avoidance.

    A pair counts when both are in the Open state, in congestion avoidance
    (cwnd >= ssthresh), with the same ssthresh (no reduction between them),
    the window not shrinking and packets delivered between them.  Yields
    (first, second, packets delivered).
    """
    by_conn: dict[int, list[dict]] = {}
    for s in samples:
        if conn is None or s["conn"] == conn:
            by_conn.setdefault(s["conn"], []).append(s)
    for seq in by_conn.values():
        for a, b in zip(seq, seq[1:], strict=False):
            if a["ca_state"] != TCP_CA_OPEN or b["ca_state"] != TCP_CA_OPEN:
                continue
            if a["ssthresh"] != b["ssthresh"] or a["cwnd"] < a["ssthresh"]:
                continue
            delivered = b["delivered"] - a["delivered"]
            if b["cwnd"] < a["cwnd"] or delivered <= 0:
                continue
            yield a, b, delivered


def ca_growth(samples: list[dict], conn: int | None = None) -> Growth:
    """Window growth per round in congestion avoidance, from consecutive samples.

    Rounds are delivered packets over the mean window, so for Reno the result
    is 1 segment per round and MLTCP with F pinned scales it by F.
    """
    grown = rounds = 0.0
    pairs = 0
    for a, b, delivered in _ca_pairs(samples, conn):
        grown += b["cwnd"] - a["cwnd"]
        rounds += delivered / ((a["cwnd"] + b["cwnd"]) / 2)
        pairs += 1
    return Growth(per_round=grown / rounds if rounds else 0.0, rounds=rounds, pairs=pairs)


def growth_per_delivered(samples: list[dict], min_delivered: int = 50,
                         conn: int | None = None) -> list[float]:
    """Window growth per delivered packet of each sample pair in congestion avoidance.

    CUBIC never grows by more than one segment per two ACKed (x1.5 per round
    trip), so a pair's value is at most 0.5 plus the rounding of one increment
    over ``min_delivered`` packets; pairs that delivered fewer are skipped because
    that rounding would dominate them.
    """
    return [float(b["cwnd"] - a["cwnd"]) / delivered
            for a, b, delivered in _ca_pairs(samples, conn) if delivered >= min_delivered]


def share_growing_faster(samples: list[dict], per_delivered: float, min_delivered: int = 50,
                         conn: int | None = None) -> float:
    """Share of congestion-avoidance pairs whose window grew by more than ``per_delivered``
    segments per delivered packet (0.0 when no pair qualifies).

    A share, not the maximum, because a TCP_INFO pair cannot see everything between its
    two samples: a late undo of a recovery (``undo_cwnd()``, the kernel's doing) or a
    window set at the end of a reduction inside the interval reads as growth.
    """
    rates = growth_per_delivered(samples, min_delivered, conn)
    return sum(r > per_delivered for r in rates) / len(rates) if rates else 0.0


def mean_cwnd(samples: list[dict]) -> float:
    return statistics.fmean(s["cwnd"] for s in samples) if samples else 0.0


def acked_between(report: dict, t_from: float, t_to: float) -> int:
    """Bytes a sender got acked between two CLOCK_MONOTONIC instants (all its connections)."""
    t0 = report["t0_monotonic"]
    total = 0
    by_conn: dict[int, list[dict]] = {}
    for s in report["samples"]:
        by_conn.setdefault(s["conn"], []).append(s)
    for seq in by_conn.values():
        before = [s["bytes_acked"] for s in seq if t0 + s["t"] <= t_from]
        upto = [s["bytes_acked"] for s in seq if t0 + s["t"] <= t_to]
        if upto:
            total += upto[-1] - (before[-1] if before else 0)
    return total


def longest_ack_silence(report: dict) -> tuple[float, int | None]:
    """(seconds, iteration index): the longest time inside one iteration's communication
    (``comm_start`` to ``comm_end``) in which none of the sender's connections had a
    byte newly acknowledged, from its TCP_INFO samples; ``(0.0, None)`` without
    iterations.  The datapath's idle-gap rule counts ACK-less time per job, so a
    silence near the job's gap inside communication (a starved receiver's zero window,
    a timeout) is a boundary there, whatever caused it.  Resolution: the sampling
    period (the time before the first sample that shows progress counts as silence)."""
    totals: dict[float, int] = {}
    for s in report["samples"]:
        totals[s["t"]] = totals.get(s["t"], 0) + s["bytes_acked"]
    times = sorted(totals)
    longest, where = 0.0, None
    for it in report["iterations"]:
        start, end = it["comm_start"], it["comm_end"]
        first = bisect.bisect_right(times, start)          # the first sample after start
        last_t, last_acked = start, totals[times[first - 1]] if first else 0
        for k in range(first, len(times)):       # no copy of the rest per iteration
            t = times[k]
            if totals[t] != last_acked or t >= end:
                if min(t, end) - last_t > longest:
                    longest, where = min(t, end) - last_t, it["index"]
                last_t, last_acked = t, totals[t]
            if t >= end:
                break
        else:
            if end - last_t > longest:
                longest, where = end - last_t, it["index"]
    return longest, where
