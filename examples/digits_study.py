#!/usr/bin/python3
"""Convergence study: the digits MLP trained by 4 workers through a real gradagg-server with
every codec, several seeds each, against the uncompressed run (docs/convergence.md).

  /usr/bin/python3 examples/digits_study.py            # full: every config, 10 seeds
  /usr/bin/python3 examples/digits_study.py --quick    # 4 configs, 2 seeds

Writes build/results/convergence.{json,md,png} (--out). Needs build/run (--build) with
gradagg-server and libgradagg.so (scripts/run builds both)."""
from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import asdict
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO / "examples"), str(REPO / "client" / "python")]

from digits import env, experiment, plot, report  # noqa: E402
from digits.cluster import Workers  # noqa: E402
from digits.server import Server  # noqa: E402
from digits.worker import Compression as C, Training  # noqa: E402

TOPK = 0.001  # 0.1%: DGC's keep ratio
CONFIGS = [
    C("none"),
    C("fp16", "fp16"),
    C("2bit t=0.0005", "2bit", 0.0005),
    C("2bit t=0.001", "2bit", 0.001),
    C("2bit t=0.005", "2bit", 0.005),
    C("2bit t=0.01", "2bit", 0.01),
    C("2bit t=0.05", "2bit", 0.05),
    C("2bit auto 1.0 bit", "2bit", "auto", auto_bits=1.0),
    C("2bit auto 0.5 bit", "2bit", "auto", auto_bits=0.5),
    C("1bit", "1bit", 0.0),
    C("1bit_scaled", "1bit_scaled"),
    C("topk 0.1% + DGC", "topk", ratio=TOPK, dgc=True),
    C("topk 0.1% + DGC, dense biases", "topk", ratio=TOPK, dgc=True, dense_1d=True),
    C("topk 0.1% + DGC, no warm-up", "topk", ratio=TOPK, dgc=True, warmup_epochs=0),
    C("topk 0.1%", "topk", ratio=TOPK),
]
QUICK = ["none", "2bit t=0.01", "2bit auto 1.0 bit", "topk 0.1% + DGC"]
TARGETS = {"topk 0.1% + DGC": 0.5, "topk 0.1% + DGC, dense biases": 0.5, "topk 0.1% + DGC, no warm-up": 0.5}  # pp below uncompressed; every other codec 1.0
PLOT_GROUPS = [
    ["none", "fp16"] + [c.name for c in CONFIGS if c.name.startswith("2bit t=")],
    ["none"] + [c.name for c in CONFIGS if c.name.startswith(("2bit auto", "1bit", "topk"))],
]


def write_outputs(out: Path, doc: dict) -> str:
    """convergence.md (the table, returned) and convergence.png from a study's JSON document."""
    records, tr = doc["configs"], doc["training"]
    table = report.table(records, doc["targets_pp"])
    (out / "convergence.md").write_text(table + "\n")
    plot.plot(records, out / "convergence.png",
              f"digits MLP 64-{'-'.join(map(str, tr['hidden']))}-10, {tr['world_size']} workers through "
              f"gradagg-server, SGD lr {tr['lr']} momentum {tr['momentum']}, global batch {tr['batch']}; "
              f"mean of {len(doc['seeds'])} seeds (band: min-max)", PLOT_GROUPS)
    return table


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help=f"only {', '.join(QUICK)}, 2 seeds")
    ap.add_argument("--seeds", type=int, help="seeds 0..N-1 (default 10, --quick 2)")
    ap.add_argument("--epochs", type=int, default=Training.epochs)
    ap.add_argument("--only", action="append", help="run this config (repeatable; 'none' is always run)")
    ap.add_argument("--build", type=Path, default=REPO / "build" / "run")
    ap.add_argument("--out", type=Path, default=REPO / "build" / "results")
    ap.add_argument("--replot", action="store_true", help="only redo the table and plot from --out's JSON")
    args = ap.parse_args()
    if args.replot:
        doc = json.loads((args.out / "convergence.json").read_text())
        print(write_outputs(args.out, doc))
        return 0

    server_bin = env.use_build(args.build)
    env.exit_on_sigterm()
    names = set(QUICK if args.quick else args.only or [c.name for c in CONFIGS]) | {"none"}
    configs = [c for c in CONFIGS if c.name in names]
    unknown = names - {c.name for c in configs}
    if unknown:
        ap.error(f"unknown config {', '.join(sorted(unknown))}; known: {', '.join(c.name for c in CONFIGS)}")
    seeds = list(range(args.seeds or (2 if args.quick else 10)))
    training = Training(epochs=args.epochs)

    t0 = time.monotonic()
    jobs = len(configs) * len(seeds)
    with Server(server_bin, args.out / "server", max_jobs=jobs) as srv, Workers(training.world_size) as workers:
        records = experiment.run(workers, srv.address, configs, seeds, training)
    experiment.summarise(records)
    elapsed = time.monotonic() - t0

    doc = {"machine": env.machine(), "training": asdict(training), "seeds": seeds, "targets_pp": TARGETS,
           "seconds": elapsed, "configs": records}
    report.write_json(args.out / "convergence.json", doc)
    print()
    print(write_outputs(args.out, doc))
    print(f"\n{len(configs)} configs x {len(seeds)} seeds in {elapsed:.0f} s; "
          f"results in {args.out}/convergence.{{json,md,png}}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
