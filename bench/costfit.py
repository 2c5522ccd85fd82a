#!/usr/bin/python3
"""Fits the cost model's CPU coefficients (docs/scaling.md, "The cost model") to scalebench
runs, and prints them as the rows of client/cli/plan_costs.c.

Calibration: `sudo bench/modelrun calib OUT` (one shard, W = 4 and 16 at 256K to 16M elements
per codec pair and W = 64 at 256K and 1M, and for 2bit both ways W = 4 and 16 with 16 lanes at
1M, in rounds; none:none again with --durability checkpoint, which gives the journal's share),
then

  /usr/bin/python3 bench/costfit.py OUT/calib/*.json

Per codec pair, with n the elements of the shard's share, W the ranks and L the lanes (each lane
a job of its own, with its own step close and pushes):
  shard CPU per step    = L * (step_ms + W^a * push_ms) + m * (step_ns + W^a * push_ns)
                          m = n + k * max(0, n - CACHE_ELEMENTS): the elements past what the cache
                          holds cost 1 + k times as much; a (world_exp) and k (cache_factor) are
                          chosen on a grid, the four coefficients fitted at each point
  S shards on the same cores: each shard's CPU * (1 + contention * (S - 1)), the median over the
                          S = 2 and 4 runs (the pair's S = 1 fit at the shard's share)
  worker CPU per step   = L * call_ms + N * worker_ns    (one core, the SDK's encode, decode, copies)
  shard RSS             = base + n * 4 * copies + W * (n * push bytes * held + rank)
  shared cores busy     = (shard CPU + W * worker CPU) / cores / step time    (the median; and each pair's)
  shard CPU through a link, beyond loopback's = link_ns * the bytes pushed to it (relaybench's
                          flat rows over the fit at their W and size)
  relay CPU per step    = G * (push_ms + N * push_ns) + relay_ms + N * relay_ns
                          (bench/relaybench.py's relays, G = 4, with the workers pushing the job's
                          codec to them: relay_ms and relay_ns fitted to what the receive, costed
                          as the shard's, leaves of each size's median)
Each fit minimises the relative error over the pair's runs; a coefficient that comes out
negative is held at 0 and the rest refitted. The journal's share of push_ns is the difference
between the server CPU of none:none's acked and checkpoint runs, per byte pushed. A
configuration run several times is fitted as the median of its runs."""
import glob
import json
import sys
from typing import Any, Dict, List, Tuple

import numpy as np

Row = Tuple[float, ...]  # elements, world, server CPU s/step, client CPU s/rank-step, RSS MiB, step s, lanes
# A share past this many elements outgrows the caches (its fp32 parameters, sum and published copy,
# 12 bytes an element, against the calibration machine's 32 MiB L3): client/cli/plan_costs.c's
# cache_elements.
CACHE_ELEMENTS = 2 << 20
TCP_GOODPUT = 0.96  # of a shaped link's rate (netbench's probe; plan_costs.c's link_efficiency)

WORLD_EXPS = np.round(np.arange(0.60, 1.0001, 0.02), 2)
CACHE_FACTORS = np.round(np.arange(0.0, 3.0001, 0.05), 2)
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


