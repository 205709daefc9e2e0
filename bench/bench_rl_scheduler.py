"""The RL contention-aware scheduler (deepshare-rl) against LAS and SRTF, fair and MLTCP.

For each of deepshare-rl's four traces, every job set in ``--sets`` is run under RL-base,
RL-Hybrid (the shipped policy, or ``--policy``), LAS and SRTF as deepshare-rl runs them, each
under fair sharing and under MLTCP, side by side in one run (the experiment runner:
Dask with ``--parallel``).  Reported per trace and network: mean and p90 JCT (end -
arrival), mean and p90 time on GPUs (what deepshare-rl's simulator calls JCT), GPU utilisation,
and the RL schedulers' reductions against LAS and SRTF next to the paper's (normal
trace: -15.4 %/-18.2 % average, -16.4 %/-20.7 % p90 for RL-base).  Also measured: the
policy's inference time per decision, and its training time (from the policy's record).

    python bench/bench_rl_scheduler.py --sets 0-9 --parallel 2 \\
        --out bench/results/rl-scheduler.json

Writes the JSON, ``rl-scheduler.png``/``.pdf`` (mean JCT and time on GPUs per scheduler,
with their 95 % intervals over the job sets) and a markdown summary next to it.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

from mltcp.core import validate
from mltcp.lab.cluster.engine.simulator import ClusterSim
from mltcp.lab.cluster.experiments import registry, report
from mltcp.lab.cluster.experiments.config import parse_config
from mltcp.lab.cluster.experiments.runner import execute
from mltcp.lab.cluster.papers.deepshare_rl import schedulers as rl_sched
from mltcp.lab.cluster.papers.deepshare_rl import setup as deepshare

SCHEDULERS = ("rl-base", "rl-hybrid", "deepshare-las", "deepshare-srtf",
              "deepshare-first-fit", "deepshare-random")
BASELINES = {"deepshare-las": "LAS", "deepshare-srtf": "SRTF"}
METRICS = ("jct_mean_s", "jct_p90_s", "held_mean_s", "held_p90_s", "gpu_utilisation",
           "run_slowdown_mean", "preemptions")
PAPER = {("rl-base", "SRTF", "mean"): 15.4, ("rl-base", "LAS", "mean"): 18.2,
         ("rl-hybrid", "SRTF", "mean"): 12.1, ("rl-hybrid", "LAS", "mean"): 15.1,
         ("rl-base", "SRTF", "p90"): 16.4, ("rl-base", "LAS", "p90"): 20.7,
         ("rl-hybrid", "SRTF", "p90"): 16.4, ("rl-hybrid", "LAS", "p90"): 20.7}


def reductions(cells: dict[tuple[str, str], dict], network: str, rl: str) -> dict:
    """``rl``'s reduction (percent) against each baseline under ``network``, on JCT
    and on time on GPUs, mean and p90."""
    out = {}
    mine = cells[rl, network]
    for base, label in BASELINES.items():
        other = cells[base, network]
        for stat in ("mean", "p90"):
            for kind, key in (("jct", f"jct_{stat}_s"), ("on_gpus", f"held_{stat}_s")):
                out[f"{kind}_{stat}_vs_{label}"] = 100 * (other[key] - mine[key]) / other[key]
    return out


def inference_time(policy: str | None, sets: list[int]) -> dict:
    """RL-base on the normal trace's first set, in this process: decisions and the
    policy's time per decision."""
    net = deepshare.fabric()
    spec = "rl-base" if policy is None else f"rl-base@{policy}"
    sched = registry.scheduler(spec, net)
    t0 = time.monotonic()
    ClusterSim(net, deepshare.job_set("normal", sets[0]), sched,
               registry.network("fair", net), sets[0]).run()
    return {"decisions": sched.decisions, "inference_s": sched.inference_s,
            "per_decision_ms": 1e3 * sched.inference_s / max(sched.decisions, 1),
            "run_s": time.monotonic() - t0}


HATCHES = ("", "//", "\\\\", "xx", "..", "--")


def plot(summary: dict, path: Path) -> list[Path]:
    """Mean JCT and mean time on GPUs per scheduler and network, one panel per trace:
    each scheduler's bar its own colour and hatch, the 95 % bootstrap interval over the
    job sets as error bars, N job sets in each title.  PNG and PDF."""
    from mltcp.lab.common import plotting

    traces = list(summary)
    networks = list(next(iter(summary.values()))["cells"])
    fig, axes = plotting.figure(2, len(traces), figsize=(4.4 * len(traces), 7.4),
                                squeeze=False)
    width = 0.8 / len(SCHEDULERS)
    for col, trace in enumerate(traces):
        for row, (key, label) in enumerate((("jct_mean_s", "mean JCT (h)"),
                                            ("held_mean_s", "mean time on GPUs (h)"))):
            ax = axes[row][col]
            for i, (sched, style) in enumerate(zip(SCHEDULERS, plotting.styles(),
                                                   strict=False)):
                cells = [summary[trace]["cells"][net][sched][key] / 3600 for net in networks]
                spreads = [summary[trace].get("spread", {}).get(net, {}).get(sched, {})
                           .get(key) for net in networks]
                ax.bar(np.arange(len(networks)) + i * width, cells, width, label=sched,
                       color=style["color"], hatch=HATCHES[i % len(HATCHES)],
                       edgecolor="black", linewidth=0.5, yerr=_errors(cells, spreads),
                       capsize=2, error_kw={"linewidth": 0.8})
            ax.set_xticks(np.arange(len(networks)) + 0.4 - width / 2, networks)
            ax.set_ylabel(label)
            ax.set_title(f"{trace} trace, N={len(summary[trace]['sets'])} job sets "
                         "(bars: 95 % CI)", fontsize=9)
            ax.grid(axis="y", alpha=0.3)
    fig.legend(*axes[0][0].get_legend_handles_labels(), loc="outside upper center",
               ncols=min(len(SCHEDULERS), 2 * len(traces)), fontsize="small")
    return plotting.save(fig, path)


