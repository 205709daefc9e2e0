"""`mltcp demo`: MLTCP against the standard congestion controls on real kernel TCP.

The default demo (:func:`run_compare_demo`) is `mltcp compare` on the embedded
default scenario (compatible-pair, one seed): every scheme plus each job alone
on a dedicated link, then the side-by-side table; the report, traces and plots
land in the output directory.

`mltcp demo --live` (:func:`run_demo`) is the close-up of one MLTCP run, on
this machine's kernel: a network-namespace dumbbell with an HTB bottleneck,
the MLTCP eBPF module, two synthetic one-way jobs (compute gap + per-iteration
bytes) whose sockets are put under MLTCP by address/port rules (the senders
ask for plain cubic; the sockops classifier switches them), and the control
plane refreshing the configs.  While it runs it prints, per job and
iteration, how far the job got (bytes_ratio), the F it reached and its mean
cwnd; at the end it prints iteration times and how much the two jobs'
communication phases overlapped.
"""

from __future__ import annotations

import json
import statistics
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from mltcp.core.errors import CapabilityError
from mltcp.host import datapath, jobs, maps, telemetry
from mltcp.host.agent import Agent
from mltcp.lab.emulation.labrun import Sender, run_senders, start_sink
from mltcp.lab.emulation.netns import BottleneckSpec, Dumbbell

DEMO_PORTS = (5101, 5102)
DEFAULT_SCENARIO = "compatible-pair"


def run_compare_demo(out_dir: str, seed: int = 0, scenario: str = DEFAULT_SCENARIO,
                     out=sys.stdout) -> int:  # type: ignore[no-untyped-def]
    """Compare every scheme of the default scenario (plus dedicated) and print the table."""
    from mltcp.lab.emulation.netns import require_netns

    try:
        datapath.require_bpf()
        require_netns()
    except CapabilityError as exc:
        raise CapabilityError(f"the demo runs on the real kernel and {exc}") from exc
    from mltcp.lab.report import table
    from mltcp.lab.runner import run_scenario

    print(f"mltcp demo: {scenario} (seed {seed}) on real kernel TCP, every scheme and each "
          f"job alone; report, traces and plots go to {out_dir}/", file=out, flush=True)
    report = run_scenario(scenario, out_dir=out_dir, seeds=[seed], dedicated=True)
    print(table(report), file=out)
    return 0


@dataclass
class IterationView:
    """What the control plane saw of one job iteration (sampled)."""

    job: str
    iteration: int
    max_ratio: float = 0.0
    max_f: float = 0.0
    cwnds: list[int] = field(default_factory=list)


