#!/usr/bin/python3
"""The peer to beat: torch.distributed all_reduce with the gloo backend on loopback.

Runs W processes, each all-reducing the same fp32 tensor of N elements STEPS times, and prints
one JSON line with the per-step times (rank 0's view, after a barrier) and their median:
    {"peer": "gloo", "world": 4, "elements": 25000000, "dtype": "fp32", "median_s": ..., "steps_s": [...]}
Usage: bench/gloo_allreduce.py [--world 4] [--elements 25000000] [--steps 5] [--fp16]
"""
import argparse
import json
import os
import socket
import statistics
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def worker(rank, args, port, queue):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    torch.set_num_threads(1)
    os.environ.setdefault("USE_LIBUV", "0")  # the store only bootstraps gloo; Debian's torch 2.x lacks libuv
    dist.init_process_group("gloo", rank=rank, world_size=args.world)
    dtype = torch.float16 if args.fp16 else torch.float32
    g = torch.full((args.elements,), float(rank + 1), dtype=torch.float32)
    times = []
    for _ in range(args.steps + 1):  # the first is a warm-up
        dist.barrier()
        t0 = time.perf_counter()
        buf = g.to(dtype) if args.fp16 else g.clone()
        dist.all_reduce(buf)
        if args.fp16:
            buf = buf.to(torch.float32)
        times.append(time.perf_counter() - t0)
    expect = args.world * (args.world + 1) / 2
    ok = bool(torch.all(buf == expect))
    if rank == 0:
        queue.put({"steps_s": times[1:], "ok": ok})
    dist.destroy_process_group()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--world", type=int, default=4)
    ap.add_argument("--elements", type=int, default=25_000_000)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--fp16", action="store_true")
    args = ap.parse_args()
    ctx = mp.get_context("spawn")
    queue = ctx.SimpleQueue()
    port = free_port()
    procs = [ctx.Process(target=worker, args=(r, args, port, queue)) for r in range(args.world)]
    for p in procs:
        p.start()
    for p in procs:
        p.join()
    if any(p.exitcode != 0 for p in procs) or queue.empty():
        print("gloo_allreduce: a worker failed", file=sys.stderr)
        return 1
    res = queue.get()
    if not res["ok"]:
        print("gloo_allreduce: wrong sum", file=sys.stderr)
        return 1
    print(json.dumps({"peer": "gloo", "world": args.world, "elements": args.elements,
                      "dtype": "fp16" if args.fp16 else "fp32",
                      "median_s": statistics.median(res["steps_s"]), "steps_s": res["steps_s"]}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
