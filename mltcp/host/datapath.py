"""Load, register and remove the eBPF datapath.

Everything the datapath creates is pinned under PIN_ROOT (/sys/fs/bpf/mltcp):
the shared maps, one pinned struct_ops map per registered module (``ops/``),
the sockops classifier and its cgroup links (``sockops/``, ``links/``) and
the ECN marker (``marker/``).  That single prefix is what makes
``unload --all`` complete and ``residue()`` able to prove it.

Every public function validates its input before touching the kernel, and
undoes what it registered if it fails half way.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import functools
import os
import shutil
import subprocess
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from mltcp.core.errors import CapabilityError, MltcpError, SpecError
from mltcp.host import maps, namespaces
from mltcp.host.build import build_object
from mltcp.host.libbpf import BPF_CGROUP_SOCK_OPS, BPF_MAP_TYPE_STRUCT_OPS, BpfMapInfo, libbpf
from mltcp.host.state import host_lock

MODULES = ("reno", "cubic", "dctcp")
AVAILABLE_CC = Path("/proc/sys/net/ipv4/tcp_available_congestion_control")
BPFFS = Path("/sys/fs/bpf")
CAP_NET_ADMIN, CAP_SYS_ADMIN, CAP_BPF = 12, 21, 39
_T = TypeVar("_T")


def _under_host_lock(fn: Callable[..., _T]) -> Callable[..., _T]:
    """Run ``fn`` holding the host's control-plane lock (:mod:`mltcp.host.state`): every
    change to pins, registrations and maps, so concurrent commands cannot undo each other."""
    @functools.wraps(fn)
    def locked(*args: Any, **kwargs: Any) -> _T:
        with host_lock():
            return fn(*args, **kwargs)
    return locked


def cc_name(module: str) -> str:
    return f"mltcp_{module}"


def parse_modules(names: Iterable[str]) -> list[str]:
    """'all' or module names -> validated, de-duplicated list (nothing touched yet)."""
    out: list[str] = []
    for name in names:
        name = name.strip().lower().removeprefix("mltcp_")
        if name == "all":
            chosen = list(MODULES)
        elif name in MODULES:
            chosen = [name]
        else:
            raise SpecError(
                "module", f"unknown congestion control {name!r}",
                f"choose from {', '.join(MODULES)} or all",
            )
        out.extend(m for m in chosen if m not in out)
    if not out:
        raise SpecError("module", "no module given", f"name one of {', '.join(MODULES)} or all")
    return out


# -- host capabilities -------------------------------------------------------

def effective_caps() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("CapEff:"):
            return int(line.split()[1], 16)
    return 0


def require_bpf() -> None:
    """Raise CapabilityError naming what is missing to load struct_ops programs."""
    caps = effective_caps()
    missing = [name for bit, name in ((CAP_BPF, "CAP_BPF"), (CAP_NET_ADMIN, "CAP_NET_ADMIN"),
                                      (CAP_SYS_ADMIN, "CAP_SYS_ADMIN")) if not caps >> bit & 1]
    if missing:
        raise CapabilityError(
            f"loading eBPF congestion control needs {', '.join(missing)}: run as root"
        )
    if not Path("/sys/kernel/btf/vmlinux").exists():
        raise CapabilityError(
            "/sys/kernel/btf/vmlinux missing: the kernel needs CONFIG_DEBUG_INFO_BTF=y"
        )
    ensure_bpffs()


def ensure_bpffs() -> None:
    if subprocess.run(["mountpoint", "-q", str(BPFFS)]).returncode != 0:
        proc = subprocess.run(["mount", "-t", "bpf", "bpf", str(BPFFS)], capture_output=True,
                              text=True)
        if proc.returncode != 0:
            raise CapabilityError(f"cannot mount bpffs on {BPFFS}: {proc.stderr.strip()}")


def cgroup2_root() -> Path:
    """Mount point of the cgroup v2 hierarchy (/sys/fs/cgroup, or .../unified on hybrid hosts)."""
    for line in Path("/proc/mounts").read_text().splitlines():
        parts = line.split()
        if len(parts) > 2 and parts[2] == "cgroup2":
            return Path(parts[1])
    raise CapabilityError("no cgroup v2 hierarchy mounted: mount -t cgroup2 none /sys/fs/cgroup "
                          "(needed to attach jobs by cgroup)")


def available_ccs() -> list[str]:
    return AVAILABLE_CC.read_text().split()


def loaded_modules() -> list[str]:
    """Modules whose CC is registered right now (pinned by us or not)."""
    avail = set(available_ccs())
    return [m for m in MODULES if cc_name(m) in avail]


# -- object loading ------------------------------------------------------------

class LoadedObject:
    """An opened+loaded BPF object whose maps are pinned under PIN_ROOT by name."""

    def __init__(self, name: str) -> None:
        lib = libbpf()
        self.lib = lib
        self.path = build_object(name)
        maps.PIN_ROOT.mkdir(parents=True, exist_ok=True)
        with lib.call(name):
            self.obj = lib.check_ptr(lib.lib.bpf_object__open_file(str(self.path).encode(), None),
                                     f"open {self.path.name}")
        try:
            self._pin_maps()
            with lib.call(name):
                lib.check(lib.lib.bpf_object__load(self.obj), f"load {name}")
        except BaseException:
            self.close()
            raise

    def _pin_maps(self) -> None:
        m = None
        while True:
            m = self.lib.lib.bpf_object__next_map(self.obj, m)
            if not m:
                break
            name = self.lib.lib.bpf_map__name(m).decode()
            if name.startswith("mltcp_") and name in maps.SHARED_MAPS + ("mltcp_markers",):
                self.lib.lib.bpf_map__set_pin_path(m, str(maps.pin_path(name)).encode())

    def map(self, name: str) -> int:
        found = self.lib.lib.bpf_object__find_map_by_name(self.obj, name.encode())
        return self.lib.check_ptr(found, f"map {name}")

    def prog_fd(self, name: str) -> int:
        prog = self.lib.check_ptr(
            self.lib.lib.bpf_object__find_program_by_name(self.obj, name.encode()), f"prog {name}")
        return self.lib.lib.bpf_program__fd(prog)

    def prog(self, name: str) -> int:
        return self.lib.check_ptr(
            self.lib.lib.bpf_object__find_program_by_name(self.obj, name.encode()), f"prog {name}")

    def close(self) -> None:
        if self.obj:
            self.lib.lib.bpf_object__close(self.obj)
            self.obj = 0


def _ops_pin(module: str) -> Path:
    return maps.PIN_ROOT / "ops" / cc_name(module)


@dataclass(frozen=True)
class LoadResult:
    """What ``load`` did: modules it registered now and those that already were."""

    loaded: list[str]
    already: list[str]


@_under_host_lock
def load(modules: Iterable[str]) -> LoadResult:
    """Register the named MLTCP modules; all or nothing.  Idempotent: a module that is
    registered and pinned by mltcp already (after an agent restart, a second
    ``ExecStartPre``) is reported, not an error; a pin whose module is no longer
    registered is dropped and the module registered again.  One registered *without*
    mltcp's pin was left by something else (another pin root, a loader of another
    build): that is refused."""
    wanted = parse_modules(modules)
    require_bpf()
    registered = set(loaded_modules())
    foreign = [m for m in wanted if m in registered and not _ops_pin(m).exists()]
    if foreign:
        raise MltcpError(
            f"{', '.join(cc_name(m) for m in foreign)} registered without mltcp's pin "
            f"under {maps.PIN_ROOT}: run `mltcp unload --all`, then load again")
    for m in wanted:
        if m not in registered:
            with contextlib.suppress(FileNotFoundError):
                _ops_pin(m).unlink()  # a stale pin of an unregistered module
    already = [m for m in wanted if m in registered]
    done: list[str] = []
    try:
        for module in wanted:
            if module not in already:
                _register(module)
                done.append(module)
    except BaseException:
        for module in reversed(done):
            _unregister(module)
        remove_unused_pins()
        raise
    return LoadResult(loaded=done, already=already)


def _register(module: str) -> None:
    lib = libbpf()
    obj = LoadedObject(cc_name(module))
    try:
        st_map = obj.map(cc_name(module))
        with lib.call(module):
            link = lib.check_ptr(lib.lib.bpf_map__attach_struct_ops(st_map),
                                 f"register {cc_name(module)}")
        pin = _ops_pin(module)
        try:
            pin.parent.mkdir(parents=True, exist_ok=True)
            lib.obj_pin(lib.lib.bpf_map__fd(st_map), str(pin))
        except BaseException:
            lib.lib.bpf_link__destroy(link)  # unregisters
            raise
        # The pinned map keeps the registration; forget the link without detaching.
        lib.lib.bpf_link__disconnect(link)
        lib.lib.bpf_link__destroy(link)
    finally:
        obj.close()


def struct_ops_maps() -> list[BpfMapInfo]:
    """The kernel's struct_ops maps: every registered BPF congestion control, ours or not."""
    return [i for i in libbpf().map_infos() if i.type == BPF_MAP_TYPE_STRUCT_OPS]


