"""One rank of client/python/tests/test_comm_hook.py: a small model under DDP over gloo (file
store), its buckets reduced by DDP's all-reduce or by gradagg.torch.comm_hook, trained with
torch.optim.SGD; writes the final parameters and the losses to --out (torch.save)."""
from __future__ import annotations

import argparse

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rank", type=int, required=True)
    ap.add_argument("--world", type=int, required=True)
    ap.add_argument("--store", required=True, help="file for gloo's FileStore")
    ap.add_argument("--out", required=True)
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--bucket-mb", type=float, default=25.0)
    ap.add_argument("--server", help="gradagg-server: reduce through comm_hook (else DDP's all-reduce)")
    ap.add_argument("--job", default="hook")
    ap.add_argument("--codec", default="none")
    ap.add_argument("--pull-codec", default="none")
    ap.add_argument("--hook-momentum", action="store_true", help="momentum in the hook; the model's SGD without")
    a = ap.parse_args()
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{a.store}", rank=a.rank, world_size=a.world)
    torch.manual_seed(a.rank)  # DDP broadcasts rank 0's parameters
    model = torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.Tanh(), torch.nn.Linear(32, 32), torch.nn.Tanh(),
                                torch.nn.Linear(32, 2))
    dist._DEFAULT_FIRST_BUCKET_BYTES = int(a.bucket_mb * (1 << 20))  # else the first bucket takes 1 MB
    ddp = DDP(model, bucket_cap_mb=a.bucket_mb)
    state = None
    if a.server:
        from gradagg.torch import CommHookState, comm_hook
        state = CommHookState(a.server, a.job, a.rank, a.world, codec=a.codec, pull_codec=a.pull_codec,
                              momentum=0.9 if a.hook_momentum else 0.0,
                              call_timeout_ms=10000, step_timeout_ms=30000, max_retries=2)
        ddp.register_comm_hook(state, comm_hook)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.0 if a.hook_momentum else 0.9)
    g = torch.Generator().manual_seed(100 + a.rank)
    x = torch.randn(64, 8, generator=g)
    y = x @ torch.randn(8, 2, generator=torch.Generator().manual_seed(1))
    losses = []
    for _ in range(a.steps):
        opt.zero_grad()
        loss = F.mse_loss(ddp(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    buckets = len(state.buckets) if state else 0
    if state:
        state.close()
    torch.save({"params": [p.detach().clone() for p in model.parameters()], "losses": losses,
                "buckets": buckets}, a.out)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
