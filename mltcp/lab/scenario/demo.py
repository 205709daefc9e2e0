"""`mltcp demo`: MLTCP against the standard congestion controls on real kernel TCP.

The default demo (:func:`run_compare_demo`) is `mltcp compare` on the embedded
default scenario (compatible-pair) over several seeds: each job alone on a dedicated
link, then every compared scheme per seed, then the side-by-side table with the
per-seed spread, and a plain statement of what differs between seeds.  The report,
traces and plots land in the output directory.

`mltcp demo --live` (:func:`run_demo`) is the close-up of one MLTCP run on the same
stack as `mltcp run`: the default scenario's plan for one MLTCP scheme on the netns
backend (fabric, ECN marker, MLTCP module, one MLTCP job per worker, the traffic
jobs).  While it runs it prints, per job worker and iteration, how far the worker got
(bytes_ratio), the F it reached and its mean cwnd, read from the datapath's maps; at
the end the iteration times and how much the two jobs' communication overlapped,
from the run's trace.
"""

from __future__ import annotations

import dataclasses
import json
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

from mltcp.core import validate
from mltcp.core.errors import CapabilityError, SpecError
from mltcp.host import datapath

DEFAULT_SCENARIO = "compatible-pair"
DEFAULT_SEEDS = (0, 1, 2, 3)
# The schemes the default demo compares: the standard algorithm and MLTCP on it.  The
# scenario's other schemes (reno, its MLTCP, Cassini) run with `mltcp compare`.
DEMO_SCHEMES = ("cubic", "mltcp-cubic", "mltcp-reno")
MODULES = ("reno", "cubic", "dctcp")


def _require_kernel() -> None:
    from mltcp.lab.scenario.emulation.netns import require_netns

    try:
        datapath.require_bpf()
        require_netns()
    except CapabilityError as exc:
        raise CapabilityError(f"the demo runs on the real kernel and {exc}") from exc


def run_compare_demo(out_dir: str, seeds: tuple[int, ...] = DEFAULT_SEEDS,
                     scenario: str = DEFAULT_SCENARIO, out: TextIO = sys.stdout,
                     force: bool = False) -> int:
    """Each job alone, then the demo's schemes for every seed; the table and the spread."""
    _require_kernel()
    from mltcp.lab.scenario.report import seeds_table, table
    from mltcp.lab.scenario.runner import run_scenario

    print(f"mltcp demo: {scenario} on real kernel TCP, schemes {', '.join(DEMO_SCHEMES)} "
          f"over seeds {', '.join(map(str, seeds))}, after each job alone (the baseline); "
          f"report, traces and plots go to {out_dir}/", file=out, flush=True)
    report = run_scenario(scenario, out_dir=out_dir, schemes=list(DEMO_SCHEMES),
                          seeds=list(seeds), dedicated=True, dedicated_seeds=seeds[:1],
                          force=force)
    print(table(report), file=out)
    print("\nPer seed (convergence iteration, or - if the jobs did not stay interleaved "
          "to the end (first interleaved iteration); mean iteration time / dedicated):",
          file=out)
    print(seeds_table(report), file=out)
    print("\n" + what_varies(report), file=out)
    return 0


def what_varies(report: dict) -> str:
    """What differs between the seeds, and what each scheme did across them (from the
    report: a sentence must not claim what this run did not show)."""
    lines = ["What varies between seeds: only each job's start, by a seeded tie-break of "
             "under 1 ms, and the host's own timing noise (real kernel TCP on a shared "
             "machine). That is enough for the jobs to drift apart at a different iteration, "
             "or not at all, from run to run, so judge a scheme by all seeds (more: --seeds)."]
    for name, block in report["schemes"].items():
        conv = [c for c in block["convergence"]["per_seed"] if c is not None]
        first = [c for c in block["convergence"]["first_interleaved"]["per_seed"]
                 if c is not None]
        ratio = block["ratio_to_dedicated"]["spread"]
        n = len(block["seeds"])
        when = f" (at iterations {min(conv)}-{max(conv)})" if conv else ""
        early = (f", first interleaved in {len(first)}/{n}" if len(first) != len(conv)
                 else "")
        spread = (f", {ratio['mean']:.2f}x dedicated (95% CI {ratio['ci_lo']:.2f}-"
                  f"{ratio['ci_hi']:.2f})" if ratio["ci_lo"] is not None else
                  f", {ratio['mean']:.2f}x dedicated" if ratio["mean"] is not None else "")
        lines.append(f"  {name}: interleaved to the end in {len(conv)}/{n} seeds"
                     f"{when}{early}{spread}")
    return "\n".join(lines)


