"""Argument types for the command line, built on :mod:`mltcp.core.validate`.

argparse calls a ``type=`` callable on the flag's text; these parse it and then check it
with the same functions the spec, the sweeps and the library use, so ``--parallel 0``,
``--watch -1`` or ``--duration-s nan`` are refused by the rule that field has everywhere,
and the refusal (an ``ArgumentTypeError``) becomes argparse's "argument --flag: ..." line,
which :class:`mltcp.cli.Parser` prints as one line (exit 2).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from mltcp.core import validate
from mltcp.core.errors import SpecError


def _typed(parse: Callable[[str], Any], check: Callable[[Any], Any],
           what: str) -> Callable[[str], Any]:
    def convert(text: str) -> Any:
        try:
            value = parse(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not {what}") from None
        try:
            return check(value)
        except SpecError as err:
            raise argparse.ArgumentTypeError(f"{err.problem}; {err.fix}") from None
    convert.__name__ = what          # argparse names the type in some messages
    return convert


def number(lo: float, hi: float, example: str, *, lo_open: bool = False
           ) -> Callable[[str], float]:
    """A finite number in [lo, hi] (or (lo, hi])."""
    return _typed(float, lambda v: validate.number(v, "", lo, hi, example, lo_open=lo_open),
                  "a number")


def finite() -> Callable[[str], float]:
    """Any finite number (the library checks the range, with the field's own advice)."""
    return _typed(float, lambda v: validate.finite(v, "", "give a finite number"), "a number")


def integer(lo: int, hi: int, example: str) -> Callable[[str], int]:
    return _typed(int, lambda v: validate.integer(v, "", lo, hi, example), "an integer")


def port(example: str = "5201") -> Callable[[str], int]:
    return _typed(int, lambda v: validate.port(v, "", example), "a port number")


def port_range() -> Callable[[str], str]:
    """``29500`` or ``29500-29600``, checked; the text is kept for the job's rule parser."""
    return _typed(str, lambda v: (validate.port_range(v, ""), v)[1], "a port or port range")


def add_force_flag(parser: argparse.ArgumentParser) -> None:
    """``--force``, for the commands that claim their ``--out`` for one run set
    (:func:`mltcp.lab.common.runset.claim`)."""
    parser.add_argument("--force", action="store_true",
                        help="replace another run set's results in --out (default: refuse; "
                             "more runs of the same run set need no flag)")


def add_fan_out_flags(parser: argparse.ArgumentParser, default: str) -> None:
    """Where a command's independent runs go, the same two flags wherever runs fan out
    (``cluster run``, ``sweep``; :mod:`mltcp.lab.common.parallel`): ``--parallel N``
    local worker processes, or ``--dask ADDR``, a running Dask cluster; one or the
    other.  ``default``: what no flag means."""
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--parallel", type=integer(1, 1024, "4"), metavar="N",
                       help="runs at once on N worker processes of this host (1..1024; 1: "
                            f"one after the other in this process; default: {default})")
    where.add_argument("--dask", metavar="ADDR",
                       help="instead, a running Dask cluster to run on, e.g. "
                            "tcp://host:8786 (the sweep extra; default: none, this host)")


def check_fan_out(args: argparse.Namespace) -> None:
    """The flags of :func:`add_fan_out_flags`, before anything is written: a ``--dask``
    address that does not answer is one line naming it, not a failure after ``--out``
    was made."""
    if args.dask is not None:
        from mltcp.lab.common import distributed

        distributed.check_address(args.dask)


def add_renamed_flag(parser: argparse.ArgumentParser, old: str, new: str) -> None:
    """``old``, a flag now spelled ``new``: given, one line saying so (exit 2); its help
    says so too (every option has help: tests/test_cli_help.py)."""

    class Renamed(argparse.Action):
        def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                     values: Any, option_string: str | None = None) -> None:
            raise argparse.ArgumentError(self, f"is now {new}; give {new} {values}")

    parser.add_argument(old, action=Renamed, metavar="N",
                        help=f"the old name of {new}: refused with a line naming {new} "
                             "(default: not given)")
