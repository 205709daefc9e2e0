"""The bundled DDP workload's command line and its rules: models, sizes, flags, checked.

One definition for both of its readers: the workload itself (``python -m
mltcp.workloads.ddp``, through :mod:`mltcp.workloads.spec`) and the scenario, whose
``workload = {...}`` table of a job is turned into this very command line
(:meth:`mltcp.lab.scenario.spec.Workload.argv`) and checked here when the scenario is read,
so that a table the scenario accepts is never refused on the hosts after SSH, the agent,
the cgroups and torchrun.  Standard library only, hence in the core: the lab may not
import the workloads (they run under torchrun, with torch).

Every flag is parsed by argparse and checked by :mod:`mltcp.core.validate`, and a refusal
is one line naming the flag (or the environment variable) and the fix (exit 2).  Beyond
each flag's range, a model must fit in memory: :func:`memory_bytes` estimates what one
rank holds (weights, gradients, momentum and DDP's buckets; the activations the backward
pass keeps), and more than :data:`MAX_RANK_MEMORY_BYTES` is refused.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import NoReturn

from mltcp.core import validate
from mltcp.core.errors import SpecError

PROG = "python -m mltcp.workloads.ddp"
RESNETS = ("resnet18", "resnet34", "resnet50", "resnet101", "resnet152")
VGGS = ("vgg11", "vgg11_bn", "vgg13", "vgg16", "vgg16_bn", "vgg19")
CNNS = RESNETS + VGGS
TRANSFORMER = "transformer"
MODELS = (*CNNS, TRANSFORMER)
BACKENDS = ("auto", "gloo", "nccl")
MAX_WORKERS = validate.MAX_WORLD_SIZE
# --start-at / MLTCP_START_AT: a start at most this far ahead.  The hosts backend starts
# its jobs within an hour (a start slack of seconds plus start_offset_ms <= 1 h); a day
# leaves room for a hand-made synchronized start, and what lies beyond (a time in ms, a
# year typed wrong) would hold the training for months, or overflow time.sleep.
MAX_START_AHEAD_S = 86_400.0
# --start-go / MLTCP_START_GO: how often a rank that is ready looks for its go file.
GO_POLL_S = 0.01
# What one rank may need (estimate: memory_bytes): more than any GPU's or a usual host's
# memory.  DDP keeps the whole model on every rank, so a model past it cannot train.
MAX_RANK_MEMORY_BYTES = 2**40


@dataclass(frozen=True)
class TransformerSize:
    """A language model's shape: width, layers, attention heads, sequence, vocabulary."""

    d_model: int
    layers: int
    heads: int
    seq: int
    vocab: int


# tiny: tests and laptops (~0.2M parameters); small: ~7M; base: GPT-2-base sized (~134M,
# its head not tied to the embedding)
PRESETS: dict[str, TransformerSize] = {
    "tiny": TransformerSize(d_model=64, layers=2, heads=2, seq=32, vocab=1000),
    "small": TransformerSize(d_model=256, layers=4, heads=4, seq=128, vocab=8000),
    "base": TransformerSize(d_model=768, layers=12, heads=12, seq=256, vocab=32000),
}


@dataclass(frozen=True)
class ModelSpec:
    """What to build and feed: the architecture, the batch per rank, the CNNs' image side
    and classes, the transformer's size."""

    model: str
    batch: int = 8
    image_size: int = 32
    classes: int = 10
    size: TransformerSize = field(default_factory=lambda: PRESETS["small"])


@dataclass(frozen=True)
class RunSpec:
    """One run of the workload.  ``signal`` None: ``MLTCP_HOOK_SIGNAL`` decides;
    ``workers``: the world size ``--describe`` plans the per-host bytes for."""

    model: ModelSpec
    iterations: int = 100
    seed: int = 0
    backend: str = "auto"
    gpu_time_ms: float = 0.0
    bucket_cap_mb: float = 25.0
    log_every: int = 10
    start_at: float | None = None
    start_go: str | None = None
    hook_out: str | None = None
    job: str | None = None
    signal: bool | None = None
    describe: bool = False
    workers: int = 2