def _errors(means: list[float], spreads: list[dict | None]) -> list[list[float]] | None:
    """Error bars (in hours, below and above) from each bar's interval in seconds; None
    where no bar has one (a single job set)."""
    from mltcp.lab.common import plotting

    def hours(sp: dict | None, end: str) -> float | None:
        return sp[end] / 3600 if sp and sp.get(end) is not None else None

    if not any(hours(sp, "ci_lo") is not None for sp in spreads):
        return None
    return plotting.error_bars(means, [hours(sp, "ci_lo") for sp in spreads],
                               [hours(sp, "ci_hi") for sp in spreads])


def markdown(summary: dict, timing: dict) -> str:
    lines = ["| trace | network | scheduler | JCT mean (h) | JCT p90 (h) | on GPUs mean (h) "
             "| on GPUs p90 (h) | util | run slowdown | preemptions |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for trace, s in summary.items():
        for net, cells in s["cells"].items():
            for sched, c in cells.items():
                lines.append(
                    f"| {trace} | {net} | {sched} | {c['jct_mean_s'] / 3600:.2f} | "
                    f"{c['jct_p90_s'] / 3600:.2f} | {c['held_mean_s'] / 3600:.3f} | "
                    f"{c['held_p90_s'] / 3600:.3f} | {c['gpu_utilisation']:.3f} | "
                    f"{c['run_slowdown_mean']:.3f} | {c['preemptions']:.0f} |")
    lines += ["", "| trace | network | RL | vs | JCT mean | JCT p90 | on GPUs mean | "
              "on GPUs p90 | paper (mean / p90) |", "|---|---|---|---|---|---|---|---|---|"]
    for trace, s in summary.items():
        for net, per_rl in s["reductions"].items():
            for rl, red in per_rl.items():
                for label in BASELINES.values():
                    paper = (f"{PAPER[rl, label, 'mean']} / {PAPER[rl, label, 'p90']} %"
                             if trace == "normal" else "")
                    lines.append(
                        f"| {trace} | {net} | {rl} | {label} | "
                        f"{red[f'jct_mean_vs_{label}']:+.1f} % | "
                        f"{red[f'jct_p90_vs_{label}']:+.1f} % | "
                        f"{red[f'on_gpus_mean_vs_{label}']:+.1f} % | "
                        f"{red[f'on_gpus_p90_vs_{label}']:+.1f} % | {paper} |")
    lines += ["", f"inference: {timing['per_decision_ms']:.2f} ms per decision "
              f"({timing['decisions']} decisions in one 256-job run)"]
    if "train_s" in timing:
        lines.append(f"training: {timing['train_s']:.0f} s for {timing['episodes']} episodes "
                     f"({timing['train_s'] / max(timing['episodes'], 1):.1f} s per 256-job "
                     "episode; the paper: under a minute)")
    return "\n".join(lines)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--traces", default=",".join(deepshare.TRACES))
    p.add_argument("--sets", default="0-9", help="job sets: 0-9 or 0,3,5")
    p.add_argument("--networks", default="fair,mltcp")
    p.add_argument("--policy", default=None, help="a policy .zip (default: the shipped one)")
    p.add_argument("--parallel", type=int, default=1)
    p.add_argument("--out", default="bench/results/rl-scheduler.json")
    a = p.parse_args()
    sets, networks = list(validate.seeds(a.sets, "--sets")), a.networks.split(",")
    scheds = [s if s.startswith("deepshare") or a.policy is None else f"{s}@{a.policy}"
              for s in SCHEDULERS]   # the rules (deepshare-first-fit, -random): ablations
    summary: dict = {}
    started = time.monotonic()
    for trace in a.traces.split(","):
        cfg = parse_config({"name": f"deepshare-{trace}", "schedulers": scheds,
                            "networks": networks, "seeds": sets,
                            "jobs": {"setup": f"deepshare-{trace}"}})
        rep = report.build(execute(cfg, a.parallel))
        by_cell = {(c["scheduler"].split("@")[0], c["network"]): c for c in rep["cells"]}
        summary[trace] = {
            "sets": sets,
            "cells": {net: {s: {m: by_cell[s, net][m] for m in METRICS} for s in SCHEDULERS}
                      for net in networks},
            "spread": {net: {s: {m: by_cell[s, net]["spread"][m] for m in METRICS}
                             for s in SCHEDULERS} for net in networks},
            "reductions": {net: {rl: reductions(by_cell, net, rl)
                                 for rl in ("rl-base", "rl-hybrid")} for net in networks},
            "vs_fair": rep["vs_fair"], "paper_figures": rep["paper_figures"]}
        print(f"{trace}: done ({time.monotonic() - started:.0f} s)", file=sys.stderr,
              flush=True)
    timing = inference_time(a.policy, sets)
    record = Path(a.policy).with_suffix(".json") if a.policy else \
        rl_sched.shipped_path().with_suffix(".json")
    if record.is_file():
        meta = json.loads(record.read_text())
        timing.update(train_s=meta["train_s"], episodes=len(meta["episodes"]),
                      policy=meta["name"], command=meta["command"])
    out = Path(a.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"command": " ".join(sys.argv), "summary": summary,
                               "timing": timing, "wall_s": time.monotonic() - started},
                              indent=1) + "\n")
    plot(summary, out.with_suffix(".png"))
    text = markdown(summary, timing)
    out.with_suffix(".md").write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
