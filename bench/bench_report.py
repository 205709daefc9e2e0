"""Report cost against run length: build_report on one MLTCP run of the compatible pair
(2 jobs) of 1,000 / 2,000 / 10,000 iterations on the fluid backend.

The report reads every job's iterations and every link sample once per iteration
window; its cost must grow with iterations + samples, not their product (issue 22's
target: 2 x 10,000 iterations in at most 5 s).  Reported per length: the link samples
the traces hold, the report's wall time (best of ``--rounds``; imports excluded, the
traces' loading included: it is part of every report), the time loading every trace
of the run takes on its own (``load_trace``, best of ``--rounds``) and the rest
(report minus loading: metrics, tables, figures), and the report's time per 1,000
iterations as a ratio to the shortest run's, measured side by side in this run
(1.0 = linear).

    python bench/bench_report.py --out bench/results/report.json

The runs are made once into ``--work`` (a directory kept between calls).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from pathlib import Path

from mltcp.lab.common.provenance import provenance
from mltcp.lab.scenario import spec
from mltcp.lab.scenario.report import build_report
from mltcp.lab.scenario.runner import run_scenario
from mltcp.lab.scenario.trace import load_trace

LENGTHS = (1000, 2000, 10000)


def make_run(work: Path, iterations: int) -> Path:
    """One MLTCP-CUBIC run of the compatible pair with ``iterations`` per job (made once)."""
    out = work / f"pair-{iterations}"
    if (out / "report.json").is_file():
        return out
    text = spec._examples_dir().joinpath("compatible-pair.toml").read_text()
    text = re.sub(r"(?m)^iterations = \d+", f"iterations = {iterations}", text)
    text = re.sub(r"(?m)^seeds = .*$", "seeds = [0]", text)
    scenario = work / f"pair-{iterations}.toml"
    scenario.write_text(text)
    assert all(j.iterations == iterations for j in spec.load_scenario(str(scenario)).jobs)
    run_scenario(str(scenario), out, schemes=["mltcp-cubic"], backend="fluid")
    return out


def measure(run: Path, rounds: int) -> dict:
    """Best-of-``rounds`` times of loading the run's traces (what the report loads:
    every visible trace) and of the whole report, timed in alternation."""
    files = sorted(p for p in (run / "traces").glob("*.json") if not p.name.startswith("."))
    samples = sum(len(link.samples) for f in files for link in load_trace(f).links)
    load_s, total_s = [], []
    for _ in range(rounds):
        t0 = time.perf_counter()
        for f in files:
            load_trace(f)
        t1 = time.perf_counter()
        build_report(run)
        t2 = time.perf_counter()
        load_s.append(t1 - t0)
        total_s.append(t2 - t1)
    report_s, load = min(total_s), min(load_s)
    return {"traces": len(files), "link_samples": samples, "report_s": report_s,
            "load_s": load, "rest_s": report_s - load}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, help="JSON file to write")
    ap.add_argument("--work", default="bench/results/report-runs",
                    help="where the runs are made once (default %(default)s)")
    ap.add_argument("--rounds", type=int, default=3, help="timings per length (best kept)")
    a = ap.parse_args()
    work = Path(a.work)
    work.mkdir(parents=True, exist_ok=True)
    rows = []
    for n in LENGTHS:
        row = {"iterations": n, **measure(make_run(work, n), a.rounds)}
        rows.append(row)
        print(f"{n:6d} iterations x 2 jobs: {row['link_samples']:7d} link samples in "
              f"{row['traces']} trace(s), report {row['report_s']:.2f} s = loading "
              f"{row['load_s']:.2f} s + the rest {row['rest_s']:.2f} s",
              file=sys.stderr, flush=True)
    base = rows[0]["report_s"] / rows[0]["iterations"]
    for row in rows:
        row["per_1000_s"] = 1000 * row["report_s"] / row["iterations"]
        row["ratio_per_iteration"] = row["report_s"] / row["iterations"] / base
    print("| iterations x 2 jobs | link samples | report (s) | of which loading (s) "
          "| the rest (s) | per 1,000 iterations (s) | vs 1,000 iterations |\n"
          "|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['iterations']} | {r['link_samples']} | {r['report_s']:.2f} | "
              f"{r['load_s']:.2f} | {r['rest_s']:.2f} | {r['per_1000_s']:.3f} | "
              f"{r['ratio_per_iteration']:.2f} |")
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(json.dumps({"rows": rows, "rounds": a.rounds,
                                       "provenance": provenance()}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
