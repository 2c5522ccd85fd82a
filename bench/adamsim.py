#!/usr/bin/python3
"""A model of compressed AdamW training in one process (issue 41, Must 4), to find what makes
compressed Adam learn before changing the SDK: W ranks of bench/trainbench_gpt.py's task (the
same model, windows, AdamW groups and schedule as trainbench --model gpt*) computed one after
another. It models the arithmetic, not the code: no server, no wire.

Schemes (--scheme):
  exact   torch.optim.AdamW on the exact mean gradient (DDP).
  grad    each rank's g / W is coded with error feedback (--codec), the sum is published through
          the pull codec (--pull: the published copy moves by the coded difference, the server's
          error feedback), and AdamW runs on what every rank pulled.
  onebit  1-bit Adam as the SDK's compressed Adam: --warmup exact steps, then v frozen and the
          momentum shares m_r = beta1 m + (1 - beta1) g_r coded with error feedback (--codec),
          their sum published through --pull; the update uses m and the frozen v.

Codecs: none, fp16, bf16, 2bit (auto threshold at --rho, level the mean of the selected |x|:
the SDK's default), int8/int4 (per --block elements: scale max|x| / (2^(b-1) - 1), round to
nearest). Prints the held-out loss every --eval-every iterations.

  OPENBLAS_NUM_THREADS=1 /usr/bin/python3 bench/adamsim.py --scheme grad --codec int4 --pull int4
"""
import argparse
import os
import sys
import time
from typing import List, Optional

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from efsim import ternary  # noqa: E402
from trainbench_gpt import TextTask, decay_groups, gpt, lr_lambda  # noqa: E402


def blockq(x: torch.Tensor, bits: int, block: int) -> torch.Tensor:
    """x rounded to a signed `bits`-bit grid per block of `block` elements (scale max|x|)."""
    f = x.flatten()
    pad = (-f.numel()) % block
    b = torch.cat([f, f.new_zeros(pad)]).view(-1, block)
    top = float(2 ** (bits - 1) - 1)
    scale = b.abs().amax(1, keepdim=True).clamp_min(1e-30) / top
    q = (b / scale).round().clamp(-top, top) * scale
    return q.flatten()[: f.numel()].view_as(x)


class Coder:
    """One codec with its state per tensor (2bit's smoothed threshold) and a step counter."""

    def __init__(self, a: argparse.Namespace, codec: str, n: int) -> None:
        self.a, self.codec = a, codec
        self.threshold: List[Optional[float]] = [None] * n
        self.step = 0

    def __call__(self, k: int, x: torch.Tensor) -> torch.Tensor:
        c = self.codec
        if c == "none":
            return x
        if c == "fp16":
            return x.half().float()
        if c == "bf16":
            return x.bfloat16().float()
        if c == "2bit":
            q, self.threshold[k] = ternary(self.a, self.step, k, x, x.abs().flatten(), self.threshold[k], self.a.rho)
            return q
        return blockq(x, 8 if c == "int8" else 4, self.a.block)


class Sender:
    """A rank's push side: error feedback per tensor around a Coder."""

    def __init__(self, a: argparse.Namespace, params: List[torch.Tensor]) -> None:
        self.coder = Coder(a, a.codec, len(params))
        self.residual = [torch.zeros_like(p) for p in params]
        self.ef = not a.no_ef

    def send(self, k: int, x: torch.Tensor) -> torch.Tensor:
        if self.ef:
            x = x + self.residual[k]
        q = self.coder(k, x)
        if self.ef:
            self.residual[k] = x - q
        return q


