"""How F(bytes_ratio) becomes knob values: DCQCN's rate increase scaled by F.

The design's rule for DCQCN is that the *rate increase* grows F times faster while the
multiplicative decrease on CNPs stays standard. The firmware offers two equivalent
handles, and both are offered as modes:

* ``timer`` (default): both sources of increase events are divided by F, the rate-increase
  timer ``rpg_time_reset`` and the byte counter ``rpg_byte_reset`` (left off where it
  is 0), so increase events come F times as often, fast recovery included. The timer
  is the knob the MLTCP thesis turned by hand (its testbed's DCQCN timer, 125 -> 100 us,
  made one job more aggressive, section 3.2); the byte counter must follow it, or a
  flow's byte-driven events (every 32 KB by default, ~0.3 ms at 1 Gbit/s) keep coming
  at the standard pace and F below 1 cannot hold a starting job back.
* ``rates``: the additive and hyper increase steps ``rpg_ai_rate`` and
  ``rpg_hai_rate`` are multiplied by F. The increase events keep their pace; each one
  adds F times more rate.

Timer mode is the default because it is the one that moves bandwidth: every increase
event takes a rate halfway back to its target whatever F is, and with CNP cuts every
few tens of microseconds restarting the counters, a flow sees few events, so scaling
their size (rates) barely moves shares while scaling their number does (the DCQCN
model, ``rdma/README.md``: on the compatible pair rates mode stays at 1.36x the
dedicated iteration time, timer mode reaches ~1.06x).

F is quantised to multiples of ``f_step`` before it is applied. F grows continuously
while an iteration's bytes go out; without the quantisation every poll would issue a
firmware command. With the default step of 1/8 a knob changes at most
``slope / f_step`` times per iteration (14 times for the paper preset), and only when
the rounded value of the knob actually changes.

The values are scaled from a *baseline*: by default the knob values found when the tuner
started (the site's own DCQCN tuning stays the F = 1 point), or the mlx5 defaults.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum

from mltcp.core import validate
from mltcp.core.aggressiveness import Aggressiveness
from mltcp.core.dcqcn.knobs import KNOB_BY_NAME, Scaling
from mltcp.core.errors import SpecError


class Mode(StrEnum):
    RATES = "rates"
    TIMER = "timer"


MODE_KNOBS: dict[Mode, tuple[str, ...]] = {
    Mode.RATES: tuple(k.name for k in KNOB_BY_NAME.values() if k.scaling is Scaling.RATES),
    Mode.TIMER: tuple(k.name for k in KNOB_BY_NAME.values() if k.scaling is Scaling.TIMER),
}
DEFAULT_F_STEP = 0.125
# How often the tuner reads the NIC's byte counter and re-evaluates F: a few hundred
# firmware counter queries a second.  The DCQCN model polls at the same period.
DEFAULT_POLL_NS = 2_000_000


@dataclass(frozen=True)
class Preset:
    name: str
    agg: Aggressiveness
    about: str


PRESETS: dict[str, Preset] = {p.name: p for p in (
    Preset("mlx5-default", Aggressiveness(slope=0.0, intercept=1.0),
           "F = 1 always: the knobs stay at the baseline (with --base mlx5: the mlx5 "
           "defaults), so the NIC runs standard DCQCN; for A/B runs"),
    Preset("paper", Aggressiveness(slope=1.75, intercept=0.25),
           "F = 0.25 + 1.75 * bytes_ratio: a job starts its iteration 4x gentler than "
           "standard DCQCN and ends it 2x more aggressive (slope/intercept = 7, a fast "
           "drift towards interleaving)"),
    Preset("tuned", Aggressiveness(slope=1.0, intercept=1.0),
           "F = 1 + bytes_ratio: never gentler than the NIC's own DCQCN, up to 2x at the "
           "end of the iteration, so a tuned host never yields bandwidth to an untuned "
           "one; the project's TCP default"),
)}


def preset(name: str) -> Preset:
    try:
        return PRESETS[name]
    except KeyError:
        raise SpecError("preset", f"unknown DCQCN preset {name!r}",
                        f"use one of: {', '.join(PRESETS)}") from None


def _round_half_up(x: float) -> int:
    """Round like a person (2.5 -> 3), not like Python's banker's rounding (2.5 -> 2)."""
    return math.floor(x + 0.5)


@dataclass(frozen=True)
class DcqcnPolicy:
    """Knob targets for a given F."""

    agg: Aggressiveness
    mode: Mode = Mode.TIMER
    f_step: float = DEFAULT_F_STEP

    def __post_init__(self) -> None:
        try:
            object.__setattr__(self, "mode", Mode(self.mode))
        except ValueError:
            raise SpecError("mode", f"unknown mode {self.mode!r}",
                            "use timer (divide rpg_time_reset and rpg_byte_reset by F) "
                            "or rates (scale rpg_ai_rate/rpg_hai_rate by F)") from None
        validate.number(self.f_step, "f_step", 1 / 1024, 1, fix="use e.g. --f-step 0.125")

    @property
    def knobs(self) -> tuple[str, ...]:
        """The knobs this policy writes."""
        return MODE_KNOBS[self.mode]

    def quantize(self, f: float) -> float:
        """F rounded to the nearest multiple of ``f_step`` (never below one step)."""
        return max(1, _round_half_up(f / self.f_step)) * self.f_step

    def target(self, name: str, base: int, f_q: float) -> int:
        """The value of knob ``name`` at (already quantised) F, clamped to its range."""
        k = KNOB_BY_NAME[name]
        value = base * f_q if k.scaling is Scaling.RATES else base / f_q
        # A period or byte count that is on stays on (>= 1): 0 would turn it off.
        floor = max(k.min, 1) if base > 0 else k.min
        return min(k.max, max(floor, _round_half_up(value)))

    def targets(self, baseline: Mapping[str, int], f: float) -> dict[str, int]:
        """Every knob of this mode at F (quantised here)."""
        f_q = self.quantize(f)
        return {name: self.target(name, baseline[name], f_q) for name in self.knobs}
