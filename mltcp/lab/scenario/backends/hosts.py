"""The ``hosts`` backend: plans as real PyTorch DDP training on real hosts over SSH.

The inventory (:mod:`mltcp.lab.scenario.hosts.inventory`) says which machines play the
scenario's hosts (h1 is the first listed, h2 the second, ...); each job's ``workload``
says what it trains.  Per plan: every host is asked for its facts and, for an MLTCP
scheme, its ``mltcp doctor`` (a host that cannot run the scheme stops the run with a
table of what is missing where); the modules are loaded once per kernel, each job's
workers get a cgroup attached as an MLTCP job, ``torchrun`` starts them with the
training-loop hook, and the hook's per-iteration records become the common trace,
with the hosts' kernels, torch/NCCL versions and GPUs as provenance, and, for an MLTCP
scheme, what the datapath counted per job (``provenance.datapath``: iterations, gap and
budget boundaries, signals; the measure of its iteration detection against the hook's).
The dedicated baseline is each job alone on the same hosts (the runner's ``only_job``
plans).
The jobs start their first iterations at one moment, a second after the last of them
was ready (the go files); the slack, the latest moment should that fail, follows the
start-up measured on the hosts (:mod:`mltcp.lab.scenario.hosts.start`), each job's
first-iteration skew is recorded in the trace (``provenance.start``), and a run whose
jobs missed the moment is run again once with a slack its start-up calls for (still
missed: recorded as not synchronized, and the report says so).
Everything is undone afterwards, also on a failure, Ctrl-C or SIGTERM.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path

from mltcp.core.errors import CapabilityError, SpecError
from mltcp.lab.scenario.backends.base import Backend, Capabilities, Progress
from mltcp.lab.scenario.hosts.start import DEFAULT_SLACK_S, StartClock, describe
from mltcp.lab.scenario.plan import RunPlan
from mltcp.lab.scenario.trace import Trace

# What a host must pass in `mltcp doctor` to run an MLTCP scheme.
REQUIRED_CHECKS = ("privileges", "kernel", "btf", "kfuncs", "bpffs", "cgroup2", "libbpf", "build")


class HostsBackend(Backend):
    name = "hosts"
    capabilities = Capabilities(exclusive_host=True, phases=False, records=frozenset())

    def __init__(self, inventory: str | Path | None = None, keep_logs: str | Path | None = None,
                 timeout_s: float = 3600.0, start_slack_s: float | None = None) -> None:
        self.inventory_path = inventory
        self.keep_logs = Path(keep_logs) if keep_logs is not None else None
        self.timeout_s = timeout_s
        self.clock = StartClock(DEFAULT_SLACK_S if start_slack_s is None else start_slack_s)

    def require(self) -> None:
        for tool in ("ssh", "scp"):
            if shutil.which(tool) is None:
                raise CapabilityError(f"the hosts backend needs the OpenSSH client ({tool}): "
                                      "apt-get install openssh-client")
        if self.inventory_path is None:
            raise SpecError("--inventory", "the hosts backend needs an inventory of the hosts",
                            "give --inventory FILE (docs/testbed.md shows one)")

    def inventory(self):  # type: ignore[no-untyped-def]
        from mltcp.lab.scenario.hosts.inventory import load_inventory

        assert self.inventory_path is not None
        return load_inventory(self.inventory_path)

    def check(self, plan: RunPlan) -> None:
        super().check(plan)
        from mltcp.lab.scenario.hosts.training import host_for

        inventory = self.inventory()
        for job in plan.jobs:
            if job.spec.workload is None:
                raise SpecError(f"jobs[{job.index}].workload",
                                "the hosts backend runs real training and the job has no "
                                "workload", 'add workload = {model = "resnet18", batch = 8}')
            for h in job.hosts:
                host_for(plan, inventory, h, f"jobs[{job.index}].placement")

    def run(self, plans: Sequence[RunPlan], progress: Progress | None = None,
            parallel: int = 1) -> Iterator[tuple[int, Trace]]:
        inventory = self.inventory()
        for i, plan in enumerate(plans):
            yield i, self._run_one(plan, inventory, progress)

    def _run_one(self, plan: RunPlan, inventory, progress: Progress | None) -> Trace:  # type: ignore[no-untyped-def]
        """One plan; run again once when its jobs missed their synchronized start."""
        say = progress or (lambda _msg: None)
        for attempt in (1, 2):
            trace = self._attempt(plan, inventory, progress, attempt)
            record = trace.provenance["start"]
            self.clock.measured(record)
            if record["synchronized"] or attempt == 2:
                say(f"{plan.stem}: {describe(record)}")
                return trace
            say(f"{plan.stem}: {describe(record)}; running it again with slack "
                f"{self.clock.slack_s():.1f} s")
        raise AssertionError("unreachable")

    def _attempt(self, plan: RunPlan, inventory, progress: Progress | None,  # type: ignore[no-untyped-def]
                 attempt: int) -> Trace:
        from mltcp.lab.scenario.hosts.training import HostRun

        workdir = Path(tempfile.mkdtemp(prefix="mltcp-hostsrun-"))
        run = HostRun(plan, inventory, workdir, progress, self.clock.slack_s())
        try:
            run.open()
            if plan.scheme.mltcp:
                _require_doctor(run)
            run.prepare()
            run.start()
            run.wait(self.timeout_s)
            if plan.scheme.mltcp:
                run.read_datapath()
            records = run.collect()
            return _trace(plan, run, records, run.start_record(records, attempt))
        finally:
            run.close()
            if self.keep_logs is not None:
                dest = self.keep_logs / (plan.stem if attempt == 1
                                         else f"{plan.stem}-attempt{attempt}")
                dest.parent.mkdir(parents=True, exist_ok=True)
                shutil.copytree(workdir, dest, dirs_exist_ok=True,
                                ignore=shutil.ignore_patterns("ssh"))
            shutil.rmtree(workdir, ignore_errors=True)


def _require_doctor(run) -> None:  # type: ignore[no-untyped-def]
    """Stop before anything is changed when a host cannot run an MLTCP scheme: one table
    of host, check and fix."""
    failures = []
    for name, remote in run.remotes.items():
        doctor = remote.doctor()
        for check in doctor["checks"]:
            if check["name"] in REQUIRED_CHECKS and not check["ok"]:
                failures.append((name, check["name"], check.get("fix") or check["detail"]))
    if failures:
        width = max(len(h) for h, _c, _f in failures)
        rows = "\n".join(f"  {h:<{width}}  {c:<10}  {f}" for h, c, f in failures)
        raise CapabilityError(f"{len(failures)} doctor check(s) failed for scheme "
                              f"{run.plan.scheme.name}:\n{rows}")


def _trace(plan: RunPlan, run, records, start: dict) -> Trace:  # type: ignore[no-untyped-def]
    from mltcp.lab.common.provenance import provenance
    from mltcp.lab.scenario.trace import IterationRecord, JobTrace

    t0 = min(r.start_wall for recs in records.values() for r in recs)
    jobs = []
    for on in run.jobs:
        its = []
        for r in records[on.plan.name]:
            # An iteration that communicated nothing has no phase: an empty one at its end.
            comm_start = r.comm_start_wall if r.comm_start_wall is not None else r.end_wall
            comm_end = r.comm_end_wall if r.comm_end_wall is not None else comm_start
            its.append(IterationRecord(index=r.iteration, start=r.start_wall - t0,
                                       comm_start=comm_start - t0, comm_end=comm_end - t0,
                                       end=r.end_wall - t0, bytes=r.bytes))
        jobs.append(JobTrace(name=on.plan.name, links=on.plan.links or ("hosts",),
                             iterations=tuple(its)))
    return Trace(scenario=plan.scenario.name, scheme=plan.scheme.name, backend="hosts",
                 seed=plan.seed, jobs=tuple(jobs),
                 provenance=provenance({"hosts": [f.to_dict() for f in run.facts.values()],
                                        "datapath": run.datapath_counts,
                                        "start": start}),
                 params=plan.trace_params())


BACKEND = HostsBackend
