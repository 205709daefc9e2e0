"""What the DCQCN model runs with: the NIC's knob values, the switch's ECN marking, the step.

The model must validate what the tuner does to a real NIC, so its NIC parameters *are*
the knobs of :mod:`mltcp.core.dcqcn.knobs`: every default comes from that table (the mlx5
defaults a never-reconfigured ConnectX-5 reports), every override is range-checked
against it, and F reaches the model only through :class:`~mltcp.core.dcqcn.policy.DcqcnPolicy`
(:class:`ScaledKnobs`), exactly as the tuner writes it.

What the table cannot know (the switch, packet sizes, the network's delays, the time
step) is defined here, with the reason for each default next to it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from mltcp.core import validate
from mltcp.core.dcqcn.knobs import KNOB_BY_NAME
from mltcp.core.dcqcn.policy import DcqcnPolicy
from mltcp.core.errors import SpecError

# The knobs the model's reaction point (RP) and notification point (NP) act on. The
# others of the table (CNP DSCP/priority, the per-priority enables) change where CNPs
# travel, not what DCQCN does, and are not modelled.
MODEL_KNOBS: tuple[str, ...] = (
    "clamp_tgt_rate", "clamp_tgt_rate_after_time_inc", "rpg_time_reset", "rpg_byte_reset",
    "rpg_threshold", "rpg_max_rate", "rpg_ai_rate", "rpg_hai_rate", "rpg_gd",
    "rpg_min_dec_fac", "rpg_min_rate", "rate_to_set_on_first_cnp", "dce_tcp_g", "dce_tcp_rtt",
    "rate_reduce_monitor_period", "initial_alpha_value", "min_time_between_cnps",
)

MBPS = 1e6 / 8             # bytes per second in one Mb/s (the knobs' rate unit)
US = 1e-6                  # seconds in one microsecond (the knobs' time unit)

# RoCEv2 packets: 1024 B of payload (the RDMA MTU mlx5 picks on a 1500 B netdev MTU)
# plus Ethernet 14 + IPv4 20 + UDP 8 + BTH 12 + ICRC 4 bytes of headers. Counted like
# the TCP backends count 1514 B frames: without preamble, inter-frame gap and FCS.
RDMA_MTU_BYTES = 1024
ROCE_HEADER_BYTES = 58
# The scenario's queue is counted in full-size Ethernet frames
# (mltcp.lab.scenario.spec.FRAME_BYTES).
QUEUE_SLOT_BYTES = 1514

# The DCQCN paper's switch marking (Zhu et al., SIGCOMM'15, 40 Gbit/s links): RED on
# the instantaneous queue, no marks below Kmin = 5 KB, probability rising linearly to
# Pmax = 1 % at Kmax = 200 KB, every packet marked above. Thresholds are buffer bytes,
# i.e. time at the link rate, so the defaults scale them with the link's rate.
PAPER_LINK_BPS = 40e9
PAPER_KMIN_BYTES = 5_000.0
PAPER_KMAX_BYTES = 200_000.0
PAPER_PMAX = 0.01

# Propagation delay per link: the ns-3 backend's LINK_DELAY, so that both packet-level
# and DCQCN backends see the same base RTT (30 us across the dumbbell).
DEFAULT_LINK_DELAY_S = 5e-6

HYPER_INCREASE = ("linear", "constant")


def mlx5_defaults() -> dict[str, int]:
    """The table's default of every modelled knob."""
    out = {}
    for name in MODEL_KNOBS:
        default = KNOB_BY_NAME[name].default
        assert default is not None, f"the knob table lost the default of {name}"
        out[name] = default
    return out


def _positive(name: str, value: object, lo: float, hi: float, fix: str) -> float:
    return validate.number(value, name, lo, hi, fix=fix)


