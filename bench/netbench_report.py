"""Figures of bench/netbench.py: step medians from the workers' reports, the wire bound of each
system on its busiest link, the shards' memory bound, tables (markdown), JSON and the PNG."""
import json
import math
import os
import statistics
from typing import Any, Dict, List, Optional

import netbench_net as nn

MIB = 1 << 20
MEM_SLACK = 64 * MIB  # the memory bound's allowance for the server's own code, threads and gRPC


def median(xs: List[float]) -> float:
    return statistics.median(xs) if xs else float("nan")


def gradagg_row(reports: List[Dict[str, Any]], steps: int) -> Dict[str, Any]:
    """A step takes as long as its slowest rank (sync mode: every rank waits for the others'
    pushes); the profile columns are that rank's client stats for that step."""
    per_step, slowest = [], []
    for i in range(steps):
        recs = [r["steps"][i] for r in reports]
        worst = max(recs, key=lambda s: s["wall_s"])
        per_step.append(worst["wall_s"])
        slowest.append(worst)
    out = {"median_s": median(per_step), "steps_s": per_step,
           "workers_cpu_s_per_step": sum(median([s["cpu_s"] for s in r["steps"]]) for r in reports),
           "bytes_pushed": statistics.mean(median([s["bytes_pushed"] for s in r["steps"]]) for r in reports),
           "bytes_pulled": statistics.mean(median([s["bytes_pulled"] for s in r["steps"]]) for r in reports),
           "retries": sum(s["retries"] for r in reports for s in r["steps"][-1:]),
           "late_pushes": sum(s["late"] for r in reports for s in r["steps"][-1:]),
           "ranks": reports}
    for k in ("encode_s", "push_s", "pull_s", "decode_s"):
        out[k] = median([s[k] for s in slowest])
    return out


def gloo_row(reports: List[Dict[str, Any]]) -> Dict[str, Any]:
    steps = len(reports[0]["steps"])
    per_step = [max(r["steps"][i]["wall_s"] for r in reports) for i in range(steps)]
    return {"median_s": median(per_step), "steps_s": per_step,
            "workers_cpu_s_per_step": sum(median([s["cpu_s"] for s in r["steps"]]) for r in reports),
            "ranks": reports}


def thread_split(before: Dict[str, float], after: Dict[str, float], steps: int) -> Dict[str, float]:
    """CPU seconds per step of each of a shard's threads, the busiest first: whether one thread
    (a serial bottleneck) or several did the work."""
    by = {k: (t - before.get(k, 0.0)) / steps for k, t in after.items()}
    return dict(sorted(((k, round(v, 4)) for k, v in by.items() if v > 0), key=lambda kv: -kv[1]))


def memory_check(warm: Dict[str, Any], end: Dict[str, Any], elements: int, shards: int, world: int,
                 bytes_pushed: float, momentum: bool) -> Dict[str, Any]:
    """A shard's bound: params + optimizer state + published copy (fp32, its share of the
    elements) + W x its share of one worker's push payload + 64 MiB, against its peak RSS over
    the whole run (warm: VmHWM of start-up, init and warm-up, then reset; end: the peak of the
    measured steps)."""
    n = math.ceil(elements / shards)
    parts = {"params": 4 * n, "optimizer_state": 4 * n if momentum else 0, "published": 4 * n,
             "pushes": int(world * bytes_pushed / shards), "slack": MEM_SLACK}
    bound = sum(parts.values())
    hwm = max(warm["vm_hwm"], end["vm_hwm"])
    return {"vm_hwm": hwm, "vm_hwm_init": warm["vm_hwm"], "vm_hwm_steps": end["vm_hwm"], "vm_rss_end": end["vm_rss"],
            "accounted_end": end["accounted"], "accounted_peak": end["accounted_peak"], "held_warm": warm["held"],
            "bound": bound, "margin": bound - hwm, "ok": hwm <= bound, "parts": parts}


