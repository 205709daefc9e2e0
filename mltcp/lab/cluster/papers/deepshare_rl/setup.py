"""The RL contention-aware scheduler's experiment (deepshare-rl §VI) as figures: its
four traces' setups (the cluster, traces and baselines themselves are :mod:`.rules`'),
the schemes it compares and its reported figures
(:class:`~mltcp.lab.cluster.papers.figures.PaperSetup`).
"""

from __future__ import annotations

from mltcp.lab.cluster.papers.deepshare_rl import rules as deepshare
from mltcp.lab.cluster.papers.figures import PaperSetup, Reported, Scheme

_DS_CTX = "Trace: Normal, Branch B (W1, W2) = (0.4, 0.6)"
_DS_SRC = "deepshare-rl §VI Results (Fig. 5)"
# deepshare-rl's released simulator (scheduler/cluster_env.py) adds a job's rounds on GPUs to its
# "JCT": its JCT is time on GPUs, queueing left out.  Each figure is therefore compared
# both ways: with our JCT (end - arrival) and with time on GPUs.
_DS_ON_GPUS = "deepshare-rl's simulator counts a job's time on GPUs as its JCT"
DEEPSHARE_RESULTS = tuple(
    Reported(_DS_CTX, metric, scheme, base, _DS_SRC, stated_pct=pct, note=note)
    for kind, note in (("JCT", ""), ("JCT (time on GPUs)", _DS_ON_GPUS))
    for metric, scheme, base, pct in (
        (f"average {kind}", "RL-base", "SRTF", 15.4), (f"average {kind}", "RL-base", "LAS", 18.2),
        (f"average {kind}", "RL-Hybrid", "SRTF", 12.1),
        (f"average {kind}", "RL-Hybrid", "LAS", 15.1),
        (f"p90 {kind}", "RL-base", "SRTF", 16.4), (f"p90 {kind}", "RL-base", "LAS", 20.7),
        (f"p90 {kind}", "RL-Hybrid", "SRTF", 16.4), (f"p90 {kind}", "RL-Hybrid", "LAS", 20.7)))


# deepshare-rl §VI on Fig. 8: "in low communication traces, we observe that SRTF and LAS perform
# similarly to RL-Hybrid"; the heavy and medium traces' figures are only plotted.
_LOW_NOTE = "the paper: 'perform similarly' (Fig. 8, read as 0 %)"
DEEPSHARE_LOW = tuple(
    Reported("Trace: Low", "average JCT", "RL-Hybrid", base, "deepshare-rl §VI (Fig. 8)",
             stated_pct=0.0, note=_LOW_NOTE) for base in ("SRTF", "LAS"))


def _deepshare_setup(trace: str) -> PaperSetup:
    mix = ":".join(map(str, deepshare.TRACES[trace]))
    return PaperSetup(
        key=f"deepshare-{trace}",
        paper="deepshare-rl",
        title=f"RL contention-aware scheduling, {trace} trace (deepshare-rl §VI)",
        source="deepshare-rl §VI",
        fabric=deepshare.fabric(),
        topology="4 nodes x 8 TITAN Xp, one ConnectX-4 NIC each, 10 GbE and 40 Gbps "
                 "InfiniBand",
        mapping=("one switch (a leaf, one spine no flow crosses), 4 servers of 8 GPUs, "
                 "40 Gbit/s per server (FSDP's 2672 MB/s exceeds the 10 GbE)",),
        workload=f"job sets of 256 randomly shuffled jobs, models GNN:IMG:DLRM:LM:FSDP:MoE = "
                 f"{mix}, GPU demand up to 32, each an hour alone",
        workload_assumptions=(
            "the random seed = the job set's index (sets 0-9 as the paper's ten)",
            "demands uniform over 2, 4, 8, 16 GPUs "
            "(mltcp.lab.cluster.papers.deepshare_rl.rules says why)",
            "all 256 jobs queued at time 0 (an episode of the paper's simulator)",
            "GraphSage and MobileNetV3 accumulate gradients to >= 0.25 s iterations",
        ),
        schemes=(
            Scheme("RL-base", "the trained policy alone", "rl-base (the shipped policy)"),
            Scheme("RL-Hybrid", "the policy, greedy when it schedules nothing", "rl-hybrid"),
            Scheme("LAS", "least attained service, re-ranked every round", "deepshare-las"),
            Scheme("SRTF", "shortest remaining time first, re-ranked every round",
                   "deepshare-srtf"),
        ),
        results={"normal": DEEPSHARE_RESULTS, "low": DEEPSHARE_LOW}.get(trace, ()),
        generate=lambda seed, trace=trace: deepshare.job_set(trace, seed),
    )


DEEPSHARE = tuple(_deepshare_setup(t) for t in deepshare.TRACES)
