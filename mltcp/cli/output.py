"""Machine-readable output: the global ``-j/--json`` (as ``ip -j`` and ``bpftool -j``).

A command that honours it calls :func:`add_json_flag` on its parser; the flag then works
before the subcommand (``mltcp -j status``) and after it (``mltcp status --json``), into
one ``args.json``.  :func:`emit` prints one JSON document on one line, so a script reads
``status --watch`` line by line.  Any other command refuses ``-j`` (one line, exit 2)
rather than print text a script would fail to parse.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from mltcp.core.errors import SpecError

# set_defaults key that marks a parser whose command honours -j/--json.
SUPPORTED = "json_supported"


def add_global_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-j", "--json", action="store_true",
                        help="JSON output, one document per line, for the commands that "
                             "read something (doctor, status, job list, backends, dcqcn "
                             "probe/knobs, apply, load, unload, job attach/detach/signal, "
                             "testbed); others refuse it")


def add_json_flag(parser: argparse.ArgumentParser, what: str) -> None:
    """``-j/--json`` on a subcommand; SUPPRESS keeps the global flag's value when absent
    (a subparser's default would overwrite it)."""
    parser.add_argument("-j", "--json", action="store_true", default=argparse.SUPPRESS,
                        help=f"print {what} as JSON on one line (same as `mltcp -j ...`)")
    parser.set_defaults(**{SUPPORTED: True})


def check(args: argparse.Namespace, command: str) -> None:
    """Refuse -j where the command has no JSON output."""
    if getattr(args, "json", False) is True and not getattr(args, SUPPORTED, False):
        raise SpecError("--json", f"`mltcp {command}` has no JSON output",
                        "drop -j/--json (see `mltcp --help` for the commands that have it)")


def emit(document: Any) -> None:
    """One JSON document on one line of stdout, flushed (a pipe sees each at once)."""
    sys.stdout.write(json.dumps(document) + "\n")
    sys.stdout.flush()
