#!/usr/bin/python3
"""Stragglers and membership: the digits MLP trained by W = 4 worker processes through a real
gradagg-server (docs/benchmarks.md, "Stragglers, bounded staleness and elastic membership").

  /usr/bin/python3 examples/straggler_study.py            # both parts
  /usr/bin/python3 examples/straggler_study.py --part straggler --seconds 20
  /usr/bin/python3 examples/straggler_study.py --part elastic --seeds 3

straggler: every worker sleeps --sleep seconds a step (its computation), rank 3 twice that (a
  worker 2x slower); each of sync, a straggler quorum (3 of 4 at a deadline), bounded staleness
  s = 1, 2, 4, and async trains for --seconds; rank 0 evaluates the training loss every 0.5 s.
  Printed: versions per second, worker steps per second (all ranks), the loss reached, the
  test accuracy; plotted: loss against wall time. Then the same with transient stragglers:
  every rank's sleep uniform in [0, 2 x --sleep] each step.
elastic: a fixed job of 4 ranks against an elastic one (min 1, max 4) whose workers join and
  leave at set versions (one leaves, two join late, one takes a freed rank), both for --epochs
  over the same batches, --seeds seeds each: final test accuracy.

Writes <out>/straggler.{json,md,png} (--out, default build/results). Needs --build (default
build/unit) with gradagg-server, libgradagg.so and the gradagg tool."""
from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import statistics
import subprocess
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any, Dict, List, Sequence

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO / "examples"), str(REPO / "client" / "python")]

from digits import env  # noqa: E402
from digits.membership import Mode, Report, Spec, run  # noqa: E402
from digits.server import Server  # noqa: E402

W = 4
SLOW = W - 1  # the straggler's rank
MODES = [
    Mode("sync"),
    Mode("quorum 3/4, deadline 5 ms", deadline_ms=5, quorum=3),
    Mode("SSP s=1", staleness=1),
    Mode("SSP s=2", staleness=2),
    Mode("SSP s=4", staleness=4),
    Mode("async (lr / 4)", mode="async", lr_scale=1.0 / W),
]


def run_workers(specs: Sequence[Spec], timeout: float = 600) -> List[Report]:
    ctx = mp.get_context("spawn")
    results = ctx.Queue()
    procs = [ctx.Process(target=run, args=(s, results), daemon=True) for s in specs]
    for p in procs:
        p.start()
    out = []
    for _ in procs:
        r = results.get(timeout=timeout)
        if r.error:
            raise RuntimeError(r.error)
        out.append(r)
    for p in procs:
        p.join(timeout=30)
    return sorted(out, key=lambda r: r.rank)


def straggler(server: str, seconds: float, sleep: float, jitter: bool) -> List[Dict[str, Any]]:
    """jitter False: rank SLOW sleeps 2 x sleep a step, the others sleep; True: every rank's
    sleep is uniform in [0, 2 x sleep] each step (transient stragglers, the same mean)."""
    rows = []
    for m in MODES:
        job = f"{'jitter' if jitter else 'straggler'}-{m.name}"
        job = job.replace(" ", "_").replace("/", "of").replace(",", "").replace("=", "")
        specs = [Spec(server, job, r, W, m, step_sleep=sleep * (2 if r == SLOW and not jitter else 1), jitter=jitter,
                      seconds=seconds, eval_every_s=0.5 if r == 0 else 0.0) for r in range(W)]
        reports = run_workers(specs)
        r0 = reports[0]
        row = dict(name=m.name, mode=asdict(m), seconds=r0.seconds, versions=r0.version,
                   versions_per_s=r0.version / r0.seconds,
                   worker_steps_per_s=sum(r.steps for r in reports) / r0.seconds,
                   steps=[r.steps for r in reports], loss=r0.curve[-1][2], test_acc=r0.test_acc, curve=r0.curve)
        print(f"{m.name:28s} versions/s {row['versions_per_s']:6.1f}  worker steps/s {row['worker_steps_per_s']:6.1f}"
              f"  steps by rank {row['steps']}  loss {row['loss']:.4f}  test acc {row['test_acc']:.4f}", flush=True)
        rows.append(row)
    return rows


def version_of(gradagg_tool: Path, server: str, job: str) -> int:
    r = subprocess.run([str(gradagg_tool), "--json", "--server", server, "status", job], capture_output=True,
                       text=True, timeout=30)
    if r.returncode != 0:
        return -1
    return json.loads(r.stdout)["shards"][0]["version"]


