#!/usr/bin/python3
"""The digits MLP in an elastic gradagg job under torchrun --nnodes MIN:MAX: nodes may come and go
during training. When the membership changes torchrun stops every worker (SIGTERM: gradagg leaves
the job for them) and starts them again with new ranks and world size; each joins the same job
(TORCHELASTIC_RUN_ID), takes the job's current parameters, and goes on from the job's version,
which says where in the data the job is. The job is elastic (min_world_size): a step closes with
the ranks that are there, its mean divides by them.

  GRADAGG_SERVER=127.0.0.1:7070 torchrun --nnodes 1:2 --nproc_per_node 2 --rdzv_backend c10d \\
      --rdzv_endpoint HOST:29400 --rdzv_id run1 --max_restarts 10 examples/digits_elastic.py \\
      --max-world 4

on every node (docs/launch.md, "Elastic jobs"). Options: --epochs (default 10), --codec (default
2bit), --min-world (default 1), --max-world (the most ranks ever: nodes x processes per node),
--step-sleep (seconds of extra work per step, to make a run long enough to watch). Rank 0 prints
`final accuracy <a> ...` when the job reached its last step; every process prints `rank <r> world
<w> from version <v> to <v'>`. gradagg is imported as installed, else from this checkout."""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "examples"))
from digits import data, env, model  # noqa: E402

gradagg = env.gradagg_package()  # installed, else this checkout's
import torch  # noqa: E402
from gradagg.torch import DistributedOptimizer  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--epochs", type=int, default=10)
    ap.add_argument("--codec", default="2bit")
    ap.add_argument("--batch", type=int, default=64, help="global batch, split over the ranks present")
    ap.add_argument("--min-world", type=int, default=1)
    ap.add_argument("--max-world", type=int, required=True)
    ap.add_argument("--step-sleep", type=float, default=0.0)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()

    where = gradagg.launch.from_environment(world_size=args.max_world)  # rank and job from torchrun
    present = int(os.environ.get("WORLD_SIZE", "1"))  # this rendezvous's world
    torch.set_num_threads(1)
    digits = data.load()
    net = model.build(args.seed)
    x_tr, y_tr = torch.from_numpy(digits.x_train), torch.from_numpy(digits.y_train)
    x_te, y_te = torch.from_numpy(digits.x_test), torch.from_numpy(digits.y_test)
    per_epoch = len(data.epoch_batches(len(y_tr), args.batch, args.seed, 0))
    total = per_epoch * args.epochs
    with DistributedOptimizer(net.named_parameters(), world_size=args.max_world, min_world_size=args.min_world,
                              optimizer=gradagg.SGD(lr=0.05, momentum=0.9), codec=args.codec) as opt:
        start = opt.version  # the job's step: a worker torchrun restarted goes on from it
        while opt.version < total:
            t = opt.version
            idx = data.epoch_batches(len(y_tr), args.batch, args.seed, t // per_epoch)[t % per_epoch]
            mine = torch.from_numpy(data.shard(idx, where.rank, present))
            opt.zero_grad()
            torch.nn.functional.cross_entropy(net(x_tr[mine]), y_tr[mine]).backward()
            if args.step_sleep:
                time.sleep(args.step_sleep)
            opt.step()
        end = opt.version
    if where.rank == 0:
        acc = model.evaluate(net, x_te, y_te)[1]
        print(f"final accuracy {acc:.4f} job {where.job} steps {end}", flush=True)
    print(f"rank {where.rank} world {present} from version {start} to {end}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
