"""The DCQCN tuner: poll the NIC's byte counter, track iterations, rewrite the knobs.

Per poll: the bytes sent since the previous poll go to the project's reference
:class:`mltcp.core.iteration.IterationTracker` -- the very state machine the TCP datapath runs,
so iteration boundaries mean the same thing on RoCE and TCP hosts:

* a poll that sees traffic after polls that saw none is the tracker's *tx start* (it
  starts a new iteration when the silence exceeded ``gap``: the compute phase);
* the poll's bytes are then *acked bytes*: the counter wraps at the budget, and F is
  evaluated in the same Q16.16 arithmetic as in the kernel.

Polling blurs the silence by up to one poll interval, so ``gap`` must be at least two
poll intervals. The quantised F then sets the knobs (see :mod:`mltcp.core.dcqcn.policy`).

Safety, in the order things happen:

0. the tuner holds an flock on the port's lock file (``<iface>.lock`` next to the
   snapshot) from start to the end of its restore: a second tuner on the port is refused
   with its pid, and ``mltcp dcqcn restore`` will not pull the knobs from under it;
1. before the first write, every knob of the port is snapshotted to disk
   (:mod:`mltcp.host.dcqcn.snapshot`); a snapshot left by an earlier run blocks the start;
2. the values about to be written are recorded on disk before they are written;
3. a knob is written only if its target changed, and right before writing it is read
   back: if it no longer holds what the tuner left there, someone else edited it, and
   the tuner backs off that knob for good (it is checked at every iteration boundary
   too) and leaves that person's value in place on exit;
4. :meth:`Tuner.close` (also on an exception, Ctrl-C or SIGTERM, via ``with``) puts
   every knob the tuner changed back, with SIGINT/SIGTERM/SIGHUP blocked so a second
   signal cannot cut the restore short. A SIGKILL leaves the snapshot on disk for
   ``mltcp dcqcn restore``.

Advice-only mode runs the same loop over a :class:`DryRunBackend`: nothing is written
and no snapshot is made; every change is logged as what it *would* have been.
"""

from __future__ import annotations

import contextlib
import logging
import signal
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

from mltcp.core import validate
from mltcp.core.aggressiveness import FP_ONE
from mltcp.core.dcqcn.knobs import KNOB_BY_NAME, knob
from mltcp.core.dcqcn.policy import DEFAULT_POLL_NS, DcqcnPolicy
from mltcp.core.errors import CapabilityError, MltcpError, SpecError
from mltcp.core.iteration import IterationTracker
from mltcp.core.signals import TEARDOWN_SIGNALS
from mltcp.host.dcqcn.backends import Backend, DryRunBackend
from mltcp.host.dcqcn.counters import ByteCounter, DeltaSampler
from mltcp.host.dcqcn.snapshot import RestoreReport, StateFile, restore
from mltcp.host.ownership import Held, Holder, OwnerLock

DEFAULT_GAP_NS = 10_000_000  # 10 ms of silence is a compute phase (>= 2 polls)
BASES = ("current", "mlx5")

log_ = logging.getLogger("mltcp.dcqcn")


@dataclass(frozen=True)
class TunerConfig:
    """What to tune and how; validated so that a bad flag fails before anything is read."""

    budget: int
    policy: DcqcnPolicy
    gap_ns: int = DEFAULT_GAP_NS
    poll_ns: int = DEFAULT_POLL_NS
    advise: bool = False
    base: str = "current"
    restore_foreign: bool = False

    def __post_init__(self) -> None:
        validate.at_least(self.budget, "budget", 1,
                          "give the bytes this host sends per iteration, e.g. --budget 150MB")
        if not validate.is_integer(self.poll_ns) or self.poll_ns <= 0:
            raise SpecError("poll_ms", f"must be > 0 (got {self.poll_ns / 1e6:g} ms)",
                            "use e.g. --poll-ms 2")
        if not validate.is_integer(self.gap_ns) or self.gap_ns < 2 * self.poll_ns:
            raise SpecError("gap_ms", f"must be at least two polls ({2 * self.poll_ns / 1e6:g} "
                            f"ms; got {self.gap_ns / 1e6:g} ms): polling blurs silences by one "
                            "poll", "raise --gap-ms or lower --poll-ms")
        if self.base not in BASES:
            raise SpecError("base", f"unknown base {self.base!r}",
                            "use current (scale the values found at start) or mlx5 (scale the "
                            "mlx5 defaults)")


@dataclass(frozen=True)
class Change:
    """One knob write (or, in advice mode, one write that would have happened), with why."""

    knob: str
    old: int
    new: int
    iteration: int
    bytes_ratio: float
    f: float
    f_q: float
    advise: bool

    def describe(self) -> str:
        verb = "would set" if self.advise else "set"
        return (f"iteration {self.iteration} bytes_ratio {self.bytes_ratio:.3f} F {self.f:.3f} "
                f"(quantised {self.f_q:g}): {verb} {self.knob} {self.old} -> {self.new}")


