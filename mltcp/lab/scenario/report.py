"""Turn a run directory (traces/ written by mltcp.lab.scenario.runner) into the comparable report.

Writes, next to the traces (each file atomically):
    report.json       stable schema "mltcp.report/2" (below), with provenance and run set
    summary.md        the side-by-side table, every figure with N and its 95 % CI
    iterations.parquet  the tidy per-iteration table (.csv without pyarrow; tidy.py)
    timeline, overlap, cdf, cwnd (.png and .pdf): mltcp.lab.scenario.report_plots

report.json:
    schema, scenario (name), runset (runset.json's record, null without one),
    provenance (of the first trace), settings {threshold, k, confidence},
    dedicated_means {job: seconds} (null without a dedicated baseline),
    schemes {name: {
        scheme          the scheme as run (its fields, effective F, congestion_control),
                        rebuilt from the traces (mltcp.lab.scenario.spec.scheme_of)
        n, seeds        runs of the scheme and their seeds
        convergence {per_seed, converged_runs, median,
                     first_interleaved {per_seed, runs, median}}
        ratio_to_dedicated {per_seed, mean, spread}
        iteration_time {mean, p50, p99 (all iterations pooled), per_seed_mean,
                        per_seed_p99, mean_spread, p99_spread,
                        p99_after_convergence (pooled, converged runs only),
                        after_convergence_spread (per converged run),
                        p99_second_half, second_half_spread}
        overlap_last {mean, spread}, utilisation {mean, spread},
        drops, ecn_marks (null where a link has no sample to count from),
        retransmits_per_iteration, rtos (null where not recorded),
        speedup {baseline, n, mean, mean_ci, p99, p99_ci} | null,
        speedup_vs_standard {standard scheme: {n, mean, mean_ci, p99, p99_ci} | null} | null}},
    runs {"<scheme>/seed<N>": mltcp.lab.scenario.metrics.summarize(...), and on the hosts
          backend "start": the synchronized start as it went (mltcp.lab.scenario.hosts.start:
          each job's first-iteration skew and start-up, synchronized or not)}

A ``spread`` is :class:`mltcp.lab.common.stats.Spread`'s ``{n, mean, ci_lo, ci_hi, level}``
over the scheme's runs (one value per run); intervals are None with one run.
Speed-ups compare each MLTCP scheme with the standard scheme of the same congestion
control (else the first standard scheme), over the seeds both ran: the mean over seeds
of the baseline's per-run mean (or p99) iteration time over the scheme's, so > 1 means
faster, with a paired bootstrap interval.  ``speedup_vs_standard`` gives the same
ratios against every standard scheme of the scenario (e.g. MLTCP-Reno over standard
cubic).
"""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any

import numpy as np

from mltcp.core.errors import SpecError
from mltcp.lab.common import runset, stats
from mltcp.lab.common.atomic import write_json, write_text
from mltcp.lab.scenario import metrics, report_plots, tidy
from mltcp.lab.scenario.hosts.start import late_jobs, runs_not_synchronized
from mltcp.lab.scenario.spec import Scheme, scheme_of
from mltcp.lab.scenario.trace import Trace, load_trace

SCHEMA = "mltcp.report/2"
FIGURES = ("timeline", "overlap", "cdf")


