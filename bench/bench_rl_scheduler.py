"""The RL contention-aware scheduler (deepshare-rl) against LAS and SRTF, fair and MLTCP.

For each of deepshare-rl's four traces, every job set in ``--sets`` is run under RL-base,
RL-Hybrid (the shipped policy, or each ``--policy``: a ``.zip`` or a shipped policy's
name), LAS and SRTF as deepshare-rl runs them, and the first-fit and random rules in the
RL scheduler's action space, each under fair sharing and under MLTCP, side by side in
one run (the experiment runner: ``--parallel`` worker processes).  Reported per trace and
network, each with its N (job sets) and 95 % bootstrap interval over the sets
(:mod:`mltcp.lab.common.stats`): mean and p90 JCT (end - arrival), mean and p90 time on
GPUs (what deepshare-rl's simulator calls JCT), GPU utilisation; and each RL
scheduler's change against LAS, SRTF and the first-fit rule (the ratio of the means
over the same sets, its interval from resampling the sets in pairs), next to the
paper's (normal trace: -15.4 %/-18.2 % average, -16.4 %/-20.7 % p90 for RL-base).
Also measured: the policy's inference time per decision, and its training time (from
the policy's record).

The comparison's sets are the paper's ten (0-9): a policy trains on 100-109 and picks
its checkpoint on 200-204 (mltcp.lab.cluster.papers.deepshare_rl.setup), so nothing
here was seen by the policy.

    python bench/bench_rl_scheduler.py --sets 0-9 --parallel 2 \\
        --out bench/results/rl-scheduler.json
    python bench/bench_rl_scheduler.py --traces normal --networks fair --sets 0-9 \\
        --policy deepshare-normal-w0.4 --policy deepshare-normal-w0.4-jct

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
from mltcp.core.errors import SpecError
from mltcp.lab.cluster.engine.simulator import ClusterSim
from mltcp.lab.cluster.experiments import registry, report
from mltcp.lab.cluster.experiments.config import parse_config
from mltcp.lab.cluster.experiments.runner import execute
from mltcp.lab.cluster.papers.deepshare_rl import schedulers as rl_sched
from mltcp.lab.cluster.papers.deepshare_rl import setup as deepshare
from mltcp.lab.common import stats

RL_KINDS = ("rl-base", "rl-hybrid")
OTHERS = ("deepshare-las", "deepshare-srtf", "deepshare-first-fit", "deepshare-random")
SCHEDULERS = RL_KINDS + OTHERS
BASELINES = {"deepshare-las": "LAS", "deepshare-srtf": "SRTF",
             "deepshare-first-fit": "first-fit"}
METRICS = ("jct_mean_s", "jct_p90_s", "held_mean_s", "held_p90_s", "gpu_utilisation",
           "run_slowdown_mean", "preemptions")
PAPER = {("rl-base", "SRTF", "mean"): 15.4, ("rl-base", "LAS", "mean"): 18.2,
         ("rl-hybrid", "SRTF", "mean"): 12.1, ("rl-hybrid", "LAS", "mean"): 15.1,
         ("rl-base", "SRTF", "p90"): 16.4, ("rl-base", "LAS", "p90"): 20.7,
         ("rl-hybrid", "SRTF", "p90"): 16.4, ("rl-hybrid", "LAS", "p90"): 20.7}


def rl_specs(policies: list[str] | None) -> dict[str, str]:
    """Label -> scheduler spec of each RL scheduler: bare ``rl-base``/``rl-hybrid`` for
    the shipped policy, ``KIND@NAME`` for each given policy (a path, NAME its file name
    without ``.zip``, or a shipped policy's name)."""
    if not policies:
        return {k: k for k in RL_KINDS}
    return {f"{k}@{Path(p).name.removesuffix('.zip')}": f"{k}@{p}"
            for p in policies for k in RL_KINDS}


def change(mine: list[float], other: list[float]) -> dict:
    """``mine``'s change against ``other`` in percent (negative = lower), the ratio of
    their means over the same job sets, with the interval from resampling the sets in
    pairs."""
    sp = stats.bootstrap_ratio(mine, other)

    def pct(ratio: float | None) -> float | None:
        return None if ratio is None else 100 * (ratio - 1)

    return {"n": sp.n, "pct": pct(sp.mean), "ci_lo": pct(sp.lo), "ci_hi": pct(sp.hi)}


def changes(per_set: dict[str, dict[str, dict[int, dict]]], network: str, rl: str,
            sets: list[int]) -> dict:
    """``rl``'s change against each baseline that ran under ``network``, on JCT and on
    time on GPUs, mean and p90, over the sets both ran."""
    out = {}
    mine = per_set[network][rl]
    for base, label in BASELINES.items():
        other = per_set[network].get(base)
        if other is None:
            continue
        both = [s for s in sets if s in mine and s in other]
        for stat in ("mean", "p90"):
            for kind, key in (("jct", f"jct_{stat}_s"), ("on_gpus", f"held_{stat}_s")):
                out[f"{kind}_{stat}_vs_{label}"] = change([mine[s][key] for s in both],
                                                          [other[s][key] for s in both])
    return out


def inference_time(spec: str, sets: list[int]) -> dict:
    """``spec`` (an RL-base) on the normal trace's first set, in this process: decisions
    and the policy's time per decision."""
    net = deepshare.fabric()
    sched = registry.scheduler(spec, net)
    t0 = time.monotonic()
    ClusterSim(net, deepshare.job_set("normal", sets[0]), sched,
               registry.network("fair", net), sets[0]).run()
    return {"decisions": sched.decisions, "inference_s": sched.inference_s,
            "per_decision_ms": 1e3 * sched.inference_s / max(sched.decisions, 1),
            "run_s": time.monotonic() - t0}


def training(policy: str | None) -> dict:
    """What the policy's record says of its training (empty without a record)."""
    record = rl_sched.policy_path(policy).with_suffix(".json")
    if not record.is_file():
        return {}
    meta = json.loads(record.read_text())
    sel = meta.get("selection") or {}
    return {"train_s": meta["train_s"], "episodes": len(meta["episodes"]),
            "policy": meta["name"], "command": meta["command"],
            "picked_timesteps": (sel.get("picked") or {}).get("timesteps")}


HATCHES = ("", "//", "\\\\", "xx", "..", "--", "++", "oo")


def plot(summary: dict, path: Path) -> list[Path]:
    """Mean JCT and mean time on GPUs per scheduler and network, one panel per trace:
    each scheduler's bar its own colour and hatch, the 95 % bootstrap interval over the
    job sets as error bars, N job sets in each title.  PNG and PDF."""
    from mltcp.lab.common import plotting

    traces = list(summary)
    networks = list(next(iter(summary.values()))["cells"])
    labels = list(next(iter(summary.values()))["cells"][networks[0]])
    fig, axes = plotting.figure(2, len(traces), figsize=(4.4 * len(traces) + 1, 7.4),
                                squeeze=False)
    width = 0.8 / len(labels)
    for col, trace in enumerate(traces):
        for row, (key, label) in enumerate((("jct_mean_s", "mean JCT (h)"),
                                            ("held_mean_s", "mean time on GPUs (h)"))):
            ax = axes[row][col]
            for i, (sched, style) in enumerate(zip(labels, plotting.styles(), strict=False)):
                cells = [summary[trace]["cells"][net][sched][key] / 3600 for net in networks]
                spreads = [summary[trace]["spread"][net][sched][key] for net in networks]
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
               ncols=min(len(labels), 4), fontsize="small")
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


