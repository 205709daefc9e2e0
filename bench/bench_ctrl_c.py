"""Ctrl-C on a long run of every backend: SIGINT to `mltcp` until the process is gone.

Each case starts a run that would take far longer than the bench (hours of simulated
time on the models, thousands of iterations on the real ones), waits for the line on
stderr that says it is running, waits a further random 0-2 s (seeded: the signal lands
anywhere in the run's loop, not just after a progress line), sends SIGINT and times the
exit; the exit code must be 130.  Trials of one case run one after another, the cases
interleaved round by round (this machine is shared; no case gets the quiet minutes).

Cases: ``fluid``, ``dcqcn`` and ``ns3`` (compatible-pair, 10,000 iterations; ns3 only
where ns-3 is installed), ``netns`` (real kernel TCP in namespaces, root and the eBPF
datapath), ``hosts`` (PyTorch DDP over SSH on namespace hosts with sshd, root and
mltcp[torch]; the tiny-transformer pair of tests/test_hosts_backend.py, 500 iterations),
``cluster`` (`mltcp cluster run` of two jobs of 10^9 iterations) and ``rl-train`` (a
training of 10^6 steps).  A case whose requirements are missing is skipped with the
reason.  Writes JSON, a table and the figure (PNG and PDF):

    python bench/bench_ctrl_c.py --out bench/results/ctrl_c.json --trials 5
"""

from __future__ import annotations

import argparse
import contextlib
import json
import random
import statistics
import sys
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from mltcp.lab.common import plotting  # noqa: E402
from mltcp.lab.common.provenance import provenance  # noqa: E402
from tests.interrupt import ctrl_c_when  # noqa: E402
from tests.test_cluster_cli import LONG_CONFIG as _LONG_CONFIG  # noqa: E402
from tests.test_cluster_cli import LONG_TRACE  # noqa: E402  (two jobs of 10^9 iterations)

LONG_CONFIG = _LONG_CONFIG.format(network="mltcp", f_steps=8)

@dataclass(frozen=True)
class Case:
    """One backend: the argv run in a work directory ``setup`` fills, the stderr text
    that says it runs, how long it may take to get there, and why it cannot run here
    (None: it can)."""

    name: str
    argv: list[str]
    running: str
    wait_s: float
    missing: Callable[[], str | None]
    setup: Callable[[Path], contextlib.AbstractContextManager[None]]


def _long_pair(work: Path, iterations: int = 10_000) -> None:
    text = resources.files("mltcp.lab.scenario").joinpath(
        "examples", "compatible-pair.toml").read_text()
    (work / "long.toml").write_text(text.replace("iterations = 40", f"iterations = {iterations}"))


@contextlib.contextmanager
def _files(work: Path, write: Callable[[Path], None]) -> Iterator[None]:
    write(work)
    yield


@contextlib.contextmanager
def _hosts_lab(work: Path) -> Iterator[None]:
    """The hosts test's fabric with sshd on every host, and its inventory, for the case."""
    from mltcp.lab.scenario.emulation import fabric, sshd
    from mltcp.lab.scenario.spec import load_scenario
    from tests.test_hosts_backend import SCENARIO

    (work / "long.toml").write_text(SCENARIO.replace("iterations = 6", "iterations = 500"))
    sc = load_scenario(str(work / "long.toml"))
    with (fabric.for_topology(sc.topology) as net,
          sshd.SshdLab(net, work / "sshd", tuple(sc.topology.host_names()),
                       python=sys.executable) as lab):
        (work / "inventory.toml").write_text(lab.inventory_toml())
        yield


def _needs_root() -> str | None:
    import os
    return None if os.geteuid() == 0 else "needs root (namespaces, the eBPF datapath)"


def _ns3_missing() -> str | None:
    from mltcp.lab.scenario import backends
    try:
        backends.get("ns3").require()
    except Exception as err:       # CapabilityError: one line saying what is missing
        return str(err)
    return None


def _hosts_missing() -> str | None:
    from mltcp.lab.scenario.emulation import sshd
    try:
        import torch  # noqa: F401
    except ImportError:
        return "needs mltcp[torch]"
    return _needs_root() or sshd.missing()


def _rl_missing() -> str | None:
    try:
        import sb3_contrib  # noqa: F401
    except ImportError:
        return "needs mltcp[rl]"
    return None


