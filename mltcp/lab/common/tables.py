"""Tidy tables: one row per observation, one column per variable, as Parquet or CSV.

What a researcher loads into pandas, R or DuckDB to draw their own figures: the
per-iteration table of a scenario run set, the per-job and per-cell tables of a
cluster experiment.  Parquet (typed, compressed) where pyarrow is installed, else
CSV from the standard library, so the lab's base install still writes one; both
atomically.  Rows are dicts with the same keys; None is a missing value.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from mltcp.lab.common.atomic import replacing, write_text

FORMATS = ("parquet", "csv")


def has_parquet() -> bool:
    """Whether pyarrow can be imported (the ``sweep`` extra installs it)."""
    try:
        import pyarrow  # noqa: F401
    except ImportError:
        return False
    return True


def write_table(rows: Sequence[dict[str, Any]], stem: str | Path,
                columns: Sequence[str] | None = None, fmt: str | None = None) -> Path:
    """``rows`` as ``stem.parquet`` (pyarrow installed, or ``fmt="parquet"``) else
    ``stem.csv``; ``columns`` fixes the column order (default: the first row's keys).
    Returns the path written; a table of the other format left beside it by an earlier
    write is removed (:func:`drop_other_formats`)."""
    path = _write(rows, stem, columns, fmt or ("parquet" if has_parquet() else "csv"))
    drop_other_formats(path)
    return path


def drop_other_formats(path: Path) -> None:
    """Remove ``path``'s table in the other format, so that no stale table of an earlier
    run stays beside the one just written."""
    for fmt in FORMATS:
        if path.suffix != f".{fmt}":
            path.with_suffix(f".{fmt}").unlink(missing_ok=True)


def _write(rows: Sequence[dict[str, Any]], stem: str | Path, columns: Sequence[str] | None,
           fmt: str) -> Path:
    names = list(columns if columns is not None else (rows[0] if rows else {}))
    path = Path(stem).with_suffix(f".{fmt}")
    if fmt == "parquet":
        import pyarrow as pa
        import pyarrow.parquet as pq

        table = pa.Table.from_pydict({n: [r.get(n) for r in rows] for n in names})
        with replacing(path) as tmp:
            pq.write_table(table, tmp)
        return path
    if fmt != "csv":
        raise ValueError(f"format {fmt!r}: use parquet or csv")
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=names, extrasaction="raise",
                            lineterminator="\n")
    writer.writeheader()
    writer.writerows({n: ("" if r.get(n) is None else r.get(n)) for n in names} for r in rows)
    return write_text(path, buffer.getvalue())


def read_table(path: str | Path) -> list[dict[str, Any]]:
    """A table written by :func:`write_table`, as rows (CSV values stay strings)."""
    path = Path(path)
    if path.suffix == ".parquet":
        import pyarrow.parquet as pq

        return pq.read_table(path).to_pylist()
    with open(path, newline="") as fh:
        return list(csv.DictReader(fh))
