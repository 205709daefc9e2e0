"""The ada-srsf paper's figures over many seeds, at its released simulator's scale.

The paper's text (§V-A) runs jobs of 1000-6000 iterations arriving within 20 minutes;
its simulator's final version (github.com/HKBU-HPML/dl-scheduling, ``online/
job_master.py``, ``scale = 10``) draws 10-60 iterations and arrivals within 12 s: a
hundredth of both, on the same per-iteration times.  Load and contention per iteration
are the same; each job has a hundredth of the iterations, so a run takes ~0.5 s instead
of ~45 s.  This module runs the paper's schemes (the cells
:data:`mltcp.lab.cluster.papers.compare.CELLS` maps its names onto) on the setup's jobs
at that scale (``--scale 100``, the default) or the text's (``--scale 1``), seed after
seed, and prints the paper's figures beside ours with N and 95 % intervals (times
multiplied back to the text's scale)::

    python bench/bench_ada_srsf.py --seeds 0-9
    python bench/bench_ada_srsf.py --seeds 0-9 --exact-checks
    python bench/bench_ada_srsf.py --seeds 0-4 --scale 1

``--exact-checks`` runs AdaDUAL's check on exact remaining bytes instead of the released
code's accounting (:mod:`.contention`).
"""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Sequence
from typing import Any

from mltcp.core import validate
from mltcp.core.errors import SpecError
from mltcp.lab.cluster.engine.simulator import ClusterSim
from mltcp.lab.cluster.experiments.registry import network
from mltcp.lab.cluster.experiments.report import run_metrics
from mltcp.lab.cluster.papers import compare
from mltcp.lab.cluster.papers.ada_srsf.schedulers import SCHEDULERS
from mltcp.lab.cluster.papers.ada_srsf.setup import ADA_FABRIC, CODE_SCALE, ada_srsf_jobs, scaled
from mltcp.lab.cluster.papers.ada_srsf.timeshare import TimeShareScheduler

TIME_METRICS = ("jct_mean_s", "jct_p50_s", "jct_p95_s", "jct_p99_s", "makespan_s")




def cells() -> list[compare.Cell]:
    """The (scheduler, network) cells the paper's figures compare, each once."""
    return list(dict.fromkeys(compare.CELLS["ada-srsf"].values()))


def run(seeds: Sequence[int], exact_checks: bool = False, scale: int = CODE_SCALE
        ) -> dict[compare.Cell, dict[int, dict[str, Any]]]:
    """Every cell's run metrics per seed (times back at the text's scale)."""
    out: dict[compare.Cell, dict[int, dict[str, Any]]] = {c: {} for c in cells()}
    for seed in seeds:
        jobs = scaled(ada_srsf_jobs(seed), scale)
        for sched_name, net_name in out:
            sched = SCHEDULERS[sched_name](ADA_FABRIC)
            if exact_checks and isinstance(sched, TimeShareScheduler):
                sched = dataclasses.replace(sched, released_checks=False)
            res = ClusterSim(ADA_FABRIC, jobs, sched, network(net_name, ADA_FABRIC),
                             seed).run()
            metrics = dict(run_metrics(res))
            for key in TIME_METRICS:
                metrics[key] = metrics[key] * scale
            out[sched_name, net_name][seed] = metrics
    return out


def report(per_seed: dict[compare.Cell, dict[int, dict[str, Any]]]) -> str:
    """Markdown: each cell's means, then the paper's figures beside ours."""
    means = {c: {k: sum(r[k] for r in runs.values()) / len(runs) for k in
                 ("jct_mean_s", "jct_p50_s", "jct_p95_s", "gpu_utilisation")}
             for c, runs in per_seed.items()}
    lines = ["| scheduler | network | N | JCT mean | p50 | p95 | GPU util. |",
             "|---|---|---|---|---|---|---|"]
    for (sched, net), m in means.items():
        lines.append(f"| {sched} | {net} | {len(per_seed[sched, net])} | "
                     f"{m['jct_mean_s']:.0f} s | {m['jct_p50_s']:.0f} s | "
                     f"{m['jct_p95_s']:.0f} s | {m['gpu_utilisation']:.1%} |")
    rows = compare.rows("ada-srsf", means, per_seed)
    return "\n".join(lines) + "\n\n" + compare.table(rows)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", default="0-9", help="seeds, e.g. 0-9 or 0,3")
    parser.add_argument("--exact-checks", action="store_true",
                        help="AdaDUAL reads exact remaining bytes (no released-code quirk)")
    parser.add_argument("--scale", type=int, default=CODE_SCALE, help="iterations and arrivals "
                        "divided by this: 100 the released code's, 1 the paper's text")
    args = parser.parse_args(argv)
    try:
        seeds = validate.seeds(args.seeds, "--seeds")   # a range counted, not expanded
    except SpecError as err:
        parser.error(str(err))
    scale = validate.integer(args.scale, "--scale", 1, 1000, "100")
    print(report(run(seeds, args.exact_checks, scale)))


if __name__ == "__main__":
    main()
