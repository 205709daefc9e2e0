"""``mltcp dcqcn probe|knobs|run|restore``: the command-line side of the tuner.

The argument parser lives with the other subcommands in :mod:`mltcp.cli`; this module
turns the parsed arguments into library calls and prints the results.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import time
from pathlib import Path
from types import FrameType

from mltcp.core.aggressiveness import Aggressiveness
from mltcp.core.budget import parse_bytes
from mltcp.core.dcqcn.knobs import markdown_table, text_table
from mltcp.core.dcqcn.policy import DcqcnPolicy, preset
from mltcp.core.errors import SpecError
from mltcp.host.dcqcn.backends import DryRunBackend, probe
from mltcp.host.dcqcn.counters import counter_from_spec
from mltcp.host.dcqcn.snapshot import default_state_dir, restore_file, snapshot_path
from mltcp.host.dcqcn.tuner import Tuner, TunerConfig, advice_summary

DEFAULT_PRESET = "tuned"


class _Terminated(Exception):
    """SIGTERM, turned into an exception so that ``finally`` restores the knobs."""


def _on_sigterm(signum: int, frame: FrameType | None) -> None:
    raise _Terminated


def _say(message: str) -> None:
    print(f"{time.strftime('%H:%M:%S')} {message}", flush=True)


def _ms_to_ns(value: float, field: str) -> int:
    if not value > 0:
        flag = field.replace("_", "-")
        raise SpecError(field, f"must be > 0 (got {value:g})", f"use e.g. --{flag} 2")
    return round(value * 1_000_000)


def _policy(args: argparse.Namespace) -> DcqcnPolicy:
    base = preset(args.preset or DEFAULT_PRESET).agg
    agg = Aggressiveness(slope=base.slope if args.slope is None else args.slope,
                         intercept=base.intercept if args.intercept is None else args.intercept,
                         cap=base.cap if args.cap is None else args.cap)
    return DcqcnPolicy(agg, mode=args.mode, f_step=args.f_step)


def cmd_probe(args: argparse.Namespace) -> int:
    backend = probe(args.root, args.iface, args.pci, args.backend)
    values = backend.read_all()
    if args.json:
        print(json.dumps({"backend": backend.kind, "base": str(backend.base),
                          "iface": backend.iface, "pci": backend.pci, "knobs": values},
                         indent=2))
        return 0
    print(f"backend: {backend.describe()}")
    print(text_table(values), end="")
    print("* differs from the mlx5 default")
    return 0


def cmd_run(args: argparse.Namespace) -> int:
    if not args.iface:
        raise SpecError("iface", "missing", "name the RoCE netdev, e.g. --iface enp59s0f0np0")
    policy = _policy(args)
    config = TunerConfig(
        budget=parse_bytes(args.budget, "budget"), policy=policy,
        gap_ns=_ms_to_ns(args.gap_ms, "gap_ms"), poll_ns=_ms_to_ns(args.poll_ms, "poll_ms"),
        advise=args.advise, base=args.base, restore_foreign=args.restore_foreign)
    backend = probe(args.root, args.iface, args.pci, args.backend)
    if isinstance(backend, DryRunBackend) and not args.advise:
        raise SpecError("backend", "the defaults backend has no NIC to write to",
                        "add --advise to see what the tuner would do")
    counter = counter_from_spec(args.counter, args.root, args.iface)
    state_path = None if args.advise else snapshot_path(
        Path(args.state_dir) if args.state_dir else default_state_dir(), backend.key)
    tuner = Tuner(backend, counter, config, state_path, log=_say,
                  on_iteration=lambda s: _say(s.line()))
    duration = None if args.duration_s is None else round(args.duration_s * 1e9)
    old = signal.signal(signal.SIGTERM, _on_sigterm)
    rc = 0
    try:
        tuner.start()
        if tuner.tracker.state.total_bytes == 0:
            after = "" if args.advise else " and restores the knobs"
            _say(f"waiting for RDMA traffic ({counter.description}); one status line per "
                 f"iteration; Ctrl-C or SIGTERM stops{after}")
        tuner.run(duration_ns=duration)
    except _Terminated:
        _say("SIGTERM: stopping")
        rc = 128 + signal.SIGTERM
    except KeyboardInterrupt:
        _say("interrupted: stopping")
        rc = 130
    finally:
        # A second SIGTERM waits (blocked) while the knobs are restored, then lands here.
        signal.signal(signal.SIGTERM, lambda *_: None)
        report = tuner.close()
        signal.signal(signal.SIGTERM, old)
    if args.advise:
        for line in advice_summary(tuner.changes):
            _say(f"advice: {line}")
    if report is not None and not report.ok:
        return 1
    return rc


def cmd_restore(args: argparse.Namespace) -> int:
    key = args.iface or args.pci
    if not key:
        raise SpecError("iface", "missing", "name the port the tuner ran on: --iface IF")
    path = snapshot_path(Path(args.state_dir) if args.state_dir else default_state_dir(), key)
    if not path.exists():  # idempotent, so a boot-time or ExecStopPost restore can always run
        print(f"nothing to restore: no snapshot at {path}")
        return 0
    report = restore_file(path, force=args.force, root=args.root)
    for line in report.lines():
        print(line)
    if report.ok:
        print(f"removed {path}")
        return 0
    print(f"kept {path}: fix the failures above and run restore again", file=sys.stderr)
    return 1


def main(args: argparse.Namespace) -> int:
    if args.dcqcn_cmd == "knobs":
        print(markdown_table() if args.markdown else text_table(), end="")
        return 0
    if args.dcqcn_cmd == "probe":
        return cmd_probe(args)
    if args.dcqcn_cmd == "run":
        return cmd_run(args)
    if args.dcqcn_cmd == "restore":
        return cmd_restore(args)
    raise SpecError("dcqcn", f"unknown subcommand {args.dcqcn_cmd}", "see mltcp dcqcn --help")
