#!/usr/bin/python3
"""Fits the cost model's CPU coefficients (docs/scaling.md, "The cost model") to scalebench
runs, and prints them as the rows of client/cli/plan_costs.c.

Calibration (2 world sizes x 2 tensor sizes per codec pair, one shard; the checkpoint runs give
the journal's share):

  for pair in none:none fp16:none 2bit:none 2bit:2bit topk:2bit int8:int8; do
    for n in 1048576 4194304; do
      /usr/bin/python3 bench/scalebench.py --worlds 4,16 --shards 1 --jobs 0 --elements $n \\
          --codec ${pair%%:*} --pull-codec ${pair##*:} --rank-steps 128 --json build/results/calib/${pair/:/-}-$n.json
    done
  done
  # and none:none again with --server-args "--durability checkpoint", into none-none-$n-checkpoint.json
  /usr/bin/python3 bench/costfit.py build/results/calib/*.json

Per codec pair, with n the elements of the shard's share and W the ranks:
  shard CPU per step    = step_ms + W * push_ms + n * (step_ns + W * push_ns)
  worker CPU per step   = call_ms + N * worker_ns        (one core, the SDK's encode, decode, copies)
  shard RSS             = base + n * 4 * copies + W * (n * push bytes * held + rank)
  shared cores busy     = (shard CPU + W * worker CPU) / cores / step time    (the median)
Each fit minimises the relative error over the pair's runs; a coefficient that comes out
negative is held at 0 and the rest refitted. The journal's share of push_ns is the difference
between the acked and the checkpoint runs of none:none, per byte pushed."""
import glob
import json
import sys
from typing import Dict, List, Tuple

import numpy as np

Row = Tuple[int, int, float, float, float, float]  # elements, world, server CPU s/step, client CPU s/rank-step,
#                                                  RSS MiB, step s
PUSH_BYTES = {"none": 4.0, "fp16": 2.0, "2bit": 0.25, "int8": 1 + 4 / 64, "topk": 0.001 * 8}  # per element


def nonneg_relative_fit(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Least squares of x @ c against y in relative error, every c >= 0 (a negative one held at 0)."""
    keep = list(range(x.shape[1]))
    while True:
        w = x[:, keep] / y[:, None]
        c, *_ = np.linalg.lstsq(w, np.ones(len(y)), rcond=None)
        if (c >= 0).all():
            out = np.zeros(x.shape[1])
            out[keep] = c
            return out
        keep.pop(int(np.argmin(c)))


cores = 0


def load(paths: List[str]) -> Dict[Tuple[str, str, bool], List[Row]]:
    global cores
    pairs: Dict[Tuple[str, str, bool], List[Row]] = {}
    for path in paths:
        with open(path) as f:
            d = json.load(f)
        for r in d["ranks"]:
            if r["shards"] != 1:
                continue
            key = (r["codec"], r["pull_codec"], "checkpoint" in path)
            pairs.setdefault(key, []).append((r["elements"], r["world"], r["server_cpu_s"] / r["steps"],
                                               r["client_cpu_ms_per_rank_step"] / 1e3, r["peak_rss_mib_per_shard"],
                                               r["step_s"]))
            cores = d["cores"]
    return pairs


def main() -> int:
    paths = sys.argv[1:] or sorted(glob.glob("build/results/calib/*.json"))
    pairs = load(paths)
    fits = {}
    for key, rows in sorted(pairs.items()):
        n = np.array([r[0] for r in rows], float)
        w = np.array([r[1] for r in rows], float)
        server = nonneg_relative_fit(np.stack([np.ones_like(n), w, n, w * n], 1), np.array([r[2] for r in rows]))
        worker = nonneg_relative_fit(np.stack([np.ones_like(n), n], 1), np.array([r[3] for r in rows]))
        fits[key] = (server, worker)
        worst = max(abs(np.dot([1, r[1], r[0], r[1] * r[0]], server) / r[2] - 1) for r in rows)
        print(f"# {key[0]}/{key[1]}{' checkpoint' if key[2] else ''}: {len(rows)} runs, worst server fit "
              f"{100 * worst:.0f} %", file=sys.stderr)
    print("/* push, pull: step_ms, push_ms, step_ns, push_ns (shard, per element of its share); "
          "call_ms, worker_ns */")
    for (push, pull, ckpt), (s, wk) in sorted(fits.items()):
        if ckpt:
            continue
        print(f"{{GA_CODEC_{push.upper()}, GA_CODEC_{pull.upper()}, {1e3 * s[0]:.2f}, {1e3 * s[1]:.3f}, "
              f"{1e9 * s[2]:.2f}, {1e9 * s[3]:.2f}, {1e3 * wk[0]:.2f}, {1e9 * wk[1]:.2f}}},")
    # Resident memory: base + n * 4 * copies + W * (n * push bytes * held + rank), MiB.
    xs, ys = [], []
    for (push, pull, _), rows in pairs.items():
        copies = 1 if pull == "none" else 2
        for n, w, _, _, rss, _ in rows:
            xs.append([1, w * n * PUSH_BYTES[push] / 2**20, w])
            ys.append(rss - n * 4 * copies / 2**20)
    mem = nonneg_relative_fit(np.array(xs), np.array(ys))
    print(f"/* memory: base {mem[0]:.1f} MiB, held factor {mem[1]:.2f}, {mem[2]:.3f} MiB per rank */")
    # How busy the shared cores keep while everything runs on them: the step's CPU (server and
    # clients) over the cores, against the step's wall time.
    busy = [(srv + w * cl) / cores / step for rows in pairs.values() for _, w, srv, cl, _, step in rows]
    print(f"/* shared cores busy: median {float(np.median(busy)):.2f} of {len(busy)} runs "
          f"({min(busy):.2f} to {max(busy):.2f}) */")
    acked, ckpt = fits.get(("none", "none", False)), fits.get(("none", "none", True))
    if acked and ckpt:
        print(f"/* journal: {1e9 * (acked[0][3] - ckpt[0][3]) / 4:.2f} ns per byte pushed */")
    return 0


if __name__ == "__main__":
    sys.exit(main())
