"""The suite's phases (scripts/test): a test file that uses the host's datapath or
namespaces must be in tests/conftest.py's HOST_FILES, or its tests would run beside
others in the parallel phase (pins, namespace names and CPU timing collide)."""

from __future__ import annotations

import re
from pathlib import Path

from tests.conftest import HOST_FILES

# What only a test of the host's kernel, namespaces or sshd writes.
USES_THE_HOST = re.compile(
    r"\bbpf_host\b|\bquiet_host\b|\bclean_datapath\b|for_topology\(|SshdLab\(|"
    r"datapath\.load\(|pytest\.mark\.kernel|\"ip\", \"netns\"|\"ip\", \"-n\"")


def test_every_file_that_uses_the_host_runs_in_the_host_phase() -> None:
    tests = Path(__file__).parent
    users = {p.stem for p in tests.glob("test_*.py")
             if p.name != Path(__file__).name and USES_THE_HOST.search(p.read_text())}
    assert users <= HOST_FILES, f"add to HOST_FILES: {sorted(users - HOST_FILES)}"
    assert {f"{name}.py" for name in HOST_FILES} <= {p.name for p in tests.glob("test_*.py")}