def link_delta(before: Optional[Dict[str, List[int]]], after: Optional[Dict[str, List[int]]], steps: int
               ) -> Optional[Dict[str, List[float]]]:
    """Bytes per measured step each node received and sent, [in, out] (None on lo)."""
    if before is None or after is None:
        return None
    return {n: [(after[n][0] - before[n][0]) / steps, (after[n][1] - before[n][1]) / steps] for n in after}


def measured_busiest(row: Dict[str, Any], bits: Optional[float]) -> None:
    """The node whose link carried the most bytes one way per step (the veth byte counters), and
    that way's time at the rate: checks which link is busiest and that the split is even."""
    lb = row.get("link_bytes_per_step")
    if not lb:
        return
    node, (rx, tx) = max(lb.items(), key=lambda kv: max(kv[1]))
    row["measured_busiest"] = {"node": node, "in": rx, "out": tx}
    row["measured_wire_s"] = max(rx, tx) * 8 / bits if bits else None


def wire_bound(row: Dict[str, Any], bits: Optional[float], world: int) -> None:
    """Payload bytes on the busiest link / link rate (headers and protocol framing not counted).
    gradagg, S shards: a shard's link carries W pushes in and W pulls out of its 1/S share, a
    worker's link one push out and one pull in; gloo ring all_reduce: each worker's link carries
    2(W-1)/W x the tensor each way."""
    if row.get("status") != "ok":
        return
    measured_busiest(row, bits)
    if row["shards"] == 0:
        size = row["elements"] * (4 if row["system"] == "gloo-fp32" else 2)
        each_way = 2 * (world - 1) / world * size
        row["busiest_link"], row["busiest_bytes"] = "every worker (ring)", each_way
    else:
        s = row["shards"]
        shard = max(world * row["bytes_pushed"], world * row["bytes_pulled"]) / s
        worker = max(row["bytes_pushed"], row["bytes_pulled"])
        row["busiest_link"] = "shard" if shard >= worker else "worker"
        row["busiest_bytes"] = max(shard, worker)
        # A sync step pulls only after every push is in: on the shard's link the pushes (in) and
        # the pulls (out) take turns, so without overlap across steps this is the floor.
        serial = world * (row["bytes_pushed"] + row["bytes_pulled"]) / s
        row["serial_wire_s"] = serial * 8 / bits if bits else None
    row["wire_bound_s"] = row["busiest_bytes"] * 8 / bits if bits else None
    row["x_bound"] = row["median_s"] / row["wire_bound_s"] if bits else None


def finish_rows(rows: List[Dict[str, Any]], link: str, elements: int, world: int) -> None:
    """Adds the gloo-fp32 ratio and the wire bound to the rows of one link and size."""
    mine = [r for r in rows if r["link"] == link and r["elements"] == elements]
    ref = next((r for r in mine if r["system"] == "gloo-fp32" and r["status"] == "ok"), None)
    for r in mine:
        wire_bound(r, nn.rate_bits(link), world)
        if r["status"] == "ok":
            r["gloo_fp32_over_this"] = ref["median_s"] / r["median_s"] if ref else None


def busiest_cell(r: Dict[str, Any]) -> str:
    m = r.get("measured_busiest")
    return f"{m['node']}: {m['in'] / 1e6:.1f} / {m['out'] / 1e6:.1f}" if m else ""


def fmt(v: Optional[float], spec: str = ".3f") -> str:
    return "" if v is None or (isinstance(v, float) and math.isnan(v)) else format(v, spec)


