"""Behaviour of F, its Q16.16 twin, and the kernel's fractional ACK carry."""

from __future__ import annotations

import math

import pytest

from mltcp.core.aggressiveness import (
    FP_ONE,
    FP_SHIFT,
    PRESETS,
    Aggressiveness,
    FixedAggressiveness,
    preset,
    scale_acked,
)
from mltcp.core.errors import SpecError


def test_constants() -> None:
    assert FP_SHIFT == 16
    assert FP_ONE == 65536


@pytest.mark.parametrize(
    ("agg", "ratio", "expected"),
    [
        (Aggressiveness(), 0.0, 1.0),
        (Aggressiveness(), 0.5, 1.5),
        (Aggressiveness(), 1.0, 2.0),
        (Aggressiveness(), 1.7, 2.0),  # clamped above
        (Aggressiveness(), -0.3, 1.0),  # clamped below
        (Aggressiveness(slope=3.0, intercept=0.5), 0.5, 2.0),
        (Aggressiveness(slope=2.0, intercept=1.0, cap=2.5), 0.5, 2.0),  # below the cap
        (Aggressiveness(slope=2.0, intercept=1.0, cap=2.5), 0.9, 2.5),  # capped
        (Aggressiveness(slope=2.0, intercept=1.0, cap=2.5), 5.0, 2.5),
        (Aggressiveness(slope=0.0, intercept=1.0), 0.8, 1.0),
    ],
)
def test_float_f(agg: Aggressiveness, ratio: float, expected: float) -> None:
    assert agg(ratio) == pytest.approx(expected, abs=1e-12)


def test_presets() -> None:
    assert PRESETS["default"] == Aggressiveness(1.0, 1.0, None)
    standard = PRESETS["standard"]
    assert all(standard(r) == 1.0 for r in (-1.0, 0.0, 0.3, 1.0, 9.0))
    fixed = standard.to_fixed()
    assert all(fixed.f_fixed(b, 1000) == FP_ONE for b in (0, 1, 500, 999, 5000))
    assert preset("default") is PRESETS["default"]


def test_unknown_preset_names_choices() -> None:
    with pytest.raises(SpecError, match="^preset: .*default, standard"):
        preset("agressive")


def test_to_fixed_rounds_and_encodes_missing_cap_as_zero() -> None:
    assert Aggressiveness(1.0, 1.0).to_fixed() == FixedAggressiveness(FP_ONE, FP_ONE, 0)
    # round(0.1 * 65536) = 6554, 1.25 * 65536 = 81920, round(1.3 * 65536) = 85197
    fixed = Aggressiveness(slope=0.1, intercept=1.25, cap=1.3).to_fixed()
    assert fixed == FixedAggressiveness(6554, 81920, 85197)


