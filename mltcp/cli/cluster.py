"""Cluster experiments: ``mltcp cluster run``, ``rl-train`` and ``schedulers``.

``run`` takes an experiment config (:mod:`mltcp.lab.cluster.experiments.config`), claims
``--out`` for its run set (:mod:`mltcp.lab.common.runset`: another run set there is
refused unless ``--force``), runs every scheduler x network scheme x seed on the cluster
simulator, here, on ``--parallel N`` local worker processes or on a Dask cluster
(``--dask ADDR``), and writes the report
(:mod:`mltcp.lab.cluster.experiments.report`); interrupted (Ctrl-C, SIGTERM, SIGHUP), it
writes the report of the runs that finished, marked partial, and exits 128 + N.
``rl-train`` trains the RL scheduler's policy
(:mod:`mltcp.lab.cluster.papers.deepshare_rl.train`).  ``schedulers`` lists what a
config's ``schedulers`` and ``networks`` may name.  Parsing imports nothing of the lab; the
simulator (numpy, matplotlib) is imported when a command runs.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from mltcp.cli import args as args_
from mltcp.cli.output import add_json_flag, emit
from mltcp.core import console


def register(sub: Any) -> None:
    """Add ``mltcp cluster ...`` to the top-level subparsers."""
    cl = sub.add_parser("cluster", help="schedulers x network schemes on a simulated GPU "
                                        "cluster (JCT, waiting, slowdown; report + plots)")
    cls = cl.add_subparsers(dest="cluster_cmd", required=True, metavar="SUBCOMMAND")

    rn = cls.add_parser("run", help="every scheduler x network x seed of an experiment "
                                    "config; write report.json, summary.md and plots")
    rn.add_argument("config", help="an experiment TOML file, or an example's name "
                                   "(mltcp/lab/cluster/experiments/examples/, e.g. small)")
    rn.add_argument("--out", required=True, help="output directory")
    args_.add_fan_out_flags(rn, "1")
    args_.add_force_flag(rn)
    rn.set_defaults(handler=cmd_run, teardown_signals=True, records_results=True)

    tr = cls.add_parser("rl-train", help="train the RL contention-aware scheduler's policy "
                                         "(deepshare-rl) on the simulator; write NAME.zip, "
                                         "NAME.json and NAME-curves.png")
    tr.add_argument("--out", required=True, help="output directory")
    tr.add_argument("--name", default="policy",
                    help="file name stem: letters, digits, '.', '_', '-', at most 100, "
                         "without .zip, which is added (default: policy)")
    tr.add_argument("--trace", choices=("normal", "heavy", "medium", "low"),
                    help="deepshare-rl's trace whose training job sets make the episodes "
                         "(default: normal)")
    tr.add_argument("--w1", type=args_.number(0, 1, "0.4"),
                    help="reward weight of contention, 0..1 (W2 = 1 - W1; default 0.4, "
                         "deepshare-rl's branch B)")
    tr.add_argument("--timesteps", type=args_.integer(64, 10**9, "60000"),
                    help="training steps (scheduling decisions), 64..10^9 (default 60000)")
    tr.add_argument("--jobs", type=args_.integer(1, 100_000, "256"),
                    help="jobs per episode, 1..100000 (default 256, deepshare-rl's job sets)")
    tr.add_argument("--duration-s", type=args_.number(1, 1e7, "3600"),
                    help="each job's time alone in seconds, 1..10^7 (default 3600, deepshare-rl's "
                         "hour)")
    tr.add_argument("--round-s", type=args_.number(0.001, 1e6, "300", lo_open=True),
                    help="scheduling round in seconds, > 0.001 (default 300)")
    tr.add_argument("--network", choices=("fair", "mltcp"),
                    help="congestion control under the episodes (default fair)")
    tr.add_argument("--seed", type=args_.integer(0, 2**31 - 1, "0"),
                    help="the policy's and the episodes' random seed, 0..2^31-1 (default 0)")
    tr.add_argument("--n-steps", type=args_.integer(16, 10**6, "2048"),
                    help="PPO's rollout length, 16..10^6 (default 2048)")
    tr.add_argument("--gamma", type=args_.number(0, 1, "0.99", lo_open=True),
                    help="PPO's discount per decision, > 0 and <= 1 (default 0.99)")
    tr.add_argument("--ent-coef", type=args_.number(0, 1, "0.01"),
                    help="PPO's entropy bonus, 0..1 (default 0)")
    tr.add_argument("--learning-rate", type=args_.number(1e-7, 1, "0.0003"),
                    help="PPO's step size, 1e-7..1 (default 0.0003, stable-baselines3's); "
                         "lower keeps a warm-started policy near the rule it imitated")
    tr.add_argument("--jct-weight", type=args_.number(0, 100, "1"),
                    help="W3, the reward's JCT term: -W3 x the fraction of the set's jobs "
                         "waiting or running, per round; 0..100 (default 0: deepshare-rl's "
                         "Eq. 2 alone)")
    tr.add_argument("--select-sets", type=_job_sets, metavar="SETS",
                    help="pick the checkpoint with the lowest mean JCT on these job sets, "
                         "e.g. 200-204 or 200,203; disjoint from training's 100-109 and the "
                         "comparison's 0-9 (default: none, the last policy is written)")
    tr.add_argument("--select-every", type=args_.integer(1, 10**9, "10000"), metavar="N",
                    help="judge a checkpoint every N training steps (at the next PPO "
                         "update), 1..10^9 (default 10000)")
    tr.add_argument("--select-by", choices=("rl-hybrid", "rl-base"),
                    help="the scheduler a checkpoint is judged as (default rl-hybrid)")
    tr.add_argument("--warm-start", choices=("deepshare-first-fit",),
                    help="imitate this rule on the training sets before PPO (default: none, "
                         "PPO from a random policy)")
    tr.add_argument("--warm-start-epochs", type=args_.integer(1, 10_000, "20"), metavar="N",
                    help="passes over the rule's decisions, 1..10000 (default 20)")
    tr.set_defaults(handler=cmd_rl_train, teardown_signals=True, records_results=True)

    sc = cls.add_parser("schedulers", help="the schedulers and network schemes a config "
                                           "may name")
    add_json_flag(sc, "{orders, placements, flags, named, networks}")
    sc.set_defaults(handler=cmd_schedulers)


def cmd_run(args: argparse.Namespace) -> int:
    from mltcp.core import signals
    from mltcp.lab.cluster.experiments import config, report
    from mltcp.lab.cluster.experiments import runner as experiment
    from mltcp.lab.common.outdir import make_out_dir

    cfg = config.load_config(args.config)
    jobs = experiment.job_lists(cfg)        # checked, as the runs will, before --out exists
    args_.check_fan_out(args)
    make_out_dir(args.out)
    try:
        result = experiment.execute(cfg, parallel=args.parallel or 1, dask_address=args.dask,
                                    out_dir=args.out, force=args.force, jobs=jobs)
    except experiment.RunsInterrupted as stop:
        return _interrupted(stop.result, stop.signo, args.out, write=True)
    try:
        with signals.deferred():        # every run is done: a signal waits for the report
            written = report.write(result, args.out)
    except signals.Terminated as stop:
        return _interrupted(result, stop.signo, args.out, write=False)
    print(report.table(written))
    print()
    print(report.vs_fair_table(written))
    out = Path(args.out)
    print(f"\n{len(result.runs)} runs -> {out / 'report.json'}, {out / 'summary.md'}, "
          f"{out / 'jobs.*'}, {out / 'cells.*'}, {out / 'jct_cdf.png'}, "
          f"{out / 'slowdown_cdf.png'} (and .pdf)")
    return 0


def _interrupted(result: Any, signo: int, out_dir: str, write: bool) -> int:
    """An interrupted ``cluster run``: the report of the runs that finished (``write``:
    not written yet; marked partial where runs are missing), one line on stderr saying
    so and where it is, and the signal's exit code (130 for Ctrl-C).  Under the CLI's
    teardown signals a second signal meanwhile is ignored (mltcp.core.signals), so the
    report is written whole."""
    from mltcp.core import signals
    from mltcp.lab.cluster.experiments import report

    done, total = len(result.runs), result.runs_total or len(result.runs)
    where = f"interrupted ({signals.name(signo)}) after {done} of {total} runs"
    if write and done:
        report.write(result, out_dir)
    kind = "partial report" if result.partial else "report"
    line = (f"{where}: {kind} in {Path(out_dir) / 'report.json'}" if done
            else f"{where}: no report written")
    console.line(f"mltcp: {line}")           # nothing if stderr went with the SSH session
    return signals.exit_code(signo)


def _job_sets(text: str) -> tuple[int, ...]:
    """``--select-sets``: ``200-204`` or ``200,203`` (which sets may be used is the
    training's rule, checked when the command runs)."""
    from mltcp.core import validate
    from mltcp.core.errors import SpecError

    try:
        return validate.seeds(text, "")
    except SpecError as err:
        raise argparse.ArgumentTypeError(f"{err.problem}; {err.fix}") from None


# rl-train's options that only mean something with another: given alone, each would be
# accepted and ignored (and left out of the command recorded with the policy).
NEEDS = {"select_every": ("select_sets", "200-204"), "select_by": ("select_sets", "200-204"),
         "warm_start_epochs": ("warm_start", "deepshare-first-fit")}


def _flag(field: str) -> str:
    return "--" + field.replace("_", "-")


def _check_needed(args: argparse.Namespace) -> None:
    """Refuse an option given without the option it belongs to (:data:`NEEDS`)."""
    from mltcp.core.errors import SpecError

    for option, (needed, example) in NEEDS.items():
        if getattr(args, option) is not None and getattr(args, needed) is None:
            raise SpecError(_flag(option), f"is given without {_flag(needed)}, the only "
                            "thing it applies to", f"add {_flag(needed)} (e.g. {_flag(needed)} "
                            f"{example}) or drop {_flag(option)}")


def cmd_rl_train(args: argparse.Namespace) -> int:
    import shlex

    from mltcp.core.errors import SpecError
    from mltcp.lab.cluster.papers.deepshare_rl import train as rl_train
    from mltcp.lab.common.outdir import make_out_dir

    given = {k: getattr(args, k) for k in ("trace", "w1", "timesteps", "jobs", "duration_s",
                                            "round_s", "network", "seed", "n_steps",
                                            "gamma", "ent_coef", "learning_rate",
                                            "jct_weight", "select_sets", "select_every",
                                            "select_by", "warm_start", "warm_start_epochs")
             if getattr(args, k) is not None}
    _check_needed(args)
    try:
        cfg = rl_train.TrainConfig(**given)       # the defaults are TrainConfig's
    except SpecError as err:                      # named by its flag, before any output
        raise SpecError(_flag(err.field), err.problem, err.fix) from None
    rl_train.policy_name(args.name, "--name")
    make_out_dir(args.out)
    rl_train.check_outputs(args.out, args.name)
    # the command that reproduces this policy, every setting spelt out
    flags = ["--out", args.out, "--name", args.name, "--trace", cfg.trace, "--w1", cfg.w1,
             "--timesteps", cfg.timesteps, "--jobs", cfg.jobs, "--duration-s", cfg.duration_s,
             "--round-s", cfg.round_s, "--network", cfg.network, "--seed", cfg.seed,
             "--n-steps", cfg.n_steps, "--gamma", cfg.gamma, "--ent-coef", cfg.ent_coef,
             "--learning-rate", cfg.learning_rate, "--jct-weight", cfg.jct_weight]
    if cfg.select_sets:
        flags += ["--select-sets", ",".join(map(str, cfg.select_sets)),
                  "--select-every", cfg.select_every, "--select-by", cfg.select_by]
    if cfg.warm_start:
        flags += ["--warm-start", cfg.warm_start, "--warm-start-epochs", cfg.warm_start_epochs]
    command = "mltcp cluster rl-train " + shlex.join(str(f) for f in flags)
    result = rl_train.train(cfg, args.out, args.name, command=command)
    picked = result.selection.picked if result.selection else None
    where = (f", the checkpoint at {picked.timesteps} steps: {cfg.select_by} mean JCT "
             f"{picked.score_s / 3600:.2f} h on the selection sets" if picked else "")
    print(f"policy {result.policy} ({result.train_s:.0f} s, {len(result.episodes)} "
          f"episodes{where}); run it as scheduler rl-base@{result.policy} or "
          f"rl-hybrid@{result.policy}")
    return 0


def cmd_schedulers(args: argparse.Namespace) -> int:
    from mltcp.lab.cluster.experiments.registry import FLAGS, NAMED, NETWORKS
    from mltcp.lab.cluster.schedulers.orders import ORDERS
    from mltcp.lab.cluster.schedulers.placement import POLICIES

    known = {"orders": list(ORDERS), "placements": list(POLICIES), "flags": list(FLAGS),
             "named": sorted(NAMED), "networks": list(NETWORKS)}
    if getattr(args, "json", False):
        emit(known)
        return 0
    print("schedulers: ORDER/PLACEMENT[+" + "][+".join(known["flags"]) + "], e.g. "
          "fifo/consolidated, las/consolidated+preempt")
    print(f"  orders:     {', '.join(known['orders'])}")
    print(f"  placements: {', '.join(known['placements'])}")
    print(f"  named:      {', '.join(known['named']) or '(none registered)'}")
    print("  rl-base@POLICY.zip, rl-hybrid@POLICY.zip: the RL scheduler with a policy of "
          "mltcp cluster rl-train (a path relative to the config, or a shipped policy's name)")
    print(f"networks:     {', '.join(known['networks'])}")
    return 0
