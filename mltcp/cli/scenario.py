"""Lab commands: ``run``, ``compare``, ``sweep``, ``backends``, ``testbed``, ``demo``.

What a researcher runs.  The commands that run scenarios stop on SIGTERM and SIGHUP
the way they stop on Ctrl-C (``teardown_signals``: the testbed's namespaces, jobs,
markers, module and job drivers are torn down, then the exit code is 128 + the signal).
Parsing needs only the backend registry's names (which
imports no backend); the pipeline (:mod:`mltcp.lab.scenario.runner`, numpy, matplotlib) is
imported when a command runs.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from mltcp.cli import args as args_
from mltcp.cli.output import add_json_flag, emit
from mltcp.core.errors import SpecError
from mltcp.lab.scenario import backends


def register(sub: Any) -> None:
    """Add the lab commands to the top-level subparsers."""
    names = backends.names()
    backend_help = "; ".join(f"{e.name}: {e.summary}" for e in backends.REGISTRY)

    rn = sub.add_parser("run", help="run a scenario's schemes on a backend; write traces")
    rn.add_argument("scenario", help="an example name, e.g. compatible-pair "
                                     "(mltcp/lab/scenario/examples/), or a TOML file")
    rn.add_argument("--backend", default="netns", choices=names, help=backend_help)
    rn.add_argument("--out", required=True, help="output directory")
    rn.add_argument("--scheme", action="append",
                    help="only these schemes (repeatable; default: every scheme)")
    rn.add_argument("--seed", action="append", type=args_.integer(0, 2**32 - 1, "0"),
                    help="only these seeds (0..4294967295, repeatable; default: the "
                         "scenario's)")
    rn.add_argument("--dedicated", action="store_true",
                    help="also run each job alone (the dedicated-link baseline)")
    rn.add_argument("--parallel", type=args_.integer(1, 64, "2"), default=1, metavar="N",
                    help="runs at once where the backend can (1..64; ns3: one worker "
                         "process each, reused from run to run; default 1)")
    args_.add_force_flag(rn)
    _hosts_options(rn)
    rn.set_defaults(handler=cmd_run, teardown_signals=True, records_results=True)

    cp = sub.add_parser("compare", help="every scheme of a scenario plus the dedicated "
                                        "baseline, side by side (report + table)")
    cp.add_argument("scenario", help="an example name or a TOML file")
    cp.add_argument("--backend", default="netns", choices=names, help=backend_help)
    cp.add_argument("--out", required=True, help="output directory")
    cp.add_argument("--seed", action="append", type=args_.integer(0, 2**32 - 1, "0"),
                    help="only these seeds (0..4294967295, repeatable; default: the "
                         "scenario's)")
    cp.add_argument("--parallel", type=args_.integer(1, 64, "2"), default=1, metavar="N",
                    help="runs at once where the backend can (1..64; ns3; default 1)")
    args_.add_force_flag(cp)
    _hosts_options(cp)
    cp.set_defaults(handler=cmd_compare, teardown_signals=True, records_results=True)

    sw = sub.add_parser("sweep", help="a parameter grid on a backend (fluid by default), run "
                                      "on this host's cores or a Dask cluster (table + plots)")
    sw.add_argument("scenario", help="an example name or a TOML file")
    sw.add_argument("--param", action="append", required=True, metavar="NAME=V1,V2,...",
                    help="grid axis (repeatable): slope, intercept, cap, load, compute_ms, "
                         "compute_jitter_ms, jobs, iterations")
    sw.add_argument("--seeds", default="0", help="e.g. 0-9 or 0,3,7 (default: %(default)s)")
    sw.add_argument("--scheme", help="the MLTCP scheme to vary (default: the scenario's first "
                                     "MLTCP scheme)")
    sw.add_argument("--out", required=True, help="output directory")
    sw.add_argument("--format", default="parquet", choices=["parquet", "csv"],
                    help="the table's format (default %(default)s)")
    sw.add_argument("--backend", default="fluid", choices=names,
                    help="fluid: the flow-level model (batches of runs); ns3: each run on an ns-3 "
                         "worker process, reused (minutes each); dcqcn: batches on the DCQCN model "
                         "(default %(default)s)")
    args_.add_fan_out_flags(sw, "one per core")
    args_.add_renamed_flag(sw, "--workers", "--parallel")
    sw.add_argument("--f-steps", type=args_.integer(0, 1_000_000, "8"), default=None,
                    help="fluid: F re-evaluations per iteration (0..1000000, 0: only at "
                         "phase events; default 8)")
    args_.add_force_flag(sw)
    sw.set_defaults(handler=cmd_sweep, teardown_signals=True, records_results=True)

    bk = sub.add_parser("backends", help="the backends scenarios can run on "
                                         "(--check: which can run on this host)")
    bk.add_argument("--check", action="store_true",
                    help="import each backend and say whether it can run here, and why not")
    add_json_flag(bk, "the backends ([{name, summary}], with --check also ready, why)")
    bk.set_defaults(handler=cmd_backends)

    tb = sub.add_parser("testbed", help="emulated testbed housekeeping")
    tb.add_argument("action", choices=["clean"],
                    help="clean: remove namespaces and jobs left by killed runs (those of "
                         "live runs are kept and listed)")
    tb.add_argument("--force", action="store_true",
                    help="also remove the namespaces and jobs of runs that are still alive")
    add_json_flag(tb, "what was removed and kept ({removed, kept})")
    tb.set_defaults(handler=cmd_testbed)

    dm = sub.add_parser("demo", help="MLTCP vs standard TCP on the default scenario, real "
                                     "kernel (--live: a close-up of one MLTCP run)")
    dm.add_argument("--out", default="mltcp-demo", help="output directory (default: %(default)s)")
    dm.add_argument("--seeds", default="0-3",
                    help="seeds to compare, e.g. 0-7 or 0,3 (default: %(default)s; about "
                         "35 s each on 2 cores); --live: the first")
    dm.add_argument("--live", action="store_true",
                    help="instead: one MLTCP run watched live (per worker and iteration: "
                         "bytes_ratio, F, cwnd)")
    dm.add_argument("--cc", default="cubic", choices=["reno", "cubic", "dctcp"],
                    help="--live: the MLTCP module (default %(default)s)")
    dm.add_argument("--iterations", type=args_.integer(2, 1000, "12"), default=12,
                    help="--live: iterations per job (2..1000, default %(default)s)")
    dm.add_argument("--rate-mbit", type=args_.number(1, 40_000, "1000"), default=1000,
                    help="--live: bottleneck rate in Mbit/s (1..40000, default %(default)s)")
    dm.add_argument("--json", metavar="FILE", dest="json_file",
                    help="--live: also write the trace and the datapath samples to FILE "
                         "(default: none; not the global -j)")
    args_.add_force_flag(dm)
    dm.set_defaults(handler=cmd_demo, teardown_signals=True, records_results=True)


def _hosts_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--inventory", metavar="FILE",
                   help="the hosts backend's inventory TOML (docs/testbed.md; no default)")
    p.add_argument("--keep-logs", metavar="DIR",
                   help="hosts backend: keep each run's worker output and hook records "
                        "under DIR (default: none kept)")


def _backend_options(args: argparse.Namespace) -> dict:
    """Options for the chosen backend; the hosts backend's flags refused elsewhere."""
    hosts = {"inventory": args.inventory, "keep_logs": args.keep_logs}
    if args.backend == "hosts":
        return hosts
    for flag, value in (("--inventory", args.inventory), ("--keep-logs", args.keep_logs)):
        if value is not None:
            raise SpecError(flag, f"only the hosts backend takes it (--backend {args.backend})",
                            "drop it, or run with --backend hosts")
    return {}