def _ci(sp: dict, scale: float = 1.0, spec: str = ".2f") -> str:
    """``"32.01 [30.12, 33.90]"`` from a spread in the report's form (the value alone
    where N = 1)."""
    if sp.get("mean") is None:
        return "-"
    text = format(sp["mean"] / scale, spec)
    if sp.get("ci_lo") is None:
        return text
    return f"{text} [{format(sp['ci_lo'] / scale, spec)}, {format(sp['ci_hi'] / scale, spec)}]"


def _pct(c: dict | None) -> str:
    if c is None or c["pct"] is None:
        return ""
    if c["ci_lo"] is None:
        return f"{c['pct']:+.1f} %"
    return f"{c['pct']:+.1f} % [{c['ci_lo']:+.1f}, {c['ci_hi']:+.1f}]"


def markdown(summary: dict, timing: dict) -> str:
    """The tables: each cell's N and mean [95 % CI], and the RL schedulers' changes."""
    lines = ["Each cell: the mean over N job sets [95 % bootstrap CI].", "",
             "| trace | network | scheduler | N | JCT mean (h) | JCT p90 (h) | on GPUs mean (h) "
             "| on GPUs p90 (h) | util | run slowdown | preemptions |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for trace, s in summary.items():
        for net, cells in s["spread"].items():
            for sched, sp in cells.items():
                lines.append(
                    f"| {trace} | {net} | {sched} | {sp['jct_mean_s']['n']} | "
                    f"{_ci(sp['jct_mean_s'], 3600)} | {_ci(sp['jct_p90_s'], 3600)} | "
                    f"{_ci(sp['held_mean_s'], 3600, '.3f')} | "
                    f"{_ci(sp['held_p90_s'], 3600, '.3f')} | "
                    f"{_ci(sp['gpu_utilisation'], 1, '.3f')} | "
                    f"{_ci(sp['run_slowdown_mean'], 1, '.3f')} | "
                    f"{_ci(sp['preemptions'], 1, '.0f')} |")
    lines += ["", "Change against each baseline, negative = lower: the ratio of the means "
              "over the same N sets [95 % CI, sets resampled in pairs].", "",
              "| trace | network | RL | vs | N | JCT mean | JCT p90 | on GPUs mean | "
              "on GPUs p90 | paper (mean / p90) |", "|---|---|---|---|---|---|---|---|---|---|"]
    for trace, s in summary.items():
        for net, per_rl in s["reductions"].items():
            for rl, red in per_rl.items():
                for label in BASELINES.values():
                    if f"jct_mean_vs_{label}" not in red:
                        continue
                    kind = rl.split("@")[0]
                    paper = (f"-{PAPER[kind, label, 'mean']} / -{PAPER[kind, label, 'p90']} %"
                             if trace == "normal" and (kind, label, "mean") in PAPER else "")
                    lines.append(
                        f"| {trace} | {net} | {rl} | {label} | "
                        f"{red[f'jct_mean_vs_{label}']['n']} | "
                        f"{_pct(red[f'jct_mean_vs_{label}'])} | "
                        f"{_pct(red[f'jct_p90_vs_{label}'])} | "
                        f"{_pct(red[f'on_gpus_mean_vs_{label}'])} | "
                        f"{_pct(red[f'on_gpus_p90_vs_{label}'])} | {paper} |")
    for t in timing.values():
        lines += ["", f"{t.get('policy', 'policy')}: inference {t['per_decision_ms']:.2f} ms "
                  f"per decision ({t['decisions']} decisions in one 256-job run)"]
        if "train_s" in t:
            picked = (f", checkpoint at {t['picked_timesteps']} steps"
                      if t.get("picked_timesteps") else "")
            lines.append(f"training: {t['train_s']:.0f} s for {t['episodes']} episodes "
                         f"({t['train_s'] / max(t['episodes'], 1):.1f} s per 256-job "
                         f"episode; the paper: under a minute){picked}")
    return "\n".join(lines)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--traces", default=",".join(deepshare.TRACES))
    p.add_argument("--sets", default="0-9", help="job sets: 0-9 or 0,3,5")
    p.add_argument("--networks", default="fair,mltcp")
    p.add_argument("--policy", action="append", default=None,
                   help="a policy .zip or a shipped policy's name (policies/); repeat to "
                        "compare several (default: the shipped one)")
    p.add_argument("--schedulers", default=",".join(SCHEDULERS),
                   help=f"which of {','.join(SCHEDULERS)} to run (default: all)")
    p.add_argument("--parallel", type=int, default=1)
    p.add_argument("--out", default="bench/results/rl-scheduler.json")
    a = p.parse_args()
    try:
        sets = list(validate.seeds(a.sets, "--sets"))   # a range counted, not expanded
    except SpecError as err:
        p.error(str(err))
    networks = a.networks.split(",")
    chosen = a.schedulers.split(",")
    unknown = [s for s in chosen if s not in SCHEDULERS]
    if unknown:
        p.error(f"--schedulers: unknown {unknown[0]!r}; use some of {','.join(SCHEDULERS)}")
    specs = {label: spec for label, spec in rl_specs(a.policy).items()
             if label.split("@")[0] in chosen}
    specs.update({s: s for s in OTHERS if s in chosen})
    label_of = {spec: label for label, spec in specs.items()}
    summary: dict = {}
    started = time.monotonic()
    for trace in a.traces.split(","):
        cfg = parse_config({"name": f"deepshare-{trace}", "schedulers": list(specs.values()),
                            "networks": networks, "seeds": sets,
                            "jobs": {"setup": f"deepshare-{trace}"}})
        rep = report.build(execute(cfg, a.parallel))
        by_cell = {(label_of[c["scheduler"]], c["network"]): c for c in rep["cells"]}
        per_set: dict = {net: {lab: {} for lab in specs} for net in networks}
        for run in rep["runs"]:
            per_set[run["network"]][label_of[run["scheduler"]]][run["seed"]] = run["metrics"]
        summary[trace] = {
            "sets": sets,
            "cells": {net: {s: {m: by_cell[s, net][m] for m in METRICS} for s in specs}
                      for net in networks},
            "spread": {net: {s: {m: by_cell[s, net]["spread"][m] for m in METRICS}
                             for s in specs} for net in networks},
            "per_set": {net: {s: {str(k): v["jct_mean_s"] for k, v in per_set[net][s].items()}
                              for s in specs} for net in networks},
            "reductions": {net: {rl: changes(per_set, net, rl, sets)
                                 for rl in specs if rl.split("@")[0] in RL_KINDS}
                           for net in networks},
            "vs_fair": rep["vs_fair"], "paper_figures": rep["paper_figures"]}
        print(f"{trace}: done ({time.monotonic() - started:.0f} s)", file=sys.stderr,
              flush=True)
    timing = {}
    for policy in a.policy or [None]:
        spec = "rl-base" if policy is None else f"rl-base@{policy}"
        timing[spec] = {**inference_time(spec, sets), **training(policy)}
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
