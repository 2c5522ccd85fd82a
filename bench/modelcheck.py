#!/usr/bin/python3
"""The cost model against the measured runs (docs/scaling.md, "Validation"): every row is a run
recorded in docs/benchmarks.md or docs/scaling.md, its configuration given to `gradagg plan` with
every choice pinned, and the model's figure printed beside the measured one. The model's CPU
costs were fitted on other runs (bench/costfit.py: one shard, W = 4 and 16, no optimizer, no
link), so every row here is a prediction.

  /usr/bin/python3 bench/modelcheck.py [--gradagg build/unit/client/gradagg] [--limit 0.20] [--json FILE]

Exits 1 when a row's |predicted / measured - 1| exceeds --ceiling (0.40), or when fewer than
--min-within (0.75) of the rows are within --limit (0.20): the model's state as docs/scaling.md
("Validation") records it, held so that a change to the model or its costs cannot make it worse
unnoticed."""
import argparse
import json
import os
import subprocess
import sys
from typing import Any, Dict, List

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)

# The 2-vCPU VM: every rank, relay and shard on its 2 cores; the journal's disk as netbench's probe
# measured it the same day (1.35 GB/s of direct writes).
VM = ["--shared-cores", "2", "--server-cores", "2", "--relay-cores", "2", "--disk-gbyte-s", "1.35"]
# bench/trainbench_model.py mlp10m: 1024-2048-2048-2048-10.
MLP10M = 1024 * 2048 + 2048 + 2 * (2048 * 2048 + 2048) + 2048 * 10 + 10


def netbench(codec: str, pull: str, shards: int, lanes: int, link: str, measured: float, run: str) -> Dict[str, Any]:
    return {"bench": "netbench", "what": f"{link} {codec}/{pull} S={shards}" + (f" {lanes} lanes" if lanes > 1 else ""),
            "source": f"netbench --links {'1gbit' if link == '1 Gbit' else 'lo'}, 2026-11-28", "field": "step_s", "measured": measured,
            "args": ["--params", "25000000", "--world", "4", "--link-gbit", "1" if link == "1 Gbit" else "0",
                     "--shards", str(shards), "--lanes", str(lanes), "--codec", codec, "--pull-codec", pull, *VM]}


def relaybench(codec: str, relays: bool, measured: float) -> Dict[str, Any]:
    return {"bench": "relaybench", "what": f"1 Gbit {'relays' if relays else 'flat'} {codec}"
            + (f", inner {codec}" if relays and codec != "none" else ""),
            "source": "relaybench --inner, 2026-11-28", "field": "step_s", "measured": measured,
            "args": ["--params", "2500000", "--world", "8", "--ranks-per-node", "4", "--link-gbit", "1",
                     "--node-gbyte-s", "0", "--shards", "1", "--lanes", "1", "--relays", "on" if relays else "off",
                     "--codec", codec, "--pull-codec", "none" if codec in ("none", "fp16") else "2bit", *VM]}


def scale(shards: int, world: int, field: str, measured: float) -> Dict[str, Any]:
    return {"bench": "scalebench", "what": f"2bit/2bit 1M S={shards} W={world}", "source": "scalebench, 2026-11-28",
            "field": field, "measured": measured,
            "args": ["--params", "1048576", "--world", str(world), "--link-gbit", "0", "--shards", str(shards),
                     "--lanes", "1", "--codec", "2bit", "--pull-codec", "2bit", "--optimizer", "none", *VM]}


def service(codec: str, pull: str, step: float, cpu: float) -> List[Dict[str, Any]]:
    args = ["--params", "25000000", "--world", "4", "--link-gbit", "0", "--shards", "1", "--lanes", "1",
            "--codec", codec, "--pull-codec", pull, *VM]
    return [{"bench": "bench_service", "what": f"lo {codec}/{pull}", "source": "bench_service --steps 3, 2026-11-28",
             "field": field, "measured": m, "args": args} for field, m in (("step_s", step), ("shard_cpu_s", cpu))]


def trainbench(what: str, codec: str, link: str, compute_ms: float, measured: float) -> Dict[str, Any]:
    """--colocate, comm regime; compute: the floor's forward + backward of the same run, x cores / ranks."""
    return {"bench": "trainbench", "what": f"mlp10m {link} {what}", "source": "trainbench --colocate, 2026-11-28",
            "field": "iteration_s", "measured": measured,
            "args": ["--params", str(MLP10M), "--world", "4", "--link-gbit", "1" if link == "1 Gbit" else "0",
                     "--lanes", "1", "--codec", codec, "--pull-codec", codec, "--colocate",
                     "--compute-ms", str(compute_ms), *VM]}


