#!/usr/bin/python3
"""The cost model against the measured runs (docs/scaling.md, "Validation"): every row is a run
of `bench/modelrun validate`, its configuration given to `gradagg plan` with
every choice pinned, and the model's figure printed beside the measured one. The model's CPU
costs were fitted on other runs (bench/costfit.py: one shard, W = 4 and 16, no optimizer, no
link), so every row here is a prediction.

  /usr/bin/python3 bench/modelcheck.py [--runs OUT ... [--record FILE --when TEXT]] [--gradagg BIN] [--json FILE]

Without --runs it predicts the figures recorded in bench/modelcheck_runs.json (the runs of
docs/scaling.md, "Validation"); --runs takes them from `bench/modelrun` OUT directories (each
figure the median of its repeats in all of them, whose range the table shows) and --record FILE
writes them to FILE.

Exits 1 when a row was not measured or its |predicted / measured - 1| exceeds --limit (0.20):
issue 44's target, which the model meets on the recorded runs (docs/scaling.md, "Validation"), so
that a change to the model or its costs cannot make it worse unnoticed."""
import argparse
import glob
import json
import os
import statistics
import subprocess
import sys
from typing import Any, Dict, List, Optional, Tuple

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)

# The 2-vCPU VM: every rank, relay and shard on its 2 cores. The journal's disk is netbench's
# probe in the same runs (Runs.disk_gbyte_s), given to every row.
VM = ["--shared-cores", "2", "--server-cores", "2", "--relay-cores", "2"]
# bench/trainbench_model.py mlp10m: 1024-2048-2048-2048-10.
MLP10M = 1024 * 2048 + 2048 + 2 * (2048 * 2048 + 2048) + 2048 * 10 + 10


# A row's figures from the runs (one per repeat), with the `gradagg plan` arguments they depend
# on; None: not measured.
Picked = Optional[Tuple[List[float], List[str]]]


class Runs:
    """The result files of `bench/modelrun validate` runs (their OUT directories, pooled): a
    benchmark's repeated runs are STEM-1.json, STEM-2.json, ... (or one STEM.json) in each."""

    def __init__(self, paths: List[str]) -> None:
        self.paths = paths

    def files(self, stem: str) -> List[Any]:
        paths = [f for path in self.paths for f in sorted(glob.glob(os.path.join(path, f"{stem}.json")) +
                                                          glob.glob(os.path.join(path, f"{stem}-*.json")))]
        return [json.load(open(f)) for f in paths]

    def rows(self, stem: str) -> List[Dict[str, Any]]:
        return [r for d in self.files(stem) for r in d.get("rows", []) if r.get("status") == "ok"]

    def service(self) -> List[Dict[str, Any]]:
        return [c for d in self.files("bench_service") for c in d["configs"] if c.get("backend", "cpu") == "cpu"]

    def ranks(self) -> List[Dict[str, Any]]:
        return [r for d in self.files("scalebench") for r in d.get("ranks", [])]

    def disk_gbyte_s(self) -> Optional[float]:
        """Direct writes into the shards' data directory: the median of netbench's probes."""
        return one([d["probes"]["disk_bytes_per_s"] / 1e9 for stem in ("netbench_lo", "netbench_1g")
                    for d in self.files(stem) if "disk_bytes_per_s" in d.get("probes", {})])


def one(found: List[float]) -> Optional[float]:
    return statistics.median(found) if found else None


def repeats(found: List[float]) -> Picked:
    """A figure's repeats, for a row whose arguments do not depend on the run."""
    return (found, []) if found else None


def netbench(codec: str, pull: str, shards: int, lanes: int, link: str) -> Dict[str, Any]:
    system = {"none": "none", "2bit": "2bit-lanes" if lanes > 1 else "2bit", "topk": "topk"}[codec]
    name = "netbench_1g" if link == "1 Gbit" else "netbench_lo"

    def pick(runs: Runs) -> Picked:
        return repeats([r["median_s"] for r in runs.rows(name) if r["system"] == system and r["shards"] == shards])
    return {"bench": "netbench", "what": f"{link} {codec}/{pull} S={shards}" + (f" {lanes} lanes" if lanes > 1 else ""),
            "field": "step_s", "pick": pick,
            "args": ["--params", "25000000", "--world", "4", "--link-gbit", "1" if link == "1 Gbit" else "0",
                     "--shards", str(shards), "--lanes", str(lanes), "--codec", codec, "--pull-codec", pull, *VM]}


