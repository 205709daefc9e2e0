"""Scenarios at cluster size on the fluid backend: wall time and peak memory of `mltcp run`.

The scenarios (written into ``--out``'s directory, so a reader can rerun one by hand):
a 512-host leaf-spine (16 leaves x 32 hosts at 10 Gbit/s, 4 spines, 4:1
oversubscription: 20 Gbit/s leaf-spine links), J two-worker jobs of 100 iterations,
each job's workers on two hosts of different leaves drawn from a seeded generator
(hosts are reused only once every host has a job), compute 120-240 ms and 25-100 MB
per iteration drawn likewise, under standard cubic and MLTCP-cubic (slope 4).  Each
case is one `mltcp run SCENARIO --backend fluid --out DIR` in a child process, from
start to its report, timed by the wall clock, with the child's peak resident memory
(``wait4``'s ru_maxrss), its link samples and the size of its traces.

Cases: J = 200 and J = 1000 with the default ``record_links`` ("fabric": the 128
leaf-spine link directions), and J = 200 with ``record_links = "crossed"`` (host links
too; MLTCP-cubic alone, since two such runs' traces exceed what a report may hold).
Targets (issue 24): 200 jobs, both schemes, <= 60 s and <= 4 GB; 1,000 jobs <= 5
minutes.  The engine is compiled once (numba's cache) before the first case, so
no case pays the compilation.

    python bench/bench_fluid_scale.py --out bench/results/fluid_scale.json
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import time
from pathlib import Path

from mltcp.lab.common import plotting
from mltcp.lab.common.provenance import provenance

LEAVES, SPINES, HOSTS_PER_LEAF = 16, 4, 32
TARGETS = {200: {"wall_s": 60.0, "peak_rss_bytes": 4e9}, 1000: {"wall_s": 300.0}}
BOTH = ("cubic", "mltcp-cubic")
# (jobs, record_links, schemes): "crossed" samples 928 links, 7 times "fabric"'s; both
# schemes' traces together are more than the report may hold (refused, as it should).
CASES = ((200, "fabric", BOTH), (200, "crossed", ("mltcp-cubic",)), (1000, "fabric", BOTH))


def scenario_toml(jobs: int, record_links: str, iterations: int = 100, seed: int = 0) -> str:
    """The scenario of ``jobs`` jobs (see the module's docstring) as TOML text."""
    rng = random.Random(seed)
    hosts = LEAVES * HOSTS_PER_LEAF
    lines = [f'name = "cluster-{jobs}-{record_links}"', "seeds = [0]",
             f'record_links = "{record_links}"', "", "[topology]", 'kind = "leaf_spine"',
             f"leaves = {LEAVES}", f"spines = {SPINES}", f"hosts_per_leaf = {HOSTS_PER_LEAF}",
             "host_link_mbit = 10000", "oversubscription = 4.0", "queue_packets = 400", ""]
    free: list[int] = []
    for j in range(jobs):
        if len(free) < 2 * HOSTS_PER_LEAF:
            free = list(range(1, hosts + 1))
            rng.shuffle(free)
        a = free.pop()
        b = next(h for h in reversed(free)
                 if (h - 1) // HOSTS_PER_LEAF != (a - 1) // HOSTS_PER_LEAF)
        free.remove(b)
        lines += ["[[jobs]]", f'name = "j{j}"',
                  f"compute_ms = {rng.choice([120, 160, 200, 240])}",
                  f'bytes_per_iteration = "{rng.choice([25, 50, 75, 100])}MB"',
                  "workers = 2", f'placement = ["h{a}", "h{b}"]',
                  f"iterations = {iterations}", ""]
    lines += ["[[schemes]]", 'name = "cubic"', 'cc = "cubic"', "mltcp = false", "",
              "[[schemes]]", 'name = "mltcp-cubic"', 'cc = "cubic"', "mltcp = true",
              "slope = 4.0", "intercept = 1.0", ""]
    return "\n".join(lines)


def run_case(path: Path, out: Path, schemes: tuple[str, ...]) -> dict:
    """One `mltcp run` in a child process: its wall seconds, peak RSS and exit code."""
    t0 = time.perf_counter()
    picked = [arg for name in schemes for arg in ("--scheme", name)]
    proc = subprocess.Popen([sys.executable, "-m", "mltcp.cli", "run", str(path),
                             "--backend", "fluid", "--out", str(out), "--force", *picked],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    stderr = proc.stderr.read() if proc.stderr else ""
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise SystemExit(f"{path.name}: exit {proc.returncode}: {stderr.strip()[-500:]}")
    traces = sorted((out / "traces").glob("*.json"))
    samples = 0
    for trace in traces:
        data = json.loads(trace.read_text())
        samples += sum(len(link["samples"]) for link in data["links"])
    return {"wall_s": wall, "peak_rss_bytes": usage.ru_maxrss * 1024,
            "runs": len(traces), "link_samples": samples,
            "trace_bytes": sum(t.stat().st_size for t in traces)}


def warm_engine(work: Path) -> None:
    """Compile the engine (numba caches it on disk) so no case pays for it."""
    subprocess.run([sys.executable, "-m", "mltcp.cli", "run", "compatible-pair",
                    "--backend", "fluid", "--out", str(work / "warm-up"), "--force"],
                   check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def plot(rows: list[dict], out: Path) -> None:
    fig, axes = plotting.figure(1, 2, figsize=(9.0, 3.6))
    labels = [f"{r['jobs']} jobs\n{len(r['schemes'])} scheme(s)\n{r['record_links']}"
              for r in rows]
    axes[0].bar(labels, [r["wall_s"] for r in rows], color="C0")
    axes[1].bar(labels, [r["peak_rss_bytes"] / 2**30 for r in rows], color="C1")
    for ax, key, unit in ((axes[0], "wall_s", 1.0), (axes[1], "peak_rss_bytes", 2**30)):
        for i, r in enumerate(rows):
            target = TARGETS.get(r["jobs"], {}).get(key)
            if target is not None and r["record_links"] == "fabric":
                ax.hlines(target / unit, i - 0.4, i + 0.4, colors="k", linestyles="--")
    axes[0].set_ylabel("wall time of `mltcp run` (s)")
    axes[1].set_ylabel("peak RSS (GiB)")
    fig.suptitle("fluid backend, 512-host leaf-spine, 100 iterations "
                 "(N=1 `mltcp run` each; dashed: target)", fontsize=9)
    plotting.save(fig, out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default="bench/results/fluid_scale.json")
    ap.add_argument("--jobs", type=int, nargs="*", help="only the cases of these sizes")
    args = ap.parse_args()
    out = Path(args.out)
    work = out.with_suffix("")
    work.mkdir(parents=True, exist_ok=True)
    warm_engine(work)
    rows = []
    for jobs, record, schemes in CASES:
        if args.jobs and jobs not in args.jobs:
            continue
        path = work / f"cluster-{jobs}-{record}.toml"
        path.write_text(scenario_toml(jobs, record))
        row = {"jobs": jobs, "record_links": record, "schemes": list(schemes),
               "scenario": str(path), **run_case(path, work / f"run-{jobs}-{record}", schemes)}
        rows.append(row)
        print(f"{jobs:5d} jobs, record_links {record:8s}, {len(schemes)} scheme(s): "
              f"{row['wall_s']:6.1f} s wall, "
              f"peak RSS {row['peak_rss_bytes'] / 2**30:5.2f} GiB, "
              f"{row['link_samples']:,} link samples in {row['trace_bytes'] / 1e6:,.0f} MB "
              "of traces", flush=True)
    met = {f"{r['jobs']}": all(r[k] <= v for k, v in TARGETS[r["jobs"]].items())
           for r in rows if r["record_links"] == "fabric" and r["jobs"] in TARGETS}
    result = {"schema": "mltcp.bench.fluid_scale/1", "provenance": provenance(),
              "cpus": os.cpu_count(), "targets": TARGETS, "cases": rows, "targets_met": met}
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    plot(rows, out.with_suffix(""))
    print(f"targets met: {met}; wrote {out} and {out.with_suffix('')}.png/.pdf")


if __name__ == "__main__":
    main()
