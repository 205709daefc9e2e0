"""Where a NIC's DCQCN knobs live, and the only code that reads or writes them.

Two driver layouts exist for the same firmware parameters (both found by probing a root
directory, ``/`` on a real host, a test tree otherwise):

* **MLNX_OFED sysfs** (NVIDIA's out-of-tree driver): ``/sys/class/net/<if>/ecn/roce_rp/``
  and ``.../roce_np/``, one file per knob, plus per-priority enables ``enable/0..7``.
* **upstream mlx5 debugfs** (the in-tree mlx5_ib): ``/sys/kernel/debug/mlx5/<pci-bdf>/
  cc_params/rp_*`` and ``np_*``; no per-priority enables; root only (debugfs is 0700).

When both are present MLNX_OFED wins: its driver replaces the in-tree one, so its sysfs
is the interface its firmware commands go through, and it has the enables to snapshot.

:class:`DryRunBackend` never writes: it reads a real backend (or the table's defaults)
and records what it would have written, which is how advice-only mode works.

Every write goes through :meth:`Backend.write_many`, which range-checks *all* values
against the knob table before it opens a single file. Files are opened without
``O_CREAT``: a typo can never create a stray file under ``/sys``.
"""

from __future__ import annotations

import os
import re
from abc import ABC, abstractmethod
from collections.abc import Mapping
from pathlib import Path
from typing import ClassVar

from mltcp.core.dcqcn.knobs import KNOBS, Knob, knob
from mltcp.core.errors import CapabilityError, MltcpError, SpecError

SYSFS_NET = "sys/class/net"
DEBUGFS_MLX5 = "sys/kernel/debug/mlx5"
_BDF = re.compile(r"^[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]$")
_IFACE = re.compile(r"^[A-Za-z0-9_.:@-]{1,15}$")


def parse_value(raw: bytes, where: str) -> int:
    """The integer a knob file holds (the drivers print ``%u``/``%d`` and a newline)."""
    try:
        return int(raw.decode("ascii").strip(), 10)
    except (UnicodeDecodeError, ValueError):
        raise MltcpError(f"{where}: expected an integer, read {raw[:40]!r}") from None


def check_iface(iface: str) -> str:
    """Reject names that could walk out of /sys/class/net (``..``, ``/``)."""
    if not _IFACE.match(iface) or iface in (".", ".."):
        raise SpecError("iface", f"{iface!r} is not a network interface name",
                        "pass the RoCE netdev, e.g. --iface enp59s0f0np0")
    return iface


class Backend(ABC):
    """A set of knob files for one NIC port."""

    kind: ClassVar[str]

    def __init__(self, root: Path, iface: str | None, pci: str | None) -> None:
        self.root = root
        self.iface = iface
        self.pci = pci

    @property
    @abstractmethod
    def base(self) -> Path:
        """The directory that holds the knob files."""

    @abstractmethod
    def path(self, k: Knob) -> Path | None:
        """The file of knob ``k`` in this layout, or None if the layout has none."""

    @property
    def key(self) -> str:
        """What names this port in the snapshot file (the interface, else the PCI function)."""
        return self.iface or self.pci or "nic"

    def knobs(self) -> tuple[Knob, ...]:
        """The knobs this port actually has (older drivers lack some files)."""
        return tuple(k for k in KNOBS if self.has(k))

    def has(self, k: Knob) -> bool:
        p = self.path(k)
        return p is not None and p.is_file()

    def describe(self) -> str:
        return f"{self.kind} ({self.base})"

    def _file(self, k: Knob) -> Path:
        p = self.path(k)
        if p is None or not p.is_file():
            raise CapabilityError(f"{k.name}: {self.describe()} has no such knob file"
                                  f"{'' if p is None else f' ({p})'}; "
                                  "fix: update the NIC driver, or leave this knob alone")
        return p

    def read_raw(self, k: Knob) -> bytes:
        p = self._file(k)
        try:
            return p.read_bytes()
        except PermissionError:
            raise CapabilityError(f"cannot read {p}: permission denied; fix: run as root"
                                  ) from None

    def read(self, k: Knob) -> int:
        return parse_value(self.read_raw(k), str(self.path(k)))

    def read_all(self) -> dict[str, int]:
        return {k.name: self.read(k) for k in self.knobs()}

    def validate(self, values: Mapping[str, int]) -> dict[Knob, int]:
        """Range-check every value and resolve every name; touch nothing."""
        checked = {}
        for name, value in values.items():
            k = knob(name)
            if not self.has(k):
                raise SpecError(name, f"{self.describe()} has no such knob",
                                "see `mltcp dcqcn probe` for the knobs this NIC has")
            checked[k] = k.check(value)
        return checked

    def write_many(self, values: Mapping[str, int]) -> None:
        """Write several knobs, all of them range-checked before the first file is opened."""
        checked = self.validate(values)
        for k, value in checked.items():
            self._write(k, f"{value}\n".encode())

    def write(self, name: str, value: int) -> None:
        self.write_many({name: value})

    def write_raw(self, name: str, raw: bytes) -> None:
        """Put back bytes read earlier from this knob (restore only).

        Not range-checked: these are the NIC's own earlier contents, and putting back
        exactly what was there is the point, even if the table's range is stricter.
        """
        self._write(knob(name), raw)

    def _write(self, k: Knob, data: bytes) -> None:
        p = self._file(k)
        try:
            fd = os.open(p, os.O_WRONLY | os.O_TRUNC)
        except PermissionError:
            raise CapabilityError(f"cannot write {p}: permission denied; fix: run as root, "
                                  "or use --advise to only print the changes") from None
        try:
            if os.write(fd, data) != len(data):
                raise MltcpError(f"{p}: short write of {data!r}")
        finally:
            os.close(fd)


