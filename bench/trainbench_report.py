"""Figures of bench/trainbench.py: iteration medians, floors, losses and times to the target loss
from the ranks' reports; the tables (markdown), JSON and the PNG (loss against wall time)."""
import json
import math
import os
import statistics
from typing import Any, Dict, List, Optional

WARMUP = 2  # iterations left out of the median (first allocations, connections, DDP's bucket rebuild)


def median(xs: List[float]) -> float:
    return statistics.median(xs) if xs else float("nan")


def system_row(reports: List[Dict[str, Any]], iters: int, link0: Optional[Dict[str, List[int]]],
               link1: Optional[Dict[str, List[int]]], shard_cpu_s: float = 0.0) -> Dict[str, Any]:
    """Rank 0's iteration times and losses (every rank evaluates at the same iterations, outside
    the timed part, so rank 0's clock is the job's); the bytes each node's link carried; the CPU
    time per iteration of the ranks (their timed parts, every thread) and of the shards (from
    the first iteration to the last report, divided by the iterations)."""
    r0 = reports[0]
    elapsed, t = [0.0], 0.0
    for s in r0["iter_s"]:
        t += s
        elapsed.append(t)
    curve = [[it, elapsed[it], loss] for it, loss in r0["evals"]]  # iteration, training seconds, loss
    fwdbwd = r0["fwdbwd_s"][WARMUP:]
    step = [i - f for i, f in zip(r0["iter_s"][WARMUP:], fwdbwd)]
    row: Dict[str, Any] = {"median_s": median(r0["iter_s"][WARMUP:]), "iter_s": r0["iter_s"], "curve": curve,
                           "median_fwdbwd_s": median(fwdbwd), "median_step_s": median(step),
                           "final_loss": curve[-1][2], "train_s": elapsed[-1],
                           "bytes_pushed_per_rank_iter": statistics.mean(r["bytes_pushed"] for r in reports) / iters,
                           "bytes_pulled_per_rank_iter": statistics.mean(r["bytes_pulled"] for r in reports) / iters,
                           "rank_medians_s": [median(r["iter_s"][WARMUP:]) for r in reports],
                           "mean_s": statistics.mean(r0["iter_s"][WARMUP:]),
                           "ranks_cpu_s": sum(statistics.mean(r["cpu_s"][WARMUP:]) for r in reports),
                           "shards_cpu_s": shard_cpu_s / iters,
                           "cpus": os.cpu_count(),
                           # gradagg: rank 0's encode, push, wait + pull and decode (its bucket
                           # clients' sums, medians; they overlap one another with buckets)
                           "median_phases_s": [median([p[j] for p in r0["phases_s"][WARMUP:]]) for j in range(4)]}
    if link0 is not None and link1 is not None:
        per = {n: [(b1 - b0) / iters for b0, b1 in zip(link0[n], link1[n])] for n in link0}
        row["link_bytes_per_iter"] = per  # node -> [received, sent]
        row["busiest_link_bytes_per_iter"] = max(max(v) for v in per.values())
    return row


def reach(curve: List[List[float]], target: float) -> Optional[List[float]]:
    """The first evaluation [iteration, training seconds, loss] at or below target; None if never."""
    for point in curve:
        if point[2] <= target:
            return point
    return None


def loss_at(curve: List[List[float]], iteration: int) -> Optional[float]:
    """The evaluated loss after `iteration` iterations; None when it was not evaluated then."""
    return next((loss for it, _secs, loss in curve if it == iteration), None)


def ratio(x: Optional[float], y: Optional[float]) -> Optional[float]:
    return x / y if x is not None and y and not math.isnan(x) and not math.isnan(y) else None


