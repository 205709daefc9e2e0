"""Log lines for a daemon under systemd: with a level journald understands.

Under systemd, stderr goes to the journal (``$JOURNAL_STREAM`` names that stream), which
reads a ``<N>`` syslog-priority prefix on each line (sd-daemon(3)) as the entry's level:
``journalctl -p warning -u mltcp-agent`` then shows only what needs attention, and the
journal adds its own timestamps.  On a terminal the lines carry a time and the level
name instead.
"""

from __future__ import annotations

import logging
import os
import sys

_PRIORITY = {logging.DEBUG: 7, logging.INFO: 6, logging.WARNING: 4, logging.ERROR: 3,
             logging.CRITICAL: 2}


class JournalFormatter(logging.Formatter):
    """``<priority>logger: message`` (sd-daemon's level prefix)."""

    def format(self, record: logging.LogRecord) -> str:
        prio = _PRIORITY.get(record.levelno, 6 if record.levelno < logging.WARNING else 3)
        return f"<{prio}>{record.name}: {super().format(record)}"


def stderr_is_journal() -> bool:
    """True when stderr is the journal stream systemd connected (``$JOURNAL_STREAM`` is
    ``device:inode`` of it; a redirected stderr of a child does not match)."""
    value = os.environ.get("JOURNAL_STREAM", "")
    try:
        dev, ino = (int(x) for x in value.split(":"))
        st = os.fstat(sys.stderr.fileno())
    except (ValueError, OSError):
        return False
    return (st.st_dev, st.st_ino) == (dev, ino)


def setup(level: int = logging.INFO) -> None:
    """Configure the root logger for a long-running command (the agent, the tuner)."""
    handler = logging.StreamHandler(sys.stderr)
    if stderr_is_journal():
        handler.setFormatter(JournalFormatter("%(message)s"))
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
