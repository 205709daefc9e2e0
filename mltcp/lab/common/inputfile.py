"""Files a config names (a CSV trace, an RL policy): checked for what they are before
they are read, so that each kind of wrong path gets its own one line.

``Path.is_file()`` is False for a missing file, a directory, a FIFO and a device
alike, and a check built on it says "no such file" for all four, which sends the user
looking for a file that is right there.  A FIFO is worse than a wrong message: reading
one blocks until a writer comes, so it must be refused before anything opens it.
Here each is named as what it is (a directory, a FIFO, a character device, a socket,
an empty path, a file that cannot be read and why) with the field that named it.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from mltcp.core.errors import SpecError

_KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO (named pipe)"),
          (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
          (stat.S_ISSOCK, "a socket"))


def kind(mode: int) -> str | None:
    """What a ``st_mode`` is, in words, when it is not a regular file (None when it is)."""
    return next((name for test, name in _KINDS if test(mode)), None)


def path_text(text: str, field: str, fix: str) -> str:
    """A path as a config writes it: an empty one is refused by name (``Path("")`` is
    the working directory, which would be reported as a directory nobody wrote)."""
    if not text.strip():
        raise SpecError(field, "is empty", fix)
    return text


def regular_file(path: Path, field: str, what: str, fix: str) -> Path:
    """``path``, when it is a regular file this process may read; otherwise a
    SpecError on ``field`` saying what it is instead (``what``: what it should be,
    e.g. "a CSV file"), with ``fix``."""
    try:
        info = path.stat()
    except FileNotFoundError:
        raise SpecError(field, f"{path}: no such file", fix) from None
    except NotADirectoryError:
        raise SpecError(field, f"{path}: no such file (a part of the path is a file)",
                        fix) from None
    except OSError as err:
        raise SpecError(field, f"{path}: cannot be reached ({err.strerror or err})",
                        fix) from None
    found = kind(info.st_mode)
    if found:
        raise SpecError(field, f"{path} is {found}, not {what}", fix)
    if not os.access(path, os.R_OK):
        raise SpecError(field, f"cannot read {path} (permission denied)",
                        f"make it readable (chmod a+r), or {fix}")
    return path


def read_bytes(path: Path, field: str, fix: str) -> bytes:
    """The bytes of a file :func:`regular_file` accepted; an error while reading (it
    changed meanwhile, an I/O error) is the same kind of one line."""
    try:
        return path.read_bytes()
    except OSError as err:
        raise SpecError(field, f"cannot read {path} ({err.strerror or err})", fix) from None
