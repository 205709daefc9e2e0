"""The fluid engine at cluster scale: wall time and peak memory against the number of jobs.

Issue 14's target: 1,000 concurrent jobs x 1,000 iterations on a >= 2,048-GPU leaf-spine
in <= 60 s and <= 4 GB on this 2-core machine.  This bench poses that workload (and
smaller ones) as generated scenarios on a 256-server leaf-spine (32 leaves x 8 servers,
8 spines, 4:1 oversubscription; each job a ring over 2-8 servers placed at random, 10-100
MB per iteration, 50-300 ms of compute), runs each size in a process of its own (so the
peak resident memory is that run's), under a time limit, and reports per size: wall
seconds, peak RSS, engine events, and where a size ran past its limit the events per
second it reached and the iterations it would take at that pace.  Runs the standard
scheme and MLTCP (whose F steps add events).  Link samples are off (record_links=False):
at this scale only the jobs' iterations are asked for.

    python bench/bench_cluster_scale.py --out bench/results/cluster-scale.json
    python bench/bench_cluster_scale.py --jobs 10,100 --iterations 100 --limit 60
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import random
import resource
import sys
import time
from pathlib import Path

LEAVES, SERVERS_PER_LEAF, SPINES, OVERSUBSCRIPTION = 32, 8, 8, 4.0


def scenario(jobs: int, iterations: int, seed: int = 0) -> dict:
    """The generated cluster as a scenario table (what load_scenario reads)."""
    rng = random.Random(seed)
    servers = [f"h{i + 1}" for i in range(LEAVES * SERVERS_PER_LEAF)]
    table: dict = {
        "name": f"cluster-{jobs}x{iterations}", "seeds": [seed],
        "topology": {"kind": "leaf_spine", "leaves": LEAVES, "spines": SPINES,
                     "hosts_per_leaf": SERVERS_PER_LEAF, "host_link_mbit": 10_000,
                     "oversubscription": OVERSUBSCRIPTION, "queue_packets": 400},
        "jobs": [],
        "schemes": [{"name": "cubic", "cc": "cubic", "mltcp": False},
                    {"name": "mltcp-cubic", "cc": "cubic", "mltcp": True, "slope": 4.0}],
    }
    for j in range(jobs):
        workers = rng.choice((2, 4, 8))
        # over 2..workers leaves (the scenario format wants a job to cross the spine)
        leaves = rng.sample(range(LEAVES), rng.randint(2, workers))
        pool = [servers[leaf * SERVERS_PER_LEAF + k] for leaf in leaves
                for k in range(SERVERS_PER_LEAF)]
        placement = [servers[leaves[0] * SERVERS_PER_LEAF + rng.randrange(SERVERS_PER_LEAF)],
                     servers[leaves[1] * SERVERS_PER_LEAF + rng.randrange(SERVERS_PER_LEAF)]]
        placement += rng.sample([h for h in pool if h not in placement], workers - 2)
        table["jobs"].append({
            "name": f"j{j}", "compute_ms": rng.randint(50, 300),
            "bytes_per_iteration": f"{rng.randint(10, 100)}MB", "workers": workers,
            "iterations": iterations, "placement": placement,
            "start_offset_ms": rng.randint(0, 1000)})
    return table


def _run(jobs: int, iterations: int, scheme: str, limit_s: float, conn) -> None:  # type: ignore[no-untyped-def]
    """One size in a child process: build, run, report (events reached on a timeout)."""
    import signal

    from mltcp.lab.models import fluid
    from mltcp.lab.plan import resolve
    from mltcp.lab.scenario import parse_scenario

    events = [0]
    original = fluid._Simulation.advance      # counted: one call per engine event

    def count(self):  # type: ignore[no-untyped-def]
        events[0] += 1
        return original(self)

    fluid._Simulation.advance = count  # type: ignore[method-assign]
    sc = parse_scenario(scenario(jobs, iterations), "generated")
    plan = resolve(sc, next(s for s in sc.schemes if s.name == scheme), 0)
    t0 = time.perf_counter()

    def timeout(*_):  # type: ignore[no-untyped-def]
        conn.send({"finished": False, "wall_s": time.perf_counter() - t0, "events": events[0],
                   "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024})
        conn.close()
        sys.exit(0)

    signal.signal(signal.SIGALRM, timeout)
    signal.setitimer(signal.ITIMER_REAL, limit_s)
    [trace] = fluid.run_many([plan], fluid.FluidOptions(), record_links=False)
    signal.setitimer(signal.ITIMER_REAL, 0)
    done = sum(len(j.iterations) for j in trace.jobs)
    conn.send({"finished": True, "wall_s": time.perf_counter() - t0, "events": events[0],
               "job_iterations": done,
               "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024})
    conn.close()


def measure(jobs: int, iterations: int, scheme: str, limit_s: float) -> dict:
    parent, child = mp.Pipe(duplex=False)
    proc = mp.get_context("fork").Process(target=_run,
                                          args=(jobs, iterations, scheme, limit_s, child))
    proc.start()
    child.close()
    try:
        result = parent.recv() if parent.poll(limit_s + 600) else {"finished": False}
    except EOFError:                  # the child failed before it could answer
        result = {"finished": False, "error": f"exit {proc.exitcode}"}
    proc.join()
    result.update(jobs=jobs, iterations=iterations, scheme=scheme, limit_s=limit_s)
    return result


def plot(rows: list[dict], path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (wall, mem) = plt.subplots(1, 2, figsize=(9, 3.6))
    for scheme in sorted({r["scheme"] for r in rows}):
        mine = [r for r in rows if r["scheme"] == scheme]
        xs = [r["jobs"] for r in mine]
        wall.plot(xs, [r["wall_s"] for r in mine], "o-", label=scheme)
        for r in mine:
            if not r["finished"]:
                wall.annotate("limit", (r["jobs"], r["wall_s"]), fontsize=7)
        mem.plot(xs, [r["rss_mb"] for r in mine], "o-", label=scheme)
    for ax, label in ((wall, "wall s (to finish or to the limit)"), (mem, "peak RSS, MB")):
        ax.set_xscale("log")
        ax.set_xlabel("concurrent jobs")
        ax.set_ylabel(label)
        ax.legend(fontsize=8)
    fig.suptitle(f"fluid engine, {rows[0]['iterations']} iterations per job", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default="bench/results/cluster-scale.json")
    ap.add_argument("--jobs", default="10,100,1000")
    ap.add_argument("--iterations", type=int, default=1000)
    ap.add_argument("--schemes", default="cubic,mltcp-cubic")
    ap.add_argument("--limit", type=float, default=120.0,
                    help="seconds per size before it is stopped (default %(default)s)")
    args = ap.parse_args()
    rows = []
    for scheme in args.schemes.split(","):
        for jobs in (int(n) for n in args.jobs.split(",")):
            r = measure(jobs, args.iterations, scheme, args.limit)
            if not r["finished"] and r.get("events"):
                rate = r["events"] / r["wall_s"]
                r["events_per_s"] = rate
            rows.append(r)
            print(f"{scheme:12} {jobs:5} jobs x {args.iterations} iterations: "
                  + (f"{r['wall_s']:.1f} s" if r["finished"] else
                     f"stopped at {r.get('wall_s', 0):.0f} s ({r.get('events', 0)} events)")
                  + f", peak {r.get('rss_mb', 0):.0f} MB", flush=True)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"leaf_spine": {"leaves": LEAVES, "servers_per_leaf":
                                              SERVERS_PER_LEAF, "spines": SPINES,
                                              "oversubscription": OVERSUBSCRIPTION},
                               "rows": rows}, indent=2))
    plot(rows, out.with_suffix(".png"))
    print(f"wrote {out} and {out.with_suffix('.png')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
