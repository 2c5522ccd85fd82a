"""One rank of client/python/tests/test_recipes.py: the training recipes users bring (SGD with
momentum, Adam, AdamW with two param groups; gradient clipping, dynamic loss scaling, gradient
accumulation, per-group LR schedules, resume from state_dict), each trained by every system on
the same ranks and batches: DDP over gloo (the reference), DDP with gradagg's comm hook, and
gradagg.torch.DistributedOptimizer with the optimizer on the workers and on the server, overlap
on and off, and on the workers with int8 gradients both ways. Writes {(optimizer, recipe, system): result} to --out (torch.save); a result is the
final parameters, the losses and the loss scales, or the error a system gave."""
from __future__ import annotations

import argparse
import itertools
from typing import Any, Callable, Dict, List, Optional

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

import gradagg
from gradagg.torch import CommHookState, DistributedOptimizer, comm_hook

OPTIMIZERS = ("sgd", "adam", "adamw2")
RECIPES = ("clip", "scaler", "accum", "sched", "resume")
SYSTEMS = ("ddp", "hook", "worker", "worker-nooverlap", "worker-int8", "server", "server-nooverlap")
STEPS = 24
MAX_NORM = 0.5
TINY_BUCKETS_MB = 1e-4  # one parameter per bucket: 6 buckets, 6 jobs


def make_model(rank: int) -> torch.nn.Module:
    torch.manual_seed(10 + rank)  # different per rank: the start must be made equal (rank 0's)
    return torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.LayerNorm(32), torch.nn.GELU(),
                               torch.nn.Linear(32, 2))


def batches(rank: int) -> List[torch.Tensor]:
    """STEPS x 2 micro-batches; rank 1's inputs are 3x larger, so its loss overflows a loss scale
    that rank 0's does not (the scaler recipe then needs the other rank's overflow)."""
    g = torch.Generator().manual_seed(100 + rank)
    return [torch.randn(16, 8, generator=g) * (3.0 if rank == 1 else 1.0) for _ in range(2 * STEPS)]


TEACHER = torch.randn(8, 2, generator=torch.Generator().manual_seed(1))


def groups(model: torch.nn.Module, kind: str) -> List[Dict[str, Any]]:
    """The param groups of optimizer kind: AdamW's two (weight decay on matrices only, and a
    larger lr for the others), else one."""
    named = list(model.named_parameters())
    if kind != "adamw2":
        return [dict(params=[p for _, p in named])]
    return [dict(params=[p for _, p in named if p.ndim >= 2], weight_decay=0.1),
            dict(params=[p for _, p in named if p.ndim < 2], weight_decay=0.0, lr=0.03)]


def torch_optimizer(kind: str, gs: List[Dict[str, Any]]) -> torch.optim.Optimizer:
    if kind == "sgd":
        return torch.optim.SGD(gs, lr=0.002, momentum=0.9)
    if kind == "adam":
        return torch.optim.Adam(gs, lr=0.01)
    return torch.optim.AdamW(gs, lr=0.01)


def server_optimizer(kind: str) -> Dict[str, Any]:
    """The same optimizer on the server, as DistributedOptimizer arguments."""
    if kind == "sgd":
        return dict(optimizer=gradagg.SGD(lr=0.002, momentum=0.9))
    return dict(optimizer=gradagg.Adam(lr=0.01, decoupled=kind == "adamw2",
                                       weight_decay=0.01 if kind == "adamw2" else 0.0))


def schedule(kind: str) -> List[Callable[[int], float]]:
    lambdas = [lambda s: 0.9 ** s, lambda s: 1.0 / (1.0 + 0.2 * s)]
    return lambdas[:2 if kind == "adamw2" else 1]


class LossScaler:
    """Dynamic loss scaling as torch's GradScaler does it (scale, unscale in place, skip the step
    and halve the scale on a non-finite gradient, double it after `interval` good steps): the
    real GradScaler where this torch runs it on the CPU (>= 2.3), else its algorithm."""

    def __init__(self, scale: float = 2.0 ** 124, interval: int = 4) -> None:
        self.real: Optional[Any] = None
        if hasattr(torch, "amp") and hasattr(torch.amp, "GradScaler"):
            try:
                self.real = torch.amp.GradScaler("cpu", init_scale=scale, growth_interval=interval)
            except (TypeError, RuntimeError):
                self.real = None
        self.value, self.interval, self.good = scale, interval, 0

    def scale(self, loss: torch.Tensor) -> torch.Tensor:
        return self.real.scale(loss) if self.real else loss * self.value

    def step(self, opt: torch.optim.Optimizer) -> None:
        if self.real:
            self.real.step(opt)
            self.real.update()
            return
        grads = [p.grad for g in opt.param_groups for p in g["params"] if p.grad is not None]
        found = any(not bool(torch.isfinite(g).all()) for g in grads)
        torch._foreach_mul_(grads, 1.0 / self.value)
        if not found:
            opt.step()
        self.good = 0 if found else self.good + 1
        if found:
            self.value *= 0.5
        elif self.good == self.interval:
            self.value, self.good = self.value * 2.0, 0

    def current(self) -> float:
        return float(self.real.get_scale()) if self.real else self.value


