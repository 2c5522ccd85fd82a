#!/usr/bin/python3
"""A model of compressed training in one process, to study why a codec stops learning (issue 23,
item 2) before changing the SDK or the server: W ranks of bench/trainbench.py's task computed one
after another, each rank's gradient compressed with error feedback, the mean applied by SGD.

It models the arithmetic, not the code: the 2bit codec as +-t for |x| >= t with t the smoothed
(1 - rho) quantile of a strided sample of |residual + g| (docs/auto-threshold.md; --scaled sends
the sampled mean of the selected |x| instead of t, the SDK's default level), top-k as the exact
largest |x|, momentum on the server (--momentum) or on the worker (--worker-momentum, DGC's
momentum correction; --mask for its factor masking), and the pulls (--pull): the server's
published copy moving by the coded difference params - published (2bit at --pull-rho with the
same quantile and level, 1bit_scaled, top-k), which every rank computes its gradient at. No
server, no wire. Prints the held-out loss every 10 iterations and, with --target, the first
evaluation (every --eval-every) at or below it; the same seeds give the same batches as
trainbench.

  OPENBLAS_NUM_THREADS=1 /usr/bin/python3 bench/efsim.py --codec 2bit --scaled --rho 0.5 \
      --momentum 0 --worker-momentum 0.9 --pull 2bit --pull-rho 0.5 --iters 160 --target 1.876
"""
import argparse
import os
import sys
import time
from typing import List, Optional

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from trainbench_model import Task, student  # noqa: E402


class Rank:
    """One worker's compression state per tensor: residual, threshold, worker momentum."""

    def __init__(self, a: argparse.Namespace, params: List[torch.Tensor]) -> None:
        self.a = a
        self.residual = [torch.zeros_like(p) for p in params]
        self.velocity = [torch.zeros_like(p) for p in params]
        self.threshold: List[Optional[float]] = [None] * len(params)
        self.step = 0

    def compress(self, k: int, g: torch.Tensor) -> torch.Tensor:
        a = self.a
        if a.worker_momentum:
            self.velocity[k] = a.worker_momentum * self.velocity[k] + g
            g = self.velocity[k]
        if a.codec == "none":
            return g
        x = self.residual[k] + g
        ax = x.abs().flatten()
        if a.codec == "2bit":
            q = self.ternary(k, x, ax)
        else:  # topk
            keep = max(1, int(ax.numel() * a.ratio))
            idx = ax.topk(keep).indices
            q = torch.zeros_like(ax)
            q[idx] = x.flatten()[idx]
            q = q.view_as(x)
        self.residual[k] = x - q
        if a.worker_momentum and a.mask:
            self.velocity[k][q != 0] = 0
        return q

    def ternary(self, k: int, x: torch.Tensor, ax: torch.Tensor) -> torch.Tensor:
        q, self.threshold[k] = ternary(self.a, self.step, k, x, ax, self.threshold[k], self.a.rho)
        return q


