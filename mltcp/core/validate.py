"""The one place input values are checked: every field, from every source.

A scenario file, a CLI flag, a sweep's grid value, a job spec, a DCQCN option and a
driver's JSON all reach the same functions, so a value is accepted or refused by the
same rule wherever it comes from, and the refusal always reads the same way: one
:class:`~mltcp.core.errors.SpecError` naming the field (``jobs[1].compute_ms``,
``--slope``, ``param.load``), what is wrong with the value, and a fix with an example.

The checks are strict on purpose: ``True`` is not a number (it is an ``int`` to
Python), NaN and infinities are not numbers of anything, and an integer field takes no
float, because a value that slips through here fails an hour later inside a model,
the kernel or ns-3 with a message that names nothing.
"""

from __future__ import annotations

import difflib
import math
import re
from collections.abc import Iterable, Mapping
from decimal import Decimal

from mltcp.core.errors import SpecError


def fmt(number: float) -> str:
    """3600000 rather than 3.6e+06: the user types the number back into the file."""
    return str(int(number)) if float(number).is_integer() else f"{number:g}"


def is_number(value: object) -> bool:
    """An int or float, and not a bool (which is an int subclass, yet never a sane value)."""
    return isinstance(value, int | float) and not isinstance(value, bool)


def is_integer(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def integer(value: object, field: str, lo: int, hi: int, example: str | None = None) -> int:
    """An integer in [lo, hi]."""
    fix = f"use an integer from {lo} to {hi}" + (f", e.g. {example}" if example else "")
    if not is_integer(value):
        raise SpecError(field, f"must be an integer (got {value!r})", fix)
    if not lo <= value <= hi:  # type: ignore[operator]
        raise SpecError(field, f"must be between {lo} and {hi} (got {value})", fix)
    return value  # type: ignore[return-value]


def number(value: object, field: str, lo: float, hi: float, example: str | None = None, *,
           lo_open: bool = False, fix: str | None = None) -> float:
    """A finite number in [lo, hi] (or (lo, hi] with ``lo_open``); ``fix`` replaces the
    generated advice where the caller can say more (a unit, a flag)."""
    low = f"> {fmt(lo)}" if lo_open else f">= {fmt(lo)}"
    fix = fix or f"use a number {low} and <= {fmt(hi)}" + (f", e.g. {example}" if example else "")
    if not is_number(value):
        raise SpecError(field, f"must be a number (got {value!r})", fix)
    try:
        x = float(value)  # type: ignore[arg-type]
    except OverflowError:   # an int too large for a float
        x = math.inf
    too_low = x <= lo if lo_open else x < lo
    if not math.isfinite(x) or too_low or x > hi:
        raise SpecError(field, f"must be {low} and <= {fmt(hi)} (got {value!r})", fix)
    return x


def finite(value: object, field: str, fix: str) -> float:
    """A finite number with no range of its own (the caller checks the bounds it needs,
    with messages of its own)."""
    try:
        x = float(value) if is_number(value) else math.nan  # type: ignore[arg-type]
    except OverflowError:   # an int too large for a float
        x = math.inf
    if not math.isfinite(x):
        raise SpecError(field, f"must be a finite number (got {value!r})", fix)
    return x


def at_least(value: object, field: str, minimum: int, fix: str) -> int:
    """An integer >= ``minimum`` with no upper bound (counts, sizes, clock readings)."""
    if not is_integer(value):
        raise SpecError(field, f"must be an integer (got {value!r})", fix)
    if value < minimum:  # type: ignore[operator]
        raise SpecError(field, f"must be >= {minimum} (got {value})", fix)
    return value  # type: ignore[return-value]


def env_integer(environ: Mapping[str, str], name: str, lo: int, hi: int,
                fix: str) -> int | None:
    """An integer environment variable in [lo, hi], named as the variable in a refusal
    (a launcher's ``RANK``, ``WORLD_SIZE``); unset or blank is None."""
    value = environ.get(name)
    if value is None or not value.strip():
        return None
    try:
        number = int(value)
    except ValueError:
        raise SpecError(name, f"{value!r} is not an integer", fix) from None
    if number < lo:
        raise SpecError(name, f"must be >= {lo} (got {number})", fix)
    if number > hi:
        raise SpecError(name, f"must be <= {hi} (got {number})", fix)
    return number


def text(value: object, field: str, example: str) -> str:
    if not isinstance(value, str):
        raise SpecError(field, f"must be a string (got {value!r})", f"use e.g. {example}")
    return value


def name(value: object, field: str, pattern: re.Pattern[str], what: str, example: str) -> str:
    """A name that fully matches ``pattern`` (``what`` says which characters, for the fix)."""
    s = text(value, field, example)
    if not pattern.fullmatch(s):
        raise SpecError(field, f"{s!r} is not a valid name", f"use {what}, e.g. {example}")
    return s


# A datapath job's name: what `mltcp job attach`, the agent's signal socket and the
# training-loop hook (which runs without the host package) all accept.
JOB_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,31}$")