def run_demo(cc: str = "cubic", iterations: int = 12, rate_mbit: float = 1000,
             bytes_per_iteration: int = 20_000_000, compute_ms: float = 200.0,
             json_out: str | None = None, out=sys.stdout) -> int:  # type: ignore[no-untyped-def]
    module = datapath.parse_modules([cc])[0]
    try:
        datapath.require_bpf()
    except CapabilityError as exc:
        raise CapabilityError(f"the demo runs on the real kernel and {exc}") from exc
    we_loaded = [] if module in datapath.loaded_modules() else datapath.load([module])
    registry = jobs.Registry()
    names = [f"demo-{c}" for c in "ab"]
    attached: list[str] = []
    samples: list[dict] = []
    try:
        with Dumbbell(n_senders=2, n_receivers=1,
                      bottleneck=BottleneckSpec(rate_mbit=rate_mbit)) as net:
            recv = net.receivers[0]
            sink_cc = datapath.cc_name(module) if module == "dctcp" else None
            for port in DEMO_PORTS:
                start_sink(net, recv, port, cc=sink_cc)
            for name, port in zip(names, DEMO_PORTS, strict=True):
                jobs.attach(jobs.JobSpec(name=name, cc=module, budget=bytes_per_iteration,
                                         rules=(maps.Rule(recv.addr, port),)), registry)
                attached.append(name)
            agent = Agent(interval_s=0.5, registry=registry)
            agent_thread = threading.Thread(target=agent.run, daemon=True)
            agent_thread.start()
            print(f"two jobs, {bytes_per_iteration / 1e6:g} MB per iteration after "
                  f"{compute_ms:g} ms of compute, on a {rate_mbit:g} Mbit/s bottleneck, "
                  f"mltcp_{module} (F = 1 + bytes_ratio)", file=out)
            print(f"{'job':<8}{'iter':>5}{'ratio':>8}{'F max':>8}{'cwnd':>8}", file=out)
            # The programs ask for plain cubic: the classifier switches them to MLTCP.
            pattern = ["--iterations", str(iterations), "--bytes-per-iteration",
                       str(bytes_per_iteration), "--compute-ms", str(compute_ms)]
            senders = [Sender(host, port, "cubic", pattern)
                       for host, port in zip(net.senders, DEMO_PORTS, strict=True)]
            reports: list[dict] = []
            errors: list[BaseException] = []

            def traffic() -> None:
                try:
                    reports.extend(run_senders(net, senders, recv))
                except BaseException as exc:  # reported in the main thread
                    errors.append(exc)

            traffic_thread = threading.Thread(target=traffic)
            traffic_thread.start()
            views: dict[str, IterationView] = {}
            while traffic_thread.is_alive():
                for st in telemetry.collect(registry):
                    samples.append({"t": time.monotonic(), "job": st.name,
                                    "iteration": st.iteration, "bytes_ratio": st.bytes_ratio,
                                    "f": st.f, "cwnd": [f.cwnd for f in st.flows]})
                    view = views.get(st.name)
                    if view is None or view.iteration != st.iteration:
                        if view is not None and view.cwnds:
                            print(f"{view.job:<8}{view.iteration:>5}{view.max_ratio:>8.2f}"
                                  f"{view.max_f:>8.2f}{statistics.mean(view.cwnds):>8.0f}",
                                  file=out)
                        view = views[st.name] = IterationView(st.name, st.iteration)
                    view.max_ratio = max(view.max_ratio, st.bytes_ratio)
                    view.max_f = max(view.max_f, st.f)
                    view.cwnds += [f.cwnd for f in st.flows]
                time.sleep(0.02)
            traffic_thread.join()
            agent.stop()
            agent_thread.join(timeout=5)
            if errors:
                raise errors[0]
        _summarise(reports, module, out)
        if json_out:
            Path(json_out).write_text(json.dumps({"senders": reports, "samples": samples},
                                                 indent=1))
    finally:
        for name in attached:
            jobs.detach(name, registry)
        if we_loaded:
            datapath.unload(we_loaded)
    return 0


def _as_trace(reports: list[dict], module: str):  # type: ignore[no-untyped-def]
    """The senders' reports as one common trace (times since the earlier sender's start),
    so the demo measures overlap with the project's one definition (mltcp.lab.metrics).
    Imported here: the capability check must not need numpy."""
    from mltcp.lab.trace import IterationRecord, JobTrace, Trace

    t0 = min(r["t0_monotonic"] for r in reports)
    jobs_ = []
    for name, r in zip(("a", "b"), reports, strict=True):
        shift = r["t0_monotonic"] - t0
        its = tuple(IterationRecord(it["index"], it["start"] + shift, it["comm_start"] + shift,
                                    it["comm_end"] + shift, it["end"] + shift, it["bytes"])
                    for it in r["iterations"])
        jobs_.append(JobTrace(name, ("bottleneck",), its))
    return Trace(scenario="demo", scheme=f"mltcp-{module}", backend="netns", seed=0,
                 jobs=tuple(jobs_))


def _summarise(reports: list[dict], module: str, out) -> None:  # type: ignore[no-untyped-def]
    from mltcp.lab import metrics

    trace = _as_trace(reports, module)
    a, b = trace.jobs
    print("\niteration  time(job a)  time(job b)  overlap(a with b)", file=out)
    for ia, ib, ov in zip(a.iterations, b.iterations, metrics.overlap(trace, "a"), strict=False):
        print(f"{ia.index:>9}  {ia.end - ia.start:>10.3f}s  {ib.end - ib.start:>10.3f}s"
              f"  {ov:>16.0%}", file=out)
