"""``mltcp dcqcn probe|knobs|run|restore``: the command-line side of the tuner.

The parser (:func:`register`) and the commands: parsed arguments into library calls of
:mod:`mltcp.host.dcqcn`, results printed.
"""

from __future__ import annotations

import argparse
import contextlib
import signal
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from mltcp.cli import args as args_
from mltcp.cli.exits import Exit
from mltcp.cli.output import add_json_flag, emit
from mltcp.core import signals
from mltcp.core.aggressiveness import Aggressiveness
from mltcp.core.dcqcn.knobs import KNOBS, markdown_table, text_table
from mltcp.core.dcqcn.policy import PRESETS as DCQCN_PRESETS
from mltcp.core.dcqcn.policy import DcqcnPolicy, preset
from mltcp.core.errors import MltcpError, SpecError
from mltcp.core.validate import parse_bytes
from mltcp.host.dcqcn.backends import BACKEND_KINDS, DryRunBackend, probe
from mltcp.host.dcqcn.counters import counter_from_spec
from mltcp.host.dcqcn.snapshot import (
    default_state_dir,
    live_tuner,
    restore_file,
    snapshot_path,
)
from mltcp.host.dcqcn.tuner import Tuner, TunerConfig, advice_summary, busy_port

DEFAULT_PRESET = "tuned"


def register(sub: Any) -> None:
    """Add ``mltcp dcqcn ...`` to the top-level subparsers."""

    dq = sub.add_parser("dcqcn", help="RoCE: scale the NIC's DCQCN rate increase by "
                                      "F(bytes_ratio) (mlx5 knobs), restore them after")
    dqs = dq.add_subparsers(dest="dcqcn_cmd", required=True, metavar="SUBCOMMAND")
    port = argparse.ArgumentParser(add_help=False)
    port.add_argument("--root", default="/", metavar="DIR",
                      help="find /sys under this directory (tests; default %(default)s)")
    port.add_argument("--iface", help="the RoCE netdev (default: the only one with knobs)")
    port.add_argument("--pci", help="upstream debugfs: the PCI function, e.g. 0000:3b:00.0 "
                                    "(default: the --iface's)")
    port.add_argument("--backend", default="auto", choices=BACKEND_KINDS,
                      help="knob layout (default auto: probe; defaults: the mlx5 defaults, "
                           "read-only, with --advise)")
    dp = dqs.add_parser("probe", parents=[port], help="which knob layout, knobs and values")
    add_json_flag(dp, "the port ({backend, base, iface, pci, knobs: {NAME: value}})")
    dk = dqs.add_parser("knobs", help="the knob table: units, ranges, defaults, sources")
    dk.add_argument("--markdown", action="store_true", help="as in rdma/README.md")
    add_json_flag(dk, "the table ([{name, side, unit, min, max, default, sysfs, debugfs, "
                      "scaling, source, about}])")
    dr = dqs.add_parser("run", parents=[port], help="tune until Ctrl-C/SIGTERM/SIGHUP/"
                                                    "--duration-s, then restore every knob "
                                                    "it changed")
    dr.set_defaults(teardown_signals=True)   # SIGTERM and SIGHUP restore as Ctrl-C does
    dr.add_argument("--budget", required=True, metavar="BYTES",
                    help="bytes this host sends per iteration, e.g. 150MB (1 B..1 TiB; "
                         "required)")
    fa = dr.add_argument_group("aggressiveness F = intercept + slope * bytes_ratio")
    fa.add_argument("--preset", choices=list(DCQCN_PRESETS),
                    help="mlx5-default (F = 1), paper (0.25 + 1.75 r) or tuned (1 + r, "
                         "the default)")
    fa.add_argument("--slope", type=args_.finite(), help="0..64 (default: the preset's)")
    fa.add_argument("--intercept", type=args_.finite(),
                    help="1/65536..64 (default: the preset's)")
    fa.add_argument("--cap", type=args_.finite(),
                    help="intercept..128 (default: the preset's)")
    dr.add_argument("--mode", default="timer", choices=["timer", "rates"],
                    help="timer: rpg_time_reset and rpg_byte_reset / F (default); rates: "
                         "rpg_ai_rate and rpg_hai_rate x F")
    dr.add_argument("--f-step", type=args_.number(1 / 1024, 1, "0.125"), default=0.125,
                    help="F is rounded to multiples of this before use (1/1024..1, "
                         "default %(default)s)")
    dr.add_argument("--base", default="current", choices=["current", "mlx5"],
                    help="scale the values found at start (default) or the mlx5 defaults")
    dr.add_argument("--advise", action="store_true",
                    help="write nothing: print each change the tuner would make, and why")
    dr.add_argument("--poll-ms", type=args_.number(0, 1000, "2", lo_open=True), default=2.0,
                    help="counter poll period (0 < ms <= 1000, default %(default)s)")
    dr.add_argument("--gap-ms", type=args_.number(0, 60_000, "10", lo_open=True), default=10.0,
                    help="silence that ends an iteration (0 < ms <= 60000, at least 2 "
                         "polls; default %(default)s)")
    dr.add_argument("--duration-s", type=args_.number(0, 30 * 86_400, "60", lo_open=True),
                    help="stop (and restore) after this long (0 < s <= 2592000, 30 days; "
                         "default: until Ctrl-C/SIGTERM)")
    dr.add_argument("--counter", default="auto",
                    help="RDMA tx bytes: auto, ib:DEV[:PORT] (port_xmit_data x 4), "
                         "ethtool[:STAT], file:PATH (default auto)")
    dr.add_argument("--state-dir", metavar="DIR",
                    help="snapshot directory (default /var/lib/mltcp/dcqcn)")
    dr.add_argument("--restore-foreign", action="store_true",
                    help="on exit also restore knobs someone else changed meanwhile")
    dre = dqs.add_parser("restore", help="put back every knob from the snapshot "
                                         "(also after a crash)")
    dre.add_argument("--iface", help="the netdev the tuner ran on (default: none; this or "
                                     "--pci is required)")
    dre.add_argument("--pci", help="the PCI function, if the tuner ran without --iface "
                                   "(default: none)")
    dre.add_argument("--root", metavar="DIR",
                     help="find /sys under this directory (default: the root recorded in "
                          "the snapshot)")
    dre.add_argument("--state-dir", metavar="DIR",
                     help="snapshot directory (default /var/lib/mltcp/dcqcn)")
    dre.add_argument("--force", action="store_true",
                     help="also overwrite knobs someone else changed since, and restore even "
                          "while a live `dcqcn run` tunes the port")
    dq.set_defaults(handler=main)


