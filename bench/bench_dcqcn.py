"""DCQCN model: its speed, and the behaviour the dcqcn backend rests on.

Part 1, speed: long-lived flows on one link, 2 flows per lane, L = 1 .. 128 lanes (runs
of one batch), and the short compatible pair (two 2-worker jobs, 4 queue pairs per lane)
as jobs: steps per second, simulated seconds per wall second, and flow-seconds (one
queue pair simulated for one second) per wall second.  The step is fixed (4 us by
default) and every lane moves at each step, so a step costs about the same for 1 or
100 lanes: lanes are nearly free, simulated time is what costs.  This machine is shared
and noisy: compare rows of one run with each other.

Part 2, behaviour (seeded; what the report quotes):
* fairness: two flows at 40 Gbit/s, the second starting 5 ms after the first;
* the late starter's edge: the same at 1 Gbit/s with 10 or 1 Gbit/s NICs, and 10/10;
* the thesis's hand tuning (section 3.2): 50 Gbit/s, base rpg_time_reset 125 us, one
  flow at F = 1.25 in timer mode (125 -> 100 us) or in rates mode (AI/HAI x 1.25);
* share against F in both policy modes at 50 Gbit/s and in the compatible pair's
  regime (1 Gbit/s bottleneck, 10 Gbit/s NICs);
* where the rate changes come from: cuts and increase events by stage per link rate.

    python bench/bench_dcqcn.py --out bench/results/dcqcn.json

Part 3 (``--interleave SCENARIO --mode rates [--host-link-mbit 1000]``): a scenario's
schemes and the dedicated baseline on the dcqcn backend with the tuner in another policy
mode than the default, or other NIC rates, as ``mltcp compare --backend dcqcn`` would
run them (traces, report.json, table).
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time
from pathlib import Path

import numpy as np

from mltcp.core.dcqcn.policy import Mode
from mltcp.lab.common.provenance import provenance
from mltcp.lab.models.dcqcn.longflows import LongFlows, run_long_flows
from mltcp.lab.models.dcqcn.params import ModelParams
from mltcp.lab.scenario.batched import dcqcn as simulate
from mltcp.lab.scenario.plan import resolve
from mltcp.lab.scenario.runner import traces_of
from mltcp.lab.scenario.spec import parse_scenario

LANES = (1, 8, 32, 128)
SEEDS = (0, 1, 2)


def speed_long_flows(rounds: int, lanes_list: tuple[int, ...], sim_s: float) -> list[dict]:
    rows = []
    for lanes in lanes_list:
        walls = []
        for _ in range(rounds):
            t0 = time.perf_counter()
            run_long_flows(LongFlows(capacity_bps=10e9, f=(1.0, 1.0), duration_s=sim_s),
                           seeds=range(lanes))
            walls.append(time.perf_counter() - t0)
        wall = statistics.median(walls)
        steps = round(sim_s / ModelParams().step)
        rows.append({"lanes": lanes, "flows": 2 * lanes, "sim_s": sim_s, "wall_s": wall,
                     "steps_per_s": steps / wall, "sim_s_per_wall_s": sim_s / wall,
                     "flow_s_per_wall_s": 2 * lanes * sim_s / wall})
        print(f"long flows, {lanes:4d} lanes: {rows[-1]['steps_per_s']:8.0f} steps/s, "
              f"{rows[-1]['sim_s_per_wall_s']:.4f} sim s/s, "
              f"{rows[-1]['flow_s_per_wall_s']:.3f} flow-s/s", flush=True)
    return rows


def short_pair(iterations: int, seeds: list[int]) -> object:
    return parse_scenario({
        "name": "short-pair", "description": "compatible pair at 10 Gbit/s, 10 ms iterations",
        "seeds": seeds,
        "topology": {"kind": "dumbbell", "bottleneck_mbit": 10000, "host_link_mbit": 10000,
                     "queue_packets": 400, "hosts": 4},
        "jobs": [{"name": n, "compute_ms": 6, "bytes_per_iteration": "5MB", "workers": 2,
                  "iterations": iterations} for n in ("a", "b")],
        "schemes": [{"name": "mltcp", "cc": "cubic", "mltcp": True, "slope": 4.0}]})


def speed_jobs(rounds: int, lanes_list: tuple[int, ...], iterations: int) -> list[dict]:
    rows = []
    for lanes in lanes_list:
        sc = short_pair(iterations, list(range(lanes)))
        plans = [resolve(sc, sc.scheme("mltcp"), seed) for seed in sc.seeds]
        walls, sim = [], 0.0
        for _ in range(rounds):
            t0 = time.perf_counter()
            traces = traces_of("dcqcn", plans)
            walls.append(time.perf_counter() - t0)
            sim = float(np.mean([max(j.iterations[-1].end for j in t.jobs) for t in traces]))
        wall = statistics.median(walls)
        rows.append({"lanes": lanes, "queue_pairs": 4 * lanes, "job_iterations":
                     2 * iterations * lanes, "sim_s": sim, "wall_s": wall,
                     "sim_s_per_wall_s": sim / wall, "flow_s_per_wall_s": 4 * lanes * sim / wall,
                     "job_iterations_per_s": 2 * iterations * lanes / wall})
        print(f"short pair, {lanes:4d} lanes: {rows[-1]['sim_s_per_wall_s']:.4f} sim s/s, "
              f"{rows[-1]['flow_s_per_wall_s']:.3f} flow-s/s, "
              f"{rows[-1]['job_iterations_per_s']:.1f} job-iterations/s", flush=True)
    return rows


def _shares(bench: LongFlows, params: ModelParams, after_s: float) -> dict:
    res = run_long_flows(bench, params, seeds=SEEDS)
    rates = res.mean_rates(after_s)
    share = rates[:, 0] / rates.sum(axis=1)
    return {"rates_gbps": np.round(rates / 1e9, 3).tolist(),
            "share_flow0": np.round(share, 3).tolist(), "mean_share_flow0": float(share.mean()),
            "knobs": res.knobs}


def fairness() -> dict:
    out = _shares(LongFlows(capacity_bps=40e9, f=(1.0, 1.0), start_s=(0.0, 0.005),
                            duration_s=0.1), ModelParams(), after_s=0.05)
    rates = np.array(out["rates_gbps"])
    out["jain"] = [float(r.sum() ** 2 / (len(r) * (r ** 2).sum())) for r in rates]
    print(f"fairness 40G: shares {out['share_flow0']}, Jain {np.round(out['jain'], 4)}",
          flush=True)
    return out


def thesis() -> dict:
    params = ModelParams(knobs={"rpg_time_reset": 125})
    rows = {}
    for name, f, mode in (("standard", (1.0, 1.0), Mode.RATES),
                          ("timer_125_to_100", (1.25, 1.0), Mode.TIMER),
                          ("rates_x1.25", (1.25, 1.0), Mode.RATES)):
        rows[name] = _shares(LongFlows(capacity_bps=50e9, f=f, duration_s=0.06, mode=mode),
                             params, after_s=0.02)
        print(f"thesis 50G {name}: flow0 Gbit/s x flow1 {rows[name]['rates_gbps']}, "
              f"share {rows[name]['mean_share_flow0']:.3f}", flush=True)
    return rows


def late_starter() -> list[dict]:
    """Standard DCQCN, the second flow starting 10 ms after the first: with NICs faster
    than the bottleneck the newcomer arrives at line rate with a line-rate target that
    the cuts do not clamp (no increase event between them), and keeps the larger share."""
    rows = []
    for cap, line in ((1e9, 10e9), (1e9, 1e9), (10e9, 10e9)):
        r = _shares(LongFlows(capacity_bps=cap, line_bps=line, f=(1.0, 1.0),
                              start_s=(0.0, 0.01), duration_s=0.1), ModelParams(), after_s=0.02)
        rows.append({"capacity_gbps": cap / 1e9, "line_gbps": line / 1e9, **r})
        print(f"late starter {cap / 1e9:g}G link / {line / 1e9:g}G NIC: early flow's share "
              f"{r['mean_share_flow0']:.3f} {r['share_flow0']}", flush=True)
    return rows


def f_sensitivity() -> list[dict]:
    rows = []
    for cap, line in ((50e9, 50e9), (1e9, 10e9)):
        for mode in Mode:
            for f in (1.25, 2.0, 5.0):
                r = _shares(LongFlows(capacity_bps=cap, line_bps=line, f=(f, 1.0),
                                      duration_s=0.06, mode=mode), ModelParams(), after_s=0.02)
                rows.append({"capacity_gbps": cap / 1e9, "line_gbps": line / 1e9,
                             "mode": mode.value, "f": f, **r})
                print(f"{cap / 1e9:g}G link / {line / 1e9:g}G NIC, {mode.value}, F={f}: "
                      f"share {r['mean_share_flow0']:.3f} {r['share_flow0']}", flush=True)
    return rows


def event_mix() -> list[dict]:
    rows = []
    for cap, line in ((1e9, 10e9), (1e9, 1e9), (10e9, 10e9), (50e9, 50e9)):
        res = run_long_flows(LongFlows(capacity_bps=cap, line_bps=line, f=(1.0, 1.0),
                                       duration_s=0.05), seeds=(0,))
        ev = {k: float(v.sum()) for k, v in res.events.items()}
        inc = ev["fast_recovery"] + ev["additive"] + ev["hyper"]
        per_ms = 1 / (2 * 50)                                   # 2 flows, 50 ms
        rows.append({"capacity_gbps": cap / 1e9, "line_gbps": line / 1e9,
                     "cuts_per_ms_per_flow": ev["cut"] * per_ms,
                     "increase_events_per_ms_per_flow": inc * per_ms,
                     "fast_recovery": ev["fast_recovery"] / inc, "additive": ev["additive"] / inc,
                     "hyper": ev["hyper"] / inc})
        r = rows[-1]
        print(f"{cap / 1e9:g}G/{line / 1e9:g}G: {r['cuts_per_ms_per_flow']:.1f} cuts/ms, "
              f"{r['increase_events_per_ms_per_flow']:.1f} increase events/ms "
              f"(FR {r['fast_recovery']:.0%}, AI {r['additive']:.0%}, HAI {r['hyper']:.0%})",
              flush=True)
    return rows


def interleave(scenario: str, mode: Mode, out_dir: Path, seeds: list[int] | None,
               iterations: int | None, host_link_mbit: float | None) -> str:
    """The scenario's schemes + dedicated on the dcqcn backend, with the tuner's policy
    in ``mode`` (``mltcp compare --backend dcqcn`` runs the default, timer), optionally
    with fewer iterations or other NIC rates.  Writes the traces and the report to
    ``out_dir``; returns the table."""
    import dataclasses

    from mltcp.lab.scenario.report import build_report, table
    from mltcp.lab.scenario.runner import backend_for, plan_runs, run_plans
    from mltcp.lab.scenario.spec import load_scenario

    sc = load_scenario(scenario)
    if iterations:
        sc = dataclasses.replace(sc, jobs=tuple(dataclasses.replace(j, iterations=iterations)
                                                for j in sc.jobs))
    if host_link_mbit:
        sc = dataclasses.replace(sc, topology=dataclasses.replace(
            sc.topology, host_link_mbit=host_link_mbit))
    plans = plan_runs(sc, seeds or list(sc.seeds), dedicated=True)
    t0 = time.perf_counter()
    run_plans(backend_for("dcqcn", options={"options": simulate.DcqcnOptions(mode=mode)}),
              plans, out_dir)
    print(f"{scenario}, {mode.value} mode: {len(plans)} runs in "
          f"{time.perf_counter() - t0:.0f} s", flush=True)
    return table(build_report(out_dir))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default="bench/results/dcqcn.json")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--max-lanes", type=int, default=max(LANES))
    ap.add_argument("--sim-s", type=float, default=0.01, help="simulated seconds per run")
    ap.add_argument("--speed-only", action="store_true")
    ap.add_argument("--interleave", metavar="SCENARIO",
                    help="instead: run SCENARIO's schemes + dedicated with --mode, write "
                         "traces and report to --out-dir, print the table")
    ap.add_argument("--mode", default="rates", choices=[m.value for m in Mode])
    ap.add_argument("--out-dir", default="bench/results/dcqcn-interleave")
    ap.add_argument("--seed", action="append", type=int)
    ap.add_argument("--iterations", type=int)
    ap.add_argument("--host-link-mbit", type=float,
                    help="NIC rate for --interleave (e.g. 1000: NICs at the bottleneck's rate)")
    args = ap.parse_args()
    if args.interleave:
        print(interleave(args.interleave, Mode(args.mode), Path(args.out_dir), args.seed,
                         args.iterations, args.host_link_mbit))
        return
    lanes = tuple(n for n in LANES if n <= args.max_lanes)
    result: dict = {"schema": "mltcp.bench.dcqcn/1", "machine": platform.machine(),
                    "provenance": provenance({"dcqcn": ModelParams().to_dict()}),
                    "rounds": args.rounds,
                    "speed_long_flows": speed_long_flows(args.rounds, lanes, args.sim_s),
                    "speed_jobs": speed_jobs(args.rounds, lanes[:3], iterations=4)}
    if not args.speed_only:
        result |= {"fairness": fairness(), "thesis": thesis(), "late_starter": late_starter(),
                   "f_sensitivity": f_sensitivity(), "event_mix": event_mix()}
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
