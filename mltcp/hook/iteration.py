"""One rank's iterations: the marks a training loop (or a communication hook) makes,
turned into one record per iteration, and the end-of-iteration signal.

Thread-safe: DDP completes its all-reduces on the collective library's threads, while
the training thread begins and ends iterations.
"""

from __future__ import annotations

import os
import socket
import sys
import threading
import time
from collections.abc import Iterator
from concurrent.futures import Future
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from mltcp.core import validate
from mltcp.core.errors import SpecError
from mltcp.hook import env
from mltcp.hook.records import IterationHookRecord, RecordWriter, record_path
from mltcp.hook.signalling import (
    DEFAULT_TIMEOUT_S,
    AgentClient,
    Signaller,
    SignalOutcome,
    checked_socket_path,
)


def now() -> float:
    """CLOCK_MONOTONIC seconds: the clock of the kernel's BPF timestamps, never stepped."""
    return time.clock_gettime(time.CLOCK_MONOTONIC)


@dataclass(frozen=True)
class HookStats:
    """Counts over the hook's life.  ``stray_reductions``: gradient reductions that
    happened outside ``with hook.iteration()`` (not in any record)."""

    iterations: int
    signals_sent: int
    signal_failures: int
    stray_reductions: int


@dataclass
class _Open:
    """The iteration in progress."""

    index: int
    start: float
    wall_offset: float                  # wall clock minus CLOCK_MONOTONIC at the start
    comm_start: float | None = None
    comm_end: float | None = None
    bytes: int = 0
    buckets: int = 0
    pending: int = 0                    # reductions handed over, not yet completed
    last_handed: bool = False           # DDP: the bucket with is_last() was handed over
    gpu_events: list[Any] = field(default_factory=list)   # CUDA completion events
    signal: Future[SignalOutcome] | None = None