def ternary(a: argparse.Namespace, step: int, k: int, x: torch.Tensor, ax: torch.Tensor, prev: Optional[float],
            rho: float):
    """The auto-threshold 2bit code of x: (quantised x, the new smoothed threshold)."""
    n = ax.numel()
    m = min(n, max(4096, n // 100))
    stride = n // m
    start = (step * 7919 + k * 104729) % max(1, stride)  # moves every step, as the SDK's
    sample = ax[start::stride][:m]
    est = float(sample.kthvalue(max(1, min(m, round((1 - rho) * m)))).values)
    if est == 0.0:
        return torch.zeros_like(x), prev
    t = est if prev is None else a.smoothing * est + (1 - a.smoothing) * prev
    level = t
    if a.scaled:
        sel = sample[sample >= t]
        level = float(sel.mean()) if sel.numel() else t
    return torch.where(x >= t, level, torch.where(x <= -t, -level, 0.0)), t


def sign_scaled(x: torch.Tensor) -> torch.Tensor:
    """1bit_scaled: each block of 1024 elements as sign(x) times its mean |x|."""
    f = x.flatten()
    pad = (-f.numel()) % 1024
    blocks = torch.cat([f, f.new_zeros(pad)]).view(-1, 1024)
    n = torch.full((blocks.shape[0], 1), 1024.0)
    if pad:
        n[-1] = 1024 - pad
    scale = blocks.abs().sum(1, keepdim=True) / n
    q = torch.where(blocks >= 0, scale, -scale).flatten()[: f.numel()]
    return q.view_as(x)


class Publisher:
    """The server's compressed pulls: a published copy per tensor that moves by the coded
    difference params - published (server-side error feedback); the workers compute on it."""

    def __init__(self, a: argparse.Namespace, params: List[torch.Tensor]) -> None:
        self.a = a
        self.published = [p.detach().clone() for p in params]
        self.threshold: List[Optional[float]] = [None] * len(params)
        self.step = 0

    def publish(self, params: List[torch.Tensor]) -> None:
        a = self.a
        for k, p in enumerate(params):
            d = p.detach() - self.published[k]
            if a.pull == "none":
                q = d
            elif a.pull == "2bit":
                q, self.threshold[k] = ternary(a, self.step, k, d, d.abs().flatten(), self.threshold[k], a.pull_rho)
            elif a.pull == "1bit_scaled":
                q = sign_scaled(d)
            else:  # topk
                ad = d.abs().flatten()
                keep = max(1, int(ad.numel() * a.ratio))
                q = torch.zeros_like(ad)
                idx = ad.topk(keep).indices
                q[idx] = d.flatten()[idx]
                q = q.view_as(d)
            self.published[k] += q
        self.step += 1


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--codec", default="none", choices=("none", "2bit", "topk"))
    ap.add_argument("--rho", type=float, default=0.227, help="2bit density (0.227: the 1-bit budget)")
    ap.add_argument("--smoothing", type=float, default=0.5)
    ap.add_argument("--scaled", action="store_true", help="2bit level: mean of the selected |x|, not t")
    ap.add_argument("--ratio", type=float, default=0.001, help="top-k keep ratio")
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--momentum", type=float, default=0.9, help="the server's SGD momentum")
    ap.add_argument("--worker-momentum", type=float, default=0.0)
    ap.add_argument("--mask", action="store_true")
    ap.add_argument("--pull", default="none", choices=("none", "2bit", "1bit_scaled", "topk"), help="the pull codec")
    ap.add_argument("--pull-rho", type=float, default=0.227, help="2bit pull density")
    ap.add_argument("--iters", type=int, default=100)
    ap.add_argument("--eval-every", type=int, default=5)
    ap.add_argument("--target", type=float, default=0.0, help="stop once the held-out loss is at most this")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--world", type=int, default=4)
    ap.add_argument("--model", default="mlp10m")
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    torch.set_num_threads(1)
    task = Task(a.seed, 512)
    model = student(a.model, a.seed)
    params = list(model.parameters())
    ranks = [Rank(a, params) for _ in range(a.world)]
    buf = [torch.zeros_like(p) for p in params]
    master = [p.detach().clone() for p in params]  # the server's parameters
    pub = Publisher(a, params)
    losses = [task.eval_loss(model)]
    t0 = time.time()
    for it in range(a.iters):
        total = [torch.zeros_like(p) for p in params]
        for r, rank in enumerate(ranks):
            x, y = task.batch(r, it, a.batch)
            model.zero_grad()
            torch.nn.functional.cross_entropy(model(x), y).backward()
            for k, p in enumerate(params):
                total[k] += rank.compress(k, p.grad.detach().clone())
            rank.step += 1
        with torch.no_grad():
            for k, p in enumerate(params):
                d = total[k] / a.world
                buf[k] = a.momentum * buf[k] + d if it > 0 else d  # PyTorch's SGD (dampening 0)
                master[k] -= a.lr * buf[k]
            pub.publish(master)
            for k, p in enumerate(params):
                p.copy_(pub.published[k])
        if (it + 1) % a.eval_every == 0:
            losses.append(task.eval_loss(model))
            if a.target and losses[-1] <= a.target:
                break
    reached = f"target {a.target} at iteration {len(losses) * a.eval_every - a.eval_every}" if a.target and losses[-1] <= a.target else "target not reached"
    print(" ".join(f"{v:.3f}" for v in losses[::max(1, 10 // a.eval_every)]), f"| {reached} ({time.time() - t0:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
