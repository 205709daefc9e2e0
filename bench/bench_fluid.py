"""Fluid model and Cassini speed: job-iterations per second, and Cassini's optimisation time.

Part 1, fluid engine: the compatible pair under MLTCP-CUBIC as L lanes of one batch
(L = 1 .. 5000 seeds), with F re-evaluated only at phase events (f_steps=0, the
HotNets analysis) and at the default 8 steps per iteration.  Reported: job-iterations
simulated per second of wall time (engine only), and end to end (engine + traces +
metrics, what a sweep pays per run), each also as a ratio to the single-lane rate
measured in the same run, since this machine is shared and noisy.

Part 2, two cores: the same total work (2 x the largest batch) in one process, and
split over two worker processes, side by side (the target: >= 1e5 job-iterations per
second on this machine's 2 cores).

Part 3, Cassini: the rotation search for N jobs on one link at 5 degrees (N = 2..10,
random periods and phases, seeded), wall time per optimisation (median of rounds).

Writes JSON and the figure (PNG and PDF):

    python bench/bench_fluid.py --out bench/results/fluid.json
"""

from __future__ import annotations

import argparse
import json
import platform
import random
import statistics
import time
from pathlib import Path

from mltcp.lab.common.provenance import provenance
from mltcp.lab.scenario import metrics
from mltcp.lab.scenario.batched import fluid
from mltcp.lab.scenario.batched.lanes import build_batch
from mltcp.lab.scenario.plan import resolve
from mltcp.lab.scenario.spec import load_scenario

LANES = (1, 10, 100, 1000, 5000)
F_STEPS = (0, fluid.DEFAULT_F_STEPS)
CASSINI_JOBS = (2, 4, 6, 8, 10)


def fluid_rates(rounds: int, lanes_list: tuple[int, ...]) -> list[dict]:
    sc = load_scenario("compatible-pair")
    scheme = sc.scheme("mltcp-cubic")
    job_iterations_per_lane = sum(j.iterations for j in sc.jobs)
    rows = []
    for f_steps in F_STEPS:
        opt = fluid.FluidOptions(f_steps=f_steps)
        for lanes in lanes_list:
            plans = [resolve(sc, scheme, seed) for seed in range(lanes)]
            batch, _ = build_batch(plans)
            engine, total = [], []
            for _ in range(rounds):
                t0 = time.perf_counter()
                result = fluid.simulate(batch, opt)
                t1 = time.perf_counter()
                engine.append(t1 - t0)
                if lanes <= 1000:        # traces + metrics: what a sweep pays per run
                    traces = fluid.to_traces(plans, batch, result, opt)
                    for trace in traces:
                        metrics.summarize(trace)
                    total.append(time.perf_counter() - t0)
            n = lanes * job_iterations_per_lane
            rows.append({"f_steps": f_steps, "lanes": lanes, "steps": result.steps,
                         "engine_s": statistics.median(engine),
                         "engine_job_iterations_per_s": n / statistics.median(engine),
                         "end_to_end_job_iterations_per_s": (n / statistics.median(total)
                                                             if total else None)})
            print(f"f_steps={f_steps} lanes={lanes:5d}: engine "
                  f"{rows[-1]['engine_job_iterations_per_s']:10.0f} job-it/s"
                  + (f", end to end {rows[-1]['end_to_end_job_iterations_per_s']:8.0f}"
                     if total else ""), flush=True)
    for f_steps in F_STEPS:
        base = next(r for r in rows if r["f_steps"] == f_steps and r["lanes"] == lanes_list[0])
        for r in rows:
            if r["f_steps"] == f_steps:
                r["speedup_vs_one_lane"] = (r["engine_job_iterations_per_s"]
                                            / base["engine_job_iterations_per_s"])
    return rows


def _simulate_lanes(lanes: int, f_steps: int) -> float:
    """Build and run ``lanes`` seeds of the compatible pair in this process; engine seconds."""
    sc = load_scenario("compatible-pair")
    batch, _ = build_batch([resolve(sc, sc.scheme("mltcp-cubic"), seed)
                            for seed in range(lanes)])
    t0 = time.perf_counter()
    fluid.simulate(batch, fluid.FluidOptions(f_steps=f_steps))
    return time.perf_counter() - t0