class _Parser(argparse.ArgumentParser):
    """argparse, with its refusals on one line (no usage block): exit 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


def parser() -> argparse.ArgumentParser:
    ap = _Parser(prog=PROG, description="PyTorch DDP training of a real architecture on "
                 "synthetic data, under torchrun, with the mltcp hook's records.")
    # --model, --backend and --preset are checked by parse(), not by argparse's choices:
    # one SpecError naming the flag, which the scenario reports as its own field.
    ap.add_argument("--model", required=True, metavar="NAME",
                    help=f"architecture: {', '.join(MODELS)}")
    ap.add_argument("--batch", type=int, default=8, help="samples per rank per iteration "
                    "(default 8)")
    ap.add_argument("--iterations", type=int, default=100, help="training iterations "
                    "(default 100)")
    ap.add_argument("--seed", type=int, default=0, help="initial weights and data (default 0)")
    ap.add_argument("--backend", default="auto", metavar="{auto,gloo,nccl}",
                    help="collective library: auto (nccl with a GPU, else gloo), gloo, nccl")
    ap.add_argument("--gpu-time-ms", type=float, default=0.0, metavar="MS",
                    help="compute pad: sleep MS before each forward pass, standing in for a "
                    "GPU's compute on a CPU host (default 0: none)")
    ap.add_argument("--bucket-cap-mb", type=float, default=25.0, metavar="MB",
                    help="DDP gradient bucket size (default 25, DDP's)")
    ap.add_argument("--log-every", type=int, default=10, metavar="N",
                    help="rank 0 prints progress every N iterations (default 10)")
    ap.add_argument("--start-at", type=float, metavar="EPOCH_S",
                    help="hold the first iteration until this wall-clock time (seconds since "
                    "the epoch, at most a day ahead; default $MLTCP_START_AT, else at once): "
                    "jobs start together")
    ap.add_argument("--start-go", metavar="FILE",
                    help="with --start-at: start earlier, at the moment FILE names (seconds "
                    "since the epoch, written once every job is ready; see go_moment) "
                    "(default $MLTCP_START_GO, else wait for --start-at)")
    cnn = ap.add_argument_group("CNNs (resnet*, vgg*)")
    cnn.add_argument("--image-size", type=int, help="image side in pixels (default 32)")
    cnn.add_argument("--classes", type=int, help="output classes (default 10)")
    lm = ap.add_argument_group("transformer (a GPT-style language model)")
    lm.add_argument("--preset", metavar="{" + ",".join(PRESETS) + "}", help="size: " + "; ".join(
        f"{k}: d_model {v.d_model}, {v.layers} layers, {v.heads} heads, seq {v.seq}, vocab "
        f"{v.vocab}" for k, v in PRESETS.items()) + " (default small)")
    for flag, what in (("--d-model", "width"), ("--layers", "layers"),
                       ("--heads", "attention heads (dividing the width)"),
                       ("--seq", "sequence length"), ("--vocab", "vocabulary")):
        lm.add_argument(flag, type=int, help=f"{what} (overrides the preset's)")
    hk = ap.add_argument_group("the mltcp hook (defaults from its environment variables)")
    hk.add_argument("--hook-out", metavar="DIR", help="records directory "
                    "(default $MLTCP_HOOK_OUT; unset: no records)")
    hk.add_argument("--job", help="the datapath job's name (default $MLTCP_JOB)")
    hk.add_argument("--signal", action=argparse.BooleanOptionalAction, default=None,
                    help="signal each iteration's end to the mltcp agent (default "
                    "$MLTCP_HOOK_SIGNAL)")
    ap.add_argument("--describe", action="store_true",
                    help="print the model's parameters and gradient bytes per iteration "
                    "(and per host for --workers) as JSON, and exit: no training")
    ap.add_argument("--workers", type=int, help="with --describe: ranks to plan the "
                    f"per-host bytes for (default $WORLD_SIZE, else 2; at most {MAX_WORKERS})")
    return ap


def parse(argv: Sequence[str] | None = None,
          environ: Mapping[str, str] | None = None) -> RunSpec:
    """The run the command line asks for, every value checked.  ``environ`` (default
    ``os.environ``) gives ``MLTCP_START_AT`` and ``WORLD_SIZE``; the scenario passes ``{}``,
    so that its check does not depend on the shell it runs in."""
    env = os.environ if environ is None else environ
    args = parser().parse_args(argv)
    model_name = validate.choice(args.model, "--model", MODELS)
    backend = validate.choice(args.backend, "--backend", BACKENDS)
    given = {name for name, value in vars(args).items() if value is not None}
    cnn_flags, lm_flags = {"image_size", "classes"}, {"preset", "d_model", "layers", "heads",
                                                       "seq", "vocab"}
    wrong = (cnn_flags if model_name == TRANSFORMER else lm_flags) & given
    if wrong:
        flag = "--" + sorted(wrong)[0].replace("_", "-")
        only = "a CNN" if model_name == TRANSFORMER else "the transformer"
        raise SpecError(flag, f"does not apply to --model {model_name}",
                        f"drop it: only {only} takes it (CNN flags: --image-size, --classes; "
                        "transformer flags: --preset, --d-model, --layers, --heads, --seq, "
                        "--vocab)")
    if args.workers is not None and not args.describe:
        raise SpecError("--workers", "only --describe takes it",
                        "drop it: a run's world size is the launcher's (torchrun)")
    preset = PRESETS[validate.choice(args.preset or "small", "--preset", PRESETS)]

    def pick(name: str, lo: int, hi: int, default: int, example: str) -> int:
        value = getattr(args, name)
        flag = "--" + name.replace("_", "-")
        return validate.integer(default if value is None else value, flag, lo, hi, example)

    size = TransformerSize(
        d_model=pick("d_model", 8, 16384, preset.d_model, "256"),
        layers=pick("layers", 1, 256, preset.layers, "4"),
        heads=pick("heads", 1, 256, preset.heads, "4"),
        seq=pick("seq", 2, 65536, preset.seq, "128"),
        vocab=pick("vocab", 2, 1_000_000, preset.vocab, "8000"))
    if size.d_model % size.heads:
        raise SpecError("--heads", f"{size.heads} does not divide the width {size.d_model}",
                        "give a number of heads that divides --d-model, e.g. "
                        f"{_divisor(size.d_model, size.heads)}")
    model = ModelSpec(
        model_name, batch=validate.integer(args.batch, "--batch", 1, 65536, "8"),
        image_size=pick("image_size", 32, 1024, 32, "224"),
        classes=pick("classes", 2, 100_000, 10, "1000"), size=size)
    check_memory(model)
    start_flag, start_at = "--start-at", args.start_at
    if start_at is None and env.get("MLTCP_START_AT"):
        start_flag, text = "MLTCP_START_AT", env["MLTCP_START_AT"]
        try:
            start_at = float(text)
        except ValueError:
            raise SpecError(start_flag, f"{text!r} is not a time",
                            "give seconds since the epoch, e.g. $(date +%s)") from None
    go_flag, start_go = "--start-go", args.start_go
    if start_go is None and env.get("MLTCP_START_GO"):
        go_flag, start_go = "MLTCP_START_GO", env["MLTCP_START_GO"]
    if start_go is not None and start_at is None:
        raise SpecError(go_flag, "needs a latest start to fall back on",
                        "give --start-at (or MLTCP_START_AT) as well")
    if start_go is not None and not start_go.strip():
        raise SpecError(go_flag, "is empty", "give the path of the go file, or unset it")
    workers_flag, workers = "--workers", args.workers
    if workers is None:
        workers_flag = "WORLD_SIZE"
        workers = validate.env_integer(env, "WORLD_SIZE", 1, MAX_WORKERS,
                                       "the launcher (torchrun) sets it; unset it otherwise, "
                                       "or give --workers")
        workers = 2 if workers is None else workers
    return RunSpec(
        model=model,
        iterations=validate.integer(args.iterations, "--iterations", 1, 10**7, "100"),
        seed=validate.integer(args.seed, "--seed", 0, validate.MAX_SEED, "0"),
        backend=backend,
        gpu_time_ms=validate.number(args.gpu_time_ms, "--gpu-time-ms", 0, 600_000, "120"),
        bucket_cap_mb=validate.number(args.bucket_cap_mb, "--bucket-cap-mb", 0, 10_240, "25",
                                      lo_open=True),
        log_every=validate.integer(args.log_every, "--log-every", 1, 10**7, "10"),
        start_at=None if start_at is None else start_time(start_at, start_flag),
        start_go=start_go,
        hook_out=args.hook_out,
        job=None if args.job is None else validate.job_name(args.job, "--job"),
        signal=args.signal, describe=args.describe,
        workers=validate.integer(workers, workers_flag, 1, MAX_WORKERS, "2"))


def start_time(value: float, flag: str, now: float | None = None) -> float:
    """A start time: after the epoch, and at most :data:`MAX_START_AHEAD_S` after ``now``
    (a time already past is taken: the workload starts at once and says it is late)."""
    example = "$(date -d '+30 sec' +%s)"
    at = validate.number(value, flag, 0, 1e11, example, lo_open=True)
    ahead = at - (time.time() if now is None else now)
    if ahead > MAX_START_AHEAD_S:
        raise SpecError(flag, f"{validate.fmt(at)} is {_span(ahead)} ahead",
                        f"give a time at most a day ahead, in seconds since the epoch, e.g. "
                        f"{example}")
    return at


def go_moment(path: str, latest: float, poll_s: float = GO_POLL_S) -> float:
    """When to start: the moment the go file at ``path`` names, once it appears, or
    ``latest`` (``--start-at``) if it has not by then.

    Why: a fixed moment has to leave room for the slowest start-up (torchrun, the
    rendezvous, the model build), so every run waited out its whole slack.  The hosts
    backend instead writes each job's go file, a moment a little ahead, once every job's
    rank 0 said it was ready, and keeps ``--start-at`` as the fallback should the file
    never come.  The file holds seconds since the epoch (one number; written whole, by a
    rename); a moment after ``latest``, or text that is not one, counts as ``latest``.
    Polled every ``poll_s``, so Ctrl-C still ends the wait at once."""
    while True:
        now = time.time()
        try:
            text = Path(path).read_text()
        except OSError:                     # not there yet (or unreadable: wait it out)
            text = None
        if text is not None:
            try:
                named = float(text)
            except ValueError:
                return latest
            return min(named, latest) if math.isfinite(named) else latest
        if now >= latest:
            return latest
        time.sleep(min(poll_s, latest - now))


def _span(seconds: float) -> str:
    days = seconds / 86_400
    return (f"{seconds / 3600:.0f} hours" if days < 2 else f"{days:.0f} days" if days < 730
            else f"{days / 365.25:.0f} years")


def _divisor(width: int, heads: int) -> int:
    """The divisor of ``width`` nearest ``heads``, for the fix."""
    return min((d for d in range(1, width + 1) if width % d == 0),
               key=lambda d: (abs(d - heads), d))


# -- memory ------------------------------------------------------------------------

# torchvision's parameters at 1000 classes, and the width of the layer the classes
# are the outputs of (ResNet's fc, VGG's last classifier layer).
_CNN_PARAMETERS = {
    "resnet18": (11_689_512, 512), "resnet34": (21_797_672, 512),
    "resnet50": (25_557_032, 2048), "resnet101": (44_549_160, 2048),
    "resnet152": (60_192_808, 2048),
    "vgg11": (132_863_336, 4096), "vgg11_bn": (132_868_840, 4096),
    "vgg13": (133_047_848, 4096), "vgg16": (138_357_544, 4096),
    "vgg16_bn": (138_365_992, 4096), "vgg19": (143_667_240, 4096),
}
# Activations per input pixel of one sample: the floats of every leaf module's output in a
# forward pass (roughly what autograd keeps for the backward pass), measured with
# torchvision 0.29 at 224x224 on the meta device and divided by 224^2; they scale with
# the image's area.
_CNN_FLOATS_PER_PIXEL = {
    "resnet18": 149.0, "resnet34": 224.0, "resnet50": 638.6, "resnet101": 944.6,
    "resnet152": 1322.6, "vgg11": 327.5, "vgg11_bn": 475.5, "vgg13": 519.5, "vgg16": 571.5,
    "vgg16_bn": 841.5, "vgg19": 623.5,
}
# The transformer's activations per token: per layer (norm_first encoder layer: the
# norms, q/k/v, attention output, projection, the 4x feed-forward and its activation,
# the residuals; its leaf modules' outputs alone measure 12.5-12.9), in units of
# d_model; and the head's logits, their softmax and its gradient, in units of the
# vocabulary.
_LAYER_FLOATS_PER_TOKEN = 18
_HEAD_FLOATS_PER_TOKEN = 3
_STATE_BYTES_PER_PARAMETER = 16    # fp32 weights, gradients, SGD momentum, DDP's buckets
_FLOAT_BYTES = 4


def parameters(model: ModelSpec) -> int:
    """The model's trainable parameters (as ``--describe`` counts them, without torch)."""
    if model.model == TRANSFORMER:
        s = model.size
        # embeddings, positions, per layer q/k/v + output projection + 4x feed-forward +
        # two norms (12 d^2 + 13 d), the head
        return (2 * s.vocab * s.d_model + s.vocab + s.seq * s.d_model
                + s.layers * (12 * s.d_model**2 + 13 * s.d_model))
    base, width = _CNN_PARAMETERS[model.model]
    return base + (width + 1) * (model.classes - 1000)


