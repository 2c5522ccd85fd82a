"""Runs configs x seeds through one server and one worker pool, and summarises them against the
uncompressed baseline (paired by seed: same initial weights, same batch order)."""
from __future__ import annotations

import math
import statistics
from dataclasses import asdict
from typing import Any, Dict, List, Sequence

from .cluster import Workers
from .progress import Progress
from .worker import Compression, Outcome, Task, Training


def _run_record(seed: int, outs: List[Outcome]) -> Dict[str, Any]:
    """One job's figures: rank 0's curves, bytes per step averaged over the ranks."""
    o0 = outs[0]
    steps = o0.steps
    return {
        "seed": seed,
        "test_acc": o0.test_acc[-1],
        "train_loss": o0.train_loss[-1],
        "curves": {"train_loss": o0.train_loss, "test_loss": o0.test_loss, "test_acc": o0.test_acc},
        "steps": steps,
        "pushed_per_step": sum(o.bytes_pushed for o in outs) / (len(outs) * steps),
        "pulled_per_step": sum(o.bytes_pulled for o in outs) / (len(outs) * steps),
        "last_epoch_pushed_per_step": sum(o.last_epoch_pushed for o in outs) / (len(outs) * o0.last_epoch_steps),
        "seconds": max(o.seconds for o in outs),
        "thresholds": o0.thresholds,
    }


def job_name(comp: Compression, seed: int) -> str:
    return "digits-" + "".join(c if c.isalnum() or c in ".-" else "-" for c in comp.name) + f"-s{seed}"


def run(workers: Workers, server: str, configs: Sequence[Compression], seeds: Sequence[int], training: Training,
        *, label_width: int = 0) -> List[Dict[str, Any]]:
    """Trains every config with every seed (config-major) and returns one record per config:
    {"name", "compression", "runs": [per-seed records]}. Shows a progress bar per run."""
    width = label_width or max(len(c.name) for c in configs)
    bar = Progress(training.epochs)
    records = []
    for comp in configs:
        runs = []
        for i, seed in enumerate(seeds):
            bar.start(f"{comp.name:<{width}} seed {i + 1}/{len(seeds)}")
            outs = workers.run(Task(job_name(comp, seed), server, seed, comp, training), on_epoch=bar.epoch)
            rec = _run_record(seed, outs)
            bar.final(rec["train_loss"], rec["test_acc"], f"  {rec['seconds']:.1f} s")
            runs.append(rec)
        records.append({"name": comp.name, "compression": asdict(comp), "runs": runs})
    return records


def _sd(xs: Sequence[float]) -> float:
    return statistics.stdev(xs) if len(xs) > 1 else math.nan


def summarise(records: List[Dict[str, Any]], baseline: str = "none") -> None:
    """Adds "summary" to every record: accuracy mean/sd/min/max (percent), the paired difference
    to `baseline` in percentage points (mean, sd, standard error), bytes per step, ratio."""
    base = next(r for r in records if r["name"] == baseline)
    base_acc = {run["seed"]: run["test_acc"] for run in base["runs"]}
    base_pushed = statistics.mean(run["pushed_per_step"] for run in base["runs"])
    for r in records:
        accs = [100 * run["test_acc"] for run in r["runs"]]
        diffs = [100 * (run["test_acc"] - base_acc[run["seed"]]) for run in r["runs"] if run["seed"] in base_acc]
        pushed = statistics.mean(run["pushed_per_step"] for run in r["runs"])
        r["summary"] = {
            "seeds": len(accs),
            "acc_mean": statistics.mean(accs), "acc_sd": _sd(accs), "acc_min": min(accs), "acc_max": max(accs),
            "diff_pp_mean": statistics.mean(diffs) if diffs else math.nan,
            "diff_pp_sd": _sd(diffs),
            "diff_pp_se": _sd(diffs) / math.sqrt(len(diffs)) if len(diffs) > 1 else math.nan,
            "diff_pp_min": min(diffs) if diffs else math.nan,
            "train_loss_mean": statistics.mean(run["train_loss"] for run in r["runs"]),
            "pushed_per_step": pushed,
            "pulled_per_step": statistics.mean(run["pulled_per_step"] for run in r["runs"]),
            "last_epoch_pushed_per_step": statistics.mean(run["last_epoch_pushed_per_step"] for run in r["runs"]),
            "push_ratio": base_pushed / pushed if pushed else math.inf,
            "seconds_mean": statistics.mean(run["seconds"] for run in r["runs"]),
        }
