#!/usr/bin/python3
"""One gradagg worker of bench/netbench.py (runs inside its namespace).

Joins the job, registers one tensor of --elements floats, runs --warmup steps, prints
{"event": "warm"} and waits for a line on stdin, runs --steps steps with the same fixed gradient
(bench/netbench_grads.py), prints {"event": "done", "steps": [...]} with each step's wall and CPU
time and the client's stats (gradagg.Client.stats), and leaves. Errors: {"event": "error"}, exit 1.
"""
import argparse
import sys
import time

import numpy as np

import gradagg
from netbench_grads import make_grad
from worker_events import emit, fail, opt_float


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--server", required=True, help="host:port, or a comma-separated shard list")
    ap.add_argument("--job", default="netbench")
    ap.add_argument("--rank", type=int, required=True)
    ap.add_argument("--world", type=int, required=True)
    ap.add_argument("--elements", type=int, required=True)
    ap.add_argument("--codec", default="none")
    ap.add_argument("--threshold", type=opt_float, default=None)
    ap.add_argument("--ratio", type=opt_float, default=None)
    ap.add_argument("--pull-codec", default="none")
    ap.add_argument("--pull-threshold", type=opt_float, default=None)
    ap.add_argument("--pull-ratio", type=opt_float, default=None)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--lanes", type=int, default=1)
    ap.add_argument("--lr", type=float, default=0.1)
    ap.add_argument("--momentum", type=float, default=0.9)
    a = ap.parse_args()
    try:
        grad = make_grad(a.rank, a.elements)
        params = np.zeros(a.elements, dtype=np.float32)
        client = gradagg.Client(a.server, a.job, a.rank, a.world, mean=True,
                                optimizer=gradagg.SGD(a.lr, momentum=a.momentum), pull_codec=a.pull_codec,
                                pull_threshold=a.pull_threshold, pull_ratio=a.pull_ratio, threads=a.threads,
                                lanes=a.lanes, call_timeout_ms=120000, step_timeout_ms=600000)
        with client:
            client.add_tensor("model", params, codec=a.codec, threshold=a.threshold, ratio=a.ratio)
            client.init()
            for _ in range(a.warmup):
                client.step([grad])
            emit({"event": "warm", "rank": a.rank})
            if sys.stdin.readline().strip() != "go":
                raise RuntimeError("no go line on stdin")
            steps = []
            for _ in range(a.steps):
                c0, t0 = time.process_time(), time.perf_counter()
                client.step([grad])
                t1, c1 = time.perf_counter(), time.process_time()
                s = client.stats
                steps.append({"wall_s": t1 - t0, "cpu_s": c1 - c0, "encode_s": s.encode_s, "push_s": s.push_s,
                              "pull_s": s.pull_s, "decode_s": s.decode_s, "bytes_pushed": s.bytes_pushed,
                              "bytes_pulled": s.bytes_pulled, "retries": s.retries, "late": s.late_pushes})
            if not np.all(np.isfinite(params[:1024])):
                raise RuntimeError("non-finite parameters after the steps")
            emit({"event": "done", "rank": a.rank, "version": client.version, "steps": steps})
        return 0
    except Exception as e:
        return fail(a.rank, e)


if __name__ == "__main__":
    sys.exit(main())
