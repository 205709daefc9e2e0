"""Output directories: made before any run, so that a path that cannot be one is bad
input named by its flag, not a failure after minutes of runs."""

from __future__ import annotations

import os
from pathlib import Path

from mltcp.core.errors import SpecError


def make_out_dir(path: str, flag: str = "--out") -> str:
    """Create ``path`` (and its parents) and check that it can be written; a file in the
    way or a read-only place is a one-line SpecError naming ``flag``."""
    if not str(path).strip():
        raise SpecError(flag, "is empty", f"give a directory, e.g. {flag} results")
    try:
        Path(path).mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise SpecError(flag, f"cannot create directory {path}: {exc.strerror}",
                        "give a directory you can write") from None
    if not os.access(path, os.W_OK | os.X_OK):
        raise SpecError(flag, f"cannot write in {path}", "give a directory you can write")
    return path