@dataclass
class IterationView:
    """What the datapath showed of one worker's iteration (sampled)."""

    job: str
    iteration: int
    max_ratio: float = 0.0
    max_f: float = 0.0
    cwnds: list[int] = field(default_factory=list)


def run_demo(cc: str = "cubic", iterations: int = 12, rate_mbit: float = 1000,
             json_out: str | None = None, seed: int = 0, out: TextIO = sys.stdout) -> int:
    """One MLTCP run of the default scenario on the netns backend, watched live."""
    from mltcp.host import telemetry
    from mltcp.lab.scenario import schedule
    from mltcp.lab.scenario.emulation.testbed import run_plan
    from mltcp.lab.scenario.plan import resolve
    from mltcp.lab.scenario.spec import load_scenario, parse_scenario

    if cc not in MODULES:
        raise SpecError("cc", f"unknown congestion control {cc!r}",
                        f"use one of: {', '.join(MODULES)}")
    validate.integer(iterations, "iterations", 2, 1000, "12")
    validate.number(rate_mbit, "rate_mbit", 1, 40_000, "1000")
    _require_kernel()
    sc = load_scenario(DEFAULT_SCENARIO)
    mltcp = next(s for s in sc.schemes if s.mltcp and s.cc in ("cubic", "reno"))
    scheme = dataclasses.replace(mltcp, name=f"mltcp-{cc}", cc=cc)
    data = sc.to_dict()
    data["topology"]["bottleneck_mbit"] = rate_mbit
    for job in data["jobs"]:
        job["iterations"] = iterations
    data["schemes"] = [scheme.to_dict()]
    live = parse_scenario(data, "demo --live")
    [plan] = schedule.apply([resolve(live, live.schemes[0], seed)])
    job = plan.jobs[0].spec
    agg = live.schemes[0].aggressiveness
    print(f"{len(plan.jobs)} jobs of {job.workers} workers, {job.comm_bytes_per_worker() / 1e6:g} "
          f"MB per worker per iteration after {job.compute_ms:g} ms of compute, ring "
          f"AllReduce over a {rate_mbit:g} Mbit/s bottleneck, mltcp_{cc} with F = "
          f"{agg.intercept:g} + {agg.slope:g} x bytes_ratio (one MLTCP job per worker)",
          file=out)
    print(f"{'worker':<10}{'iter':>5}{'ratio':>8}{'F max':>8}{'cwnd':>8}", file=out)
    views: dict[str, IterationView] = {}
    samples: list[dict] = []

    def watch() -> None:
        for st in telemetry.collect():
            name = st.name.removeprefix("tb-").replace("-w", "/w")
            samples.append({"t": time.monotonic(), "worker": name, "iteration": st.iteration,
                            "bytes_ratio": st.bytes_ratio, "f": st.f,
                            "cwnd": [f.cwnd for f in st.flows]})
            view = views.get(name)
            if view is None or view.iteration != st.iteration:
                if view is not None and view.cwnds:
                    _print_view(view, out)
                view = views[name] = IterationView(name, st.iteration)
            view.max_ratio = max(view.max_ratio, st.bytes_ratio)
            view.max_f = max(view.max_f, st.f)
            view.cwnds += [f.cwnd for f in st.flows]

    trace = run_plan(plan, watch=watch)
    for view in views.values():
        if view.cwnds and view.max_ratio > 0:     # not the empty iteration after the last
            _print_view(view, out)
    _summarise(trace, out)
    if json_out:
        Path(json_out).write_text(json.dumps({"trace": trace.to_dict(), "samples": samples},
                                             indent=1))
    return 0


def _print_view(view: IterationView, out: TextIO) -> None:
    print(f"{view.job:<10}{view.iteration:>5}{view.max_ratio:>8.2f}{view.max_f:>8.2f}"
          f"{statistics.mean(view.cwnds):>8.0f}", file=out)


def _summarise(trace, out: TextIO) -> None:  # type: ignore[no-untyped-def]
    """Iteration times and overlap, by the project's one definition (mltcp.lab.scenario.metrics)."""
    from mltcp.lab.scenario import metrics

    a, b = trace.jobs[:2]
    print(f"\niteration  time(job {a.name})  time(job {b.name})  overlap({a.name} with "
          f"{b.name})", file=out)
    for ia, ib, ov in zip(a.iterations, b.iterations, metrics.overlap(trace, a.name),
                          strict=False):
        print(f"{ia.index:>9}  {ia.end - ia.start:>10.3f}s  {ib.end - ib.start:>10.3f}s"
              f"  {ov:>16.0%}", file=out)
