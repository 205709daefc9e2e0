"""The suite's groups (scripts/test, scripts/suite.py): a test file that uses the host's
datapath or namespaces must be in tests/conftest.py's HOST_FILES, or its tests would run
beside others in the parallel group (pins, namespace names and CPU timing collide); one
that measures the datapath must also be in QUIET_FILES, or it would run beside the
pure-Python tests and read their CPU load.  A test marked ``idle`` runs at idle priority
beside the quiet group, where it may wait minutes for a cycle: it must not be a host
test nor time itself."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from tests.conftest import HOST_FILES, QUIET_FILES

# What only a test of the host's kernel, namespaces or sshd writes.
USES_THE_HOST = re.compile(
    r"\bbpf_host\b|\bquiet_host\b|\bclean_datapath\b|for_topology\(|SshdLab\(|"
    r"datapath\.load\(|pytest\.mark\.kernel|\"ip\", \"netns\"|\"ip\", \"-n\"")
# What only a test that measures the datapath writes: it waits for a quiet host, or
# captures the packets.
MEASURES = re.compile(r"\bquiet_host\b|\bCapture\(")

TESTS = Path(__file__).parent


def _files_matching(pattern: re.Pattern[str]) -> set[str]:
    return {p.stem for p in TESTS.glob("test_*.py")
            if p.name != Path(__file__).name and pattern.search(p.read_text())}


def test_every_file_that_uses_the_host_runs_in_the_host_group() -> None:
    users = _files_matching(USES_THE_HOST)
    assert users <= HOST_FILES, f"add to HOST_FILES: {sorted(users - HOST_FILES)}"
    assert {f"{name}.py" for name in HOST_FILES} <= {p.name for p in TESTS.glob("test_*.py")}


def test_every_file_that_measures_the_datapath_runs_alone() -> None:
    measuring = _files_matching(MEASURES)
    assert measuring <= QUIET_FILES, f"add to QUIET_FILES: {sorted(measuring - QUIET_FILES)}"
    assert QUIET_FILES <= HOST_FILES            # quiet tests are host tests run alone


@pytest.mark.parametrize("marker", ["host", "quiet", "idle"])
def test_the_groups_markers_are_declared(marker: str) -> None:
    """scripts/suite.py selects by these markers; an undeclared one is a typo's trap."""
    text = (TESTS.parent / "pyproject.toml").read_text()
    assert re.search(rf'^\s*"{marker}: ', text, re.M)


def _marked_idle() -> list[tuple[str, ast.FunctionDef]]:
    """Every test function with ``@pytest.mark.idle``, and its file's stem."""
    found = []
    for path in TESTS.glob("test_*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef) and any(
                    ast.unparse(d) == "pytest.mark.idle" for d in node.decorator_list):
                found.append((path.stem, node))
    return found


def test_idle_tests_are_neither_host_tests_nor_timed() -> None:
    marked = _marked_idle()
    assert marked                                   # the engine's compile, ns-3's long runs
    for stem, test in marked:
        body = ast.unparse(test)
        assert stem not in HOST_FILES, f"{stem}::{test.name}: a host test cannot be idle"
        assert not re.search(r"monotonic|time\.time|perf_counter", body), \
            f"{stem}::{test.name} times itself: at idle priority it may wait minutes"
