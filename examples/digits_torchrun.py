#!/usr/bin/python3
"""The digits MLP trained data-parallel under torchrun: every process torchrun starts is one rank
of one gradagg job, and finds it in the environment (docs/launch.md): RANK, WORLD_SIZE and
TORCHELASTIC_RUN_ID from torchrun, GRADAGG_SERVER from the user. Nothing in the training code
names a rank, a world size, a job or a server.

  GRADAGG_SERVER=127.0.0.1:7070 torchrun --standalone --nproc_per_node 4 examples/digits_torchrun.py

Options: --epochs (default 10), --codec (default 2bit, with the automatic threshold), --seed.
Rank 0 prints each epoch's test accuracy and ends with
`final accuracy <a> job <job> world <w> codec <c>`; every rank ends with `rank <r> steps <n>`.
gradagg is imported as installed (pip install ./client/python), else from this checkout."""
from __future__ import annotations

import argparse
import sys
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
    ap.add_argument("--batch", type=int, default=64, help="global batch, split over the ranks")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()

    where = gradagg.launch.from_environment()  # what DistributedOptimizer below resolves too
    torch.set_num_threads(1)
    digits = data.load()
    net = model.build(args.seed)
    x_tr, y_tr = torch.from_numpy(digits.x_train), torch.from_numpy(digits.y_train)
    x_te, y_te = torch.from_numpy(digits.x_test), torch.from_numpy(digits.y_test)
    steps = 0
    with DistributedOptimizer(net.named_parameters(), optimizer=gradagg.SGD(lr=0.05, momentum=0.9),
                              codec=args.codec) as opt:
        for epoch in range(args.epochs):
            for idx in data.epoch_batches(len(y_tr), args.batch, args.seed, epoch):
                mine = torch.from_numpy(data.shard(idx, where.rank, where.world_size))
                opt.zero_grad()
                torch.nn.functional.cross_entropy(net(x_tr[mine]), y_tr[mine]).backward()
                opt.step()
                steps += 1
            if where.rank == 0:
                print(f"epoch {epoch + 1} test accuracy {model.evaluate(net, x_te, y_te)[1]:.4f}", flush=True)
    if where.rank == 0:
        acc = model.evaluate(net, x_te, y_te)[1]
        print(f"final accuracy {acc:.4f} job {where.job} world {where.world_size} codec {args.codec}")
    print(f"rank {where.rank} steps {steps}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
