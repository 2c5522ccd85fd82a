"""`gradagg plan` (client/cli/plan.c, docs/cli.md "Plan", docs/scaling.md "The cost model"): its
numbers against the model's definitions, the search's rules, the overlay it writes (the committed
example of docs/operations.md, "Size a deployment", which scripts/check-deploy renders), its
refusals, and the model against the measured runs (bench/modelcheck.py)."""
from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path
from typing import Any, Dict, List, Tuple

import pytest

from _util import build_dir

REPO = Path(__file__).resolve().parents[3]
# docs/operations.md, "Size a deployment": the worked example and its committed overlay.
EXAMPLE = ["--params", "1B", "--world", "1024", "--ranks-per-node", "8", "--link-gbit", "100", "--worker-gpu",
           "--server-cores", "32", "--relay-cores", "32", "--compute-ms", "300", "--codecs", "none/none,2bit/2bit"]
EXAMPLE_OVERLAY = REPO / "deploy" / "examples" / "planned"


def plan(*args: str) -> Tuple[int, str, str]:
    exe = build_dir() / "client" / "gradagg"
    assert exe.is_file(), f"{exe} is not built"
    r = subprocess.run([str(exe), "plan", *args], capture_output=True, text=True, timeout=60)
    return r.returncode, r.stdout, r.stderr


def plan_json(*args: str) -> Dict[str, Any]:
    rc, out, err = plan("--json", *args)
    assert rc == 0, err
    return json.loads(out)


def pinned(codec: str, pull: str, shards: int, lanes: int = 1, *extra: str) -> Dict[str, Any]:
    return plan_json("--params", "100M", "--world", "64", "--link-gbit", "10", "--shards", str(shards), "--lanes",
                     str(lanes), "--codec", codec, "--pull-codec", pull, "--relays", "off", *extra)["recommended"]


def test_phases_links_and_references_follow_the_model() -> None:
    """fp32 both ways, 64 ranks, 4 shards on their own 10 Gbit links: the byte terms of the model."""
    r = pinned("none", "none", 4)
    n = 100_000_000 // 4
    assert r["share_elements"] == n and r["upstream_ranks"] == 64 and r["streams_per_job"] == 64
    assert r["shard_link_mb"] == pytest.approx(64 * n * 4 / 1e6)
    assert r["worker_link_mb"] == pytest.approx(100_000_000 * 4 / 1e6)
    p = r["phases_s"]
    assert r["step_s"] == pytest.approx(p["worker"] + p["relay"] + p["push"] + p["close"] + p["pull"])
    rate = 10e9 / 8 * 0.96  # the link's TCP goodput
    assert p["pull"] == pytest.approx(64 * n * 4 / rate + 0.1e-3)  # the shard's link, then the round trip
    assert p["push"] >= 64 * n * 4 / rate
    assert r["ddp_ring_s"] == pytest.approx(2 * 63 / 64 * 4e8 / rate + 2 * 63 * 0.05e-3)
    assert r["ps_bound_s"] == pytest.approx(max(4e8 / rate, 64 * 4e8 / (4 * rate)))
    # memory: one fp32 copy (fp32 pulls) and SGD's momentum, plus 64 held fp32 pushes of the share
    budget = (n * (4 + 4) + 64 * n * 4) / 2**20
    assert r["shard_budget_mib"] == pytest.approx(budget)
    assert r["max_memory_mb"] == math.ceil((1.25 * budget + 64) / 256) * 256
    assert r["memory_limit_gib"] == math.ceil((r["max_memory_mb"] * 1.5 + 2 * 512 + 1024) / 1024)
    # 16 lanes: the largest phase plus a quarter of the others
    l16 = pinned("none", "none", 4, 16)
    others = sum(l16["phases_s"].values()) - max(l16["phases_s"].values())
    assert l16["step_s"] == pytest.approx(max(l16["phases_s"].values()) + others / 4)
    assert l16["streams_per_job"] == 64 * 16


def test_compression_shards_and_relays_move_the_bytes_they_should() -> None:
    none, two = pinned("none", "none", 4), pinned("2bit", "2bit", 4)
    assert two["shard_link_mb"] == pytest.approx(none["shard_link_mb"] / 16)
    assert pinned("none", "none", 8)["shard_link_mb"] == pytest.approx(none["shard_link_mb"] / 2)
    flat = plan_json("--params", "100M", "--world", "64", "--ranks-per-node", "8", "--link-gbit", "10", "--shards", "4",
                     "--lanes", "1", "--codec", "2bit", "--pull-codec", "2bit", "--relays", "off")["recommended"]
    relayed = plan_json("--params", "100M", "--world", "64", "--ranks-per-node", "8", "--link-gbit", "10", "--shards",
                        "4", "--lanes", "1", "--codec", "2bit", "--pull-codec", "2bit", "--relays", "on")["recommended"]
    assert (flat["upstream_ranks"], relayed["upstream_ranks"]) == (64, 8)
    assert relayed["shard_link_mb"] == pytest.approx(flat["shard_link_mb"] / 8)
    assert flat["worker_link_mb"] == pytest.approx(8 * relayed["worker_link_mb"])  # 8 ranks share a node's link
    assert relayed["phases_s"]["relay"] > 0 and flat["phases_s"]["relay"] == 0
    # a relay's CPU: more than a rank's (it also receives and sums its node's pushes); none flat
    assert relayed["relay_cpu_s"] > relayed["rank_cpu_s"] > 0 and "relay_cpu_s" not in flat


