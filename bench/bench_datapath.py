"""Datapath overhead: native CUBIC vs MLTCP-CUBIC, side by side on one netns bottleneck.

Variants (one bulk flow each, rounds interleaved so machine noise hits all alike):
  native       the kernel's cubic
  mltcp-nojob  mltcp_cubic, flow of no job (F = 1 by classification)
  mltcp-f1     mltcp_cubic, flow of a job with slope 0 (F = 1, full per-ACK accounting)
  mltcp-live   mltcp_cubic, flow of a live job (slope 1, budget 100 MB: F sweeps 1..2)

Reported per variant: goodput and host CPU seconds per GB moved (all cores, /proc/stat),
and both as ratios to native measured in the same round.  Writes JSON and a PNG.

``--rate-mbit 0`` leaves the veth path unshaped: then the CPU, not a shaper, is the
bottleneck (tens of Gbit/s), and goodput and CPU per GB show the datapath's own cost.
There the sender should be ``--sender iperf3`` (client pinned to CPU 0, server to CPU 1):
the project's Python sender spends most of the CPU itself and its rounds varied from
0.45x to 1.6x of each other, which hid any difference the datapath could make.

    python bench/bench_datapath.py --out bench/results/datapath.json
    python bench/bench_datapath.py --rate-mbit 0 --sender iperf3 \
        --out bench/results/datapath-unshaped.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

from mltcp import __version__
from mltcp.host import datapath, jobs, rules
from mltcp.lab.scenario.emulation import fabric, traffic

PORT_PLAIN, PORT_JOB_F1, PORT_JOB_LIVE = 7100, 7101, 7102
VARIANTS = {
    "native": ("cubic", PORT_PLAIN),
    "mltcp-nojob": ("mltcp_cubic", PORT_PLAIN),
    "mltcp-f1": ("mltcp_cubic", PORT_JOB_F1),
    "mltcp-live": ("mltcp_cubic", PORT_JOB_LIVE),
}


def cpu_busy_seconds() -> tuple[float, float]:
    """(all busy, kernel only) CPU seconds of the whole host from /proc/stat.  The
    datapath's BPF runs in the kernel part (system, irq, softirq)."""
    fields = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
    user, nice, system, idle, iowait, irq, softirq, steal = map(int, fields[:8])
    hz = os.sysconf("SC_CLK_TCK")
    return (user + nice + system + irq + softirq + steal) / hz, (system + irq + softirq) / hz


def git_sha() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True,
                              cwd=Path(__file__).parent).stdout.strip()
    except OSError:
        return "unknown"


def python_round(net: fabric.Fabric, variant: str, cc: str, port: int,
                 duration_s: float) -> tuple[float, int]:
    """(goodput bit/s, bytes acked) of one bulk flow from the project's own sender."""
    spec = traffic.TrafficSpec(name=variant, cc=cc, pattern="oneway", duration_s=duration_s,
                               sample_ms=100, workers=[net.endpoint("h1", port),
                                                       net.endpoint("h2", port)])
    [rep] = traffic.run_jobs([spec])
    return rep["goodput_bps"], rep["bytes_acked_total"]


