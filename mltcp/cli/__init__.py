"""The `mltcp` command line."""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from mltcp import __version__
from mltcp.core.errors import CapabilityError, MltcpError, SpecError
from mltcp.lab.runner import BACKENDS


def _add_job_parser(sub: argparse._SubParsersAction) -> None:
    job = sub.add_parser("job", help="put training jobs under MLTCP")
    jsub = job.add_subparsers(dest="job_cmd", required=True)

    a = jsub.add_parser("attach", help="attach a job (config, budget, classification)")
    a.add_argument("name")
    a.add_argument("--cc", default="cubic", help="reno, cubic or dctcp (default cubic)")
    b = a.add_argument_group("per-iteration byte budget (one of)")
    b.add_argument("--budget", help="bytes this host sends per iteration, e.g. 150MB, 1.5GiB")
    b.add_argument("--gradient-bytes", help="model gradient size, with --workers/--collective")
    b.add_argument("--learn", action="store_true", help="learn it from observed iterations")
    a.add_argument("--workers", type=int, help="workers in the collective")
    a.add_argument("--collective", default="ring_allreduce",
                   help="ring_allreduce, tree_allreduce, reduce_scatter, all_gather, "
                        "reduce_scatter_all_gather, all_to_all, parameter_server")
    a.add_argument("--role", default="worker", help="worker or server (parameter_server)")
    a.add_argument("--servers", type=int, default=1, help="parameter servers")
    f = a.add_argument_group("aggressiveness F = intercept + slope * bytes_ratio")
    f.add_argument("--preset", help="default (slope 1, intercept 1) or standard (F = 1)")
    f.add_argument("--slope", type=float)
    f.add_argument("--intercept", type=float)
    f.add_argument("--cap", type=float)
    a.add_argument("--gap-ms", type=float, default=None,
                   help="idle gap that starts a new iteration (default 5)")
    a.add_argument("--stale-s", type=float, default=None,
                   help="fall back to the standard CC when not refreshed for this long "
                        "(default 30; 0 = never)")
    c = a.add_argument_group("which sockets (at least one)")
    c.add_argument("--cgroup", help="cgroup v2 path of the training processes")
    c.add_argument("--dst", action="append", default=[], metavar="ADDR[:PORT]",
                   help="remote address (and port); repeatable")
    c.add_argument("--port", action="append", type=int, default=[], help="remote port")
    c.add_argument("--local-port", action="append", type=int, default=[],
                   help="local (listening) port")

    d = jsub.add_parser("detach", help="detach a job (or --all)")
    d.add_argument("name", nargs="?")
    d.add_argument("--all", action="store_true")
    lst = jsub.add_parser("list", help="attached jobs")
    lst.add_argument("--json", action="store_true")
    s = jsub.add_parser("signal", help="explicit end of iteration (from the training loop)")
    s.add_argument("name")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="mltcp", description=__doc__)
    p.add_argument("--version", action="version", version=f"mltcp {__version__}")
    p.add_argument("-v", "--verbose", action="store_true", help="full error details and logs")
    sub = p.add_subparsers(dest="cmd", required=True)

    doc = sub.add_parser("doctor", help="what this host supports, and why not")
    doc.add_argument("--json", action="store_true")
    doc.add_argument("--no-build", action="store_true", help="skip compiling the eBPF objects")

    ld = sub.add_parser("load", help="register MLTCP congestion modules")
    ld.add_argument("modules", nargs="+", help="reno, cubic, dctcp or all")
    ul = sub.add_parser("unload", help="unregister modules; --all removes everything")
    ul.add_argument("modules", nargs="*")
    ul.add_argument("--all", action="store_true", help="modules, jobs, classifier, marker, pins")

    _add_job_parser(sub)

    st = sub.add_parser("status", help="per job: iteration, bytes_ratio, F; per flow: cwnd, srtt")
    st.add_argument("--json", action="store_true")
    st.add_argument("--watch", type=float, metavar="SECONDS", help="refresh every SECONDS")
    sub.add_parser("metrics", help="Prometheus text format")

    ag = sub.add_parser("agent", help="long-running control plane for this host")
    ag.add_argument("--interval", type=float, default=1.0, help="refresh period in seconds")
    ag.add_argument("--metrics-port", type=int, help="serve /metrics on this TCP port")
    ag.add_argument("--metrics-addr", default="127.0.0.1")

    rn = sub.add_parser("run", help="run a scenario's schemes on a backend; write traces")
    rn.add_argument("scenario", help="an example name (see --list) or a TOML file")
    rn.add_argument("--backend", default="netns", choices=BACKENDS,
                    help="netns: real kernel TCP in network namespaces; fluid: the flow-level "
                         "model (seconds, no root needed); ns3: packet-level ns-3 "
                         "(pip install 'mltcp[ns3]'); dcqcn: RoCE, every scheme on the DCQCN "
                         "model (MLTCP schemes through the tuner's knob policy)")
    rn.add_argument("--out", required=True, help="output directory")
    rn.add_argument("--scheme", action="append", help="only these schemes (repeatable)")
    rn.add_argument("--seed", action="append", type=int, help="only these seeds (repeatable)")
    rn.add_argument("--dedicated", action="store_true",
                    help="also run each job alone (the dedicated-link baseline)")
    rn.add_argument("--parallel", type=int, default=1, metavar="N",
                    help="ns3: simulations at once, each its own process (default 1)")
    cp = sub.add_parser("compare", help="every scheme of a scenario plus the dedicated "
                                        "baseline, side by side (report + table)")
    cp.add_argument("scenario", help="an example name or a TOML file")
    cp.add_argument("--backend", default="netns", choices=BACKENDS)
    cp.add_argument("--out", required=True, help="output directory")
    cp.add_argument("--seed", action="append", type=int, help="only these seeds (repeatable)")
    cp.add_argument("--parallel", type=int, default=1, metavar="N",
                    help="ns3: simulations at once, each its own process (default 1)")
    sw = sub.add_parser("sweep", help="a parameter grid on the fluid model (or ns-3), run on "
                                      "Dask (table + plots)")
    sw.add_argument("scenario", help="an example name or a TOML file")
    sw.add_argument("--param", action="append", required=True, metavar="NAME=V1,V2,...",
                    help="grid axis (repeatable): slope, intercept, cap, load, compute_ms, "
                         "compute_jitter_ms, jobs, iterations")
    sw.add_argument("--seeds", default="0", help="e.g. 0-9 or 0,3,7 (default: %(default)s)")
    sw.add_argument("--scheme", help="the MLTCP scheme to vary (default: the scenario's first)")
    sw.add_argument("--out", required=True, help="output directory")
    sw.add_argument("--format", default="parquet", choices=["parquet", "csv"])
    sw.add_argument("--backend", default="fluid", choices=["fluid", "ns3"],
                    help="fluid: the flow-level model (batches of runs); ns3: one ns-3 process "
                         "per run (minutes each)")
    sw.add_argument("--scheduler", help="Dask scheduler address (default: a local cluster)")
    sw.add_argument("--workers", type=int, help="local cluster: worker processes "
                                                "(default: one per core)")
    sw.add_argument("--f-steps", type=int, default=None,
                    help="F re-evaluations per iteration (0: only at phase events)")
    tb = sub.add_parser("testbed", help="emulated testbed housekeeping")
    tb.add_argument("action", choices=["clean"],
                    help="clean: remove namespaces and jobs left by killed runs")

    from mltcp.core.dcqcn.policy import PRESETS as DCQCN_PRESETS
    from mltcp.host.dcqcn.backends import BACKEND_KINDS

    dq = sub.add_parser("dcqcn", help="RoCE: scale the NIC's DCQCN rate increase by "
                                      "F(bytes_ratio) (mlx5 knobs), restore them after")
    dqs = dq.add_subparsers(dest="dcqcn_cmd", required=True)
    port = argparse.ArgumentParser(add_help=False)
    port.add_argument("--root", default="/", help="find /sys under this directory (tests)")
    port.add_argument("--iface", help="the RoCE netdev (default: the only one with knobs)")
    port.add_argument("--pci", help="upstream debugfs: the PCI function, e.g. 0000:3b:00.0")
    port.add_argument("--backend", default="auto", choices=BACKEND_KINDS,
                      help="knob layout (default: probe; defaults: the mlx5 defaults, "
                           "read-only, with --advise)")
    dp = dqs.add_parser("probe", parents=[port], help="which knob layout, knobs and values")
    dp.add_argument("--json", action="store_true")
    dk = dqs.add_parser("knobs", help="the knob table: units, ranges, defaults, sources")
    dk.add_argument("--markdown", action="store_true", help="as in rdma/README.md")
    dr = dqs.add_parser("run", parents=[port], help="tune until Ctrl-C/SIGTERM/--duration-s, "
                                                    "then restore every knob it changed")
    dr.add_argument("--budget", required=True, help="bytes this host sends per iteration")
    fa = dr.add_argument_group("aggressiveness F = intercept + slope * bytes_ratio")
    fa.add_argument("--preset", choices=list(DCQCN_PRESETS),
                    help="mlx5-default (F = 1), paper (0.25 + 1.75 r) or tuned (1 + r, "
                         "the default)")
    fa.add_argument("--slope", type=float)
    fa.add_argument("--intercept", type=float)
    fa.add_argument("--cap", type=float)
    dr.add_argument("--mode", default="timer", choices=["timer", "rates"],
                    help="timer: rpg_time_reset and rpg_byte_reset / F (default); rates: "
                         "rpg_ai_rate and rpg_hai_rate x F")
    dr.add_argument("--f-step", type=float, default=0.125,
                    help="F is rounded to multiples of this before use (default %(default)s)")
    dr.add_argument("--base", default="current", choices=["current", "mlx5"],
                    help="scale the values found at start (default) or the mlx5 defaults")
    dr.add_argument("--advise", action="store_true",
                    help="write nothing: print each change the tuner would make, and why")
    dr.add_argument("--poll-ms", type=float, default=2.0, help="counter poll period")
    dr.add_argument("--gap-ms", type=float, default=10.0,
                    help="silence that ends an iteration (>= 2 polls; default %(default)s)")
    dr.add_argument("--duration-s", type=float, help="stop (and restore) after this long")
    dr.add_argument("--counter", default="auto",
                    help="RDMA tx bytes: auto, ib:DEV[:PORT] (port_xmit_data x 4), "
                         "ethtool[:STAT], file:PATH (default auto)")
    dr.add_argument("--state-dir", help="snapshot directory (default /var/lib/mltcp/dcqcn)")
    dr.add_argument("--restore-foreign", action="store_true",
                    help="on exit also restore knobs someone else changed meanwhile")
    dre = dqs.add_parser("restore", help="put back every knob from the snapshot "
                                         "(also after a crash)")
    dre.add_argument("--iface", help="the netdev the tuner ran on")
    dre.add_argument("--pci", help="the PCI function, if the tuner ran without --iface")
    dre.add_argument("--root", help="default: the root recorded in the snapshot")
    dre.add_argument("--state-dir", help="snapshot directory (default /var/lib/mltcp/dcqcn)")
    dre.add_argument("--force", action="store_true",
                     help="also overwrite knobs someone else changed since")

    dm = sub.add_parser("demo", help="MLTCP vs standard TCP on the default scenario, real "
                                     "kernel (--live: a close-up of one MLTCP run)")
    dm.add_argument("--out", default="mltcp-demo", help="output directory (default: %(default)s)")
    dm.add_argument("--seed", type=int, default=0)
    dm.add_argument("--live", action="store_true",
                    help="instead: two one-way jobs under MLTCP, per-iteration F and cwnd live")
    dm.add_argument("--cc", default="cubic", help="--live: reno, cubic or dctcp")
    dm.add_argument("--iterations", type=int, default=12, help="--live: iterations per job")
    dm.add_argument("--rate-mbit", type=float, default=1000, help="--live: bottleneck rate")
    dm.add_argument("--json", metavar="FILE",
                    help="--live: also write the samples and iterations here")
    return p


