"""The whole test suite in three groups, as scripts/test runs it (standard library only),
and beside the first, at idle priority, the engine's compile and the tests marked idle.

Why three: the tests that measure the datapath (rates, shares, windows, every packet
on the wire; marked ``quiet``) read this host's CPU if anything else runs, so they run
first, alone.  The other tests of this host's datapath, namespaces and root state
(marked ``host``) must not overlap each other (names and pins collide), so they run one
at a time; they mostly wait on the kernel, SSH and sleeps (about 0.8 of one core), so
they run *beside* the pure-Python tests, which take every core (pytest-xdist).  Run one
after the other the three took 18 minutes on a 2-core machine; this way they fit the
suite's 15.

The host group's output is kept in a file and printed after the parallel group's, so
the two never interleave.  Ctrl-C reaches every pytest (they share the terminal's
process group) and each unwinds its own fixtures: the host tests undo their
namespaces and modules.  Exit status: non-zero if any group failed.

The quiet group leaves about half of a 2-core machine's cycles unused (measured: 52 %
idle over its 5 min 47 s), so two things run beside it at idle priority (SCHED_IDLE:
they get only cycles no other task wants, so the quiet tests see no load, and their
wait for an idle CPU, tests/conftest.py's ``quiet_host``, counts that time as idle): numba's
compile of the fluid engine into its cache (on a new checkout, as on CI, every pytest
process would otherwise compile it, ~45 s each), and the tests marked ``idle`` (long
CPU-only work with no timing assertions).  When the quiet group ends, whatever of them
is left runs at normal priority (where the user may not raise it back, as without root
under an RLIMIT_NICE of 0, it finishes on the cycles the others leave); the engine's
compile is waited for before the others start, so that they load it from the cache.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# The slowest tests of each group are listed: the suite's time is a budget (15 min).
PYTEST = [sys.executable, "-m", "pytest", "-ra", "--durations=15"]
# Every compiled function of the fluid engine, into numba's cache (or loaded from it).
WARM_ENGINE = "from mltcp.lab.models import fluid_engine; fluid_engine.ensure_compiled()"


def _status(code: int) -> int:
    """A pytest exit status; 5 (nothing collected, e.g. a group empty here) is not a failure."""
    return 0 if code == 5 else code


def _banner(text: str) -> None:
    print(f"\n==== {text} ====", flush=True)


def _idle_priority() -> None:
    """In a child before it runs: it, and every process it starts, get only the cycles
    no other task wants (SCHED_IDLE; Linux only, elsewhere it runs as it is)."""
    if hasattr(os, "SCHED_IDLE"):
        os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))


def _descendants(pid: int) -> list[int]:
    """pid and every live process under it, from /proc (empty where there is none)."""
    parents: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            # "pid (comm) state ppid ...": comm may hold spaces and parentheses
            ppid = int(stat.read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue                              # gone since the listing
        parents.setdefault(ppid, []).append(int(stat.parent.name))
    tree, todo = [], [pid]
    while todo:
        here = todo.pop()
        tree.append(here)
        todo.extend(parents.get(here, []))
    return tree


def _normal_priority(process: subprocess.Popen[bytes]) -> None:
    """Back to the normal policy: the process, its children and all their threads."""
    if not hasattr(os, "SCHED_OTHER") or process.poll() is not None:
        return
    for pid in _descendants(process.pid):
        for task in Path(f"/proc/{pid}/task").glob("*"):
            with contextlib.suppress(OSError, ValueError):    # gone, or not ours to change
                os.sched_setscheduler(int(task.name), os.SCHED_OTHER, os.sched_param(0))


def main() -> int:
    started = time.monotonic()
    with (tempfile.NamedTemporaryFile("w+", prefix="mltcp-engine-", suffix=".log") as warm_log,
          tempfile.NamedTemporaryFile("w+", prefix="mltcp-idle-tests-", suffix=".log") as idle_log,
          tempfile.NamedTemporaryFile("w+", prefix="mltcp-host-tests-", suffix=".log") as log):
        _banner("1/3: tests that measure the datapath, alone (-m 'host and quiet'); the "
                "engine's compile and the tests marked idle use the cycles they leave")
        warm = subprocess.Popen([sys.executable, "-c", WARM_ENGINE], preexec_fn=_idle_priority,
                                stdout=warm_log, stderr=subprocess.STDOUT)
        idle = subprocess.Popen([*PYTEST, "-p", "no:cacheprovider", "-m", "idle and not host"],
                                preexec_fn=_idle_priority, stdout=idle_log,
                                stderr=subprocess.STDOUT)
        host = None
        try:
            quiet = _status(subprocess.run([*PYTEST, "-m", "host and quiet"]).returncode)
            _normal_priority(warm)
            _normal_priority(idle)
            warm_status = warm.wait()

            _banner("2/3 and 3/3: the other host tests, one at a time, beside the pure-Python "
                    f"tests on {os.cpu_count()} cores; the host tests' output follows theirs")
            host = subprocess.Popen([*PYTEST, "-p", "no:cacheprovider", "-m",
                                     "host and not quiet"], stdout=log, stderr=subprocess.STDOUT)
            parallel = _status(subprocess.run(
                [*PYTEST, "-m", "not host and not idle", "-n", str(os.cpu_count() or 1)]
            ).returncode)
            host_status = _status(host.wait())
            idle_status = _status(idle.wait())
        except KeyboardInterrupt:
            # they got the same SIGINT: let the host tests undo their fixtures
            for process in (warm, idle, host):
                if process is not None:
                    process.wait()
            raise
        finally:
            for title, output in (("the fluid engine's compile into numba's cache (nothing "
                                   "where it was there)", warm_log),
                                  ("the tests marked idle (-m 'idle and not host')", idle_log),
                                  ("the host tests that ran beside them (-m 'host and not "
                                   "quiet')", log)):
                _banner(title)
                output.flush()
                sys.stdout.write(Path(output.name).read_text())
                sys.stdout.flush()
    failed = [name for name, code in (("quiet", quiet), ("engine compile", warm_status),
                                      ("parallel", parallel), ("host", host_status),
                                      ("idle", idle_status)) if code]
    minutes, seconds = divmod(round(time.monotonic() - started), 60)
    _banner(f"suite: {'FAILED: ' + ', '.join(failed) if failed else 'passed'} "
            f"in {minutes} min {seconds} s")
    return 1 if failed else 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        sys.exit(130)
