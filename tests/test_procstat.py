"""The one reader of /proc/PID/stat (mltcp.core.procstat), on real processes."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from mltcp.core import procstat

pytestmark = pytest.mark.skipif(not Path("/proc/self/stat").exists(),
                                reason="needs Linux's /proc")


def test_a_command_name_with_spaces_and_parentheses_is_read_past(tmp_path: Path) -> None:
    """comm may hold ") (": the fields are split after its last parenthesis."""
    odd = tmp_path / "a) (b c"
    odd.symlink_to(sys.executable)
    child = subprocess.Popen([str(odd), "-c", "import time; time.sleep(30)"])
    try:
        deadline = time.monotonic() + 10
        while "(b c" not in Path(f"/proc/{child.pid}/comm").read_text():
            assert time.monotonic() < deadline, "the child never took its name"
            time.sleep(0.01)
        assert procstat.state(child.pid) in ("S", "R")
        assert procstat.alive(child.pid)
        mine = procstat.start_ticks(os.getpid())
        assert mine is not None and procstat.start_ticks(child.pid) >= mine
        assert int(procstat.fields(child.pid)[procstat.POLICY]) == os.SCHED_OTHER
    finally:
        child.kill()
    deadline = time.monotonic() + 10
    while procstat.state(child.pid) != "Z":              # dead, not yet reaped
        assert time.monotonic() < deadline
        time.sleep(0.01)
    assert not procstat.alive(child.pid)
    child.wait()
    assert procstat.fields(child.pid) is None and procstat.start_ticks(child.pid) is None
    assert not procstat.alive(child.pid)