@dataclass(frozen=True)
class EcnMarking:
    """RED-style ECN marking of a switch queue, as DCQCN's switches are configured.

    ``kmin_bytes``/``kmax_bytes`` None: the paper's 5 KB / 200 KB at 40 Gbit/s, scaled
    to the link's rate (1 Gbit/s: 125 B / 5 KB), Kmin at least one RoCE packet and Kmax
    at least one packet above Kmin, so a queue of one packet is never marked and the
    ramp never collapses to a step.
    """

    kmin_bytes: float | None = None
    kmax_bytes: float | None = None
    pmax: float = PAPER_PMAX

    def __post_init__(self) -> None:
        for name in ("kmin_bytes", "kmax_bytes"):
            value = getattr(self, name)
            if value is not None:
                _positive(f"marking.{name}", value, 0.0, 1e9,
                          f"give bytes of queue, e.g. {name}=5000, or omit it for the "
                          "rate-scaled paper default")
        if self.kmin_bytes is not None and self.kmax_bytes is not None \
                and self.kmax_bytes <= self.kmin_bytes:
            raise SpecError("marking.kmax_bytes", f"{self.kmax_bytes:g} is not above kmin_bytes "
                            f"{self.kmin_bytes:g}", "give kmax_bytes > kmin_bytes")
        _positive("marking.pmax", self.pmax, 1e-6, 1.0, "give a probability, e.g. 0.01")

    def thresholds(self, capacity_bps: np.ndarray, packet_bytes: float
                   ) -> tuple[np.ndarray, np.ndarray]:
        """(Kmin, Kmax) in bytes for links of these rates (bits per second)."""
        scale = np.asarray(capacity_bps, dtype=float) / PAPER_LINK_BPS
        kmin = (np.full_like(scale, self.kmin_bytes) if self.kmin_bytes is not None
                else np.maximum(PAPER_KMIN_BYTES * scale, packet_bytes))
        kmax = (np.full_like(scale, self.kmax_bytes) if self.kmax_bytes is not None
                else np.maximum(PAPER_KMAX_BYTES * scale, kmin + packet_bytes))
        return kmin, np.maximum(kmax, kmin + 1.0)

    def to_dict(self) -> dict:
        return {"kmin_bytes": self.kmin_bytes, "kmax_bytes": self.kmax_bytes,
                "pmax": self.pmax, "default_rule": "paper 5 KB/200 KB/1 % at 40 Gbit/s, "
                "scaled with the link rate"}


@dataclass(frozen=True)
class ModelParams:
    """Everything the DCQCN dynamics depend on.

    ``knobs``: overrides of the mlx5 defaults (knob name -> value in the table's unit);
    every knob not named keeps the table's default.
    ``step_s``: the time step; None takes ``rate_reduce_monitor_period`` (4 us by
    default), the reaction point's own decision period: a flow is cut at most once per
    period, so a step of exactly that length never has to resolve two cuts, and at
    most one CNP per flow arrives in it whenever CNP pacing (2 us) is at least half
    of it.  Halving it changes the results little (a test checks this).
    ``link_delay_s``: propagation per link; a flow's feedback delay (ECN mark to CNP
    at the sender) is its path's round trip, ``feedback_delay_s`` overrides it.
    ``mtu_bytes``: RDMA payload per packet (headers: ``ROCE_HEADER_BYTES``).
    ``hyper_increase``: how hyper increase grows the target: ``"linear"`` adds
    ``i * rpg_hai_rate`` at its i-th event (the DCQCN paper, after QCN); ``"constant"``
    adds ``rpg_hai_rate`` each time, as the two public emulations of the mlx5 firmware
    do (ns-3 HPCC's "Mellanox version" of DCQCN, Google's isekai).  Which one the
    firmware does is not documented; with the mlx5 defaults a cut comes long before
    hyper increase gets far, and the two give nearly the same shares.
    """

    knobs: Mapping[str, int] = field(default_factory=dict)
    marking: EcnMarking = field(default_factory=EcnMarking)
    step_s: float | None = None
    link_delay_s: float = DEFAULT_LINK_DELAY_S
    feedback_delay_s: float | None = None
    mtu_bytes: int = RDMA_MTU_BYTES
    hyper_increase: str = "linear"

    def __post_init__(self) -> None:
        if not isinstance(self.knobs, Mapping):
            raise SpecError("knobs", f"{type(self.knobs).__name__} is not a mapping",
                            "give {knob name: value}, e.g. {'rpg_time_reset': 125}")
        for name, value in self.knobs.items():
            _check_knob(name, value)
        object.__setattr__(self, "knobs", dict(self.knobs))
        if not isinstance(self.marking, EcnMarking):
            raise SpecError("marking", f"{type(self.marking).__name__} is not an EcnMarking",
                            "build it with EcnMarking(kmin_bytes=..., kmax_bytes=..., pmax=...)")
        if self.step_s is not None:
            _positive("step_s", self.step_s, 1e-7, 1e-4,
                      "use a step of a few microseconds, e.g. 4e-6, or None")
        _positive("link_delay_s", self.link_delay_s, 0.0, 0.01, "use e.g. 5e-6 (5 us)")
        if self.feedback_delay_s is not None:
            _positive("feedback_delay_s", self.feedback_delay_s, 0.0, 0.01,
                      "use e.g. 30e-6, or None for the path's round trip")
        if not validate.is_integer(self.mtu_bytes) \
                or self.mtu_bytes not in (256, 512, 1024, 2048, 4096):
            raise SpecError("mtu_bytes", f"{self.mtu_bytes!r} is not an RDMA MTU",
                            "use 256, 512, 1024, 2048 or 4096")
        if self.hyper_increase not in HYPER_INCREASE:
            raise SpecError("hyper_increase", f"unknown rule {self.hyper_increase!r}",
                            f"use one of: {', '.join(HYPER_INCREASE)}")

    def value(self, name: str) -> int:
        """The knob's value in this model: the override, else the table's default."""
        if name not in MODEL_KNOBS:
            raise SpecError("knobs", f"{name!r} is not a modelled knob",
                            f"use one of: {', '.join(MODEL_KNOBS)}")
        return self.knobs.get(name, KNOB_BY_NAME[name].default)  # type: ignore[return-value]

    @property
    def all_knobs(self) -> dict[str, int]:
        return {name: self.value(name) for name in MODEL_KNOBS}

    @property
    def step(self) -> float:
        """The time step in seconds."""
        if self.step_s is not None:
            return float(self.step_s)
        return self.value("rate_reduce_monitor_period") * US

    @property
    def packet_bytes(self) -> int:
        """Bytes of one full packet on the wire."""
        return self.mtu_bytes + ROCE_HEADER_BYTES

    @property
    def wire_per_payload(self) -> float:
        return self.packet_bytes / self.mtu_bytes

    def to_dict(self) -> dict:
        return {"knobs": self.all_knobs, "knob_overrides": dict(self.knobs),
                "marking": self.marking.to_dict(), "step_s": self.step,
                "link_delay_s": self.link_delay_s, "feedback_delay_s": self.feedback_delay_s,
                "mtu_bytes": self.mtu_bytes, "packet_bytes": self.packet_bytes,
                "hyper_increase": self.hyper_increase}


