"""The exit codes of ``mltcp``: one definition, rendered into ``mltcp --help``, every
subcommand's ``--help`` and README's "Exit codes" table (a test compares them), so a
script can rely on what a code means without reading the source."""

from __future__ import annotations

import signal
import textwrap
from enum import IntEnum


class Exit(IntEnum):
    """What a run of ``mltcp`` ended with."""

    OK = 0
    FAILED = 1
    BAD_INPUT = 2
    CAPABILITY = 3
    HANGUP = 128 + signal.SIGHUP           # 129
    INTERRUPTED = 128 + signal.SIGINT      # 130
    TERMINATED = 128 + signal.SIGTERM      # 143


MEANING: dict[Exit, str] = {
    Exit.OK: "success; `doctor`: every check passed",
    Exit.FAILED: "a command failed (a kernel or system call, a run, a restore); "
                 "`doctor`: at least one check failed (the NO lines say which)",
    Exit.BAD_INPUT: "bad input: a flag, a file or a field (one line on stderr names it "
                    "and the fix), refused before anything ran",
    Exit.CAPABILITY: "this host lacks a capability: root, CAP_BPF, BTF, a tool, a NIC, "
                     "an optional package",
    Exit.HANGUP: "stopped by SIGHUP (a dropped SSH session) after tearing down what it "
                 "set up (`run`, `compare`, `demo`, `sweep`, `cluster run`, `cluster rl-train`, "
                 "`dcqcn run`; `cluster run` first writes the report of the finished runs)",
    Exit.INTERRUPTED: "interrupted (Ctrl-C / SIGINT), after the same teardown",
    Exit.TERMINATED: "stopped by SIGTERM after the same teardown",
}


def epilog() -> str:
    """The exit codes as the last lines of a ``--help``."""
    return "exit codes:\n" + "\n".join(
        textwrap.fill(MEANING[c], width=78, initial_indent=f"  {int(c):>3}  ",
                      subsequent_indent=" " * 7) for c in Exit)


def markdown() -> str:
    """The exit codes as README's table."""
    rows = ["| code | meaning |", "|---|---|"]
    rows += [f"| {int(c)} | {MEANING[c]} |" for c in Exit]
    return "\n".join(rows) + "\n"