@pytest.mark.parametrize(
    ("fixed", "bytes_in_iter", "budget", "expected"),
    [
        # default F: 1 + ratio
        (FixedAggressiveness(FP_ONE, FP_ONE, 0), 0, 1000, 65536),
        (FixedAggressiveness(FP_ONE, FP_ONE, 0), 500, 1000, 98304),  # 1.5
        (FixedAggressiveness(FP_ONE, FP_ONE, 0), 1000, 1000, 131072),  # 2.0
        (FixedAggressiveness(FP_ONE, FP_ONE, 0), 5000, 1000, 131072),  # ratio clamped to 1
        # ratio_fp = (1 << 16) // 3 = 21845: floor division, not rounding
        (FixedAggressiveness(FP_ONE, FP_ONE, 0), 1, 3, 65536 + 21845),
        # slope 0.1: slope_fp 6554; ratio 1/3 -> (6554 * 21845) >> 16 = 2184
        (FixedAggressiveness(6554, FP_ONE, 0), 1, 3, 65536 + 2184),
        # slope 3, ratio 7/10: ratio_fp = 458752 // 10 = 45875; (196608 * 45875) >> 16 = 137625
        (FixedAggressiveness(3 * FP_ONE, FP_ONE // 2, 0), 7, 10, 32768 + 137625),
        # cap 1.25 binds at ratio 0.5 (1.5 > 1.25) but not at ratio 0.2 (1.2)
        (FixedAggressiveness(FP_ONE, FP_ONE, 81920), 500, 1000, 81920),
        (FixedAggressiveness(FP_ONE, FP_ONE, 81920), 200, 1000, 65536 + 13107),
        # budget 0 (unknown) -> exactly 1.0 whatever the parameters
        (FixedAggressiveness(5 * FP_ONE, 2 * FP_ONE, 0), 12345, 0, FP_ONE),
        # largest budget: bytes << 16 must not lose precision
        (FixedAggressiveness(FP_ONE, FP_ONE, 0), (1 << 39) + 1, 1 << 40, 65536 + 32768),
    ],
)
def test_f_fixed_exact(
    fixed: FixedAggressiveness, bytes_in_iter: int, budget: int, expected: int
) -> None:
    assert fixed.f_fixed(bytes_in_iter, budget) == expected


@pytest.mark.parametrize(
    ("slope", "intercept", "cap"),
    [(1.0, 1.0, None), (0.5, 1.0, None), (1.0, 0.25, 1.0), (0.0, 1.0, None), (0.75, 2.0, 2.5)],
)
def test_fixed_agrees_with_float_on_dyadic_parameters(
    slope: float, intercept: float, cap: float | None
) -> None:
    """Exactly representable parameters and slope <= 1: error < 2/FP_ONE (two floors)."""
    agg = Aggressiveness(slope, intercept, cap)
    fixed = agg.to_fixed()
    budget = 10_000_000
    for b in range(0, 12_000_000, 7919):
        got = fixed.f_fixed(b, budget) / FP_ONE
        want = agg(b / budget)
        assert got <= want + 1e-12  # both floors round down
        assert abs(got - want) < 2 / FP_ONE


@pytest.mark.parametrize(
    ("slope", "intercept", "cap"),
    [(0.1, 1.0, None), (1.0, 1 / 3, None), (7.3, 0.9, None), (2.2, 1.1, 2.7), (64.0, 64.0, None)],
)
def test_fixed_agrees_with_float_in_general(
    slope: float, intercept: float, cap: float | None
) -> None:
    """Rounding each parameter (1/2 ulp) plus the ratio floor scaled by the slope and the
    final shift's floor bound the error by (2 + slope) / FP_ONE."""
    agg = Aggressiveness(slope, intercept, cap)
    fixed = agg.to_fixed()
    budget = 3_333_331
    for b in range(0, 4_000_000, 4099):
        err = fixed.f_fixed(b, budget) / FP_ONE - agg(b / budget)
        assert abs(err) < (2 + slope) / FP_ONE


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"slope": -1}, "slope"),
        ({"slope": 64.5}, "slope"),
        ({"slope": math.nan}, "slope"),
        ({"slope": math.inf}, "slope"),
        ({"slope": "1.0"}, "slope"),
        ({"intercept": 0}, "intercept"),
        ({"intercept": -2.0}, "intercept"),
        ({"intercept": 1e-9}, "intercept"),  # rounds to 0 in Q16.16
        ({"intercept": 65.0}, "intercept"),
        ({"intercept": math.nan}, "intercept"),
        ({"cap": 0.5}, "cap"),  # below intercept 1.0
        ({"cap": 129.0}, "cap"),
        ({"cap": math.inf}, "cap"),
        ({"cap": True}, "cap"),
    ],
)
def test_validation_errors_name_the_field(kwargs: dict[str, object], field: str) -> None:
    with pytest.raises(SpecError) as info:
        Aggressiveness(**kwargs)  # type: ignore[arg-type]
    message = str(info.value)
    assert message.startswith(f"{field}: ")
    assert info.value.field == field
    assert "\n" not in message
    assert info.value.fix  # every error says how to fix it


