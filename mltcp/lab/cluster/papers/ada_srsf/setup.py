"""Ada-SRSF's experiment (ada-srsf §V) as data: 16 x 4 V100 on 10 GbE, 160 jobs.

The cluster, the job generator, the schemes the paper compares and its reported
figures (:class:`~mltcp.lab.cluster.papers.figures.PaperSetup`).
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Sequence

from mltcp.lab.cluster.arrivals import catalogue
from mltcp.lab.cluster.arrivals.job_traces import IntRange
from mltcp.lab.cluster.engine.gpu_jobs import JobRequest
from mltcp.lab.cluster.engine.leafspine import LeafSpine
from mltcp.lab.cluster.papers.figures import PaperSetup, Reported, Scheme

ADA_FABRIC = LeafSpine(leaves=1, servers_per_leaf=16, spines=1, gpus_per_server=4,
                       server_gbit=10.0, oversubscription=1.0)
ADA_GPU_MIX = {1: 80, 2: 14, 4: 26, 8: 30, 16: 8, 32: 2}     # ada-srsf §V-A: 160 jobs
ADA_MODELS = ("ada/vgg16", "ada/resnet50", "ada/inception-v3", "ada/lstm-ptb")
ADA_ITERATIONS = IntRange(1000, 6000, "ada.iterations")      # ada-srsf §V-A
ADA_ARRIVAL_SLOTS = 1200                # ada-srsf §V-A: 20 minutes of one-second slots
# ada-srsf Table III's "GPU Memory Usage" (MB) of each model's training, the released
# simulator's train_mem (online/job_master.py, TEMPLATES): what a job takes on each of
# its GPUs when GPUs are time-shared (mltcp.lab.cluster.papers.ada_srsf.timeshare).
ADA_GPU_MEMORY_MB = {"ada/vgg16": 4527.0, "ada/resnet50": 3213.0,
                     "ada/inception-v3": 3291.0, "ada/lstm-ptb": 2751.0}


def ada_srsf_jobs(seed: int = 0) -> list[JobRequest]:
    """ada-srsf's 160 jobs: its GPU-count histogram shuffled, arrivals in one-second slots
    uniform over 20 minutes, a Table III model and 1000-6000 iterations each."""
    rng = random.Random(seed)
    gpus = [g for g, count in ADA_GPU_MIX.items() for _ in range(count)]
    rng.shuffle(gpus)
    arrivals = sorted(float(rng.randint(1, ADA_ARRIVAL_SLOTS)) for _ in gpus)
    out = []
    for i, (g, t) in enumerate(zip(gpus, arrivals, strict=True)):
        model = rng.choice(ADA_MODELS)
        out.append(catalogue.job_request(model, name=f"j{i}-{model}", arrival_s=t, gpus=g,
                                         iterations=ADA_ITERATIONS.draw(rng)))
    return out


_T5 = "ada-srsf Table V"
_T4 = "ada-srsf Table IV"
_ADA_V = "LWF-1 placement, 64 GPUs, 160 jobs"
_ADA_IV = "Ada-SRSF scheduling, 64 GPUs, 160 jobs"

ADA_RESULTS = (
    Reported(_ADA_V, "average JCT", "Ada-SRSF", "SRSF(1)", f"{_T5}; abstract", 1098.57,
             1374.84, "s", stated_pct=20.1),
    Reported(_ADA_V, "average JCT", "Ada-SRSF", "SRSF(2)", f"{_T5}; abstract", 1098.57,
             1734.74, "s", stated_pct=36.7),
    Reported(_ADA_V, "average JCT", "Ada-SRSF", "SRSF(3)", _T5, 1098.57, 1750.9, "s"),
    Reported(_ADA_V, "median JCT", "Ada-SRSF", "SRSF(1)", _T5, 487.2, 459.0, "s"),
    Reported(_ADA_V, "95th-percentile JCT", "Ada-SRSF", "SRSF(1)", f"{_T5}; §V-B", 4024.0,
             6283.1, "s", stated_factor=1.56),
    Reported(_ADA_V, "average GPU utilisation", "Ada-SRSF", "SRSF(1)", f"{_T5}; §V-B", 42.78,
             30.65, "%", stated_pct=39.6, higher_is_better=True),
    Reported(_ADA_V, "average GPU utilisation", "Ada-SRSF", "SRSF(2)", _T5, 42.78, 25.95, "%",
             higher_is_better=True),
    Reported(_ADA_IV, "average GPU utilisation", "LWF-1", "RAND", f"{_T4}; §V-B", 42.78, 19.52,
             "%", stated_factor=2.19, higher_is_better=True),
    Reported(_ADA_IV, "average GPU utilisation", "LWF-1", "FF", f"{_T4}; §V-B; abstract",
             42.78, 26.76, "%", stated_factor=1.59, higher_is_better=True),
    Reported(_ADA_IV, "average GPU utilisation", "LWF-1", "LS", f"{_T4}; §V-B", 42.78, 25.14,
             "%", stated_factor=1.7, higher_is_better=True),
    Reported(_ADA_IV, "average JCT", "LWF-1", "RAND", f"{_T4}; §V-B", 1098.57, 2881.6, "s",
             stated_pct=61.9),
    Reported(_ADA_IV, "average JCT", "LWF-1", "FF", f"{_T4}; §V-B", 1098.57, 1921.1, "s",
             stated_pct=42.8),
    Reported(_ADA_IV, "average JCT", "LWF-1", "LS", f"{_T4}; §V-B", 1098.57, 2282.41, "s",
             stated_pct=51.9),
)

ADA_SRSF = PaperSetup(
    key="ada-srsf",
    paper="ada-srsf",
    title="Ada-SRSF / LWF-1 on 16 x 4 V100 over 10 GbE (ada-srsf §V)",
    source="004_0a96367fb60817d1.txt §V-A, Tables III-V",
    fabric=ADA_FABRIC,
    topology="16 servers, 4 Tesla V100 each (64 GPUs), one 10 Gbps Ethernet switch of "
             "sufficiently large bandwidth (§III-B1, §V-A); communication contention is "
             "at the servers' NICs (Eq. 5)",
    mapping=(
        "one leaf of 16 servers and one (unused) spine: no traffic crosses a spine, as "
        "under the paper's single non-blocking switch",
        "the paper's schedulers (ada-srsf, srsf/...) run as its released simulator does "
        "(github.com/HKBU-HPML/dl-scheduling, online/): GPUs time-shared up to 32768 MB "
        "each, a job taking Table III's memory on each of its GPUs; each all-reduce "
        "moves the whole model, admitted whole by SRSF(n)'s or AdaDUAL's gate, at Eq. "
        "5's 1 / ((k - 1) eta + k beta) with the code's beta = 0.856 and eta = 0.235 ms/MB "
        "(mltcp.lab.cluster.papers.ada_srsf.timeshare)",
        "the one-job-a-GPU variants (ada-srsf-excl, srsf-excl/...) run on the flow-level "
        "engine: 10 Gbit/s NICs (9.56 Gbit/s of goodput at MTU 1500, close to the paper's "
        "fitted 1/b = 9.38 Gbit/s, ada-srsf Fig. 2(a)) shared max-min, no Eq. 5 penalty",
    ),
    workload="160 jobs arriving within 20 minutes in one-second slots; half single-GPU, "
             "then 14 x 2, 26 x 4, 30 x 8, 8 x 16 and 2 x 32 GPUs; 1000-6000 iterations; "
             "models of Table III (VGG-16, ResNet-50, Inception-V3, LSTM-PTB)",
    workload_assumptions=(
        "each job's model is drawn uniformly from Table III's four (the paper gives no mix)",
        "iterations uniform over 1000-6000 (the paper gives the range only)",
        "each job's arrival slot uniform over 1..1200 s: the paper draws per-slot counts "
        "from a uniform distribution refined to sum to 160 (its formula sums to slot 1440, "
        "taken as a typo for 1200)",
        "the GPU counts are the paper's histogram, shuffled over the arrivals",
    ),
    schemes=(
        Scheme("SRSF(1)", "shortest remaining service first; at most one communication "
               "task per link (no contention)",
               "ada-srsf x srsf-1: the released simulator's gate (comm_thres = n - 1), "
               "mltcp.lab.cluster.papers.ada_srsf.contention"),
        Scheme("SRSF(2)", "SRSF allowing 2-way contention blindly", "as SRSF(1), n = 2"),
        Scheme("SRSF(3)", "SRSF allowing 3-way contention", "as SRSF(1), n = 3"),
        Scheme("Ada-SRSF", "SRSF + AdaDUAL: admits 2-way contention only when it lowers "
               "the average completion time",
               "ada-srsf x ada-dual (its check as the released code runs it; "
               "ada-srsf-exact without the code's accounting quirk); MLTCP's F is this "
               "project's answer to the same contention (ada-srsf-excl x mltcp)"),
        Scheme("RAND/FF/LS/LWF-1", "placements: random, first-fit, list scheduling, "
               "least-workload-first with kappa = 1", "srsf/rand, srsf/ff, srsf/ls, "
               "ada-srsf: the released code's pick_gpus on time-shared GPUs "
               "(mltcp.lab.cluster.papers.ada_srsf.shared_placement)"),
    ),
    results=ADA_RESULTS,
    generate=ada_srsf_jobs,
)


CODE_SCALE = 100            # job_master.py: scale = 10 against the text's 1000-6000, 1200 s

def scaled(jobs: Sequence[JobRequest], scale: int = CODE_SCALE) -> list[JobRequest]:
    """``jobs`` with 1 / ``scale`` of their iterations (at least 1) and arrival times
    (the code draws 10-60 iterations uniformly; a hundredth of 1000-6000, rounded, gives
    10 and 60 half as often)."""
    if scale == 1:
        return list(jobs)
    return [dataclasses.replace(j, iterations=max(1, round(j.iterations / scale)),
                                arrival_s=j.arrival_s / scale) for j in jobs]
