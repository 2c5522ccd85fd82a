"""gradagg.torch.comm_hook under real DDP: W = 2 processes over gloo, each DDP bucket reduced
through gradagg-server (a reduce-only job per bucket)."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Dict, List

import pytest
import torch

from _util import run_rank_processes

WORKER = Path(__file__).with_name("ddp_hook_worker.py")


def run(tmp: Path, tag: str, *args: str, world: int = 2) -> List[Dict[str, Any]]:
    store = tmp / f"{tag}.store"
    run_rank_processes(tag, lambda r: [str(WORKER), "--rank", str(r), "--world", str(world), "--store", str(store),
                                       "--out", str(tmp / f"{tag}.{r}.pt"), *args], world, timeout=120)
    return [torch.load(tmp / f"{tag}.{r}.pt") for r in range(world)]


def test_fp32_hook_matches_ddp_allreduce(server, tmp_path: Path) -> None:
    # Codec none, one bucket per parameter (five jobs, DDP's bucket rebuild after the first
    # iteration included): bit for bit what DDP's own all-reduce gives (W = 2: a/2 + b/2 is
    # (a + b) * 0.5 exactly).
    ref = run(tmp_path, "allreduce", "--bucket-mb", "0.0001")
    hook = run(tmp_path, "hook", "--bucket-mb", "0.0001", "--server", server.addr, "--job", "fp32")
    assert hook[0]["buckets"] >= 5
    for r in range(2):
        for p, q in zip(ref[r]["params"], hook[r]["params"]):
            assert torch.equal(p, q), f"rank {r}"
        assert ref[r]["losses"] == hook[r]["losses"]
    assert hook[0]["losses"][-1] < 0.5 * hook[0]["losses"][0]


@pytest.mark.parametrize("momentum", ["optimizer", "hook"])
def test_2bit_hook_trains(server, tmp_path: Path, momentum: str) -> None:
    # 2bit both ways (automatic thresholds, DDP's one bucket), the momentum in the model's SGD or
    # in the hook before the encode: the ranks stay identical and learn.
    extra = ["--hook-momentum"] if momentum == "hook" else []
    out = run(tmp_path, "2bit", "--server", server.addr, "--job", "2bit", "--codec", "2bit", "--pull-codec", "2bit",
              "--steps", "30", *extra)
    assert out[0]["buckets"] == 1
    for p, q in zip(out[0]["params"], out[1]["params"]):
        assert torch.equal(p, q)
    assert out[0]["losses"][-1] < 0.5 * out[0]["losses"][0], out[0]["losses"]