class IterationHook:
    """Marks one rank's iterations and writes a record for each.

    ``out``: a directory (``hook-rank{rank}.jsonl`` in it) or a ``.jsonl`` file; None
    writes no file (the last record stays in :attr:`last`).  ``job``: the datapath
    job's name; needed to signal.  ``rank``/``world_size``: by default the initialised
    process group's, else ``RANK``/``WORLD_SIZE``.  ``signal``: send the agent an
    end-of-iteration signal for ``job`` once the iteration's communication is over.

    When the signal goes: the datapath's tracker counts a job's bytes per iteration
    against the budget, and the signal tells it where one iteration's bytes end.  The
    earliest moment all of them are out is the end of the iteration's communication, so
    that is when the hook signals: when the last DDP bucket's all-reduce completes, or at
    ``comm_end()`` in a plain loop.  Where the hook cannot know the last reduction (FSDP,
    a loop that never calls ``comm_end()``, CUDA, whose completion is only read at the
    end) it signals at :meth:`end`, still before the next iteration sends anything.  The
    signal is sent off the training thread; :meth:`end` waits for its answer (at most
    its 0.2 s deadline) so that the record says what became of it.
    """

    def __init__(self, out: str | os.PathLike[str] | None = None, *, job: str | None = None,
                 rank: int | None = None, world_size: int | None = None,
                 signal: bool = False, agent_socket: str | None = None,
                 signal_timeout_s: float = DEFAULT_TIMEOUT_S) -> None:
        self.rank, self.world_size = env.identity(rank, world_size)
        self.job = None if job is None else validate.job_name(job, "job")
        validate.flag(signal, "signal", "signal=True")
        if signal and self.job is None:
            raise SpecError("job", "is needed to signal the end of iterations",
                            "give job= (or MLTCP_JOB) the name the job was attached with, "
                            "as in `mltcp job attach resnet ...`")
        timeout = validate.number(signal_timeout_s, "signal_timeout_s", 0, 10, "0.2",
                                  lo_open=True)
        self._signaller = (Signaller(AgentClient(checked_socket_path(agent_socket), timeout),
                                     self.job) if signal and self.job else None)
        self.path = None if out is None else record_path(out, self.rank, self.world_size)
        self._writer = None if self.path is None else RecordWriter(self.path)
        self.host = socket.gethostname()
        self.pid = os.getpid()
        self.last: IterationHookRecord | None = None
        self._lock = threading.Lock()
        self._open: _Open | None = None
        self._next = 0
        self._stray = 0
        self._stray_warned = False
        self._attached = False

    # ------------------------------------------------------------------ the loop's marks

    def begin(self) -> None:
        """The iteration starts (before its forward pass)."""
        with self._lock:
            if self._open is not None:
                raise SpecError("begin()", f"iteration {self._open.index} has not ended",
                                "call end() first, or use `with hook.iteration():`")
            t = now()
            self._open = _Open(self._next, t, time.time() - t)

    def comm_begin(self) -> None:
        """Communication starts (the first call of an iteration counts)."""
        t = now()
        with self._lock:
            it = self._require_open("comm_begin()")
            if it.comm_start is None:
                it.comm_start = t

    def comm_end(self, *, last: bool = True) -> None:
        """Communication ended (the latest call of an iteration counts).  A loop with
        several communication phases per iteration passes ``last=False`` for all but
        the last one: the signal goes with the last."""
        t = now()
        with self._lock:
            it = self._require_open("comm_end()")
            if it.comm_start is None:
                raise SpecError("comm_end()", "no communication began in this iteration",
                                "call comm_begin() when it starts")
            it.comm_end = max(t, it.comm_end or t)
            if last:
                self._signal_now(it)

    def add_bytes(self, n: int) -> None:
        """Bytes this iteration handed to communication."""
        n = validate.at_least(n, "bytes", 0, "give a byte count, an integer >= 0")
        with self._lock:
            self._require_open("add_bytes()").bytes += n

    def end(self) -> IterationHookRecord:
        """The iteration ends (after its optimizer step): its record is written (and
        returned) after the signal's answer, if signalling."""
        with self._lock:
            it = self._require_open("end()")
            events, it.gpu_events = it.gpu_events, []
        if events:      # CUDA: the GPU's completion times, read once it is done
            from mltcp.hook import torch_comm

            done = torch_comm.cuda_completion(events)
            with self._lock:
                it.comm_end = max(done, it.comm_end or done)
        t = now()
        with self._lock:
            self._open = None
            self._next += 1
            if it.comm_start is not None and it.comm_end is None:
                it.comm_end = t         # begun, never ended: it lasted until the end
            self._signal_now(it)
        outcome = (self._signaller.outcome(it.signal) if self._signaller and it.signal
                   else SignalOutcome())

        def wall(t_mono: float | None) -> float | None:
            return None if t_mono is None else t_mono + it.wall_offset

        record = IterationHookRecord(
            job=self.job, rank=self.rank, world_size=self.world_size, iteration=it.index,
            start=it.start, comm_start=it.comm_start, comm_end=it.comm_end, end=t,
            start_wall=it.start + it.wall_offset, comm_start_wall=wall(it.comm_start),
            comm_end_wall=wall(it.comm_end), end_wall=t + it.wall_offset,
            bytes=it.bytes, buckets=it.buckets, host=self.host, pid=self.pid,
            signal_seq=outcome.seq, signal_error=outcome.error,
            signal_failures=self._signaller.failures if self._signaller else 0)
        if self._writer is not None:
            self._writer.write(record)
        self.last = record
        return record

    @contextmanager
    def iteration(self) -> Iterator[IterationHook]:
        """``with hook.iteration(): ...``: begin() before the step, end() after it.  A
        step that raises leaves no record (it did not complete)."""
        self.begin()
        try:
            yield self
        except BaseException:
            with self._lock:
                self._open = None
            raise
        self.end()

    # ------------------------------------------------------------------ communication hooks

    def _handed(self, nbytes: int, *, last: bool, at: float | None = None) -> int | None:
        """A gradient reduction was handed to communication (at CLOCK_MONOTONIC ``at``,
        default now); a token for its completion (None outside an iteration: such a
        reduction is counted, not recorded)."""
        t = now() if at is None else at
        with self._lock:
            it = self._open
            if it is None:
                self._stray += 1
                warn, self._stray_warned = not self._stray_warned, True
            else:
                if it.comm_start is None:
                    it.comm_start = t
                it.bytes += nbytes
                it.buckets += 1
                it.pending += 1
                it.last_handed = it.last_handed or last
                return it.index
        if warn:        # one write: ranks sharing a terminal must not interleave it
            sys.stderr.write("mltcp.hook: gradients were reduced outside `with "
                             "hook.iteration():`; those reductions are in no record (wrap "
                             "every training step)\n")
            sys.stderr.flush()
        return None

    def _completed(self, token: int | None, *, at: float | None = None,
                   gpu_event: Any = None) -> None:
        """The reduction of ``token`` completed: at CLOCK_MONOTONIC ``at`` (CPU), or when
        the GPU reaches ``gpu_event`` (read at end())."""
        with self._lock:
            it = self._open
            if token is None or it is None or it.index != token:
                return
            it.pending -= 1
            if gpu_event is not None:
                it.gpu_events.append(gpu_event)
            elif at is not None:
                it.comm_end = max(at, it.comm_end or at)
            if it.pending == 0 and it.last_handed and not it.gpu_events:
                self._signal_now(it)

    def attach_ddp(self, model: Any, *, inner_hook: Any = None,
                   inner_state: Any = None) -> None:
        """Time a ``DistributedDataParallel`` model's gradient all-reduces: the default
        all-reduce (PyTorch's own hook, timed), or ``inner_hook(inner_state, bucket)``,
        a DDP comm hook (fp16/bf16 compression, PowerSGD, ...) that DDP would otherwise
        have been given by ``model.register_comm_hook(inner_state, inner_hook)``, timed
        the same way (docs/hook.md says which bytes are recorded)."""
        from mltcp.hook import torch_comm

        self._refuse_second()
        torch_comm.attach_ddp(self, model, inner_hook=inner_hook, inner_state=inner_state)
        self._attached = True

    def attach_fsdp(self, model: Any) -> None:
        """Time an FSDP model's gradient reduce-scatters: ``fully_shard`` (FSDP2) or
        ``FullyShardedDataParallel`` (FSDP1); see :mod:`mltcp.hook.torch_comm`."""
        from mltcp.hook import torch_comm

        self._refuse_second()
        torch_comm.attach_fsdp(self, model)
        self._attached = True

    # ------------------------------------------------------------------ the rest

    @property
    def signalling(self) -> bool:
        """Whether the end of each iteration is signalled to the agent."""
        return self._signaller is not None

    def stats(self) -> HookStats:
        s = self._signaller
        return HookStats(iterations=self._next, signals_sent=s.sent if s else 0,
                         signal_failures=s.failures if s else 0,
                         stray_reductions=self._stray)

    def close(self) -> None:
        """Close the record file and stop the signal thread (records are on disk
        already: each is flushed as it is written)."""
        if self._writer is not None:
            self._writer.close()
        if self._signaller is not None:
            self._signaller.close()

    def __enter__(self) -> IterationHook:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _require_open(self, what: str) -> _Open:
        if self._open is None:
            raise SpecError(what, "no iteration is open",
                            "call it inside `with hook.iteration():` (or after begin())")
        return self._open

    def _signal_now(self, it: _Open) -> None:
        """Queue the iteration's signal, once (the caller holds the lock)."""
        if self._signaller is not None and it.signal is None:
            it.signal = self._signaller.submit(it.index)

    def _refuse_second(self) -> None:
        """One model per hook (a refused attach leaves the hook free to try again)."""
        if self._attached:
            raise SpecError("model", "the hook is attached to a model already",
                            "use one hook per model (one per process)")


def from_env(*, out: str | os.PathLike[str] | None = None, job: str | None = None,
             signal: bool | None = None, agent_socket: str | None = None) -> IterationHook:
    """The hook as the environment configures it (:mod:`mltcp.hook.env`); an argument
    given here wins over its variable."""
    return IterationHook(
        out if out is not None else env.env_text("MLTCP_HOOK_OUT"),
        job=job if job is not None else env.env_text("MLTCP_JOB"),
        signal=signal if signal is not None else env.env_flag("MLTCP_HOOK_SIGNAL"),
        # None: the hook reads $MLTCP_AGENT_SOCKET itself, and names it in a refusal
        agent_socket=agent_socket)
