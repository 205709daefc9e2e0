"""One F, everywhere it is evaluated.

F = intercept + slope * clamp(bytes_ratio, 0, 1), optionally capped, is defined once
(mltcp.core.aggressiveness) and evaluated in five places: the float form users
configure, the Q16.16 form the kernel runs (``mltcp_f_fixed`` in kernel/mltcp_f.h), its
vectorised twin over integer arrays (the DCQCN model's queue pairs), the float form
compiled by numba (the fluid model's engine) and ns-3's ``Aggressiveness::FFixed``.
This file checks the Python forms against each other on a grid that reaches the
parameter bounds; tests/test_kernel_abi.py runs the same grid through the kernel's
code and tests/test_ns3.py through ns-3's.
"""

from __future__ import annotations

import random

import numpy as np
import pytest

from mltcp.core.aggressiveness import (
    FP_ONE,
    MAX_BUDGET_BYTES,
    MAX_CAP,
    MAX_INTERCEPT,
    MAX_SLOPE,
    MIN_INTERCEPT,
    Aggressiveness,
    FixedAggressiveness,
    f_fixed,
    f_float,
)
from mltcp.lab.models import fluid_engine


def f_grid(n: int = 400, seed: int = 7) -> list[tuple[int, int, int, int, int]]:
    """(slope_fp, intercept_fp, cap_fp, bytes, budget) cases: the parameter bounds,
    ratios 0, mid, 1 and beyond, budgets up to the largest allowed, and random ones."""
    rng = random.Random(seed)
    slopes = [0.0, 1 / FP_ONE, 1.0, 4.0, 17.3, MAX_SLOPE]
    intercepts = [MIN_INTERCEPT, 0.25, 1.0, 3.5, MAX_INTERCEPT]
    caps = [None, 2.0, MAX_CAP]
    budgets = [1, 1448, 10_000_000, MAX_BUDGET_BYTES]
    cases = []
    for s in slopes:
        for i in intercepts:
            for c in caps:
                if c is not None and c < i:
                    continue
                fixed = Aggressiveness(s, i, c).to_fixed()
                g = rng.choice(budgets)
                for b in (0, g // 3, g - 1 if g > 1 else 0, g, 2 * g + 5):
                    cases.append((fixed.slope_fp, fixed.intercept_fp, fixed.cap_fp, b, g))
    while len(cases) < n:
        agg = Aggressiveness(rng.uniform(0, MAX_SLOPE), rng.uniform(MIN_INTERCEPT, 8),
                             rng.choice([None, rng.uniform(8, MAX_CAP)])).to_fixed()
        g = rng.randint(1, MAX_BUDGET_BYTES)
        cases.append((agg.slope_fp, agg.intercept_fp, agg.cap_fp, rng.randint(0, 2 * g), g))
    return cases


def test_the_fixed_point_form_on_ints_and_on_integer_arrays_agree() -> None:
    cases = f_grid()
    scalar = [FixedAggressiveness(s, i, c).f_fixed(b, g) for s, i, c, b, g in cases]
    cols = [np.array(col, dtype=np.int64) for col in zip(*cases, strict=True)]
    s, i, c, b, g = cols
    vector = f_fixed(b, g, s, i, c)
    assert vector.dtype == np.int64 and vector.tolist() == scalar
    # and never above what a u32 map field holds (the kernel stores F as __u32)
    assert max(scalar) < 2**32


@pytest.mark.parametrize(("slope", "intercept", "cap"), [
    (0.0, 1.0, None), (1.0, 1.0, None), (4.0, 0.25, 2.0), (MAX_SLOPE, MAX_INTERCEPT, MAX_CAP),
    (0.5, MIN_INTERCEPT, None)])
def test_the_float_forms_agree_and_track_the_fixed_point_one(slope: float, intercept: float,
                                                             cap: float | None) -> None:
    agg = Aggressiveness(slope, intercept, cap)
    ratios = np.array([-0.5, 0.0, 0.1, 1 / 3, 0.5, 0.999, 1.0, 1.7])
    vector = [f_float(r, slope, intercept, np.inf if cap is None else cap) for r in ratios]
    assert vector == [agg(r) for r in ratios]
    compiled = fluid_engine.compiled_f
    assert [compiled(r, slope, intercept, np.inf if cap is None else cap)
            for r in ratios] == vector
    fixed, budget = agg.to_fixed(), 1 << 30
    for r, f in zip(ratios, vector, strict=True):
        nbytes = round(min(max(r, 0.0), 1.0) * budget)
        assert fixed.f_fixed(nbytes, budget) / FP_ONE == pytest.approx(f, abs=slope / 2**15 + 2e-5)