class MlnxSysfsBackend(Backend):
    """MLNX_OFED: ``/sys/class/net/<if>/ecn/roce_rp|roce_np/<knob>``."""

    kind = "mlnx-ofed-sysfs"

    def __init__(self, root: Path, iface: str) -> None:
        super().__init__(root, check_iface(iface), None)

    @property
    def base(self) -> Path:
        return self.root / SYSFS_NET / str(self.iface) / "ecn"

    def path(self, k: Knob) -> Path | None:
        return None if k.sysfs is None else self.base / k.sysfs


class Mlx5DebugfsBackend(Backend):
    """Upstream mlx5_ib: ``/sys/kernel/debug/mlx5/<pci-bdf>/cc_params/<rp_*|np_*>``."""

    kind = "mlx5-debugfs"

    def __init__(self, root: Path, pci: str, iface: str | None = None) -> None:
        if not _BDF.match(pci):
            raise SpecError("pci", f"{pci!r} is not a PCI address",
                            "pass the NIC's function, e.g. --pci 0000:3b:00.0")
        super().__init__(root, iface, pci)

    @property
    def base(self) -> Path:
        return self.root / DEBUGFS_MLX5 / str(self.pci) / "cc_params"

    def path(self, k: Knob) -> Path | None:
        return None if k.debugfs is None else self.base / k.debugfs


class DryRunBackend(Backend):
    """Reads a real backend (or the table's defaults) and never writes a file.

    What it would have written is kept in :attr:`would_write` and served back by later
    reads, so the tuner behaves exactly as it would for real. If the real value changes
    behind it (someone else edited the knob) the real value shows through again, so
    the tuner's back-off logic sees the edit in advice mode too.
    """

    kind = "dry-run"

    def __init__(self, inner: Backend | None = None, iface: str | None = None) -> None:
        super().__init__(inner.root if inner else Path("/"),
                         inner.iface if inner else iface, inner.pci if inner else None)
        self.inner = inner
        self.would_write: list[tuple[str, int, int]] = []
        self._overlay: dict[str, tuple[bytes | None, bytes]] = {}

    @property
    def base(self) -> Path:
        return self.inner.base if self.inner else Path("(mlx5 defaults)")

    def describe(self) -> str:
        return f"dry-run over {self.inner.describe() if self.inner else 'the mlx5 defaults'}"

    def path(self, k: Knob) -> Path | None:
        return self.inner.path(k) if self.inner else None

    def has(self, k: Knob) -> bool:
        if self.inner:
            return self.inner.has(k)
        return k.default is not None and k.sysfs is not None

    def _real_raw(self, k: Knob) -> bytes | None:
        if self.inner:
            return self.inner.read_raw(k)
        return None if k.default is None else f"{k.default}\n".encode()

    def read_raw(self, k: Knob) -> bytes:
        if not self.has(k):
            raise CapabilityError(f"{k.name}: {self.describe()} has no such knob")
        real = self._real_raw(k)
        if k.name in self._overlay:
            under, ours = self._overlay[k.name]
            if under == real:
                return ours
            del self._overlay[k.name]  # edited for real since: that edit wins
        assert real is not None
        return real

    def _write(self, k: Knob, data: bytes) -> None:
        old = self.read(k)
        self._overlay[k.name] = (self._real_raw(k), data)
        self.would_write.append((k.name, old, parse_value(data, k.name)))


