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
def test_live_demo_runs_two_jobs_on_the_testbed_stack_and_cleans_up(clean_datapath, tmp_path):
    """--live runs the default scenario's plan on the netns backend (one MLTCP job per
    worker) and shows, per worker and iteration, bytes_ratio and F read from the maps."""
    out = tmp_path / "demo.json"
    proc = _demo("--live", "--iterations", "6", "--rate-mbit", "300", "--json", str(out))
    assert proc.returncode == 0, proc.stderr
    text = proc.stdout
    intercept, slope = map(float, re.search(r"mltcp_cubic with F = ([\d.]+) \+ ([\d.]+) x "
                                            r"bytes_ratio", text).groups())
    rows = re.findall(r"^([ab]/w[01])\s+\d+\s+([\d.]+)\s+([\d.]+)\s+\d+$", text, re.M)
    assert {r[0] for r in rows} == {"a/w0", "a/w1", "b/w0", "b/w1"}
    assert len(rows) >= 16  # per worker and iteration: ratio, F max, cwnd
    for _, ratio, f_max in rows:     # both printed to 2 decimals: the ratio's rounding x S
        assert float(f_max) == pytest.approx(intercept + slope * float(ratio),
                                             abs=0.005 * slope + 0.01)
    assert max(float(r[1]) for r in rows) > 0.9          # some iteration got (nearly) done
    table = re.findall(r"^\s+(\d+)\s+([\d.]+)s\s+([\d.]+)s\s+(\d+)%$", text, re.M)
    assert [int(r[0]) for r in table] == list(range(6))
    saved = json.loads(out.read_text())
    assert saved["trace"]["backend"] == "netns" and saved["samples"]
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
def test_demo_compares_schemes_over_seeds_with_dedicated(clean_datapath, tmp_path):
    """The default demo is a compare over several seeds: each job alone once, then the
    schemes per seed; the table, the per-seed results and what varies between seeds."""
    from importlib import resources

    from mltcp.lab.scenario.demo import DEFAULT_SCENARIO, DEMO_SCHEMES, run_compare_demo

    text = (resources.files("mltcp.lab.scenario") / "examples"
            / f"{DEFAULT_SCENARIO}.toml").read_text()
    short = (text.replace("iterations = 40", "iterations = 3")
             .replace("bottleneck_mbit = 1000", "bottleneck_mbit = 300"))
    assert short.count("iterations = 3") == 2
    spec = tmp_path / "short.toml"
    spec.write_text(short)
    out_dir = tmp_path / "demo"
    printed = io.StringIO()
    assert run_compare_demo(str(out_dir), seeds=(0, 1), scenario=str(spec), out=printed) == 0
    text = printed.getvalue()
    # scheme | N | converged | first interleaved |: every figure with its N
    rows = re.findall(r"^\| ([a-z-]+) \| 2 \| (\d)/2 \| (\d)/2 \|", text, re.M)
    assert sorted(r[0] for r in rows) == sorted(DEMO_SCHEMES)
    assert all(held <= first for _, held, first in rows)   # holding implies interleaving
    per_seed = re.findall(r"^\| ([a-z-]+) \| \S+ \(\S+\) / [\d.]+ \| \S+ \(\S+\) / "
                          r"[\d.]+ \| [\d.]+-[\d.]+ \|$", text, re.M)
    assert sorted(per_seed) == sorted(DEMO_SCHEMES)      # every seed's result, and the spread
    assert "What varies between seeds" in text
    assert "x dedicated (95% CI " in text                # N = 2 seeds: an interval
    report = json.loads((out_dir / "report.json").read_text())
    assert set(report["dedicated_means"]) == {"a", "b"}
    assert sorted(p.name for p in (out_dir / "traces").iterdir()) == sorted(
        [f"{s}-seed{n}.json" for s in DEMO_SCHEMES for n in (0, 1)]
        + ["dedicated-a-seed0.json", "dedicated-b-seed0.json"])  # alone: once
    assert datapath.settle() == []
