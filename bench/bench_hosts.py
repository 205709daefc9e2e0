"""Real PyTorch DDP training under MLTCP: the hosts backend on namespace hosts.

A dumbbell fabric (four hosts, a 1 Gbit/s drop-tail bottleneck: no ECN marks, since the
markers of the netns backend are not attached here) whose hosts each run
Debian's sshd; the hosts backend reaches them over real SSH exactly as it reaches remote
machines, and runs two DDP jobs (gloo, two ranks each, one rank per host) through the
bottleneck: the bundled workload's transformer, sized so that a CPU host plays a GPU
server's compute/communication ratio (a compute pad stands in for the GPU: said in
every worker's output).  Three parts, each its own `mltcp compare` output directory:

* ``compatible``: communication under half of the iteration, so the two jobs can
  interleave; every scheme x seed plus each job alone (dedicated).
* ``tight``: the same with communication at about half of the iteration: the jobs fit
  side by side only just, so only an exact interleaving runs them at dedicated speed.
* ``incompatible``: communication over half of the iteration (they cannot interleave):
  MLTCP must do no harm.
* ``counting``: how many iterations the datapath counts against the hook's, per
  workload (the transformer and a ResNet), with the idle-gap rule alone (job b) and
  with the hook's end-of-iteration signal (job a), in the same runs.

Writes ``OUT/<part>/`` (traces, report.json, summary.md, plots) and ``OUT/hosts.json``
(every figure of the note) with ``OUT/counting.png`` (and ``.pdf``).  Needs root, the netns fabric,
OpenSSH and mltcp[torch] (``bash scripts/setup.sh``); nothing else may use the
datapath or the namespaces meanwhile.

    python bench/bench_hosts.py --out bench/results/hosts            # ~45 min
    python bench/bench_hosts.py --parts counting --iterations 40     # one part
"""

from __future__ import annotations

import argparse
import contextlib
import json
import signal
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

from mltcp.core import signals
from mltcp.host import datapath
from mltcp.lab.scenario.emulation import fabric, sshd, testbed
from mltcp.lab.scenario.plan import idle_gap_ms
from mltcp.lab.scenario.runner import run_scenario
from mltcp.lab.scenario.spec import load_scenario
from mltcp.lab.scenario.trace import load_trace

PARTS = ("compatible", "tight", "incompatible", "counting", "contrast")
SCHEMES = ("cubic", "reno", "mltcp-cubic", "mltcp-reno")
# A wide vocabulary and a short sequence: ~21 MB of gradients per iteration (170 ms at
# 1 Gbit/s) for little CPU compute; the pad plays the GPU.
TRANSFORMER = ('model = "transformer", batch = 2, d_model = 256, layers = 2, heads = 4, '
               'seq = 16, vocab = 8000')
RESNET = 'model = "resnet18", batch = 2, image_size = 32'
PADS_MS = {"compatible": 260, "tight": 170, "incompatible": 60, "contrast": 330}
BOTTLENECK_MBIT = {"contrast": 200}     # the others: 1 Gbit/s
QUEUE_PACKETS = {"contrast": 32}          # the others: 400 packets (drop-tail, no marks)
# The contrast: where fair sharing keeps two compatible jobs in lock-step on this
# emulation (issue 23): a quarter of the gradients (5.6 MB, ~225 ms at 200 Mbit/s), so
# the CPUs do a fifth of the copying per second and the compute pad (a sleep) dominates.
SMALL_TRANSFORMER = ('model = "transformer", batch = 2, d_model = 128, layers = 2, heads = 4, '
                     'seq = 16, vocab = 4000')
MODELS = {"contrast": SMALL_TRANSFORMER}
# Counting: (label, model, compute pad); the idle gap is a quarter of the compute, within
# 5..50 ms (mltcp.lab.scenario.plan.idle_gap_ms), so the short pad tests a 15 ms gap.
COUNTING = (("transformer", TRANSFORMER, 200), ("transformer-short", TRANSFORMER, 40),
            ("resnet18", RESNET, 200))


DEFAULT_SLOPE = 4.0


