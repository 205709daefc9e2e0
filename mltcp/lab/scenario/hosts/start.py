"""The synchronized start of a hosts run: how much slack to give, and whether it held.

Every job's workers are told one wall-clock moment to start their first iteration
(``MLTCP_START_AT``, plus the job's ``start_ms``); until then they start torchrun,
meet at the rendezvous and build the model.  A start-up longer than the slack used to
be missed silently: the workers found the moment past ("waits 0.0 s") and started at
once, one job seconds after the other, and the run still passed for synchronized.

A moment fixed at launch must leave room for the slowest start-up, so every run used to
wait out its whole slack.  Now the slack is only the latest moment: once every job's
rank 0 said it was ready, the backend writes each job's *go file* on its hosts
(``MLTCP_START_GO``, :func:`mltcp.core.workload.go_moment`) with a moment
``GO_AHEAD_S`` ahead, and the workers start then (rank 0 prints ``start: go at T``);
the skew is measured from that moment.  Should a file never come, that job's workers
start at ``MLTCP_START_AT``, and the job is late.

The slack follows the start-up measured on the run's own hosts
(:class:`StartClock`: the longest start-up seen so far, times
``SLACK_FACTOR``, plus ``SLACK_MARGIN_S``; the first run uses the given or default
slack), each worker reports when it was ready (the workload's ``start: ready at``
line), and :func:`start_record` measures each job's first-iteration *skew* (its first
iteration's start minus the moment it was told).  A run is *synchronized* only when
every job's skew is within ``SYNC_TOLERANCE_S``; the record goes into the trace
(``provenance.start``) and the report, and the backend reruns a run that missed its
start once with the slack its start-up called for.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

# The first run's latest moment (torchrun, rendezvous and model build): only a fallback
# now that the jobs start once all are ready, so it is generous (a cold first import of
# PyTorch measured 26-27 s on a loaded 2-core machine, and over 30 s in CI's first run).
DEFAULT_SLACK_S = 60.0
MIN_SLACK_S = 3.0             # never less, however quick the hosts were
SLACK_FACTOR = 1.5            # the slack over the longest start-up measured
SLACK_MARGIN_S = 2.0
SYNC_TOLERANCE_S = 0.05       # a job's first iteration this close to its moment: on time
# The go moment, this long after every job was ready: the go files' writes (a line to
# the shell the run keeps open on each host, all at once; a new SSH command where that
# shell is gone, up to a second on busy CPUs) and each rank's poll fit in it.
GO_AHEAD_S = 1.0

# The workload's line (mltcp.workloads.ddp), rank 0, once every rank is ready.
READY_RE = re.compile(r"^start: ready at (\d+(?:\.\d+)?)", re.MULTILINE)


def ready_at(log_text: str) -> float | None:
    """When a job's ranks were all ready (epoch seconds), from its rank 0's output."""
    found = READY_RE.search(log_text)
    return float(found.group(1)) if found else None


@dataclass
class StartClock:
    """The slack of each run of one backend: follows the start-ups measured so far."""

    first_slack_s: float = DEFAULT_SLACK_S
    startups_s: list[float] = field(default_factory=list)

    def slack_s(self) -> float:
        if not self.startups_s:
            return self.first_slack_s
        return max(MIN_SLACK_S, SLACK_FACTOR * max(self.startups_s) + SLACK_MARGIN_S)

    def measured(self, record: Mapping) -> None:
        """Learn from a run's :func:`start_record`."""
        self.startups_s += [j["startup_s"] for j in record["jobs"].values()
                            if j.get("startup_s") is not None]


def start_record(launched_at: float, slack_s: float, start_at: Mapping[str, float],
                 first_start: Mapping[str, float], ready: Mapping[str, float | None],
                 attempt: int = 1) -> dict:
    """The start of one run, for the trace's provenance: per job the moment it started
    by (``start_at``, epoch s: its go file's, or else the slack's), its first
    iteration's start (``first_start``), when its ranks were ready, the skew, the
    start-up (ready - launch) and how long after the launch its moment came
    (``told_s``; below the slack when the go file was used); ``synchronized`` only when
    every skew is within the tolerance."""
    jobs = {}
    for name, told in start_at.items():
        skew = first_start[name] - told
        r = ready.get(name)
        jobs[name] = {"skew_s": round(skew, 6),
                      "startup_s": round(r - launched_at, 3) if r is not None else None,
                      "told_s": round(told - launched_at, 3),
                      "late": skew > SYNC_TOLERANCE_S}
    return {"slack_s": round(slack_s, 3), "attempt": attempt,
            "tolerance_s": SYNC_TOLERANCE_S,
            "max_skew_s": round(max(abs(j["skew_s"]) for j in jobs.values()), 6),
            "synchronized": all(abs(j["skew_s"]) <= SYNC_TOLERANCE_S for j in jobs.values()),
            "jobs": jobs}


def late_jobs(record: Mapping) -> dict[str, Mapping]:
    """The jobs of one run whose first iteration missed its moment (either way)."""
    return {name: j for name, j in record["jobs"].items()
            if abs(j["skew_s"]) > record["tolerance_s"]}


def describe(record: Mapping) -> str:
    """One line: which jobs missed the start, by how much, and the start-up behind it."""
    late = [f"job {name} {j['skew_s']:+.2f} s (start-up "
            f"{'?' if j['startup_s'] is None else format(j['startup_s'], '.1f')} s)"
            for name, j in late_jobs(record).items()]
    if not late:
        told = max(j.get("told_s", record["slack_s"]) for j in record["jobs"].values())
        return (f"synchronized start: every job within {record['max_skew_s'] * 1000:.0f} ms "
                f"of its moment, {told:.1f} s after the launch (slack {record['slack_s']:g} s)")
    return (f"start NOT synchronized with slack {record['slack_s']:g} s: " + ", ".join(late))


def runs_not_synchronized(records: Sequence[tuple[str, Mapping | None]]) -> list[str]:
    """The names of the runs whose record says they missed the start."""
    return [name for name, rec in records if rec is not None and not rec["synchronized"]]