def row_line(r: Dict[str, Any]) -> str:
    head = f"  {r['label']:<22} S={r['shards'] or '-'} n={r['elements']:>9}"
    if r["status"] != "ok":
        return f"{head}  {r['status'].upper()}: {r.get('error', '')}"
    s = f"{head}  step {r['median_s']:.3f} s"
    if r.get("gloo_fp32_over_this"):
        s += f"  gloo-fp32/this {r['gloo_fp32_over_this']:.2f}x"
    if r.get("wire_bound_s"):
        s += f"  bound {r['wire_bound_s']:.3f} s ({r['busiest_link']}) this/bound {r['x_bound']:.2f}"
    if r["shards"]:
        s += (f"  [enc {r['encode_s']:.3f} push {r['push_s']:.3f} pull {r['pull_s']:.3f} dec {r['decode_s']:.3f}"
              f" srvCPU {r['server_cpu_s_per_step']:.3f}]")
        for k, m in enumerate(r["shard_mem"]):
            s += f"  s{k} RSS {m['vm_hwm'] / MIB:.0f}/{m['bound'] / MIB:.0f} MiB"
        for k, t in enumerate(r.get("server_threads_cpu_s_per_step", [])):
            s += f"  s{k} threads " + " ".join(f"{n}={v:.3f}" for n, v in list(t.items())[:4])
    return s


