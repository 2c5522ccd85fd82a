#!/usr/bin/python3
"""The main job (scripts/run): starts a real gradagg-server, trains the digits MLP with 4 worker
processes through it with 2-bit compressed gradients, then uncompressed, over the same seeds,
prints the comparison and writes the curves. Exits 1 on any failure, or when 2bit's mean test
accuracy is more than --max-loss-pp below the uncompressed one.

  /usr/bin/python3 examples/digits_run.py [--seeds 5] [--threshold auto|T] [--build build/run]"""
from __future__ import annotations

import argparse
import sys
import time
from dataclasses import asdict
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO / "examples"), str(REPO / "client" / "python")]

from digits import env, experiment, plot, report  # noqa: E402
from digits.cluster import JobError, Workers  # noqa: E402
from digits.server import Server, ServerError  # noqa: E402
from digits.worker import Compression, Training  # noqa: E402


def threshold_arg(s: str) -> float | str:
    return s if s == "auto" else float(s)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", type=int, default=5, help="runs per codec (seeds 0..N-1; default 5)")
    ap.add_argument("--epochs", type=int, default=Training.epochs)
    ap.add_argument("--threshold", type=threshold_arg, default="auto",
                    help="2bit threshold: 'auto' (the SDK adapts it; default) or a number")
    ap.add_argument("--auto-bits", type=float, default=1.0, help="bits per element of the automatic threshold")
    ap.add_argument("--max-loss-pp", type=float, default=1.0,
                    help="fail when 2bit's mean accuracy is more than this many points below uncompressed")
    ap.add_argument("--build", type=Path, default=REPO / "build" / "run")
    ap.add_argument("--out", type=Path, help="results directory (default: the build directory)")
    args = ap.parse_args()
    out = args.out or args.build

    server_bin = env.use_build(args.build)
    env.exit_on_sigterm()
    training = Training(epochs=args.epochs)
    t = args.threshold
    two_bit = Compression("2bit " + (f"auto {args.auto_bits:.1f} bit" if t == "auto" else f"t={t:g}"), "2bit", t,
                          auto_bits=args.auto_bits)
    configs = [two_bit, Compression("none")]
    seeds = list(range(args.seeds))
    print(f"digits: sklearn's 8x8 digits, MLP 64-{'-'.join(map(str, training.hidden))}-10, "
          f"{training.world_size} workers x {training.batch // training.world_size} samples per step, "
          f"server SGD lr {training.lr} momentum {training.momentum}, {training.epochs} epochs, seeds {seeds}")
    t0 = time.monotonic()
    try:
        with Server(server_bin, out / "server") as srv:
            print(f"gradagg-server listening on {srv.address} (log {out / 'server' / 'server.log'})")
            with Workers(training.world_size) as workers:
                records = experiment.run(workers, srv.address, configs, seeds, training)
        # the server has stopped on SIGTERM and exited 0 here (ServerError otherwise)
    except (JobError, ServerError) as e:
        print(f"digits_run: {e}", file=sys.stderr)
        return 1
    experiment.summarise(records)
    records.sort(key=lambda r: r["name"] != "none")
    report.write_json(out / "digits.json", {"machine": env.machine(), "training": asdict(training),
                                             "seeds": seeds, "configs": records})
    plot.plot(records, out / "digits.png",
              f"digits, {training.world_size} workers through gradagg-server: 2bit vs uncompressed, "
              f"mean of {len(seeds)} seeds (band: min-max)")
    print()
    print(report.table(records, {two_bit.name: args.max_loss_pp}))
    print(f"\ntrained {len(configs)} x {len(seeds)} jobs in {time.monotonic() - t0:.0f} s; gradagg-server stopped "
          f"cleanly (SIGTERM, exit 0); curves in {out / 'digits.png'}")
    diff = next(r for r in records if r["name"] == two_bit.name)["summary"]["diff_pp_mean"]
    if diff < -args.max_loss_pp - 1e-6:  # accuracies are multiples of 1/360: no failure by rounding
        print(f"digits_run: {two_bit.name} is {-diff:.2f} points below uncompressed accuracy "
              f"(allowed {args.max_loss_pp:g})", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