def two_core_rates(rounds: int, lanes: int) -> list[dict]:
    """The same total work split over 2 worker processes (one batch each) against 1
    process doing it all, side by side: job-iterations per second of engine time (the
    two halves run at once, so the slower half's time is the wall time; building the
    batches is not counted in either)."""
    from concurrent.futures import ProcessPoolExecutor

    sc = load_scenario("compatible-pair")
    per_lane = sum(j.iterations for j in sc.jobs)
    rows = []
    with ProcessPoolExecutor(max_workers=2) as pool:
        list(pool.map(_simulate_lanes, [10, 10], [0, 0]))          # start both workers
        for f_steps in F_STEPS:
            one, two = [], []
            for _ in range(rounds):
                one.append(_simulate_lanes(lanes, f_steps))
                # Both halves run at once; the slower one's engine time is the wall time.
                two.append(max(pool.map(_simulate_lanes, [lanes // 2, lanes - lanes // 2],
                                        [f_steps, f_steps])))
            n = lanes * per_lane
            rows.append({"f_steps": f_steps, "lanes": lanes,
                         "one_core_job_iterations_per_s": n / statistics.median(one),
                         "two_cores_job_iterations_per_s": n / statistics.median(two),
                         "two_over_one": statistics.median(one) / statistics.median(two)})
            print(f"f_steps={f_steps} {lanes} lanes: 1 core "
                  f"{rows[-1]['one_core_job_iterations_per_s']:9.0f}, 2 cores "
                  f"{rows[-1]['two_cores_job_iterations_per_s']:9.0f} job-it/s "
                  f"(x{rows[-1]['two_over_one']:.2f})",
                  flush=True)
    return rows


def cassini_times(rounds: int) -> list[dict]:
    from mltcp.lab.common import cassini

    rows = []
    for n in CASSINI_JOBS:
        rng = random.Random(n)
        times = []
        for _ in range(rounds):
            jobs = []
            for k in range(n):
                period = rng.choice([40.0, 60.0, 80.0, 120.0, 240.0])
                dur = period * rng.uniform(0.1, 0.4)
                jobs.append(cassini.JobDemand(f"j{k}", period, (
                    cassini.Phase(rng.uniform(0, period - dur), dur, 1000.0),)))
            t0 = time.perf_counter()
            sol = cassini.best_rotations(jobs, capacity=1000.0, step_deg=5.0, link="l")
            times.append(time.perf_counter() - t0)
        rows.append({"jobs": n, "step_deg": 5.0, "median_s": statistics.median(times),
                     "max_s": max(times), "score": sol.score})
        print(f"cassini {n:2d} jobs at 5 deg: median {rows[-1]['median_s'] * 1000:7.1f} ms, "
              f"max {rows[-1]['max_s'] * 1000:7.1f} ms", flush=True)
    return rows


def plot(result: dict, path: Path) -> list[Path]:
    """Job-iterations per second against lanes (engine alone, and end to end) per
    f_steps, and Cassini's optimisation time against jobs; each line its own colour,
    dashes and marker, the medians' N rounds in the titles.  PNG and PDF."""
    from mltcp.lab.common import plotting

    rounds = result.get("rounds", "?")
    fig, (ax1, ax2) = plotting.figure(1, 2, figsize=(10, 4.2))
    styles = plotting.styles()
    for f_steps in F_STEPS:
        rows = [r for r in result["fluid"] if r["f_steps"] == f_steps]
        ax1.plot([r["lanes"] for r in rows], [r["engine_job_iterations_per_s"] for r in rows],
                 label=f"engine, f_steps={f_steps}", **next(styles))
        e2e = [r for r in rows if r["end_to_end_job_iterations_per_s"]]
        ax1.plot([r["lanes"] for r in e2e], [r["end_to_end_job_iterations_per_s"]
                                             for r in e2e],
                 label=f"+ traces, metrics, f_steps={f_steps}", **next(styles))
    ax1.set_xscale("log")
    ax1.set_yscale("log")
    ax1.axhline(1e5, color="grey", linestyle=":", label="target 1e5")
    ax1.set_xlabel("lanes (runs per batch)")
    ax1.set_ylabel("job-iterations per second")
    ax1.set_title(f"fluid model, compatible pair, MLTCP-CUBIC (median of N={rounds} rounds)",
                  fontsize="medium")
    plotting.legend(ax1, fontsize="x-small")
    ax1.grid(alpha=0.3, which="both")
    rows = result["cassini"]
    ax2.plot([r["jobs"] for r in rows], [r["median_s"] * 1000 for r in rows],
             label="median", **next(plotting.styles()))
    ax2.axhline(1000, color="grey", linestyle=":", label="target 1 s")
    ax2.set_xlabel("jobs on one link")
    ax2.set_ylabel("optimisation time (ms)")
    ax2.set_title(f"Cassini rotation search at 5 degrees (median of N={rounds} rounds)",
                  fontsize="medium")
    plotting.legend(ax2, fontsize="x-small")
    ax2.grid(alpha=0.3)
    return plotting.save(fig, path)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default="bench/results/fluid.json")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--max-lanes", type=int, default=max(LANES))
    args = ap.parse_args()
    lanes = tuple(n for n in LANES if n <= args.max_lanes)
    result = {"schema": "mltcp.bench.fluid/1", "machine": platform.machine(),
              "provenance": provenance(), "rounds": args.rounds,
              "fluid": fluid_rates(args.rounds, lanes),
              "two_cores": two_core_rates(args.rounds, max(lanes) * 2),
              "cassini": cassini_times(args.rounds)}
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    plot(result, out.with_suffix(".png"))
    print(f"wrote {out}, {out.with_suffix('.png')} and {out.with_suffix('.pdf')}")


if __name__ == "__main__":
    main()