def _struct_ops_ids(name: str) -> list[int]:
    return [int(i.id) for i in struct_ops_maps() if i.name.decode() == name]


def _unregister(module: str) -> bool:
    """Unregister one module (by its pin, or by map id if the pin is gone)."""
    lib = libbpf()
    zero = ctypes.c_uint32(0)
    pin = _ops_pin(module)
    removed = False
    fds: list[int] = []
    if pin.exists():
        fds.append(lib.obj_get(str(pin)))
    elif cc_name(module) in available_ccs():
        fds.extend(lib.lib.bpf_map_get_fd_by_id(i) for i in _struct_ops_ids(cc_name(module)))
    for fd in fds:
        if fd < 0:
            continue
        try:
            removed |= lib.map_delete(fd, zero)
        except OSError as exc:
            # EINPROGRESS: this registration is already being torn down (an earlier
            # unregister of it waits for its RCU grace period): nothing left to do.
            if exc.errno != errno.EINPROGRESS:
                raise
        finally:
            os.close(fd)
    with contextlib.suppress(FileNotFoundError):
        pin.unlink()
    return removed


@_under_host_lock
def unload(modules: Iterable[str]) -> list[str]:
    """Unregister the named modules; returns those that were registered."""
    wanted = parse_modules(modules)
    require_bpf()
    out = [m for m in wanted if _unregister(m)]
    remove_unused_pins()
    return out


