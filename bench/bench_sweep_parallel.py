"""Sweeps in one process against ``--parallel 2``, and the chunking rule each uses.

A batched backend gets a sweep's points in chunks, each one call that advances its
runs together.  What a chunk costs differs by backend: the fluid engine steps each lane
in turn (a chunk costs about its runs), the DCQCN model steps all lanes as one vector
(a chunk costs about one run).  The old rule cut every sweep into two chunks per worker
(one worker: two chunks), which on the DCQCN model doubled a serial sweep's time and
made ``--parallel 2`` slower than one process.  The rule now (``vector_lanes``, see
``mltcp/lab/scenario/backends/base.py``) keeps a DCQCN chunk whole.

Variants, timed side by side and interleaved trial by trial (this machine is shared):
``serial`` and ``parallel 2`` under the rule now (``sweep.execute`` as ``mltcp sweep``
calls it) and under the old rule (the same with the old chunk size passed), for

* ``fluid``: compatible-pair, slope 0.5,1,2,4 x jobs 4,8,16 x 200 iterations, seeds
  0-9 (120 runs in three structures);
* ``dcqcn``: compatible-pair-roce, slope 1,4 x 10 iterations, seeds 0-1 (4 runs, one
  structure).

On the fluid backend the rule did not change: its two pairs run the same code, and
their difference is this machine's noise and the order (measured: 8.7 and 7.8 s for
``parallel 2``, 13.9 and 13.6 s serial, N = 3).  Every variant's rows must equal the
first's (the chunking changes no number).  Writes
JSON, a table and the figure (PNG and PDF):

    python bench/bench_sweep_parallel.py --out bench/results/sweep_parallel.json --trials 3
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from mltcp.lab.common import plotting  # noqa: E402
from mltcp.lab.common.provenance import provenance  # noqa: E402
from mltcp.lab.scenario import sweep  # noqa: E402

SWEEPS = {
    "fluid": ("compatible-pair", ["slope=0.5,1,2,4", "jobs=4,8,16", "iterations=200"], "0-9"),
    "dcqcn": ("compatible-pair-roce", ["slope=1,4", "iterations=10"], "0-1"),
}
# (name, workers, old rule?)
VARIANTS = (("serial, now", 1, False), ("parallel 2, now", 2, False),
            ("serial, old rule", 1, True), ("parallel 2, old rule", 2, True))


def old_chunk_size(spec: sweep.SweepSpec, workers: int) -> int:
    """The chunk size the old rule gave: two chunks per worker, whatever the backend."""
    items = len(spec.points()) * len(spec.seeds)
    return max(1, min(sweep.DEFAULT_CHUNK, math.ceil(items / (2 * workers))))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default="bench/results/sweep_parallel.json",
                    help="the JSON file (the figure and table go beside it)")
    ap.add_argument("--trials", type=int, default=3, help="trials of each variant")
    ap.add_argument("--backends", default="fluid,dcqcn", help="comma-separated: fluid,dcqcn")
    args = ap.parse_args()
    names = args.backends.split(",")
    specs = {b: sweep.make_spec(SWEEPS[b][0], SWEEPS[b][1], SWEEPS[b][2], backend=b)
             for b in names}
    walls: dict[str, dict[str, list[float]]] = {b: {v[0]: [] for v in VARIANTS} for b in names}
    for trial in range(args.trials):
        for backend in names:
            spec = specs[backend]
            reference = None
            for label, workers, old in VARIANTS:
                size = old_chunk_size(spec, workers) if old else None
                t0 = time.perf_counter()
                rows = sweep.execute(spec, parallel=workers, chunk_size=size, progress=None)
                wall = time.perf_counter() - t0
                key = json.dumps(rows, sort_keys=True, default=str)
                assert reference is None or key == reference, f"{backend} {label}: rows differ"
                reference = key
                walls[backend][label].append(wall)
                print(f"trial {trial + 1} {backend:5s} {label:22s} {wall:7.1f} s", flush=True)
    table = []
    for backend in names:
        base = statistics.median(walls[backend]["serial, old rule"])
        for label, _, _ in VARIANTS:
            xs = walls[backend][label]
            table.append({"backend": backend, "variant": label, "N": len(xs),
                          "min_s": min(xs), "median_s": statistics.median(xs),
                          "max_s": max(xs),
                          "ratio_to_old_serial": statistics.median(xs) / base})
    print("\n| backend | variant | N | min / median / max (s) | median / old serial |")
    print("|---|---|---|---|---|")
    for r in table:
        print(f"| {r['backend']} | {r['variant']} | {r['N']} | {r['min_s']:.1f} / "
              f"{r['median_s']:.1f} / {r['max_s']:.1f} | {r['ratio_to_old_serial']:.2f} |")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"schema": "mltcp.bench.sweep_parallel/1",
                               "provenance": provenance(),
                               "sweeps": {b: SWEEPS[b] for b in names},
                               "walls_s": walls, "table": table}, indent=2) + "\n")
    fig, axes = plotting.figure(1, len(names), figsize=(3.6 * len(names), 3.4))
    axes = axes if len(names) > 1 else [axes]
    for ax, backend in zip(axes, names, strict=True):
        for i, (label, _, _) in enumerate(VARIANTS):
            ys = walls[backend][label]
            ax.plot([i] * len(ys), ys, "o", color="C0", alpha=0.6)
            ax.hlines(statistics.median(ys), i - 0.3, i + 0.3, colors="k")
        ax.set_xticks(range(len(VARIANTS)), [v[0].replace(", ", "\n") for v in VARIANTS],
                      fontsize=7)
        ax.set_ylim(bottom=0)
        ax.set_ylabel("sweep wall time (s)")
        ax.set_title(f"{backend}: N={args.trials} each (dots: trials, bar: median)",
                     fontsize=8)
    plotting.save(fig, out.with_suffix(""))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
