"""Spread: the N and the 95 % bootstrap confidence interval that every figure over
seeds or job sets carries.

A mean over four seeds says little without how far the seeds disagree; a reviewer
asks for N and an interval.  The interval is the percentile bootstrap of the mean
(resample the N values with replacement, take the mean, repeat; the 2.5th and 97.5th
percentiles of those means), seeded, so a report rebuilt from the same traces prints
the same interval.  NumPy is enough for it (scipy's ``bootstrap`` would be a heavy
dependency for one percentile).  With N = 1 there is no spread to estimate: the
interval is None, and the tables print the value with "N=1".
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

import numpy as np

LEVEL = 0.95
RESAMPLES = 10_000
SEED = 0


@dataclass(frozen=True)
class Spread:
    """A mean over N values with its bootstrap confidence interval (None where N < 2)."""

    n: int
    mean: float | None
    lo: float | None
    hi: float | None
    level: float = LEVEL

    def to_dict(self) -> dict[str, float | int | None]:
        """The JSON form reports store: ``{n, mean, ci_lo, ci_hi, level}``."""
        return {"n": self.n, "mean": self.mean, "ci_lo": self.lo, "ci_hi": self.hi,
                "level": self.level}

    def text(self, spec: str = ".3g", unit: str = "") -> str:
        """``"1.23 [1.10, 1.40] s (N=4)"``; ``"1.23 s (N=1)"``; ``"-"`` without values."""
        if self.mean is None:
            return "-"
        value = f"{format(self.mean, spec)}{unit}"
        if self.lo is None or self.hi is None:
            return f"{value} (N={self.n})"
        return f"{value} [{format(self.lo, spec)}, {format(self.hi, spec)}] (N={self.n})"


def _interval(estimate: float, n: int, statistic: Callable[[np.ndarray], np.ndarray],
              level: float, resamples: int, seed: int) -> Spread:
    """``statistic`` of ``resamples`` index resamples (rows of a (resamples, n) array of
    indices, drawn in blocks so memory stays bounded for any n), then the percentile
    interval around ``estimate``."""
    rng = np.random.default_rng(seed)
    block = max(1, min(resamples, 4_000_000 // n))
    values = np.concatenate([statistic(rng.integers(0, n, size=(min(block, resamples - i), n)))
                             for i in range(0, resamples, block)])
    tail = (1 - level) / 2 * 100
    lo, hi = np.percentile(values, [tail, 100 - tail])
    # Float rounding in the resampled statistics must not put the estimate outside.
    return Spread(n, estimate, float(min(lo, estimate)), float(max(hi, estimate)), level)


def bootstrap(values: Iterable[float | None], level: float = LEVEL,
              resamples: int = RESAMPLES, seed: int = SEED) -> Spread:
    """The mean of ``values`` (Nones left out: a run that measured nothing is not a
    zero) with its percentile-bootstrap ``level`` interval from ``resamples``
    resamples drawn by a generator seeded with ``seed``."""
    x = np.array([v for v in values if v is not None], dtype=float)
    if x.size == 0:
        return Spread(0, None, None, None, level)
    if x.size < 2:
        return Spread(1, float(x.mean()), None, None, level)
    return _interval(float(x.mean()), int(x.size), lambda pick: x[pick].mean(axis=1),
                     level, resamples, seed)


def bootstrap_ratio(numerators: Iterable[float], denominators: Iterable[float],
                    level: float = LEVEL, resamples: int = RESAMPLES,
                    seed: int = SEED) -> Spread:
    """mean(numerators) / mean(denominators) over paired values (e.g. per seed: a
    baseline's mean iteration time and a scheme's on the same seed), with the
    percentile-bootstrap interval from resampling the pairs together."""
    a = np.array(list(numerators), dtype=float)
    b = np.array(list(denominators), dtype=float)
    if a.shape != b.shape:
        raise ValueError(f"{a.size} numerators for {b.size} denominators: give pairs")
    if a.size == 0 or b.mean() == 0:
        return Spread(int(a.size), None, None, None, level)
    ratio = float(a.mean() / b.mean())
    if a.size < 2:
        return Spread(1, ratio, None, None, level)
    return _interval(ratio, int(a.size),
                     lambda pick: a[pick].mean(axis=1) / b[pick].mean(axis=1),
                     level, resamples, seed)


def fraction(successes: int, n: int) -> str:
    """``"3 of 4"``: what a metric over the successful runs only must say beside it."""
    return f"{successes} of {n}"