def finish_rows(rows: List[Dict[str, Any]], link: str, regime: str, bits: Optional[float],
                target_iter: Optional[int] = None) -> None:
    """Fills in every row of (link, regime) what needs the others: the floor, the ratios to DDP
    fp32 and to the best DDP hook, the target loss (DDP fp32's after target_iter iterations, or
    at its end) and the iterations and time to it."""
    mine = [r for r in rows if r["link"] == link and r["regime"] == regime and r["status"] == "ok"]
    by = {r["system"]: r for r in mine}
    compute = by.get("floor", {}).get("median_s")
    ddp = by.get("ddp-fp32")
    hooks = [r for r in mine if r["ddp_hook"]]
    best_hook = min(hooks, key=lambda r: r["median_s"]) if hooks else None
    target = (loss_at(ddp["curve"], target_iter) if target_iter else None) or ddp["final_loss"] if ddp else None
    for r in mine:
        wire = r.get("busiest_link_bytes_per_iter", 0.0) * 8 / bits if bits else 0.0
        r["floor_s"] = max(compute, wire) if compute is not None else None
        r["wire_s"] = wire
        r["x_floor"] = ratio(r["median_s"], r["floor_s"])
        r["x_ddp"] = ratio(r["median_s"], ddp["median_s"] if ddp else None)
        r["best_hook"] = best_hook["system"] if best_hook else None
        r["x_hook"] = ratio(r["median_s"], best_hook["median_s"] if best_hook else None)
        if r["kind"] == "floor" or target is None:
            continue
        r["target_loss"] = target
        hit = reach(r["curve"], target)
        r["iters_to_target"] = int(hit[0]) if hit else None
        r["time_to_target_s"] = hit[1] if hit else None
    ttt_ddp = ddp.get("time_to_target_s") if ddp else None
    reached = [r["time_to_target_s"] for r in hooks if r.get("time_to_target_s") is not None]
    ttt_hook = min(reached) if reached else None
    for r in mine:
        if "time_to_target_s" in r:
            r["ttt_x_ddp"] = ratio(r["time_to_target_s"], ttt_ddp)
            r["ttt_x_hook"] = ratio(r["time_to_target_s"], ttt_hook)
    if ddp and compute:
        ddp["comm_bound"] = ddp["median_s"] >= 2 * compute  # the "comm" regime promises this


HEADER = ("| system | iteration ms | × DDP fp32 | × best hook | × floor | floor ms | busiest link MB/iter | "
          "loss at N | iterations to target | time to target s | × DDP fp32 | × best hook |\n"
          "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")


def _f(v: Optional[float], fmt: str, none: str = "–") -> str:
    return none if v is None or (isinstance(v, float) and math.isnan(v)) else format(v, fmt)


def row_line(r: Dict[str, Any]) -> str:
    if r["status"] != "ok":
        error = " ".join(r.get("error", "").split())  # one table cell: no line breaks
        return f"| {r['system']} | {r['status']}: {error[:300]} |"
    reached = r.get("time_to_target_s")
    ttt = _f(reached, ".1f") if "time_to_target_s" in r else "–"
    if "time_to_target_s" in r and reached is None:
        ttt = f"not reached (> {r['train_s']:.1f})"
    return (f"| {r['system']} | {r['median_s'] * 1e3:.0f} | {_f(r.get('x_ddp'), '.2f')} | "
            f"{_f(r.get('x_hook'), '.2f')} | {_f(r.get('x_floor'), '.2f')} | "
            f"{_f(r['floor_s'] * 1e3 if r.get('floor_s') else None, '.0f')} | "
            f"{_f(r['busiest_link_bytes_per_iter'] / 1e6 if 'busiest_link_bytes_per_iter' in r else None, '.1f')} | "
            f"{'–' if r['kind'] == 'floor' else format(r['final_loss'], '.3f')} | "
            f"{_f(r.get('iters_to_target'), 'd')} | {ttt} | "
            f"{_f(r.get('ttt_x_ddp'), '.2f')} | {_f(r.get('ttt_x_hook'), '.2f')} |")


CPU_HEADER = ("| system | iteration ms | ranks' CPU ms | shards' CPU ms | CPU ÷ cores ms | ÷ iteration |\n"
              "|---|---:|---:|---:|---:|---:|")


