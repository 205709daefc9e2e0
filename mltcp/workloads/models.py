"""The architectures the DDP workload trains, and their synthetic data.

Real architectures, so that the gradient buckets, their sizes and the compute between
them are those of real training: torchvision's ResNet and VGG families (``weights=None``:
randomly initialised, nothing is downloaded) on random images, and a GPT-style language
model (token and position embeddings, ``torch.nn.TransformerEncoder`` layers with a
causal mask, a vocabulary head) on random tokens.

The data are drawn once from the seed and the rank (:func:`synthetic_batches`): a few
batches cycled through, so that no iteration pays for making data and two runs with one
seed train on the same numbers.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from mltcp.workloads.spec import TRANSFORMER, ModelSpec, TransformerSize

DATA_BATCHES = 4


class LanguageModel(nn.Module):
    """A decoder-only language model: embeddings, causal self-attention layers, a head
    predicting the next token."""

    def __init__(self, size: TransformerSize) -> None:
        super().__init__()
        self.embed = nn.Embedding(size.vocab, size.d_model)
        self.position = nn.Parameter(torch.zeros(size.seq, size.d_model))
        layer = nn.TransformerEncoderLayer(size.d_model, size.heads, 4 * size.d_model,
                                           dropout=0.0, batch_first=True, norm_first=True)
        self.layers = nn.TransformerEncoder(layer, size.layers, enable_nested_tensor=False)
        self.head = nn.Linear(size.d_model, size.vocab)
        self.register_buffer("mask", nn.Transformer.generate_square_subsequent_mask(size.seq),
                             persistent=False)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        h = self.layers(self.embed(tokens) + self.position, mask=self.mask, is_causal=True)
        return self.head(h).flatten(0, 1)          # (batch * seq, vocab) logits


def build(spec: ModelSpec) -> nn.Module:
    """The model, initialised from torch's current seed."""
    if spec.model == TRANSFORMER:
        return LanguageModel(spec.size)
    import torchvision

    return getattr(torchvision.models, spec.model)(weights=None, num_classes=spec.classes)


def gradient_bytes(model: nn.Module) -> int:
    """Bytes of one iteration's gradients: what DDP all-reduces every iteration."""
    return sum(p.numel() * p.element_size() for p in model.parameters() if p.requires_grad)


def parameters(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


def synthetic_batches(spec: ModelSpec, seed: int, rank: int,
                      device: torch.device) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """``DATA_BATCHES`` (inputs, targets) pairs drawn from ``seed`` and ``rank``: random
    images and labels, or random tokens with the next token as target."""
    gen = torch.Generator().manual_seed(seed * 1_000_003 + rank)
    make: Callable[[], tuple[torch.Tensor, torch.Tensor]]
    if spec.model == TRANSFORMER:
        def make() -> tuple[torch.Tensor, torch.Tensor]:
            tokens = torch.randint(0, spec.size.vocab, (spec.batch, spec.size.seq + 1),
                                   generator=gen)
            return tokens[:, :-1], tokens[:, 1:].flatten()
    else:
        def make() -> tuple[torch.Tensor, torch.Tensor]:
            images = torch.randn(spec.batch, 3, spec.image_size, spec.image_size,
                                 generator=gen)
            return images, torch.randint(0, spec.classes, (spec.batch,), generator=gen)
    return [tuple(t.to(device) for t in make()) for _ in range(DATA_BATCHES)]  # type: ignore[misc]