def _job_spec(args: argparse.Namespace):  # type: ignore[no-untyped-def]
    from mltcp.core.aggressiveness import preset
    from mltcp.core.budget import JobDescription, parse_bytes
    from mltcp.host import maps
    from mltcp.host.jobs import DEFAULT_GAP_MS, DEFAULT_STALE_S, JobSpec

    given = [x for x in (args.budget, args.gradient_bytes, args.learn or None) if x is not None]
    if len(given) != 1:
        raise SpecError("budget", "give exactly one way to get the per-iteration budget",
                        "use --budget BYTES, --gradient-bytes G --workers N, or --learn")
    base = preset(args.preset) if args.preset else preset("default")
    rules = []
    for dst in args.dst:
        addr, _, port = dst.rpartition(":") if dst.count(":") == 1 else (dst, "", "")
        if not addr:
            addr, port = port, ""
        try:
            rules.append(maps.Rule(address=addr.strip("[]"), port=int(port) if port else 0))
            rules[-1].key()
        except ValueError as exc:
            raise SpecError("dst", f"{dst!r} is not ADDR[:PORT]", "e.g. --dst 10.0.0.2:5201") \
                from exc
    rules += [maps.Rule(port=p) for p in args.port]
    rules += [maps.Rule(port=p, local=True) for p in args.local_port]
    kw = dict(
        name=args.name, cc=args.cc.removeprefix("mltcp_"),
        slope=base.slope if args.slope is None else args.slope,
        intercept=base.intercept if args.intercept is None else args.intercept,
        cap=base.cap if args.cap is None else args.cap,
        gap_ms=DEFAULT_GAP_MS if args.gap_ms is None else args.gap_ms,
        stale_s=DEFAULT_STALE_S if args.stale_s is None else args.stale_s,
        cgroup=args.cgroup, rules=tuple(rules),
    )
    if args.budget is not None:
        return JobSpec(budget=parse_bytes(args.budget, "budget"), **kw)
    if args.learn:
        return JobSpec(learn=True, **kw)
    if args.workers is None:
        raise SpecError("workers", "missing", "give --workers N with --gradient-bytes")
    desc = JobDescription(gradient_bytes=parse_bytes(args.gradient_bytes, "gradient_bytes"),
                          workers=args.workers, collective=args.collective, role=args.role,
                          servers=args.servers)
    return JobSpec.from_description(desc, **kw)


