"""ns-3 per-run cost: the MLTCP classes against ns-3's own, side by side.

The same small scenario (compatible pair on a 100 Mbit/s dumbbell, 1 MB per worker per
iteration, 10 iterations) runs under ns-3's TcpLinuxReno/TcpCubic and under
MltcpReno/MltcpCubic (slope 4), rounds interleaved so that machine noise hits both.
Each run is a worker process, as in real use; reported per variant: median wall seconds
per run, simulated seconds, and the ratio MLTCP / native per congestion control.
Importing ns-3 and compiling the classes is measured separately (a run that simulates
nothing), so the ratio of the simulation part is reported too.

    python bench/bench_ns3.py --out bench/results/ns3.json
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import time
from pathlib import Path

from mltcp.ns3sim.backend import run_once
from mltcp.scenario import Scheme, load_scenario
from mltcp.trace import provenance

CCS = ("reno", "cubic", "dctcp")
# Per congestion control: ns-3's class, the MLTCP class with F == 1 (the very same
# events, so any difference is the classes' own cost), and MLTCP with slope 4.
VARIANTS = {name: scheme for cc in CCS for name, scheme in (
    (cc, Scheme(cc, cc, False)),
    (f"mltcp-{cc}-flat", Scheme(f"mltcp-{cc}-flat", cc, True, 0.0, 1.0)),
    (f"mltcp-{cc}", Scheme(f"mltcp-{cc}", cc, True, 4.0, 1.0)))}


def scenario(iterations: int):
    sc = load_scenario("compatible-pair")
    topo = dataclasses.replace(sc.topology, bottleneck_mbit=100, queue_packets=100)
    return dataclasses.replace(sc, topology=topo, jobs=tuple(
        dataclasses.replace(j, iterations=iterations, bytes_per_worker=1_000_000,
                            compute_ms=40) for j in sc.jobs))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default="bench/results/ns3.json")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--iterations", type=int, default=10)
    args = ap.parse_args()
    sc, startup_sc = scenario(args.iterations), scenario(1)
    walls: dict[str, list[float]] = {v: [] for v in VARIANTS}
    startup: list[float] = []
    sim_s: dict[str, float] = {}
    for r in range(args.rounds):
        t0 = time.perf_counter()
        run_once(dataclasses.replace(startup_sc, jobs=startup_sc.jobs[:1]), VARIANTS["reno"], 0)
        startup.append(time.perf_counter() - t0)
        for name, scheme in VARIANTS.items():
            t0 = time.perf_counter()
            trace = run_once(sc, scheme, 0)
            walls[name].append(time.perf_counter() - t0)
            sim_s[name] = max(job.iterations[-1].end for job in trace.jobs)
            print(f"round {r}: {name:12s} {walls[name][-1]:6.1f} s wall, "
                  f"{sim_s[name]:.2f} s simulated", flush=True)
    base = statistics.median(startup)
    result = {"schema": "mltcp.bench.ns3/1", "provenance": provenance(),
              "rounds": args.rounds, "iterations": args.iterations,
              "startup_s_median": base, "variants": {}}
    for name in VARIANTS:
        med = statistics.median(walls[name])
        result["variants"][name] = {"wall_s_median": med, "simulated_s": sim_s[name],
                                    "simulation_part_s": med - base,
                                    # MLTCP changes the schedule, so compare per simulated s
                                    "simulation_s_per_simulated_s": (med - base) / sim_s[name]}
    for cc in CCS:
        n = result["variants"][cc]
        for kind in ("flat", "mltcp"):
            m = result["variants"][f"mltcp-{cc}-flat" if kind == "flat" else f"mltcp-{cc}"]
            ratio = {"wall": m["wall_s_median"] / n["wall_s_median"],
                     "simulation_part": m["simulation_part_s"] / n["simulation_part_s"],
                     "per_simulated_second": (m["simulation_s_per_simulated_s"]
                                              / n["simulation_s_per_simulated_s"])}
            result[f"{kind}_over_native_{cc}"] = ratio
            print(f"{cc}: {'MLTCP F=1' if kind == 'flat' else 'MLTCP slope 4'} / native: "
                  f"wall x{ratio['wall']:.2f}, simulation part x{ratio['simulation_part']:.2f}, "
                  f"per simulated s x{ratio['per_simulated_second']:.2f} "
                  f"(startup {base:.1f} s)")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    _plot(result, out.with_suffix(".png"))
    print(f"wrote {out} and {out.with_suffix('.png')}")


def _plot(result: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(result["variants"])
    fig, ax = plt.subplots(figsize=(6, 3.5))
    ax.bar(names, [result["startup_s_median"]] * len(names), label="import + compile")
    ax.bar(names, [result["variants"][n]["simulation_part_s"] for n in names],
           bottom=[result["startup_s_median"]] * len(names), label="simulation")
    ax.set_ylabel("wall seconds per run (median)")
    ax.set_title("ns-3 per-run cost, MLTCP classes vs native", fontsize="medium")
    ax.legend(fontsize="small")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


if __name__ == "__main__":
    main()
