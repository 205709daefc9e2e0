"""The training-loop hook: what a training script imports to tell MLTCP its iterations.

MLTCP's datapath finds iterations on the wire (bytes against a budget, idle gaps); this
module gives the ground truth from inside the training loop, for three uses:

* **records**: one JSON line per iteration and rank (start, communication start/end,
  end, bytes, buckets; CLOCK_MONOTONIC and wall-clock seconds), the iteration times the
  lab's reports are made of when real training runs (the ``hosts`` backend);
* **the communication phase of DDP**: :meth:`IterationHook.attach_ddp` registers a DDP
  communication hook that performs the default all-reduce (sum, divided by the world
  size) and notes when the first gradient bucket is handed to communication and when
  the last all-reduce completes;
* **an explicit end-of-iteration signal** (optional) to the datapath, through the mltcp
  agent's Unix socket (no root needed; the agent checks the caller is in the job's
  cgroup).  A failed signal never stops training: it is counted in the records.

Only the standard library is imported here (torch only inside :meth:`attach_ddp`), so
importing the hook costs nothing.  Two lines activate it from the environment the
``hosts`` backend (or a person) sets::

    from mltcp import hook
    h = hook.from_env()          # MLTCP_HOOK_OUT, MLTCP_JOB, MLTCP_HOOK_SIGNAL, RANK
    h.attach_ddp(model)          # DDP: the communication phase from the buckets
    for batch in data:
        with h.iteration():
            ...forward, backward, optimizer step...

FSDP: use :meth:`IterationHook.iteration` for the iteration and, if its communication
phase is wanted, :meth:`comm_begin`/:meth:`comm_end` around it (FSDP overlaps its
all-gathers and reduce-scatters with compute, so there is no single bucket to watch).
"""

from __future__ import annotations

import json
import os
import socket
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

SCHEMA = "mltcp.hook/1"
DEFAULT_AGENT_SOCKET = "/run/mltcp/agent.sock"
SIGNAL_TIMEOUT_S = 0.2


class HookError(ValueError):
    """Bad input to the hook (a one-line message naming the field and the fix)."""


@dataclass(frozen=True)
class IterationHookRecord:
    """One iteration of one rank.  ``start``..``end`` are CLOCK_MONOTONIC seconds (exact
    on one host), ``*_wall`` the same instants in wall-clock seconds (to align hosts).
    ``bytes``: gradient bytes handed to communication; ``buckets``: DDP buckets (0 in a
    plain loop).  ``signal_seq``: the datapath's signal sequence after this iteration's
    signal (None: no signal sent); ``signal_error``: why a signal failed."""

    job: str
    rank: int
    world_size: int
    iteration: int
    start: float
    comm_start: float
    comm_end: float
    end: float
    start_wall: float
    comm_start_wall: float
    comm_end_wall: float
    end_wall: float
    bytes: int
    buckets: int
    host: str
    pid: int
    signal_seq: int | None = None
    signal_error: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"schema": SCHEMA, **asdict(self)}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> IterationHookRecord:
        if data.get("schema") != SCHEMA:
            raise HookError(f"schema: {data.get('schema')!r} is not {SCHEMA}; "
                            "read the file with the mltcp version that wrote it")
        names = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - names - {"schema"})
        if unknown:
            raise HookError(f"{unknown[0]}: unknown key in a hook record; "
                            f"keys are {', '.join(sorted(names))}")
        try:
            return cls(**{k: v for k, v in data.items() if k != "schema"})
        except TypeError as exc:
            raise HookError(f"hook record: {exc}; every key of the schema is needed") from None


def read_records(path: str | Path) -> list[IterationHookRecord]:
    """The records of one rank's file, in order; a last line cut short by a crash is
    skipped (the records before it are whole: each is flushed as it is written)."""
    out = []
    lines = Path(path).read_text(encoding="utf-8").splitlines()
    for n, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            data = json.loads(line)
        except json.JSONDecodeError:
            if n == len(lines) - 1:
                break
            raise HookError(f"{path}:{n + 1}: not a JSON line; the file is damaged") from None
        out.append(IterationHookRecord.from_dict(data))
    return out