def _cmd_job(args: argparse.Namespace) -> int:
    from mltcp.host import jobs

    if args.job_cmd == "attach":
        spec = _job_spec(args)
        rec = jobs.attach(spec)
        how = ("learning the budget" if spec.learn else f"budget {rec.spec.budget} B/iteration")
        print(f"attached job {spec.name} (id {rec.id}) to mltcp_{spec.cc}, {how}")
        if spec.stale_s:
            print(f"keep it fresh with `mltcp agent`: the config expires after {spec.stale_s:g} s "
                  "and the job's flows then run the standard algorithm")
    elif args.job_cmd == "detach":
        if args.all:
            names = jobs.detach_all()
            print("detached " + (", ".join(names) or "nothing"))
        elif not args.name:
            raise SpecError("name", "missing", "name a job or pass --all")
        else:
            jobs.detach(args.name)
            print(f"detached job {args.name}")
    elif args.job_cmd == "list":
        reg = jobs.Registry().read()
        if args.json:
            print(json.dumps({n: {"id": r.id, **r.spec.to_json()} for n, r in reg.items()},
                             indent=2))
        else:
            for n, r in sorted(reg.items(), key=lambda kv: kv[1].id):
                s = r.spec
                where = ", ".join(filter(None, [f"cgroup {s.cgroup}" if s.cgroup else "",
                                                *[x.describe() for x in s.rules]]))
                budget = "learn" if s.learn else f"{s.budget} B"
                print(f"{r.id:>3} {n:<16} mltcp_{s.cc:<6} budget {budget:<14} "
                      f"F={s.intercept:g}+{s.slope:g}*ratio  {where}")
            if not reg:
                print("no jobs attached")
    elif args.job_cmd == "signal":
        seq = jobs.signal(args.name)
        print(f"job {args.name}: iteration boundary signalled (seq {seq})")
    return 0


