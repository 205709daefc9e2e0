"""The aggressiveness function F and its Q16.16 fixed-point twin.

MLTCP multiplies a flow's window growth on every ACK by
``F(bytes_ratio) = intercept + slope * clamp(bytes_ratio, 0, 1)`` (optionally capped).
A job that has already sent most of its iteration's bytes grows faster, so jobs that
share a link drift apart until their communication phases interleave.

This module is the one definition of F.  The kernel has no floating point, so it
evaluates F in Q16.16 fixed point: the float :class:`Aggressiveness` is what users
configure; :class:`FixedAggressiveness` is what the eBPF program receives;
:func:`f_fixed` and :func:`scale_acked` are the *exact* integer operations the kernel
(``mltcp_f_fixed`` in kernel/mltcp_f.h) and the ns-3 classes (``Aggressiveness::FFixed``
in mltcp/lab/scenario/ns3/mltcp_tracker.h) perform, on Python ints or on numpy integer
arrays alike (the DCQCN model evaluates every queue pair at once); :func:`f_float` is the
float form, which the fluid model's compiled engine evaluates for every flow.  The parameter
bounds below are rendered into the ns-3 attribute checkers (``MLTCP_MAX_SLOPE`` ...),
and tests/test_aggressiveness.py evaluates F through all of these and compares them.

Ranges are bounded so that the kernel's u64 arithmetic cannot overflow: a budget of at
most 2**40 bytes shifted left by 16 is below 2**56, and slope_fp * ratio_fp is at most
2**22 * 2**16 = 2**38.
"""

from __future__ import annotations

from dataclasses import dataclass

from mltcp.core import validate
from mltcp.core.errors import SpecError

FP_SHIFT = 16
FP_ONE = 1 << FP_SHIFT
_FP_MASK = FP_ONE - 1
MAX_BUDGET_BYTES = 1 << 40

MAX_SLOPE = 64.0
MAX_INTERCEPT = 64.0
MAX_CAP = 128.0
MIN_INTERCEPT = 1 / FP_ONE       # below it the intercept rounds to 0 and F(0) would stall


@dataclass(frozen=True)
class FixedAggressiveness:
    """F in Q16.16 fixed point, exactly as the eBPF program stores and evaluates it.

    ``cap_fp == 0`` means "no cap", because the kernel map has no room for None.
    """

    slope_fp: int
    intercept_fp: int
    cap_fp: int = 0

    def __post_init__(self) -> None:
        # Validated here too because the kernel map may be filled from these directly.
        for name in ("slope_fp", "intercept_fp", "cap_fp"):
            if not validate.is_integer(getattr(self, name)):
                raise SpecError(
                    name, f"must be an integer (got {getattr(self, name)!r})",
                    "build it with Aggressiveness(...).to_fixed()",
                )
        if not 0 <= self.slope_fp <= int(MAX_SLOPE) * FP_ONE:
            raise SpecError(
                "slope_fp", f"must be in [0, {int(MAX_SLOPE) * FP_ONE}] (got {self.slope_fp})",
                "use a slope between 0 and 64",
            )
        if not 1 <= self.intercept_fp <= int(MAX_INTERCEPT) * FP_ONE:
            raise SpecError(
                "intercept_fp",
                f"must be in [1, {int(MAX_INTERCEPT) * FP_ONE}] (got {self.intercept_fp})",
                "use an intercept between 1/65536 and 64",
            )
        if self.cap_fp != 0 and not self.intercept_fp <= self.cap_fp <= int(MAX_CAP) * FP_ONE:
            raise SpecError(
                "cap_fp",
                f"must be 0 (no cap) or in [intercept_fp, {int(MAX_CAP) * FP_ONE}] "
                f"(got {self.cap_fp})",
                "use a cap between the intercept and 128, or no cap",
            )

    def f_fixed(self, bytes_in_iter: int, budget: int) -> int:
        """F(bytes_in_iter / budget) in Q16.16, bit-identical to the kernel.

        An unknown budget (0) yields exactly 1.0 so that the flow behaves like the
        unmodified congestion control while the budget is still being learned.
        """
        for field, value in (("bytes_in_iter", bytes_in_iter), ("budget", budget)):
            validate.at_least(value, field, 0, "pass a non-negative integer")
        if budget == 0:
            return FP_ONE
        return int(f_fixed(bytes_in_iter, budget, self.slope_fp, self.intercept_fp,
                           self.cap_fp))


def f_fixed(bytes_in_iter, budget, slope_fp, intercept_fp, cap_fp):  # type: ignore[no-untyped-def]
    """F in Q16.16 after ``bytes_in_iter`` of a ``budget`` (> 0): the kernel's integer
    operations, step for step.  Written with operators only, so that it works on Python
    ints and, element-wise, on numpy integer arrays (broadcast together) without this
    module importing numpy: ``min``/``where`` become multiplications by a comparison.
    """
    ratio_fp = (bytes_in_iter << FP_SHIFT) // budget
    ratio_fp = ratio_fp - (ratio_fp - FP_ONE) * (ratio_fp > FP_ONE)      # min(ratio, 1)
    f = intercept_fp + ((slope_fp * ratio_fp) >> FP_SHIFT)
    return f - (f - cap_fp) * ((cap_fp > 0) & (f > cap_fp))             # cap, 0 = none


