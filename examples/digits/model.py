"""The model: a ReLU MLP on the 64 pixels, built identically (same initial weights) from a seed."""
from __future__ import annotations

from typing import Sequence

import torch
from torch import nn

DEFAULT_HIDDEN = (128,)


def build(seed: int, hidden: Sequence[int] = DEFAULT_HIDDEN) -> nn.Module:
    """64 -> hidden... -> 10, ReLU between layers, PyTorch's default initialisation drawn from
    `seed` (every rank builds the same one; gradagg's init keeps rank 0's anyway)."""
    gen_state = torch.random.get_rng_state()
    torch.manual_seed(seed)
    layers: list[nn.Module] = []
    width = 64
    for h in hidden:
        layers += [nn.Linear(width, h), nn.ReLU()]
        width = h
    layers.append(nn.Linear(width, 10))
    model = nn.Sequential(*layers)
    torch.random.set_rng_state(gen_state)
    return model


@torch.no_grad()
def evaluate(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> tuple[float, float]:
    """(mean cross-entropy loss, accuracy) of `model` on (x, y)."""
    logits = model(x)
    loss = nn.functional.cross_entropy(logits, y).item()
    acc = int((logits.argmax(dim=1) == y).sum()) / len(y)  # exact: correct / n in double
    return loss, acc