def cmd_run(args: argparse.Namespace) -> int:
    from mltcp.lab.common.outdir import make_out_dir
    from mltcp.lab.scenario.runner import run_scenario

    options = _backend_options(args)
    make_out_dir(args.out)
    run_scenario(args.scenario, out_dir=args.out, schemes=args.scheme, seeds=args.seed,
                 dedicated=args.dedicated, backend=args.backend, parallel=args.parallel,
                 backend_options=options, force=args.force)
    return 0


def cmd_compare(args: argparse.Namespace) -> int:
    from mltcp.lab.common.outdir import make_out_dir
    from mltcp.lab.scenario.report import table
    from mltcp.lab.scenario.runner import run_scenario

    options = _backend_options(args)
    make_out_dir(args.out)
    print(table(run_scenario(args.scenario, out_dir=args.out, seeds=args.seed,
                             dedicated=True, backend=args.backend, parallel=args.parallel,
                             backend_options=options, force=args.force)))
    return 0


def cmd_sweep(args: argparse.Namespace) -> int:
    from mltcp.lab.common import runset
    from mltcp.lab.common.outdir import make_out_dir
    from mltcp.lab.scenario import sweep

    options: dict = {}
    if args.backend == "fluid":
        from mltcp.lab.scenario.batched.fluid import FluidOptions

        # A sweep reads iterations only: the fluid model need not record link samples.
        options = {"options": FluidOptions() if args.f_steps is None
                   else FluidOptions(f_steps=args.f_steps), "record_links": False}
    elif args.f_steps is not None:
        raise SpecError("f-steps", "is an option of the fluid model",
                        f"drop --f-steps with --backend {args.backend}")
    spec = sweep.make_spec(args.scenario, args.param, args.seeds, args.scheme,
                           backend=args.backend, backend_options=options)
    sweep.require(args.format)
    args_.check_fan_out(args)
    make_out_dir(args.out)
    runset.claim(args.out, sweep.runset_of(spec), args.force)
    rows = sweep.execute(spec, dask_address=args.dask, parallel=args.parallel)
    path = sweep.write(spec, rows, args.out, args.format)
    print(f"{len(rows)} runs -> {path}, {Path(args.out) / 'sweep.json'} and plots")
    return 0


