"""Reading the lab's TOML files (scenarios, cluster experiments) and the packaged
examples a bare name stands for, with one set of one-line errors."""

from __future__ import annotations

import tomllib
from importlib.resources.abc import Traversable
from pathlib import Path
from typing import Any

from mltcp.core.errors import SpecError


def example_names(folder: Traversable) -> list[str]:
    """The ``*.toml`` files of a package's examples folder, by name without the suffix."""
    if not folder.is_dir():
        return []
    return sorted(entry.name.removesuffix(".toml") for entry in folder.iterdir()
                  if entry.name.endswith(".toml"))


def read_toml(source: Path | Traversable, field: str, examples: list[str]) -> dict[str, Any]:
    """The table of the TOML file ``source``; a missing, unreadable, non-UTF-8 or
    malformed file is a SpecError on ``field`` (a missing one lists ``examples``).  A
    leading UTF-8 byte-order mark, which Windows editors write and TOML does not allow,
    is dropped rather than reported as a syntax error at line 1, column 1."""
    label = str(source)
    try:
        text = source.read_bytes().decode("utf-8").removeprefix("\ufeff")
    except FileNotFoundError:
        raise SpecError(field, f"{label}: no such file",
                        f"give an existing .toml file or one of: {', '.join(examples)}"
                        ) from None
    except OSError as err:
        raise SpecError(field, f"{label}: {err.strerror or err}",
                        "give a readable .toml file") from None
    except UnicodeDecodeError:
        raise SpecError(field, f"{label}: not UTF-8 text", "save the file as UTF-8") from None
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as err:
        raise SpecError(field, f"{label}: {err}", "fix the TOML syntax") from None
