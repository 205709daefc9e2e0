"""Writes that are whole or absent: a temporary name beside the target, then a rename.

A report, a trace or a policy that a crash, a full disk or Ctrl-C cut in half would
be read later as if it were a result (or break the next report).  Every result file
the lab writes goes through here: the bytes land under a hidden temporary name in the
same directory (so the rename stays on one file system, where POSIX makes it atomic),
are flushed to disk, and only then replace the target.  A reader sees the old file
or the new one, never a prefix of either.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any


def _temporary(path: Path) -> Path:
    """``.report.tmp-1234.json`` for ``report.json``: hidden, this process's, and with the
    target's suffix, so writers that pick a format by the file name pick the same one."""
    return path.with_name(f".{path.stem}.tmp-{os.getpid()}{path.suffix}")


@contextmanager
def replacing(path: str | Path) -> Iterator[Path]:
    """Yield a temporary path to write ``path``'s new content to (by any library:
    ``savefig``, ``to_parquet``, a zip writer); on success it replaces ``path``, on an
    exception (Ctrl-C included) it is removed and ``path`` is left as it was."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = _temporary(target)
    try:
        yield tmp
        if tmp.exists():
            with open(tmp, "rb") as fh:
                os.fsync(fh.fileno())
            os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)


def write_bytes(path: str | Path, data: bytes) -> Path:
    """``data`` to ``path``, atomically."""
    with replacing(path) as tmp:
        tmp.write_bytes(data)
    return Path(path)


def write_text(path: str | Path, text: str) -> Path:
    """``text`` (UTF-8) to ``path``, atomically."""
    return write_bytes(path, text.encode())


def write_json(path: str | Path, data: Any, indent: int | None = 2) -> Path:
    """``data`` as strict JSON (no NaN or Infinity, which other tools cannot read),
    newline-terminated, to ``path``, atomically."""
    return write_text(path, json.dumps(data, indent=indent, allow_nan=False) + "\n")