def _cmd_dcqcn(args: argparse.Namespace) -> int:
    from mltcp.cli import dcqcn as commands

    return commands.main(args)


def _run(args: argparse.Namespace) -> int:
    if args.cmd == "doctor":
        from mltcp.host import doctor

        checks = doctor.run_checks(compile_objects=not args.no_build)
        print(json.dumps(doctor.as_json(checks), indent=2) if args.json else
              doctor.as_table(checks))
        return 0 if all(c.ok for c in checks) else 1
    if args.cmd == "load":
        from mltcp.host import datapath

        for m in datapath.load(args.modules):
            print(f"loaded {datapath.cc_name(m)}")
        return 0
    if args.cmd == "unload":
        from mltcp.host import datapath, jobs

        if args.all:
            names = jobs.Registry().read()
            removed = datapath.unload_all()
            jobs.Registry().clear()
            print("removed " + ", ".join(removed + [f"job {n}" for n in names] or ["nothing"]))
            return 0
        if not args.modules:
            raise SpecError("modules", "none given", "name modules (reno cubic dctcp all) or --all")
        removed = datapath.unload(args.modules)
        print("unloaded " + (", ".join(datapath.cc_name(m) for m in removed) or "nothing"))
        return 0
    if args.cmd == "job":
        return _cmd_job(args)
    if args.cmd == "dcqcn":
        return _cmd_dcqcn(args)
    if args.cmd in ("status", "metrics"):
        from mltcp.host import telemetry

        while True:
            statuses = telemetry.collect()
            if args.cmd == "metrics":
                sys.stdout.write(telemetry.to_prometheus(statuses))
                return 0
            if args.json:
                print(json.dumps(telemetry.to_json(statuses), indent=2))
            else:
                print(telemetry.to_table(statuses))
            if not args.watch:
                return 0
            time.sleep(args.watch)
            print()
    if args.cmd == "agent":
        from mltcp.host.agent import Agent

        logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
        Agent(interval_s=args.interval, metrics_port=args.metrics_port,
              metrics_addr=args.metrics_addr).run()
        return 0
    if args.cmd == "run":
        from mltcp.lab.runner import run_scenario

        run_scenario(args.scenario, out_dir=args.out, schemes=args.scheme, seeds=args.seed,
                     dedicated=args.dedicated, backend=args.backend, parallel=args.parallel)
        return 0
    if args.cmd == "compare":
        from mltcp.lab.report import table
        from mltcp.lab.runner import run_scenario

        print(table(run_scenario(args.scenario, out_dir=args.out, seeds=args.seed,
                                 dedicated=True, backend=args.backend,
                                 parallel=args.parallel)))
        return 0
    if args.cmd == "sweep":
        from mltcp.lab import sweep
        from mltcp.lab.models.fluid import FluidOptions

        if args.f_steps is not None and args.backend != "fluid":
            raise SpecError("f-steps", "is an option of the fluid model",
                            "drop --f-steps with --backend ns3")
        options = FluidOptions() if args.f_steps is None else FluidOptions(f_steps=args.f_steps)
        spec = sweep.make_spec(args.scenario, args.param, args.seeds, args.scheme, options,
                               backend=args.backend)
        rows = sweep.execute(spec, scheduler=args.scheduler, workers=args.workers)
        path = sweep.write(spec, rows, args.out, args.format)
        print(f"{len(rows)} runs -> {path}, {Path(args.out) / 'sweep.json'} and plots")
        return 0
    if args.cmd == "testbed":
        from mltcp.lab.emulation import testbed

        removed = testbed.clean()
        print("removed " + (", ".join(removed) or "nothing"))
        return 0
    if args.cmd == "demo":
        from mltcp.lab.demo import run_compare_demo, run_demo

        if not args.live:
            return run_compare_demo(args.out, seed=args.seed)
        return run_demo(cc=args.cc, iterations=args.iterations, rate_mbit=args.rate_mbit,
                        json_out=args.json)
    raise SpecError("command", f"unknown {args.cmd}", "see mltcp --help")


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return _run(args)
    except SpecError as exc:
        print(f"mltcp: error: {exc}", file=sys.stderr)
        return 2
    except (MltcpError, OSError) as exc:
        text = str(exc)
        first = text.splitlines()[0] if text else type(exc).__name__
        if args.verbose and "\n" in text:
            print(text, file=sys.stderr)
        elif "\n" in text:
            first += " (run with -v for the full log)"
        print(f"mltcp: error: {first}", file=sys.stderr)
        return 3 if isinstance(exc, CapabilityError) else 1
    except KeyboardInterrupt:
        print("mltcp: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
