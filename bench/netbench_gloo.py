#!/usr/bin/python3
"""One torch.distributed gloo rank of bench/netbench.py (runs inside its namespace).

All-reduces the rank's fixed gradient (bench/netbench_grads.py, the tensors the gradagg workers
push) --warmup + --steps times as fp32 or fp16 (cast there and back inside the timed step, as
bench/gloo_allreduce.py does), each step after a barrier; after the warm-up it prints
{"event": "warm"} and waits for a "go" line on stdin. Checks the first elements of the sum and
prints {"event": "done", "steps": [{"wall_s", "cpu_s"}, ...]}.
"""
import argparse
import json
import os
import sys
import time

import numpy as np
import torch
import torch.distributed as dist

from netbench_grads import make_grad

CHECK = 4096  # leading elements compared with the sum computed here


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rank", type=int, required=True)
    ap.add_argument("--world", type=int, required=True)
    ap.add_argument("--master", required=True, help="host:port of rank 0's store")
    ap.add_argument("--iface", default="eth0")
    ap.add_argument("--elements", type=int, required=True)
    ap.add_argument("--dtype", choices=("fp32", "fp16"), default="fp32")
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--steps", type=int, default=3)
    a = ap.parse_args()
    os.environ["GLOO_SOCKET_IFNAME"] = a.iface
    torch.set_num_threads(1)
    try:
        g = torch.from_numpy(make_grad(a.rank, a.elements))
        os.environ.setdefault("USE_LIBUV", "0")  # the store only bootstraps gloo; Debian's torch 2.x lacks libuv
        dist.init_process_group("gloo", init_method=f"tcp://{a.master}", rank=a.rank, world_size=a.world)
        steps = []
        for i in range(a.warmup + a.steps):
            if i == a.warmup:  # the orchestrator reads the link counters, then says go
                print(json.dumps({"event": "warm", "rank": a.rank}), flush=True)
                if sys.stdin.readline().strip() != "go":
                    raise RuntimeError("no go line on stdin")
            dist.barrier()
            c0, t0 = time.process_time(), time.perf_counter()
            buf = g.half() if a.dtype == "fp16" else g.clone()
            dist.all_reduce(buf)
            out = buf.float()
            t1, c1 = time.perf_counter(), time.process_time()
            if i >= a.warmup:
                steps.append({"wall_s": t1 - t0, "cpu_s": c1 - c0})
        want = sum(make_grad(r, min(CHECK, a.elements)).astype(np.float64) for r in range(a.world))
        got = out[:CHECK].numpy().astype(np.float64)
        tol = 1e-5 if a.dtype == "fp32" else 2e-3 * a.world * 0.05
        if not np.allclose(got, want, rtol=0, atol=tol):
            raise RuntimeError(f"wrong sum: max error {np.max(np.abs(got - want)):.3g}")
        dist.destroy_process_group()
        print(json.dumps({"event": "done", "rank": a.rank, "steps": steps}), flush=True)
        return 0
    except Exception as e:
        print(json.dumps({"event": "error", "rank": a.rank, "error": f"{type(e).__name__}: {e}"}), flush=True)
        return 1


if __name__ == "__main__":
    sys.exit(main())