def job_name(value: object, field: str) -> str:
    """A datapath job's name (1-32 letters, digits, '.', '_' or '-')."""
    return name(value, field, JOB_NAME, "1-32 letters, digits, '.', '_' or '-'", "resnet")


def choice(value: object, field: str, choices: Iterable[str]) -> str:
    """One of ``choices``."""
    options = tuple(choices)
    if value not in options:
        raise SpecError(field, f"unknown value {value!r}", f"use one of: {', '.join(options)}")
    return value  # type: ignore[return-value]


def flag(value: object, field: str, example: str) -> bool:
    if not isinstance(value, bool):
        raise SpecError(field, f"must be true or false (got {value!r})", f"use {example}")
    return value


_BYTES_RE = re.compile(r"^\s*([+-]?)(\d+(?:\.\d*)?|\.\d+)\s*([A-Za-z]*)\s*$")
_UNITS: dict[str, int] = {
    "": 1, "b": 1,
    "k": 10**3, "kb": 10**3, "m": 10**6, "mb": 10**6,
    "g": 10**9, "gb": 10**9, "t": 10**12, "tb": 10**12,
    "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40,
    "ki": 2**10, "mi": 2**20, "gi": 2**30, "ti": 2**40,
}


def parse_bytes(text: str, field: str) -> int:
    """Parse a positive byte count such as "10MB", "4MiB", "1.5GB", "64k" or "123".

    SI prefixes are powers of 1000 and KiB/MiB/GiB/TiB powers of 1024; units are
    case-insensitive (nobody means millibytes). The result must be a whole number of
    bytes, so "0.1KiB" is rejected rather than silently rounded.
    """
    fix = 'use a positive size such as "10MB", "4MiB" or "1500000"'
    match = _BYTES_RE.match(text) if isinstance(text, str) else None
    unit = match.group(3).lower() if match else ""
    if match is None or unit not in _UNITS:
        raise SpecError(field, f"cannot parse {text!r} as a byte count", fix)
    sign, number = match.group(1), Decimal(match.group(2))
    value = number * _UNITS[unit]
    if sign == "-" and value != 0:
        raise SpecError(field, f"must be positive (got {text.strip()!r})", fix)
    if value == 0:
        raise SpecError(field, f"must be > 0 (got {text.strip()!r})", fix)
    if value != value.to_integral_value():
        raise SpecError(
            field, f"{text.strip()!r} is not a whole number of bytes ({value})", fix
        )
    return int(value)


def size(value: object, field: str, example: str) -> int:
    """A byte count as a positive int or a size string ("10MB"); bools are not sizes."""
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise SpecError(field, f"must be a size (got {value!r})", f"use e.g. {example}")
    if isinstance(value, int):
        if value <= 0:
            raise SpecError(field, f"must be > 0 (got {value})", f"use e.g. {example}")
        return value
    return parse_bytes(value, field)


def port(value: object, field: str, example: str = "5201") -> int:
    """A TCP/UDP port, 1..65535."""
    return integer(value, field, 1, 65535, example)


def port_range(value: object, field: str) -> tuple[int, int]:
    """``29500`` or ``"29500-29600"`` (both ends included) -> (lo, hi), ports 1..65535."""
    fix = "give a port or a range of ports, e.g. 29500 or 29500-29600 (1..65535)"
    if is_integer(value):
        lo_s = hi_s = str(value)
    elif isinstance(value, str):
        lo_s, dash, hi_s = value.strip().partition("-")
        hi_s = hi_s if dash else lo_s
    else:
        raise SpecError(field, f"{value!r} is not a port or a port range", fix)
    try:
        lo, hi = int(lo_s), int(hi_s)
    except ValueError:
        raise SpecError(field, f"{value!r} is not a port or a port range", fix) from None
    if not (1 <= lo <= 65535 and 1 <= hi <= 65535):
        raise SpecError(field, f"{value!r} is out of range", fix)
    if lo > hi:
        raise SpecError(field, f"{value!r} runs backwards", f"write {hi}-{lo}")
    return lo, hi