def cases() -> list[Case]:
    run = ["run", "long.toml", "--out", "out", "--scheme", "mltcp-cubic"]
    return [
        Case("fluid", [*run, "--backend", "fluid"], "fluid model: ", 60,
             lambda: None, lambda w: _files(w, _long_pair)),
        Case("dcqcn", [*run, "--backend", "dcqcn"], "dcqcn model: ", 60,
             lambda: None, lambda w: _files(w, _long_pair)),
        Case("ns3", [*run, "--backend", "ns3"], ": ns-3 at ", 120,
             _ns3_missing, lambda w: _files(w, _long_pair)),
        Case("netns", [*run, "--backend", "netns"], "(compute alone ~", 120,
             _needs_root, lambda w: _files(w, _long_pair)),
        Case("hosts", [*run, "--backend", "hosts", "--inventory", "inventory.toml"],
             "workers running", 240, _hosts_missing, _hosts_lab),
        Case("cluster", ["cluster", "run", "long.toml", "--out", "out"],
             "running, simulated", 60, lambda: None,
             lambda w: _files(w, lambda d: ((d / "jobs.csv").write_text(LONG_TRACE),
                                            (d / "long.toml").write_text(LONG_CONFIG)))),
        Case("rl-train", ["cluster", "rl-train", "--out", "out", "--name", "p", "--jobs", "8",
                          "--duration-s", "300", "--round-s", "30", "--timesteps",
                          "1000000", "--n-steps", "1024"],
             "[episode 1,", 120, _rl_missing, lambda w: _files(w, lambda _d: None)),
    ]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default="bench/results/ctrl_c.json")
    ap.add_argument("--trials", type=int, default=5)
    ap.add_argument("--case", action="append", help="only these cases (repeatable)")
    args = ap.parse_args()
    rng = random.Random(0)
    chosen = [c for c in cases() if not args.case or c.name in args.case]
    skipped = {c.name: why for c in chosen if (why := c.missing()) is not None}
    runnable = [c for c in chosen if c.name not in skipped]
    for name, why in skipped.items():
        print(f"{name}: skipped ({why})", flush=True)
    got: dict[str, list[dict]] = {c.name: [] for c in runnable}
    with contextlib.ExitStack() as stack:
        works = {}
        for case in runnable:
            work = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="ctrl-c-")))
            stack.enter_context(case.setup(work))
            works[case.name] = work
        for trial in range(args.trials):
            for case in runnable:
                delay = rng.uniform(0.0, 2.0)
                r = ctrl_c_when(case.argv, works[case.name], case.running,
                                wait_s=case.wait_s, exit_s=60.0, delay_s=delay)
                got[case.name].append({"latency_s": r.latency_s, "returncode": r.returncode,
                                       "delay_s": delay,
                                       "last_line": (r.stderr.splitlines() or [""])[-1]})
                print(f"{case.name:8s} trial {trial + 1}: exit {r.returncode} "
                      f"{r.latency_s:.3f} s after SIGINT", flush=True)
    table = {name: {"N": len(rows), "min_s": min(x["latency_s"] for x in rows),
                    "median_s": statistics.median(x["latency_s"] for x in rows),
                    "max_s": max(x["latency_s"] for x in rows),
                    "all_exit_130": all(x["returncode"] == 130 for x in rows)}
             for name, rows in got.items()}
    for name, row in table.items():
        print(f"{name:8s} N={row['N']}: {row['min_s']:.3f} / {row['median_s']:.3f} / "
              f"{row['max_s']:.3f} s (min / median / max), exit 130 every time: "
              f"{row['all_exit_130']}")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"schema": "mltcp.bench.ctrl_c/1", "provenance": provenance(),
                               "trials": got, "table": table, "skipped": skipped},
                              indent=2) + "\n")
    if table:
        fig, ax = plotting.figure(figsize=(7.0, 3.2))
        names = list(table)
        for i, name in enumerate(names):
            ys = [x["latency_s"] for x in got[name]]
            ax.plot([i] * len(ys), ys, "o", color="C0", alpha=0.6)
            ax.hlines(table[name]["median_s"], i - 0.3, i + 0.3, colors="k")
        ax.axhline(1.0, color="C3", linestyle="--", label="1 s target")
        ax.set_xticks(range(len(names)), names)
        ax.set_ylabel("SIGINT -> exit (s)")
        ax.set_title(f"Ctrl-C on a long run, per backend (N={args.trials} each; "
                     "dots: trials, bar: median)", fontsize=9)
        ax.legend(fontsize=8)
        plotting.save(fig, out.with_suffix(""))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
