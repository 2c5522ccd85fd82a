"""Sharding through the Python API: the same DistributedOptimizer run over one and over two
gradagg-server processes ends with bit-identical parameters, the split weight lives half on each
shard, and async jobs refuse a shard list."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Dict, Iterator, List, Tuple

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import gradagg
from gradagg import errors
from gradagg.torch import DistributedOptimizer
from _util import FAST, run_ranks
from conftest import Server

torch.set_num_threads(1)

SPLIT = 2048  # shard_split_elements: the 64x64 weight (4 units of 1024) is cut, the rest is not


@pytest.fixture
def two_servers(tmp_path: Path) -> Iterator[Tuple[Server, Server]]:
    binary = gradagg._lib.server_binary()
    if not binary:
        pytest.fail(f"no gradagg-server next to {gradagg._lib.LIBRARY_PATH}; build it or set GRADAGG_SERVER")
    made: List[Server] = []
    try:
        for i in range(2):
            (tmp_path / str(i)).mkdir()
            made.append(Server(binary, tmp_path / str(i)))
        yield made[0], made[1]
    finally:
        for s in made:
            s.stop()


def fnv1a(name: str) -> int:
    """FNV-1a 64 (docs/protocol.md, "Sharding"): the oracle of which shard holds which piece."""
    h = 0xcbf29ce484222325
    for b in name.encode():
        h = ((h ^ b) * 0x100000001b3) & (2**64 - 1)
    return h


def train(server: Any, job: str, world: int = 2, steps: int = 20) -> List[Dict[str, Any]]:
    def worker(r: int) -> Dict[str, Any]:
        torch.manual_seed(r)  # different per rank: init() makes them equal
        model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.Tanh(), torch.nn.Linear(64, 4))
        g = torch.Generator().manual_seed(100 + r)
        x = torch.randn(64, 64, generator=g)
        y = torch.tanh(x[:, :4])
        losses = []
        with DistributedOptimizer(model.named_parameters(), server=server, job=job, rank=r, world_size=world,
                                  lr=0.05, momentum=0.5, codec="2bit", threshold=0.01, pull_codec="2bit",
                                  pull_threshold=0.002, shard_split_elements=SPLIT, chunk_bytes=4096,
                                  codec_for=lambda name, p: "none" if p.dim() == 1 else None, **FAST) as opt:
            for _ in range(steps):
                opt.zero_grad()
                loss = F.mse_loss(model(x), y)
                loss.backward()
                opt.step()
                losses.append(loss.item())
            version = opt.client.version
        return dict(params={n: p.detach().clone() for n, p in model.named_parameters()}, losses=losses,
                    version=version)

    return run_ranks(worker, world, timeout=120)


def test_two_shards_match_one(two_servers: Tuple[Server, Server], job: str) -> None:
    a, b = two_servers
    one = train(a.addr, job + "_one")
    two = train([a.addr, b.addr], job + "_two")
    for out in (one, two):
        for o in out:
            assert o["version"] == 20
            assert o["losses"][-1] < 0.8 * o["losses"][0], o["losses"]
    for r in range(2):
        for name, p in one[0]["params"].items():
            assert torch.equal(two[r]["params"][name], p), f"rank {r} '{name}' differs from one shard"

    # Each shard alone holds its half of the cut weight, under the piece's name, as a 1-D tensor.
    weight = one[0]["params"]["0.weight"].numpy().reshape(-1)
    first = fnv1a("0.weight") % 2
    for s, server in enumerate((a, b)):
        j = (s - first) % 2  # piece j of 2 lives on shard (first + j) mod 2
        piece = np.zeros(2048, np.float32)
        with gradagg.Client(server.addr, job + "_two", 0, 2, optimizer=gradagg.SGD(lr=0.05, momentum=0.5),
                            pull_codec="2bit", pull_threshold=0.002, **FAST) as c:
            c.add_tensor(f"0.weight@{j}/2", piece, codec="2bit", threshold=0.01)
            c.init()
            assert c.version == 20
        assert np.array_equal(piece, weight[2048 * j:2048 * (j + 1)]), f"shard {s}"


def test_async_takes_one_shard(two_servers: Tuple[Server, Server], job: str) -> None:
    a, b = two_servers
    with pytest.raises(errors.InvalError, match="async jobs take one shard"):
        gradagg.Client([a.addr, b.addr], job, 0, 1, mode="async", **FAST)
    with pytest.raises(errors.InvalError, match="'@' is kept for the names of shard pieces"):
        with gradagg.Client(f"{a.addr},{b.addr}", job, 0, 1, **FAST) as c:
            c.add_tensor("w@1/2", np.zeros(4, np.float32))