def f_float(ratio: float, slope: float, intercept: float, cap: float) -> float:
    """F in floating point for one ratio (``cap`` is +inf where there is none):
    ``min(intercept + slope * clamp(ratio, 0, 1), cap)``.  Plain arithmetic, no numpy:
    :meth:`Aggressiveness.__call__` uses it, and the fluid model's compiled engine
    (:mod:`mltcp.lab.models.fluid_engine`) compiles this very function with numba."""
    f = intercept + slope * min(max(ratio, 0.0), 1.0)
    return f if f < cap else cap


@dataclass(frozen=True)
class Aggressiveness:
    """User-facing F: ``intercept + slope * clamp(ratio, 0, 1)``, then ``min(cap)``.

    The defaults (slope 1, intercept 1) double the growth rate by the end of an
    iteration, which is the MLTCP paper's linear choice.
    """

    slope: float = 1.0
    intercept: float = 1.0
    cap: float | None = None

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> None:
        """Reject parameters the kernel cannot represent or that would stall a flow."""
        slope = validate.finite(self.slope, "slope", "use a number such as --slope 1.0")
        if slope < 0:
            raise SpecError(
                "slope", f"must be >= 0 (got {slope:g})",
                "use a non-negative slope, e.g. --slope 1.0",
            )
        if slope > MAX_SLOPE:
            raise SpecError(
                "slope", f"must be <= {MAX_SLOPE:g} (got {slope:g})",
                "use a slope of at most 64, e.g. --slope 1.0",
            )
        intercept = validate.finite(self.intercept, "intercept",
                                    "use a number such as --intercept 1.0")
        # Below 1/FP_ONE the intercept rounds to 0 in Q16.16 and F(0) would freeze the window.
        if intercept <= 0 or round(intercept * FP_ONE) < round(MIN_INTERCEPT * FP_ONE):
            raise SpecError(
                "intercept", f"must be > 0 and at least 1/{FP_ONE} (got {intercept:g})",
                "use a positive intercept, e.g. --intercept 1.0",
            )
        if intercept > MAX_INTERCEPT:
            raise SpecError(
                "intercept", f"must be <= {MAX_INTERCEPT:g} (got {intercept:g})",
                "use an intercept of at most 64, e.g. --intercept 1.0",
            )
        if self.cap is None:
            return
        cap = validate.finite(self.cap, "cap", "use a number such as --cap 2.0, or omit --cap")
        if cap < intercept:
            raise SpecError(
                "cap", f"must be >= intercept {intercept:g} (got {cap:g})",
                f"use a cap of at least {intercept:g}, or omit --cap",
            )
        if cap > MAX_CAP:
            raise SpecError(
                "cap", f"must be <= {MAX_CAP:g} (got {cap:g})",
                "use a cap of at most 128, or omit --cap",
            )

    def __call__(self, ratio: float) -> float:
        """F at ``ratio``; the ratio is clamped because a job can overshoot its budget."""
        return f_float(ratio, self.slope, self.intercept,
                       self.cap if self.cap is not None else float("inf"))

    def to_fixed(self) -> FixedAggressiveness:
        """Round every parameter to Q16.16; a missing cap becomes 0 (the kernel's 'no cap')."""
        return FixedAggressiveness(
            slope_fp=round(self.slope * FP_ONE),
            intercept_fp=round(self.intercept * FP_ONE),
            cap_fp=0 if self.cap is None else round(self.cap * FP_ONE),
        )


PRESETS: dict[str, Aggressiveness] = {
    "default": Aggressiveness(1.0, 1.0, None),
    # F == 1 everywhere: the flow behaves exactly like the unmodified algorithm.
    "standard": Aggressiveness(0.0, 1.0, None),
}


def preset(name: str) -> Aggressiveness:
    """Look up a preset by name, with an actionable error for a typo."""
    try:
        return PRESETS[name]
    except KeyError:
        choices = ", ".join(sorted(PRESETS))
        raise SpecError("preset", f"unknown preset {name!r}", f"use one of: {choices}") from None


def scale_acked(acked: int, f_fp: int, frac: int) -> tuple[int, int]:
    """Scale ``acked`` by F, carrying the sub-byte remainder to the next ACK.

    Without the carry, ``floor(acked * F)`` would lose up to one byte per ACK and a
    flow with F slightly above 1 would grow no faster than plain TCP. Returns
    ``(scaled_bytes, new_frac)`` where ``new_frac`` is the Q16.16 fraction to store
    per flow; the sum of scaled bytes over many ACKs equals ``floor(total * F)``.
    """
    for field, value in (("acked", acked), ("f_fp", f_fp)):
        validate.at_least(value, field, 0, "pass a non-negative integer")
    if not 0 <= frac <= _FP_MASK:
        raise SpecError(
            "frac", f"must be in [0, {_FP_MASK}] (got {frac})",
            "pass the fraction returned by the previous call, starting at 0",
        )
    s = acked * f_fp + frac
    return s >> FP_SHIFT, s & _FP_MASK