def scenario_text(part: str, iterations: int, seeds: list[int], model: str,
                  signal_a: bool, pad: float | None = None,
                  bottleneck_mbit: int | None = None, queue_packets: int | None = None,
                  slope: float = DEFAULT_SLOPE, ecn_bytes: int | None = None) -> str:
    pad = PADS_MS[part] if pad is None else pad
    rate = bottleneck_mbit or BOTTLENECK_MBIT.get(part, 1000)
    queue = queue_packets or QUEUE_PACKETS.get(part, 400)
    jobs = []
    for name, signals_end in (("a", signal_a), ("b", False)):
        flag = ", signal = true" if signals_end else ""
        jobs.append(f"""
[[jobs]]
name = "{name}"
compute_ms = {pad + 20}
bytes_per_iteration = "21MB"
workers = 2
iterations = {iterations}
workload = {{{model}, gpu_time_ms = {pad}{flag}}}
""")
    schemes = "".join(f"""
[[schemes]]
name = "{s}"
cc = "{s.removeprefix('mltcp-')}"
mltcp = {str(s.startswith('mltcp')).lower()}
{f'slope = {slope}' if s.startswith('mltcp') else ''}
""" for s in SCHEMES)
    kind = f"ECN-marking (above {ecn_bytes} B)" if ecn_bytes else "drop-tail"
    return f"""
name = "ddp-{part}"
description = "Two DDP jobs (gloo, 2 ranks each), {rate} Mbit/s {kind} bottleneck: {part}."
seeds = {seeds}

[topology]
kind = "dumbbell"
bottleneck_mbit = {rate}
host_link_mbit = 10000
queue_packets = {queue}
{f"ecn_threshold_bytes = {ecn_bytes}" if ecn_bytes else ""}
hosts = 4
{''.join(jobs)}{schemes}"""


@contextlib.contextmanager
def ecn_markers(net: fabric.Fabric, k_bytes: int | None) -> Iterator[testbed.Markers]:
    """The bottleneck's ECN markers while the bench runs (none without ``k_bytes``): the
    hosts bench builds its own fabric, so it attaches what the netns backend would."""
    markers = testbed.attach_markers(net, k_bytes) if k_bytes else {}
    try:
        yield markers
    finally:
        if markers:
            counts = testbed.marker_counts(markers)
            print(f"ECN: {sum(counts.values())} CE marks "
                  f"({', '.join(f'{n}/{d} {c}' for (n, d), c in counts.items())})",
                  file=sys.stderr, flush=True)
            datapath.forget_markers(list(markers.values()))


def counting_rows(out: Path, workload: str, gap_ms: float) -> list[dict]:
    """Per MLTCP run and job: the hook's iterations against the datapath's count."""
    rows = []
    for path in sorted((out / "traces").glob("mltcp-*.json")):
        trace = load_trace(path)
        counted = trace.provenance.get("datapath", {})
        for job in trace.jobs:
            c = counted.get(job.name)
            if not c:
                continue
            hook_its = len(job.iterations)
            # The datapath also counts the traffic before the first iteration (DDP's
            # broadcast of the initial parameters, gloo's connection set-up) as one.
            extra = c["iteration"] - hook_its - 1
            rows.append({
                "workload": workload, "run": path.stem, "job": job.name,
                "rule": "signal" if c["signals"] else "gap",
                "idle_gap_ms": gap_ms,
                "hook_iterations": hook_its, "datapath_iterations": c["iteration"],
                "miscounted": extra,
                # gap events include silences with nothing sent since the last boundary
                "gap_events": c["gaps"], "signal_boundaries": c["signals"],
                "budget_wraps": c["wraps"], "budget": c["budget"],
                "bytes_per_iteration": c["total_bytes"] / (hook_its + 1),
                "stale_fallbacks": c["stale_fallbacks"],
                # the datapath keeps its last 8 boundaries' byte counts
                "last_boundaries_bytes": c["history"],
                "short_boundaries_of_last": sum(1 for b in c["history"] if b < c["budget"] / 2),
            })
    return rows


def summary(report: dict) -> dict:
    """What the note shows per scheme."""
    out = {}
    for name, s in report["schemes"].items():
        it = s["iteration_time"]
        sp = s.get("speedup") or {}
        out[name] = {
            "converged_runs": s["convergence"]["converged_runs"], "runs": len(s["seeds"]),
            "convergence_iteration": s["convergence"]["per_seed"],
            "convergence_median": s["convergence"]["median"],
            "mean_s": it["mean"], "p99_s": it["p99"],
            "p99_after_convergence_s": it.get("p99_after_convergence"),
            "p99_second_half_s": it.get("p99_second_half"),
            "ratio_to_dedicated": s["ratio_to_dedicated"]["mean"],
            "ratio_per_seed": s["ratio_to_dedicated"]["per_seed"],
            "speedup_mean": sp.get("mean"), "speedup_p99": sp.get("p99"),
            "speedup_vs": sp.get("baseline"),
        }
    return out


