"""The hook's per-iteration record, its JSON-lines file and the reader.

One file per rank (``hook-rank{rank}.jsonl``), one JSON object per line, written and
flushed as each iteration ends, so a worker that crashes keeps every finished iteration
and a reader (the lab, after a run) never waits for a file to be closed.  A last line a
crash cut short is skipped; any other damaged line is an error naming its line.

Times are CLOCK_MONOTONIC seconds (``start`` .. ``end``: exact within one host, the clock
the kernel's BPF timestamps use) and the same instants in wall-clock seconds
(``*_wall``: to line up hosts, as well as their clocks agree).  Each record's wall-clock
times are its monotonic times plus one offset read at the iteration's start, so both
clocks order the four instants alike even when NTP steps the wall clock.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import IO, Any

from mltcp.core import validate
from mltcp.core.errors import SpecError

SCHEMA = "mltcp.hook/1"
FILE_NAME = "hook-rank{rank}.jsonl"


@dataclass(frozen=True)
class IterationHookRecord:
    """One iteration of one rank.

    ``comm_start``: when the first gradient bucket (DDP) or reduction (FSDP) of the
    iteration was handed to communication, or ``comm_begin()``; ``comm_end``: when the
    last one completed, or ``comm_end()`` (``end`` if it never came); both None when the
    iteration communicated nothing the hook saw.  ``bytes``: gradient bytes handed to
    communication (the collective's input, not what the wire carries: a ring all-reduce
    sends about twice that, see ``mltcp.core.budget``).  ``buckets``: reductions handed over (DDP
    buckets, FSDP reduce-scatters; 0 in a plain loop).  ``signal_seq``: the agent's
    sequence number for this iteration's end-of-iteration signal; ``signal_error``: why
    it failed; ``signal_failures``: failed signals of this rank so far (all None/0 when
    signalling is off).
    """

    job: str | None
    rank: int
    world_size: int
    iteration: int
    start: float
    comm_start: float | None
    comm_end: float | None
    end: float
    start_wall: float
    comm_start_wall: float | None
    comm_end_wall: float | None
    end_wall: float
    bytes: int
    buckets: int
    host: str
    pid: int
    signal_seq: int | None = None
    signal_error: str | None = None
    signal_failures: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {"schema": SCHEMA, **asdict(self)}

    @classmethod
    def from_dict(cls, data: object, where: str = "record") -> IterationHookRecord:
        """A record from its JSON object; ``where`` names it in errors
        (``hook-rank0.jsonl:3``)."""
        if not isinstance(data, dict):
            raise SpecError(where, f"is not a JSON object (got {data!r})",
                            "give a line written by mltcp.hook")
        validate.known_keys(data, where, ("schema", *(f.name for f in fields(cls))))
        if data.get("schema") != SCHEMA:
            raise SpecError(f"{where}.schema", f"is {data.get('schema')!r}, not {SCHEMA!r}",
                            "read it with the mltcp version that wrote it")
        missing = [f.name for f in fields(cls) if f.name not in data
                   and f.name not in ("signal_seq", "signal_error", "signal_failures")]
        if missing:
            raise SpecError(f"{where}.{missing[0]}", "is missing",
                            "give every field of the record (IterationHookRecord)")

        def at(key: str) -> str:
            return f"{where}.{key}"

        def count(key: str) -> int:
            return validate.at_least(data[key], at(key), 0, "give an integer >= 0")

        def seconds(key: str) -> float:
            return validate.finite(data[key], at(key), "give a time in seconds")

        def maybe_seconds(key: str) -> float | None:
            return None if data[key] is None else seconds(key)

        job = data["job"]
        record = cls(
            job=None if job is None else validate.job_name(job, at("job")),
            rank=count("rank"),
            world_size=validate.at_least(data["world_size"], at("world_size"), 1,
                                         "give the number of ranks"),
            iteration=count("iteration"),
            start=seconds("start"), comm_start=maybe_seconds("comm_start"),
            comm_end=maybe_seconds("comm_end"), end=seconds("end"),
            start_wall=seconds("start_wall"), comm_start_wall=maybe_seconds("comm_start_wall"),
            comm_end_wall=maybe_seconds("comm_end_wall"), end_wall=seconds("end_wall"),
            bytes=count("bytes"), buckets=count("buckets"),
            host=validate.text(data["host"], at("host"), '"gpu1"'),
            pid=validate.at_least(data["pid"], at("pid"), 1, "give a process id"),
            signal_seq=(None if data.get("signal_seq") is None
                        else validate.at_least(data["signal_seq"], at("signal_seq"), 0,
                                               "give the agent's sequence number")),
            signal_error=(None if data.get("signal_error") is None
                          else validate.text(data["signal_error"], at("signal_error"),
                                             '"no agent"')),
            signal_failures=validate.at_least(data.get("signal_failures", 0),
                                              at("signal_failures"), 0, "give a count"))
        if record.rank >= record.world_size:
            raise SpecError(at("rank"), f"{record.rank} is not below world_size "
                            f"{record.world_size}", "give ranks 0..world_size-1")
        return record


def record_path(out: str | os.PathLike[str], rank: int, world_size: int) -> Path:
    """Where rank ``rank`` writes: ``out`` itself when it names a ``.jsonl`` file (with
    ``{rank}`` in it filled in), else ``out/hook-rank{rank}.jsonl``."""
    path = Path(out)
    if path.suffix != ".jsonl":
        return path / FILE_NAME.format(rank=rank)
    if "{rank}" in path.name:
        return path.with_name(path.name.replace("{rank}", str(rank)))
    if world_size > 1:
        raise SpecError("out", f"{str(path)!r} is one file for {world_size} ranks",
                        "give a directory (one hook-rank<N>.jsonl per rank) or a file name "
                        "with {rank} in it")
    return path


class RecordWriter:
    """Appends records to one rank's file, one flushed line each.

    The file is started afresh when the writer opens it: one hook, one run (give each
    run its own directory to keep the earlier ones)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            self._file: IO[str] | None = path.open("w", encoding="utf-8")
        except OSError as exc:
            raise SpecError("out", f"cannot write {str(path)!r} ({exc.strerror})",
                            "give a writable directory (MLTCP_HOOK_OUT)") from None

    def write(self, record: IterationHookRecord) -> None:
        if self._file is None:
            raise SpecError("hook", "is closed", "write records before close()")
        self._file.write(json.dumps(record.to_dict(), separators=(",", ":")) + "\n")
        self._file.flush()

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None


def read_records(path: str | os.PathLike[str]) -> list[IterationHookRecord]:
    """The records of one rank's file in the order written, or, given a directory, of
    every ``hook-rank*.jsonl`` in it (by rank, then as written)."""
    p = Path(path)
    if p.is_dir():
        files = sorted(p.glob(FILE_NAME.format(rank="*")),
                       key=lambda f: (len(f.name), f.name))
        return [r for f in files for r in read_records(f)]
    try:
        lines = p.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise SpecError("path", f"cannot read {str(p)!r} ({exc.strerror})",
                        "give a hook-rank<N>.jsonl file or the directory holding them") from None
    records = []
    for n, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            data = json.loads(line)
        except json.JSONDecodeError:
            if n == len(lines):      # the line a crash cut short: the ones before are whole
                break
            raise SpecError(f"{p.name}:{n}", "is not a JSON line",
                            "the file is damaged; only its last line may be cut short") from None
        records.append(IterationHookRecord.from_dict(data, f"{p.name}:{n}"))
    return records
