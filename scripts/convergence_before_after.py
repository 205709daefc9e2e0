"""Convergence under the definition before issue 22 and under today's, on the same traces.

Before issue 22 a run "converged" at the first iteration that began k = 5 iterations in a
row with overlap strictly under 10 %, even if the jobs drifted back into overlap
afterwards.  Today's convergence iteration (mltcp.lab.scenario.metrics) must hold to the
end of the run; the old notion lives on as the first interleaved iteration.  This script
reads the traces of report directories and prints, per scheme, the runs that converged
and at which iterations under each, so that every published figure can be restated.
The old rule is written out here (and only here) as the reference it is.

    python scripts/convergence_before_after.py DIR [DIR ...]
"""

from __future__ import annotations

import argparse
from pathlib import Path

from mltcp.lab.scenario import metrics
from mltcp.lab.scenario.trace import load_trace

THRESHOLD, K = metrics.DEFAULT_THRESHOLD, metrics.DEFAULT_K


def old_convergence(indices: list[int], values: list[float]) -> int | None:
    """The rule before issue 22: k present iterations in a row under the threshold."""
    start, previous = None, None
    for index, value in zip(indices, values, strict=True):
        if value >= THRESHOLD or (previous is not None and index != previous + 1):
            start = None
        if value < THRESHOLD:
            start = index if start is None else start
            if index - start + 1 >= K:
                return start
        previous = index
    return None


def _latest(values: list[int | None]) -> int | None:
    return None if None in values else max(v for v in values if v is not None)


def per_run(trace) -> tuple[int | None, int | None, int | None]:  # type: ignore[no-untyped-def]
    """(old convergence, first interleaved, convergence) of a run: max over its jobs."""
    old, first, held = [], [], []
    for job in trace.jobs:
        indices = [r.index for r in job.iterations]
        values = metrics.overlap(trace, job.name)
        old.append(old_convergence(indices, values))
        first.append(metrics.first_interleaved(indices, values, THRESHOLD, K))
        held.append(metrics.held_from(indices, values, THRESHOLD, K))
    return _latest(old), _latest(first), _latest(held)


def _cell(values: list[int | None]) -> str:
    done = [v for v in values if v is not None]
    listed = ", ".join("-" if v is None else str(v) for v in values)
    return f"{len(done)}/{len(values)} ({listed})"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("dirs", nargs="+", type=Path, help="report directories (with traces/)")
    args = ap.parse_args()
    print("| run set | scheme | before: converged (k in a row) | first interleaved | "
          "converged (held to the end) |")
    print("|---|---|---|---|---|")
    for out in args.dirs:
        by_scheme: dict[str, list] = {}
        for path in sorted((out / "traces").glob("*.json")):
            if path.name.startswith(".") or path.name.startswith("dedicated-"):
                continue
            trace = load_trace(path)
            by_scheme.setdefault(trace.scheme, []).append((trace.seed, per_run(trace)))
        for scheme, runs in by_scheme.items():
            runs.sort()
            cols = list(zip(*(r for _, r in runs), strict=True))
            print(f"| {out.name} | {scheme} | {_cell(list(cols[0]))} | "
                  f"{_cell(list(cols[1]))} | {_cell(list(cols[2]))} |")


if __name__ == "__main__":
    main()
