"""Turn a run directory (traces/ written by mltcp.lab.scenario.runner) into the comparable report.

Writes, next to the traces:
    report.json   stable schema "mltcp.report/1" (below), with provenance
    summary.md    the side-by-side table
    timeline.png  communication phases per job over time, one panel per scheme (first seed)
    overlap.png   overlap vs iteration per scheme (mean over jobs and seeds)
    cdf.png       iteration-time CDF per scheme (all jobs and seeds pooled)
    cwnd.png      congestion windows per connection over time, one panel per scheme
                  (first seed), where the traces record them (ns-3)

report.json:
    schema, scenario (dict), provenance (of the first trace), settings {threshold, k},
    dedicated_means {job: seconds} (null without a dedicated baseline),
    schemes {name: {seeds, convergence {per_seed, converged_runs, median},
                    ratio_to_dedicated {per_seed, mean}, iteration_time {mean, p50, p99},
                    overlap_last {mean}, utilisation {mean}, drops, ecn_marks (null where a
                    link has no sample to count from),
                    retransmits_per_iteration, rtos (null where not recorded),
                    speedup {baseline, mean, p99} | null,
                    speedup_vs_standard {standard scheme: {mean, p99} | null} | null}},
    runs {"<scheme>/seed<N>": mltcp.lab.scenario.metrics.summarize(...)}
Speed-ups compare each MLTCP scheme with the standard scheme of the same congestion
control (else the first standard scheme): baseline mean (or p99) iteration time over
the scheme's, so > 1 means faster.  ``speedup_vs_standard`` gives the same ratios
against every standard scheme of the scenario (e.g. MLTCP-Reno over standard cubic).
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import numpy as np

from mltcp.lab.scenario import metrics
from mltcp.lab.scenario.trace import Trace, load_trace

SCHEMA = "mltcp.report/1"


def _load(out: Path) -> tuple[list[Trace], list[Trace]]:
    runs, dedicated = [], []
    for path in sorted((out / "traces").glob("*.json")):
        trace = load_trace(path)
        (dedicated if trace.scheme == "dedicated" else runs).append(trace)
    return runs, dedicated


def _dedicated_means(traces: list[Trace]) -> dict[str, float]:
    """Each job's dedicated mean iteration time, averaged over the seeds it was run with."""
    per_seed: dict[int, list[Trace]] = {}
    for t in traces:
        per_seed.setdefault(t.seed, []).append(t)
    means: dict[str, list[float]] = {}
    for group in per_seed.values():
        for job, mean in metrics.dedicated_means(group).items():
            means.setdefault(job, []).append(mean)
    return {job: statistics.fmean(values) for job, values in means.items()}


def _pooled_times(traces: list[Trace]) -> np.ndarray:
    parts = [job.iteration_times() for t in traces for job in t.jobs]
    return np.concatenate(parts) if parts else np.array([])


def _times_from(trace: Trace, first: int) -> np.ndarray:
    """Every job's iteration times from iteration index ``first`` on."""
    parts = [np.array([r.end - r.start for r in job.iterations if r.index >= first])
             for job in trace.jobs]
    return np.concatenate(parts) if parts else np.array([])


def _p99(times: list[np.ndarray]) -> float | None:
    pooled = np.concatenate(times) if times else np.array([])
    return float(np.percentile(pooled, 99)) if pooled.size else None


