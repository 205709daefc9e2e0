"""The README's main command: `mltcp demo` on the real kernel, and its message without root."""

from __future__ import annotations

import io
import json
import os
import re
import shutil
import subprocess
import sys

import pytest

from mltcp.host import datapath


def _demo(*args: str, **kw) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "mltcp.cli", "demo", *args],
                          capture_output=True, text=True, timeout=300, **kw)


@pytest.mark.kernel
def test_live_demo_runs_two_jobs_and_cleans_up(clean_datapath, tmp_path):
    out = tmp_path / "demo.json"
    proc = _demo("--live", "--iterations", "6", "--json", str(out))
    assert proc.returncode == 0, proc.stderr
    text = proc.stdout
    assert "mltcp_cubic (F = 1 + bytes_ratio)" in text
    rows = re.findall(r"^demo-[ab]\s+\d+\s+([\d.]+)\s+([\d.]+)\s+\d+$", text, re.M)
    assert len(rows) >= 8  # per job and iteration: ratio, F max, cwnd
    for ratio, f_max in rows:
        assert float(f_max) == pytest.approx(1 + float(ratio), abs=0.01)  # F = 1 + ratio
    table = re.findall(r"^\s+(\d+)\s+([\d.]+)s\s+([\d.]+)s\s+(\d+)%$", text, re.M)
    assert [int(r[0]) for r in table] == list(range(6))
    assert out.exists()
    # The demo loaded mltcp_cubic itself, so it unloaded it and removed its jobs.
    assert datapath.settle() == []


def test_demo_without_root_says_what_it_needs():
    setpriv = shutil.which("setpriv")
    if os.geteuid() != 0 or not setpriv:
        pytest.skip("needs root and setpriv (util-linux) to run the demo as an unprivileged user")
    proc = subprocess.run([setpriv, "--reuid=65534", "--regid=65534", "--clear-groups",
                           "--inh-caps=-all", sys.executable, "-m", "mltcp.cli", "demo"],
                          capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PYTHONPATH": os.getcwd()})
    assert proc.returncode == 3
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1
    assert "the demo runs on the real kernel" in lines[0] and "run as root" in lines[0]


@pytest.mark.kernel
def test_demo_compares_every_scheme_with_dedicated(clean_datapath, tmp_path):
    """The default demo is the compare: every scheme plus each job alone, then the table."""
    from importlib import resources

    from mltcp.lab.demo import DEFAULT_SCENARIO, run_compare_demo

    text = (resources.files("mltcp.lab") / "scenarios" / f"{DEFAULT_SCENARIO}.toml").read_text()
    short = (text.replace("iterations = 40", "iterations = 3")
             .replace("bottleneck_mbit = 1000", "bottleneck_mbit = 300"))
    assert short.count("iterations = 3") == 2
    spec = tmp_path / "short.toml"
    spec.write_text(short)
    out_dir = tmp_path / "demo"
    printed = io.StringIO()
    assert run_compare_demo(str(out_dir), seed=0, scenario=str(spec), out=printed) == 0
    rows = re.findall(r"^\| ([a-z-]+) \| (\d)/1 \|", printed.getvalue(), re.M)
    assert sorted(r[0] for r in rows) == ["cassini", "cubic", "mltcp-cubic", "mltcp-reno",
                                          "reno"]
    report = json.loads((out_dir / "report.json").read_text())
    assert set(report["dedicated_means"]) == {"a", "b"}
    assert sorted(p.name for p in (out_dir / "traces").iterdir()) == sorted(
        [f"{s}-seed0.json" for s in ("cubic", "reno", "mltcp-cubic", "mltcp-reno", "cassini")]
        + ["dedicated-a-seed0.json", "dedicated-b-seed0.json"])
    cassini = json.loads((out_dir / "traces" / "cassini-seed0.json").read_text())
    assert cassini["params"]["schedule"] == "cassini"      # Cassini ran on the kernel too
    assert cassini["params"]["shifts_ms"]["b"] > 0
    assert datapath.settle() == []
