"""Host commands: ``doctor``, ``load``, ``unload``, ``job``, ``apply``, ``status``, ``metrics``,
``agent``.

What a network engineer runs on a training host.  Only the standard library and
:mod:`mltcp.core` are imported here; each command imports its part of
:mod:`mltcp.host` when it runs.
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from typing import Any

from mltcp.cli import args as args_
from mltcp.cli.output import add_json_flag, emit


def register(sub: Any) -> None:
    """Add the host commands to the top-level subparsers."""
    doc = sub.add_parser("doctor", help="what this host supports, and why not (exit 0: "
                                        "every check passed, 1: some did not)")
    add_json_flag(doc, "the checks ({ok, checks: [{name, ok, detail, fix}]})")
    doc.add_argument("--no-build", action="store_true", help="skip compiling the eBPF objects")
    doc.set_defaults(handler=cmd_doctor)

    ld = sub.add_parser("load", help="register MLTCP congestion modules")
    ld.add_argument("modules", nargs="+", help="reno, cubic, dctcp or all")
    add_json_flag(ld, "what was loaded ({loaded, already})")
    ld.set_defaults(handler=cmd_load)
    ul = sub.add_parser("unload", help="unregister modules; --all removes everything")
    ul.add_argument("modules", nargs="*", help="reno, cubic, dctcp or all (or --all)")
    add_json_flag(ul, "what was removed ({unloaded} or, with --all, {removed, jobs})")
    ul.add_argument("--all", action="store_true", help="modules, jobs, classifier, marker, pins")
    ul.set_defaults(handler=cmd_unload)

    _register_job(sub)

    st = sub.add_parser("status", help="per job: iteration, bytes_ratio, F; per flow: cwnd, srtt")
    add_json_flag(st, "the jobs ([{name, id, cc, iteration, bytes_ratio, f, ..., flows}]); "
                      "with --watch one line per refresh")
    st.add_argument("--watch", type=args_.number(0, 3600, "1", lo_open=True), metavar="SECONDS",
                    help="refresh every SECONDS (0 < SECONDS <= 3600; default: print once)")
    st.set_defaults(handler=cmd_status)
    mt = sub.add_parser("metrics", help="Prometheus text format (always text: -j is refused; "
                                        "the agent serves the same on --metrics-port)")
    mt.add_argument("--flows", type=_flows_per_job(), nargs="?", const=DEFAULT_FLOWS_PER_JOB,
                    metavar="N",
                    help="also per-flow series (mltcp_flow_cwnd, mltcp_flow_srtt_seconds by "
                         "job, src, dst), at most N per job (1..1024, N omitted: "
                         f"{DEFAULT_FLOWS_PER_JOB}; default: none, per-job aggregates only)")
    mt.set_defaults(handler=cmd_metrics)

    ag = sub.add_parser("agent", help="long-running control plane for this host")
    ag.add_argument("--interval", type=args_.number(0.05, 60, "1"), default=1.0,
                    help="refresh period in seconds (0.05..60, default %(default)s)")
    ag.add_argument("--metrics-port", type=args_.port("9465"),
                    help="serve /metrics and /healthz on this TCP port (1..65535; "
                         "default: no HTTP server)")
    ag.add_argument("--metrics-addr", default="127.0.0.1", metavar="ADDR",
                    help="address the HTTP server listens on (default %(default)s; "
                         "0.0.0.0 or :: for every interface)")
    ag.add_argument("--metrics-flows", type=_flows_per_job(), nargs="?",
                    const=DEFAULT_FLOWS_PER_JOB, metavar="N",
                    help="also serve per-flow series (mltcp_flow_cwnd, mltcp_flow_srtt_seconds "
                         "by job, src, dst: a series per connection), at most N per job "
                         f"(1..1024, N omitted: {DEFAULT_FLOWS_PER_JOB}; default: none, "
                         "per-job aggregates only)")
    ag.add_argument("--config", metavar="FILE",
                    help="job file to apply at start and on SIGHUP, e.g. /etc/mltcp/jobs.toml "
                         "(default: none)")
    ag.add_argument("--signal-socket", metavar="PATH", default="",
                    help="Unix socket for the training processes' end-of-iteration signals "
                         "(mltcp.hook; a process may signal only its own job's cgroup; "
                         "default: agent.sock in the state directory, /run/mltcp)")
    ag.add_argument("--no-signal-socket", dest="signal_socket", action="store_const",
                    const=None, help="serve no signal socket")
    ag.set_defaults(handler=cmd_agent)

    ap = sub.add_parser("apply", help="make this host match a job file (modules and jobs)")
    ap.add_argument("file", help="the job file, e.g. /etc/mltcp/jobs.toml")
    ap.add_argument("--dry-run", action="store_true", help="say what would change, change nothing")
    add_json_flag(ap, "the changes ({dry_run, loaded, attached, replaced, detached, "
                      "unchanged})")
    ap.set_defaults(handler=cmd_apply)


# mltcp.host.exposition's DEFAULT_FLOWS_PER_JOB and MAX_FLOWS_PER_JOB (not imported: a
# parser is built without loading the host package; tests/test_exposition.py compares).
DEFAULT_FLOWS_PER_JOB = 64
MAX_FLOWS_PER_JOB = 1024


def _flows_per_job() -> Any:
    return args_.integer(1, MAX_FLOWS_PER_JOB, str(DEFAULT_FLOWS_PER_JOB))


def _register_job(sub: Any) -> None:
    job = sub.add_parser("job", help="put training jobs under MLTCP")
    jsub = job.add_subparsers(dest="job_cmd", required=True, metavar="SUBCOMMAND")

    a = jsub.add_parser("attach", help="attach a job (config, budget, classification)")
    a.add_argument("name", help="the job's name: 1-32 letters, digits, '.', '_' or '-'")
    a.add_argument("--cc", default="cubic", help="reno, cubic or dctcp (default cubic)")
    b = a.add_argument_group("per-iteration byte budget (exactly one of)")
    b.add_argument("--budget", metavar="BYTES",
                   help="bytes this host sends per iteration, e.g. 150MB, 1.5GiB "
                        "(1 B..1 TiB; no default: give one of the three)")
    b.add_argument("--gradient-bytes", metavar="BYTES",
                   help="model gradient size, with --workers/--collective, e.g. 100MB "
                        "(no default)")
    b.add_argument("--learn", action="store_true", help="learn it from observed iterations")
    a.add_argument("--workers", type=args_.integer(1, 1_000_000, "8"),
                   help="workers in the collective (1..1000000; required with "
                        "--gradient-bytes, no default)")
    a.add_argument("--collective", default="ring_allreduce",
                   help="ring_allreduce, tree_allreduce, reduce_scatter, all_gather, "
                        "reduce_scatter_all_gather, all_to_all or parameter_server "
                        "(default %(default)s)")
    a.add_argument("--role", default="worker",
                   help="worker or server (server: parameter_server only; default %(default)s)")
    a.add_argument("--servers", type=args_.integer(1, 1_000_000, "1"), default=1,
                   help="parameter servers (1..1000000, default %(default)s)")
    f = a.add_argument_group("aggressiveness F = intercept + slope * bytes_ratio")
    f.add_argument("--preset", help="default (slope 1, intercept 1) or standard (F = 1); "
                                    "default: default")
    f.add_argument("--slope", type=args_.finite(),
                   help="0..64 (default: the preset's, 1)")
    f.add_argument("--intercept", type=args_.finite(),
                   help="1/65536..64 (default: the preset's, 1)")
    f.add_argument("--cap", type=args_.finite(),
                   help="intercept..128 (default: none, F <= intercept + slope)")
    a.add_argument("--gap-ms", type=args_.finite(), default=None,
                   help="idle gap that starts a new iteration (0.05..60000, default 5)")
    a.add_argument("--signal", action="store_true",
                   help="the training loop signals each iteration's end (mltcp.hook, `mltcp "
                        "job signal`): boundaries come from the signals, never from idle "
                        "gaps; the budget still ends an iteration if a signal is missed "
                        "(default: off; the first signal turns it on)")
    a.add_argument("--stale-s", type=args_.finite(), default=None,
                   help="fall back to the standard CC when not refreshed for this long "
                        "(1..86400 or 0 = never; default 30)")
    c = a.add_argument_group("which sockets (at least one)")
    c.add_argument("--cgroup", metavar="PATH",
                   help="cgroup v2 path of the training processes, e.g. training/resnet "
                        "(default: none)")
    c.add_argument("--whole-host", action="store_true",
                   help="allow --cgroup / (the root cgroup: every socket of this host)")
    c.add_argument("--dst", action="append", default=[], metavar="ADDR[/LEN][:PORT[-PORT]]",
                   help="one rule: remote address or prefix AND port (1..65535) or port "
                        "range, e.g. 10.0.0.0/24:29500-29600, 10.0.0.7, [fd00::/64]:29500 (an "
                        "address without /LEN is one host); repeatable (default: none)")
    c.add_argument("--port", action="append", type=args_.port_range(), default=[],
                   metavar="PORT[-PORT]",
                   help="one rule: remote port or range (1..65535), any address; repeatable "
                        "(default: none)")
    c.add_argument("--local-port", action="append", type=args_.port_range(), default=[],
                   metavar="PORT[-PORT]",
                   help="one rule: local (listening) port or range (1..65535); repeatable "
                        "(default: none).  Separate rules are alternatives: a connection "
                        "matching any one joins the job")
    add_json_flag(a, "the job attached ({attached, id, cc, budget, ...})")

    d = jsub.add_parser("detach", help="detach a job (or --all)")
    d.add_argument("name", nargs="*", help="the jobs to detach (one or more; none if one "
                   "of them is not attached)")
    d.add_argument("--all", action="store_true", help="detach every attached job")
    add_json_flag(d, "the jobs detached ({detached})")
    lst = jsub.add_parser("list", help="attached jobs")
    add_json_flag(lst, "the jobs ({NAME: {id, cc, budget, learn, slope, ...}})")
    s = jsub.add_parser("signal", help="explicit end of iteration (from the training loop)")
    s.add_argument("name", help="the job whose iteration ended")
    add_json_flag(s, "the signal ({job, seq})")
    job.set_defaults(handler=cmd_job)


# --------------------------------------------------------------------------- commands


def cmd_doctor(args: argparse.Namespace) -> int:
    from mltcp.host import doctor

    checks = doctor.run_checks(compile_objects=not args.no_build)
    if args.json:
        emit(doctor.as_json(checks))
    else:
        print(doctor.as_table(checks))
    return 0 if all(c.ok for c in checks) else 1


def cmd_load(args: argparse.Namespace) -> int:
    from mltcp.host import datapath

    result = datapath.load(args.modules)
    if args.json:
        emit({"loaded": [datapath.cc_name(m) for m in result.loaded],
              "already": [datapath.cc_name(m) for m in result.already]})
        return 0
    for m in result.loaded:
        print(f"loaded {datapath.cc_name(m)}")
    for m in result.already:
        print(f"{datapath.cc_name(m)} was loaded already")
    return 0


def cmd_unload(args: argparse.Namespace) -> int:
    from mltcp.core.errors import SpecError
    from mltcp.host import datapath, jobs
    from mltcp.host.state import host_lock

    if args.all:
        try:
            names = list(jobs.Registry().read())
        except jobs.RegistryError:   # --all is the way out of a damaged registry
            names = []
        removed = datapath.unload_all()
        jobs.Registry().clear()
        if args.json:
            emit({"removed": removed, "jobs": names})
        else:
            print("removed " + ", ".join(removed + [f"job {n}" for n in names] or ["nothing"]))
        return 0
    if not args.modules:
        raise SpecError("modules", "none given", "name modules (reno cubic dctcp all) or --all")
    with host_lock():   # no job may attach to a module between the check and the unload
        wanted = datapath.parse_modules(args.modules)
        users = sorted(n for n, r in jobs.Registry().read().items() if r.spec.cc in wanted)
        if users:
            raise SpecError("modules", f"{', '.join(datapath.cc_name(m) for m in wanted)} "
                            f"in use by job(s) {', '.join(users)}",
                            "detach them first (`mltcp job detach NAME`), or `mltcp unload --all`")
        removed = datapath.unload(wanted)
    names = [datapath.cc_name(m) for m in removed]
    if args.json:
        emit({"unloaded": names})
    else:
        print("unloaded " + (", ".join(names) or "nothing"))
    return 0


def _job_spec(args: argparse.Namespace):  # type: ignore[no-untyped-def]
    """The flags of `mltcp job attach` as the fields a job file uses (one parser)."""
    from mltcp.host.jobfile import spec_from_fields

    return spec_from_fields({key: getattr(args, key, None) for key in (
        "name", "cc", "budget", "gradient_bytes", "workers", "collective", "role", "servers",
        "learn", "preset", "slope", "intercept", "cap", "gap_ms", "stale_s", "cgroup",
        "whole_host", "signal", "dst", "port", "local_port")})


def cmd_job(args: argparse.Namespace) -> int:
    from mltcp.core.errors import SpecError
    from mltcp.host import jobs

    if args.job_cmd == "attach":
        spec = _job_spec(args)
        rec = jobs.attach(spec)
        if args.json:
            emit({"attached": spec.name, "id": rec.id, **rec.spec.to_json()})
            return 0
        how = ("learning the budget" if spec.learn else f"budget {rec.spec.budget} B/iteration")
        print(f"attached job {spec.name} (id {rec.id}) to mltcp_{spec.cc}, {how}")
        for line in spec.describe_rules():
            print(f"  {line}")
        if spec.stale_s:
            print(f"keep it fresh with `mltcp agent`: the config expires after {spec.stale_s:g} s "
                  "and the job's flows then run the standard algorithm")
    elif args.job_cmd == "detach":
        if args.all:
            names = jobs.detach_all()
        elif not args.name:
            raise SpecError("name", "missing", "name a job or pass --all")
        else:
            names = [r.spec.name for r in jobs.detach_many(args.name)]
        if args.json:
            emit({"detached": names})
        elif args.all:
            print("detached " + (", ".join(names) or "nothing"))
        else:
            print(f"detached job{'s' if len(names) > 1 else ''} {', '.join(names)}")
    elif args.job_cmd == "list":
        reg = jobs.Registry().read()
        if args.json:
            emit({n: {"id": r.id, **r.spec.to_json()} for n, r in reg.items()})
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
        if args.json:
            emit({"job": args.name, "seq": seq})
            return 0
        print(f"job {args.name}: iteration boundary signalled (seq {seq})")
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    from mltcp.host import telemetry

    while True:
        statuses = telemetry.collect()
        if args.json:   # one document per refresh, one per line
            emit(telemetry.to_json(statuses))
        else:
            print(telemetry.to_table(statuses), flush=True)
        if not args.watch:
            return 0
        time.sleep(args.watch)
        if not args.json:
            print()


def cmd_metrics(args: argparse.Namespace) -> int:
    from mltcp.host import exposition

    sys.stdout.write(exposition.render(flows_per_job=args.flows))
    return 0


def cmd_agent(args: argparse.Namespace) -> int:
    from mltcp.host import logs
    from mltcp.host.agent import Agent
    from mltcp.host.state import STATE_DIR

    logs.setup(logging.INFO)
    if args.signal_socket == "":
        args.signal_socket = STATE_DIR / "agent.sock"
    Agent(interval_s=args.interval, metrics_port=args.metrics_port,
          metrics_addr=args.metrics_addr, config=args.config,
          signal_socket=args.signal_socket, metrics_flows=args.metrics_flows).run()
    return 0


def cmd_apply(args: argparse.Namespace) -> int:
    from mltcp.host import datapath, jobfile

    declared = jobfile.load_file(args.file)
    if not args.dry_run:
        datapath.require_bpf()
    result = jobfile.apply(declared, dry_run=args.dry_run)
    if args.json:
        emit({"dry_run": args.dry_run, **result.to_json()})
        return 0
    print(("would change: " if args.dry_run else "") + result.describe())
    return 0