class Publisher:
    """The server's pull side: a published copy that moves by the coded difference. By default
    (--pull-start full) as the server does it for every reduce job: the first publication goes
    out exact (fp32) and the copy starts from it (docs/protocol.md, "Pull"). --pull-start params
    starts the copy at the parameters (the init values of DistributedOptimizer's gradient jobs:
    rank 0's parameters) and codes the first mean from there; zeros starts it at zero."""

    def __init__(self, a: argparse.Namespace, params: List[torch.Tensor]) -> None:
        self.coder = Coder(a, a.pull, len(params))
        self.first_full = a.pull_start == "full"
        self.published = [p.detach().clone() if a.pull_start == "params" else torch.zeros_like(p) for p in params]

    def publish(self, values: List[torch.Tensor]) -> List[torch.Tensor]:
        for k, v in enumerate(values):
            if self.first_full and self.coder.step == 0:
                self.published[k] = v.clone()
            else:
                self.published[k] = self.published[k] + self.coder(k, v - self.published[k])
        self.coder.step += 1
        return self.published


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--scheme", default="exact", choices=("exact", "grad", "onebit"))
    ap.add_argument("--codec", default="none", choices=("none", "fp16", "bf16", "2bit", "int8", "int4"))
    ap.add_argument("--pull", default="none", choices=("none", "fp16", "bf16", "2bit", "int8", "int4"))
    ap.add_argument("--no-ef", action="store_true", help="push without error feedback")
    ap.add_argument("--pull-start", default="full", choices=("full", "params", "zeros"),
                    help="where the published copy starts (full: the server's rule, see Publisher)")
    ap.add_argument("--rho", type=float, default=0.5, help="2bit density (0.5: the SDK's 1.5-bit default)")
    ap.add_argument("--smoothing", type=float, default=0.5)
    ap.add_argument("--block", type=int, default=64)
    ap.add_argument("--warmup", type=int, default=100, help="onebit: exact steps before v is frozen")
    ap.add_argument("--model", default="gpt6m")
    ap.add_argument("--iters", type=int, default=300)
    ap.add_argument("--eval-every", type=int, default=25)
    ap.add_argument("--world", type=int, default=4)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--lr", type=float, default=3e-3)
    a = ap.parse_args()
    a.scaled = True
    torch.set_num_threads(1)
    task = TextTask(a.model, a.seed, 128)
    model = gpt(a.model, a.seed)
    params = list(model.parameters())
    opt = torch.optim.AdamW(decay_groups(model, 0.1), lr=a.lr, betas=(0.9, 0.95))
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lr_lambda(a.iters // 10, a.iters))
    senders = [Sender(a, params) for _ in range(a.world)]
    pub = Publisher(a, params)
    index = {id(p): k for k, p in enumerate(params)}
    losses = [task.eval_loss(model)]
    t0 = time.time()
    for it in range(a.iters):
        momentum = a.scheme == "onebit" and it >= a.warmup
        total = [torch.zeros_like(p) for p in params]
        for r in range(a.world):
            x, y = task.batch(r, it, 1)
            model.zero_grad()
            torch.nn.functional.cross_entropy(model(x), y).backward()
            for k, p in enumerate(params):
                g = p.grad.detach()
                if momentum:
                    g = opt.state[p]["exp_avg"] * 0.9 + 0.1 * g
                total[k] += g / a.world if a.scheme == "exact" or (a.scheme == "onebit" and not momentum) \
                    else senders[r].send(k, g / a.world)
        for s in senders:
            s.coder.step += 1
        if a.scheme == "grad" or momentum:
            total = pub.publish(total)
        with torch.no_grad():
            if not momentum:
                for p, g in zip(params, total):
                    p.grad = g.clone()
                opt.step()
            else:
                for group in opt.param_groups:
                    lr, wd, eps = group["lr"], group["weight_decay"], group["eps"]
                    for p in group["params"]:
                        st = opt.state[p]
                        st["step"] += 1
                        t = float(st["step"])
                        m = total[index[id(p)]]
                        st["exp_avg"].copy_(m)
                        vhat = st["exp_avg_sq"] / (1 - 0.95 ** a.warmup)
                        p.mul_(1 - lr * wd).addcdiv_(m / (1 - 0.9 ** t), vhat.sqrt().add_(eps), value=-lr)
        sched.step()
        if (it + 1) % a.eval_every == 0:
            losses.append(task.eval_loss(model))
            print(f"{it + 1} {losses[-1]:.3f} ({time.time() - t0:.0f} s)", flush=True)
    print(" ".join(f"{v:.3f}" for v in losses))
    return 0


if __name__ == "__main__":
    sys.exit(main())
