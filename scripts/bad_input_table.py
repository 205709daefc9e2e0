#!/usr/bin/env python3
"""Write docs/bad-input.md: every row of tests/test_bad_input.py's table run through the
real CLI, with the one line it answered.

    python scripts/bad_input_table.py            # as a user: root rows keep their old answer
    sudo .venv/bin/python scripts/bad_input_table.py   # as root: every row (others as nobody)

Rows run as the test runs them (their own state directory and pin root, unprivileged
unless marked root), so the doc shows what a user sees.
"""

from __future__ import annotations

import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.test_bad_input import (  # noqa: E402
    DOC,
    NOT_RECORDED,
    ROWS,
    Row,
    doc_line,
    doc_rows,
    run,
    why_not_runnable,
)

HEADER = """# Bad input and what mltcp answers

Every row is run by `scripts/bad_input_table.py` (the table is `ROWS` in
`tests/test_bad_input.py`, which checks each answer is one line naming the flag or field,
with the exit code shown; exit codes: README, "Exit codes"). `DIR` is the row's own
directory; rows run unprivileged unless marked "as root".

| input | exit | the one-line answer |
|---|---|---|
"""


def line_for(row: Row, old: dict[str, tuple[int, str]]) -> str:
    why = why_not_runnable(row)
    if why is None:
        return doc_line(row, run(row))
    if row.cell in old and old[row.cell][1] != NOT_RECORDED:   # keep what root recorded
        code, text = old[row.cell]
        return f"| {row.cell} | {code} | {text} |"
    return doc_line(row, None)


def main() -> int:
    old = doc_rows() if DOC.exists() else {}
    with ThreadPoolExecutor(max_workers=4) as pool:
        lines = list(pool.map(lambda r: line_for(r, old), ROWS))
    DOC.write_text(HEADER + "\n".join(lines) + "\n")
    print(f"{len(lines)} rows -> {DOC.relative_to(REPO)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