def _say(message: str) -> None:
    # After SIGHUP the terminal is gone (EIO): the restore must go on without its log.
    with contextlib.suppress(OSError):
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
        emit({"backend": backend.kind, "base": str(backend.base), "iface": backend.iface,
              "pci": backend.pci, "knobs": values})
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
    rc = 0
    try:
        tuner.start()
        if tuner.tracker.state.total_bytes == 0:
            after = "" if args.advise else " and restores the knobs"
            _say(f"waiting for RDMA traffic ({counter.description}); one status line per "
                 f"iteration; Ctrl-C, SIGTERM or SIGHUP stops{after}")
        tuner.run(duration_ns=duration)
    except KeyboardInterrupt as exc:   # Ctrl-C; SIGTERM and SIGHUP too (mltcp.core.signals)
        signo = exc.signo if isinstance(exc, signals.Terminated) else signal.SIGINT
        _say("interrupted: stopping" if signo == signal.SIGINT
             else f"{signals.name(signo)}: stopping")
        rc = signals.exit_code(signo)
    finally:
        # Signals from here on are ignored (said on stderr) until the knobs are back.
        report = tuner.close()
    if args.advise:
        for line in advice_summary(tuner.changes):
            _say(f"advice: {line}")
    if report is not None and not report.ok:
        return Exit.FAILED
    return rc


def cmd_restore(args: argparse.Namespace) -> int:
    key = args.iface or args.pci
    if not key:
        raise SpecError("iface", "missing", "name the port the tuner ran on: --iface IF")
    state_dir = Path(args.state_dir) if args.state_dir else default_state_dir()
    path = snapshot_path(state_dir, key)
    tuner = live_tuner(state_dir, key)
    if tuner is not None and not args.force:
        raise MltcpError(busy_port(key, tuner, force_flag=True))
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
    return Exit.FAILED


def main(args: argparse.Namespace) -> int:
    if args.dcqcn_cmd == "knobs":
        if args.json:
            emit([asdict(k) for k in KNOBS])
            return 0
        print(markdown_table() if args.markdown else text_table(), end="")
        return 0
    if args.dcqcn_cmd == "probe":
        return cmd_probe(args)
    if args.dcqcn_cmd == "run":
        return cmd_run(args)
    if args.dcqcn_cmd == "restore":
        return cmd_restore(args)
    raise SpecError("dcqcn", f"unknown subcommand {args.dcqcn_cmd}", "see mltcp dcqcn --help")
