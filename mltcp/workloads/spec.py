"""What the DDP workload runs: its models' names and sizes and its flags, checked.

Torch-free, so that ``--help`` and a bad flag answer at once (and without PyTorch): every
flag is parsed by argparse and checked by :mod:`mltcp.core.validate`, and a refusal is
one line naming the flag and the fix (exit 2).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
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


@dataclass(frozen=True)
class TransformerSize:
    """A language model's shape: width, layers, attention heads, sequence, vocabulary."""

    d_model: int
    layers: int
    heads: int
    seq: int
    vocab: int


# tiny: tests and laptops (~0.2M parameters); small: ~7M; base: GPT-2-base sized (~110M)
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
    ap.add_argument("--model", required=True, choices=MODELS, metavar="NAME",
                    help=f"architecture: {', '.join(MODELS)}")
    ap.add_argument("--batch", type=int, default=8, help="samples per rank per iteration "
                    "(default 8)")
    ap.add_argument("--iterations", type=int, default=100, help="training iterations "
                    "(default 100)")
    ap.add_argument("--seed", type=int, default=0, help="initial weights and data (default 0)")
    ap.add_argument("--backend", choices=BACKENDS, default="auto",
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
                    "the epoch; default $MLTCP_START_AT, else at once): jobs start together")
    cnn = ap.add_argument_group("CNNs (resnet*, vgg*)")
    cnn.add_argument("--image-size", type=int, help="image side in pixels (default 32)")
    cnn.add_argument("--classes", type=int, help="output classes (default 10)")
    lm = ap.add_argument_group("transformer (a GPT-style language model)")
    lm.add_argument("--preset", choices=tuple(PRESETS), help="size: " + "; ".join(
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
                    "per-host bytes for (default $WORLD_SIZE, else 2)")
    return ap


def parse(argv: Sequence[str] | None = None) -> RunSpec:
    """The run the command line asks for, every value checked."""
    args = parser().parse_args(argv)
    given = {name for name, value in vars(args).items() if value is not None}
    wrong = (({"image_size", "classes"} if args.model == TRANSFORMER
              else {"preset", "d_model", "layers", "heads", "seq", "vocab"}) & given)
    if wrong:
        flag = "--" + sorted(wrong)[0].replace("_", "-")
        raise SpecError(flag, f"does not apply to --model {args.model}",
                        "drop it (CNN flags: --image-size, --classes; transformer flags: "
                        "--preset, --d-model, --layers, --heads, --seq, --vocab)")
    if args.workers is not None and not args.describe:
        raise SpecError("--workers", "only --describe takes it",
                        "drop it: a run's world size is the launcher's (torchrun)")
    preset = PRESETS[args.preset or "small"]

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
        args.model, batch=validate.integer(args.batch, "--batch", 1, 65536, "8"),
        image_size=pick("image_size", 32, 1024, 32, "224"),
        classes=pick("classes", 2, 100_000, 10, "1000"), size=size)
    start_at = args.start_at
    start_flag = "--start-at"
    if start_at is None and os.environ.get("MLTCP_START_AT"):
        start_flag, text = "MLTCP_START_AT", os.environ["MLTCP_START_AT"]
        try:
            start_at = float(text)
        except ValueError:
            raise SpecError(start_flag, f"{text!r} is not a time",
                            "give seconds since the epoch, e.g. $(date +%s)") from None
    workers = args.workers
    if workers is None:
        workers = int(os.environ["WORLD_SIZE"]) if os.environ.get("WORLD_SIZE", "").isdigit() \
            else 2
    return RunSpec(
        model=model,
        iterations=validate.integer(args.iterations, "--iterations", 1, 10**7, "100"),
        seed=validate.integer(args.seed, "--seed", 0, 2**31 - 1, "0"),
        backend=args.backend,
        gpu_time_ms=validate.number(args.gpu_time_ms, "--gpu-time-ms", 0, 600_000, "120"),
        bucket_cap_mb=validate.number(args.bucket_cap_mb, "--bucket-cap-mb", 0, 10_240, "25",
                                      lo_open=True),
        log_every=validate.integer(args.log_every, "--log-every", 1, 10**7, "10"),
        start_at=None if start_at is None else validate.number(
            start_at, start_flag, 0, 1e11, "$(date -d '+30 sec' +%s)", lo_open=True),
        hook_out=args.hook_out,
        job=None if args.job is None else validate.job_name(args.job, "--job"),
        signal=args.signal, describe=args.describe,
        workers=validate.integer(workers, "--workers", 1, 65536, "2"))


def _divisor(width: int, heads: int) -> int:
    """The divisor of ``width`` nearest ``heads``, for the fix."""
    return min((d for d in range(1, width + 1) if width % d == 0),
               key=lambda d: (abs(d - heads), d))


def fail(exc: SpecError) -> int:
    """A refusal as the one line the command prints; the exit code of bad input."""
    sys.stderr.write(f"{PROG}: error: {exc}\n")
    return 2