def cpu_line(r: Dict[str, Any]) -> str:
    total = r["ranks_cpu_s"] + r["shards_cpu_s"]
    per_core = total / r["cpus"]
    return (f"| {r['system']} | {r['mean_s'] * 1e3:.0f} | {r['ranks_cpu_s'] * 1e3:.0f} | "
            f"{r['shards_cpu_s'] * 1e3:.0f} | {per_core * 1e3:.0f} | {per_core / r['mean_s']:.2f} |")


def tables(info: Dict[str, Any]) -> str:
    out = []
    a = info["args"]
    seen = []
    for r in info["rows"]:
        key = (r["link"], r["regime"])
        if key not in seen:
            seen.append(key)
    for link, regime in seen:
        rows = [r for r in info["rows"] if r["link"] == link and r["regime"] == regime]
        ddp = next((r for r in rows if r["system"] == "ddp-fp32" and r["status"] == "ok"), None)
        note = ""
        if ddp and "target_loss" in ddp:
            note = f"; target loss {ddp['target_loss']:.3f} (DDP fp32 at {a.get('target_iter') or a['iters']})"
        if ddp and "comm_bound" in ddp:
            note += f"; DDP fp32 {'is' if ddp['comm_bound'] else 'is NOT'} ≥ 2× the floor"
        out.append(f"\n**{link}, {regime} regime** (batch {rows[0]['batch']} per rank, W = {a['world']}, "
                   f"{a['model']}{note})\n\n{HEADER}")
        out += [row_line(r) for r in rows]
        out.append(f"\nWhere rank 0's iteration goes ({link}, {regime}; medians): DDP and the overlapped gradagg "
                   "systems communicate during backward, the others in step()\n\n"
                   "| system | zero_grad + forward + backward ms | step() ms | gradagg encode / push / wait + pull / "
                   "decode ms (the buckets' sums) |\n|---|---:|---:|---|")
        out += [f"| {r['system']} | {r['median_fwdbwd_s'] * 1e3:.0f} | {r['median_step_s'] * 1e3:.0f} | "
                f"{' / '.join(f'{v * 1e3:.0f}' for v in r['median_phases_s']) if r['kind'] == 'gradagg' else '–'} |"
                for r in rows if r["status"] == "ok"]
        out.append(f"\nCPU per iteration ({link}, {regime}; means): every rank's timed part and every shard, "
                   "against the iteration; CPU ÷ cores is the iteration these processes would take if only "
                   "the cores bound them\n\n" + CPU_HEADER)
        out += [cpu_line(r) for r in rows if r["status"] == "ok" and "ranks_cpu_s" in r]
    return "\n".join(out)


def plot(info: Dict[str, Any], path: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    keys: List[Any] = []
    for r in info["rows"]:
        if (r["link"], r["regime"]) not in keys:
            keys.append((r["link"], r["regime"]))
    fig, axes = plt.subplots(1, len(keys), figsize=(6 * len(keys), 4.5), squeeze=False)
    for ax, (link, regime) in zip(axes[0], keys):
        for r in info["rows"]:
            if (r["link"], r["regime"]) != (link, regime) or r["status"] != "ok" or r["kind"] == "floor":
                continue
            ax.plot([c[1] for c in r["curve"]], [c[2] for c in r["curve"]], label=r["system"],
                    linestyle="-" if r["kind"] == "gradagg" else "--")
            if "target_loss" in r and r["system"] == "ddp-fp32":
                ax.axhline(r["target_loss"], color="grey", linewidth=0.6)
        ax.set_title(f"{link}, {regime} regime")
        ax.set_xlabel("training wall time, s (rank 0)")
        ax.set_ylabel("held-out loss")
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def summarise(info: Dict[str, Any], a: Any) -> None:
    text = tables(info)
    print("\n" + text)
    for path in (a.json, a.plot):
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(a.json, "w") as f:
        json.dump(info, f, indent=1)
    if any(r["status"] == "ok" for r in info["rows"]):
        plot(info, a.plot)
    print(f"\ntrainbench: {a.json}, {a.plot}")