def tables(info: Dict[str, Any]) -> str:
    """Markdown: one step table per link and size, then the memory table."""
    rows, cpus = info["rows"], info["machine"]["cpus"] or 1
    out = []
    for link in dict.fromkeys(r["link"] for r in rows):
        for n in dict.fromkeys(r["elements"] for r in rows if r["link"] == link):
            probe = info["probes"].get(link)
            out.append(f"\n**{link}, W = {rows[0]['world']}, {n:,} floats ({n * 4 / 1e6:g} MB)**"
                       + (f" — TCP probe {probe / 1e9:.3f} Gbit/s" if probe else "") + "\n")
            out.append("| system | S | step s | gloo fp32 ÷ this | wire bound s | busiest link | this ÷ bound | push then pull s "
                       "| measured busiest link: MB in / out per step | its wire s "
                       "| encode | push | pull | decode | server CPU s | workers CPU s | CPU floor s | disk floor s "
                       "| MB pushed/worker | MB pulled/worker |")
            out.append("|---|---|---:|---:|---:|---|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
            for r in rows:
                if r["link"] != link or r["elements"] != n:
                    continue
                if r["status"] != "ok":
                    out.append(f"| {r['label']} | {r['shards'] or '–'} | {r['status']} | | | | | | | | | | | | | | | | | |")
                    continue
                g = not r["shards"]
                srv = r.get("server_cpu_s_per_step", 0.0)
                floor = (srv + r["workers_cpu_s_per_step"]) / cpus
                # Every push is journaled before its ack, and all shards share this machine's disk.
                disk = info["probes"].get("disk_bytes_per_s")
                disk_floor = None if g or not disk else r["world"] * r["bytes_pushed"] / disk
                out.append("| " + " | ".join([
                    r["label"], str(r["shards"] or "–"), fmt(r["median_s"]), fmt(r.get("gloo_fp32_over_this"), ".2f"),
                    fmt(r.get("wire_bound_s")), r.get("busiest_link", ""), fmt(r.get("x_bound"), ".2f"),
                    fmt(r.get("serial_wire_s")), busiest_cell(r), fmt(r.get("measured_wire_s")),
                    "" if g else fmt(r["encode_s"]), "" if g else fmt(r["push_s"]), "" if g else fmt(r["pull_s"]),
                    "" if g else fmt(r["decode_s"]), "" if g else fmt(srv), fmt(r["workers_cpu_s_per_step"]),
                    fmt(floor), fmt(disk_floor), "" if g else fmt(r["bytes_pushed"] / 1e6, ".2f"),
                    "" if g else fmt(r["bytes_pulled"] / 1e6, ".2f")]) + " |")
    mem = [r for r in rows if r["status"] == "ok" and r.get("shard_mem")]
    if mem:
        out.append("\n**Shard peak RSS (VmHWM) against params + optimizer state + published copy + W × one "
                   "push + 64 MiB**\n")
        out.append("| link | floats | system | S | shard | VmHWM MiB | bound MiB | margin MiB | ok "
                   "| peak: init+warm-up / steps MiB | RSS at end MiB | accounted at end / at most MiB |")
        out.append("|---|---:|---|---|---|---:|---:|---:|---|---:|---:|---:|")
        for r in mem:
            for k, m in enumerate(r["shard_mem"]):
                acc = "/".join("" if m.get(key) is None else format(m[key] / MIB, ".0f")
                               for key in ("accounted_end", "accounted_peak"))
                out.append(f"| {r['link']} | {r['elements']:,} | {r['label']} | {r['shards']} | s{k} | "
                           f"{m['vm_hwm'] / MIB:.0f} | {m['bound'] / MIB:.0f} | {m['margin'] / MIB:.0f} | "
                           f"{'yes' if m['ok'] else '**NO**'} | {m['vm_hwm_init'] / MIB:.0f} / "
                           f"{m['vm_hwm_steps'] / MIB:.0f} | {m['vm_rss_end'] / MIB:.0f} | "
                           f"{acc} |")
    return "\n".join(out)


def plot(info: Dict[str, Any], path: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [r for r in info["rows"] if r["status"] == "ok"]
    links = list(dict.fromkeys(r["link"] for r in rows))
    sizes = list(dict.fromkeys(r["elements"] for r in rows))
    if not rows:
        return
    fig, axes = plt.subplots(len(sizes), len(links), figsize=(5.5 * len(links), 0.5 + 0.45 * 9 * len(sizes)),
                             squeeze=False)
    for i, n in enumerate(sizes):
        for j, link in enumerate(links):
            ax = axes[i][j]
            mine = [r for r in rows if r["link"] == link and r["elements"] == n]
            labels = [r["label"] + (f" S={r['shards']}" if r["shards"] else "") for r in mine]
            y = list(range(len(mine)))
            ax.barh(y, [r["median_s"] for r in mine], color=["#888" if not r["shards"] else "#3a7" for r in mine])
            ref = next((r for r in mine if r["system"] == "gloo-fp32"), None)
            if ref:
                ax.axvline(ref["median_s"], color="#555", linestyle="--", linewidth=0.8)
            bounds = [(k, r["wire_bound_s"]) for k, r in enumerate(mine) if r.get("wire_bound_s")]
            if bounds:
                ax.plot([b for _, b in bounds], [k for k, _ in bounds], "k|", markersize=14, label="wire bound")
                ax.legend(loc="lower right", fontsize=7)
            ax.set_yticks(y)
            ax.set_yticklabels(labels, fontsize=7)
            ax.invert_yaxis()
            ax.set_xscale("log")
            ax.set_xlabel("median step s (log)")
            ax.set_title(f"{link}, {n * 4 / 1e6:g} MB, W={mine[0]['world'] if mine else ''}", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def summarise(info: Dict[str, Any], args: Any) -> bool:
    """Prints the tables, writes the JSON and the plot; returns whether every memory bound held."""
    text = tables(info)
    print(text)
    m = info["machine"]
    print(f"\nmachine: {m['cpu']}, {m['cpus']} CPUs, load {m['loadavg_start']} -> {m.get('loadavg_end')}; "
          f"journal-sync {args.journal_sync}; worker threads {args.threads}")
    mem_ok = all(x["ok"] for r in info["rows"] if r["status"] == "ok" for x in r.get("shard_mem", []))
    if not mem_ok:
        print("netbench: a shard's peak RSS exceeded its memory bound (table above)")
    for path in (args.json, args.plot):
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(args.json, "w") as f:
        json.dump(info, f, indent=1)
    try:
        plot(info, args.plot)
        print(f"wrote {args.json} and {args.plot}")
    except ImportError as e:
        print(f"wrote {args.json}; no plot ({e})")
    return mem_ok
