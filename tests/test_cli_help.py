"""Every option of every ``mltcp`` command documents itself: a help text, and for an
option that takes a value its default (or that it is required), and for a number its
range; every ``--help`` ends with the exit codes, which README's table repeats from the
same definition (``mltcp.cli.exits``).  The parser tree is walked, so a new option or
command is checked without touching this file."""

from __future__ import annotations

import argparse
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from mltcp.cli import build_parser, exits

README = Path(__file__).resolve().parents[1] / "README.md"
NUMERIC_TYPES = {"a number", "an integer", "a port number"}
# "0..64", "1/65536..64", "intercept..128", "0 < SECONDS <= 3600", ">= 1"
RANGE = re.compile(r"\.\.\s*[-\d]|\d\s*\.\.|[<>]=?\s*-?\d")


def parsers() -> Iterator[tuple[str, argparse.ArgumentParser]]:
    todo = [build_parser()]
    while todo:
        parser = todo.pop()
        yield parser.prog, parser
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                todo.extend(action.choices.values())


def options() -> Iterator[tuple[str, argparse.ArgumentParser, argparse.Action]]:
    for prog, parser in parsers():
        for action in parser._actions:
            if isinstance(action, (argparse._HelpAction, argparse._VersionAction,
                                   argparse._SubParsersAction)):
                continue
            name = "/".join(action.option_strings) or action.dest
            yield f"{prog} {name}", parser, action


OPTIONS = list(options())


def _help(parser: argparse.ArgumentParser, action: argparse.Action) -> str:
    return parser._get_formatter()._expand_help(action) if action.help else ""


def _is_numeric(action: argparse.Action) -> bool:
    return action.type in (int, float) or getattr(action.type, "__name__", "") in NUMERIC_TYPES


def test_the_walk_sees_every_command() -> None:
    progs = {prog for prog, _ in parsers()}
    assert {"mltcp job attach", "mltcp dcqcn run", "mltcp sweep", "mltcp status"} <= progs
    assert len(OPTIONS) > 80


@pytest.mark.parametrize(("where", "parser", "action"), OPTIONS, ids=[o[0] for o in OPTIONS])
def test_an_option_says_what_it_takes(where: str, parser: argparse.ArgumentParser,
                                      action: argparse.Action) -> None:
    text = _help(parser, action)
    assert text.strip() and action.help is not argparse.SUPPRESS, f"{where}: no help"
    if not action.option_strings or action.nargs == 0:
        return  # positionals say what they are; flags take no value
    if _is_numeric(action):
        assert RANGE.search(text), f"{where}: a number without its range in {text!r}"
    assert action.required or action.choices or "default" in text, \
        f"{where}: neither its default nor 'required' in {text!r}"
    if action.choices:
        assert action.required or "default" in text, f"{where}: choices, but no default"


def test_a_numeric_option_without_a_range_is_caught() -> None:
    """The check above can fail: an option like the ones it passes, minus the range."""
    parser = argparse.ArgumentParser()
    action = parser.add_argument("--rate", type=float, default=1.0,
                                 help="the rate (default %(default)s)")
    assert not RANGE.search(_help(parser, action))
    ranged = parser.add_argument("--rate2", type=float, default=1.0,
                                 help="the rate (0 < r <= 10, default %(default)s)")
    assert RANGE.search(_help(parser, ranged))


def test_every_help_ends_with_the_exit_codes() -> None:
    for prog, parser in parsers():
        assert parser.epilog == exits.epilog(), prog
        assert parser.format_help().rstrip().endswith(exits.epilog().splitlines()[-1]), prog


def test_the_readme_lists_the_same_exit_codes() -> None:
    assert exits.markdown() in README.read_text(), \
        "README's 'Exit codes' table differs from mltcp.cli.exits.markdown(): paste it again"


def test_doctor_documents_its_exit_codes() -> None:
    assert "doctor" in exits.MEANING[exits.Exit.OK]
    assert "doctor" in exits.MEANING[exits.Exit.FAILED]