# -- sockops classifier ------------------------------------------------------------

SOCKOPS_DIR = "sockops"
LINKS_DIR = "links"


def _sockops_prog_fd() -> int:
    """The pinned classifier program (loaded and pinned on first use)."""
    lib = libbpf()
    prog_pin = maps.PIN_ROOT / SOCKOPS_DIR / "prog"
    if prog_pin.exists():
        return lib.obj_get(str(prog_pin))
    obj = LoadedObject("mltcp_sockops")
    try:
        prog_pin.parent.mkdir(parents=True, exist_ok=True)
        lib.obj_pin(obj.prog_fd("mltcp_sockops"), str(prog_pin))
        try:
            lib.obj_pin(lib.lib.bpf_map__fd(obj.map("mltcp_cgroup_job")),
                        str(prog_pin.parent / "cgroup_job"))
        except BaseException:
            prog_pin.unlink()
            raise
        return lib.obj_get(str(prog_pin))
    finally:
        obj.close()


def cgroup_link_pin(job_id: int, cgroup: Path) -> Path:
    return maps.PIN_ROOT / LINKS_DIR / f"job{job_id}-cg{cgroup.stat().st_ino}"


def _link_classifier(cgroup: Path, pin: Path) -> None:
    """Attach the classifier to a cgroup through a bpf_link pinned at `pin` (the pin keeps
    the attachment; removing it detaches)."""
    lib = libbpf()
    prog_fd = _sockops_prog_fd()
    cg_fd = os.open(cgroup, os.O_RDONLY | os.O_DIRECTORY)
    try:
        with lib.call("attach"):
            link_fd = lib.check(lib.lib.bpf_link_create(prog_fd, cg_fd, BPF_CGROUP_SOCK_OPS, None),
                                f"attach sockops to {cgroup}")
        try:
            pin.parent.mkdir(parents=True, exist_ok=True)
            lib.obj_pin(link_fd, str(pin))
        finally:
            os.close(link_fd)
    finally:
        os.close(cg_fd)
        os.close(prog_fd)