@dataclass(frozen=True)
class IterationStatus:
    """What a finished iteration looked like, for the per-iteration status line."""

    iteration: int
    bytes: int
    peak_f: float
    writes: int
    values: dict[str, int]

    def line(self) -> str:
        knobs = " ".join(f"{n}={v}" for n, v in self.values.items())
        return (f"iteration {self.iteration:>5}: {self.bytes / 1e6:,.1f} MB sent, "
                f"peak F {self.peak_f:.3f}, {self.writes} knob writes; now {knobs}")


@contextlib.contextmanager
def _signals_blocked() -> Iterator[None]:
    """Hold SIGINT/SIGTERM/SIGHUP back (main thread only) so a restore runs to its end
    (knob files only: no child process inherits the mask)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    old = signal.pthread_sigmask(signal.SIG_BLOCK, set(TEARDOWN_SIGNALS))
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


@dataclass
class _IterationStats:
    start_total: int = 0
    peak_f: float = 0.0
    writes: int = 0


class Tuner:
    """One port, one job: use as ``with Tuner(...) as t: t.run()``."""

    def __init__(self, backend: Backend, counter: ByteCounter, config: TunerConfig,
                 state_path: Path | None, *, clock: Callable[[], int] = time.monotonic_ns,
                 log: Callable[[str], None] | None = None,
                 on_iteration: Callable[[IterationStatus], None] | None = None) -> None:
        if config.advise and not isinstance(backend, DryRunBackend):
            backend = DryRunBackend(backend)
        if not config.advise and isinstance(backend, DryRunBackend):
            raise SpecError("advise", "the dry-run backend never writes",
                            "add --advise, or run on a host with the NIC")
        if not config.advise and state_path is None:
            raise SpecError("state_dir", "a tuner that writes needs a snapshot file",
                            "pass --state-dir")
        self.backend = backend
        self.config = config
        self.policy = config.policy
        self.state_path = state_path
        self.sampler = DeltaSampler(counter)
        self.tracker = IterationTracker(config.budget, config.gap_ns,
                                        config.policy.agg.to_fixed())
        self.clock = clock
        self.log = log or log_.info
        self.on_iteration = on_iteration
        self.state: StateFile | None = None
        self.lock: OwnerLock | None = None
        self.baseline: dict[str, int] = {}
        self.expected: dict[str, int] = {}  # what each tuned knob should hold right now
        self.backed_off: set[str] = set()
        self.changes: list[Change] = []
        self._idle = True
        self._started = False
        self._closed = False
        self._stats = _IterationStats()

    # -- lifecycle -------------------------------------------------------------------

    def __enter__(self) -> Tuner:
        self.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    def start(self) -> None:
        """Check the knobs exist, snapshot them to disk, and take the counter's baseline."""
        missing = [n for n in self.policy.knobs if not self.backend.has(knob(n))]
        if missing:
            raise CapabilityError(f"{self.backend.describe()} lacks {', '.join(missing)}, "
                                  f"which {self.policy.mode} mode scales; fix: use the other "
                                  "--mode, or update the NIC driver")
        if not self.config.advise:
            assert self.state_path is not None
            self.lock = take_port(self.state_path.with_suffix(".lock"), self.backend.key)
            try:
                self.state = StateFile.create(self.state_path, self.backend)
            except BaseException:
                self.lock.release()
                raise
            self.log(f"snapshot of {len(self.state.snapshot.raw)} knobs saved to "
                     f"{self.state_path}")
        current = {n: self.backend.read(knob(n)) for n in self.policy.knobs}
        if self.config.base == "mlx5":
            self.baseline = {n: current[n] if (d := KNOB_BY_NAME[n].default) is None else d
                             for n in current}
        else:
            self.baseline = dict(current)
        self.expected = dict(current)
        self.sampler.sample()
        self._stats = _IterationStats(start_total=0, peak_f=1.0)
        self._started = True
        agg = self.policy.agg
        self.log(f"tuning {', '.join(self.policy.knobs)} on {self.backend.describe()}: "
                 f"F = {agg.intercept:g} + {agg.slope:g} * bytes_ratio"
                 f"{'' if agg.cap is None else f' (cap {agg.cap:g})'}, step {self.policy.f_step:g}"
                 f", budget {self.config.budget} B, baseline "
                 f"{', '.join(f'{n}={v}' for n, v in self.baseline.items())}; "
                 f"bytes from {self.sampler.counter.description}")

    def close(self) -> RestoreReport | None:
        """Put back every knob the tuner changed (idempotent; returns None in advice mode)."""
        if self._closed:
            return None
        self._closed = True
        close_counter = getattr(self.sampler.counter, "close", None)
        if close_counter is not None:     # an ethtool counter's socket
            close_counter()
        if self.config.advise:
            n = len(self.changes)
            self.log(f"advice only: {n} change{'s' * (n != 1)} would have been made; "
                     "nothing was written")
            return None
        try:
            if self.state is None:
                return None
            with _signals_blocked():
                report = restore(self.backend, self.state.snapshot,
                                 force=self.config.restore_foreign)
                if report.ok:
                    self.state.remove()
                for line in report.lines():
                    self.log(line)
                if not report.ok:
                    self.log(f"snapshot kept at {self.state.path}: retry with "
                             f"`mltcp dcqcn restore --iface {self.backend.key}`")
            return report
        finally:
            if self.lock is not None:   # after the restore: the port is free again
                self.lock.release()

    # -- the loop --------------------------------------------------------------------

    def run(self, duration_ns: int | None = None, stop: Callable[[], bool] = lambda: False,
            sleep: Callable[[float], None] = time.sleep) -> None:
        """Poll until ``stop()``, ``duration_ns`` or an exception (then ``close`` restores)."""
        deadline = None if duration_ns is None else self.clock() + duration_ns
        while not stop():
            self.step()
            if deadline is not None and self.clock() >= deadline:
                return
            sleep(self.config.poll_ns / 1e9)

    def step(self) -> list[Change]:
        """One poll: account the new bytes, then bring the knobs to the quantised F."""
        if not self._started:
            raise SpecError("tuner", "step() before start()", "use `with Tuner(...) as t`")
        now = self.clock()
        delta = self.sampler.sample()
        st = self.tracker.state
        before, total_before, gap_boundary = st.iteration, st.total_bytes, False
        if delta:
            if self._idle:  # idle -> sending: a compute gap may end here
                gap_boundary = self.tracker.on_tx_start(now)
            self.tracker.on_ack(delta, now)
            self._idle = False
        else:
            self._idle = True
        f = st.f_fp / FP_ONE
        if st.iteration != before:
            # A gap ends the iteration before this poll's bytes; a wrap inside them.
            self._finish_iteration(before, total_before if gap_boundary
                                   else st.total_bytes - st.bytes_in_iter)
            self._check_foreign(list(self.expected))
        self._stats.peak_f = max(self._stats.peak_f, f)

        targets = self.policy.targets(self.baseline, f)
        pending = {n: t for n, t in targets.items()
                   if n not in self.backed_off and t != self.expected[n]}
        if not pending:
            return []
        self._check_foreign(list(pending))
        pending = {n: t for n, t in pending.items() if n not in self.backed_off}
        if not pending:
            return []
        with _signals_blocked():  # a signal between truncate and write would empty a file
            if self.state is not None:
                self.state.mark_ours(pending)  # on disk before the knob changes
            self.backend.write_many(pending)
        made = [Change(n, self.expected[n], t, st.iteration, self.tracker.bytes_ratio, f,
                       self.policy.quantize(f), self.config.advise)
                for n, t in pending.items()]
        for c in made:
            self.expected[c.knob] = c.new
            self.log(c.describe())
        self.changes += made
        self._stats.writes += len(made)
        return made

    def _check_foreign(self, names: list[str]) -> None:
        """Back off every knob that no longer holds what the tuner left in it."""
        for name in names:
            if name in self.backed_off:
                continue
            found = self.backend.read(knob(name))
            if found == self.expected[name]:
                continue
            self.backed_off.add(name)
            if self.state is not None:
                self.state.mark_backed_off(name)
            keep = ("it will be restored anyway (--restore-foreign)"
                    if self.config.restore_foreign else f"it stays {found} on exit")
            self.log(f"{name}: found {found} where the tuner left {self.expected[name]}: "
                     f"someone else set it; backing off (no more writes to it; {keep})")

    def _finish_iteration(self, iteration: int, end_total: int) -> None:
        status = IterationStatus(iteration, end_total - self._stats.start_total,
                                 self._stats.peak_f, self._stats.writes, dict(self.expected))
        self._stats = _IterationStats(start_total=end_total, peak_f=0.0)
        if self.on_iteration is not None:
            self.on_iteration(status)


def take_port(path: Path, key: str) -> OwnerLock:
    """The port's tuner lock, held until :meth:`Tuner.close`; a live tuner on the port
    is a one-line error naming its pid."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    try:
        return OwnerLock.acquire(path)
    except Held as held:
        raise MltcpError(busy_port(key, held.holder)) from None


def busy_port(key: str, holder: Holder | None, force_flag: bool = False) -> str:
    """One line: which live tuner holds the port, and the fix (stop it; or ``--force``)."""
    pid = holder.pid if holder and holder.pid > 0 else "PID"
    who = holder.describe() if holder else "an unknown process"
    return (f"{key} is tuned by a live `mltcp dcqcn run` ({who}): stop it first (kill {pid})"
            f"{' or --force' if force_flag else ''}")


def advice_summary(changes: list[Change]) -> list[str]:
    """Per knob: the range of values advice mode would have written, and how often."""
    seen: dict[str, list[int]] = {}
    for c in changes:
        seen.setdefault(c.knob, []).append(c.new)
    return [f"{n}: {len(v)} writes, values {min(v)}..{max(v)}" for n, v in seen.items()]