def plot_counting(rows: list[dict], path: Path) -> list[Path]:
    """Per workload and rule: iterations miscounted, and how many of the datapath's last
    boundaries cut an iteration short (a tail counted apart).  The two rules in their
    own colour and hatch; PNG and PDF."""
    from matplotlib.patches import Patch
    from matplotlib.ticker import MaxNLocator

    from mltcp.lab.common import plotting

    styles = plotting.styles()
    look = {rule: {"color": next(styles)["color"], "hatch": hatch}
            for rule, hatch in (("gap", ""), ("signal", "//"))}
    labels = [f"{r['workload']}\n{r['rule']} rule" for r in rows]
    fig, (top, bottom) = plotting.figure(2, 1, figsize=(max(6, len(rows) * 1.3), 5.8),
                                         sharex=True)
    xs = list(range(len(rows)))
    for ax, key in ((top, "miscounted"), (bottom, "short_boundaries_of_last")):
        for x, r in zip(xs, rows, strict=True):
            ax.bar(x, r[key], 0.6, edgecolor="black", linewidth=0.5, **look[r["rule"]])
    top.set_ylabel(f"iterations miscounted\n(of {rows[0]['hook_iterations']})")
    top.axhline(0.0, color="k", lw=0.8)
    bottom.set_ylabel("short boundaries\nof the last 8")
    bottom.set_xticks(xs, labels, fontsize=8)
    for ax in (top, bottom):
        ax.yaxis.set_major_locator(MaxNLocator(integer=True))      # counts
    top.set_title("datapath vs training-loop hook (each bar: one job of one run)",
                  fontsize=9)
    top.legend(handles=[Patch(facecolor=v["color"], hatch=v["hatch"], edgecolor="black",
                              label=f"{rule} rule") for rule, v in look.items()],
               fontsize="small")
    return plotting.save(fig, path)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default="bench/results/hosts")
    ap.add_argument("--parts", default=",".join(PARTS),
                    help=f"comma-separated, of {', '.join(PARTS)}")
    ap.add_argument("--iterations", type=int, default=100)
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--schemes", default=",".join(SCHEMES))
    ap.add_argument("--signal", action="store_true",
                    help="compatible/incompatible: both jobs signal their iterations' ends "
                         "(default: the idle-gap rule)")
    ap.add_argument("--start-slack", type=float, default=20.0,
                    help="seconds between launching the workers and their first iteration "
                         "of the first run (later runs: what the measured start-up calls for)")
    ap.add_argument("--pad-ms", type=float, default=None,
                    help="the compute pad of the compatible/tight/incompatible/contrast parts "
                         "(default: each part's)")
    ap.add_argument("--queue-packets", type=int, default=None,
                    help="the bottleneck's drop-tail queue in packets (default 400; the "
                         "hosts bench marks no ECN)")
    ap.add_argument("--sysctl", action="append", default=[], metavar="KEY=VALUE",
                    help="set on every host (namespace) before the runs, e.g. "
                         "net.ipv4.tcp_slow_start_after_idle=0; repeatable")
    ap.add_argument("--bottleneck-mbit", type=int, default=None,
                    help="the bottleneck's rate (default: 1000; contrast 200)")
    ap.add_argument("--ecn-bytes", type=int, default=None,
                    help="mark ECN (CE) on the bottleneck above this many queued bytes, "
                         "1500..2^30 (default: none, a drop-tail queue)")
    ap.add_argument("--slope", type=float, default=DEFAULT_SLOPE,
                    help=f"the MLTCP schemes' F slope (default {DEFAULT_SLOPE:g})")
    args = ap.parse_args()
    parts = [p for p in args.parts.split(",") if p]
    bad = [p for p in parts if p not in PARTS]
    if bad:
        ap.error(f"--parts: unknown {bad}; use {', '.join(PARTS)}")
    rates = {args.bottleneck_mbit or BOTTLENECK_MBIT.get(p, 1000) for p in parts}
    if len(rates) > 1:
        ap.error("--parts: contrast runs on a 200 Mbit/s bottleneck, the others on 1 Gbit/s; "
                 "run it on its own (or give --bottleneck-mbit)")
    seeds = [int(s) for s in args.seeds.split(",")]
    schemes = [s for s in args.schemes.split(",") if s]
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    results_path = out / "hosts.json"
    results = json.loads(results_path.read_text()) if results_path.exists() else {}
    with tempfile.TemporaryDirectory(prefix="bench-hosts-") as tmp:
        work = Path(tmp)
        first = work / "probe.toml"
        first.write_text(scenario_text("compatible", 2, [0], TRANSFORMER, False,
                                       bottleneck_mbit=rates.pop(),
                                       queue_packets=args.queue_packets or (
                                           QUEUE_PACKETS.get(parts[0]) if parts else None)))
        topo = load_scenario(str(first)).topology
        with (fabric.for_topology(topo) as net,
              sshd.SshdLab(net, work / "sshd", tuple(topo.host_names()),
                           python=sys.executable) as lab,
              ecn_markers(net, args.ecn_bytes)):
            inventory = work / "inventory.toml"
            inventory.write_text(lab.inventory_toml())
            for setting in args.sysctl:
                for host in topo.host_names():
                    net.check_output(host, ["sysctl", "-q", "-w", setting])
            options = {"inventory": str(inventory), "start_slack_s": args.start_slack}
            for part in parts:
                if part == "counting":
                    rows = []
                    for label, model, pad in COUNTING:
                        path = work / f"counting-{label}.toml"
                        path.write_text(scenario_text(part, args.iterations, seeds[:1], model,
                                                      True, pad))
                        part_out = out / f"counting-{label}"
                        print(f"== counting: {label}", file=sys.stderr, flush=True)
                        run_scenario(str(path), part_out, schemes=["mltcp-cubic"],
                                     seeds=seeds[:1], backend="hosts",
                                     backend_options=options | {"keep_logs": part_out / "logs"})
                        gap = idle_gap_ms(load_scenario(str(path)).jobs[0])
                        rows += counting_rows(part_out, label, gap)
                    results["counting"] = rows
                    plot_counting(rows, out / "counting.png")
                    continue
                path = work / f"{part}.toml"
                part_seeds = seeds[:1] if part == "incompatible" else seeds
                path.write_text(scenario_text(part, args.iterations, part_seeds,
                                              MODELS.get(part, TRANSFORMER), args.signal,
                                              args.pad_ms, args.bottleneck_mbit,
                                              args.queue_packets, args.slope,
                                              args.ecn_bytes))
                print(f"== {part}: {schemes} x seeds {part_seeds} + dedicated",
                      file=sys.stderr, flush=True)
                report = run_scenario(str(path), out / part, schemes=schemes, seeds=part_seeds,
                                      dedicated=True, dedicated_seeds=part_seeds[:1],
                                      backend="hosts",
                                      backend_options=options | {"keep_logs": out / part / "logs"})
                results[part] = {"schemes": summary(report),
                                 "dedicated_s": report["dedicated_means"],
                                 "signal": args.signal, "iterations": args.iterations,
                                 "seeds": part_seeds}
                results_path.write_text(json.dumps(results, indent=2))
    results_path.write_text(json.dumps(results, indent=2))
    for part in ("compatible", "tight", "incompatible"):
        if part in results:
            print(f"\n{part} (iteration time over dedicated; speed-up over the same CC):")
            for name, s in results[part]["schemes"].items():
                conv = s["convergence_iteration"]
                print(f"  {name:12} ratio {s['ratio_to_dedicated'] or 0:.2f}  mean "
                      f"{s['mean_s']:.3f} s  p99 {s['p99_s']:.3f} s  converged "
                      f"{s['converged_runs']}/{s['runs']} at {conv}  speed-up "
                      f"{s['speedup_mean'] or float('nan'):.2f}x / "
                      f"{s['speedup_p99'] or float('nan'):.2f}x")
    for r in results.get("counting", []):
        print(f"  counting {r['workload']:11} {r['run']:20} job {r['job']} ({r['rule']:6}): "
              f"hook {r['hook_iterations']}, datapath {r['datapath_iterations']} "
              f"(miscounted {r['miscounted']:+d}); last boundaries {r['last_boundaries_bytes']}")
    print(f"wrote {results_path}")
    return 0


def stoppable() -> int:
    """``main`` with SIGTERM and SIGHUP unwinding as Ctrl-C does (the CLI's rule,
    :mod:`mltcp.core.signals`): a bench killed mid-run tears down its fabric, the hosts'
    jobs, cgroups and modules instead of leaving them behind (seen: a SIGTERM'd bench
    left an ``mltcp-*`` cgroup that failed the next hosts tests)."""
    try:
        with signals.unwinding(exiting=True):
            return main()
    except KeyboardInterrupt as stop:
        signo = stop.signo if isinstance(stop, signals.Terminated) else signal.SIGINT
        print(f"bench_hosts: stopped by signal {int(signo)}, after tearing down",
              file=sys.stderr)
        return 128 + int(signo)


if __name__ == "__main__":
    sys.exit(stoppable())