def _pci_of(root: Path, iface: str) -> str | None:
    """The PCI function behind a netdev: the ``device`` link's target, else its uevent."""
    dev = root / SYSFS_NET / iface / "device"
    name = Path(os.path.realpath(dev)).name
    if _BDF.match(name):
        return name
    try:
        for line in (dev / "uevent").read_text().splitlines():
            if line.startswith("PCI_SLOT_NAME="):
                return line.split("=", 1)[1].strip()
    except OSError:
        pass
    return None


def _exists(p: Path) -> bool | None:
    """True/False, or None where a permission check hides the answer (debugfs as non-root)."""
    try:
        return p.is_dir()
    except PermissionError:
        return None


BACKEND_KINDS = ("auto", MlnxSysfsBackend.kind, Mlx5DebugfsBackend.kind, "defaults")


def probe(root: Path | str = "/", iface: str | None = None, pci: str | None = None,
          kind: str = "auto") -> Backend:
    """Find the knobs of ``iface`` (or of the only RoCE NIC) under ``root``.

    ``kind`` forces a layout; ``"defaults"`` gives a :class:`DryRunBackend` over the
    table's defaults, for trying the tuner on a host without such a NIC.
    """
    root = Path(root)
    if kind not in BACKEND_KINDS:
        raise SpecError("backend", f"unknown backend {kind!r}",
                        f"use one of: {', '.join(BACKEND_KINDS)}")
    if iface is not None:
        check_iface(iface)
    if kind == "defaults":
        return DryRunBackend(None, iface)
    looked: list[str] = []
    hidden: list[str] = []

    if kind in ("auto", MlnxSysfsBackend.kind):
        if iface:
            found = [iface] if _exists(root / SYSFS_NET / iface / "ecn" / "roce_rp") else []
            looked.append(str(root / SYSFS_NET / iface / "ecn" / "roce_rp"))
        else:
            found = sorted(p.parent.parent.name
                           for p in (root / SYSFS_NET).glob("*/ecn/roce_rp") if p.is_dir())
            looked.append(str(root / SYSFS_NET / "*" / "ecn" / "roce_rp"))
        if len(found) > 1:
            raise SpecError("iface", f"several RoCE NICs have DCQCN knobs: {', '.join(found)}",
                            "pick one with --iface")
        if found:
            return MlnxSysfsBackend(root, found[0])

    if kind in ("auto", Mlx5DebugfsBackend.kind):
        if pci is None and iface is not None:
            pci = _pci_of(root, iface)
        debug = root / DEBUGFS_MLX5
        if pci:
            cc = debug / pci / "cc_params"
            looked.append(str(cc))
            state = _exists(cc)
            if state:
                return Mlx5DebugfsBackend(root, pci, iface)
            if state is None:
                hidden.append(str(cc))
        elif iface is None:
            looked.append(str(debug / "*" / "cc_params"))
            state = _exists(debug)
            if state is None:
                hidden.append(str(debug))
            else:
                found = sorted(p.parent.name for p in debug.glob("*/cc_params") if p.is_dir())
                if len(found) > 1:
                    raise SpecError("pci", f"several mlx5 functions have cc_params: "
                                    f"{', '.join(found)}", "pick one with --iface or --pci")
                if found:
                    return Mlx5DebugfsBackend(root, found[0])
        else:
            looked.append(f"{root / SYSFS_NET / iface / 'device'} (to find the PCI address "
                          "for debugfs)")

    why = f"permission denied on {', '.join(hidden)}; " if hidden else ""
    raise CapabilityError(
        f"no DCQCN knobs found{' for ' + iface if iface else ''}: looked for "
        f"{'; '.join(looked)}; {why}fix: run as root on a host with an mlx5 RoCE NIC "
        "(MLNX_OFED, or upstream mlx5_ib with debugfs mounted: "
        "mount -t debugfs none /sys/kernel/debug), name it with --iface, "
        "or try the tuner without a NIC: --backend defaults --advise")


def rebuild(kind: str, root: Path | str, iface: str | None, pci: str | None) -> Backend:
    """The backend a snapshot was taken from, without probing (restore after a crash)."""
    root = Path(root)
    if kind == MlnxSysfsBackend.kind and iface:
        return MlnxSysfsBackend(root, iface)
    if kind == Mlx5DebugfsBackend.kind and pci:
        return Mlx5DebugfsBackend(root, pci, iface)
    raise SpecError("snapshot", f"cannot rebuild a {kind!r} backend (iface {iface}, pci {pci})",
                    "the snapshot file is damaged; restore the knobs by hand from its "
                    "'knobs' entries")