def elastic(server: str, gradagg_tool: Path, seeds: Sequence[int], epochs: int,
            step_sleep: float) -> List[Dict[str, Any]]:
    """Fixed: ranks 0-3 for every step. Elastic: (join, leave) versions per worker over a run of
    `total` versions: two workers throughout, one leaves at 55%, one joins at 20% and leaves at
    75%, one joins at 40%, one joins at 80% (taking a freed rank)."""
    import torch  # noqa: F401 - the digits data's loader wants it importable in this process too
    from digits import data
    per_epoch = len(data.epoch_batches(len(data.load().y_train), 64, 0, 0))
    total = per_epoch * epochs
    plan = [(0.0, 1.0), (0.0, 0.55), (0.2, 0.75), (0.4, 1.0), (0.8, 1.0)]
    rows = []
    for seed in seeds:
        fixed = run_workers([Spec(server, f"fixed-{seed}", r, W, Mode("sync"), seed=seed, until_version=total,
                                  step_sleep=step_sleep) for r in range(W)])
        job = f"elastic-{seed}"
        ctx = mp.get_context("spawn")
        results = ctx.Queue()
        gos = [ctx.Event() for _ in plan]
        procs = [ctx.Process(target=run, daemon=True, args=(
            Spec(server, job, "any", W, Mode("sync"), seed=seed, min_world=1, until_version=int(leave * total),
                 step_sleep=step_sleep, tag=f"w{i}"), results, gos[i])) for i, (_, leave) in enumerate(plan)]
        for p in procs:
            p.start()
        time.sleep(10)  # every worker imported torch and gradagg and waits for its go
        t_end = time.monotonic() + 600
        for i, (join, _) in enumerate(plan):
            while i and version_of(gradagg_tool, server, job) < int(join * total):
                if time.monotonic() > t_end:
                    raise RuntimeError("elastic run: timed out")
                time.sleep(0.005)
            gos[i].set()
            while i == 0 and version_of(gradagg_tool, server, job) < 0:  # the first Join creates the job
                time.sleep(0.005)
        reports = []
        for _ in procs:
            r = results.get(timeout=600)
            if r.error:
                raise RuntimeError(r.error)
            reports.append(r)
        for p in procs:
            p.join(timeout=30)
        last = max(reports, key=lambda r: (r.version, -r.rank))
        row = dict(seed=seed, total=total, fixed_acc=fixed[0].test_acc, elastic_acc=last.test_acc,
                   elastic_ranks=sorted((r.tag, r.rank, r.first_version, r.version) for r in reports))
        print(f"seed {seed}: fixed {row['fixed_acc']:.4f}  elastic {row['elastic_acc']:.4f}  "
              f"workers (name, rank, from, to) {row['elastic_ranks']}", flush=True)
        rows.append(row)
    return rows


def plot(parts: List[Any], path: Path, title: str) -> None:
    """One row per (label, rows): training loss, and the job's version, against wall time."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(len(parts), 2, figsize=(13, 4.2 * len(parts)), squeeze=False)
    for (label, rows), ax in zip(parts, axes):
        for row in rows:
            t = [c[0] for c in row["curve"]]
            ax[0].plot(t, [c[2] for c in row["curve"]], label=row["name"], lw=1.4)
            ax[1].plot(t, [c[1] for c in row["curve"]], label=row["name"], lw=1.4)
        ax[0].set_yscale("log")
        ax[1].set_yscale("symlog", linthresh=100)
        ax[0].set_ylabel("training loss (full training set)")
        ax[1].set_ylabel("job version (steps applied)")
        for a in ax:
            a.set_xlabel("wall time, s")
            a.grid(alpha=0.3)
            a.set_title(label, fontsize=9)
        ax[0].legend(fontsize=8)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)


def markdown(result: Dict[str, Any]) -> str:
    lines = []
    for part, what in (("straggler", f"rank {SLOW} 2x slower"), ("jitter", "random work per step")):
        if not result.get(part):
            continue
        lines += ["", f"{what}:", "",
                  "| mode | versions/s | worker steps/s (all ranks) | steps by rank | training loss | test acc |",
                  "|---|---:|---:|---|---:|---:|"]
        for r in result[part]:
            lines.append(f"| {r['name']} | {r['versions_per_s']:.1f} | {r['worker_steps_per_s']:.1f} | "
                         f"{', '.join(map(str, r['steps']))} | {r['loss']:.4f} | {100 * r['test_acc']:.2f} % |")
    if result.get("elastic"):
        lines += ["", "| seed | fixed membership | elastic | difference (points) |", "|---:|---:|---:|---:|"]
        for r in result["elastic"]:
            lines.append(f"| {r['seed']} | {100 * r['fixed_acc']:.2f} % | {100 * r['elastic_acc']:.2f} % | "
                         f"{100 * (r['elastic_acc'] - r['fixed_acc']):+.2f} |")
        f = statistics.mean(r["fixed_acc"] for r in result["elastic"])
        e = statistics.mean(r["elastic_acc"] for r in result["elastic"])
        lines.append(f"| mean | {100 * f:.2f} % | {100 * e:.2f} % | {100 * (e - f):+.2f} |")
    return "\n".join(lines) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--part", choices=["straggler", "elastic", "both"], default="both")
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--sleep", type=float, default=0.02, help="a worker's simulated work per step, s")
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--epochs", type=int, default=10)
    ap.add_argument("--build", type=Path, default=REPO / "build" / "unit")
    ap.add_argument("--out", type=Path, default=REPO / "build" / "results")
    args = ap.parse_args()
    binary = env.use_build(args.build)
    env.exit_on_sigterm()
    result: Dict[str, Any] = dict(machine=env.machine(), args={k: str(v) for k, v in vars(args).items()})
    with Server(binary, args.out / "straggler-server") as srv:
        if args.part in ("straggler", "both"):
            result["straggler"] = straggler(srv.address, args.seconds, args.sleep, False)
            result["jitter"] = straggler(srv.address, args.seconds, args.sleep, True)
        if args.part in ("elastic", "both"):
            result["elastic"] = elastic(srv.address, args.build / "client" / "gradagg", range(args.seeds), args.epochs,
                                        args.sleep)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "straggler.json").write_text(json.dumps(result, indent=1))
    (args.out / "straggler.md").write_text(markdown(result))
    if result.get("straggler"):
        plot([(f"rank {SLOW} sleeps {2 * args.sleep:g} s a step, the others {args.sleep:g} s", result["straggler"]),
              (f"every rank sleeps uniform [0, {2 * args.sleep:g}] s a step", result["jitter"])],
             args.out / "straggler.png",
             f"digits MLP through gradagg, W = {W}; {result['machine']['date']}, {result['machine']['cpus']} CPUs")
    print(markdown(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
