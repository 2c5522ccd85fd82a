"""The transformer task of bench/trainbench.py (--model gpt*): a byte-level GPT trained with
AdamW on the Python standard library's own source, which every Debian machine with python3
has (sysconfig's stdlib directory, its *.py files outside test, tests, site-packages and
dist-packages, in sorted path order).

Split by file: a file whose CRC-32 of its path relative to the stdlib directory is 0 mod 10 is
held out for validation (~10%), the rest is training text; each split is its files' bytes
concatenated, each file ended by a NUL byte. Every system trains the same model from the same
initial weights on the same windows (drawn from the seed, the rank and the iteration) and is
evaluated on the same fixed validation windows, so their losses differ only by how the
gradients travelled. Loss: mean cross-entropy per byte (nats)."""
import math
import os
import sysconfig
import zlib
from typing import Dict, List, Tuple

import torch
from torch import nn
from torch.nn import functional as F

VOCAB = 256
EVAL_SEED = 4242

#: name -> (d_model, layers, heads, context); parameters: gpt3m 3.3M, gpt6m 6.4M
MODELS: Dict[str, Tuple[int, int, int, int]] = {
    "gpt3m": (256, 4, 4, 64),
    "gpt6m": (256, 8, 4, 64),
}


def corpus_files() -> List[str]:
    root = sysconfig.get_paths()["stdlib"]
    out = []
    for d, subdirs, files in os.walk(root):
        subdirs[:] = sorted(s for s in subdirs if s not in ("test", "tests", "site-packages", "dist-packages",
                                                              "__pycache__", "idle_test"))
        out += [os.path.join(d, f) for f in sorted(files) if f.endswith(".py")]
    return sorted(out)


def corpus() -> Tuple[torch.Tensor, torch.Tensor]:
    """(training bytes, validation bytes) as uint8 tensors."""
    root = sysconfig.get_paths()["stdlib"]
    parts: Dict[bool, List[bytes]] = {False: [], True: []}
    for path in corpus_files():
        held_out = zlib.crc32(os.path.relpath(path, root).encode()) % 10 == 0
        with open(path, "rb") as f:
            parts[held_out].append(f.read() + b"\0")
    train, val = (torch.frombuffer(bytearray(b"".join(parts[k])), dtype=torch.uint8) for k in (False, True))
    return train, val


class Block(nn.Module):
    def __init__(self, d: int, heads: int, context: int) -> None:
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.fc, self.out = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)
        self.heads = heads
        self.register_buffer("mask", torch.full((context, context), float("-inf")).triu(1), persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        att = (q @ k.transpose(-2, -1)) / math.sqrt(d // self.heads) + self.mask[:t, :t]
        y = (att.softmax(-1) @ v).transpose(1, 2).reshape(b, t, d)
        x = x + self.proj(y)
        return x + self.out(F.gelu(self.fc(self.ln2(x))))


class GPT(nn.Module):
    """A pre-LayerNorm decoder-only transformer over bytes; forward returns the logits of every
    position flattened to (batch x context, VOCAB), so cross_entropy(model(x), y) is the loss."""

    def __init__(self, d: int, layers: int, heads: int, context: int) -> None:
        super().__init__()
        self.tok, self.pos = nn.Embedding(VOCAB, d), nn.Embedding(context, d)
        self.blocks = nn.Sequential(*[Block(d, heads, context) for _ in range(layers)])
        self.ln, self.head = nn.LayerNorm(d), nn.Linear(d, VOCAB, bias=False)
        for name, p in self.named_parameters():  # GPT-2's initialisation
            if p.ndim >= 2:
                nn.init.normal_(p, std=0.02 / (math.sqrt(2 * layers) if name.endswith(("proj.weight", "out.weight"))
                                               else 1.0))
            elif name.endswith("bias"):
                nn.init.zeros_(p)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        x = self.tok(idx) + self.pos(torch.arange(idx.shape[1]))
        return self.head(self.ln(self.blocks(x))).view(-1, VOCAB)


def gpt(model: str, seed: int) -> GPT:
    torch.manual_seed(seed)
    return GPT(*MODELS[model])


def decay_groups(model: nn.Module, weight_decay: float) -> List[Dict]:
    """AdamW's usual param groups: weight decay on the matrices (the embeddings included), none
    on the 1-D parameters (biases, LayerNorm weights)."""
    return [dict(params=[p for p in model.parameters() if p.ndim >= 2], weight_decay=weight_decay),
            dict(params=[p for p in model.parameters() if p.ndim < 2], weight_decay=0.0)]


def lr_lambda(warmup: int, total: int):
    """Linear warm-up over `warmup` iterations, then cosine decay to 10% at `total`."""
    def f(i: int) -> float:
        if i < warmup:
            return (i + 1) / warmup
        return 0.1 + 0.45 * (1 + math.cos(math.pi * min(1.0, (i - warmup) / max(1, total - warmup))))
    return f


class TextTask:
    """Training windows and the fixed validation windows of the corpus."""

    def __init__(self, model: str, seed: int, eval_windows: int) -> None:
        self.context = MODELS[model][3]
        self.train, self.val = corpus()
        self.seed = seed
        g = torch.Generator().manual_seed(EVAL_SEED)
        self.eval_x, self.eval_y = self._windows(self.val, g, eval_windows)

    def _windows(self, data: torch.Tensor, gen: torch.Generator, n: int) -> Tuple[torch.Tensor, torch.Tensor]:
        start = torch.randint(0, len(data) - self.context - 1, (n,), generator=gen)
        idx = start[:, None] + torch.arange(self.context + 1)
        w = data[idx].long()
        return w[:, :-1], w[:, 1:].reshape(-1)

    def batch(self, rank: int, iteration: int, size: int) -> Tuple[torch.Tensor, torch.Tensor]:
        """Rank's `size` windows of one iteration: the same for every system."""
        gen = torch.Generator().manual_seed((self.seed * 1_000_003 + iteration) * 1009 + rank)
        return self._windows(self.train, gen, size)

    @torch.no_grad()
    def eval_loss(self, model: nn.Module) -> float:
        return float(sum(F.cross_entropy(model(x), y, reduction="sum")
                         for x, y in zip(self.eval_x.split(64), self.eval_y.split(64 * self.context)))
                     / len(self.eval_y))
