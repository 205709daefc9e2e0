"""The user-space side of the datapath's map layout (kernel/mltcp.h).

Each ctypes structure mirrors one C struct byte for byte; ABI_VERSION must
equal MLTCP_ABI_VERSION in the header (tests/test_kernel_abi.py compiles a probe
that checks sizes and the version).  All pins live under one project prefix,
PIN_ROOT, so `mltcp unload --all` can remove everything by that prefix.
"""

from __future__ import annotations

import ctypes
import os
import socket
from pathlib import Path

from mltcp.host.libbpf import BpfMapInfo, libbpf

ABI_VERSION = 2
MAX_JOBS = 256
HISTORY = 8
JOB_ENABLED = 0x1
JOB_SIGNALS = 0x2   # the training loop signals iteration ends: no idle-gap boundaries

PIN_ROOT = Path(os.environ.get("MLTCP_PIN_ROOT", "/sys/fs/bpf/mltcp"))

CC_IDS = {"reno": 1, "cubic": 2, "dctcp": 3}
CC_NAMES = {v: k for k, v in CC_IDS.items()}

# Maps shared by every module (pinned by name under PIN_ROOT).
SHARED_MAPS = ("mltcp_job_cfg", "mltcp_job_state", "mltcp_flows", "mltcp_prefix_rules",
               "mltcp_local_rules", "mltcp_sk_tags", "mltcp_health")
PORT_RULES = 32   # MLTCP_PORT_RULES: port ranges in one prefix's list


class JobCfg(ctypes.Structure):
    _fields_ = [
        ("budget", ctypes.c_uint64),
        ("gap_ns", ctypes.c_uint64),
        ("refreshed_ns", ctypes.c_uint64),
        ("stale_ns", ctypes.c_uint64),
        ("slope_fp", ctypes.c_uint32),
        ("intercept_fp", ctypes.c_uint32),
        ("cap_fp", ctypes.c_uint32),
        ("signal_seq", ctypes.c_uint32),
        ("flags", ctypes.c_uint32),
        ("cc", ctypes.c_uint32),
        ("abi", ctypes.c_uint32),
        ("_pad", ctypes.c_uint32),
    ]


class JobState(ctypes.Structure):
    _fields_ = [
        ("lock", ctypes.c_uint32),
        ("f_fp", ctypes.c_uint32),
        ("bytes_in_iter", ctypes.c_uint64),
        ("bytes_since_gap", ctypes.c_uint64),
        ("iteration", ctypes.c_uint64),
        ("last_ack_ns", ctypes.c_uint64),
        ("last_iter_bytes", ctypes.c_uint64),
        ("total_bytes", ctypes.c_uint64),
        ("iter_start_ns", ctypes.c_uint64),
        ("wraps", ctypes.c_uint64),
        ("gaps", ctypes.c_uint64),
        ("signals", ctypes.c_uint64),
        ("cwnd_reductions", ctypes.c_uint64),
        ("stale_fallbacks", ctypes.c_uint64),
        ("signal_seen", ctypes.c_uint32),
        ("hist_len", ctypes.c_uint32),
        ("hist_head", ctypes.c_uint32),
        ("_pad", ctypes.c_uint32),
        ("hist", ctypes.c_uint64 * HISTORY),
    ]

    def history(self) -> list[int]:
        """Boundary samples, oldest first."""
        n = self.hist_len
        start = (self.hist_head - n) % HISTORY
        return [int(self.hist[(start + i) % HISTORY]) for i in range(n)]


class FlowInfo(ctypes.Structure):
    _fields_ = [
        ("job_id", ctypes.c_uint32),
        ("cc", ctypes.c_uint32),
        ("family", ctypes.c_uint32),
        ("sport", ctypes.c_uint16),
        ("dport", ctypes.c_uint16),
        ("saddr", ctypes.c_uint32 * 4),
        ("daddr", ctypes.c_uint32 * 4),
        ("cwnd", ctypes.c_uint32),
        ("ssthresh", ctypes.c_uint32),
        ("srtt_us", ctypes.c_uint32),
        ("f_fp", ctypes.c_uint32),
        ("bytes_acked", ctypes.c_uint64),
        ("updated_ns", ctypes.c_uint64),
        ("cwnd_reductions", ctypes.c_uint64),
        ("loss_reductions", ctypes.c_uint64),
    ]