@_under_host_lock
def attach_cgroup(job_id: int, cgroup: Path) -> Path:
    """Attach the classifier to a job's cgroup and bind that cgroup to the job."""
    lib = libbpf()
    pin = cgroup_link_pin(job_id, cgroup)
    _link_classifier(cgroup, pin)
    try:
        # The attachment's cgroup storage exists from the attach on: name the job in it.
        key = maps.CgroupStorageKey(cgroup_inode_id=cgroup.stat().st_ino,
                                    attach_type=BPF_CGROUP_SOCK_OPS)
        storage = lib.obj_get(str(maps.PIN_ROOT / SOCKOPS_DIR / "cgroup_job"))
        try:
            lib.map_update(storage, key, ctypes.c_uint32(job_id))
        finally:
            os.close(storage)
    except BaseException:
        pin.unlink()
        raise
    return pin


@_under_host_lock
def attach_root_rules() -> Path:
    """Run the classifier for every socket (root cgroup) so address/port rules select the CC."""
    pin = maps.PIN_ROOT / LINKS_DIR / "rules-root"
    if not pin.exists():
        _link_classifier(cgroup2_root(), pin)
    return pin


@_under_host_lock
def detach_links(prefix: str) -> int:
    """Remove pinned cgroup links whose name starts with prefix (detaches them)."""
    links = maps.PIN_ROOT / LINKS_DIR
    n = 0
    if links.is_dir():
        for pin in links.iterdir():
            if pin.name.startswith(prefix):
                pin.unlink()
                n += 1
    return n


# -- ECN marker ----------------------------------------------------------------------

MARKER_DIR = "marker"


def _in_netns(netns: str | None, argv: list[str]) -> subprocess.CompletedProcess[str]:
    cmd = namespaces.nsenter_argv(netns, argv) if netns else argv
    return subprocess.run(cmd, capture_output=True, text=True)


def _ifindex(netns: str | None, dev: str) -> int:
    # Ask over netlink inside the namespace: /sys/class/net would show the sysfs of the
    # namespace that mounted it, not the one nsenter entered.
    proc = _in_netns(netns, ["ip", "-o", "link", "show", "dev", dev])
    if proc.returncode != 0:
        raise SpecError("dev", f"no device {dev!r} in namespace {netns or 'init'}",
                        "name an existing interface (ip link)")
    return int(proc.stdout.split(":", 1)[0])


