#!/usr/bin/python3
"""Node relays and accuracy: the digits MLP trained by W = 8 worker processes, for each codec
flat (every worker joins the server and pushes with the codec) against 2 node relays x 4
workers (the workers push fp32 to their relay, which pushes the node's sum with the codec;
docs/relay.md), the same batches and seeds (docs/benchmarks.md, "Node relays").

  /usr/bin/python3 examples/relay_study.py [--epochs 10] [--seeds 3] [--codecs none,fp16,2bit:auto,topk:0.01]

Per codec, seed and layout: the final test accuracy after --epochs epochs, and the relays'
difference to flat (target: within 1 point). Writes <out>/relay_study.json (--out, default build/results).
Needs --build (default build/unit) with gradagg-server and libgradagg.so."""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any, Dict, List

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO / "examples"), str(REPO / "client" / "python")]

from digits import env  # noqa: E402
from digits.membership import Mode, Spec  # noqa: E402
from digits.server import Server  # noqa: E402
from straggler_study import run_workers  # noqa: E402

NODES, K = 2, 4
W = NODES * K


def accuracy(addrs: List[str], job: str, seed: int, total: int, codec: str = "none") -> float:
    reports = run_workers([Spec(addrs[r // K], job, r, W, Mode("sync"), seed=seed, until_version=total, codec=codec)
                           for r in range(W)])
    accs = {round(r.test_acc, 6) for r in reports}
    if len(accs) != 1:
        raise RuntimeError(f"{job}: the workers disagree on the model: {sorted(accs)}")
    return accs.pop()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--epochs", type=int, default=10)
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--codecs", default="none,fp16,2bit:auto,topk:0.01")
    ap.add_argument("--build", type=Path, default=REPO / "build" / "unit")
    ap.add_argument("--out", type=Path, default=REPO / "build" / "results")
    a = ap.parse_args()
    env.use_build(a.build)
    import torch  # noqa: F401 - the digits data's loader wants it importable in this process too
    from digits import data
    per_epoch = len(data.epoch_batches(len(data.load().y_train), 64, 0, 0))
    total = per_epoch * a.epochs
    binary = a.build / "service" / "gradagg-server"
    rows: List[Dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="relay-study-") as tmp, Server(binary, Path(tmp) / "up") as up:
        for codec in [c for c in a.codecs.split(",") if c]:
            flat = {s: accuracy([up.address] * NODES, f"flat-{codec}-{s}", s, total, codec) for s in range(a.seeds)}
            relays = [Server(binary, Path(tmp) / f"relay-{codec}-{n}", extra=[
                "--relay-to", up.address, "--relay-node", str(n), "--relay-nodes", str(NODES),
                "--relay-workers", str(K), "--relay-codec", codec]) for n in range(NODES)]
            for r in relays:
                r.start()
            try:
                acc = {s: accuracy([r.address for r in relays], f"relay-{codec}-{s}", s, total) for s in range(a.seeds)}
            finally:
                for r in relays:
                    r.stop()
            diff = [100 * (acc[s] - flat[s]) for s in acc]
            rows.append({"codec": codec, "flat": flat, "relays": acc, "diff_points": diff,
                         "within_1_point": all(abs(d) <= 1.0 for d in diff)})
            print(f"{codec:>12}: flat (8 workers push {codec}) {' '.join(f'{v:.4f}' for v in flat.values())}; "
                  f"2 relays x 4 (workers push fp32, relays {codec}) {' '.join(f'{v:.4f}' for v in acc.values())}; "
                  f"difference {' '.join(f'{d:+.2f}' for d in diff)} points (mean {statistics.mean(diff):+.2f}; "
                  f"target within 1: {'met' if rows[-1]['within_1_point'] else 'MISSED'})", flush=True)
    a.out.mkdir(parents=True, exist_ok=True)
    (a.out / "relay_study.json").write_text(json.dumps({"epochs": a.epochs, "rows": rows}, indent=1))
    return 0 if all(r.get("within_1_point", True) for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