def iperf3_round(net: fabric.Fabric, cc: str, port: int, duration_s: float) -> tuple[float, int]:
    """(goodput bit/s, bytes received) of one iperf3 flow h1 -> h2 with congestion control
    ``cc`` (iperf3 -C), client pinned to CPU 0 and server to CPU 1."""
    server = net.run("h2", ["iperf3", "-s", "-1", "-p", str(port), "-A", "1"],
                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 10
        while not net.check_output("h2", ["ss", "-Hltn", f"sport = :{port}"]).strip():
            if time.monotonic() > deadline or server.poll() is not None:
                raise RuntimeError(f"iperf3 server on port {port} did not start: "
                                   f"{server.stderr.read() if server.stderr else ''}")
            time.sleep(0.05)
        out = net.check_output("h1", ["iperf3", "-c", net.host_addr("h2"), "-p", str(port),
                                      "-C", cc, "-t", f"{duration_s:g}", "-A", "0", "-J"],
                               timeout_s=duration_s + 30)
    finally:
        try:
            server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
    result = json.loads(out)
    if "error" in result:
        raise RuntimeError(f"iperf3 -C {cc}: {result['error']}")
    end = result["end"]
    if end.get("sender_tcp_congestion") not in (None, cc):
        raise RuntimeError(f"iperf3 ran {end['sender_tcp_congestion']}, not {cc}")
    return end["sum_received"]["bits_per_second"], int(end["sum_received"]["bytes"])


def run(rounds: int, duration_s: float, rate_mbit: float, sender: str = "python") -> dict:
    we_loaded = datapath.load(["cubic"]).loaded
    attached = []
    results: dict[str, list[dict]] = {v: [] for v in VARIANTS}
    try:
        for name, port, slope, budget in (("bench-f1", PORT_JOB_F1, 0.0, 10**12),
                                          ("bench-live", PORT_JOB_LIVE, 1.0, 100_000_000)):
            jobs.attach(jobs.JobSpec(name=name, cc="cubic", budget=budget, slope=slope,
                                     intercept=1.0, stale_s=0, rules=(rules.Rule(port=port),)))
            attached.append(name)
        # h1 -> h2 across one shaped link; GSO bursts as a host's NIC sends them.
        with fabric.dumbbell(2, rate_mbit or None, 1000, gso_max_segs=None) as net:
            for r in range(rounds):
                for variant, (cc, port) in VARIANTS.items():
                    (busy0, kern0), t0 = cpu_busy_seconds(), time.monotonic()
                    if sender == "iperf3":
                        goodput, acked = iperf3_round(net, cc, port, duration_s)
                    else:
                        goodput, acked = python_round(net, variant, cc, port, duration_s)
                    busy1, kern1 = cpu_busy_seconds()
                    busy, kern = busy1 - busy0, kern1 - kern0
                    wall = time.monotonic() - t0
                    gbytes = acked / 1e9
                    results[variant].append({
                        "round": r, "goodput_bps": goodput,
                        "cpu_s": busy, "kernel_cpu_s": kern, "wall_s": wall,
                        "cpu_s_per_gb": busy / gbytes, "kernel_cpu_s_per_gb": kern / gbytes,
                    })
                    print(f"round {r + 1}/{rounds} {variant:<12} "
                          f"{goodput / 1e6:7.1f} Mbit/s  {busy / gbytes:6.3f} CPU s/GB",
                          file=sys.stderr, flush=True)
    finally:
        for name in attached:
            jobs.detach(name)
        if we_loaded:
            datapath.unload(we_loaded)

    summary = {}
    for variant, runs in results.items():
        g_ratio = [x["goodput_bps"] / n["goodput_bps"] for x, n in zip(runs, results["native"],
                                                                       strict=True)]
        c_ratio = [x["cpu_s_per_gb"] / n["cpu_s_per_gb"] for x, n in zip(runs, results["native"],
                                                                         strict=True)]
        k_ratio = [x["kernel_cpu_s_per_gb"] / n["kernel_cpu_s_per_gb"]
                   for x, n in zip(runs, results["native"], strict=True)]
        summary[variant] = {
            "goodput_mbit_median": statistics.median(x["goodput_bps"] for x in runs) / 1e6,
            "cpu_s_per_gb_median": statistics.median(x["cpu_s_per_gb"] for x in runs),
            "goodput_ratio_median": statistics.median(g_ratio),
            "cpu_per_gb_ratio_median": statistics.median(c_ratio),
            "goodput_ratio_min": min(g_ratio), "goodput_ratio_max": max(g_ratio),
            "cpu_per_gb_ratio_min": min(c_ratio), "cpu_per_gb_ratio_max": max(c_ratio),
            "kernel_cpu_s_per_gb_median": statistics.median(x["kernel_cpu_s_per_gb"]
                                                            for x in runs),
            "kernel_cpu_per_gb_ratio_median": statistics.median(k_ratio),
            "kernel_cpu_per_gb_ratio_min": min(k_ratio),
            "kernel_cpu_per_gb_ratio_max": max(k_ratio),
        }
    return {
        "benchmark": "datapath", "mltcp_version": __version__, "git_sha": git_sha(),
        "kernel": platform.release(), "cpus": os.cpu_count(),
        "params": {"rounds": rounds, "duration_s": duration_s, "rate_mbit": rate_mbit,
                   "sender": sender},
        "summary": summary, "runs": results,
    }


HATCHES = ("", "//", "\\\\", "xx", "..", "--")


def plot(report: dict, png: Path) -> list[Path]:
    """Goodput and CPU per GB of each variant over native's: the median of the rounds
    with their min-max range, each variant its own colour and hatch, N rounds in the
    title.  PNG and PDF."""
    from mltcp.lab.common import plotting

    names = list(report["summary"])
    looks = [{"color": style["color"], "hatch": HATCHES[i % len(HATCHES)]}
             for i, style in zip(range(len(names)), plotting.styles(), strict=False)]
    fig, axes = plotting.figure(1, 3, figsize=(12, 4.0))
    for ax, key, title in ((axes[0], "goodput_ratio", "goodput / native"),
                           (axes[1], "cpu_per_gb_ratio", "host CPU per GB / native"),
                           (axes[2], "kernel_cpu_per_gb_ratio", "kernel CPU per GB / native")):
        med = [report["summary"][n][f"{key}_median"] for n in names]
        lo = [m - report["summary"][n][f"{key}_min"] for n, m in zip(names, med, strict=True)]
        hi = [report["summary"][n][f"{key}_max"] - m for n, m in zip(names, med, strict=True)]
        for x, (name, m, lo_x, hi_x, look) in enumerate(zip(names, med, lo, hi, looks,
                                                             strict=True)):
            ax.bar(x, m, yerr=[[lo_x], [hi_x]], capsize=4, edgecolor="black", linewidth=0.5,
                   label=name, **look)
        ax.set_xticks(range(len(names)), names)
        ax.axhline(1.0, color="k", lw=0.8)
        ax.set_title(title, fontsize=10)
        ax.tick_params(axis="x", rotation=20)
    p = report["params"]
    link = (f"{p['rate_mbit']:g} Mbit/s netns bottleneck" if p["rate_mbit"]
            else "unshaped veth (CPU-bound)")
    fig.suptitle(f"MLTCP-CUBIC vs native cubic, {link}, {p.get('sender', 'python')} sender, "
                 f"N={p['rounds']} interleaved rounds x {p['duration_s']:g} s "
                 "(bar: median, whiskers: min-max)", fontsize=10)
    return plotting.save(fig, png)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--duration", type=float, default=3.0)
    ap.add_argument("--rate-mbit", type=float, default=1000,
                    help="bottleneck rate (default 1000); 0 = unshaped veth, CPU-bound")
    ap.add_argument("--sender", choices=("python", "iperf3"), default="python",
                    help="who sends: the project's traffic sender (default) or iperf3 "
                         "(pinned; for --rate-mbit 0, where the sender's own CPU dominates)")
    ap.add_argument("--out", default="bench/results/datapath.json")
    args = ap.parse_args()
    if args.sender == "iperf3" and not shutil.which("iperf3"):
        ap.error("--sender iperf3: iperf3 is not installed (bash scripts/setup.sh installs it)")
    report = run(args.rounds, args.duration, args.rate_mbit, args.sender)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2))
    plot(report, out.with_suffix(".png"))
    for variant, s in report["summary"].items():
        print(f"{variant:<12} goodput {s['goodput_mbit_median']:7.1f} Mbit/s "
              f"(x{s['goodput_ratio_median']:.3f})  CPU {s['cpu_s_per_gb_median']:.3f} s/GB "
              f"(x{s['cpu_per_gb_ratio_median']:.3f})  kernel CPU "
              f"{s['kernel_cpu_s_per_gb_median']:.3f} s/GB "
              f"(x{s['kernel_cpu_per_gb_ratio_median']:.3f})")
    print(f"wrote {out}, {out.with_suffix('.png')} and {out.with_suffix('.pdf')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
