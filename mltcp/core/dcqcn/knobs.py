"""The mlx5 DCQCN knob table: the one place that knows every knob's unit, range and default.

Both driver layouts (MLNX_OFED sysfs and upstream mlx5 debugfs), the range checks, the
policy, ``mltcp dcqcn knobs`` and the table in ``rdma/README.md`` are all derived from
:data:`KNOBS`, so a correction made here reaches all of them.

Every figure carries its source (see :data:`SOURCES`). Where no public source gave a
range, the range is the firmware register width from ``mlx5_ifc.h`` or a conservative
bound chosen here, and the ``source`` column says so: the tuner only ever *writes* the
knobs it scales, so those bounds matter for three knobs and only as safety rails.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from mltcp.core import validate
from mltcp.core.errors import SpecError

U32_MAX = (1 << 32) - 1
# The knob registers take Mb/s up to the port's line rate, which this table cannot know;
# 400 Gb/s is the fastest ConnectX Ethernet port, so nothing legal is rejected.
LINE_RATE_MBPS = 400_000

SOURCES: dict[str, str] = {
    "cx5": "`mlxconfig -d /dev/mst/mt4121_pciconf0 q` on a ConnectX-5 Ex, firmware 16.27.2008 "
           "(never reconfigured), quoted on xdp-newbies@vger.kernel.org, 2020-06-22, thread "
           "\"CQ error on CQN 0x43e, syndrome 0x1\"",
    "doca": "NVIDIA, \"DCQCN CC Parameters\", DOCA SDK documentation "
            "(networking-docs.nvidia.com/doca/archive/3-4-0/dcqcn-cc-parameters), "
            "\"supported by ConnectX-4 and later\"",
    "mstflint": "Mellanox/mstflint, mlxconfig/mlxcfg_ui.cpp, help text of an older mlxconfig "
                "(ConnectX-3/4 era; its defaults are not mlx5's and are not used here)",
    "ifc": "Linux include/linux/mlx5/mlx5_ifc.h, struct mlx5_ifc_cong_control_r_roce_ecn_rp_bits "
           "and ..._np_bits (register field widths)",
    "cong.c": "Linux drivers/infiniband/hw/mlx5/cong.c, mlx5_ib_dbg_cc_name[] "
              "(debugfs file names and the firmware field each one maps to)",
    "ofed": "MLNX_OFED mlx5_core en_sysfs.c, mlx5e_fill_rp_attributes() / "
            "mlx5e_fill_np_attributes() / mlx5e_fill_attributes() (sysfs file names)",
    "ours": "chosen here; no public range found (see the knob's note)",
}


class Side(StrEnum):
    """Which end of DCQCN a knob belongs to."""

    RP = "rp"  # reaction point: the sender, which cuts and regrows its rate
    NP = "np"  # notification point: the receiver, which sends CNPs


class Scaling(StrEnum):
    """How the MLTCP policy may scale a knob by F (see :mod:`mltcp.core.dcqcn.policy`)."""

    RATES = "rates"  # value * F: a bigger additive / hyper increase step
    TIMER = "timer"  # value / F: a shorter rate-increase timer, i.e. more increase events


@dataclass(frozen=True)
class Knob:
    """One DCQCN knob of an mlx5 NIC.

    ``sysfs`` is the path below ``/sys/class/net/<if>/ecn/`` (MLNX_OFED) and ``debugfs``
    the file name in ``/sys/kernel/debug/mlx5/<pci-bdf>/cc_params/`` (upstream); None
    where that layout has no such file. ``default`` is None where no source gave one.
    """

    name: str
    side: Side
    unit: str
    min: int
    max: int
    default: int | None
    sysfs: str | None
    debugfs: str | None
    scaling: Scaling | None
    source: str
    about: str

    def __post_init__(self) -> None:
        if not 0 <= self.min <= self.max <= U32_MAX:
            raise ValueError(f"{self.name}: bad range {self.min}..{self.max}")
        if self.default is not None and not self.min <= self.default <= self.max:
            raise ValueError(f"{self.name}: default {self.default} outside its range")

    @property
    def range_text(self) -> str:
        hi = "u32 max" if self.max == U32_MAX else str(self.max)
        return f"{self.min}..{hi}"

    def check(self, value: object) -> int:
        """Return ``value`` if it is an integer in range, else a SpecError naming the knob."""
        if not validate.is_integer(value):
            raise SpecError(self.name, f"must be an integer (got {value!r})",
                            f"use a whole number in {self.range_text} {self.unit}")
        if not self.min <= value <= self.max:
            raise SpecError(self.name, f"{value} is outside {self.range_text} {self.unit}",
                            f"use a value in {self.range_text}; nothing was written")
        return value


def _rp(name: str, unit: str, lo: int, hi: int, default: int | None, source: str, about: str,
        *, scaling: Scaling | None = None, debugfs: str | None = "") -> Knob:
    return Knob(name, Side.RP, unit, lo, hi, default, f"roce_rp/{name}",
                f"rp_{name.removeprefix('rpg_')}" if debugfs == "" else debugfs,
                scaling, source, about)


def _enables(side: Side) -> list[Knob]:
    """The per-priority enables, which only MLNX_OFED's sysfs exposes."""
    return [Knob(f"{side}_enable_{prio}", side, "flag", 0, 1, 1, f"roce_{side}/enable/{prio}",
                 None, None, "default: cx5 (ROCE_CC_PRIO_MASK_P1 = 255, every priority on); "
                 "range: ofed (0/1)",
                 f"DCQCN {side.upper()} on/off per 802.1p priority (one file per priority)")
            for prio in range(8)]