def load(paths: List[str], shards: int = 1) -> Dict[Tuple[str, str, bool], List[Row]]:
    """Each codec pair's runs with `shards` shards (1: the fit's; more: the contention's), server
    CPU per step and RSS per shard, elements those of the most loaded shard's share."""
    global cores
    pairs: Dict[Tuple[str, str, bool], List[Row]] = {}
    for path in paths:
        with open(path) as f:
            d = json.load(f)
        if "ranks" not in d:
            continue  # a relaybench run (load_relays)
        for r in d["ranks"]:
            if r["shards"] != shards:
                continue
            key = (r["codec"], r["pull_codec"], "checkpoint" in path)
            share = -(-r["elements"] // shards)  # one tensor, cut into S ranges (the SDK's rule)
            pairs.setdefault(key, []).append((share, r["world"], r["server_cpu_s"] / r["steps"] / shards,
                                               r["client_cpu_ms_per_rank_step"] / 1e3, r["peak_rss_mib_per_shard"],
                                               r["step_s"], r.get("lanes", 1)))
            cores = d["cores"]
    # A configuration measured several times (bench/modelrun's rounds) counts once, as the
    # median of each figure: one disturbed round moves a median less than a mean.
    for key, rows in pairs.items():
        repeats: Dict[Tuple[float, ...], List[Row]] = {}
        for r in rows:
            repeats.setdefault((r[0], r[1], r[6]), []).append(r)
        pairs[key] = [tuple(float(np.median([r[i] for r in rs])) for i in range(7)) for rs in repeats.values()]
    return pairs


def costed_elements(n: np.ndarray, cache_factor: float) -> np.ndarray:
    """The elements a share of n costs as: those past CACHE_ELEMENTS at 1 + cache_factor."""
    return n + cache_factor * np.maximum(0.0, n - CACHE_ELEMENTS)


def server_terms(rows: List[Row], world_exp: float, cache_factor: float) -> np.ndarray:
    """The shard model's four columns (step_ms, push_ms, step_ns, push_ns) for each run."""
    n = np.array([r[0] for r in rows], float)
    u = np.array([r[1] for r in rows], float) ** world_exp
    lanes = np.array([r[6] for r in rows], float)
    m = costed_elements(n, cache_factor)
    return np.stack([lanes, lanes * u, m, u * m], 1)


def fit_server(rows: List[Row]) -> Tuple[np.ndarray, float, float, float]:
    """The shard's coefficients, world_exp and cache_factor of the least relative squares over the
    grid; and the worst relative error of the fit."""
    y = np.array([r[2] for r in rows])
    best = None
    for a in WORLD_EXPS:
        for k in CACHE_FACTORS:
            x = server_terms(rows, a, k)
            c = nonneg_relative_fit(x, y)
            rel = x @ c / y - 1
            sq = float(np.dot(rel, rel))
            if best is None or sq < best[0] - 1e-12:
                best = (sq, c, float(a), float(k), float(np.abs(rel).max()))
    return best[1], best[2], best[3], best[4]


def shard_cpu(fit: Tuple[np.ndarray, float, float], share: float, world: float, lanes: float = 1) -> float:
    c, a, k = fit
    return float(server_terms([(share, world, 0, 0, 0, 0, lanes)], a, k)[0] @ c)


# bench/relaybench.py: its relay rows (the workers pushing the job's codec to their relay, "-inner",
# or fp32 for codec none) and the codec pair each runs, its pulls as netbench's.
RELAY_SYSTEMS = {"relay-none": ("none", "none"), "relay-fp16-inner": ("fp16", "none"),
                 "relay-2bit-inner": ("2bit", "2bit"), "relay-topk-inner": ("topk", "2bit")}
FLAT_SYSTEMS = {"flat-none": ("none", "none"), "flat-fp16": ("fp16", "none"), "flat-2bit": ("2bit", "2bit"),
                "flat-topk": ("topk", "2bit")}


def relaybench_runs(paths: List[str]) -> List[Dict[str, Any]]:
    """The relaybench runs among the files (the scalebench runs are load's)."""
    runs = []
    for path in paths:
        with open(path) as f:
            d = json.load(f)
        if "rows" in d:
            runs.append(d)
    return runs


def load_relays(runs: List[Dict[str, Any]]) -> Tuple[int, Dict[Tuple[str, str], Dict[int, List[float]]]]:
    """Per codec pair and model size, a relay's CPU seconds per step in each relaybench run."""
    out: Dict[Tuple[str, str], Dict[int, List[float]]] = {}
    per_node = 0
    for d in runs:
        per_node = d["per_node"]
        for r in d["rows"]:
            pair = RELAY_SYSTEMS.get(r["system"])
            if pair and r.get("status") == "ok" and "relay_cpu_s_per_step" in r:
                out.setdefault(pair, {}).setdefault(d["args"]["elements"], []).append(r["relay_cpu_s_per_step"])
    return per_node, out


def relay_busy(runs: List[Dict[str, Any]]) -> None:
    """Prints how busy the shared cores stay under a relayed step: every relay row of the relaybench
    runs whose bytes on the busiest link take under half its step (the CPU-bound ones: the
    compressed codecs), (workers' + shard's + relays' CPU) / cores / step, the median."""
    busy = []
    for d in runs:
        link = d["args"]["link"]  # "1gbit", "10gbit" or "lo"
        link_bytes_s = float(link[:-4]) * 1e9 / 8 * TCP_GOODPUT if link.endswith("gbit") else float("inf")
        for r in d["rows"]:
            if not r["system"].startswith("relay-") or r.get("status") != "ok":
                continue
            if max(r["node_link_bytes"], r["server_link_bytes"]) / link_bytes_s >= 0.5 * r["step_s"]:
                continue
            cpu = r["workers_cpu_s_per_step"] + r["server_cpu_s_per_step"] + d["nodes"] * r["relay_cpu_s_per_step"]
            busy.append(cpu / d["machine"]["cpus"] / r["step_s"])
    if busy:
        print(f"/* relayed shared cores busy: median {float(np.median(busy)):.2f} of {len(busy)} runs "
              f"({min(busy):.2f} to {max(busy):.2f}) */")


def fit_link(runs: List[Dict[str, Any]], fits: Dict[Tuple[str, str, bool], Any]) -> None:
    """Prints a shard's CPU per byte pushed to it through a link rather than loopback: relaybench's
    flat rows (W ranks through the shaped link), each shard's CPU over the pair's loopback fit
    at its W and size, fitted as fit + k * W * n * push bytes (relative least squares)."""
    got = []  # measured, the loopback fit, bytes pushed per step
    for d in runs:
        if d["args"]["link"] == "lo":
            continue
        n, world = d["args"]["elements"], d["nodes"] * d["per_node"]
        for r in d["rows"]:
            pair = FLAT_SYSTEMS.get(r["system"])
            if pair and r.get("status") == "ok" and (pair[0], pair[1], False) in fits:
                got.append((r["server_cpu_s_per_step"], shard_cpu(fits[(pair[0], pair[1], False)][0], n, world),
                            world * n * PUSH_BYTES[pair[0]]))
    if not got:
        return
    y, m, b = (np.array(v) for v in zip(*got))
    k = max(0.0, float(np.sum(b / y * (y - m) / y) / np.sum((b / y) ** 2)))
    fit = (m + k * b) / y
    print(f"/* link: {1e9 * k:.2f} ns per byte pushed through a link ({len(got)} runs, fit {fit.min():.2f} to "
          f"{fit.max():.2f} of each, loopback's terms alone {(m / y).min():.2f} to {(m / y).max():.2f}) */")


def fit_relays(runs: List[Dict[str, Any]], fits: Dict[Tuple[str, str, bool], Any]) -> None:
    """Prints each measured pair's relay_ms and relay_ns (the rest of plan_costs.c's pairs: NAN)."""
    g, relays = load_relays(runs)
    if not relays:
        return
    relay_busy(runs)
    print("/* relays (bench/relaybench.py, G = %d): push, pull: relay_ms, relay_ns */" % g)
    for pair, sizes in sorted(relays.items()):
        server, a, kf = fits[(pair[0], pair[1], False)][0]
        n = np.array(sorted(sizes), float)
        cpu = np.array([float(np.median(sizes[int(k)])) for k in n])
        m = costed_elements(n, kf)
        receive = g ** a * (server[1] + m * server[3])  # G pushes, received as a shard does
        rest = cpu - receive
        c = nonneg_relative_fit(np.stack([np.ones_like(n), n], 1), np.maximum(rest, 1e-6))
        worst = max(abs((r + c[0] + k * c[1]) / y - 1) for k, r, y in zip(n, receive, cpu))
        print(f"/* {pair[0]}/{pair[1]}: {1e3 * c[0]:.2f}, {1e9 * c[1]:.2f} ({len(n)} sizes, "
              f"{sum(len(v) for v in sizes.values())} runs, worst fit {100 * worst:.0f} %) */")


def fit_contention(paths: List[str], fits: Dict[Tuple[str, str, bool], Any]) -> None:
    """Prints the shards' contention: S shard processes on the same cores, each one's CPU over what
    the pair's S = 1 fit gives its share, as 1 + contention * (S - 1): the median over the runs."""
    per_run = []
    for shards in (2, 4):
        for key, rows in load(paths, shards).items():
            if key in fits:
                per_run += [(r[2] / shard_cpu(fits[key][0], r[0], r[1], r[6]) - 1) / (shards - 1) for r in rows]
    if per_run:
        print(f"/* shard contention: {float(np.median(per_run)):.3f} per further shard ({len(per_run)} runs: "
              f"{min(per_run):.3f} to {max(per_run):.3f}) */")


def main() -> int:
    paths = sys.argv[1:] or sorted(glob.glob("build/results/model/calib/*.json"))
    pairs = load(paths)
    fits = {}
    for key, rows in sorted(pairs.items()):
        n = np.array([r[0] for r in rows], float)
        lanes = np.array([r[6] for r in rows], float)
        server, a, k, worst = fit_server(rows)
        worker = nonneg_relative_fit(np.stack([lanes, n], 1), np.array([r[3] for r in rows]))
        fits[key] = ((server, a, k), worker)
        print(f"# {key[0]}/{key[1]}{' checkpoint' if key[2] else ''}: {len(rows)} runs, worst server fit "
              f"{100 * worst:.0f} %", file=sys.stderr)
    print("/* push, pull: step_ms, push_ms, step_ns, push_ns (shard, per element of its share), world_exp, "
          "cache_factor; call_ms, worker_ns */")
    for (push, pull, ckpt), ((s, a, k), wk) in sorted(fits.items()):
        if ckpt:
            continue
        print(f"{{GA_CODEC_{push.upper()}, GA_CODEC_{pull.upper()}, {1e3 * s[0]:.2f}, {1e3 * s[1]:.3f}, "
              f"{1e9 * s[2]:.2f}, {1e9 * s[3]:.2f}, {a:.2f}, {k:.2f}, {1e3 * wk[0]:.2f}, {1e9 * wk[1]:.2f}}},")
    fit_contention(paths, fits)
    # Resident memory: base + n * 4 * copies + W * (n * push bytes * held + rank), MiB.
    xs, ys = [], []
    for (push, pull, _), rows in pairs.items():
        copies = 1 if pull == "none" else 2
        for n, w, _, _, rss, _, _ in rows:
            xs.append([1, w * n * PUSH_BYTES[push] / 2**20, w])
            ys.append(rss - n * 4 * copies / 2**20)
    mem = nonneg_relative_fit(np.array(xs), np.array(ys))
    print(f"/* memory: base {mem[0]:.1f} MiB, held factor {mem[1]:.2f}, {mem[2]:.3f} MiB per rank */")
    # How busy the shared cores keep while everything runs on them: the step's CPU (server and
    # clients) over the cores, against the step's wall time.
    def busy(rows: List[Row]) -> List[float]:
        return [(srv + w * cl) / cores / step for _, w, srv, cl, _, step, _ in rows]

    def print_busy(what: str, b: List[float]) -> None:
        print(f"/* shared cores busy{what}: median {float(np.median(b)):.2f} of {len(b)} runs "
              f"({min(b):.2f} to {max(b):.2f}) */")
    print_busy("", [x for rows in pairs.values() for x in busy(rows)])
    # The same per pair with every push journaled (plan_pair_costs.shared_busy, the rows' last
    # column): the journal's writes and fp32 transfers leave the cores idler than compressed steps.
    for (push, pull, ckpt), rows in sorted(pairs.items()):
        if not ckpt:
            print_busy(f", {push}/{pull}", busy(rows))
    # The journal: the server CPU of none:none with every push journaled over the same runs with
    # checkpoint durability, per byte pushed (W pushes of 4 n bytes a step); the median of the
    # configurations measured both ways.
    acked = {(r[0], r[1]): r[2] for r in pairs.get(("none", "none", False), []) if r[6] == 1}
    ckpt = {(r[0], r[1]): r[2] for r in pairs.get(("none", "none", True), []) if r[6] == 1}
    per_byte = [(acked[k] - ckpt[k]) / (k[1] * k[0] * 4) for k in acked if k in ckpt]
    if per_byte:
        print(f"/* journal: {1e9 * float(np.median(per_byte)):.2f} ns per byte pushed (median of {len(per_byte)}: "
              f"{1e9 * min(per_byte):.2f} to {1e9 * max(per_byte):.2f}) */")
    runs = relaybench_runs(paths)
    fit_link(runs, fits)
    fit_relays(runs, fits)
    return 0


if __name__ == "__main__":
    sys.exit(main())
