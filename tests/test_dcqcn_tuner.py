"""The DCQCN tuner on real directory trees shaped like both mlx5 driver layouts.

Every test builds a tree under tmp_path with the files the drivers create (MLNX_OFED
sysfs: ``sys/class/net/<if>/ecn/roce_rp|roce_np``; upstream debugfs:
``sys/kernel/debug/mlx5/<bdf>/cc_params``) and checks files byte for byte.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from mltcp.cli import main as cli_main
from mltcp.core.aggressiveness import Aggressiveness
from mltcp.core.dcqcn.knobs import KNOB_BY_NAME, KNOBS, SOURCES, markdown_table
from mltcp.core.dcqcn.policy import DcqcnPolicy, Mode, preset
from mltcp.core.errors import CapabilityError, MltcpError, SpecError
from mltcp.core.iteration import IterationTracker
from mltcp.host.dcqcn.backends import (
    DryRunBackend,
    MlnxSysfsBackend,
    Mlx5DebugfsBackend,
    probe,
)
from mltcp.host.dcqcn.counters import (
    DeltaSampler,
    EthtoolCounter,
    FileCounter,
    counter_from_spec,
)
from mltcp.host.dcqcn.ethtool import EthtoolError, EthtoolStats
from mltcp.host.dcqcn.snapshot import StateFile, load, restore, restore_file
from mltcp.host.dcqcn.tuner import IterationStatus, Tuner, TunerConfig

REPO = Path(__file__).resolve().parent.parent
IFACE = "eth0"
BDF = "0000:3b:00.0"
MS = 1_000_000
PAPER = preset("paper").agg  # F = 0.25 + 1.75 * ratio


# -- trees shaped like the drivers' --------------------------------------------------

def _device(root: Path, iface: str = IFACE, bdf: str = BDF) -> None:
    """/sys/class/net/<if>/device -> ../../../devices/pci0000:00/<bdf>, as on a host."""
    dev = root / "sys/devices/pci0000:00" / bdf
    (dev / "infiniband" / "mlx5_0").mkdir(parents=True, exist_ok=True)
    net = root / "sys/class/net" / iface
    net.mkdir(parents=True, exist_ok=True)
    (net / "device").symlink_to(Path("../../../devices/pci0000:00") / bdf)
    counters = root / "sys/class/infiniband/mlx5_0/ports/1/counters"
    counters.mkdir(parents=True, exist_ok=True)
    (counters / "port_xmit_data").write_text("0\n")


def make_sysfs(root: Path, iface: str = IFACE) -> Path:
    """MLNX_OFED: one file per knob under ecn/roce_rp and ecn/roce_np, enables 0..7."""
    ecn = root / "sys/class/net" / iface / "ecn"
    for k in KNOBS:
        if k.sysfs:
            (ecn / k.sysfs).parent.mkdir(parents=True, exist_ok=True)
            (ecn / k.sysfs).write_text(f"{k.default}\n")
    _device(root, iface)
    return ecn


def make_debugfs(root: Path) -> Path:
    """Upstream mlx5_ib: cc_params/rp_* and np_* under debugfs, found through the netdev."""
    cc = root / "sys/kernel/debug/mlx5" / BDF / "cc_params"
    cc.mkdir(parents=True)
    for k in KNOBS:
        if k.debugfs:
            (cc / k.debugfs).write_text(f"{0 if k.default is None else k.default}\n")
    _device(root)
    return cc


LAYOUTS: dict[str, Callable[[Path], Path]] = {"sysfs": make_sysfs, "debugfs": make_debugfs}


def tree(root: Path) -> dict[str, bytes]:
    """Every regular file under root, byte for byte (symlinks not followed)."""
    out = {}
    for d, _, files in os.walk(root):
        for f in files:
            p = Path(d) / f
            if not p.is_symlink():
                out[str(p.relative_to(root))] = p.read_bytes()
    return out


def knob_file(root: Path, name: str) -> Path:
    backend = probe(root, IFACE)
    path = backend.path(KNOB_BY_NAME[name])
    assert path is not None
    return path


class Clock:
    def __init__(self) -> None:
        self.now = 1_000 * MS  # never 0: the tracker reads 0 as "no traffic yet"

    def __call__(self) -> int:
        return self.now

    def advance(self, ns: int) -> None:
        self.now += ns


class Feed:
    """A byte counter the test moves by hand."""

    description = "test feed"

    def __init__(self) -> None:
        self.total = 0

    def read(self) -> int:
        return self.total


def make_tuner(root: Path, state_dir: Path, agg: Aggressiveness = PAPER, *,
               mode: Mode = Mode.RATES, advise: bool = False, budget: int = 1_000_000,
               restore_foreign: bool = False, log: list[str] | None = None,
               statuses: list[IterationStatus] | None = None) -> tuple[Tuner, Feed, Clock]:
    feed, clock = Feed(), Clock()
    config = TunerConfig(budget=budget, policy=DcqcnPolicy(agg, mode=mode), gap_ns=10 * MS,
                         poll_ns=2 * MS, advise=advise, restore_foreign=restore_foreign)
    logs = log if log is not None else []
    tuner = Tuner(probe(root, IFACE), feed, config,
                  None if advise else state_dir / f"{IFACE}.json", clock=clock,
                  log=logs.append,
                  on_iteration=None if statuses is None else statuses.append)
    return tuner, feed, clock


def poll(tuner: Tuner, feed: Feed, clock: Clock, sent: int) -> None:
    clock.advance(2 * MS)
    feed.total += sent
    tuner.step()


def values(root: Path, *names: str) -> list[int]:
    return [int(knob_file(root, n).read_text()) for n in names]


# -- probing -------------------------------------------------------------------------

@pytest.mark.parametrize(("layout", "kind"), [("sysfs", MlnxSysfsBackend.kind),
                                              ("debugfs", Mlx5DebugfsBackend.kind)])
def test_probe_picks_the_layout_present(tmp_path: Path, layout: str, kind: str) -> None:
    base = LAYOUTS[layout](tmp_path)
    backend = probe(tmp_path, IFACE)
    assert backend.kind == kind and backend.base == base
    got = backend.read_all()
    assert got["rpg_ai_rate"] == 5 and got["rpg_hai_rate"] == 50
    assert got["rpg_time_reset"] == 300 and got["cnp_802p_prio"] == 6
    # only MLNX_OFED has the per-priority enables; only debugfs has cnp_prio_mode
    assert ("rp_enable_7" in got) == (layout == "sysfs")
    assert ("cnp_prio_mode" in got) == (layout == "debugfs")
    # debugfs is reached from the netdev through its PCI address, or alone without one
    if layout == "debugfs":
        assert backend.pci == BDF
        assert probe(tmp_path).kind == kind


def test_probe_prefers_mlnx_ofed_when_both_layouts_exist(tmp_path: Path) -> None:
    make_debugfs(tmp_path)
    ecn = tmp_path / "sys/class/net" / IFACE / "ecn"
    for k in KNOBS:
        if k.sysfs:
            (ecn / k.sysfs).parent.mkdir(parents=True, exist_ok=True)
            (ecn / k.sysfs).write_text(f"{k.default}\n")
    assert probe(tmp_path, IFACE).kind == MlnxSysfsBackend.kind
    assert probe(tmp_path, IFACE, kind=Mlx5DebugfsBackend.kind).kind == Mlx5DebugfsBackend.kind


def test_probe_without_knobs_says_what_it_looked_for_and_the_fix(tmp_path: Path) -> None:
    (tmp_path / "sys/class/net" / IFACE).mkdir(parents=True)
    with pytest.raises(CapabilityError) as err:
        probe(tmp_path, IFACE)
    text = str(err.value)
    assert f"{tmp_path}/sys/class/net/{IFACE}/ecn/roce_rp" in text
    assert "debugfs" in text and "fix:" in text and "--backend defaults --advise" in text


def test_probe_asks_which_nic_when_several_have_knobs(tmp_path: Path) -> None:
    make_sysfs(tmp_path, "eth0")
    ecn1 = tmp_path / "sys/class/net/eth1/ecn/roce_rp"
    ecn1.mkdir(parents=True)
    with pytest.raises(SpecError) as err:
        probe(tmp_path)
    assert err.value.field == "iface" and "eth0, eth1" in str(err.value)
    assert probe(tmp_path, "eth0").iface == "eth0"


def test_probe_rejects_interface_names_that_leave_sys(tmp_path: Path) -> None:
    with pytest.raises(SpecError) as err:
        probe(tmp_path, "../../etc")
    assert err.value.field == "iface"


# -- range checks --------------------------------------------------------------------

@pytest.mark.parametrize("layout", LAYOUTS)
def test_range_check_rejects_before_any_file_is_touched(tmp_path: Path, layout: str) -> None:
    LAYOUTS[layout](tmp_path)
    backend = probe(tmp_path, IFACE)
    before = tree(tmp_path)
    # the first value is fine; the second is not: neither may be written
    with pytest.raises(SpecError) as err:
        backend.write_many({"rpg_ai_rate": 7, "rpg_hai_rate": 400_001})
    assert err.value.field == "rpg_hai_rate"
    assert "400001" in str(err.value) and "1..400000" in str(err.value)
    for bad in ({"rpg_time_reset": 0}, {"cnp_dscp": 64}, {"rpg_ai_rate": True},
                {"rpg_ai_rate": 5.0}, {"no_such_knob": 1}):
        with pytest.raises(SpecError):
            backend.write_many(bad)
    if layout == "debugfs":  # no per-priority enables upstream
        with pytest.raises(SpecError):
            backend.write_many({"rp_enable_3": 0})
    assert tree(tmp_path) == before
    backend.write_many({"rpg_ai_rate": 7, "rpg_hai_rate": 400_000})
    assert values(tmp_path, "rpg_ai_rate", "rpg_hai_rate") == [7, 400_000]


def test_knob_table_is_consistent_and_sourced() -> None:
    for k in KNOBS:
        assert k.source and k.about
        assert k.sysfs or k.debugfs
        if k.default is not None:
            assert k.min <= k.default <= k.max
        assert any(key in k.source for key in SOURCES), k.name
    scaled = {k.name: k.scaling for k in KNOBS if k.scaling}
    assert scaled == {"rpg_ai_rate": "rates", "rpg_hai_rate": "rates",
                      "rpg_time_reset": "timer", "rpg_byte_reset": "timer"}


def test_readme_embeds_the_knob_table() -> None:
    assert markdown_table() in (REPO / "rdma/README.md").read_text()


# -- snapshot and restore ------------------------------------------------------------

@pytest.mark.parametrize("layout", LAYOUTS)
def test_snapshot_then_restore_is_byte_for_byte(tmp_path: Path, layout: str) -> None:
    root = tmp_path / "root"
    LAYOUTS[layout](root)
    # contents as a driver or an admin might have left them: no newline, padding
    knob_file(root, "rpg_ai_rate").write_bytes(b"5")
    knob_file(root, "rpg_hai_rate").write_bytes(b"  50 \n")
    knob_file(root, "dce_tcp_g").write_bytes(b"1019\n\n")
    before = tree(root)
    backend = probe(root, IFACE)
    state = StateFile.create(tmp_path / "state" / "eth0.json", backend)
    assert load(state.path).raw == state.snapshot.raw  # on disk, complete
    assert len(state.snapshot.raw) == len(backend.knobs())
    assert not [p for p in state.path.parent.iterdir() if p.name != "eth0.json"]  # no tmp

    state.mark_ours({"rpg_ai_rate": 9, "rpg_hai_rate": 90, "rpg_time_reset": 100})
    backend.write_many({"rpg_ai_rate": 9, "rpg_hai_rate": 90, "rpg_time_reset": 100})
    assert tree(root) != before

    report = restore(backend, load(state.path))
    assert sorted(report.restored) == ["rpg_ai_rate", "rpg_hai_rate", "rpg_time_reset"]
    assert report.ok and not report.skipped
    assert tree(root) == before


def test_restore_file_leaves_foreign_edits_unless_forced(tmp_path: Path) -> None:
    root = tmp_path / "root"
    make_sysfs(root)
    before = tree(root)
    backend = probe(root, IFACE)
    path = tmp_path / "state" / "eth0.json"
    state = StateFile.create(path, backend)
    state.mark_ours({"rpg_ai_rate": 9, "rpg_hai_rate": 90})
    backend.write_many({"rpg_ai_rate": 9, "rpg_hai_rate": 90})
    knob_file(root, "rpg_hai_rate").write_text("77\n")  # an admin, after the crash
    knob_file(root, "cnp_dscp").write_text("26\n")

    knob_file(root, "rpg_ai_rate").write_bytes(b"")  # killed between truncate and write
    report = restore_file(path)
    assert report.restored == ["rpg_ai_rate"] and report.ok
    assert set(report.skipped) == {"rpg_hai_rate", "cnp_dscp"}
    assert "77" in report.skipped["rpg_hai_rate"] and "'50'" in report.skipped["rpg_hai_rate"]
    assert values(root, "rpg_ai_rate", "rpg_hai_rate", "cnp_dscp") == [5, 77, 26]
    assert not path.exists()

    state = StateFile.create(path, probe(root, IFACE))  # forced: everything goes back
    state.snapshot.raw = {n: before[str(knob_file(root, n).relative_to(root))]
                          for n in state.snapshot.raw}
    state.save()
    assert restore_file(path, force=True).ok
    assert tree(root) == before


# -- policy --------------------------------------------------------------------------

@pytest.mark.parametrize(
    ("ratio", "f_q", "ai", "hai", "timer", "byte"),
    [
        (0.0, 0.25, 1, 13, 1200, 131_068),  # 5*0.25 = 1.25 -> 1; 50*0.25 = 12.5 -> 13; 300/0.25
        (0.25, 0.75, 4, 38, 400, 43_689),   # F 0.6875 -> 0.75
        (0.5, 1.125, 6, 56, 267, 29_126),   # F 1.125 exactly
        (0.75, 1.625, 8, 81, 185, 20_164),  # F 1.5625 -> 1.625 (half rounds up)
        (1.0, 2.0, 10, 100, 150, 16_384),   # 16383.5 rounds up
        (3.0, 2.0, 10, 100, 150, 16_384),   # a ratio above 1 is clamped like the datapath's
    ],
)
def test_policy_scales_the_increase_by_f(ratio: float, f_q: float, ai: int, hai: int,
                                         timer: int, byte: int) -> None:
    base = {"rpg_ai_rate": 5, "rpg_hai_rate": 50, "rpg_time_reset": 300,
            "rpg_byte_reset": 32_767}
    rates = DcqcnPolicy(PAPER, Mode.RATES)
    assert rates.quantize(PAPER(ratio)) == f_q
    assert rates.targets(base, PAPER(ratio)) == {"rpg_ai_rate": ai, "rpg_hai_rate": hai}
    assert DcqcnPolicy(PAPER, Mode.TIMER).targets(base, PAPER(ratio)) == \
        {"rpg_time_reset": timer, "rpg_byte_reset": byte}
    # A byte counter that is off (0) stays off.
    assert DcqcnPolicy(PAPER, Mode.TIMER).targets({**base, "rpg_byte_reset": 0},
                                                  PAPER(ratio))["rpg_byte_reset"] == 0
    standard = DcqcnPolicy(preset("mlx5-default").agg)       # the default mode: timer
    assert standard.targets(base, preset("mlx5-default").agg(ratio)) == \
        {"rpg_time_reset": 300, "rpg_byte_reset": 32_767}


def test_policy_clamps_to_the_knob_range_and_validates() -> None:
    big = DcqcnPolicy(Aggressiveness(slope=0.0, intercept=4.0), Mode.RATES)
    assert big.targets({"rpg_ai_rate": 300_000, "rpg_hai_rate": 50}, 4.0) == \
        {"rpg_ai_rate": 400_000, "rpg_hai_rate": 200}
    fast = DcqcnPolicy(Aggressiveness(slope=0.0, intercept=64.0), Mode.TIMER)
    assert fast.targets({"rpg_time_reset": 10, "rpg_byte_reset": 32}, 64.0) == \
        {"rpg_time_reset": 1, "rpg_byte_reset": 1}
    assert DcqcnPolicy(PAPER, f_step=0.5).quantize(1.2) == 1.0  # hysteresis: small moves
    with pytest.raises(SpecError):
        DcqcnPolicy(PAPER, mode="cubic")  # type: ignore[arg-type]
    with pytest.raises(SpecError):
        DcqcnPolicy(PAPER, f_step=0)
    with pytest.raises(SpecError):
        preset("aggressive")
    with pytest.raises(SpecError) as err:
        TunerConfig(budget=1000, policy=DcqcnPolicy(PAPER), gap_ns=3 * MS, poll_ns=2 * MS)
    assert err.value.field == "gap_ms"


# -- the tuner loop ------------------------------------------------------------------

def test_tuner_follows_bytes_ratio_with_the_datapath_iteration_rules(tmp_path: Path) -> None:
    root = tmp_path / "root"
    make_sysfs(root)
    statuses: list[IterationStatus] = []
    tuner, feed, clock = make_tuner(root, tmp_path / "state", statuses=statuses)
    assert isinstance(tuner.tracker, IterationTracker)
    with tuner:
        knobs = ("rpg_ai_rate", "rpg_hai_rate")
        seen = []
        for _ in range(4):  # 4 x 250 kB of a 1 MB budget
            poll(tuner, feed, clock, 250_000)
            seen.append(values(root, *knobs))
        # ratio .25 .5 .75, then the budget wraps: a new iteration starts at F(0)
        assert seen == [[4, 38], [6, 56], [8, 81], [1, 13]]
        assert tuner.tracker.state.iteration == 1
        assert [(s.iteration, s.bytes) for s in statuses] == [(0, 1_000_000)]

        assert tuner.step() == []  # no traffic, F unchanged: nothing written
        poll(tuner, feed, clock, 600_000)  # ratio .6: F 1.3 -> 1.25
        assert values(root, *knobs) == [6, 63]
        for _ in range(6):  # 12 ms of silence > the 10 ms gap: the compute phase
            poll(tuner, feed, clock, 0)
        poll(tuner, feed, clock, 100_000)  # sending again: an idle-gap boundary first
        assert tuner.tracker.state.iteration == 2
        assert tuner.tracker.state.history == [1_600_000]  # bytes between the two gaps
        assert tuner.tracker.bytes_ratio == pytest.approx(0.1)
        assert values(root, *knobs) == [2, 19]  # F 0.425 -> 0.375
        assert [s.bytes for s in statuses] == [1_000_000, 600_000]
    assert not (tmp_path / "state" / "eth0.json").exists()
    assert values(root, *knobs) == [5, 50]  # restored on exit


def test_tuner_timer_mode_divides_the_increase_timer(tmp_path: Path) -> None:
    root = tmp_path / "root"
    make_debugfs(root)
    tuner, feed, clock = make_tuner(root, tmp_path / "state", mode=Mode.TIMER)
    with tuner:
        poll(tuner, feed, clock, 500_000)
        assert values(root, "rpg_time_reset", "rpg_ai_rate") == [267, 5]
        poll(tuner, feed, clock, 499_999)  # ratio just under 1: F 2
        assert values(root, "rpg_time_reset") == [150]
    assert values(root, "rpg_time_reset") == [300]


def test_mlx5_default_preset_only_ever_writes_the_defaults(tmp_path: Path) -> None:
    root = tmp_path / "root"
    make_sysfs(root)
    knob_file(root, "rpg_time_reset").write_text("125\n")  # a site's own tuning
    standard = preset("mlx5-default").agg
    tuner, feed, clock = make_tuner(root, tmp_path / "state", standard)
    with tuner:  # base "current": F = 1 keeps the site's values, nothing is written
        for sent in (0, 400_000, 400_000, 400_000):
            poll(tuner, feed, clock, sent)
        assert tuner.changes == [] and values(root, "rpg_time_reset") == [125]
    feed, clock = Feed(), Clock()
    config = TunerConfig(budget=1_000_000, policy=DcqcnPolicy(standard), base="mlx5")
    with Tuner(probe(root, IFACE), feed, config, tmp_path / "state/eth0.json",
               clock=clock, log=lambda _: None) as tuner:
        for sent in (0, 400_000, 400_000, 400_000):
            poll(tuner, feed, clock, sent)
        assert [(c.knob, c.new) for c in tuner.changes] == [("rpg_time_reset", 300)]
    assert values(root, "rpg_time_reset") == [125]  # and back to the site's value on exit


def test_tuner_backs_off_a_knob_someone_else_edits(tmp_path: Path) -> None:
    root = tmp_path / "root"
    make_sysfs(root)
    log: list[str] = []
    tuner, feed, clock = make_tuner(root, tmp_path / "state", log=log)
    with tuner:
        poll(tuner, feed, clock, 250_000)
        assert values(root, "rpg_ai_rate", "rpg_hai_rate") == [4, 38]
        knob_file(root, "rpg_ai_rate").write_text("20\n")  # the admin steps in
        poll(tuner, feed, clock, 250_000)
        assert values(root, "rpg_ai_rate", "rpg_hai_rate") == [20, 56]
        assert "rpg_ai_rate" in tuner.backed_off
        assert any("rpg_ai_rate: found 20 where the tuner left 4" in m for m in log)
        assert load(tmp_path / "state/eth0.json").backed_off == ["rpg_ai_rate"]
        poll(tuner, feed, clock, 250_000)  # still hands off
        assert values(root, "rpg_ai_rate", "rpg_hai_rate") == [20, 81]
    # on exit the tuner's own change is undone, the admin's value stays
    assert values(root, "rpg_ai_rate", "rpg_hai_rate") == [20, 50]


def test_tuner_restores_foreign_edits_only_when_asked(tmp_path: Path) -> None:
    root = tmp_path / "root"
    make_sysfs(root)
    before = tree(root)
    tuner, feed, clock = make_tuner(root, tmp_path / "state", restore_foreign=True)
    with tuner:
        poll(tuner, feed, clock, 250_000)
        knob_file(root, "rpg_ai_rate").write_text("20\n")
        poll(tuner, feed, clock, 250_000)
        assert values(root, "rpg_ai_rate") == [20]
    assert tree(root) == before


def test_tuner_restores_when_the_loop_raises(tmp_path: Path) -> None:
    root = tmp_path / "root"
    make_sysfs(root)
    before = tree(root)
    tuner, feed, clock = make_tuner(root, tmp_path / "state")

    def sleep(_: float) -> None:
        feed.total += 300_000
        if feed.total > 600_000:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt), tuner:
        tuner.run(sleep=sleep)
    assert len(tuner.changes) >= 2  # it did tune before the interrupt
    assert tree(root) == before
    assert not (tmp_path / "state/eth0.json").exists()


def test_a_snapshot_left_behind_blocks_a_new_run(tmp_path: Path) -> None:
    root = tmp_path / "root"
    make_sysfs(root)
    first, feed, clock = make_tuner(root, tmp_path / "state")
    first.start()
    poll(first, feed, clock, 250_000)  # tuned, then "crashed": never closed
    assert first.lock is not None
    first.lock.release()  # as the kernel does when a tuner dies
    left = (tmp_path / "state/eth0.json").read_bytes()
    second, _, _ = make_tuner(root, tmp_path / "state")
    with pytest.raises(SpecError) as err, second:
        pass
    assert err.value.field == "snapshot" and "mltcp dcqcn restore --iface eth0" in str(err.value)
    assert (tmp_path / "state/eth0.json").read_bytes() == left  # kept for the restore
    assert values(root, "rpg_ai_rate") == [4]  # and the second run wrote nothing


@pytest.mark.parametrize("layout", LAYOUTS)
def test_advice_mode_writes_nothing(tmp_path: Path, layout: str) -> None:
    root = tmp_path / "root"
    LAYOUTS[layout](root)
    before = tree(root)
    log: list[str] = []
    tuner, feed, clock = make_tuner(root, tmp_path / "state", advise=True, log=log)
    assert isinstance(tuner.backend, DryRunBackend)
    with tuner:
        for _ in range(4):
            poll(tuner, feed, clock, 250_000)
    assert [(c.knob, c.old, c.new) for c in tuner.changes[:2]] == \
        [("rpg_ai_rate", 5, 4), ("rpg_hai_rate", 50, 38)]
    assert all(c.advise for c in tuner.changes)
    assert any("would set rpg_ai_rate 5 -> 4" in m and "bytes_ratio 0.250" in m for m in log)
    assert tree(root) == before
    assert not (tmp_path / "state").exists()


def test_cli_advise_and_probe_touch_nothing(tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    root = tmp_path / "root"
    make_debugfs(root)
    before = tree(root)
    assert cli_main(["dcqcn", "probe", "--root", str(root), "--iface", IFACE, "--json"]) == 0
    probed = json.loads(capsys.readouterr().out)
    assert probed["backend"] == Mlx5DebugfsBackend.kind and probed["pci"] == BDF
    assert probed["knobs"]["rpg_hai_rate"] == 50
    assert cli_main(["dcqcn", "run", "--root", str(root), "--iface", IFACE, "--budget", "1MB",
                     "--advise", "--duration-s", "0.01", "--poll-ms", "1",
                     "--state-dir", str(tmp_path / "state")]) == 0
    assert "nothing was written" in capsys.readouterr().out
    assert tree(root) == before and not (tmp_path / "state").exists()


# -- counters ------------------------------------------------------------------------

def test_ib_port_xmit_data_counts_4_byte_words(tmp_path: Path) -> None:
    make_sysfs(tmp_path)
    counter = counter_from_spec("auto", tmp_path, IFACE)  # the netdev's RDMA device
    xmit = tmp_path / "sys/class/infiniband/mlx5_0/ports/1/counters/port_xmit_data"
    xmit.write_text("1000\n")
    assert counter.read() == 4000
    assert counter_from_spec("ib:mlx5_0:1", tmp_path, IFACE).read() == 4000
    sampler = DeltaSampler(counter)
    assert sampler.sample() is None  # the first poll is only a baseline
    xmit.write_text("1250\n")
    assert sampler.sample() == 1000
    xmit.write_text("10\n")  # a reset never becomes traffic
    assert sampler.sample() == 0 and sampler.resets == 1
    xmit.write_text("20\n")
    assert sampler.sample() == 40


def _parse_ethtool_s(text: str) -> dict[str, int]:
    """`ethtool -S` output (``     name: value`` lines) as a dict of integers."""
    stats = {}
    for line in text.splitlines()[1:]:
        name, sep, value = line.strip().rpartition(":")
        if sep and value.strip().isdigit():
            stats[name.strip()] = int(value)
    return stats


def _iface_with_stats() -> str:
    """An interface of this namespace whose driver has ethtool statistics."""
    for name in sorted(os.listdir("/sys/class/net")):
        try:
            with EthtoolStats(name) as st:
                if st.read():
                    return name
        except EthtoolError:
            continue
    pytest.skip("no interface here has ethtool statistics (lo and most virtual ones lack them)")


def test_ethtool_statistics_are_those_ethtool_prints() -> None:
    """The ioctl reader against the ethtool binary, an independent reader of the same
    counters: the same names in the same order, and every value between two runs of it."""
    if not shutil.which("ethtool"):
        pytest.skip("needs the ethtool binary (Debian package ethtool) to compare with")
    iface = _iface_with_stats()

    def ethtool_s() -> dict[str, int]:
        out = subprocess.run(["ethtool", "-S", iface], capture_output=True, text=True,
                             check=True).stdout
        return _parse_ethtool_s(out)

    with EthtoolStats(iface) as st:
        before = ethtool_s()
        ours = st.read()
        after = ethtool_s()
        assert list(ours) == list(before) == list(after)
        for name, value in ours.items():
            assert before[name] <= value <= after[name] or \
                before[name] >= value >= after[name], name   # a gauge may go down
        name = next(iter(ours))
        counter = counter_from_spec(f"ethtool:{name}", "/", iface)
        assert isinstance(counter, EthtoolCounter)
        assert counter.read() >= 0 and counter._stats is not None
        sock = counter._stats
        counter.read()
        assert counter._stats is sock          # one socket, opened once
        counter.close()


def test_ethtool_counter_says_what_is_wrong_in_one_line(tmp_path: Path) -> None:
    with pytest.raises(CapabilityError, match=r"lo: its driver has no ethtool statistics; "
                                              r"fix: use --counter ib"):
        EthtoolCounter("lo").read()
    with pytest.raises(CapabilityError, match=r"mltcpnosuch0: no such interface; fix: pass"):
        EthtoolCounter("mltcpnosuch0").read()
    # auto without an RDMA device behind the netdev falls back to ethtool (lo: none).
    assert isinstance(counter_from_spec("auto", tmp_path, "lo"), EthtoolCounter)
    with pytest.raises(SpecError, match="iface"):
        counter_from_spec("ethtool", tmp_path, "../etc")
    with pytest.raises(SpecError):
        counter_from_spec("snmp:x", tmp_path, IFACE)
    assert FileCounter(tmp_path / "missing").description.endswith("missing")


def test_ethtool_counter_names_a_missing_statistic() -> None:
    iface = _iface_with_stats()
    with pytest.raises(CapabilityError, match=f"{iface} has no ethtool statistic "
                                              "'tx_vport_rdma_unicast_bytes'; fix: pick one"):
        EthtoolCounter(iface).read()


@pytest.mark.skipif(os.geteuid() != 0,
                    reason="needs root (CAP_NET_ADMIN) to create a veth pair in a namespace")
def test_ethtool_counter_on_a_veth_in_a_throwaway_namespace() -> None:
    """veth's peer_ifindex statistic is the peer's interface index: a known value read
    through the counter, in a namespace of its own (the ioctl socket is made inside)."""
    ns = f"mltcp-ethtool-{os.getpid()}"
    subprocess.run(["ip", "netns", "add", ns], check=True)
    try:
        subprocess.run(["ip", "-n", ns, "link", "add", "mltcpa", "numrxqueues", "2",
                        "numtxqueues", "2", "type", "veth", "peer", "name", "mltcpb"],
                       check=True)
        peer = int(subprocess.run(["ip", "netns", "exec", ns, "cat",
                                   "/sys/class/net/mltcpb/ifindex"], capture_output=True,
                                  text=True, check=True).stdout)
        code = ("from mltcp.host.dcqcn.counters import counter_from_spec\n"
                "from mltcp.host.dcqcn.ethtool import EthtoolStats\n"
                "c = counter_from_spec('ethtool:peer_ifindex', '/', 'mltcpa')\n"
                "print(c.read(), c.read())\n"
                "print(sorted(EthtoolStats('mltcpa').read()))\n")
        out = subprocess.run(["nsenter", f"--net=/run/netns/{ns}", "--", sys.executable,
                              "-c", code], capture_output=True, text=True, cwd=REPO,
                             check=False)
        assert out.returncode == 0, out.stderr
        first, names = out.stdout.splitlines()
        assert first.split() == [str(peer), str(peer)]
        assert "rx_queue_1_drops" in names        # per-queue statistics of both queues
    finally:
        subprocess.run(["ip", "netns", "del", ns], check=False)


# -- crash and signals, in a real process --------------------------------------------

def _start_tuner(root: Path, counter: Path, state: Path) -> subprocess.Popen[str]:
    counter.write_text("0\n")
    return subprocess.Popen(
        [sys.executable, "-m", "mltcp.cli", "dcqcn", "run", "--root", str(root), "--iface",
         IFACE, "--budget", "1000000", "--preset", "paper", "--poll-ms", "1", "--gap-ms",
         "1000", "--counter", f"file:{counter}", "--state-dir", str(state)],
        cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def _drive_until_tuned(proc: subprocess.Popen[str], root: Path, counter: Path,
                       snapshot: Path) -> None:
    """Feed traffic until the tuner has snapshotted and changed a knob (or has died)."""
    timer = knob_file(root, "rpg_time_reset")
    before = timer.read_text()
    sent = 0
    deadline = time.monotonic() + 60  # a safety stop for a hung child, not a measurement
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"tuner exited {proc.returncode}: {proc.stdout.read()}")  # type: ignore[union-attr]
        if snapshot.exists() and timer.read_text() != before:
            return
        sent += 300_000
        tmp = counter.with_suffix(".tmp")
        tmp.write_text(f"{sent}\n")
        os.replace(tmp, counter)  # atomically: the tuner never reads half a number
        time.sleep(0.01)
    proc.kill()
    pytest.fail("the tuner never changed a knob")


def test_sigkill_mid_run_then_restore_puts_every_file_back(tmp_path: Path) -> None:
    root, state = tmp_path / "root", tmp_path / "state"
    make_sysfs(root)
    before = tree(root)
    proc = _start_tuner(root, tmp_path / "tx_bytes", state)
    _drive_until_tuned(proc, root, tmp_path / "tx_bytes", state / "eth0.json")
    proc.kill()  # SIGKILL: no handler runs, nothing is restored by the tuner
    assert proc.wait() == -signal.SIGKILL
    assert tree(root) != before and (state / "eth0.json").exists()

    out = subprocess.run([sys.executable, "-m", "mltcp.cli", "dcqcn", "restore", "--iface",
                          IFACE, "--state-dir", str(state)],
                         cwd=REPO, capture_output=True, text=True, check=False)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "restored rpg_time_reset, rpg_byte_reset" in out.stdout
    assert tree(root) == before
    assert not (state / "eth0.json").exists()


def test_sigterm_restores_before_exiting(tmp_path: Path) -> None:
    root, state = tmp_path / "root", tmp_path / "state"
    make_debugfs(root)
    before = tree(root)
    proc = _start_tuner(root, tmp_path / "tx_bytes", state)
    _drive_until_tuned(proc, root, tmp_path / "tx_bytes", state / "eth0.json")
    proc.send_signal(signal.SIGTERM)
    output, _ = proc.communicate()
    assert proc.returncode == 128 + signal.SIGTERM, output
    assert "SIGTERM: stopping" in output and "restored rpg_time_reset, rpg_byte_reset" in output
    assert tree(root) == before
    assert not (state / "eth0.json").exists()


def test_sighup_restores_before_exiting(tmp_path: Path) -> None:
    """A dropped SSH session (SIGHUP) stops the tuner the way Ctrl-C does: knobs back."""
    root, state = tmp_path / "root", tmp_path / "state"
    make_sysfs(root)
    before = tree(root)
    proc = _start_tuner(root, tmp_path / "tx_bytes", state)
    _drive_until_tuned(proc, root, tmp_path / "tx_bytes", state / "eth0.json")
    assert tree(root) != before
    proc.send_signal(signal.SIGHUP)
    output, _ = proc.communicate(timeout=60)
    assert proc.returncode == 128 + signal.SIGHUP, output
    assert "SIGHUP: stopping" in output and "restored rpg_time_reset, rpg_byte_reset" in output
    assert tree(root) == before
    assert not (state / "eth0.json").exists()


def test_a_live_tuner_blocks_restore_and_a_second_run(tmp_path: Path) -> None:
    root, state = tmp_path / "root", tmp_path / "state"
    make_sysfs(root)
    before = tree(root)
    proc = _start_tuner(root, tmp_path / "tx_bytes", state)
    try:
        _drive_until_tuned(proc, root, tmp_path / "tx_bytes", state / "eth0.json")
        # Held still (SIGSTOP: alive, its lock and port held), so that what the tree holds
        # afterwards is what the refused commands left: a running tuner moves its knobs on
        # by itself (its iteration ends at the idle gap, F falls back, the knobs with it).
        os.kill(proc.pid, signal.SIGSTOP)
        tuned = tree(root)
        restore = subprocess.run([sys.executable, "-m", "mltcp.cli", "dcqcn", "restore",
                                  "--iface", IFACE, "--state-dir", str(state)],
                                 cwd=REPO, capture_output=True, text=True, check=False)
        assert restore.returncode == 1, restore.stdout + restore.stderr
        [line] = restore.stderr.splitlines()
        assert f"pid {proc.pid}" in line and f"kill {proc.pid}" in line and "--force" in line
        second = subprocess.run(
            [sys.executable, "-m", "mltcp.cli", "dcqcn", "run", "--root", str(root), "--iface",
             IFACE, "--budget", "1000000", "--counter", f"file:{tmp_path / 'tx_bytes'}",
             "--state-dir", str(state)], cwd=REPO, capture_output=True, text=True, check=False)
        assert second.returncode == 1, second.stdout + second.stderr
        assert f"pid {proc.pid}" in second.stderr and f"kill {proc.pid}" in second.stderr
        assert tree(root) == tuned and (state / "eth0.json").exists()   # nothing touched
    finally:
        os.kill(proc.pid, signal.SIGCONT)
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=60)
    assert proc.returncode == 128 + signal.SIGTERM and tree(root) == before
    after = subprocess.run([sys.executable, "-m", "mltcp.cli", "dcqcn", "restore", "--iface",
                            IFACE, "--state-dir", str(state)],
                           cwd=REPO, capture_output=True, text=True, check=False)
    assert after.returncode == 0 and "nothing to restore" in after.stdout


def test_a_tuner_holds_its_port_until_closed(tmp_path: Path) -> None:
    root = tmp_path / "root"
    make_sysfs(root)
    first, feed, clock = make_tuner(root, tmp_path / "state")
    second, _, _ = make_tuner(root, tmp_path / "state")
    with first:
        poll(first, feed, clock, 250_000)
        with pytest.raises(MltcpError, match=f"eth0 is tuned by a live .*pid {os.getpid()}.*"
                                             f"kill {os.getpid()}"):
            second.start()
        assert load(tmp_path / "state/eth0.json").ours   # the first one's marks, intact
    with second:          # the first one restored and let go of the port
        assert second.lock is not None and second.lock.held
    assert values(root, "rpg_ai_rate") == [KNOB_BY_NAME["rpg_ai_rate"].default]