def _load(out: Path) -> tuple[list[Trace], list[Trace], dict[str, Scheme]]:
    """The runs, the dedicated runs and each scheme as run, from ``out/traces``; a
    damaged trace, or traces of several scenarios or backends (no report can compare
    them), is a one-line error naming the file."""
    runs, dedicated, schemes = [], [], {}
    first: tuple[Path, Trace] | None = None
    # Hidden files are a killed writer's temporary names (mltcp.lab.common.atomic).
    for path in sorted(p for p in (out / "traces").glob("*.json") if not p.name.startswith(".")):
        trace = load_trace(path)
        first = first or (path, trace)
        for attr in ("scenario", "backend"):
            if getattr(trace, attr) != getattr(first[1], attr):
                raise SpecError(str(path), f"is a run of {attr} {getattr(trace, attr)!r}, "
                                f"{first[0].name} of {getattr(first[1], attr)!r}",
                                "keep one run set per directory (runset.json): move one out")
        scheme = scheme_of(trace.params, f"{path}: params")
        if trace.scheme != scheme.name:
            raise SpecError(f"{path}: scheme", f"{trace.scheme!r} but its params name "
                            f"{scheme.name!r}", "rerun it: the trace was edited")
        if trace.scheme != "dedicated" and schemes.setdefault(trace.scheme, scheme) != scheme:
            raise SpecError(str(path), f"ran scheme {trace.scheme!r} as {scheme.as_run()}, "
                            f"other traces as {schemes[trace.scheme].as_run()}",
                            "keep one run set per directory (runset.json): move one out")
        (dedicated if trace.scheme == "dedicated" else runs).append(trace)
    return runs, dedicated, schemes


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


def _times_from(trace: Trace, first: int) -> np.ndarray:
    """Every job's iteration times from iteration index ``first`` on."""
    parts = [np.array([r.end - r.start for r in job.iterations if r.index >= first])
             for job in trace.jobs]
    return np.concatenate(parts) if parts else np.array([])


def _p99(times: np.ndarray) -> float | None:
    return float(np.percentile(times, 99, method=metrics.PERCENTILE_METHOD)) if times.size \
        else None


def _mean(values: list[float]) -> float | None:
    return float(np.mean(values)) if values else None


def _median(values: list[int | None]) -> float | None:
    present = [v for v in values if v is not None]
    return statistics.median(present) if present else None


