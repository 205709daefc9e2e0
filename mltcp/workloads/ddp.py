"""PyTorch DDP training of real model architectures on synthetic data.

Run under ``torchrun`` (one process per GPU, or one per CPU host)::

    torchrun --nnodes 2 --node_rank 0 --nproc_per_node 1 --master_addr 10.0.0.1 \\
        -m mltcp.workloads.ddp --model resnet18 --batch 32 --iterations 200

Models: torchvision's ResNet-18/50 and VGG-11/16 (``weights=None``: nothing is
downloaded) on random images, and a transformer language model (``torch.nn``'s
encoder layers, sized by ``--d-model``/``--layers``) on random tokens.  The data are
drawn from ``--seed`` (and the rank), so a run is repeatable.

The collective library is ``gloo`` on CPU hosts and ``nccl`` on GPU hosts.  With NCCL,
``NCCL_IB_DISABLE=1`` is set unless given: NCCL then uses its socket transport, i.e.
TCP, whose congestion control MLTCP changes (RoCE hosts keep RDMA and use the DCQCN
tuner instead).  ``--gpu-time-ms`` pads every iteration's compute with that many
milliseconds of sleep, so that a CPU box can play a GPU's compute/communication ratio;
the output says so plainly when it is used.

Every iteration goes through :mod:`mltcp.hook` (records in ``MLTCP_HOOK_OUT``, the
optional end-of-iteration signal).  ``--describe`` prints the model's parameter count
and gradient bytes per iteration as JSON (for byte budgets) without training.
``MLTCP_START_AT`` (wall-clock seconds) holds the first iteration until then, after
the process group is up: jobs of one experiment start together.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from dataclasses import dataclass
from typing import Any

from mltcp import hook as mltcp_hook

CNNS = ("resnet18", "resnet50", "vgg11", "vgg16")
MODELS = (*CNNS, "transformer")


@dataclass(frozen=True)
class ModelSpec:
    """What to build: the architecture and its size."""

    model: str
    batch: int = 8
    image_size: int = 32
    classes: int = 10
    d_model: int = 256
    layers: int = 4
    heads: int = 4
    seq: int = 64
    vocab: int = 8000


def build(spec: ModelSpec) -> tuple[Any, Any]:
    """(model, batch maker): ``make(generator) -> (inputs, targets)``."""
    import torch
    from torch import nn

    if spec.model in CNNS:
        import torchvision

        model = getattr(torchvision.models, spec.model)(weights=None, num_classes=spec.classes)

        def make(gen: Any) -> tuple[Any, Any]:
            x = torch.randn(spec.batch, 3, spec.image_size, spec.image_size, generator=gen)
            y = torch.randint(0, spec.classes, (spec.batch,), generator=gen)
            return x, y

        return model, make

    class LanguageModel(nn.Module):
        """A decoder-style language model: embeddings, causal encoder layers, a head."""

        def __init__(self) -> None:
            super().__init__()
            self.embed = nn.Embedding(spec.vocab, spec.d_model)
            self.pos = nn.Parameter(torch.zeros(spec.seq, spec.d_model))
            layer = nn.TransformerEncoderLayer(spec.d_model, spec.heads, 4 * spec.d_model,
                                               dropout=0.0, batch_first=True)
            self.encoder = nn.TransformerEncoder(layer, spec.layers, enable_nested_tensor=False)
            self.head = nn.Linear(spec.d_model, spec.vocab)
            self.register_buffer("mask", nn.Transformer.generate_square_subsequent_mask(spec.seq),
                                 persistent=False)

        def forward(self, tokens: Any) -> Any:
            h = self.embed(tokens) + self.pos
            return self.head(self.encoder(h, mask=self.mask, is_causal=True)).flatten(0, 1)

    def make_tokens(gen: Any) -> tuple[Any, Any]:
        tokens = torch.randint(0, spec.vocab, (spec.batch, spec.seq + 1), generator=gen)
        return tokens[:, :-1], tokens[:, 1:].flatten()

    return LanguageModel(), make_tokens


def describe(spec: ModelSpec) -> dict[str, Any]:
    model, _make = build(spec)
    params = [p for p in model.parameters() if p.requires_grad]
    return {"model": spec.model, "parameters": sum(p.numel() for p in params),
            "gradient_bytes": sum(p.numel() * p.element_size() for p in params)}


def _positive(lo: int, hi: int):  # type: ignore[no-untyped-def]
    def parse(text: str) -> int:
        try:
            n = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
        if not lo <= n <= hi:
            raise argparse.ArgumentTypeError(f"{n} is outside {lo}..{hi}")
        return n
    return parse


def _millis(text: str) -> float:
    try:
        x = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of milliseconds") from None
    if not 0 <= x <= 600_000 or x != x:
        raise argparse.ArgumentTypeError(f"{text} is outside 0..600000 ms")
    return x


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m mltcp.workloads.ddp",
                                 description=__doc__.splitlines()[0])
    ap.add_argument("--model", required=True, choices=MODELS, help="architecture (required)")
    ap.add_argument("--batch", type=_positive(1, 65536), default=8,
                    help="samples per rank per iteration (1..65536, default 8)")
    ap.add_argument("--iterations", type=_positive(1, 10**7), default=100,
                    help="training iterations (1..10^7, default 100)")
    ap.add_argument("--backend", choices=("gloo", "nccl"), default="gloo",
                    help="collective library (default gloo; nccl needs GPUs)")
    ap.add_argument("--gpu-time-ms", type=_millis, default=0.0,
                    help="compute pad per iteration standing in for a GPU (0..600000 ms, "
                         "default 0: none)")
    ap.add_argument("--seed", type=_positive(0, 2**31 - 1), default=0,
                    help="data and initialisation seed (0..2^31-1, default 0)")
    ap.add_argument("--image-size", type=_positive(32, 1024), default=32,
                    help="CNN input side in pixels (32..1024, default 32)")
    ap.add_argument("--d-model", type=_positive(8, 16384), default=256,
                    help="transformer width (8..16384, default 256)")
    ap.add_argument("--layers", type=_positive(1, 256), default=4,
                    help="transformer layers (1..256, default 4)")
    ap.add_argument("--heads", type=_positive(1, 256), default=4,
                    help="attention heads, dividing --d-model (1..256, default 4)")
    ap.add_argument("--seq", type=_positive(2, 65536), default=64,
                    help="transformer sequence length (2..65536, default 64)")
    ap.add_argument("--vocab", type=_positive(2, 10**6), default=8000,
                    help="transformer vocabulary (2..10^6, default 8000)")
    ap.add_argument("--describe", action="store_true",
                    help="print parameters and gradient bytes per iteration as JSON and exit")
    return ap


def spec_of(args: argparse.Namespace, ap: argparse.ArgumentParser) -> ModelSpec:
    if args.model == "transformer" and args.d_model % args.heads:
        ap.error(f"--heads {args.heads} does not divide --d-model {args.d_model}: "
                 "give a width that is a multiple of the heads")
    return ModelSpec(args.model, args.batch, args.image_size, d_model=args.d_model,
                     layers=args.layers, heads=args.heads, seq=args.seq, vocab=args.vocab)


def train(args: argparse.Namespace, spec: ModelSpec) -> int:
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    if "RANK" not in os.environ:
        print("mltcp.workloads.ddp: run it under torchrun (RANK, WORLD_SIZE, MASTER_ADDR are "
              "not set), or use --describe", file=sys.stderr)
        return 2
    if args.backend == "nccl":
        if not torch.cuda.is_available():
            print("mltcp.workloads.ddp: --backend nccl needs a GPU; use --backend gloo",
                  file=sys.stderr)
            return 2
        os.environ.setdefault("NCCL_IB_DISABLE", "1")
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
        torch.cuda.set_device(device)
    else:
        device = torch.device("cpu")
    dist.init_process_group(args.backend)
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(args.seed)                 # the same initial model everywhere
    model, make = build(spec)
    ddp = DistributedDataParallel(model.to(device),
                                  device_ids=[device.index] if device.type == "cuda" else None)
    hook = mltcp_hook.from_env()
    hook.attach_ddp(ddp)
    optimizer = torch.optim.SGD(ddp.parameters(), lr=0.01, momentum=0.9)
    loss_fn = torch.nn.CrossEntropyLoss()
    gen = torch.Generator().manual_seed(args.seed * 1000 + rank)
    pad_s = args.gpu_time_ms / 1000
    if rank == 0:
        info = describe(spec)
        transport = ("NCCL over sockets (NCCL_IB_DISABLE="
                     f"{os.environ.get('NCCL_IB_DISABLE')})" if args.backend == "nccl"
                     else "gloo over TCP")
        print(f"{spec.model}: {info['parameters']:,} parameters, "
              f"{info['gradient_bytes'] / 1e6:.1f} MB of gradients per iteration; "
              f"{world} ranks, {transport}", flush=True)
        if pad_s:
            print(f"compute pad: {args.gpu_time_ms:g} ms of sleep per iteration stands in for "
                  "GPU compute (--gpu-time-ms)", flush=True)
    dist.barrier()
    start_at = os.environ.get("MLTCP_START_AT")
    if start_at:
        time.sleep(max(0.0, float(start_at) - time.time()))
    times = []
    try:
        for i in range(args.iterations):
            x, y = make(gen)
            x, y = x.to(device), y.to(device)
            with hook.iteration():
                if pad_s:
                    time.sleep(pad_s)
                optimizer.zero_grad(set_to_none=True)
                loss = loss_fn(ddp(x), y)
                loss.backward()
                optimizer.step()
                if device.type == "cuda":
                    torch.cuda.synchronize(device)
            rec = hook.records[-1]
            times.append(rec.end - rec.start)
            if rank == 0 and ((i + 1) % 10 == 0 or i + 1 == args.iterations):
                print(f"iteration {i + 1}/{args.iterations}: {1000 * times[-1]:.1f} ms "
                      f"(comm {1000 * (rec.comm_end - rec.comm_start):.1f} ms), "
                      f"loss {loss.item():.3f}", flush=True)
    finally:
        hook.close()
        dist.destroy_process_group()
    if rank == 0:
        print(f"done: mean iteration {1000 * sum(times) / len(times):.1f} ms", flush=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = parser()
    args = ap.parse_args(argv)
    spec = spec_of(args, ap)
    if args.describe:
        print(json.dumps(describe(spec)))
        return 0
    return train(args, spec)


if __name__ == "__main__":
    sys.exit(main())
