"""Adam with compressed momentum, for a worker-side DistributedOptimizer whose torch optimizer is
Adam or AdamW (docs/sdk.md, "Compressed Adam"): 1-bit Adam's scheme. The first `warmup` steps
exchange exact gradients and run the torch optimizer itself, which builds the second moment v
from the mean gradient. After them v is frozen and each step exchanges the first moment instead:
every rank computes m_r = beta1 * m + (1 - beta1) * g_r from the shared m and its own gradient,
pushes it compressed (with the library's error feedback), and every rank takes the pulled sum of
the shares as the new m. The update is AdamW's (or Adam's) with v as frozen:

    step t:  m_hat = m / (1 - beta1^t),  v_hat = v / (1 - beta2^T),  T = the warm-up's last step
             AdamW: p = p * (1 - lr * weight_decay) - lr * m_hat / (sqrt(v_hat) + eps)
             Adam:  g_r = g_r + weight_decay * p before m_r;  p = p - lr * m_hat / (sqrt(v_hat) + eps)

Error feedback then acts on the momentum, which changes slowly, and v never sees the bursts
error feedback makes in a compressed gradient (an element sent every k steps with k times its
size inflates v about k-fold and shrinks the steps by sqrt(k)).
The optimizer's state keeps torch's names: exp_avg is m, exp_avg_sq the frozen v, step counts
every step, and frozen_step holds T."""
from __future__ import annotations

import math
from typing import Optional

import torch

#: Exact steps before the momentum is compressed, when DistributedOptimizer is not told.
DEFAULT_WARMUP = 100



def unsupported(inner: torch.optim.Optimizer) -> Optional[str]:
    """Why inner cannot run with compressed momentum, or None."""
    if not isinstance(inner, (torch.optim.Adam, torch.optim.AdamW)):
        return f"{type(inner).__name__} is not torch.optim.Adam or AdamW"
    for g, group in enumerate(inner.param_groups):
        for key in ("amsgrad", "maximize", "capturable", "differentiable"):
            if group.get(key):
                return f"param group {g} has {key}=True"
    return None


def _decoupled(inner: torch.optim.Optimizer, group: dict) -> bool:
    return isinstance(inner, torch.optim.AdamW) or bool(group.get("decoupled_weight_decay"))


@torch.no_grad()
def local_momentum(inner: torch.optim.Optimizer, group: dict, p: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
    """m_r: this rank's next first moment of p from its own gradient g (a new tensor)."""
    beta1 = group["betas"][0]
    if group["weight_decay"] and not _decoupled(inner, group):
        g = g.add(p.detach().to(g.dtype), alpha=group["weight_decay"])
    return inner.state[p]["exp_avg"].to(torch.float32).mul(beta1).add_(g, alpha=1 - beta1)


@torch.no_grad()
def frozen_step(inner: torch.optim.Optimizer, trained: set) -> None:
    """One update of every parameter in `trained` (their ids) from its exp_avg (the exchanged m,
    already set) and its frozen exp_avg_sq."""
    for group in inner.param_groups:
        beta1, beta2 = group["betas"]
        lr, eps, wd = group["lr"], group["eps"], group["weight_decay"]
        for p in group["params"]:
            if id(p) not in trained:
                continue
            state = inner.state[p]
            if "frozen_step" not in state:
                state["frozen_step"] = float(state["step"])
            state["step"] += 1
            t = float(state["step"])
            if wd and _decoupled(inner, group):
                p.mul_(1 - lr * wd)
            denom = (state["exp_avg_sq"].sqrt() / math.sqrt(1 - beta2 ** state["frozen_step"])).add_(eps)
            p.addcdiv_(state["exp_avg"], denom, value=-lr / (1 - beta1 ** t))