def _check_knob(name: object, value: object) -> int:
    if not isinstance(name, str) or name not in MODEL_KNOBS:
        why = ("is not modelled (it changes where CNPs travel, not DCQCN's dynamics)"
               if isinstance(name, str) and name in KNOB_BY_NAME else "is not a DCQCN knob")
        raise SpecError(f"knobs.{name}", why,
                        f"use one of: {', '.join(MODEL_KNOBS)} (see `mltcp dcqcn knobs`)")
    k = KNOB_BY_NAME[name]
    if not validate.is_integer(value):
        raise SpecError(f"knobs.{name}", f"must be an integer (got {value!r})",
                        f"use a whole number in {k.range_text} {k.unit}")
    if not k.min <= value <= k.max:
        raise SpecError(f"knobs.{name}", f"{value} is outside {k.range_text} {k.unit}",
                        f"use a value in {k.range_text} (mlx5 default {k.default})")
    return value


class ScaledKnobs:
    """F -> the rate-increase knobs, vectorised, through the tuner's own policy.

    The policy quantises F to multiples of ``f_step`` and rounds each knob to an
    integer; this class asks it for every quantised F once (a table indexed by
    F / f_step) so that the model can look up thousands of flows per poll and still
    get, bit for bit, the values the tuner would write.
    """

    SCALED = ("rpg_ai_rate", "rpg_hai_rate", "rpg_time_reset", "rpg_byte_reset")

    def __init__(self, policy: DcqcnPolicy, baseline: Mapping[str, int], f_max: float) -> None:
        fix = "pass the largest F the aggressiveness can give"
        if validate.finite(f_max, "f_max", fix) <= 0:
            raise SpecError("f_max", f"{f_max!r} is not a positive number", fix)
        self.policy = policy
        self.baseline = {n: int(baseline[n]) for n in self.SCALED}
        top = max(1, math.floor(f_max / policy.f_step + 0.5)) + 1
        table = np.empty((top + 1, len(self.SCALED)))
        for k in range(top + 1):
            values = dict(self.baseline)
            values.update(policy.targets(self.baseline, max(k, 1) * policy.f_step))
            table[k] = [values[n] for n in self.SCALED]
        self.table = table

    def lookup(self, f: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(rpg_ai_rate Mb/s, rpg_hai_rate Mb/s, rpg_time_reset us, rpg_byte_reset bytes)
        at each F."""
        k = np.clip(np.floor(np.asarray(f) / self.policy.f_step + 0.5), 1,
                    len(self.table) - 1).astype(int)
        row = self.table[k]
        return row[..., 0], row[..., 1], row[..., 2], row[..., 3]