ROWS: List[Dict[str, Any]] = [
    # All measured on 2026-11-28 on the 2-vCPU VM, within an hour of the calibration runs.
    netbench("none", "none", 1, 1, "1 Gbit", 6.933, "1 Gbit"),
    netbench("none", "none", 2, 1, "1 Gbit", 3.623, "1 Gbit"),
    netbench("2bit", "2bit", 1, 1, "1 Gbit", 0.655, "1 Gbit"),
    netbench("2bit", "2bit", 2, 1, "1 Gbit", 0.391, "1 Gbit"),
    netbench("2bit", "2bit", 1, 16, "1 Gbit", 0.378, "1 Gbit"),
    netbench("2bit", "2bit", 2, 16, "1 Gbit", 0.435, "1 Gbit"),
    netbench("topk", "2bit", 1, 1, "1 Gbit", 0.427, "1 Gbit"),
    netbench("topk", "2bit", 2, 1, "1 Gbit", 0.278, "1 Gbit"),
    netbench("none", "none", 1, 1, "lo", 1.091, "lo"),
    netbench("none", "none", 2, 1, "lo", 0.975, "lo"),
    netbench("2bit", "2bit", 1, 1, "lo", 0.361, "lo"),
    netbench("2bit", "2bit", 2, 1, "lo", 0.284, "lo"),
    netbench("topk", "2bit", 1, 1, "lo", 0.302, "lo"),
    netbench("topk", "2bit", 2, 1, "lo", 0.233, "lo"),
    relaybench("none", False, 1.3638),
    relaybench("none", True, 0.5035),
    relaybench("fp16", False, 1.0185),
    relaybench("fp16", True, 0.4104),
    relaybench("2bit", False, 0.1042),
    relaybench("2bit", True, 0.1212),
    relaybench("topk", False, 0.0961),
    relaybench("topk", True, 0.0929),
    *service("none", "none", 1.283, 1.083),
    *service("fp16", "none", 0.689, 0.533),
    *service("2bit", "none", 0.481, 0.307),
    *service("2bit", "2bit", 0.338, 0.227),
    scale(1, 64, "shard_cpu_s", 64 * 1.172e-3), scale(1, 256, "shard_cpu_s", 256 * 1.440e-3),
    scale(2, 4, "shard_cpu_s", 4 * 2.773e-3), scale(2, 64, "shard_cpu_s", 64 * 0.908e-3),
    scale(2, 256, "shard_cpu_s", 256 * 0.779e-3),
    scale(4, 4, "shard_cpu_s", 4 * 1.885e-3), scale(4, 64, "shard_cpu_s", 64 * 0.640e-3),
    scale(4, 256, "shard_cpu_s", 256 * 0.586e-3),
    scale(1, 256, "shard_rss_mib", 151), scale(2, 256, "shard_rss_mib", 80), scale(4, 256, "shard_rss_mib", 55),
    scale(1, 1024, "shard_rss_mib", 393),
    trainbench("none, colocated, serial", "none", "1 Gbit", 187 * 2 / 4, 1.012),
    trainbench("2bit both ways, colocated, serial", "2bit", "1 Gbit", 187 * 2 / 4, 0.442),
    trainbench("none, colocated, serial", "none", "lo", 235 * 2 / 4, 0.581),
    trainbench("2bit both ways, colocated, serial", "2bit", "lo", 235 * 2 / 4, 0.386),
]


def predict(gradagg: str, args: List[str]) -> Dict[str, Any]:
    out = subprocess.run([gradagg, "--json", "plan", *args], capture_output=True, text=True, timeout=60)
    if out.returncode != 0:
        raise RuntimeError(f"gradagg plan {' '.join(args)}: {out.stderr.strip()}")
    return json.loads(out.stdout)["recommended"]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    build = os.environ.get("GRADAGG_BUILD", os.path.join(REPO, "build", "unit"))
    ap.add_argument("--gradagg", default=os.path.join(build, "client", "gradagg"))
    ap.add_argument("--limit", type=float, default=0.20)
    ap.add_argument("--ceiling", type=float, default=0.40)
    ap.add_argument("--min-within", type=float, default=0.75)
    ap.add_argument("--json")
    a = ap.parse_args()
    results, worst = [], 0.0
    print("| benchmark | run | figure | measured | predicted | predicted / measured | bound (model) | measured in |")
    print("|---|---|---|---:|---:|---:|---|---|")
    for row in ROWS:
        rec = predict(a.gradagg, row["args"])
        p, m = rec[row["field"]], row["measured"]
        ratio = p / m
        worst = max(worst, abs(ratio - 1))
        flag = "" if abs(ratio - 1) <= a.limit else " **over**"
        unit = "MiB" if row["field"].endswith("mib") else "ms"
        scale = 1 if unit == "MiB" else 1e3
        print(f"| {row['bench']} | {row['what']} | {row['field']} | {m * scale:.1f} {unit} | {p * scale:.1f} {unit} | "
              f"{ratio:.2f}{flag} | {rec['bound']} | {row['source']} |")
        results.append({**row, "predicted": p, "ratio": ratio, "bound": rec["bound"]})
    over = [r for r in results if abs(r["ratio"] - 1) > a.limit]
    print(f"\n{len(results)} runs; worst |predicted / measured - 1| = {100 * worst:.0f} %; "
          f"{len(over)} beyond {100 * a.limit:.0f} %")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(results, f, indent=1)
    within = 1 - len(over) / len(results)
    if worst > a.ceiling or within < a.min_within:
        print(f"modelcheck: FAIL: worst {100 * worst:.0f} % (ceiling {100 * a.ceiling:.0f} %), "
              f"{100 * within:.0f} % of the runs within {100 * a.limit:.0f} % (at least {100 * a.min_within:.0f} %)")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
