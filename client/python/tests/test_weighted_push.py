"""Weighted pushes (docs/protocol.md, "Weighted pushes"): a push that sums several workers'
gradients (a node relay's) says how many, and a mean job divides each step by the sum of its
pushes' weights, sync and async, across a restart; a stream that changes its weight, or names
more than 65536, is refused. Raw gRPC traffic (_wire.py) against a real server."""
from __future__ import annotations

from pathlib import Path
from typing import List

import grpc
import numpy as np
import pytest

import gradagg
from conftest import Server
from _wire import channel, field_of, field_varint, init_chunk, join_request, pull_request, push_chunk
from test_cli import cli_json

F32 = np.float32
N = 4
JOIN = "/gradagg.v1.Aggregator/Join"
INIT = "/gradagg.v1.Aggregator/InitTensors"
PUSH = "/gradagg.v1.Aggregator/Push"
PULL = "/gradagg.v1.Aggregator/Pull"


def weighted(job: str, rank: int, inc: int, step: int, values: np.ndarray, weight: int) -> bytes:
    return push_chunk(job, rank, inc, step, "w", 0, N, values.astype(F32).tobytes()) + field_varint(11, weight)


def params(ch: grpc.Channel, job: str, inc: int, version: int) -> np.ndarray:
    out = np.zeros(N, F32)
    for raw in ch.unary_stream(PULL)(pull_request(job, 0, inc, version), timeout=30):
        out[:] = np.frombuffer(field_of(raw, 15), F32)  # PullChunk.payload: N fp32 (one piece)
    return out


def job_of(ch: grpc.Channel, job: str, world: int, mode: int = 0) -> None:
    cfg = field_varint(3, 1) + (field_varint(2, mode) if mode else b"")  # reduce mean
    for r in range(world):
        ch.unary_unary(JOIN)(join_request(job, r, 7 + r, world, extra_config=cfg))
    ch.stream_unary(INIT)(iter([init_chunk(job, 0, 7, "w", [N], 0, N, np.zeros(N, F32).tobytes())]))


@pytest.fixture
def persistent(tmp_path: Path):
    s = Server(gradagg._lib.server_binary(), tmp_path)
    yield s
    s.stop()


def test_a_sync_mean_divides_by_the_weights(persistent: Server) -> None:
    """Rank 0 sums 3 workers, rank 1 one: the mean is over 4 workers, not 2 pushes; a rank that
    pushes alone in a step (the other left) is divided by its own weight."""
    ch, job = channel(persistent.addr), "weighted"
    job_of(ch, job, 2)
    push = ch.stream_unary(PUSH)
    push(iter([weighted(job, 0, 7, 0, np.array([3, 6, 9, 12]), 3)]))
    push(iter([weighted(job, 1, 8, 0, np.array([1, 2, 3, 4]), 1)]))
    # SGD lr 0.1 (join_request's optimizer): p = 0 - 0.1 * (sum / 4)
    want: np.ndarray = (F32(0) - F32(0.1) * (np.array([4, 8, 12, 16], F32) * F32(0.25))).astype(F32)
    np.testing.assert_array_equal(params(ch, job, 7, 1), want)
    # The weight is journaled with the push: a restarted server replays the same mean.
    push(iter([weighted(job, 0, 7, 1, np.array([2, 2, 2, 2]), 2)]))
    persistent.stop()
    restarted = persistent.restart()
    ch = grpc.insecure_channel(restarted.addr, options=[("grpc.use_local_subchannel_pool", 1)])  # not the dead one
    for r in range(2):  # as the SDK does when the restarted server does not know it (NOT_MEMBER)
        ch.unary_unary(JOIN)(join_request(job, r, 7 + r, 2, extra_config=field_varint(3, 1)), wait_for_ready=True)
    ch.stream_unary(PUSH)(iter([weighted(job, 1, 8, 1, np.array([1, 1, 1, 1]), 1)]))
    want = (want - F32(0.1) * (np.full(N, 3, F32) * F32(1.0 / 3))).astype(F32)
    np.testing.assert_array_equal(params(ch, job, 7, 2), want)
    restarted.stop()


def test_an_async_push_is_applied_as_its_weight(server: Server) -> None:
    ch, job = channel(server.addr), "weighted-async"
    job_of(ch, job, 1, mode=1)
    ch.stream_unary(PUSH)(iter([weighted(job, 0, 7, 1, np.array([4, 8, 12, 16]), 4)]))
    want = (F32(0) - F32(0.1) * (np.array([4, 8, 12, 16], F32) * F32(0.25))).astype(F32)
    np.testing.assert_array_equal(params(ch, job, 7, 1), want)


def test_bad_weights_are_refused_and_change_nothing(server: Server) -> None:
    ch, job = channel(server.addr), "weighted-bad"
    job_of(ch, job, 2)
    push = ch.stream_unary(PUSH)
    half = push_chunk(job, 0, 7, 0, "w", 0, 2, np.ones(2, F32).tobytes())
    rest = push_chunk(job, 0, 7, 0, "w", 2, 2, np.ones(2, F32).tobytes())
    cases: List = [([half + field_varint(11, 2), rest + field_varint(11, 3)], "has weight 3, the stream began with 2"),
                   ([half + field_varint(11, 2), rest], "has weight 1, the stream began with 2"),
                   ([weighted(job, 0, 7, 0, np.ones(N), 65537)], "weight 65537 over 65536")]
    for chunks, message in cases:
        with pytest.raises(grpc.RpcError) as e:
            push(iter(chunks))
        assert message in e.value.details(), e.value
    rc, doc = cli_json("--server", server.addr, "status", job)
    assert rc == 0 and doc["shards"][0]["committed"] == 0, doc
