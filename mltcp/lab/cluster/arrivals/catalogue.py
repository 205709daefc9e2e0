"""The models the cluster simulator's jobs train: what one iteration costs, per paper.

A job request needs two numbers per iteration, its compute time and the bytes its
servers reduce (:class:`mltcp.lab.cluster.engine.simulator.JobRequest`).  The source documents
(``/work/shared/seeds``) measure them on different GPUs, batch sizes and links, and
report them in different forms (forward/backward times, iteration times under fair
and unfair sharing, model sizes, bandwidth and communication-to-computation ratios).
This module turns each paper's figures into one :class:`ModelProfile` per (model,
setup), keeps the paper's raw numbers next to what is derived from them, and says how:
the derivations are code below, not typed-in results, so a test can check them.

Names: the Cassini thesis' models (``thesis`` ch. 4, the MLTCP testbed's GPUs and links)
have plain names (``vgg16``, ``gpt3``); the other papers' profiles carry a prefix:
``ada/`` (``ada-srsf``, Ada-SRSF, V100 + 10 GbE), ``deepshare/`` (``deepshare-rl``, the RL
scheduler's TITAN Xp cluster), ``vclos/`` (``vclos``, vClos's V100 + 100 Gbit/s RoCE).

Units: "MB" in the model-size columns of ``ada-srsf`` Table III and ``thesis`` Table 4.2 is
read as MiB (2^20 bytes): VGG-16's 138.4 M fp32 parameters are 527.8 MiB, which both
tables give as ~527 (526.4, 528), while 10^6-byte megabytes would be 553.  ``deepshare-rl``'s
MB/s are 10^6 bytes per second (its parameter counts are given directly).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from mltcp.core import validate
from mltcp.core.errors import SpecError
from mltcp.lab.cluster.engine.gpu_jobs import ring_bytes
from mltcp.lab.cluster.engine.simulator import JobRequest

MIB = 2**20
FP32 = 4                                   # bytes per parameter and gradient

# How the simulator (a ring all-reduce of ``gradient_bytes`` over the job's servers
# every iteration, :mod:`mltcp.lab.cluster.engine.gpu_jobs`) stands in for each collective.
COLLECTIVES: dict[str, str] = {
    "allreduce": "data-parallel ring all-reduce of the gradients: the simulator's own "
                 "model, exact in volume",
    "fsdp": "FSDP's per-layer AllGather (forward and backward) and ReduceScatter: run as "
            "one ring all-reduce of gradient_bytes, which holds 1.5x the fp32 gradients "
            "(the paper's 'at least 50 % more than data parallel'); the per-layer phases "
            "are lost",
    "alltoall": "MoE all-to-all between experts: run as a ring all-reduce of the same "
                "per-server bytes; a real all-to-all sends from every server to every "
                "other at once (more flows, more spine crossings), so contention is "
                "under-estimated",
    "embedding": "DLRM: all-to-all of the partitioned embedding tables plus an all-reduce "
                 "of the replicated MLP; run as one ring all-reduce of the equivalent "
                 "per-server bytes",
    "hybrid": "hybrid data/pipeline/tensor parallelism (DeepSpeed): several Up/Down "
              "phases per iteration (thesis Fig. 4.1); run as one all-reduce of the "
              "equivalent bytes after the compute, so the phase shape is lost",
}


@dataclass(frozen=True)
class ModelProfile:
    """One model as one paper trains it.

    ``gradient_bytes`` is what each iteration reduces (the simulator's ring sends
    ``2 (m - 1) / m`` of it per server); ``compute_s`` is one iteration's compute at
    ``batch`` (per GPU) on ``gpu``; ``comm_s``, where known, is the paper's (or derived)
    communication time of one dedicated iteration on its ``link_gbit`` setup (what the
    paper measured, which need not be line rate: ``deepshare-rl``'s are far below it), kept for
    comparison; the simulator derives its own from the bytes.  ``derived`` says
    which of these numbers are not the paper's own and how they were obtained ("" when
    all are the paper's)."""

    name: str
    model: str                      # as the paper names it
    parameters: float
    gradient_bytes: float
    compute_s: float
    batch: str                      # per-GPU batch size(s), as the paper gives them
    gpu: str
    link_gbit: float                # the link the paper measured or simulated on
    collective: str                 # a key of COLLECTIVES
    gpu_counts: tuple[int, ...]     # GPU counts the paper gives this model's jobs
    source: str
    comm_s: float | None = None
    derived: str = ""

    def __post_init__(self) -> None:
        field = f"catalogue[{self.name}]"
        validate.number(self.parameters, f"{field}.parameters", 0, 1e13, "138e6",
                        lo_open=True)
        validate.number(self.gradient_bytes, f"{field}.gradient_bytes", 0, 1e13, "553e6",
                        lo_open=True)
        validate.number(self.compute_s, f"{field}.compute_s", 0, 86_400, "0.1",
                        lo_open=True)
        validate.number(self.link_gbit, f"{field}.link_gbit", 0, 10_000, "10", lo_open=True)
        validate.choice(self.collective, f"{field}.collective", COLLECTIVES)
        if self.comm_s is not None:
            validate.number(self.comm_s, f"{field}.comm_s", 0, 86_400, "0.1", lo_open=True)
        if not self.gpu_counts:
            raise SpecError(f"{field}.gpu_counts", "is empty", "give at least one, e.g. (1, 2)")
        for n in self.gpu_counts:
            validate.integer(n, f"{field}.gpu_counts", 1, 1 << 20, "8")

    @property
    def treatment(self) -> str:
        """How the simulator runs this model's collective (one sentence)."""
        return COLLECTIVES[self.collective]

    @property
    def iteration_s(self) -> float | None:
        """A dedicated iteration (compute, then communication), where ``comm_s`` is known."""
        return None if self.comm_s is None else self.compute_s + self.comm_s


def ring_allreduce_s(gradient_bytes: float, servers: int, gbit: float) -> float:
    """A ring all-reduce of ``gradient_bytes`` over ``servers`` at ``gbit`` line rate:
    each server sends ``2 (m - 1) / m`` of the bytes (no header overhead, no latency).
    The derivations below use it at m = 2, where a server sends the bytes once."""
    return ring_bytes(gradient_bytes, servers) * 8 / (gbit * 1e9)


# --- ada-srsf: Ada-SRSF (Table III on a V100, Eq. 2's fit on 10 GbE) -----------------------

ADA_A_S = 6.69e-4          # ada-srsf §III-A2, Fig. 2(a): T_ar = a + b M, 2-node ring, 10 GbE
ADA_B_S_PER_BYTE = 8.53e-10
ADA_GPU_COUNTS = (1, 2, 4, 8, 16, 32)      # ada-srsf §V-A: 1-, 2-, 4-, 8-, 16-, 32-GPU jobs


def _ada(key: str, model: str, size_mib: float, batch: int, tf_ms: float,
         tb_ms: float) -> ModelProfile:
    nbytes = size_mib * MIB
    return ModelProfile(
        f"ada/{key}", model, nbytes / FP32, nbytes, (tf_ms + tb_ms) / 1e3, str(batch),
        "Tesla V100-16GB", 10.0, "allreduce", ADA_GPU_COUNTS,
        f"ada-srsf Table III ({model}: {size_mib} MB, batch {batch}, t_f {tf_ms} ms, "
        f"t_b {tb_ms} ms); 10 GbE per ada-srsf §V-A",
        comm_s=ADA_A_S + ADA_B_S_PER_BYTE * nbytes,
        derived="compute_s = t_f + t_b; gradient_bytes = the model size read as MiB; "
                "parameters = bytes / 4 (fp32); comm_s = a + b*M with ada-srsf Eq. 2's fit "
                "(a = 6.69e-4 s, b = 8.53e-10 s/B, 2-node ring on 10 GbE)")


# --- thesis: Cassini (ch. 4: A100 + 50 Gbit/s RoCE) ---------------------------------------

CASSINI_GPU = "A100 40GB"
CASSINI_GBIT = 50.0                       # thesis §4.5.1: one 50 Gbps ConnectX-5 per server
CASSINI_DP_GPUS = tuple(range(1, 13))     # thesis §4.5.1: Themis starts a job on 1-12 GPUs
# thesis Fig. 4.3: a data-parallel VGG16 iteration of 255 ms whose Down phase (compute,
# near-zero network demand) spans 141 ms; the Up phase (communication) the other 114.
VGG16_ITER_MS, VGG16_DOWN_MS = 255.0, 141.0
VGG16_UP_MS = VGG16_ITER_MS - VGG16_DOWN_MS
DOWN_PER_UP = VGG16_DOWN_MS / VGG16_UP_MS


def _cassini(key: str, model: str, memory_mib: float, batch: str, compute_s: float,
             comm_s: float | None, collective: str, gpu_counts: tuple[int, ...],
             where: str, derived: str, gradient_bytes: float | None = None) -> ModelProfile:
    nbytes = memory_mib * MIB
    return ModelProfile(
        key, model, nbytes / FP32, nbytes if gradient_bytes is None else gradient_bytes,
        compute_s, batch, CASSINI_GPU, CASSINI_GBIT, collective, gpu_counts,
        f"thesis Table 4.2 ({model}: {memory_mib:g} MB, batch {batch}); {where}",
        comm_s=comm_s,
        derived="parameters = Table 4.2's memory (MiB) / 4 (fp32)"
                + ("" if gradient_bytes is not None else "; gradient_bytes = that memory")
                + (f"; {derived}" if derived else ""))


def _measured(key: str, model: str, memory_mib: float, batch: int, iter_ms: float,
              comm_ms: float, where: str) -> ModelProfile:
    """A model the paper gives both a near-dedicated iteration time (Table 3.1: the
    unfair run of a compatible group, which thesis §3.3 says runs as if on a dedicated
    network) and a communication time (Table 4.3: Th+Cassini, a compatible snapshot)."""
    return _cassini(key, model, memory_mib, str(batch), (iter_ms - comm_ms) / 1e3,
                    comm_ms / 1e3, "allreduce", CASSINI_DP_GPUS, where,
                    f"compute_s = iteration {iter_ms:g} ms - communication {comm_ms:g} ms")


def _scaled(key: str, model: str, memory_mib: float, batch: str, collective: str,
            gpu_counts: tuple[int, ...], comm_ms: float | None = None,
            where: str = "no iteration time in the paper") -> ModelProfile:
    """A model the paper gives no compute time for: VGG16's measured Down:Up split
    (Fig. 4.3, 141:114) applied to its communication time, which is the paper's where it
    reports one, else a 2-server ring all-reduce of its memory at 50 Gbit/s."""
    if comm_ms is None:
        comm_s = ring_allreduce_s(memory_mib * MIB, 2, CASSINI_GBIT)
        how = "comm_s = a 2-server ring all-reduce of the memory at 50 Gbit/s"
    else:
        comm_s = comm_ms / 1e3
        how = f"comm_s = {comm_ms:g} ms ({where})"
    return _cassini(key, model, memory_mib, batch, comm_s * DOWN_PER_UP, comm_s, collective,
                    gpu_counts, where,
                    f"{how}; compute_s = comm_s x 141/114 (VGG16's Down:Up, Fig. 4.3): "
                    "an assumed shape, not a measurement")


def _dlrm() -> ModelProfile:
    """thesis Table 3.1's two DLRM(2000) jobs on one link: 1301/1300 ms per iteration when
    they share fairly (their communications overlap, each at half rate: C + 2X) and
    1001/1019 ms when unfairness interleaves them (as if dedicated: C + X).  So X, the
    dedicated communication time, is the difference; its bytes are X at 50 Gbit/s."""
    fair_ms, unfair_ms = (1301 + 1300) / 2, (1001 + 1019) / 2
    comm_ms = fair_ms - unfair_ms
    nbytes = comm_ms / 1e3 * CASSINI_GBIT * 1e9 / 8
    return _cassini(
        "dlrm", "DLRM", 1962, "2000", (unfair_ms - comm_ms) / 1e3, comm_ms / 1e3,
        "embedding", CASSINI_DP_GPUS, "Table 3.1 (DLRM(2000) x 2: fair 1301/1300 ms, "
        "unfair 1001/1019 ms); model parallel per §4.5.2",
        f"communication X = fair - unfair = {comm_ms:g} ms, compute = unfair - X; "
        f"gradient_bytes = X at 50 Gbit/s (the per-server volume a 2-server ring sends), "
        f"inside Table 4.2's 890-1962 MB; parameters from the range's top", nbytes)


def _cassini_profiles() -> list[ModelProfile]:
    t31_t43 = "Table 3.1 (unfair iteration) and Table 4.3 (Th+Cassini communication)"
    bert_comm = ring_allreduce_s(450 * MIB, 2, CASSINI_GBIT)
    return [
        _cassini("vgg16", "VGG16", 528, "not stated (Fig. 4.3)", VGG16_DOWN_MS / 1e3,
                 VGG16_UP_MS / 1e3, "allreduce", CASSINI_DP_GPUS,
                 "Fig. 4.3 (iteration 255 ms, Down phase 141 ms)",
                 "compute_s = the Down phase, comm_s = 255 - 141 ms"),
        _measured("vgg16-b1400", "VGG16", 528, 1400, 274, 148, t31_t43),
        _measured("vgg16-b1700", "VGG16", 528, 1700, 329, 163, t31_t43),
        _measured("vgg19", "VGG19", 549, 1400, 329, 168, t31_t43),
        _measured("wideresnet101", "WideResNet101", 243, 800, 273, 138, t31_t43),
        _measured("resnet50", "ResNet50", 98, 1600, 165, 59, t31_t43),
        _cassini("bert", "BERT", 450, "8", 0.157 - bert_comm, bert_comm, "allreduce",
                 CASSINI_DP_GPUS, "Table 3.1 (BERT(8), the aggressive job of group 1: "
                 "157 ms unfair)",
                 "comm_s = a 2-server ring all-reduce of the memory at 50 Gbit/s; "
                 "compute_s = 157 ms - comm_s"),
        _scaled("roberta", "RoBERTa", 800, "12", "allreduce", CASSINI_DP_GPUS, 164,
                "Table 4.3 snapshot 4 (RoBERTa(12), Th+Cassini)"),
        _scaled("vgg11", "VGG11", 507, "512-1800", "allreduce", CASSINI_DP_GPUS),
        _scaled("xlm", "XLM", 1116, "4-32", "allreduce", CASSINI_DP_GPUS),
        _scaled("camembert", "CamemBERT", 266, "8-32", "allreduce", CASSINI_DP_GPUS),
        # GPT family: the smallest memory of Table 4.2's range (the small variants);
        # GPU counts from Fig. 4.1 (GPT-1 on 4 servers, GPT-2 on 2, GPT-3 on 2 and 8).
        _scaled("gpt1", "GPT-1", 650, "32-80", "hybrid", (4,)),
        _scaled("gpt2", "GPT-2", 1623, "32-80", "hybrid", (2,)),
        _scaled("gpt3", "GPT-3", 1952, "16-48", "hybrid", (2, 8)),
        _dlrm(),
    ]


# --- deepshare-rl: RL contention-aware scheduling (Table I, TITAN Xp, 40 Gbit/s InfiniBand) -----

DEEPSHARE_GPU_COUNTS = (1, 2, 4, 8, 16, 32)   # deepshare-rl §VI: "a GPU demand of up to 32"


def _deepshare(key: str, model: str, params_m: float, mb_per_s: float, comm_per_comp: float,
               collective: str, volume: float = 1.0) -> ModelProfile:
    """deepshare-rl gives parameters, average bandwidth and comm:comp per model, not times.  One
    iteration moves ``volume`` x the fp32 gradients per server (a 2-node ring); at the
    average bandwidth that is the iteration time, split by the ratio (no overlap)."""
    nbytes = volume * FP32 * params_m * 1e6
    iteration_s = nbytes / (mb_per_s * 1e6)
    compute_s = iteration_s / (1 + comm_per_comp)
    return ModelProfile(
        f"deepshare/{key}", model, params_m * 1e6, nbytes, compute_s, "random (deepshare-rl §VI)",
        "TITAN Xp", 40.0, collective, DEEPSHARE_GPU_COUNTS,
        f"deepshare-rl Table I ({model}: {params_m} M parameters, {mb_per_s} MB/s, "
        f"comm/comp {comm_per_comp}); 4 nodes x 8 TITAN Xp, 10 GbE and 40 Gbps IB (§VI)",
        comm_s=iteration_s - compute_s,
        derived=f"gradient_bytes = {volume:g} x 4 B x parameters; iteration = bytes / "
                "average bandwidth (bytes sent once per iteration: a 2-node ring); "
                "compute_s = iteration / (1 + comm/comp); link taken as the 40 Gbps IB "
                "(FSDP's 2672 MB/s exceeds 10 GbE)")


def _deepshare_profiles() -> list[ModelProfile]:
    return [
        _deepshare("gnn", "GraphSage", 0.33, 24.63, 0.57, "allreduce"),
        _deepshare("img", "MobileNetV3", 2.04, 211.25, 2.43, "allreduce"),
        _deepshare("dlrm", "DLRM", 333.32, 170.28, 13.36, "allreduce"),
        _deepshare("lm", "Transformer-XL", 202.44, 854.82, 1.87, "allreduce"),
        _deepshare("fsdp", "GPT-2 (FSDP)", 184.89, 2672.40, 7.32, "fsdp", volume=1.5),
        _deepshare("moe", "GPT-2 (MoE)", 268.92, 929.48, 13.79, "alltoall"),
    ]


# --- vclos: vClos (testbed models; V100, 100 Gbit/s RoCE) ---------------------------------

VCLOS_GPU_COUNTS = (2, 4, 8, 16)           # vclos §8.1: demands drawn from 2, 4, 8, 16
# None of the papers gives ResNet-101's size or cost: its parameter count (torchvision's resnet101)
# and its forward FLOPs over ResNet-50's (7.6e9 / 3.8e9 per 224x224 image, the ResNet
# paper's Table 1) stand in.  NOT from the reproduced papers.
RESNET101_PARAMS = 44.55e6
RESNET101_OVER_50_FLOPS = 7.6 / 3.8


def _vclos_profiles(known: Mapping[str, ModelProfile]) -> list[ModelProfile]:
    r50 = known["ada/resnet50"]
    r50_b32 = 2 * r50.compute_s            # ada-srsf Eq. 3-4: t_f, t_b proportional to batch
    bert = known["bert"]
    bert_params = 300e6                    # vclos §2.1: "BERT ... 300 million parameters"
    common = dict(gpu="Tesla V100", link_gbit=100.0, collective="allreduce",
                  gpu_counts=VCLOS_GPU_COUNTS)
    return [
        ModelProfile(
            "vclos/resnet50", "ResNet50", r50.parameters, r50.gradient_bytes, r50_b32, "32",
            source="vclos Table 3 (ResNet50 batch 32, 64); sizes and times from ada-srsf Table III",
            derived="ada-srsf's ResNet-50 (V100, batch 16) with its compute doubled for batch "
                    "32 (ada-srsf Eq. 3-4: compute proportional to batch)", **common),
        ModelProfile(
            "vclos/resnet101", "ResNet101", RESNET101_PARAMS, FP32 * RESNET101_PARAMS,
            r50_b32 * RESNET101_OVER_50_FLOPS, "32",
            source="vclos Table 3 (ResNet101 batch 32, 64); none of the papers gives its size "
                   "or time",
            derived="NOT from the reproduced papers: 44.55 M parameters (torchvision) x 4 B; "
                    "compute = vclos/resnet50's x 7.6/3.8 (forward GFLOPs, ResNet paper Table 1)",
            **common),
        ModelProfile(
            "vclos/bert", "BERT", bert_params, FP32 * bert_params,
            bert.compute_s * bert_params / bert.parameters, "8",
            source="vclos §2.1 (BERT: 300 M parameters), Table 3 (batch 4, 8)",
            derived="gradient_bytes = 4 B x 300 M; compute = Cassini's BERT(8) compute "
                    "(A100) x 300 M / its parameters (transformer compute ~ parameters x "
                    "tokens); a V100 is slower than the A100, so this is low", **common),
    ]


def _build() -> dict[str, ModelProfile]:
    ada = [
        _ada("vgg16", "VGG-16", 526.4, 16, 35.8, 53.7),
        _ada("resnet50", "ResNet-50", 99.2, 16, 25.0, 37.4),
        _ada("inception-v3", "Inception-V3", 103.0, 16, 34.9, 52.4),
        _ada("lstm-ptb", "LSTM-PTB", 251.8, 64, 31.5, 47.3),
    ]
    cassini = _cassini_profiles()
    by_name = {p.name: p for p in ada + cassini}
    out = ada + cassini + _deepshare_profiles() + _vclos_profiles(by_name)
    return {p.name: p for p in out}


CATALOGUE: dict[str, ModelProfile] = _build()


def names() -> tuple[str, ...]:
    return tuple(CATALOGUE)


def profile(name: str) -> ModelProfile:
    """The catalogue's profile ``name``; a SpecError listing the names otherwise."""
    validate.text(name, "model", "vgg16")
    try:
        return CATALOGUE[name]
    except KeyError:
        raise SpecError("model", f"unknown model {name!r}",
                        f"use one of: {', '.join(CATALOGUE)}") from None


def job_request(model: ModelProfile | str, *, name: str, arrival_s: float, gpus: int,
                iterations: int) -> JobRequest:
    """A job training ``model`` on ``gpus`` GPUs for ``iterations`` iterations, arriving
    at ``arrival_s`` (its ``model`` field the profile's name).  The per-GPU batch is the
    profile's, so an iteration's compute and bytes do not depend on the GPU count (weak
    scaling, as data-parallel jobs run)."""
    p = profile(model) if isinstance(model, str) else model
    return JobRequest(name, arrival_s, gpus, p.compute_s, p.gradient_bytes, iterations, p.name)