def relaybench(codec: str, relays: bool, field: str = "step_s") -> Dict[str, Any]:
    system = ("relay-" if relays else "flat-") + codec + ("-inner" if relays and codec != "none" else "")
    key = {"step_s": "step_s", "relay_cpu_s": "relay_cpu_s_per_step"}[field]

    def pick(runs: Runs) -> Picked:
        return repeats([r[key] for r in runs.rows("relaybench") if r["system"] == system and key in r])
    return {"bench": "relaybench", "what": f"1 Gbit {'relays' if relays else 'flat'} {codec}"
            + (f", inner {codec}" if relays and codec != "none" else ""), "field": field, "pick": pick,
            "args": ["--params", "2500000", "--world", "8", "--ranks-per-node", "4", "--link-gbit", "1",
                     "--node-gbyte-s", "0", "--shards", "1", "--lanes", "1", "--relays", "on" if relays else "off",
                     "--codec", codec, "--pull-codec", "none" if codec in ("none", "fp16") else "2bit", *VM]}


def scale(shards: int, world: int, field: str) -> Dict[str, Any]:
    def pick(runs: Runs) -> Picked:
        got = [r for r in runs.ranks() if r["shards"] == shards and r["world"] == world]
        if field == "shard_cpu_s":
            return repeats([r["cpu_ms_per_rank_step_per_shard"] * world / 1e3 for r in got])
        if field == "rank_cpu_s":
            return repeats([r["client_cpu_ms_per_rank_step"] / 1e3 for r in got])
        return repeats([r["peak_rss_mib_per_shard"] for r in got])
    return {"bench": "scalebench", "what": f"2bit/2bit 1M S={shards} W={world}", "field": field, "pick": pick,
            "args": ["--params", "1048576", "--world", str(world), "--link-gbit", "0", "--shards", str(shards),
                     "--lanes", "1", "--codec", "2bit", "--pull-codec", "2bit", "--optimizer", "none", *VM]}


def service(codec: str, pull: str, field: str) -> Dict[str, Any]:
    label = {("none", "none"): "none", ("fp16", "none"): "fp16", ("2bit", "none"): "2bit, fp32 pull",
             ("2bit", "2bit"): "2bit, 2bit pull"}[(codec, pull)]
    key = {"step_s": "step_s", "shard_cpu_s": "server_cpu_s"}[field]

    def pick(runs: Runs) -> Picked:
        return repeats([c[key] for c in runs.service() if c["codec"] == label])
    return {"bench": "bench_service", "what": f"lo {codec}/{pull}", "field": field, "pick": pick,
            "args": ["--params", "25000000", "--world", "4", "--link-gbit", "0", "--shards", "1", "--lanes", "1",
                     "--codec", codec, "--pull-codec", pull, *VM]}


def trainbench(codec: str, link: str, field: str = "iteration_s") -> Dict[str, Any]:
    """--colocate, comm regime; compute: the floor's forward + backward of the same run, x cores / ranks.
    shard_cpu_s: the four shards' CPU per iteration (over the training, evaluations included), per shard."""
    system = "gradagg-none-serial" if codec == "none" else "gradagg-2bit-2bitpull-serial"
    tb_link = "1gbit" if link == "1 Gbit" else "lo"

    def pick(runs: Runs) -> Picked:
        rows = runs.rows("trainbench_colocate")
        floor = one([r["median_fwdbwd_s"] for r in rows if r["link"] == tb_link and r["system"] == "floor"])
        got = [r["median_s"] if field == "iteration_s" else r["shards_cpu_s"] / r["world"]
               for r in rows if r["link"] == tb_link and r["system"] == system]
        if not got or floor is None:
            return None
        return got, ["--compute-ms", f"{floor * 1e3 * 2 / 4:.1f}"]
    return {"bench": "trainbench", "what": f"mlp10m {link} {'none' if codec == 'none' else '2bit both ways'}, "
            "colocated, serial", "field": field, "pick": pick,
            "args": ["--params", str(MLP10M), "--world", "4", "--link-gbit", "1" if link == "1 Gbit" else "0",
                     "--lanes", "1", "--codec", codec, "--pull-codec", codec, "--colocate", *VM]}


ROWS: List[Dict[str, Any]] = [
    *[netbench(c, p, s, 1, "1 Gbit") for c, p in (("none", "none"), ("2bit", "2bit")) for s in (1, 2)],
    *[netbench("2bit", "2bit", s, 16, "1 Gbit") for s in (1, 2)],
    *[netbench("topk", "2bit", s, 1, "1 Gbit") for s in (1, 2)],
    *[netbench(c, p, s, 1, "lo") for c, p in (("none", "none"), ("2bit", "2bit"), ("topk", "2bit")) for s in (1, 2)],
    *[relaybench(c, r) for c in ("none", "fp16", "2bit", "topk") for r in (False, True)],
    *[relaybench(c, True, "relay_cpu_s") for c in ("none", "fp16", "2bit", "topk")],
    *[service(c, p, f) for c, p in (("none", "none"), ("fp16", "none"), ("2bit", "none"), ("2bit", "2bit"))
      for f in ("step_s", "shard_cpu_s")],
    *[scale(s, w, "shard_cpu_s") for s in (1, 2, 4) for w in (4, 64, 256)],
    *[scale(s, 64, "rank_cpu_s") for s in (1, 2, 4)],
    *[scale(s, 256, "shard_rss_mib") for s in (1, 2, 4)], scale(1, 1024, "shard_rss_mib"),
    *[trainbench(c, link) for link in ("1 Gbit", "lo") for c in ("none", "2bit")],
    *[trainbench(c, link, "shard_cpu_s") for link in ("1 Gbit", "lo") for c in ("none", "2bit")],
]