def _scheme_block(traces: list[Trace], summaries: list[dict]) -> dict:
    conv = [s["overall"]["convergence_iteration"] for s in summaries]
    converged = [c for c in conv if c is not None]
    ratios = [s["overall"]["mean_ratio_to_dedicated"] for s in summaries]
    times = _pooled_times(traces)
    last = [metrics.overlap_last(j["overlap"]) for s in summaries for j in s["jobs"].values()
            if j["overlap"]]
    util = [u for s in summaries for u in s["overall"]["utilisation"].values() if u is not None]
    # The steady state: after each run's convergence (converged runs only), and, for
    # every run alike, the second half of its iterations.
    after = [_times_from(t, c) for t, c in zip(traces, conv, strict=True) if c is not None]
    halves = [_times_from(t, max(len(j.iterations) for j in t.jobs) // 2) for t in traces]
    return {
        "seeds": [t.seed for t in traces],
        "convergence": {"per_seed": conv, "converged_runs": len(converged),
                        "median": statistics.median(converged) if converged else None},
        "ratio_to_dedicated": {"per_seed": ratios,
                               "mean": (statistics.fmean(ratios)
                                        if ratios and None not in ratios else None)},
        "iteration_time": {"mean": float(times.mean()) if times.size else None,
                           "p50": float(np.percentile(times, 50)) if times.size else None,
                           "p99": _p99([times]),
                           "p99_after_convergence": _p99(after),
                           "p99_second_half": _p99(halves)},
        "overlap_last": {"mean": float(np.mean(last)) if last else None},
        "utilisation": {"mean": float(np.mean(util)) if util else None},
        "drops": _counter_total(summaries, "drops"),
        "ecn_marks": _counter_total(summaries, "ecn_marks"),
        **_losses(summaries),
    }


def _counter_total(summaries: list[dict], counter: str) -> int | None:
    """``counter`` summed over every link of every run; None when a link has no sample
    to count from (a run shorter than one sample interval): a total would be a guess."""
    counts = [c for s in summaries for c in s["overall"][counter].values()]
    return None if None in counts else sum(counts)


def _losses(summaries: list[dict]) -> dict[str, float | int | None]:
    """Retransmitted segments per job iteration and RTOs in all, over the scheme's runs."""
    jobs = [j for s in summaries for j in s["jobs"].values()]
    if not jobs or any(j.get("retransmits") is None for j in jobs):
        return {"retransmits_per_iteration": None, "rtos": None}
    iterations = sum(j["iterations"] for j in jobs)
    return {"retransmits_per_iteration": (sum(j["retransmits"] for j in jobs) / iterations
                                          if iterations else None),
            "rtos": sum(j["rtos"] for j in jobs)}


def _speedup(base: dict, block: dict) -> dict[str, float] | None:
    """Baseline over scheme iteration time, mean and p99 (> 1: the scheme is faster)."""
    b, m = base["iteration_time"], block["iteration_time"]
    if not (b["mean"] and m["mean"] and b["p99"] and m["p99"]):
        return None
    return {"mean": b["mean"] / m["mean"], "p99": b["p99"] / m["p99"]}


def _baseline(name: str, params: dict[str, dict]) -> str | None:
    """The standard scheme an MLTCP scheme is measured against: the same congestion
    control without MLTCP and without a centralized schedule (Cassini is a rival, not
    the baseline)."""
    mine = params[name]
    if not mine.get("mltcp"):
        return None
    standard = [n for n, p in params.items()
                if not p.get("mltcp") and p.get("schedule", "none") == "none"]
    same_cc = [n for n in standard if params[n].get("cc") == mine.get("cc")]
    return (same_cc or standard or [None])[0]


def build_report(out_dir: str | Path, threshold: float = metrics.DEFAULT_THRESHOLD,
                 k: int = metrics.DEFAULT_K) -> dict:
    out = Path(out_dir)
    runs, dedicated = _load(out)
    if not runs:
        raise FileNotFoundError(f"no traces in {out / 'traces'}: run `mltcp run` first")
    dedicated_means = _dedicated_means(dedicated) if dedicated else None
    by_scheme: dict[str, list[Trace]] = {}
    for t in runs:
        by_scheme.setdefault(t.scheme, []).append(t)
    summaries = {f"{t.scheme}/seed{t.seed}": metrics.summarize(t, dedicated_means, threshold, k)
                 for t in runs}
    params = {name: ts[0].params for name, ts in by_scheme.items()}
    schemes = {name: _scheme_block(ts, [summaries[f"{name}/seed{t.seed}"] for t in ts])
               for name, ts in by_scheme.items()}
    standard = [n for n, p in params.items() if not p.get("mltcp")]
    for name, block in schemes.items():
        base = _baseline(name, params)
        versus_base = _speedup(schemes[base], block) if base else None
        block["speedup"] = {"baseline": base, **versus_base} if versus_base else None
        block["speedup_vs_standard"] = (
            {std: _speedup(schemes[std], block) for std in standard}
            if params[name].get("mltcp") else None)
    report = {
        "schema": SCHEMA, "scenario": runs[0].scenario, "provenance": runs[0].provenance,
        "settings": {"threshold": threshold, "k": k}, "dedicated_means": dedicated_means,
        "schemes": schemes, "runs": summaries,
    }
    (out / "report.json").write_text(json.dumps(report, indent=2))
    _plots(out, by_scheme, summaries)
    (out / "summary.md").write_text(markdown(report, cwnd=(out / "cwnd.png").exists()))
    return report


def _fmt(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f} s"


def table(report: dict) -> str:
    head = ("| scheme | converged | conv. iteration (median) | iteration / dedicated | "
            "mean iteration | p99 iteration | p99 after conv. | p99 2nd half | "
            "overlap (last 5) | speed-up mean / p99 |")
    lines = [head, "|" + "---|" * 10]
    for name, s in report["schemes"].items():
        sp = s["speedup"]
        speed = f"{sp['mean']:.2f}x / {sp['p99']:.2f}x vs {sp['baseline']}" if sp else "-"
        lines.append(
            f"| {name} | {s['convergence']['converged_runs']}/{len(s['seeds'])} | "
            f"{_fmt(s['convergence']['median'], 'g')} | "
            f"{_fmt(s['ratio_to_dedicated']['mean'], '.2f')} | "
            f"{_seconds(s['iteration_time']['mean'])} | "
            f"{_seconds(s['iteration_time']['p99'])} | "
            f"{_seconds(s['iteration_time'].get('p99_after_convergence'))} | "
            f"{_seconds(s['iteration_time'].get('p99_second_half'))} | "
            f"{_fmt(s['overlap_last']['mean'], '.0%')} | {speed} |")
    return "\n".join(lines)


def seeds_table(report: dict) -> str:
    """Every scheme's result per seed: the convergence iteration (- if its jobs never
    interleaved) and the mean iteration time over the dedicated one.  A single seed can
    mislead (a standard scheme may interleave by chance); this shows the spread."""
    seeds = sorted({s for block in report["schemes"].values() for s in block["seeds"]})
    lines = ["| scheme | " + " | ".join(f"seed {s}" for s in seeds) + " | spread of ratio |",
             "|---|" + "---|" * (len(seeds) + 1)]
    for name, block in report["schemes"].items():
        by_seed = dict(zip(block["seeds"], zip(block["convergence"]["per_seed"],
                                               block["ratio_to_dedicated"]["per_seed"],
                                               strict=True), strict=True))
        cells = []
        for seed in seeds:
            conv, ratio = by_seed.get(seed, (None, None))
            cells.append("" if seed not in by_seed else
                         f"{_fmt(conv, 'g')} / {_fmt(ratio, '.2f')}")
        ratios = [r for _, r in by_seed.values() if r is not None]
        spread = f"{min(ratios):.2f}-{max(ratios):.2f}" if ratios else "-"
        lines.append(f"| {name} | " + " | ".join(cells) + f" | {spread} |")
    return "\n".join(lines)


def _speedup_lines(report: dict) -> list[str]:
    """Each MLTCP scheme against every standard scheme (mean / p99), as a small table."""
    mltcp_schemes = {n: s["speedup_vs_standard"] for n, s in report["schemes"].items()
                     if s.get("speedup_vs_standard")}
    if not mltcp_schemes:
        return []
    standard = sorted({std for v in mltcp_schemes.values() for std in v})
    lines = ["Speed-up over each non-MLTCP scheme, standard or centrally scheduled "
             "(mean / p99 iteration time):", "",
             "| scheme | " + " | ".join(f"vs {std}" for std in standard) + " |",
             "|---|" + "---|" * len(standard)]
    for name, versus in mltcp_schemes.items():
        cells = [f"{versus[std]['mean']:.2f}x / {versus[std]['p99']:.2f}x" if versus.get(std)
                 else "-" for std in standard]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return [*lines, ""]


def markdown(report: dict, cwnd: bool = False) -> str:
    prov = report["provenance"]
    ded = report["dedicated_means"]
    ded_text = (", ".join(f"{j} {v:.3f} s" for j, v in ded.items()) if ded
                else "not measured (run with --dedicated)")
    return "\n".join([
        f"# {report['scenario']}", "",
        f"Converged = overlap below {report['settings']['threshold']:.0%} for "
        f"{report['settings']['k']} consecutive iterations. Dedicated-link iteration "
        f"times: {ded_text}.", "",
        table(report), "",
        "Per seed: convergence iteration / iteration time over dedicated:", "",
        seeds_table(report), "",
        *_speedup_lines(report),
        f"git {prov.get('git_sha', '?')[:12]}{' (dirty)' if prov.get('git_dirty') else ''}, "
        f"kernel {prov.get('kernel', '?')}, {prov.get('time_utc', '')}", "",
        "![timeline](timeline.png) ![overlap](overlap.png) ![cdf](cdf.png)"
        + (" ![cwnd](cwnd.png)" if cwnd else ""), ""])


def _plots(out: Path, by_scheme: dict[str, list[Trace]], summaries: dict[str, dict]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(by_scheme)
    fig, axes = plt.subplots(len(names), 1, figsize=(10, 1.2 + 1.1 * len(names)),
                             squeeze=False, sharex=True)
    for ax, name in zip(axes[:, 0], names, strict=True):
        trace = sorted(by_scheme[name], key=lambda t: t.seed)[0]
        for row, job in enumerate(trace.jobs):
            spans = [(s, e - s) for s, e in job.comm_intervals()]
            ax.broken_barh(spans, (row - 0.4, 0.8), color=f"C{row}")
        ax.set_yticks(range(len(trace.jobs)), [j.name for j in trace.jobs])
        ax.set_title(f"{name} (seed {trace.seed}): communication phases", fontsize=9)
    axes[-1, 0].set_xlabel("time (s)")
    fig.tight_layout()
    fig.savefig(out / "timeline.png", dpi=110)
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(7, 3.5))
    for name in names:
        curves = [j["overlap"] for key, s in summaries.items() if key.startswith(f"{name}/")
                  for j in s["jobs"].values()]
        n = min(len(c) for c in curves)
        ax.plot(range(n), np.mean([c[:n] for c in curves], axis=0), label=name)
    ax.axhline(metrics.DEFAULT_THRESHOLD, color="k", lw=0.7, ls="--")
    _finish(fig, ax, "iteration", "overlap (mean over jobs, seeds)", out / "overlap.png")

    fig, ax = plt.subplots(figsize=(7, 3.5))
    for name in names:
        times = np.sort(_pooled_times(by_scheme[name]))
        if times.size:
            ax.plot(times, np.arange(1, times.size + 1) / times.size, label=name)
    _finish(fig, ax, "iteration time (s)", "CDF", out / "cdf.png")
    _cwnd_plot(out, by_scheme)


def _cwnd_plot(out: Path, by_scheme: dict[str, list[Trace]]) -> None:
    """What each connection's congestion control did: where MLTCP's F shows directly."""
    import matplotlib.pyplot as plt

    firsts = {name: min(traces, key=lambda t: t.seed) for name, traces in by_scheme.items()}
    firsts = {name: t for name, t in firsts.items() if t.flows}
    if not firsts:
        (out / "cwnd.png").unlink(missing_ok=True)     # not a stale one from an earlier run
        return
    fig, axes = plt.subplots(len(firsts), 1, figsize=(10, 1.4 + 1.6 * len(firsts)),
                             squeeze=False, sharex=True)
    for ax, (name, trace) in zip(axes[:, 0], firsts.items(), strict=True):
        jobs = [j.name for j in trace.jobs]
        for flow in trace.flows:
            ax.plot([s.t for s in flow.samples], [s.cwnd_bytes / 1e3 for s in flow.samples],
                    lw=0.7, color=f"C{jobs.index(flow.job)}", label=flow.id)
        ax.set_ylabel("cwnd (KB)")
        ax.set_title(f"{name} (seed {trace.seed}): congestion windows", fontsize=9)
        ax.legend(fontsize=6, ncol=4, loc="upper right")
    axes[-1, 0].set_xlabel("time (s)")
    fig.tight_layout()
    fig.savefig(out / "cwnd.png", dpi=110)
    plt.close(fig)


def _finish(fig, ax, xlabel: str, ylabel: str, path: Path) -> None:  # type: ignore[no-untyped-def]
    import matplotlib.pyplot as plt

    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
