#!/usr/bin/env python3
"""Attach cc_fault_probe.bpf.o (tracepoints only) for SECONDS and print its counts per
congestion control.  Plain ctypes over libbpf (libbpf1): nothing of mltcp is needed.

    probe.py OBJECT SECONDS
"""

import ctypes
import ctypes.util
import sys
import time

NAMES = ("reductions", "handed_garbage", "episodes", "segments_with_garbage", "segments",
         "bursts", "episodes_open")


class Key(ctypes.Structure):
    _fields_ = [("cc", ctypes.c_char * 16)]


class Counts(ctypes.Structure):
    _fields_ = [("n", ctypes.c_uint64 * 7), ("last_bad", ctypes.c_uint64)]


def main() -> int:
    obj_path, seconds = sys.argv[1].encode(), float(sys.argv[2])
    lib = ctypes.CDLL(ctypes.util.find_library("bpf"), use_errno=True)
    vp = ctypes.c_void_p
    for name, res, args in (("bpf_object__open_file", vp, [ctypes.c_char_p, vp]),
                            ("bpf_object__load", ctypes.c_int, [vp]),
                            ("bpf_object__find_program_by_name", vp, [vp, ctypes.c_char_p]),
                            ("bpf_object__find_map_by_name", vp, [vp, ctypes.c_char_p]),
                            ("bpf_program__attach", vp, [vp]),
                            ("bpf_map__fd", ctypes.c_int, [vp]),
                            ("bpf_map_get_next_key", ctypes.c_int, [ctypes.c_int, vp, vp]),
                            ("bpf_map_lookup_elem", ctypes.c_int, [ctypes.c_int, vp, vp])):
        getattr(lib, name).restype, getattr(lib, name).argtypes = res, args
    obj = lib.bpf_object__open_file(obj_path, None)
    if not obj or lib.bpf_object__load(obj):
        sys.exit("cannot load the probe (root? BTF?)")
    for prog in (b"probe_state_set", b"probe_segment"):
        if not lib.bpf_program__attach(lib.bpf_object__find_program_by_name(obj, prog)):
            sys.exit(f"cannot attach {prog.decode()}")
    print("probe attached", flush=True)
    time.sleep(seconds)
    fd = lib.bpf_map__fd(lib.bpf_object__find_map_by_name(obj, b"probe_counts"))
    prev, key = None, Key()
    while lib.bpf_map_get_next_key(fd, ctypes.byref(prev) if prev else None,
                                   ctypes.byref(key)) == 0:
        value = Counts()
        lib.bpf_map_lookup_elem(fd, ctypes.byref(key), ctypes.byref(value))
        counts = ", ".join(f"{n} {v}" for n, v in zip(NAMES, value.n, strict=True))
        print(f"{key.cc.decode():<16} {counts}, last garbage {value.last_bad:#x}")
        prev, key = key, Key()
    return 0


if __name__ == "__main__":
    sys.exit(main())