def _scheme_block(scheme: Scheme, traces: list[Trace], summaries: list[dict]) -> dict:
    conv = [s["overall"]["convergence_iteration"] for s in summaries]
    first = [s["overall"]["first_interleaved_iteration"] for s in summaries]
    ratios = [s["overall"]["mean_ratio_to_dedicated"] for s in summaries]
    per_run = [metrics.pooled_iteration_times([t]) for t in traces]
    per_mean = [float(x.mean()) if x.size else None for x in per_run]
    per_p99 = [_p99(x) for x in per_run]
    # The steady state: after each run's convergence (converged runs only), and, for
    # every run alike, the second half of its iterations.
    after = [_times_from(t, c) for t, c in zip(traces, conv, strict=True) if c is not None]
    halves = [_times_from(t, max(len(j.iterations) for j in t.jobs) // 2) for t in traces]
    last = [_mean([metrics.overlap_last(j["overlap"]) for j in s["jobs"].values()
                   if j["overlap"]]) for s in summaries]
    util = [_mean([u for u in s["overall"]["utilisation"].values() if u is not None])
            for s in summaries]
    times = np.concatenate(per_run) if per_run else np.array([])
    return {
        "scheme": {**scheme.to_dict(), **scheme.as_run()},
        "n": len(traces),
        "seeds": [t.seed for t in traces],
        "convergence": {"per_seed": conv, "converged_runs": sum(c is not None for c in conv),
                        "median": _median(conv),
                        "first_interleaved": {"per_seed": first,
                                              "runs": sum(c is not None for c in first),
                                              "median": _median(first)}},
        "ratio_to_dedicated": {"per_seed": ratios,
                               "mean": (statistics.fmean(ratios)
                                        if ratios and None not in ratios else None),
                               "spread": stats.bootstrap(ratios).to_dict()},
        "iteration_time": {
            "mean": float(times.mean()) if times.size else None,
            "p50": float(np.percentile(times, 50)) if times.size else None,
            "p99": _p99(times),
            "per_seed_mean": per_mean, "per_seed_p99": per_p99,
            "mean_spread": stats.bootstrap(per_mean).to_dict(),
            "p99_spread": stats.bootstrap(per_p99).to_dict(),
            "p99_after_convergence": _p99(np.concatenate(after)) if after else None,
            "after_convergence_spread": stats.bootstrap(_p99(x) for x in after).to_dict(),
            "p99_second_half": _p99(np.concatenate(halves)) if halves else None,
            "second_half_spread": stats.bootstrap(_p99(x) for x in halves).to_dict()},
        "overlap_last": {"mean": _mean([v for v in last if v is not None]),
                         "spread": stats.bootstrap(last).to_dict()},
        "utilisation": {"mean": _mean([v for v in util if v is not None]),
                        "spread": stats.bootstrap(util).to_dict()},
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


def _speedup(base: dict, block: dict) -> dict[str, Any] | None:
    """Baseline over scheme iteration time (> 1: the scheme is faster), mean and p99,
    over the seeds both ran, each with its paired bootstrap interval."""
    def by_seed(b: dict, key: str) -> dict[int, float]:
        return {s: v for s, v in zip(b["seeds"], b["iteration_time"][key], strict=True)
                if v is not None}

    out: dict[str, Any] = {}
    for key, name in (("per_seed_mean", "mean"), ("per_seed_p99", "p99")):
        mine, theirs = by_seed(block, key), by_seed(base, key)
        seeds = sorted(set(mine) & set(theirs))
        spread = stats.bootstrap_ratio([theirs[s] for s in seeds], [mine[s] for s in seeds])
        if spread.mean is None:
            return None
        out.update({"n": spread.n, name: spread.mean,
                    f"{name}_ci": None if spread.lo is None else [spread.lo, spread.hi]})
    return out


def _baseline(name: str, schemes: dict[str, Scheme]) -> str | None:
    """The standard scheme an MLTCP scheme is measured against: the same congestion
    control without MLTCP and without a centralized schedule (Cassini is a rival, not
    the baseline)."""
    mine = schemes[name]
    if not mine.mltcp:
        return None
    standard = [n for n, s in schemes.items() if not s.mltcp and s.schedule == "none"]
    same_cc = [n for n in standard if schemes[n].cc == mine.cc]
    return (same_cc or standard or [None])[0]


def build_report(out_dir: str | Path, threshold: float = metrics.DEFAULT_THRESHOLD,
                 k: int = metrics.DEFAULT_K) -> dict:
    out = Path(out_dir)
    runs, dedicated, schemes_run = _load(out)
    if not runs:
        raise FileNotFoundError(f"no traces in {out / 'traces'}: run `mltcp run` first")
    dedicated_means = _dedicated_means(dedicated) if dedicated else None
    by_scheme: dict[str, list[Trace]] = {}
    for t in runs:
        by_scheme.setdefault(t.scheme, []).append(t)
    summaries = {f"{t.scheme}/seed{t.seed}": metrics.summarize(t, dedicated_means, threshold, k)
                 for t in runs}
    for t in runs:      # the hosts backend's synchronized start, as it went
        if t.provenance.get("start"):
            summaries[f"{t.scheme}/seed{t.seed}"]["start"] = t.provenance["start"]
    schemes = {name: _scheme_block(schemes_run[name], ts,
                                   [summaries[f"{name}/seed{t.seed}"] for t in ts])
               for name, ts in by_scheme.items()}
    standard = [n for n in by_scheme if not schemes_run[n].mltcp]
    for name, block in schemes.items():
        base = _baseline(name, {n: schemes_run[n] for n in by_scheme})
        versus_base = _speedup(schemes[base], block) if base else None
        block["speedup"] = {"baseline": base, **versus_base} if versus_base else None
        block["speedup_vs_standard"] = (
            {std: _speedup(schemes[std], block) for std in standard}
            if schemes_run[name].mltcp else None)
    recorded = runset.read(out)
    report = {
        "schema": SCHEMA, "scenario": runs[0].scenario,
        "runset": recorded.to_dict() if recorded else None,
        "provenance": runs[0].provenance,
        "settings": {"threshold": threshold, "k": k, "confidence": stats.LEVEL,
                     "bootstrap_resamples": stats.RESAMPLES},
        "dedicated_means": dedicated_means,
        "schemes": schemes, "runs": summaries,
    }
    write_json(out / "report.json", report)
    table_path = tidy.write_iterations(out, runs + dedicated, summaries)
    figures = report_plots.draw(out, by_scheme, summaries, threshold)
    write_text(out / "summary.md", markdown(report, figures, table_path.name))
    return report


# --------------------------------------------------------------------------- tables


def _fmt(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f} s"


def _ci(spread: dict, spec: str, unit: str = "") -> str:
    """``"1.05 [1.02-1.08]"``; the bare value where there is no interval (N = 1)."""
    if spread["mean"] is None:
        return "-"
    value = f"{format(spread['mean'], spec)}{unit}"
    if spread["ci_lo"] is None:
        return value
    return f"{value} [{format(spread['ci_lo'], spec)}-{format(spread['ci_hi'], spec)}]"


def _speed(sp: dict | None) -> str:
    if not sp:
        return "-"
    parts = []
    for name in ("mean", "p99"):
        ci = sp[f"{name}_ci"]
        parts.append(f"{sp[name]:.2f}x" + (f" [{ci[0]:.2f}-{ci[1]:.2f}]" if ci else ""))
    return " / ".join(parts)


def table(report: dict) -> str:
    """One row per scheme: every figure over its runs with N and its 95 % interval; a
    figure over converged runs only says how many of the N."""
    head = ("| scheme | N | converged (held to the end) | first interleaved | "
            "conv. iteration (median) | iteration / dedicated | mean iteration | "
            "p99 iteration | p99 after conv. | p99 2nd half | overlap (last 5) | "
            "speed-up mean / p99 |")
    lines = [head, "|" + "---|" * 12]
    for name, s in report["schemes"].items():
        n, conv, it = s["n"], s["convergence"], s["iteration_time"]
        converged = conv["converged_runs"]
        only = f" ({stats.fraction(converged, n)} converged)" if converged else ""
        speed = _speed(s["speedup"])
        if s["speedup"]:
            speed += f" vs {s['speedup']['baseline']}"
        lines.append(
            f"| {name} | {n} | {converged}/{n} | {conv['first_interleaved']['runs']}/{n} | "
            f"{_fmt(conv['median'], 'g')}{only if conv['median'] is not None else ''} | "
            f"{_ci(s['ratio_to_dedicated']['spread'], '.2f')} | "
            f"{_ci(it['mean_spread'], '.3f', ' s')} | {_ci(it['p99_spread'], '.3f', ' s')} | "
            f"{_ci(it['after_convergence_spread'], '.3f', ' s')}"
            f"{f' ({stats.fraction(converged, n)})' if converged else ''} | "
            f"{_ci(it['second_half_spread'], '.3f', ' s')} | "
            f"{_ci(_percent(s['overlap_last']['spread']), '.0f', '%')} | {speed} |")
    return "\n".join(lines)


def _percent(spread: dict) -> dict:
    return {k: (v * 100 if k in ("mean", "ci_lo", "ci_hi") and v is not None else v)
            for k, v in spread.items()}


def seeds_table(report: dict) -> str:
    """Every scheme's result per seed: the convergence iteration (- if its jobs did not
    stay interleaved to the end), the first interleaved iteration, and the mean
    iteration time over the dedicated one.  A single seed can mislead (a standard
    scheme may interleave by chance); this shows the spread."""
    seeds = sorted({s for block in report["schemes"].values() for s in block["seeds"]})
    lines = ["| scheme | " + " | ".join(f"seed {s}" for s in seeds) + " | range of ratio |",
             "|---|" + "---|" * (len(seeds) + 1)]
    for name, block in report["schemes"].items():
        conv = block["convergence"]
        by_seed = dict(zip(block["seeds"], zip(conv["per_seed"],
                                               conv["first_interleaved"]["per_seed"],
                                               block["ratio_to_dedicated"]["per_seed"],
                                               strict=True), strict=True))
        cells = []
        for seed in seeds:
            held, first, ratio = by_seed.get(seed, (None, None, None))
            cells.append("" if seed not in by_seed else
                         f"{_fmt(held, 'g')} ({_fmt(first, 'g')}) / {_fmt(ratio, '.2f')}")
        ratios = [r for _, _, r in by_seed.values() if r is not None]
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
             "(mean / p99 iteration time, over the seeds both ran, 95 % CI):", "",
             "| scheme | " + " | ".join(f"vs {std}" for std in standard) + " |",
             "|---|" + "---|" * len(standard)]
    for name, versus in mltcp_schemes.items():
        cells = [_speed(versus.get(std)) for std in standard]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return [*lines, ""]


def _start_lines(report: dict) -> list[str]:
    """Whether the runs' jobs started together (hosts backend; nothing elsewhere): a run
    whose jobs missed their moment is named, never counted as synchronized."""
    starts = {name: run["start"] for name, run in report["runs"].items() if run.get("start")}
    if not starts:
        return []
    missed = {name: starts[name] for name in runs_not_synchronized(list(starts.items()))}
    worst = max(rec["max_skew_s"] for rec in starts.values() if rec["synchronized"]) \
        if len(missed) < len(starts) else None
    line = (f"Synchronized start: {len(starts) - len(missed)} of {len(starts)} runs had every "
            f"job's first iteration within {next(iter(starts.values()))['tolerance_s'] * 1000:g}"
            " ms of its moment")
    line += f" (largest skew {worst * 1000:.0f} ms)." if worst is not None else "."
    if missed:
        line += " NOT synchronized (their jobs did not start together): " + "; ".join(
            f"{name}: " + ", ".join(f"{job} {j['skew_s']:+.2f} s"
                                    for job, j in late_jobs(rec).items())
            for name, rec in missed.items()) + "."
    return [line, ""]


def _runset_line(report: dict) -> str:
    rs = report.get("runset")
    if not rs:
        return "Run set: not recorded (no runset.json)."
    last = rs["invocations"][-1] if rs["invocations"] else {}
    return (f"Run set: {rs['kind']} {rs['name']} (digest {rs['digest']}), backend "
            f"{rs['backend']}, seeds {', '.join(map(str, rs['seeds']))}; "
            f"{len(rs['invocations'])} invocation(s), last `{' '.join(last.get('argv', []))}`.")


def markdown(report: dict, figures: list[str], table_file: str) -> str:
    prov = report["provenance"]
    ded = report["dedicated_means"]
    ded_text = (", ".join(f"{j} {v:.3f} s" for j, v in ded.items()) if ded
                else "not measured (run with --dedicated)")
    settings = report["settings"]
    return "\n".join([
        f"# {report['scenario']}", "",
        f"N = runs (seeds) of each scheme; [lo-hi] = the {settings['confidence']:.0%} "
        f"bootstrap confidence interval of the mean over the runs "
        f"({settings['bootstrap_resamples']:,} resamples, seeded; none with N = 1). "
        f"Converged = overlap at or under {settings['threshold']:.0%} from that iteration "
        f"to the end of the run (isolated one-iteration spikes tolerated), starting with "
        f"{settings['k']} in a row; first interleaved = the first {settings['k']} in a row, "
        f"whether or not it held. Dedicated-link iteration times: {ded_text}.", "",
        table(report), "",
        "Per seed: convergence iteration (first interleaved) / iteration time over "
        "dedicated:", "",
        seeds_table(report), "",
        *_speedup_lines(report),
        *_start_lines(report),
        _runset_line(report), "",
        f"git {prov.get('git_sha', '?')[:12]}{' (dirty)' if prov.get('git_dirty') else ''}, "
        f"kernel {prov.get('kernel', '?')}, {prov.get('time_utc', '')}. Every iteration: "
        f"[{table_file}]({table_file}).", "",
        " ".join(f"![{name}]({name}.png)" for name in figures), ""])
