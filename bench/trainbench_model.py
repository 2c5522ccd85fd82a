"""The training task of bench/trainbench.py: an MLP student learns the labels of a fixed random
linear teacher. Every system trains the same student from the same initial weights on the same
batches (drawn from the seed, the rank and the iteration), so their losses differ only by how
the gradients travelled."""
from typing import List, Sequence, Tuple

import torch
from torch import nn

INPUT = 1024  # the input width; the teacher and the student's first layer read it
CLASSES = 10
TEACHER_SEED = 999
EVAL_SEED = 4242

MODELS = {  # name -> layer widths; parameters: mlp10m 10.5M, mlp25m 25.2M
    "mlp10m": (INPUT, 2048, 2048, 2048, CLASSES),
    "mlp25m": (INPUT, 4096, 4096, 1024, CLASSES),
}


def mlp(widths: Sequence[int]) -> nn.Sequential:
    layers: List[nn.Module] = []
    for i in range(len(widths) - 1):
        layers.append(nn.Linear(widths[i], widths[i + 1]))
        if i < len(widths) - 2:
            layers.append(nn.ReLU())
    return nn.Sequential(*layers)


def student(model: str, seed: int) -> nn.Sequential:
    """The model every rank starts from (PyTorch's default initialisation drawn from seed)."""
    torch.manual_seed(seed)
    return mlp(MODELS[model])


class Task:
    """The teacher, the held-out evaluation set and the training batches."""

    def __init__(self, seed: int, eval_samples: int) -> None:
        torch.manual_seed(TEACHER_SEED)
        self.teacher = mlp((INPUT, CLASSES))
        for p in self.teacher.parameters():
            p.requires_grad_(False)
        self._balance()
        self.seed = seed
        self.eval_x, self.eval_y = self._draw(torch.Generator().manual_seed(EVAL_SEED), eval_samples)

    def _balance(self) -> None:
        # A random teacher puts most inputs in two or three classes, so a student would get far
        # by learning the prior alone: shift the output biases until every class holds ~1/10.
        x = torch.randn(16384, INPUT, generator=torch.Generator().manual_seed(TEACHER_SEED))
        out = self.teacher[-1]
        with torch.no_grad():
            scale = float(self.teacher(x).std())  # the logits' spread: the size of a useful step
            for _ in range(50):
                freq = torch.bincount(self.teacher(x).argmax(dim=1), minlength=CLASSES).float() / len(x)
                out.bias -= 0.5 * scale * torch.log(freq.clamp_min(1e-3) * CLASSES)

    def _draw(self, gen: torch.Generator, n: int) -> Tuple[torch.Tensor, torch.Tensor]:
        x = torch.randn(n, INPUT, generator=gen)
        with torch.no_grad():
            y = self.teacher(x).argmax(dim=1)
        return x, y

    def batch(self, rank: int, iteration: int, size: int) -> Tuple[torch.Tensor, torch.Tensor]:
        """Rank's batch of one iteration: the same for every system."""
        gen = torch.Generator().manual_seed((self.seed * 1_000_003 + iteration) * 1009 + rank)
        return self._draw(gen, size)

    @torch.no_grad()
    def eval_loss(self, model: nn.Module) -> float:
        return float(nn.functional.cross_entropy(model(self.eval_x), self.eval_y))
