"""ns-3 per-run cost: the MLTCP classes against ns-3's own, side by side.

The same small scenario (compatible pair on a 100 Mbit/s dumbbell, 1 MB per worker per
iteration, 10 iterations) runs under ns-3's TcpLinuxReno/TcpCubic and under
MltcpReno/MltcpCubic (slope 4), rounds interleaved so that machine noise hits both.
Each run is a worker process, as in real use; reported per variant: median wall seconds
per run, simulated seconds, and the ratio MLTCP / native per congestion control.
The worker times its own simulation loop (without importing ns-3 and compiling the
classes, ~20-35 s whose noise would swamp the classes' cost), so the ratio of the
simulation part is reported next to the whole run's.

    python bench/bench_ns3.py --out bench/results/ns3.json
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import time
from pathlib import Path

from mltcp.lab.common.provenance import provenance
from mltcp.lab.scenario.runner import run_one
from mltcp.lab.scenario.spec import Scheme, load_scenario

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
    sc = scenario(args.iterations)
    walls: dict[str, list[float]] = {v: [] for v in VARIANTS}
    sims: dict[str, list[float]] = {v: [] for v in VARIANTS}
    sim_s: dict[str, float] = {}
    for r in range(args.rounds):
        for name, scheme in VARIANTS.items():
            t0 = time.perf_counter()
            trace = run_one("ns3", sc, scheme, 0)
            walls[name].append(time.perf_counter() - t0)
            # The worker's own clock around the simulation loop: without the import and
            # the compile, whose noise would swamp the classes' cost.
            sims[name].append(trace.provenance["ns3"]["simulation_wall_s"])
            sim_s[name] = max(job.iterations[-1].end for job in trace.jobs)
            print(f"round {r}: {name:18s} {walls[name][-1]:6.1f} s wall, of which "
                  f"{sims[name][-1]:5.2f} s simulating {sim_s[name]:.2f} s", flush=True)
    result = {"schema": "mltcp.bench.ns3/2", "provenance": provenance(),
              "rounds": args.rounds, "iterations": args.iterations, "variants": {}}
    for name in VARIANTS:
        wall, sim = statistics.median(walls[name]), statistics.median(sims[name])
        result["variants"][name] = {"wall_s_median": wall, "simulation_wall_s_median": sim,
                                    "startup_s_median": wall - sim,
                                    "simulated_s": sim_s[name],
                                    # MLTCP changes the schedule, so compare per simulated s
                                    "wall_per_simulated_s": sim / sim_s[name]}
    for cc in CCS:
        n = result["variants"][cc]
        for kind in ("flat", "mltcp"):
            m = result["variants"][f"mltcp-{cc}-flat" if kind == "flat" else f"mltcp-{cc}"]
            ratio = {"wall": m["wall_s_median"] / n["wall_s_median"],
                     "simulation": m["simulation_wall_s_median"] / n["simulation_wall_s_median"],
                     "per_simulated_second": m["wall_per_simulated_s"] / n["wall_per_simulated_s"]}
            result[f"{kind}_over_native_{cc}"] = ratio
            print(f"{cc}: {'MLTCP F=1' if kind == 'flat' else 'MLTCP slope 4'} / native: "
                  f"whole run x{ratio['wall']:.2f}, simulation x{ratio['simulation']:.2f}, "
                  f"per simulated s x{ratio['per_simulated_second']:.2f}")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    _plot(result, out.with_suffix(".png"))
    print(f"wrote {out}, {out.with_suffix('.png')} and {out.with_suffix('.pdf')}")


def _plot(result: dict, path: Path) -> list[Path]:
    """Per variant, the median run's start-up and simulation, stacked (each part its
    own colour and hatch); N rounds in the title.  PNG and PDF."""
    from mltcp.lab.common import plotting

    names = list(result["variants"])
    v = result["variants"]
    fig, ax = plotting.figure(figsize=(8, 3.8))
    startup = [v[n]["startup_s_median"] for n in names]
    parts = (("import + compile", startup, None, "//"),
             ("simulation", [v[n]["simulation_wall_s_median"] for n in names], startup, ""))
    for (label, heights, bottom, hatch), style in zip(parts, plotting.styles(), strict=False):
        ax.bar(names, heights, bottom=bottom, label=label, color=style["color"], hatch=hatch,
               edgecolor="black", linewidth=0.5)
    ax.tick_params(axis="x", labelrotation=45, labelsize="small")
    ax.set_ylabel("wall seconds per run (median)")
    ax.set_title(f"ns-3 per-run cost, MLTCP classes vs native "
                 f"(median of N={result['rounds']} rounds)", fontsize="medium")
    plotting.legend(ax)
    return plotting.save(fig, path)


if __name__ == "__main__":
    main()