KNOBS: tuple[Knob, ...] = (
    _rp("clamp_tgt_rate", "flag", 0, 1, 0, "default: cx5; range: ifc (1 bit)",
        "on each CNP, also set the target rate to the current rate"),
    _rp("clamp_tgt_rate_after_time_inc", "flag", 0, 1, 1, "default: cx5; range: ifc (1 bit)",
        "after a timer-driven increase, clamp the target rate to the current rate",
        debugfs="rp_clamp_tgt_rate_ati"),
    _rp("rpg_time_reset", "us", 1, 131_071, 300,
        "default: cx5; range: ours (register is u32, ifc; 131071 is the bound doca gives "
        "dce_tcp_rtt; 0 would be no timer)",
        "rate-increase timer: period between increase events while no CNP arrives",
        scaling=Scaling.TIMER),
    _rp("rpg_byte_reset", "bytes", 0, U32_MAX, 32_767,
        "default: cx5; range: ifc (u32); 0 disables the byte counter (mstflint)",
        "rate-increase byte counter: data sent between increase events (0 = off)",
        scaling=Scaling.TIMER),
    _rp("rpg_threshold", "events", 0, 31, 1, "default: cx5; range: mstflint",
        "increase events per stage before fast recovery moves to additive, then hyper"),
    _rp("rpg_max_rate", "Mb/s", 0, LINE_RATE_MBPS, 0,
        "default: cx5; range: mstflint (0 = line rate) and ours (400000)",
        "rate above which the flow is no longer rate limited (0 = line rate)"),
    _rp("rpg_ai_rate", "Mb/s", 1, LINE_RATE_MBPS, 5,
        "default: cx5; range: ours (1..line rate; register u32, ifc)",
        "additive increase step of the target rate", scaling=Scaling.RATES),
    _rp("rpg_hai_rate", "Mb/s", 1, LINE_RATE_MBPS, 50,
        "default: cx5; range: ours (1..line rate; register u32, ifc)",
        "hyper increase step of the target rate", scaling=Scaling.RATES),
    _rp("rpg_gd", "log2", 0, 15, 11, "default: cx5; range: mstflint",
        "rate cut per CNP is alpha / 2^rpg_gd (alpha in 1/1024 units)"),
    _rp("rpg_min_dec_fac", "%", 0, 100, 50, "default: cx5, doca; range: doca",
        "largest cut in one CNP event, as a percentage of the current rate"),
    _rp("rpg_min_rate", "Mb/s", 1, LINE_RATE_MBPS, 1, "default: cx5, doca; range: doca",
        "lowest rate a flow is cut to"),
    _rp("rate_to_set_on_first_cnp", "Mb/s", 0, LINE_RATE_MBPS, 0,
        "default: cx5, doca; range: doca", "rate set on a flow's first CNP (0 = line rate)"),
    _rp("dce_tcp_g", "1/1024", 0, 1023, 1019, "default: cx5, doca; range: doca",
        "alpha EWMA gain g"),
    _rp("dce_tcp_rtt", "us", 1, 131_071, 1, "default: cx5, doca; range: doca",
        "alpha update period"),
    _rp("rate_reduce_monitor_period", "us", 1, U32_MAX, 4, "default: cx5, doca; range: doca",
        "least time between two rate cuts of one flow"),
    _rp("initial_alpha_value", "1/1024", 1, 1023, 1023, "default: cx5, doca; range: doca",
        "alpha on a flow's first CNP"),
    Knob("min_time_between_cnps", Side.NP, "us", 0, U32_MAX, 2, "roce_np/min_time_between_cnps",
         "np_min_time_between_cnps", None,
         "default: cx5 (upstream commit 'IB/mlx5: Add np_min_time_between_cnps and "
         "rp_max_rate debug params' says 0); range: ifc (u32)",
         "CNP pacing: least time between CNPs the port sends"),
    Knob("cnp_dscp", Side.NP, "DSCP", 0, 63, 48, "roce_np/cnp_dscp", "np_cnp_dscp", None,
         "default: cx5; range: ifc (6 bits)", "DSCP of the CNPs sent"),
    Knob("cnp_802p_prio", Side.NP, "PCP", 0, 7, 6, "roce_np/cnp_802p_prio", "np_cnp_prio",
         None, "default: cx5; range: ifc (3 bits)", "802.1p priority of the CNPs sent"),
    Knob("cnp_prio_mode", Side.NP, "flag", 0, 1, None, None, "np_cnp_prio_mode", None,
         "default: none found; range: ifc (1 bit)",
         "debugfs only: CNP priority mode; writing np_cnp_prio resets it to 0 (cong.c)"),
    *_enables(Side.RP),
    *_enables(Side.NP),
)

