"""Sharding through the Python API: the same Client run over one and over two gradagg-server
processes ends with bit-identical parameters, the split weight lives half on each shard, and
async jobs refuse a shard list."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Dict, Iterator, List, Tuple

import numpy as np
import pytest

import gradagg
from gradagg import errors
from _util import FAST, regression_data, regression_grads, regression_init, regression_loss, run_ranks
from conftest import Server

SPLIT = 2048  # shard_split_elements: the 64x64 weight (4 units of 1024) is cut, the bias is not


@pytest.fixture
def two_servers(tmp_path: Path) -> Iterator[Tuple[Server, Server]]:
    binary = gradagg._lib.server_binary()
    if not binary:
        pytest.fail(f"no gradagg-server next to {gradagg._lib.LIBRARY_PATH}; build it or set GRADAGG_SERVER_BIN")
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
    """FNV-1a 64 (docs/sdk.md, "Sharding"): the oracle of which shard holds which piece."""
    h = 0xcbf29ce484222325
    for b in name.encode():
        h = ((h ^ b) * 0x100000001b3) & (2**64 - 1)
    return h


def train(server: Any, job: str, world: int = 2, steps: int = 20, lanes: int = 1) -> List[Dict[str, Any]]:
    """The _util regression model (its gradient has no BLAS, so two runs of the same math agree to
    the bit) with a 64x64 weight, 2bit, that SPLIT cuts in two, and a bias sent whole."""
    def worker(r: int) -> Dict[str, Any]:
        x, y = regression_data(r, n=16, d=64, k=64)
        w, b = regression_init(d=64, k=64)
        losses = []
        with gradagg.Client(server, job, r, world, optimizer=gradagg.SGD(lr=0.05, momentum=0.5),
                            pull_codec="2bit", pull_threshold=0.002, shard_split_elements=SPLIT, chunk_bytes=4096,
                            lanes=lanes, **FAST) as c:
            c.add_tensor("w", w, codec="2bit", threshold=0.01)
            c.add_tensor("b", b)
            c.init()
            for _ in range(steps):
                c.step(regression_grads(w, b, x, y))
                losses.append(regression_loss(w, b, [(x, y)]))
            version = c.version
        return dict(w=w, b=b, losses=losses, version=version)

    return run_ranks(worker, world, timeout=120)


def test_two_shards_match_one(two_servers: Tuple[Server, Server], job: str) -> None:
    a, b = two_servers
    one = train(a.addr, job + "_one")
    two = train([a.addr, b.addr], job + "_two")
    for out in (one, two):
        for o in out:
            assert o["version"] == 20
            assert o["losses"][-1] < 0.98 * o["losses"][0], o["losses"]  # 2bit moves it slowly: it learns
    for r in range(2):
        for name in ("w", "b"):
            assert np.array_equal(two[r][name], one[0][name]), f"rank {r} '{name}' differs from one shard"

    # Each shard alone holds its half of the cut weight, under the piece's name, as a 1-D tensor.
    weight = one[0]["w"].reshape(-1)
    first = fnv1a("w") % 2
    for s, server in enumerate((a, b)):
        j = (s - first) % 2  # piece j of 2 lives on shard (first + j) mod 2
        piece = np.zeros(2048, np.float32)
        with gradagg.Client(server.addr, job + "_two", 0, 2, optimizer=gradagg.SGD(lr=0.05, momentum=0.5),
                            pull_codec="2bit", pull_threshold=0.002, resume=True, **FAST) as c:
            c.add_tensor(f"w@{j}/2", piece, codec="2bit", threshold=0.01)
            c.init()
            assert c.version == 20
        assert np.array_equal(piece, weight[2048 * j:2048 * (j + 1)]), f"shard {s}"


def test_lanes_match_one_shard(two_servers: Tuple[Server, Server], job: str) -> None:
    """Two lanes on one server are two jobs, "<job>" and "<job>/lane1", that hold a piece each,
    with the parameters of one shard bit for bit."""
    a, _ = two_servers
    one = train(a.addr, job + "_one")
    lanes = train(a.addr, job + "_lanes", lanes=2)
    for r in range(2):
        assert lanes[r]["version"] == 20
        for name in ("w", "b"):
            assert np.array_equal(lanes[r][name], one[0][name]), f"rank {r} '{name}' differs from one lane"
    weight = one[0]["w"].reshape(-1)
    first = fnv1a("w") % 2
    for lane, lane_job in enumerate((job + "_lanes", job + "_lanes/lane1")):
        j = (lane - first) % 2
        piece = np.zeros(2048, np.float32)
        with gradagg.Client(a.addr, lane_job, 0, 2, optimizer=gradagg.SGD(lr=0.05, momentum=0.5),
                            pull_codec="2bit", pull_threshold=0.002, resume=True, **FAST) as c:
            c.add_tensor(f"w@{j}/2", piece, codec="2bit", threshold=0.01)
            c.init()
            assert c.version == 20
        assert np.array_equal(piece, weight[2048 * j:2048 * (j + 1)]), f"lane {lane}"
    with pytest.raises(errors.InvalError, match="async jobs take one lane"):
        gradagg.Client(a.addr, job, 0, 1, mode="async", lanes=2, **FAST)


def test_async_takes_one_shard(two_servers: Tuple[Server, Server], job: str) -> None:
    a, b = two_servers
    with pytest.raises(errors.InvalError, match="async jobs take one shard"):
        gradagg.Client([a.addr, b.addr], job, 0, 1, mode="async", **FAST)
    with pytest.raises(errors.InvalError, match="'@' is kept for the names of shard pieces"):
        with gradagg.Client(f"{a.addr},{b.addr}", job, 0, 1, **FAST) as c:
            c.add_tensor("w@1/2", np.zeros(4, np.float32))