def activation_floats(model: ModelSpec) -> float:
    """The floats one sample's forward pass keeps for the backward pass (an estimate)."""
    if model.model == TRANSFORMER:
        s = model.size
        return s.seq * (s.layers * _LAYER_FLOATS_PER_TOKEN * s.d_model
                        + _HEAD_FLOATS_PER_TOKEN * s.vocab)
    return _CNN_FLOATS_PER_PIXEL[model.model] * model.image_size**2


def memory_bytes(model: ModelSpec) -> tuple[float, float]:
    """What one rank holds: (the training state of the parameters, the activations of a
    batch), in bytes."""
    return (float(_STATE_BYTES_PER_PARAMETER * parameters(model)),
            _FLOAT_BYTES * model.batch * activation_floats(model))


def check_memory(model: ModelSpec) -> None:
    """Refuse a model one rank cannot hold, naming the flag to change: the size flags
    when its parameters alone are too many, else ``--batch`` (with the largest that
    fits)."""
    state, activations = memory_bytes(model)
    if state + activations <= MAX_RANK_MEMORY_BYTES:
        return
    limit = validate.fmt_bytes(MAX_RANK_MEMORY_BYTES)
    need = (f"needs ~{validate.fmt_bytes(state + activations)} per rank (~{parameters(model):.2g} "
            f"parameters: {validate.fmt_bytes(state)} of weights, gradients and momentum; "
            f"{validate.fmt_bytes(activations)} of activations), over {limit}")
    if state * 2 > MAX_RANK_MEMORY_BYTES or model.batch == 1:
        if model.model == TRANSFORMER:
            raise SpecError("--d-model", f"d_model {model.size.d_model}, {model.size.layers} "
                            f"layers, vocab {model.size.vocab} and seq {model.size.seq} "
                            + need, "give a smaller --d-model, --layers, --vocab or --seq "
                            f"(--preset base has ~{_BASE_PARAMETERS / 1e6:.0f}M parameters)")
        raise SpecError("--image-size", f"{model.image_size} with {model.model} " + need,
                        "give a smaller --image-size (224 is ImageNet's)")
    room = MAX_RANK_MEMORY_BYTES - state
    fits = max(1, math.floor(room / (activations / model.batch)))
    raise SpecError("--batch", f"{model.batch} " + need,
                    f"give at most --batch {fits}" + ("" if model.model == TRANSFORMER else
                                                      " or a smaller --image-size"))


_BASE_PARAMETERS = parameters(ModelSpec(TRANSFORMER, size=PRESETS["base"]))


def fail(exc: SpecError) -> int:
    """A refusal as the one line the command prints; the exit code of bad input."""
    sys.stderr.write(f"{PROG}: error: {exc}\n")
    return 2
