"""PyTorch CUDA tensors through gradagg, in processes: W = 2 worker processes share one GPU, the
server on the same machine. The DDP comm hook, DistributedOptimizer with the server's SGD and
DistributedOptimizer with a worker-side AdamW (clipped) train a small transformer from CUDA
tensors (encoded and decoded on the device: only payloads cross PCIe) and, in the same test,
from CPU tensors; the runs match: every rank bit-identical within a run, fp32 losses within float
rounding of the CPU run's (the GPU's kernels round differently), 2bit within 5 %, and both learn.
Skipped without a GPU and a CUDA build of libgradagg (scripts/gpu-session runs it); the CPU half
runs everywhere (test_cpu_paths_train)."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Dict, List

import pytest
import torch

import gradagg
from _util import run_rank_processes

WORKER = Path(__file__).with_name("cuda_train_worker.py")
WORLD = 2
GPU = pytest.mark.skipif(not torch.cuda.is_available() or gradagg.cuda_device_count() == 0,
                         reason="needs a GPU and a CUDA build of libgradagg")


def train(server, tmp: Path, device: str, path: str, codec: str) -> List[Dict[str, Any]]:
    tag = f"{device}-{path}-{codec}"
    pull = "2bit" if codec == "2bit" and path != "adamw" else "none"
    run_rank_processes(tag, lambda r: [str(WORKER), "--rank", str(r), "--world", str(WORLD), "--store",
                                       str(tmp / f"{tag}.store"), "--out", str(tmp / f"{tag}.{r}.pt"), "--device",
                                       device, "--path", path, "--server", server.addr, "--job", tag, "--codec",
                                       codec, "--pull-codec", pull], WORLD, timeout=240)
    out = [torch.load(tmp / f"{tag}.{r}.pt") for r in range(WORLD)]
    for r, o in enumerate(out):
        assert o["on_device"] == [device == "cuda"], f"{tag} rank {r}: the SDK's tensors on_device={o['on_device']}"
        for p, q in zip(o["params"], out[0]["params"]):
            assert torch.equal(p, q), f"{tag}: rank {r} differs from rank 0"
    losses = out[0]["losses"]
    assert losses[-1] < 0.5 * losses[0], f"{tag} did not learn: {losses}"
    return out


CASES = [("hook", "none"), ("hook", "2bit"), ("server", "none"), ("server", "2bit"), ("adamw", "none"),
         ("adamw", "2bit")]


@pytest.mark.parametrize("path,codec", CASES)
def test_cpu_paths_train(server, tmp_path: Path, path: str, codec: str) -> None:
    train(server, tmp_path, "cpu", path, codec)


@GPU
@pytest.mark.parametrize("path,codec", CASES)
def test_cuda_tensors_match_the_cpu_run(server, tmp_path: Path, path: str, codec: str) -> None:
    cpu = train(server, tmp_path, "cpu", path, codec)[0]["losses"]
    gpu = train(server, tmp_path, "cuda", path, codec)[0]["losses"]
    if codec == "none":
        assert gpu == pytest.approx(cpu, rel=1e-3, abs=1e-6), (cpu, gpu)
    else:
        assert gpu[-1] == pytest.approx(cpu[-1], rel=0.05), (cpu, gpu)
