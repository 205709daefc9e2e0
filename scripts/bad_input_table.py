#!/usr/bin/env python3
"""Write docs/bad-input.md: every row of tests/test_bad_input.py's table run through the
real CLI, with the one line it answered.

    python scripts/bad_input_table.py            # as a user: root rows keep their old answer
    sudo .venv/bin/python scripts/bad_input_table.py   # as root: every row (others as nobody)

Rows run as the test runs them (their own state directory and pin root, unprivileged
unless marked root), so the doc shows what a user sees.  The page ends with the bad-input
tests that are not rows (``ELSEWHERE``: the hook's environment variables, the validators
tested directly), each with the number of cases pytest collects from it.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
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
directory; rows run unprivileged unless marked "as root".  The training hook's and the
DDP workload's environment variables (`MLTCP_START_AT`, `MLTCP_AGENT_SOCKET`, `RANK`,
`WORLD_SIZE`) reach no `mltcp` command line, so they are no rows here: their cases are
pytest tests in `tests/test_hook_env_bad_input.py`.  That file and the other bad-input
tests that are not rows: "Tested elsewhere", at the end.

| input | exit | the one-line answer |
|---|---|---|
"""

FOOTER = """
## Memory

Some inputs are in range field by field and out of memory together: 10,000 iterations of
600 s of compute (69 days of 10 ms link samples), a cluster of 4096 leaves x 1024 servers
x 64 GPUs, a seed range of 10^11 seeds.  Each is refused before anything is allocated, in
one line naming the fields and the memory it would need, exit code 2 (the rows above).

* **The budget**: `MEMORY_BUDGET_BYTES` in `mltcp/core/validate.py`, 2 GiB per process:
  what one run, the runs a batched model or a sweep's worker holds at once, the traces a
  run set's report reads back, or a cluster experiment may hold for what its input sizes.
  The estimates count peak bytes per item, measured on this code and rounded up:
  * scenario runs (`mltcp/lab/scenario/footprint.py`, every backend): 512 B per link
    sample (each link the scenario's `record_links` names, by default the fabric's
    switch-to-switch links the jobs cross, every 10 ms on fluid, dcqcn and ns3, 50 ms on
    netns) over the run's length bounded from below (a job's start and iterations of
    compute, each with its bytes over its slowest link; the busiest link's bytes), 1536 B
    per iteration record (192 B per further phase; a scenario whose records alone exceed
    the budget is refused before a plan is made), 8 B per flow x link of the DCQCN model's
    matrices; a run set's report holds 64 B per sample and 512 B per record of every run.
    With 2 recorded links a run may last ~21,000 s (compatible-pair's 10,000 iterations
    take ~2,000 s); a 512-host leaf-spine's 128 fabric links, ~330 s.  Runs that fit
    alone but not together run in consecutive chunks of half the
    budget (the fluid and dcqcn backends, a sweep's chunks); a fluid run that contention
    draws out beyond the budget stops when it reaches it.
  * cluster experiments (`mltcp/lab/cluster/engine/leafspine.py`, `simulator.py`): 320 B
    per link, 48 B per GPU and 64 B per server of the fabric; 2 KiB per job of the run in
    flight, 256 B per job of each seed's job list, 640 B per job of each finished run.
* **Counts**: a seed list or range (`--seeds`, `--select-sets`, the benchmarks' `--sets`,
  a file's `seeds`) holds at most `MAX_SEEDS` = 10,000 seeds, a range counted before it
  is expanded, each from 0 to 4294967295; a sweep at most 100,000 runs (grid points x
  seeds).
"""

WIDTH = 90                  # the page's prose is wrapped as the header and "Memory" are