def test_search_takes_the_fewest_shards_that_meet_the_target() -> None:
    base = ["--params", "100M", "--world", "64", "--link-gbit", "10", "--codec", "2bit", "--pull-codec", "2bit",
            "--lanes", "1"]
    steps = {s: plan_json(*base, "--shards", str(s))["recommended"]["step_s"] for s in (1, 2, 4, 8, 16, 32, 64)}
    target = steps[8] * 1.001
    doc = plan_json(*base, "--target-step-ms", str(target * 1e3))
    rec = doc["recommended"]
    fewest = min(s for s, t in steps.items() if t <= target)
    assert doc["target_met"] and rec["shards"] == fewest and rec["step_s"] <= target
    # no target: the fewest shards within 10 % of the fastest
    rec = plan_json(*base)["recommended"]
    assert rec["shards"] == min(s for s, t in steps.items() if t <= 1.10 * min(steps.values()))
    # out of reach: the fastest, flagged
    doc = plan_json(*base, "--target-step-ms", "0.001")
    assert not doc["target_met"] and doc["recommended"]["step_s"] == pytest.approx(min(steps.values()))
    rc, out, _ = plan(*base, "--target-step-ms", "0.001")
    assert rc == 0 and "no choice meets --target-step-ms" in out


def test_the_worked_example_and_its_overlay(tmp_path: Path) -> None:
    rc, out, err = plan(*EXAMPLE, "--overlay", str(tmp_path / "planned"))
    assert rc == 0, err
    assert "recommended:" in out and "DDP ring all-reduce" in out and "| 2bit | 2bit |" in out
    for name in ("kustomization.yaml", "configmap-plan.yaml", "statefulset-plan.yaml"):
        written = (tmp_path / "planned" / name).read_text()
        committed = (EXAMPLE_OVERLAY / name).read_text()
        assert written == committed, f"deploy/examples/planned/{name} is not what `gradagg plan` writes now"
    doc = plan_json(*EXAMPLE)
    rec = doc["recommended"]
    cm = (EXAMPLE_OVERLAY / "configmap-plan.yaml").read_text()
    assert f'GRADAGG_SHARD_COUNT: "{rec["shards"]}"' in cm and f'GRADAGG_MAX_MEMORY_MB: "{rec["max_memory_mb"]}"' in cm
    assert f"count: {rec['shards']}" in (EXAMPLE_OVERLAY / "kustomization.yaml").read_text()
    assert f"memory: {rec['memory_limit_gib']}Gi" in (EXAMPLE_OVERLAY / "statefulset-plan.yaml").read_text()


@pytest.mark.parametrize("args, message", [
    (["--params", "1M", "--link-gbit", "1"], "--world W"),
    (["--world", "4", "--link-gbit", "1"], "one of --params N and --tensors FILE"),
    (["--params", "1M", "--world", "4", "--link-gbit", "1", "--codec", "none", "--pull-codec", "int8"],
     "no measured cost for pushing none and pulling int8"),
    (["--params", "1M", "--world", "10", "--ranks-per-node", "4", "--link-gbit", "1"], "not a multiple"),
    (["--params", "1M", "--world", "4", "--link-gbit", "1", "--relays", "on"], "--relays on needs"),
    (["--params", "1X", "--world", "4", "--link-gbit", "1"], "--params 1X"),
    (["--params", "1M", "--world", "4", "--link-gbit", "1", "--shards", "65"], "--shards 65"),
    (["--params", "1M", "--world", "4", "--link-gbit", "1", "--codecs", "2bit/none,fp16/fp16"], "fp16/fp16"),
    (["--params", "1M", "--world", "4", "--link-gbit", "1", "--bogus", "1"], "unknown option --bogus"),
])
def test_refusals_name_the_problem(args: List[str], message: str) -> None:
    rc, out, err = plan(*args)
    assert rc == 2 and message in err and out == ""


def test_tensor_lists(tmp_path: Path) -> None:
    f = tmp_path / "tensors.txt"
    f.write_text("# a model\nembed 50000000\n\n4000000  # a layer\n1000\n")
    rec = plan_json("--tensors", str(f), "--world", "16", "--link-gbit", "10", "--shards", "4", "--codec", "2bit",
                    "--pull-codec", "2bit", "--lanes", "1")["recommended"]
    assert rec["share_elements"] == 50_000_000 // 4 + 4_000_000 // 4 + 1000
    f.write_text("w 12 13\n")
    rc, _, err = plan("--tensors", str(f), "--world", "4", "--link-gbit", "1")
    assert rc == 2 and "tensors.txt:1" in err


def test_the_model_predicts_the_measured_runs() -> None:
    """bench/modelcheck.py on the recorded runs (bench/modelcheck_runs.json): its gates, as
    docs/scaling.md ("Validation") states them."""
    r = subprocess.run([sys.executable, str(REPO / "bench" / "modelcheck.py"), "--gradagg",
                        str(build_dir() / "client" / "gradagg")], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]
    assert "beyond 20 %" in r.stdout