def cmd_backends(args: argparse.Namespace) -> int:
    from mltcp.core.errors import MltcpError

    width = max(len(n) for n in backends.names())
    listed = []
    for e in backends.REGISTRY:
        entry: dict[str, Any] = {"name": e.name, "summary": e.summary}
        if args.check:
            try:
                backends.get(e.name).require()
                entry.update(ready=True, why=None)
            except (MltcpError, ImportError) as exc:
                entry.update(ready=False, why=str(exc).splitlines()[0])
        listed.append(entry)
    if args.json:
        emit(listed)
        return 0
    for entry in listed:
        status = "" if "ready" not in entry else (
            "  [ready]" if entry["ready"] else f"  [unavailable: {entry['why']}]")
        print(f"{entry['name']:<{width}}  {entry['summary']}{status}")
    return 0


def cmd_testbed(args: argparse.Namespace) -> int:
    from mltcp.lab.scenario.emulation import testbed

    report = testbed.clean(force=args.force)
    if args.json:
        emit({"removed": report.removed, "kept": report.kept})
        return 0
    print("removed " + (", ".join(report.removed) or "nothing"))
    for line in report.kept:
        print(f"{line}: `mltcp testbed clean --force` removes them too")
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    from mltcp.core.validate import seeds
    from mltcp.lab.scenario.demo import run_compare_demo, run_demo

    chosen = seeds(args.seeds, "seeds")
    if not args.live:
        return run_compare_demo(args.out, seeds=chosen, force=args.force)
    return run_demo(cc=args.cc, iterations=args.iterations, rate_mbit=args.rate_mbit,
                    json_out=args.json_file, seed=chosen[0])
