"""The ``mltcp`` command line, split by command group.

* :mod:`mltcp.cli.host` -- what a network engineer runs on a training host (doctor,
  load, unload, job, status, metrics, agent);
* :mod:`mltcp.cli.dcqcn` -- the RoCE tuner (``mltcp dcqcn ...``);
* :mod:`mltcp.cli.scenario` -- what a researcher runs (run, compare, sweep, backends,
  testbed, demo).

Each group module defines its parsers and imports what its commands need only when
one runs, so ``mltcp status`` on a training host never imports the lab, numpy or
matplotlib (tests/test_architecture.py checks it).

Every error is one line: bad input names the field or flag and the fix (numeric flags are
checked by the same rules as everywhere, :mod:`mltcp.cli.args`, and argparse's own errors
are one line too, :class:`Parser`).

The exit codes are defined once, in :mod:`mltcp.cli.exits`, and every ``--help`` ends
with them; ``-j/--json`` is :mod:`mltcp.cli.output`.
Commands that change the host or run long while they run (``run``, ``compare``,
``demo``, ``sweep``, ``cluster run``, ``cluster rl-train``, ``dcqcn run``: parsers with
``teardown_signals=True``) turn SIGTERM and SIGHUP into the same unwinding as Ctrl-C
(:mod:`mltcp.core.signals`) and exit 128 + N; ``cluster run`` writes the report of the
runs that finished first, marked partial.
"""

from __future__ import annotations

import argparse
import contextlib
import signal
import sys
from collections.abc import Sequence
from typing import Any, NoReturn

from mltcp import __version__
from mltcp.cli import cluster, dcqcn, host, output
from mltcp.cli import scenario as lab
from mltcp.cli.exits import Exit, epilog
from mltcp.core import console, signals
from mltcp.core.errors import CapabilityError, MltcpError, SpecError

# What the lab needs and a host install (no extras) does not have.
LAB_PACKAGES = ("numpy", "matplotlib")
EXIT_OK, EXIT_FAILED, EXIT_BAD_INPUT = Exit.OK, Exit.FAILED, Exit.BAD_INPUT
EXIT_CAPABILITY, EXIT_INTERRUPTED = Exit.CAPABILITY, Exit.INTERRUPTED


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Keeps the epilog's lines (the exit-code table) and adds an option's default
    where its help does not say it already."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        default = action.default
        if (action.option_strings and action.nargs != 0 and "default" not in text
                and default not in (None, argparse.SUPPRESS, [], False)):
            text += " (default: %(default)s)"
        return text


class Parser(argparse.ArgumentParser):
    """argparse, with its errors as one line (argparse prints the usage first; the usage
    is one ``--help`` away, the line says which), and every parser's help ending with
    the exit codes."""

    def __init__(self, *a: Any, **kw: Any) -> None:
        kw.setdefault("epilog", epilog())
        kw.setdefault("formatter_class", HelpFormatter)
        super().__init__(*a, **kw)

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_BAD_INPUT, f"mltcp: error: {message} (see `{self.prog} --help`)\n")


def version_text() -> str:
    """``mltcp --version``: the package, and the datapath it would load: the eBPF objects'
    ABI (``MLTCP_ABI_VERSION`` of the sources in use) and their digest (of each object's
    source digest, the one that decides whether a pre-built object is used), and whether
    the install carries pre-built objects for them.  Reads files only: no root, no eBPF."""
    from mltcp.host import build

    try:
        src = build.kernel_source_dir()
        ready = sum(build.prebuilt_object(n) is not None for n in build.OBJECTS)
        how = ("pre-built" if ready == len(build.OBJECTS) else
               "compiled with clang at load" if not ready else
               f"{ready} of {len(build.OBJECTS)} pre-built, the rest compiled at load")
        datapath = (f"eBPF ABI {build.abi_version(src) or 'unknown'}, "
                    f"digest {build.datapath_digest(src)} ({how})")
    except MltcpError as exc:
        datapath = f"eBPF objects unknown: {str(exc).splitlines()[0]}"
    return f"mltcp {__version__}\ndatapath: {datapath}"


class VersionAction(argparse.Action):
    """``--version``, its text made only when asked for (:func:`version_text`)."""

    def __init__(self, option_strings: Sequence[str], dest: str = argparse.SUPPRESS,
                 default: Any = argparse.SUPPRESS, help: str | None = None) -> None:
        super().__init__(option_strings, dest, nargs=0, default=default, help=help)

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: Any, option_string: str | None = None) -> NoReturn:
        print(version_text())           # on stdout, as argparse's own version action
        parser.exit(EXIT_OK)


def build_parser() -> argparse.ArgumentParser:
    p = Parser(prog="mltcp", description="MLTCP: congestion control that "
                                         "knows about distributed ML training.")
    p.add_argument("--version", action=VersionAction,
                   help="print the version, the eBPF datapath's ABI and digest, and exit")
    p.add_argument("-v", "--verbose", action="store_true", help="full error details and logs")
    output.add_global_flag(p)
    sub = p.add_subparsers(dest="cmd", required=True, metavar="COMMAND")
    host.register(sub)
    dcqcn.register(sub)
    lab.register(sub)
    cluster.register(sub)
    return p


def _command(args: argparse.Namespace) -> str:
    """The command as typed, e.g. ``job list`` (for messages)."""
    return " ".join(filter(None, (args.cmd, getattr(args, "job_cmd", None),
                                  getattr(args, "dcqcn_cmd", None))))


def _record_command_line(argv: Sequence[str] | None) -> None:
    """What the results' run-set manifests and provenance record as this invocation (the
    command as typed, also when ``main`` is called with an argument list).  Only for the
    commands that write results (``records_results``): a host command loads no lab.
    The checkout's commit is read now too, so that results finished an hour later name
    the code that ran, not what the checkout holds by then."""
    from mltcp.lab.common import provenance, runset

    runset.COMMAND_LINE[:] = ["mltcp", *(sys.argv[1:] if argv is None else argv)]
    provenance.code_state()


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    guard = (signals.unwinding(exiting=True) if getattr(args, "teardown_signals", False)
             else contextlib.nullcontext())
    try:
        output.check(args, _command(args))
        if getattr(args, "records_results", False):
            _record_command_line(argv)
        with guard:
            return args.handler(args)
    except SpecError as exc:
        console.line(f"mltcp: error: {exc}")
        return EXIT_BAD_INPUT
    except (MltcpError, OSError) as exc:
        text = str(exc)
        first = text.splitlines()[0] if text else type(exc).__name__
        if args.verbose and "\n" in text:
            console.line(text)
        elif "\n" in text:
            first += " (run with -v for the full log)"
        console.line(f"mltcp: error: {first}")
        return EXIT_CAPABILITY if isinstance(exc, CapabilityError) else EXIT_FAILED
    except ModuleNotFoundError as exc:
        if (exc.name or "").split(".")[0] not in LAB_PACKAGES:
            raise
        console.line(f"mltcp: error: `mltcp {args.cmd}` needs {exc.name}, which comes with "
                     "the lab: pip install 'mltcp[lab]'")
        return EXIT_CAPABILITY
    except KeyboardInterrupt as exc:    # Ctrl-C, or SIGTERM/SIGHUP under teardown_signals
        signo = exc.signo if isinstance(exc, signals.Terminated) else signal.SIGINT
        console.line(f"mltcp: interrupted ({signals.name(signo)})")   # nothing if stderr is gone
        return signals.exit_code(signo)


if __name__ == "__main__":
    sys.exit(main())