class PrefixKey(ctypes.Structure):
    """struct mltcp_prefix_key: the prefix trie's key (prefixlen counts the family word)."""

    _fields_ = [
        ("prefixlen", ctypes.c_uint32),
        ("family", ctypes.c_uint32),
        ("addr", ctypes.c_uint32 * 4),
    ]


class PortRule(ctypes.Structure):
    _fields_ = [("lo", ctypes.c_uint16), ("hi", ctypes.c_uint16), ("job_id", ctypes.c_uint32)]


class PortRules(ctypes.Structure):
    """struct mltcp_port_rules: a prefix's (or the local ports') ranges in precedence order."""

    _fields_ = [("count", ctypes.c_uint32), ("_pad", ctypes.c_uint32),
                ("rule", PortRule * PORT_RULES)]


class MarkerKey(ctypes.Structure):
    _fields_ = [("ifindex", ctypes.c_uint32), ("_pad", ctypes.c_uint32),
                ("netns_cookie", ctypes.c_uint64)]


class Marker(ctypes.Structure):
    _fields_ = [
        ("k_bytes", ctypes.c_uint32),
        ("_pad", ctypes.c_uint32),
        ("backlog", ctypes.c_uint64),
        ("max_backlog", ctypes.c_uint64),
        ("packets", ctypes.c_uint64),
        ("marked", ctypes.c_uint64),
        ("not_ect", ctypes.c_uint64),
        ("backlog_sum", ctypes.c_uint64),
    ]


class Health(ctypes.Structure):
    """How often the kernel fault of docs/known-issues.md reached a module and was kept
    away from the window (kernel/mltcp_window.h: mltcp_control_begin)."""
    _fields_ = [("ssthresh_overrides", ctypes.c_uint64), ("cwnd_contained", ctypes.c_uint64),
                ("last_bad", ctypes.c_uint64)]


def read_health() -> Health:
    """Host-wide kernel-fault counters of the datapath (zeros when nothing is loaded)."""
    if not pin_path("mltcp_health").exists():
        return Health()
    with PinnedMap("mltcp_health") as m:
        return m.get(ctypes.c_uint32(0), Health) or Health()


class CgroupStorageKey(ctypes.Structure):
    _fields_ = [("cgroup_inode_id", ctypes.c_uint64), ("attach_type", ctypes.c_uint32),
                ("_pad", ctypes.c_uint32)]


def pin_path(name: str) -> Path:
    return PIN_ROOT / name


def addr_words(addr: bytes) -> tuple[int, int, int, int]:
    """Address bytes as the kernel's __u32 words in memory order."""
    padded = addr.ljust(16, b"\0")
    return tuple(int.from_bytes(padded[i : i + 4], "little") for i in range(0, 16, 4))  # type: ignore[return-value]


def format_addr(family: int, words: ctypes.Array) -> str:
    raw = b"".join(int(w).to_bytes(4, "little") for w in words)
    if family == socket.AF_INET:
        return socket.inet_ntop(socket.AF_INET, raw[:4])
    if family == socket.AF_INET6:
        return socket.inet_ntop(socket.AF_INET6, raw)
    return "?"


def pinned_map_id(name: str) -> int | None:
    """Kernel id of a pinned map (changes whenever the datapath is recreated), or None."""
    if not pin_path(name).exists():
        return None
    lib = libbpf()
    fd = lib.obj_get(str(pin_path(name)))
    try:
        info = BpfMapInfo()
        size = ctypes.c_uint32(ctypes.sizeof(info))
        lib.check(lib.lib.bpf_obj_get_info_by_fd(fd, ctypes.byref(info), ctypes.byref(size)),
                  f"info of {name}")
        return int(info.id)
    finally:
        os.close(fd)


class PinnedMap:
    """A pinned map opened by path, closed with the object."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.fd = -1    # close() (and __del__) must work when obj_get below raises
        self.fd = libbpf().obj_get(str(pin_path(name)))

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def __enter__(self) -> PinnedMap:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        self.close()

    def get(self, key: ctypes._CData, value_type: type[ctypes._CData]) -> ctypes._CData | None:
        value = value_type()
        return value if libbpf().map_lookup(self.fd, key, value) else None

    def put(self, key: ctypes._CData, value: ctypes._CData, flags: int = 0) -> None:
        libbpf().map_update(self.fd, key, value, flags)

    def delete(self, key: ctypes._CData) -> bool:
        return libbpf().map_delete(self.fd, key)

    def keys(self, key_type: type[ctypes._CData]) -> list[ctypes._CData]:
        return libbpf().map_keys(self.fd, key_type)