MAX_SEED = 2**32 - 1   # what every backend's RNG accepts
MAX_WORLD_SIZE = 65_536  # ranks of one job: the hook's WORLD_SIZE, the workload's --workers
MAX_SEEDS = 10_000     # seeds of one list or range (each a run, or a run per scheme)


def seeds(text: str, field: str = "seeds") -> tuple[int, ...]:
    """``"0-4"`` or ``"0,3,7"`` -> seeds (duplicates dropped, order kept), each 0..MAX_SEED,
    at most MAX_SEEDS of them.

    A range is counted before it is expanded, so ``0-99999999999`` is refused at once
    instead of filling memory with a list it would then refuse."""
    parts = _seed_ranges(text, field)
    count = sum(max(hi - lo + 1, 0) for lo, hi in parts)
    if count > MAX_SEEDS:
        raise SpecError(field, f"{text!r} gives {count} seeds, over {MAX_SEEDS}",
                        f"give at most {MAX_SEEDS} seeds, e.g. 0-9")
    if not count or min(lo for lo, hi in parts if hi >= lo) < 0:
        raise SpecError(field, f"{text!r} gives no non-negative seed", "write e.g. 0-9")
    top = max(hi for lo, hi in parts if hi >= lo)
    if top > MAX_SEED:
        raise SpecError(field, f"{text!r} reaches seed {top}, over {MAX_SEED}",
                        f"use seeds from 0 to {MAX_SEED}, e.g. 0-9")
    return tuple(dict.fromkeys(s for lo, hi in parts for s in range(lo, hi + 1)))


def seed_list(values: list, field: str = "seeds") -> tuple[int, ...]:
    """A file's list of seeds (a scenario's, a cluster config's): at most MAX_SEEDS,
    each an integer 0..MAX_SEED, none twice; ``field`` names the list."""
    if len(values) > MAX_SEEDS:
        raise SpecError(field, f"lists {len(values)} seeds, over {MAX_SEEDS}",
                        f"give at most {MAX_SEEDS} seeds")
    seen: dict[int, None] = {}
    for index, value in enumerate(values):
        seed = integer(value, f"{field}[{index}]", 0, MAX_SEED, "0")
        if seed in seen:
            raise SpecError(f"{field}[{index}]", f"duplicate seed {seed}",
                            "list every seed once")
        seen[seed] = None
    return tuple(seen)


def _seed_ranges(text: str, field: str) -> list[tuple[int, int]]:
    """The (first, last) of every comma-separated part of a seed list (a single seed is
    a range of one), not expanded."""
    out: list[tuple[int, int]] = []
    try:
        for part in str(text).split(","):
            lo, dash, hi = part.partition("-")
            out.append((int(lo), int(hi) if dash else int(lo)))
    except ValueError:
        raise SpecError(field, f"{text!r} is not a list or range of integers",
                        "write e.g. 0-9 or 0,1,5") from None
    return out


# The memory one process may spend on what an input sizes (a run's link samples and
# iteration records, a batch's lanes, a cluster's fabric and jobs, a run set's traces):
# an input whose estimate exceeds it is refused before anything is allocated, with one
# line naming the fields and the size it would need (docs/bad-input.md, "Memory").
MEMORY_BUDGET_BYTES = 2 * 2**30


def fmt_bytes(n: float) -> str:
    """A size in binary units with two or three significant digits (6.2 GiB, 512 MiB):
    what a reader compares with the budget at a glance."""
    for unit, scale in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= scale:
            return f"{n / scale:.3g} {unit}"
    return f"{int(n)} B"


def within_memory(need_bytes: float, field: str, what: str, fix: str) -> None:
    """Refuse an input whose estimated memory, ``need_bytes``, exceeds the one budget:
    ``what`` says what it sizes ("2 links sampled every 10 ms for 6e+06 s")."""
    if need_bytes > MEMORY_BUDGET_BYTES:
        raise SpecError(field, f"{what} need ~{fmt_bytes(need_bytes)} of memory (limit "
                        f"{fmt_bytes(MEMORY_BUDGET_BYTES)})", fix)


def known_keys(data: Mapping[str, object], path: str, allowed: Iterable[str]) -> None:
    """Reject a key of a user's table that is not in ``allowed``, suggesting the closest.

    Unknown keys are errors, not warnings: a misspelt key silently falling back to a
    default would run something else than what was written."""
    allowed = tuple(allowed)
    for key in data:
        if key not in allowed:
            close = difflib.get_close_matches(str(key), allowed, n=1)
            hint = f"did you mean {close[0]!r}? " if close else ""
            raise SpecError(f"{path}.{key}" if path else str(key), "unknown key",
                            f"{hint}remove it or use one of: {', '.join(allowed)}")
