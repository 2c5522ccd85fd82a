"""One worker of client/python/tests/test_elastic.py: joins an elastic (or bounded-staleness)
job, pushes grad(rank, step) each step and writes one JSON line per event to --log, flushed at
once (a worker the test kills leaves what it did): {"rank"} at the start, {"step", "base",
"version"} per step (the step pushed, the version it was computed from, the version pulled
after it), {"final", "params"} at the end."""
from __future__ import annotations

import argparse
import json
import os
import random
import time

import numpy as np

import gradagg  # from the environment: the source tree or the installed package, as the tests'

N = 16  # elements of the job's one tensor


def grad(rank: int, step: int) -> np.ndarray:
    """Dyadic values, so sums of a few are exact and a replay needs only the rank order."""
    return ((rank + 1) / 16 + (step % 4) / 64 + np.arange(N) / 1024).astype(np.float32)


def initial() -> np.ndarray:
    return (np.arange(N) / 8).astype(np.float32)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--server", required=True)
    ap.add_argument("--job", required=True)
    ap.add_argument("--world", type=int, required=True, help="the most ranks")
    ap.add_argument("--min", type=int, default=1, help="min_world_size (0: a fixed job)")
    ap.add_argument("--rank", default="any")
    ap.add_argument("--staleness", type=int, default=0)
    ap.add_argument("--steps", type=int, default=1000000)
    ap.add_argument("--stop", help="a file whose existence ends the loop (after the step in flight)")
    ap.add_argument("--pause", help="a file whose existence holds the next step back (the heartbeat goes on)")
    ap.add_argument("--sleep-ms", type=float, default=0.0, help="work per step; random in [0, 2x] with --jitter")
    ap.add_argument("--jitter", type=int, default=-1, help="seed of random sleeps; -1: fixed sleeps")
    ap.add_argument("--log", required=True)
    a = ap.parse_args()
    rng = random.Random(a.jitter)
    log = open(a.log, "a", buffering=1)

    def write(**kw: object) -> None:
        log.write(json.dumps(kw) + "\n")
        log.flush()
        os.fsync(log.fileno())

    rank = a.rank if a.rank == "any" else int(a.rank)
    c = gradagg.Client(a.server, a.job, rank, a.world, min_world_size=a.min, staleness=a.staleness, mean=True,
                       call_timeout_ms=10000, step_timeout_ms=60000)
    params = initial()
    c.add_tensor("w", params)
    c.init()
    write(rank=c.rank, version=c.version)
    step = c.version  # the step the next push carries: consecutive, no deadline closes a step early
    for _ in range(a.steps):
        if a.stop and os.path.exists(a.stop):
            break
        while a.pause and os.path.exists(a.pause):
            time.sleep(0.005)
        if a.sleep_ms:
            time.sleep((rng.uniform(0, 2) if a.jitter >= 0 else 1.0) * a.sleep_ms / 1000)
        base = c.version
        c.step([grad(c.rank, step)])
        write(step=step, base=base, version=c.version)
        step += 1
    write(final=c.version, params=[float(x) for x in params])
    c.close()


if __name__ == "__main__":
    main()