def spread(found: List[float], scale: float) -> str:
    """The repeats' range (the median is the measured figure) and their count: '64.0-74.0 (3)'."""
    if len(found) < 2:
        return "1 run"
    return f"{min(found) * scale:.1f}-{max(found) * scale:.1f} ({len(found)})"


def key(row: Dict[str, Any]) -> str:
    return f"{row['bench']} | {row['what']} | {row['field']}"


def predict(gradagg: str, args: List[str]) -> Dict[str, Any]:
    out = subprocess.run([gradagg, "--json", "plan", *args], capture_output=True, text=True, timeout=60)
    if out.returncode != 0:
        raise RuntimeError(f"gradagg plan {' '.join(args)}: {out.stderr.strip()}")
    return json.loads(out.stdout)["recommended"]


def measured(a: argparse.Namespace) -> Tuple[Dict[str, Any], str, float]:
    """Each row's measured figure and run-dependent arguments, and the disk's rate (GB/s): from
    --runs (and then recorded in --record), or from the recorded file."""
    if not a.runs:
        rec = json.load(open(a.recorded))
        return rec["rows"], rec["measured"], rec["disk_gbyte_s"]
    runs = Runs(a.runs)
    disk = runs.disk_gbyte_s()
    if disk is None:
        raise RuntimeError(f"{' '.join(a.runs)}: no netbench run with its disk probe")
    got = {}
    for row in ROWS:
        m = row["pick"](runs)
        if m is not None:
            got[key(row)] = {"measured": statistics.median(m[0]), "repeats": m[0], "args": m[1]}
    when = a.when or "measured with bench/modelrun"
    if a.record:
        with open(a.record, "w") as f:
            json.dump({"measured": when, "disk_gbyte_s": round(disk, 3), "rows": got}, f, indent=1)
            f.write("\n")
    return got, when, disk


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    build = os.environ.get("GRADAGG_BUILD", os.path.join(REPO, "build", "unit"))
    ap.add_argument("--gradagg", default=os.path.join(build, "client", "gradagg"))
    ap.add_argument("--runs", nargs="+", help="`bench/modelrun validate` OUT directories, pooled "
                    "(default: the recorded figures)")
    ap.add_argument("--record", help="with --runs: write the figures found there to this file")
    ap.add_argument("--when", help="with --record: when and where they were measured")
    ap.add_argument("--recorded", default=os.path.join(HERE, "modelcheck_runs.json"))
    ap.add_argument("--limit", type=float, default=0.20)
    ap.add_argument("--json")
    a = ap.parse_args()
    figures, when, disk = measured(a)
    print(f"measured: {when}; the journal's disk {disk:.2f} GB/s\n")
    results, worst, missing = [], 0.0, 0
    print("| benchmark | run | figure | measured | repeats | predicted | predicted / measured | bound (model) |")
    print("|---|---|---|---:|---:|---:|---:|---|")
    for row in ROWS:
        got = figures.get(key(row))
        if got is None:
            print(f"| {row['bench']} | {row['what']} | {row['field']} | not measured | | | | |")
            missing += 1
            continue
        rec = predict(a.gradagg, row["args"] + got["args"] + ["--disk-gbyte-s", f"{disk:.3f}"])
        p, m = rec[row["field"]], got["measured"]
        ratio = p / m
        worst = max(worst, abs(ratio - 1))
        flag = "" if abs(ratio - 1) <= a.limit else " **over**"
        unit = "MiB" if row["field"].endswith("mib") else "ms"
        scale = 1 if unit == "MiB" else 1e3
        reps = got.get("repeats", [m])  # files recorded before the repeats were: the median alone
        print(f"| {row['bench']} | {row['what']} | {row['field']} | {m * scale:.1f} {unit} | "
              f"{spread(reps, scale)} | {p * scale:.1f} {unit} | {ratio:.2f}{flag} | {rec['bound']} |")
        results.append({"row": key(row), "measured": m, "predicted": p, "ratio": ratio, "bound": rec["bound"],
                        "repeats": reps})
    if not results:
        print("modelcheck: FAIL: no measured row")
        return 1
    over = [r for r in results if abs(r["ratio"] - 1) > a.limit]
    print(f"\n{len(results)} runs; worst |predicted / measured - 1| = {100 * worst:.0f} %; "
          f"{len(over)} beyond {100 * a.limit:.0f} %")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(results, f, indent=1)
    if over or missing:
        print(f"modelcheck: FAIL: {len(over)} rows beyond {100 * a.limit:.0f} %, {missing} not measured")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