def test_slope_error_message_shape() -> None:
    with pytest.raises(SpecError) as info:
        Aggressiveness(slope=-1)
    assert str(info.value) == (
        "slope: must be >= 0 (got -1); use a non-negative slope, e.g. --slope 1.0"
    )


@pytest.mark.parametrize(
    "kwargs",
    [{"slope": 0.0}, {"slope": 64.0}, {"intercept": 64.0}, {"cap": 1.0}, {"cap": 128.0}],
)
def test_boundary_values_are_accepted(kwargs: dict[str, float]) -> None:
    Aggressiveness(**kwargs)


@pytest.mark.parametrize(
    ("args", "field"),
    [
        ((-1, FP_ONE, 0), "slope_fp"),
        ((FP_ONE, 0, 0), "intercept_fp"),
        ((FP_ONE, FP_ONE, FP_ONE - 1), "cap_fp"),
        ((1.5, FP_ONE, 0), "slope_fp"),
    ],
)
def test_fixed_validation(args: tuple[int, int, int], field: str) -> None:
    with pytest.raises(SpecError, match=f"^{field}: "):
        FixedAggressiveness(*args)


@pytest.mark.parametrize(("args", "field"), [((-1, 10), "bytes_in_iter"), ((1, -10), "budget")])
def test_f_fixed_rejects_negative(args: tuple[int, int], field: str) -> None:
    with pytest.raises(SpecError, match=f"^{field}: "):
        FixedAggressiveness(FP_ONE, FP_ONE).f_fixed(*args)


def test_scale_acked_identity_at_one() -> None:
    assert scale_acked(1448, FP_ONE, 0) == (1448, 0)
    assert scale_acked(0, FP_ONE, 0) == (0, 0)


def test_scale_acked_single_step() -> None:
    # 1449 * 1.5 = 2173.5 -> 2173 bytes now and half a byte (32768/65536) carried
    assert scale_acked(1449, 98304, 0) == (2173, 32768)
    assert scale_acked(1449, 98304, 32768) == (2174, 0)


@pytest.mark.parametrize(
    ("f", "acked", "n"),
    [(1.5, 1448, 1000), (1 + 1 / 3, 1448, 1000), (1.01, 1, 5000), (2.0, 1448, 100)],
)
def test_scale_acked_carry_sums_exactly(f: float, acked: int, n: int) -> None:
    f_fp = round(f * FP_ONE)
    frac = total = 0
    for _ in range(n):
        scaled, frac = scale_acked(acked, f_fp, frac)
        assert 0 <= frac < FP_ONE
        total += scaled
    assert total == (n * acked * f_fp) >> FP_SHIFT  # floor of the exact fixed-point product


def test_scale_acked_1000_acks_at_1_5() -> None:
    frac = total = 0
    for _ in range(1000):
        scaled, frac = scale_acked(1448, 98304, frac)
        total += scaled
    assert total == math.floor(1000 * 1448 * 1.5) == 2_172_000
    assert frac == 0


def test_scale_acked_carry_matters() -> None:
    """Why the carry exists: at F = 1.0001 a 1-byte ACK alone never gains a byte."""
    f_fp = round(1.0001 * FP_ONE)  # 65543
    assert scale_acked(1, f_fp, 0) == (1, 7)
    frac = total = 0
    for _ in range(100_000):
        scaled, frac = scale_acked(1, f_fp, frac)
        total += scaled
    assert total == (100_000 * f_fp) >> FP_SHIFT == 100_010


@pytest.mark.parametrize(
    ("args", "field"),
    [((-1, FP_ONE, 0), "acked"), ((1, -1, 0), "f_fp"), ((1, FP_ONE, FP_ONE), "frac")],
)
def test_scale_acked_validation(args: tuple[int, int, int], field: str) -> None:
    with pytest.raises(SpecError, match=f"^{field}: "):
        scale_acked(*args)
