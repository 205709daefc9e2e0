"""ctypes bindings to the system libbpf (libbpf.so.1).

BCC cannot load struct_ops and needs kernel headers this kernel does not ship,
so the control plane talks to the kernel through libbpf directly.  Only the
few calls the project needs are bound; each failure becomes an ``OSError``
that carries errno and the libbpf/verifier log of that call, so a failed load
explains itself.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from mltcp.core.errors import CapabilityError

BPF_ANY = 0
BPF_NOEXIST = 1
BPF_EXIST = 2

BPF_MAP_TYPE_STRUCT_OPS = 26
BPF_CGROUP_SOCK_OPS = 3

_PRINT_FN = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_int, ctypes.c_char_p, ctypes.c_void_p)


class BpfMapInfo(ctypes.Structure):
    """Leading fields of the kernel's struct bpf_map_info (enough to identify a map)."""

    _fields_ = [
        ("type", ctypes.c_uint32),
        ("id", ctypes.c_uint32),
        ("key_size", ctypes.c_uint32),
        ("value_size", ctypes.c_uint32),
        ("max_entries", ctypes.c_uint32),
        ("map_flags", ctypes.c_uint32),
        ("name", ctypes.c_char * 16),
    ]


class BpfProgInfo(ctypes.Structure):
    """Leading fields of the kernel's struct bpf_prog_info up to its name."""

    _fields_ = [
        ("type", ctypes.c_uint32),
        ("id", ctypes.c_uint32),
        ("tag", ctypes.c_uint8 * 8),
        ("jited_prog_len", ctypes.c_uint32),
        ("xlated_prog_len", ctypes.c_uint32),
        ("jited_prog_insns", ctypes.c_uint64),
        ("xlated_prog_insns", ctypes.c_uint64),
        ("load_time", ctypes.c_uint64),
        ("created_by_uid", ctypes.c_uint32),
        ("nr_map_ids", ctypes.c_uint32),
        ("map_ids", ctypes.c_uint64),
        ("name", ctypes.c_char * 16),
    ]