KNOB_BY_NAME: dict[str, Knob] = {k.name: k for k in KNOBS}
assert len(KNOB_BY_NAME) == len(KNOBS), "duplicate knob name"


def knob(name: str) -> Knob:
    """Look a knob up by name, with an actionable error for a typo."""
    try:
        return KNOB_BY_NAME[name]
    except KeyError:
        raise SpecError("knob", f"unknown DCQCN knob {name!r}",
                        "see `mltcp dcqcn knobs` for the names") from None


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def markdown_table() -> str:
    """The knob table as Markdown (``rdma/README.md`` embeds exactly this text)."""
    rows = ["| knob | side | unit | range | mlx5 default | policy scales | MLNX_OFED sysfs "
            "(`/sys/class/net/<if>/ecn/`) | upstream debugfs (`.../mlx5/<bdf>/cc_params/`) "
            "| source | what it does |",
            "|---|---|---|---|---|---|---|---|---|---|"]
    for k in KNOBS:
        if k.name.endswith(tuple(f"_enable_{p}" for p in range(1, 8))):
            continue  # one row stands for the eight per-priority enables
        name = k.name if "_enable_" not in k.name else k.name.replace("_0", "_0..7")
        sysfs = k.sysfs.replace("/enable/0", "/enable/0..7") if k.sysfs else "-"
        scaled = {Scaling.RATES: "x F (rates mode)", Scaling.TIMER: "/ F (timer mode)",
                  None: "no"}[k.scaling]
        rows.append(
            f"| `{name}` | {k.side} | {k.unit} | {k.range_text} | "
            f"{'-' if k.default is None else k.default} | {scaled} | "
            f"{'`' + sysfs + '`' if k.sysfs else '-'} | "
            f"{'`' + k.debugfs + '`' if k.debugfs else '-'} | {_cell(k.source)} | "
            f"{_cell(k.about)} |")
    return "\n".join(rows) + "\n"


def text_table(values: dict[str, int] | None = None) -> str:
    """A terminal table of every knob; with ``values``, their current values too."""
    head = ["knob", "side", "unit", "range", "default", "scaled"]
    if values is not None:
        head.insert(1, "value")
    lines = []
    for k in KNOBS:
        if values is not None and k.name not in values:
            continue
        name = k.name
        if values is None and "_enable_" in name:  # one row for the eight priorities
            if not name.endswith("_0"):
                continue
            name = name.replace("_0", "_0..7")
        row = [name, k.side.value, k.unit, k.range_text,
               "-" if k.default is None else str(k.default),
               k.scaling.value if k.scaling else ""]
        if values is not None:
            v = values[k.name]
            row.insert(1, f"{v}{'*' if k.default is not None and v != k.default else ''}")
        lines.append(row)
    widths = [max(len(r[i]) for r in [head, *lines]) for i in range(len(head))]
    out = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip()
           for r in [head, *lines]]
    return "\n".join(out) + "\n"
