"""Root-qdisc counters over netlink against tc, an independent reader of the same
counters, in this process's own namespace (no root needed; the fabric's namespaces are
covered in test_fabric.py)."""

from __future__ import annotations

import json
import shutil
import subprocess
import threading

import pytest

from mltcp.lab.scenario.emulation import netns
from mltcp.lab.scenario.emulation.qdiscs import QdiscReader

COUNTERS = ("bytes", "packets", "drops", "overlimits", "requeues")


def tc_roots() -> dict[str, dict]:
    out = subprocess.run(["tc", "-s", "-j", "qdisc", "show"], capture_output=True, text=True,
                         check=True).stdout
    return {q["dev"]: q for q in json.loads(out) if q.get("root")}


@pytest.mark.skipif(shutil.which("tc") is None, reason="needs tc (Debian package iproute2)")
def test_root_qdiscs_are_those_tc_prints() -> None:
    with QdiscReader(None) as reader:
        before = tc_roots()
        ours = reader.read()
        after = tc_roots()
        assert set(ours) == set(before) == set(after) and "lo" in ours
        for dev, st in ours.items():
            for name in COUNTERS:     # cumulative: between two reads of tc
                assert before[dev][name] <= getattr(st, name) <= after[dev][name], (dev, name)
            assert st.qlen >= 0 and st.backlog >= 0
        assert reader.read("lo") == {"lo": ours["lo"]}


def test_one_reader_serves_several_threads() -> None:
    """The testbed's sampler thread and its caller read one fabric's sockets."""
    results: list[object] = []
    with QdiscReader(None) as reader:
        def work() -> None:
            try:
                results.extend("lo" in reader.read() for _ in range(50))
            except Exception as exc:     # collected: an exception in a thread is lost
                results.append(exc)
        threads = [threading.Thread(target=work) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert results == [True] * 200


def test_a_missing_device_is_one_line() -> None:
    with QdiscReader(None) as reader, pytest.raises(netns.NetnsError,
                                                    match="no device mltcpnosuch0 in"):
        reader.read("mltcpnosuch0")


def test_a_missing_namespace_is_an_error() -> None:
    with pytest.raises(FileNotFoundError):
        netns.qdisc_stats("mltcp-no-such-namespace")