class Run:
    """One system training one model: the optimizer, the model to call, its no_sync."""

    def __init__(self, system: str, kind: str, model: torch.nn.Module, a: argparse.Namespace, job: str,
                 resume: bool) -> None:
        self.system, self.closers = system, []
        self.net: torch.nn.Module = model
        gs = groups(model, kind)
        common = dict(server=a.server, job=job, rank=a.rank, world_size=a.world, call_timeout_ms=10000,
                      step_timeout_ms=30000, max_retries=2, resume=resume)
        if system in ("ddp", "hook"):
            self.net = DDP(model, bucket_cap_mb=TINY_BUCKETS_MB)
            if system == "hook":
                state = CommHookState(**{k: v for k, v in common.items() if k != "resume"})
                self.net.register_comm_hook(state, comm_hook)
                self.closers.append(state.close)
            self.opt: torch.optim.Optimizer = torch_optimizer(kind, gs)
            self.no_sync = self.net.no_sync
        elif system.startswith("worker"):
            codecs = dict(codec="int8", pull_codec="int8") if system == "worker-int8" else {}
            self.opt = DistributedOptimizer(model.named_parameters(), optimizer=torch_optimizer(kind, gs),
                                            overlap=system != "worker-nooverlap", bucket_cap_mb=TINY_BUCKETS_MB,
                                            **codecs, **common)
            self.closers.append(self.opt.close)
            self.no_sync = self.opt.no_sync
        else:
            self.opt = DistributedOptimizer(gs, overlap=system == "server", bucket_cap_mb=TINY_BUCKETS_MB,
                                            **server_optimizer(kind), **common)
            self.closers.append(self.opt.close)
            self.no_sync = self.opt.no_sync

    def close(self) -> None:
        for close in self.closers:
            close()


def train(system: str, kind: str, recipe: str, a: argparse.Namespace) -> Dict[str, Any]:
    job = f"{kind}-{recipe}-{system}"
    model = make_model(a.rank)
    data = batches(a.rank)
    run = Run(system, kind, model, a, job, resume=False)
    sched = torch.optim.lr_scheduler.LambdaLR(run.opt, schedule(kind)) if recipe == "sched" else None
    scaler = LossScaler() if recipe == "scaler" else None
    losses: List[float] = []
    scales: List[float] = []
    lrs: List[List[float]] = []
    try:
        for step in range(STEPS):
            if recipe == "resume" and step == STEPS // 2:
                saved = dict(model=model.state_dict(), opt=run.opt.state_dict())
                run.close()
                dist.barrier()  # every rank left before any joins again
                model = make_model(a.rank + 7)  # other values: the checkpoint must bring them back
                model.load_state_dict(saved["model"])
                run = Run(system, kind, model, a, job, resume=True)
                run.opt.load_state_dict(saved["opt"])
            run.opt.zero_grad(set_to_none=step % 2 == 0)
            x0, x1 = data[2 * step], data[2 * step + 1]
            if recipe == "accum":
                with run.no_sync():
                    F.mse_loss(run.net(x0), x0 @ TEACHER).backward()
            loss = F.mse_loss(run.net(x1), x1 @ TEACHER)
            if scaler:
                scaler.scale(loss).backward()
                scaler.step(run.opt)
                scales.append(scaler.current())
            else:
                loss.backward()
                if recipe == "clip":
                    torch.nn.utils.clip_grad_norm_(model.parameters(), MAX_NORM)
                run.opt.step()
            if sched:
                sched.step()
                lrs.append([g["lr"] for g in run.opt.param_groups])
            losses.append(loss.item())
    except (RuntimeError, gradagg.GradaggError) as e:
        run.close()
        return dict(error=str(e))
    run.close()
    return dict(params=[p.detach().clone() for p in model.parameters()], losses=losses, scales=scales, lrs=lrs)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rank", type=int, required=True)
    ap.add_argument("--world", type=int, required=True)
    ap.add_argument("--store", required=True, help="file for gloo's FileStore")
    ap.add_argument("--server", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--only", default="", help="optimizer,recipe,system filters (comma-separated prefixes)")
    a = ap.parse_args()
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{a.store}", rank=a.rank, world_size=a.world)
    dist._DEFAULT_FIRST_BUCKET_BYTES = int(TINY_BUCKETS_MB * (1 << 20))  # else DDP's first bucket takes 1 MB
    only = [f for f in a.only.split(",") if f]
    results: Dict[Any, Dict[str, Any]] = {}
    for kind, recipe, system in itertools.product(OPTIMIZERS, RECIPES, SYSTEMS):
        if only and not any(f in (kind, recipe, system) for f in only):
            continue
        results[(kind, recipe, system)] = train(system, kind, recipe, a)
        dist.barrier()  # every rank done with this run before the next one's jobs start
    torch.save(results, a.out)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