class LibBpf:
    """The bound library plus a per-call log of what libbpf printed."""

    def __init__(self) -> None:
        path = ctypes.util.find_library("bpf") or "libbpf.so.1"
        try:
            self.lib = ctypes.CDLL(path, use_errno=True)
        except OSError as exc:
            raise CapabilityError(
                "libbpf.so.1 not found: install the Debian package libbpf1 "
                "(or run scripts/setup.sh)"
            ) from exc
        self.libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
        self._log: list[str] = []
        self._lock = threading.Lock()
        self._print_cb = _PRINT_FN(self._on_print)
        self._declare()
        self.lib.libbpf_set_print(self._print_cb)

    def _on_print(self, level: int, fmt: bytes, args: int) -> int:
        buf = ctypes.create_string_buffer(4096)
        self.libc.vsnprintf(buf, len(buf), fmt, ctypes.c_void_p(args))
        self._log.append(buf.value.decode(errors="replace"))
        return 0

    def _declare(self) -> None:
        L = self.lib
        vp, cp, i, u32 = ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int, ctypes.c_uint32
        sigs: dict[str, tuple[object, list[object]]] = {
            "libbpf_set_print": (vp, [_PRINT_FN]),
            "bpf_object__open_file": (vp, [cp, vp]),
            "bpf_object__load": (i, [vp]),
            "bpf_object__close": (None, [vp]),
            "bpf_object__find_map_by_name": (vp, [vp, cp]),
            "bpf_object__find_program_by_name": (vp, [vp, cp]),
            "bpf_object__next_map": (vp, [vp, vp]),
            "bpf_map__name": (cp, [vp]),
            "bpf_map__fd": (i, [vp]),
            "bpf_map__is_internal": (ctypes.c_bool, [vp]),
            "bpf_map__set_pin_path": (i, [vp, cp]),
            "bpf_map__attach_struct_ops": (vp, [vp]),
            "bpf_program__fd": (i, [vp]),
            "bpf_program__attach": (vp, [vp]),
            "bpf_link__pin": (i, [vp, cp]),
            "bpf_link__disconnect": (None, [vp]),
            "bpf_link__destroy": (i, [vp]),
            "bpf_obj_pin": (i, [i, cp]),
            "bpf_obj_get": (i, [cp]),
            "bpf_map_lookup_elem": (i, [i, vp, vp]),
            "bpf_map_update_elem": (i, [i, vp, vp, ctypes.c_uint64]),
            "bpf_map_delete_elem": (i, [i, vp]),
            "bpf_map_get_next_key": (i, [i, vp, vp]),
            "bpf_link_create": (i, [i, i, u32, vp]),
            "bpf_map_get_next_id": (i, [u32, ctypes.POINTER(u32)]),
            "bpf_prog_get_next_id": (i, [u32, ctypes.POINTER(u32)]),
            "bpf_map_get_fd_by_id": (i, [u32]),
            "bpf_prog_get_fd_by_id": (i, [u32]),
            "bpf_obj_get_info_by_fd": (i, [i, vp, ctypes.POINTER(u32)]),
        }
        for name, (res, args) in sigs.items():
            fn = getattr(L, name)
            fn.restype = res
            fn.argtypes = args

    # -- error handling -------------------------------------------------
    @contextmanager
    def call(self, what: str) -> Iterator[None]:
        """Serialise libbpf calls and reset the log so errors carry only their own output."""
        with self._lock:
            self._log = []
            yield

    def error(self, what: str, err: int | None = None) -> OSError:
        code = abs(err) if err else ctypes.get_errno() or errno.EIO
        log = "".join(self._log).strip()
        msg = f"{what}: {os.strerror(code)}"
        if log:
            msg += "\n" + log
        return OSError(code, msg)

    def check(self, rc: int, what: str) -> int:
        if rc < 0:
            raise self.error(what, rc)
        return rc

    def check_ptr(self, ptr: int | None, what: str) -> int:
        if not ptr:
            raise self.error(what)
        return ptr

    # -- thin wrappers ---------------------------------------------------
    def obj_get(self, path: str) -> int:
        with self.call(path):
            return self.check(self.lib.bpf_obj_get(path.encode()), f"open pin {path}")

    def obj_pin(self, fd: int, path: str) -> None:
        with self.call(path):
            self.check(self.lib.bpf_obj_pin(fd, path.encode()), f"pin {path}")

    def map_lookup(self, fd: int, key: ctypes._CData, value: ctypes._CData) -> bool:
        rc = self.lib.bpf_map_lookup_elem(fd, ctypes.byref(key), ctypes.byref(value))
        if rc < 0:
            if ctypes.get_errno() == errno.ENOENT or -rc == errno.ENOENT:
                return False
            raise self.error("map lookup", rc)
        return True

    def map_update(self, fd: int, key: ctypes._CData, value: ctypes._CData, flags: int = 0) -> None:
        self.check(
            self.lib.bpf_map_update_elem(fd, ctypes.byref(key), ctypes.byref(value), flags),
            "map update",
        )

    def map_delete(self, fd: int, key: ctypes._CData) -> bool:
        rc = self.lib.bpf_map_delete_elem(fd, ctypes.byref(key))
        if rc < 0:
            if ctypes.get_errno() == errno.ENOENT or -rc == errno.ENOENT:
                return False
            raise self.error("map delete", rc)
        return True

    def map_keys(self, fd: int, key_type: type[ctypes._CData]) -> list[ctypes._CData]:
        keys = []
        prev = None
        while True:
            nxt = key_type()
            rc = self.lib.bpf_map_get_next_key(
                fd, ctypes.byref(prev) if prev is not None else None, ctypes.byref(nxt)
            )
            if rc < 0:
                break
            keys.append(nxt)
            prev = nxt
        return keys

    def map_infos(self) -> list[BpfMapInfo]:
        """Every BPF map in the system (id, type, name): for residue checks."""
        return self._infos(self.lib.bpf_map_get_next_id, self.lib.bpf_map_get_fd_by_id, BpfMapInfo)

    def prog_infos(self) -> list[BpfProgInfo]:
        return self._infos(self.lib.bpf_prog_get_next_id, self.lib.bpf_prog_get_fd_by_id,
                           BpfProgInfo)

    def _infos(self, next_id, fd_by_id, info_type):  # type: ignore[no-untyped-def]
        out = []
        cur = ctypes.c_uint32(0)
        while next_id(cur.value, ctypes.byref(cur)) == 0:
            fd = fd_by_id(cur.value)
            if fd < 0:
                continue
            try:
                info = info_type()
                size = ctypes.c_uint32(ctypes.sizeof(info))
                if self.lib.bpf_obj_get_info_by_fd(fd, ctypes.byref(info), ctypes.byref(size)) == 0:
                    out.append(info)
            finally:
                os.close(fd)
        return out


_LIB: LibBpf | None = None


def libbpf() -> LibBpf:
    """The process-wide binding (created on first use so importing mltcp never needs libbpf)."""
    global _LIB
    if _LIB is None:
        _LIB = LibBpf()
    return _LIB
