"""The fluid engine at cluster scale: wall time and peak memory against the number of jobs.

Issue 14's target: 1,000 concurrent jobs x 1,000 iterations on a >= 2,048-GPU leaf-spine
in <= 60 s and <= 4 GB on this 2-core machine.  This bench poses it on the cluster
model's fabric (:mod:`mltcp.lab.cluster`): 384 servers x 8 GPUs (3,072 GPUs; 48 leaves
x 8 servers, 8 spines, 100 Gbit/s NICs, 4:1 oversubscribed uplinks), N jobs of 1-16
GPUs (half of them one GPU, as in production traces; 2.4 GPUs on average, so 1,000
jobs hold ~2,400 GPUs at once), each a ring over its servers with 25-350 MB of
gradients and 50-400 ms of compute per iteration, placed by a policy:
``consolidated`` (as few servers as possible: most jobs never touch the network) or
``random`` (every multi-GPU job spread over servers: the network-heavy end).  Each
size runs in a process of its own (so the peak resident memory is that run's) under a
time limit, and reports wall seconds, peak RSS, engine events, the flow rates computed
per event (the engine's locality) and the wall time per event, and where a size ran past
its limit how far it got.
Standard congestion control and MLTCP (whose F steps add events).  No link samples:
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

LEAVES, SERVERS_PER_LEAF, SPINES, OVERSUBSCRIPTION, NIC_GBIT = 48, 8, 8, 4.0, 100.0
GPU_SHARES = {1: 0.5, 2: 0.3, 4: 0.12, 8: 0.06, 16: 0.02}


def workload(jobs: int, iterations: int, policy: str, seed: int = 0):  # type: ignore[no-untyped-def]
    """The fabric and the placed jobs (all running at once)."""
    import numpy as np

    from mltcp.lab.cluster.engine.gpu_jobs import PlacedJob
    from mltcp.lab.cluster.engine.leafspine import LeafSpine
    from mltcp.lab.cluster.schedulers.placement import POLICIES

    fabric = LeafSpine(LEAVES, SERVERS_PER_LEAF, SPINES, 8, NIC_GBIT, OVERSUBSCRIPTION)
    rng = random.Random(seed)
    free = np.full(fabric.servers, fabric.gpus_per_server)
    placed = []
    for j in range(jobs):
        gpus = rng.choices(list(GPU_SHARES), weights=list(GPU_SHARES.values()))[0]
        where = POLICIES[policy](fabric, free, gpus, rng)
        if where is None:
            raise SystemExit(f"{jobs} jobs do not fit {fabric.gpus} GPUs")
        for server, n in where:
            free[server] -= n
        placed.append(PlacedJob(f"j{j}", where, compute_s=rng.uniform(0.05, 0.4),
                                gradient_bytes=rng.uniform(25e6, 350e6),
                                iterations=iterations, start_s=rng.uniform(0, 1)))
    return fabric, placed


def _run(jobs: int, iterations: int, scheme: str, policy: str, limit_s: float,
         conn) -> None:  # type: ignore[no-untyped-def]
    """One size in a child process: place, run the engine in slices of simulated time
    until done or past the limit, report (how far it got where it was stopped)."""
    import numpy as np

    from mltcp.core.aggressiveness import Aggressiveness
    from mltcp.lab.cluster.engine.gpu_jobs import engine_state
    from mltcp.lab.models import fluid_engine

    t0 = time.perf_counter()
    fabric, placed = workload(jobs, iterations, policy)
    f = Aggressiveness(slope=4.0, intercept=1.0) if scheme == "mltcp" else None
    st = engine_state(fabric, placed, f)
    fluid_engine.advance_until(st, 0.0, 10**9)          # compiled (or loaded) before timing
    plan_s = time.perf_counter() - t0
    t1 = time.perf_counter()
    until, status = 0.0, fluid_engine.RUNNING
    while status == fluid_engine.RUNNING and time.perf_counter() - t1 < limit_s:
        until += 5.0
        status = fluid_engine.advance_until(st, until, 10**10)
    wall = time.perf_counter() - t1
    conn.send({"finished": status == fluid_engine.DONE, "wall_s": wall, "plan_s": plan_s,
               "events": st.events, "rates_per_event": st.recomputed / max(st.events, 1),
               "us_per_event": wall / max(st.events, 1) * 1e6,
               "simulated_s": st.t, "flows": len(st.flow_job),
               "networked_jobs": int(sum(len(j.gpus) > 1 for j in placed)),
               "gpus_used": int(sum(j.gpu_count for j in placed)),
               "job_iterations": int(np.isfinite(st.end).sum()),
               "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024})
    conn.close()


def measure(jobs: int, iterations: int, scheme: str, policy: str, limit_s: float) -> dict:
    parent, child = mp.Pipe(duplex=False)
    proc = mp.get_context("fork").Process(
        target=_run, args=(jobs, iterations, scheme, policy, limit_s, child))
    proc.start()
    child.close()
    try:
        result = parent.recv() if parent.poll(limit_s + 600) else {"finished": False}
    except EOFError:                  # the child failed before it could answer
        result = {"finished": False, "error": f"exit {proc.exitcode}"}
    proc.join()
    result.update(jobs=jobs, iterations=iterations, scheme=scheme, policy=policy,
                  limit_s=limit_s)
    return result


def plot(rows: list[dict], path: Path) -> list[Path]:
    """Wall time and peak memory against concurrent jobs, one line per placement x
    scheme (each its own colour, dashes and marker); a run stopped at the limit is
    marked.  PNG and PDF."""
    from mltcp.lab.common import plotting

    fig, (wall, mem) = plotting.figure(1, 2, figsize=(9, 3.8))
    for key, style in zip(sorted({(r["policy"], r["scheme"]) for r in rows}),
                          plotting.styles(), strict=False):
        mine = [r for r in rows if (r["policy"], r["scheme"]) == key]
        xs = [r["jobs"] for r in mine]
        label = f"{key[1]}, {key[0]}"
        wall.plot(xs, [r.get("wall_s", 0) for r in mine], label=label, **style)
        for r in mine:
            if not r["finished"]:
                wall.annotate("stopped at the limit", (r["jobs"], r.get("wall_s", 0)),
                              xytext=(-4, 4), textcoords="offset points", ha="right",
                              fontsize=7)
        mem.plot(xs, [r.get("rss_mb", 0) for r in mine], label=label, **style)
    for ax, label in ((wall, "wall s (to finish or to the limit)"), (mem, "peak RSS, MB")):
        ax.set_xscale("log")
        ax.set_xlabel("concurrent jobs")
        ax.set_ylabel(label)
        plotting.legend(ax, fontsize=7)
    fig.suptitle(f"fluid engine, {rows[0]['iterations']} iterations per job, "
                 f"{LEAVES * SERVERS_PER_LEAF * 8} GPUs; one run per point", fontsize=9)
    return plotting.save(fig, path)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default="bench/results/cluster-scale.json")
    ap.add_argument("--jobs", default="10,100,1000")
    ap.add_argument("--iterations", type=int, default=1000)
    ap.add_argument("--schemes", default="standard,mltcp")
    ap.add_argument("--policies", default="consolidated,random")
    ap.add_argument("--limit", type=float, default=120.0,
                    help="seconds per size before it is stopped (default %(default)s)")
    args = ap.parse_args()
    rows = []
    for policy in args.policies.split(","):
        for scheme in args.schemes.split(","):
            for jobs in (int(n) for n in args.jobs.split(",")):
                r = measure(jobs, args.iterations, scheme, policy, args.limit)
                rows.append(r)
                print(f"{policy:12} {scheme:8} {jobs:5} jobs x {args.iterations} it: "
                      + (f"{r['wall_s']:.1f} s" if r["finished"] else
                         f"stopped at {r.get('wall_s', 0):.0f} s")
                      + f" ({r.get('events', 0):,} events, {r.get('rates_per_event', 0):.0f}"
                      f" rates, {r.get('us_per_event', 0):.1f} us each;"
                      f" {r.get('networked_jobs', 0)} jobs on the network, "
                      f"{r.get('flows', 0)} flows, {r.get('gpus_used', 0)} GPUs; "
                      f"{r.get('job_iterations', 0):,} job iterations, "
                      f"{r.get('simulated_s', 0):.0f} s simulated), "
                      f"peak {r.get('rss_mb', 0):.0f} MB", flush=True)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"cluster": {"leaves": LEAVES, "servers_per_leaf":
                                           SERVERS_PER_LEAF, "spines": SPINES,
                                           "gpus_per_server": 8, "nic_gbit": NIC_GBIT,
                                           "oversubscription": OVERSUBSCRIPTION,
                                           "gpu_shares": GPU_SHARES},
                               "rows": rows}, indent=2))
    plot(rows, out.with_suffix(".png"))
    print(f"wrote {out}, {out.with_suffix('.png')} and {out.with_suffix('.pdf')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
