"""Kernel-fault exposure per congestion control: garbage ssthresh/cwnd events per minute
of ECN-marked traffic, counted by an independent tracepoint probe.

Two bulk flows (h1, h2 -> h3) share a 300 Mbit/s bottleneck that marks CE above 65 kB;
rounds interleave the congestion controls so the host's noise hits all alike.  For each
CC the probe (kernel/cc_fault_probe.bpf.c, see docs/known-issues.md) counts

  garbage   times TCP was handed a garbage ssthresh() return at a reduction's start (the
            kernel fault itself; the probe is a tracing program and misses some, see
            mltcp/lab/scenario/emulation/faultprobe.py)
  episodes  times a segment arrived while the socket held a garbage ssthresh or cwnd
  bursts    of those, the ones with a garbage *window*: TCP had sent under it

and the bottleneck's drops.  ``--kernel-src DIR`` measures the modules of another
checkout's kernel/ (e.g. the design before the cong_control rewrite); ``--before FILE``
puts an earlier report beside this one in the plot.

    python bench/bench_kernel_fault.py --seconds 60 --rounds 2 --out bench/results/kernel-fault.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

CCS = ("reno", "cubic", "mltcp_reno", "mltcp_cubic", "mltcp_dctcp")


def measure(ccs: list[str], rounds: int, seconds: float) -> dict:
    from mltcp.host import datapath
    from mltcp.lab.scenario.emulation.faultprobe import EcnBench

    we_loaded = datapath.load(["all"]).loaded
    per_cc: dict[str, list[dict]] = {cc: [] for cc in ccs}
    try:
        with EcnBench(seconds) as bench:
            for r in range(rounds):
                for cc in ccs:
                    run = bench.run(cc)
                    per_cc[cc].append(run.to_json())
                    print(f"round {r + 1}/{rounds} {cc:<12} garbage {run.counts.handed_garbage:>3}"
                          f" episodes {run.counts.episodes:>3} bursts {run.counts.bursts:>3}"
                          f" of {run.counts.reductions:>6} "
                          f"reductions, drops {run.drops:>6}, goodput "
                          f"{run.goodput_fraction:.2f}", flush=True)
    finally:
        datapath.unload(we_loaded)
    summary = {}
    for cc, runs in per_cc.items():
        secs = sum(x["seconds"] for x in runs)
        summary[cc] = {
            "seconds": secs,
            "reductions": sum(x["reductions"] for x in runs),
            "garbage": sum(x["handed_garbage"] for x in runs),
            "episodes": sum(x["episodes"] for x in runs),
            "bursts": sum(x["bursts"] for x in runs),
            "bursts_per_minute": sum(x["bursts"] for x in runs) * 60 / secs,
            "drops": sum(x["drops"] for x in runs),
            "drops_per_minute": sum(x["drops"] for x in runs) * 60 / secs,
            "garbage_per_minute": sum(x["handed_garbage"] for x in runs) * 60 / secs,
            "episodes_per_minute": sum(x["episodes"] for x in runs) * 60 / secs,
            "last_bad": max((x["last_bad"] for x in runs), default=0),
        }
    return {"per_cc": summary, "runs": per_cc}


def plot(report: dict, before: dict | None, png: Path) -> list[Path]:
    """Per CC and minute: episodes, bursts and drops, this run beside ``before`` (each
    series its own colour and hatch); the rounds each bar is over in the title.  PNG and
    PDF (mltcp.lab.common.plotting)."""
    from mltcp.lab.common import plotting

    ccs = list(report["per_cc"])
    series = ([(before, before.get("label", "before"), "//")] if before else []) + \
        [(report, report.get("label", "this run"), "")]
    width = 0.8 / len(series)
    fig, axes = plotting.figure(1, 3, figsize=(15, 4.2))
    for ax, key, title in ((axes[0], "episodes_per_minute", "episodes: garbage ssthresh/cwnd held"),
                           (axes[1], "bursts_per_minute", "bursts: TCP sent under a garbage cwnd"),
                           (axes[2], "drops_per_minute", "bottleneck drops")):
        for i, ((data, label, hatch), style) in enumerate(zip(series, plotting.styles(),
                                                               strict=False)):
            rounds = _rounds(data)
            ax.bar([x + (i - (len(series) - 1) / 2) * width for x in range(len(ccs))],
                   [data["per_cc"].get(cc, {}).get(key, 0) for cc in ccs], width,
                   label=plotting.with_n(label, rounds, "rounds") if rounds else label,
                   color=style["color"], hatch=hatch, edgecolor="black", linewidth=0.5)
        ax.set_xticks(list(range(len(ccs))), ccs, rotation=20)
        ax.set_ylabel("per minute of two ECN-marked flows")
        ax.set_title(title, fontsize=10)
    # one legend for the three panels, above them, where it hides no bar
    fig.legend(*axes[0].get_legend_handles_labels(), loc="outside upper center",
               ncols=len(series), fontsize="small")
    return plotting.save(fig, png)


def _rounds(report: dict) -> int:
    """The rounds a report's per-minute figures are over (0: not recorded)."""
    return max((len(v) for v in report.get("runs", {}).values()), default=0)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=60.0, help="per CC per round (default 60)")
    ap.add_argument("--rounds", type=int, default=1, help="interleaved rounds (default 1)")
    ap.add_argument("--cc", action="append", choices=CCS, help=f"repeatable (default: all of "
                    f"{', '.join(CCS)})")
    ap.add_argument("--kernel-src", help="measure the modules built from this kernel/ directory")
    ap.add_argument("--label", default="", help="name of this measurement in the plot")
    ap.add_argument("--before", help="an earlier report (JSON) to plot beside this one")
    ap.add_argument("--out", default="bench/results/kernel-fault.json")
    args = ap.parse_args()
    if args.kernel_src:
        os.environ["MLTCP_KERNEL_SRC"] = str(Path(args.kernel_src).resolve())
    t0 = time.time()
    report = measure(args.cc or list(CCS), args.rounds, args.seconds)
    report.update(label=args.label or "this run", kernel=platform.release(),
                  kernel_src=os.environ.get("MLTCP_KERNEL_SRC", "checkout"),
                  machine=platform.machine(), wall_s=round(time.time() - t0, 1))
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2) + "\n")
    before = json.loads(Path(args.before).read_text()) if args.before else None
    plot(report, before, out.with_suffix(".png"))
    print(f"{'cc':<12} {'garbage/min':>11} {'episodes/min':>12} {'bursts/min':>10} "
          f"{'reductions':>10} {'drops':>7}")
    for cc, s in report["per_cc"].items():
        print(f"{cc:<12} {s['garbage_per_minute']:>11.2f} {s['episodes_per_minute']:>12.2f} "
              f"{s['bursts_per_minute']:>10.2f} {s['reductions']:>10} {s['drops']:>7}")
    print(f"wrote {out}, {out.with_suffix('.png')} and {out.with_suffix('.pdf')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