class AgentSignal:
    """A client of the agent's signal socket: one JSON line out, one back."""

    def __init__(self, path: str | None = None, timeout_s: float = SIGNAL_TIMEOUT_S) -> None:
        self.path = path or os.environ.get("MLTCP_AGENT_SOCKET") or DEFAULT_AGENT_SOCKET
        self.timeout_s = timeout_s
        self._sock: socket.socket | None = None
        self._buf = b""

    def send(self, job: str) -> int:
        """Signal ``job``'s end of iteration; the new sequence number.  Raises OSError
        (the agent is unreachable) or RuntimeError (the agent refused, with its reason)."""
        for attempt in (0, 1):      # a connection the agent closed is opened again once
            try:
                sock = self._connect()
                sock.sendall(json.dumps({"op": "signal", "job": job}).encode() + b"\n")
                reply = self._line(sock)
                break
            except (BrokenPipeError, ConnectionResetError, EOFError):
                self.close()
                if attempt:
                    raise OSError(f"the agent at {self.path} closed the connection") from None
        if not reply.get("ok"):
            raise RuntimeError(str(reply.get("error") or "refused"))
        return int(reply["seq"])

    def _connect(self) -> socket.socket:
        if self._sock is None:
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.settimeout(self.timeout_s)
            try:
                sock.connect(self.path)
            except OSError:
                sock.close()
                raise
            self._sock, self._buf = sock, b""
        return self._sock

    def _line(self, sock: socket.socket) -> dict:
        while b"\n" not in self._buf:
            chunk = sock.recv(4096)
            if not chunk:
                raise EOFError
            self._buf += chunk
        line, self._buf = self._buf.split(b"\n", 1)
        data = json.loads(line)
        if not isinstance(data, dict):
            raise RuntimeError(f"the agent answered {data!r}")
        return data

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None


def _flag(value: str | None, name: str) -> bool:
    if value is None or value == "":
        return False
    if value.lower() in ("1", "true", "yes", "on"):
        return True
    if value.lower() in ("0", "false", "no", "off"):
        return False
    raise HookError(f"{name}: {value!r} is not a flag; use 1 or 0")


def _int_env(name: str, default: int) -> int:
    value = os.environ.get(name)
    if value is None or value == "":
        return default
    try:
        n = int(value)
    except ValueError:
        raise HookError(f"{name}: {value!r} is not an integer; torchrun sets it, or unset "
                        "it") from None
    if n < 0:
        raise HookError(f"{name}: {n} is negative; use a rank >= 0")
    return n