# Bad-input tests that are not rows of the table: the input reaches no `mltcp` command line
# (a variable torchrun sets for a rank), or the test calls the validator that owns the check
# (a row shows the command's answer).  (file, what it covers); the generator counts the cases.
ELSEWHERE: tuple[tuple[str, str], ...] = (
    ("tests/test_hook_env_bad_input.py",
     "the training hook's and the DDP workload's environment variables, which torchrun or "
     "the hosts backend set for `python -m mltcp.workloads.ddp` and no `mltcp` command "
     "reads: `RANK` and `WORLD_SIZE` (refused as themselves, out of range too, never "
     "replaced), `MLTCP_START_AT`/`--start-at` (at most a day ahead), "
     "`MLTCP_START_GO`/`--start-go` (only with a latest start, never empty), "
     "`MLTCP_AGENT_SOCKET` (a path a Unix socket can have, checked when the hook starts), "
     "and Ctrl-C of the workload (one line, exit 130)"),
    ("tests/test_inventory_bad_input.py",
     "the hosts backend's inventory, field by field as it is read: `data_addr`, `ssh`, "
     "`data_iface`, `key` and `known_hosts` (files relative to the inventory), `python`, a "
     "UTF-8 BOM"),
    ("tests/test_workload_table.py",
     "a scenario job's `workload` table, checked by the workload's own rules: each refusal "
     "named by its field, acceptance agreeing with `python -m mltcp.workloads.ddp` over a "
     "grid of tables, the hosts backend running the command line that was checked"),
    ("tests/test_cluster_bad_input.py",
     "the cluster simulator's validators: trace CSVs (encodings, separators, quotes, NUL, "
     "sizes), paths that are not files, one scheduler under two spellings, `--force` and "
     "result-named directories, `rl-train`'s flags, Ctrl-C while local worker processes "
     "start"),
    ("tests/test_rl_policy_files.py",
     "the RL scheduler's policy files: every kind of bad file named when the config is "
     "read (not a zip, no policy, a damaged member, another algorithm or environment, "
     "unreadable), "
     "`rl-base@PATH` relative to the config, a shipped policy never shadowed"),
)


def case_counts(files: list[str]) -> dict[str, int]:
    """How many test cases pytest collects from each of ``files`` (parametrized cases
    counted one by one): the numbers the page gives, never typed by hand.  A file with
    none (an extra missing here, a broken import) stops the run rather than printing 0."""
    proc = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q",
                           "-p", "no:cacheprovider", *files],
                          cwd=REPO, capture_output=True, text=True, check=False)
    counts = dict.fromkeys(files, 0)
    for line in proc.stdout.splitlines():
        name = line.partition("::")[0]
        if name in counts and "::" in line:
            counts[name] += 1
    empty = [f for f, n in counts.items() if not n]
    if empty:
        raise SystemExit(f"bad_input_table: no test cases collected from {', '.join(empty)}; "
                         f"see why with: {sys.executable} -m pytest --collect-only -q "
                         f"{' '.join(empty)}")
    return counts


def elsewhere_section() -> str:
    """The page's "Tested elsewhere": each file of :data:`ELSEWHERE`, its case count and
    what it covers, so a reader of the table knows where the rest of issue 25's inputs are
    checked."""
    counts = case_counts([f for f, _ in ELSEWHERE])
    intro = ("Not rows of the table above: these files test the validator that owns each "
             "check (the rows show the CLI's one line for some of the same inputs), or "
             "input that no `mltcp` command line reaches.")
    items = [textwrap.fill(f"* `{f}` ({counts[f]} cases): {what}.", WIDTH,
                           subsequent_indent="  ", break_on_hyphens=False)
             for f, what in ELSEWHERE]
    return ("\n## Tested elsewhere\n\n" + textwrap.fill(intro, WIDTH) + "\n\n"
            + "\n".join(items) + "\n")


def line_for(row: Row, old: dict[str, tuple[int, str]]) -> str:
    why = why_not_runnable(row)
    if why is None:
        return doc_line(row, run(row))
    if row.cell in old and old[row.cell][1] != NOT_RECORDED:   # keep what root recorded
        code, text = old[row.cell]
        return f"| {row.cell} | {code} | {text} |"
    return doc_line(row, None)


def main() -> int:
    import argparse

    argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                            epilog="Rows run as the test runs them; as root every row is "
                            "run (the others as nobody), as a user root rows keep their "
                            "old answer.").parse_args()
    old = doc_rows() if DOC.exists() else {}
    elsewhere = elsewhere_section()         # first: a file that collects nothing stops us
    with ThreadPoolExecutor(max_workers=4) as pool:
        lines = list(pool.map(lambda r: line_for(r, old), ROWS))
    DOC.write_text(HEADER + "\n".join(lines) + "\n" + FOOTER + elsewhere)
    print(f"{len(lines)} rows -> {DOC.relative_to(REPO)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