def _ensure_marker_progs() -> None:
    lib = libbpf()
    mdir = maps.PIN_ROOT / MARKER_DIR
    if (mdir / "tc").exists():
        return
    obj = LoadedObject("ecn_marker")
    created: list[Path] = []
    try:
        mdir.mkdir(parents=True, exist_ok=True)
        for prog, pin in (("mltcp_qdisc_enqueue", "enqueue"), ("mltcp_qdisc_dequeue", "dequeue")):
            with lib.call(prog):
                link = lib.check_ptr(lib.lib.bpf_program__attach(obj.prog(prog)), f"attach {prog}")
            try:
                lib.check(lib.lib.bpf_link__pin(link, str(mdir / pin).encode()), f"pin {pin}")
                created.append(mdir / pin)
            finally:
                lib.lib.bpf_link__destroy(link)  # pinned links stay attached
        lib.obj_pin(obj.prog_fd("mltcp_ecn_mark"), str(mdir / "tc"))
        created.append(mdir / "tc")
    except BaseException:
        for p in created:
            p.unlink()
        raise
    finally:
        obj.close()


def _marker_key(dev: str, netns: str | None) -> maps.MarkerKey:
    path = namespaces.netns_path(netns) if netns else None
    return maps.MarkerKey(ifindex=_ifindex(netns, dev),
                          netns_cookie=namespaces.netns_cookie(path))


@_under_host_lock
def attach_marker(dev: str, k_bytes: int, netns: str | None = None) -> maps.MarkerKey:
    """Mark CE on ECT packets leaving `dev` while its root qdisc holds more than k_bytes."""
    if not 1500 <= k_bytes <= 1 << 30:
        raise SpecError("k_bytes", f"{k_bytes} out of range", "use 1500 B .. 1 GiB, e.g. 65000")
    require_bpf()
    key = _marker_key(dev, netns)
    _ensure_marker_progs()
    with maps.PinnedMap("mltcp_markers") as mm:
        mm.put(key, maps.Marker(k_bytes=k_bytes))
        try:
            _in_netns(netns, ["tc", "qdisc", "add", "dev", dev, "clsact"])  # may already exist
            proc = _in_netns(netns, ["tc", "filter", "replace", "dev", dev, "egress", "pref", "1",
                                     "handle", "1", "bpf", "direct-action", "object-pinned",
                                     str(maps.PIN_ROOT / MARKER_DIR / "tc")])
            if proc.returncode != 0:
                raise MltcpError(f"tc could not attach the ECN marker to {dev}: "
                                 f"{proc.stderr.strip()}")
        except BaseException:
            mm.delete(key)
            _in_netns(netns, ["tc", "qdisc", "del", "dev", dev, "clsact"])
            remove_unused_pins()
            raise
    return key


def marker_stats(dev: str, netns: str | None = None) -> maps.Marker | None:
    with maps.PinnedMap("mltcp_markers") as mm:
        return mm.get(_marker_key(dev, netns), maps.Marker)


@_under_host_lock
def reset_marker(dev: str, k_bytes: int, netns: str | None = None) -> None:
    """Zero a marker's counters and set a new threshold."""
    with maps.PinnedMap("mltcp_markers") as mm:
        mm.put(_marker_key(dev, netns), maps.Marker(k_bytes=k_bytes), 2)  # BPF_EXIST


@_under_host_lock
def detach_marker(dev: str, netns: str | None = None) -> None:
    key = _marker_key(dev, netns)
    _in_netns(netns, ["tc", "qdisc", "del", "dev", dev, "clsact"])
    forget_markers([key])


@_under_host_lock
def forget_markers(keys: list[maps.MarkerKey]) -> None:
    """Drop markers whose device is gone (its namespace was deleted with its tc filter)."""
    if maps.pin_path("mltcp_markers").exists():
        with maps.PinnedMap("mltcp_markers") as mm:
            for key in keys:
                mm.delete(key)
    remove_unused_pins()


@_under_host_lock
def forget_stale_markers() -> list[maps.MarkerKey]:
    """Drop markers whose network namespace is gone (a killed run's fabric, deleted by
    ``mltcp testbed clean``): their devices and tc filters went with it, but their map
    entries would keep the marker's pins alive.  Returns the keys it dropped."""
    if not maps.pin_path("mltcp_markers").exists():
        return []
    live = {namespaces.netns_cookie(None)}
    for name in namespaces.list_netns():
        with contextlib.suppress(OSError):   # a namespace deleted meanwhile
            live.add(namespaces.netns_cookie(namespaces.netns_path(name)))
    with maps.PinnedMap("mltcp_markers") as mm:
        stale = [k for k in mm.keys(maps.MarkerKey) if k.netns_cookie not in live]
    forget_markers(stale)
    return stale