class IterationHook:
    """Marks one rank's iterations and writes their records.

    ``out``: a directory (the file is ``hook-rank<rank>.jsonl`` in it) or a ``.jsonl``
    file; None writes nothing (the hook still times, e.g. for ``signal`` alone).
    ``job``: the datapath job's name (needed with ``signal``).  Thread-safe: DDP
    completes its all-reduces on its communication threads.
    """

    def __init__(self, out: str | Path | None = None, job: str | None = None,
                 rank: int | None = None, world_size: int | None = None,
                 signal: bool = False, agent_socket: str | None = None) -> None:
        self.rank = _int_env("RANK", 0) if rank is None else rank
        self.world_size = _int_env("WORLD_SIZE", 1) if world_size is None else world_size
        if not isinstance(self.rank, int) or self.rank < 0:
            raise HookError(f"rank: {self.rank!r} is not a rank; use an integer >= 0")
        if not isinstance(self.world_size, int) or self.world_size <= self.rank:
            raise HookError(f"world_size: {self.world_size!r} must be > rank {self.rank}; "
                            "give the number of processes")
        self.job = job or "job"
        if signal and not job:
            raise HookError("job: signal needs the datapath job's name; give job= "
                            "(or MLTCP_JOB) as attached with `mltcp job attach`")
        self.signal = AgentSignal(agent_socket) if signal else None
        self.signals_sent = 0
        self.signal_failures = 0
        self._warned = False
        self.path: Path | None = None
        self._file = None
        if out is not None:
            p = Path(out)
            self.path = p if p.suffix == ".jsonl" else p / f"hook-rank{self.rank}.jsonl"
            try:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                self._file = self.path.open("a", encoding="utf-8")
            except OSError as exc:
                raise HookError(f"out: cannot write {self.path} ({exc.strerror}); give a "
                                "writable directory (MLTCP_HOOK_OUT)") from None
        self.host = socket.gethostname()
        self._lock = threading.Lock()
        self.iteration_index = 0
        self._start: tuple[float, float] | None = None
        self._comm_start: tuple[float, float] | None = None
        self._comm_end: tuple[float, float] | None = None
        self._bytes = 0
        self._buckets = 0
        self.records: list[IterationHookRecord] = []

    # ------------------------------------------------------------------ marks

    @staticmethod
    def _now() -> tuple[float, float]:
        return time.monotonic(), time.time()

    def begin(self) -> None:
        """The iteration starts (before the forward pass)."""
        with self._lock:
            if self._start is not None:
                raise HookError("begin: the previous iteration has not ended; call end() "
                                "(or use `with hook.iteration():`)")
            self._start = self._now()
            self._comm_start = self._comm_end = None
            self._bytes = self._buckets = 0

    def comm_begin(self) -> None:
        """Communication starts (the first call of the iteration counts)."""
        now = self._now()
        with self._lock:
            if self._comm_start is None:
                self._comm_start = now

    def comm_end(self) -> None:
        """Communication ended (the last call of the iteration counts)."""
        now = self._now()
        with self._lock:
            if self._comm_start is None:
                self._comm_start = now
            self._comm_end = now

    def add_bytes(self, n: int) -> None:
        """Bytes handed to communication in this iteration (DDP: added per bucket)."""
        if not isinstance(n, int) or isinstance(n, bool) or n < 0:
            raise HookError(f"bytes: {n!r} is not a byte count; give an integer >= 0")
        with self._lock:
            self._bytes += n

    def end(self) -> IterationHookRecord:
        """The iteration ends (after the optimizer step): write its record, then signal."""
        now = self._now()
        with self._lock:
            if self._start is None:
                raise HookError("end: no iteration began; call begin() first "
                                "(or use `with hook.iteration():`)")
            start = self._start
            comm_start = self._comm_start or now
            comm_end = self._comm_end or comm_start
            record_kw = dict(job=self.job, rank=self.rank, world_size=self.world_size,
                             iteration=self.iteration_index,
                             start=start[0], comm_start=comm_start[0], comm_end=comm_end[0],
                             end=now[0], start_wall=start[1], comm_start_wall=comm_start[1],
                             comm_end_wall=comm_end[1], end_wall=now[1], bytes=self._bytes,
                             buckets=self._buckets, host=self.host, pid=os.getpid())
            self._start = None
            self.iteration_index += 1
        seq, error = self._send_signal()
        record = IterationHookRecord(**record_kw, signal_seq=seq, signal_error=error)
        self.records.append(record)
        if self._file is not None:
            self._file.write(json.dumps(record.to_dict()) + "\n")
            self._file.flush()
        return record

    @contextmanager
    def iteration(self) -> Iterator[IterationHook]:
        """``with hook.iteration(): ...``: begin() before the body, end() after it (also
        when the body raises, so the record of a failing step is kept)."""
        self.begin()
        try:
            yield self
        finally:
            self.end()

    def _send_signal(self) -> tuple[int | None, str | None]:
        if self.signal is None:
            return None, None
        try:
            seq = self.signal.send(self.job)
            self.signals_sent += 1
            return seq, None
        except (OSError, RuntimeError, ValueError) as exc:
            self.signal_failures += 1
            if not self._warned:
                self._warned = True
                print(f"mltcp.hook: the end-of-iteration signal for job {self.job!r} failed "
                      f"({exc}); training goes on, the datapath counts by itself",
                      file=sys.stderr)
            return None, str(exc) or type(exc).__name__

    # ------------------------------------------------------------------ DDP

    def attach_ddp(self, model: Any, process_group: Any = None) -> None:
        """Register the communication hook on a DistributedDataParallel ``model``: the
        default all-reduce, timed per bucket."""
        import torch.distributed as dist

        if not hasattr(model, "register_comm_hook"):
            raise HookError(f"model: {type(model).__name__} is not DistributedDataParallel; "
                            "wrap it in torch.nn.parallel.DistributedDataParallel first")
        group = process_group if process_group is not None else dist.group.WORLD
        world = dist.get_world_size(group)

        # Unannotated on purpose: DDP refuses a hook whose annotations are not its own
        # types, and under ``from __future__ import annotations`` they would be strings.
        def allreduce(hook, bucket):  # type: ignore[no-untyped-def]
            buffer = bucket.buffer()
            hook.comm_begin()
            hook.add_bytes(buffer.numel() * buffer.element_size())
            with hook._lock:
                hook._buckets += 1
            fut = dist.all_reduce(buffer.div_(world), group=group, async_op=True).get_future()

            def done(f: Any) -> Any:
                hook.comm_end()
                return f.value()[0]

            return fut.then(done)

        model.register_comm_hook(self, allreduce)

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None
        if self.signal is not None:
            self.signal.close()


def from_env() -> IterationHook:
    """The hook as the environment configures it: ``MLTCP_HOOK_OUT`` (directory or
    .jsonl file; unset: no records), ``MLTCP_JOB``, ``MLTCP_HOOK_SIGNAL`` (1/0),
    ``MLTCP_AGENT_SOCKET``, and torchrun's ``RANK``/``WORLD_SIZE``."""
    return IterationHook(out=os.environ.get("MLTCP_HOOK_OUT") or None,
                         job=os.environ.get("MLTCP_JOB") or None,
                         signal=_flag(os.environ.get("MLTCP_HOOK_SIGNAL"), "MLTCP_HOOK_SIGNAL"),
                         agent_socket=os.environ.get("MLTCP_AGENT_SOCKET") or None)
