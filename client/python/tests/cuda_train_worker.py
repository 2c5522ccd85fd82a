"""One rank of client/python/tests/test_torch_cuda.py: a small transformer (one encoder layer and
a linear head) on --device, trained through gradagg-server by one of three paths:
  hook       DDP over gloo (file store) with gradagg.torch.comm_hook, torch.optim.SGD with momentum
  server     DistributedOptimizer, SGD with momentum on the server
  adamw      DistributedOptimizer with a worker-side torch.optim.AdamW (gradient clipping on)
Writes the final parameters (on the CPU), the losses and the devices the SDK saw to --out."""
from __future__ import annotations

import argparse

import torch
import torch.nn.functional as F


class TinyTransformer(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = torch.nn.Linear(8, 32)
        self.layer = torch.nn.TransformerEncoderLayer(d_model=32, nhead=4, dim_feedforward=64, dropout=0.0,
                                                      batch_first=True)
        self.head = torch.nn.Linear(32, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.layer(self.embed(x)).mean(dim=1))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rank", type=int, required=True)
    ap.add_argument("--world", type=int, required=True)
    ap.add_argument("--store", required=True, help="file for gloo's FileStore (hook)")
    ap.add_argument("--out", required=True)
    ap.add_argument("--device", choices=["cpu", "cuda"], required=True)
    ap.add_argument("--path", choices=["hook", "server", "adamw"], required=True)
    ap.add_argument("--server", required=True)
    ap.add_argument("--job", required=True)
    ap.add_argument("--codec", default="none")
    ap.add_argument("--pull-codec", default="none")
    ap.add_argument("--steps", type=int, default=20)
    a = ap.parse_args()
    torch.set_num_threads(1)
    dev = torch.device(a.device)
    torch.manual_seed(0)  # the same start on every rank and device (DDP and init() make it so anyway)
    model = TinyTransformer().to(dev)
    g = torch.Generator().manual_seed(100 + a.rank)
    x = torch.randn(16, 6, 8, generator=g)
    y = x.mean(dim=1) @ torch.randn(8, 2, generator=torch.Generator().manual_seed(1))
    x, y = x.to(dev), y.to(dev)
    fast = dict(call_timeout_ms=20000, step_timeout_ms=60000, max_retries=2)
    losses, devices = [], []
    if a.path == "hook":
        import torch.distributed as dist
        from torch.nn.parallel import DistributedDataParallel as DDP
        from gradagg.torch import CommHookState, comm_hook
        dist.init_process_group("gloo", init_method=f"file://{a.store}", rank=a.rank, world_size=a.world)
        ddp = DDP(model)
        state = CommHookState(a.server, a.job, a.rank, a.world, codec=a.codec, pull_codec=a.pull_codec, **fast)
        ddp.register_comm_hook(state, comm_hook)
        opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
        for _ in range(a.steps):
            opt.zero_grad()
            loss = F.mse_loss(ddp(x), y)
            loss.backward()
            opt.step()
            losses.append(loss.item())
        devices = sorted({t.cuda_device is not None for c, _ in state.buckets.values() for t in c.tensors})
        state.close()
        dist.destroy_process_group()
    else:
        from gradagg.torch import DistributedOptimizer
        inner = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.01) if a.path == "adamw" else None
        kw = dict(optimizer=inner) if inner is not None else dict(lr=0.05, momentum=0.9)
        with DistributedOptimizer(model.named_parameters(), server=a.server, job=a.job, rank=a.rank,
                                  world_size=a.world, codec=a.codec, pull_codec=a.pull_codec, **kw, **fast) as opt:
            for _ in range(a.steps):
                opt.zero_grad()
                loss = F.mse_loss(model(x), y)
                loss.backward()
                if inner is not None:
                    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                opt.step()
                losses.append(loss.item())
            devices = sorted({t.cuda_device is not None for c in opt.clients for t in c.tensors})
    torch.save({"params": [p.detach().cpu().clone() for p in model.parameters()], "losses": losses,
                "on_device": devices}, a.out)


if __name__ == "__main__":
    main()