# -- cleanup -----------------------------------------------------------------------------

def _markers_in_use() -> bool:
    pin = maps.pin_path("mltcp_markers")
    if not pin.exists():
        return False
    with maps.PinnedMap("mltcp_markers") as mm:
        return bool(mm.keys(maps.MarkerKey))


@_under_host_lock
def remove_unused_pins(keep_maps: bool = False) -> None:
    """Drop pins nothing needs any more: marker without devices, classifier
    without links, and the shared maps once no module, link or marker is left."""
    root = maps.PIN_ROOT
    if not root.exists():
        return
    if (root / MARKER_DIR).exists() and not _markers_in_use():
        shutil.rmtree(root / MARKER_DIR)
        with contextlib.suppress(FileNotFoundError):
            maps.pin_path("mltcp_markers").unlink()
    links = root / LINKS_DIR
    if links.exists() and not any(links.iterdir()):
        links.rmdir()
    if (root / SOCKOPS_DIR).exists() and not links.exists():
        shutil.rmtree(root / SOCKOPS_DIR)
    ops = root / "ops"
    if ops.exists() and not any(ops.iterdir()):
        ops.rmdir()
    busy = any((root / d).exists() for d in ("ops", LINKS_DIR, SOCKOPS_DIR, MARKER_DIR))
    if not busy and not keep_maps:
        for name in (*maps.SHARED_MAPS, "mltcp_markers"):
            with contextlib.suppress(FileNotFoundError):
                maps.pin_path(name).unlink()
        with contextlib.suppress(OSError):
            root.rmdir()


@_under_host_lock
def unload_all() -> list[str]:
    """Remove every trace: modules, classifier links, marker, pins."""
    require_bpf()
    removed = [cc_name(m) for m in MODULES if _unregister(m)]
    if (maps.PIN_ROOT / MARKER_DIR).exists() and maps.pin_path("mltcp_markers").exists():
        with maps.PinnedMap("mltcp_markers") as mm:
            for key in mm.keys(maps.MarkerKey):
                mm.delete(key)
    detach_links("")
    if maps.PIN_ROOT.exists():
        shutil.rmtree(maps.PIN_ROOT)
    return removed


def residue() -> list[str]:
    """What of mltcp is still in the kernel: pins, registered CCs, programs, maps."""
    out: list[str] = []
    if maps.PIN_ROOT.exists():
        out += [f"pin {p}" for p in sorted(maps.PIN_ROOT.rglob("*"))] or [f"pin {maps.PIN_ROOT}"]
    out += [f"congestion control {c}" for c in available_ccs() if c.startswith("mltcp_")]
    lib = libbpf()
    out += [f"bpf program {p.name.decode()} (id {p.id})" for p in lib.prog_infos()
            if p.name.decode().startswith("mltcp_")]
    out += [f"bpf map {m.name.decode()} (id {m.id})" for m in lib.map_infos()
            if m.name.decode().startswith("mltcp_")]
    return out


def settle(timeout_s: float = 5.0) -> list[str]:
    """residue() once the kernel has freed what was released (struct_ops maps and their
    programs go away after an RCU grace period, not synchronously)."""
    deadline = time.monotonic() + timeout_s
    left = residue()
    while left and time.monotonic() < deadline:
        time.sleep(0.05)
        left = residue()
    return left


def require_loaded(module: str) -> None:
    if cc_name(module) not in available_ccs():
        raise MltcpError(f"{cc_name(module)} is not loaded: run `mltcp load {module}` first")

