"""A step closes per bucket (docs/sdk.md, "Buckets"): bucket k of a job is the server-side
job "<job>" (k = 0) or "<job>/lane<k>", so a bucket whose pushes are all in is summed in rank
order, optimized and published while the later buckets of the same step still arrive, and its
pull is answered at once. Each bucket keeps what a step guarantees: the same bits whatever the
arrival order, the straggler deadline and quorum, and the shard's one memory budget. (Retries,
the journal and checkpoints under restarts of buckets: test_restart.py.)

The ranks here hold one client per bucket, as DistributedOptimizer does, and drive them with
step_start / step_wait so that the tests choose which bucket of which rank arrives when."""
from __future__ import annotations

import random
import threading
import time
from pathlib import Path
from typing import Any, List, Tuple

import numpy as np
import pytest

import gradagg
from gradagg import _lib, errors
from _util import FAST, run_ranks
from conftest import Server

SIZES = (1000, 300)  # elements of bucket 0 and bucket 1


def bucket_job(job: str, k: int) -> str:
    return job if k == 0 else f"{job}/lane{k}"


def bucket_clients(server: Server, job: str, rank: int, world: int,
                   **kw: Any) -> Tuple[List[gradagg.Client], List[np.ndarray]]:
    """One client per bucket, each with its tensor initialised to zeros (rank 0's values); the
    clients and the arrays they write the pulled parameters into."""
    clients, params = [], []
    for k, n in enumerate(SIZES):
        c = gradagg.Client(server.addr, bucket_job(job, k), rank, world, optimizer=gradagg.SGD(lr=0.5),
                           **{**FAST, **kw})
        params.append(np.zeros(n, np.float32))
        c.add_tensor(f"b{k}", params[-1])
        c.init()
        clients.append(c)
    return clients, params


def grad(rank: int, k: int, step: int) -> np.ndarray:
    """A gradient with low bits that differ by rank, bucket and step: a sum in another order
    would show in the result."""
    rng = np.random.default_rng(1000 * rank + 100 * k + step)
    return (rng.standard_normal(SIZES[k]) * 10.0 ** rng.integers(-3, 4, SIZES[k])).astype(np.float32)


def test_a_bucket_closes_while_a_later_one_still_arrives(server, job) -> None:
    # Both ranks push bucket 0; rank 1 holds its bucket 1 back until rank 0 has pulled bucket 0
    # (version 1, the exact SGD update), and only then pushes it.
    bucket0_pulled = threading.Event()

    def worker(r: int) -> Any:
        (b0, b1), (p0, _) = bucket_clients(server, job, r, 2)
        try:
            b0.step_start([grad(r, 0, 0)])
            if r == 0:
                b1.step_start([grad(r, 1, 0)])
                b0.step_wait()
                open_bucket1 = b1.step_done()  # rank 1's push of bucket 1 is not sent yet
                bucket0_pulled.set()
                b1.step_wait()
                return b0.version, open_bucket1, b1.version, p0.copy()
            assert bucket0_pulled.wait(30), "bucket 0 was not published without bucket 1"
            b1.step_start([grad(r, 1, 0)])
            b0.step_wait()
            b1.step_wait()
            return b0.version, False, b1.version, None
        finally:
            b0.close()
            b1.close()

    (v0, open1, v1, params), (w0, _, w1, _) = run_ranks(worker, 2, timeout=60)
    assert (v0, v1, w0, w1) == (1, 1, 1, 1)
    assert open1 is False, "bucket 1's step looked closed before rank 1 pushed it"
    expected = -0.5 * (grad(0, 0, 0).astype(np.float64) + grad(1, 0, 0)) / 2
    assert np.allclose(params, expected, rtol=1e-5, atol=1e-3)


def train_buckets(server: Server, job: str, world: int, steps: int, shuffle: bool) -> List[List[np.ndarray]]:
    """world ranks, `steps` steps of both buckets; with shuffle each rank pushes its buckets in a
    random order after a random delay, so the pushes reach the server in another order each
    step. Returns every rank's final parameters per bucket."""
    def worker(r: int) -> List[np.ndarray]:
        rng = random.Random(7 * r + (1 if shuffle else 0))
        clients, params = bucket_clients(server, job, r, world)
        try:
            for s in range(steps):
                order = list(range(len(SIZES)))
                if shuffle:
                    rng.shuffle(order)
                for k in order:
                    if shuffle:
                        time.sleep(rng.uniform(0, 0.02))
                    clients[k].step_start([grad(r, k, s)])
                for c in clients:
                    c.step_wait()
            assert [c.version for c in clients] == [steps] * len(SIZES)
            return [p.copy() for p in params]
        finally:
            for c in clients:
                c.close()

    return run_ranks(worker, world, timeout=90)


def test_bucket_results_do_not_depend_on_the_arrival_order(server, job) -> None:
    ordered = train_buckets(server, job + "-ordered", 3, 6, shuffle=False)
    shuffled = train_buckets(server, job + "-shuffled", 3, 6, shuffle=True)
    for r in range(3):
        for k in range(len(SIZES)):
            assert np.array_equal(shuffled[r][k], ordered[0][k]), f"rank {r} bucket {k}"
    # Mutation check of the comparison: another sum order changes these bits.
    g = [grad(r, 0, 0) for r in range(3)]
    assert not np.array_equal((g[0] + g[1]) + g[2], (g[2] + g[1]) + g[0])


def test_the_straggler_deadline_closes_each_bucket_alone(server, job) -> None:
    # Deadline 300 ms, quorum 2 of 3. Rank 2 pushes bucket 0 at once and bucket 1 2 s late:
    # bucket 0 closes with 3 contributions, bucket 1 at its deadline with 2, and rank 2's late
    # bucket 1 push is refused as late (folded back into its residual by the SDK).
    policy = dict(deadline_ms=300, quorum=2)

    def worker(r: int) -> Any:
        (b0, b1), (p0, p1) = bucket_clients(server, job, r, 3, **policy)
        try:
            b0.step_start([grad(r, 0, 0)])
            if r == 2:
                time.sleep(2.0)
            b1.step_start([grad(r, 1, 0)])
            b0.step_wait()
            b1.step_wait()
            return b0.stats.late_pushes, b1.stats.late_pushes, p0.copy(), p1.copy()
        finally:
            b0.close()
            b1.close()

    results = run_ranks(worker, 3, timeout=60)
    assert [(res[0], res[1]) for res in results] == [(0, 0), (0, 0), (0, 1)]
    g0 = sum(grad(r, 0, 0).astype(np.float64) for r in range(3)) / 3
    g1 = sum(grad(r, 1, 0).astype(np.float64) for r in range(2)) / 2
    for res in results:
        assert np.allclose(res[2], -0.5 * g0, rtol=1e-5, atol=1e-3)
        assert np.allclose(res[3], -0.5 * g1, rtol=1e-5, atol=1e-3)


def test_buckets_share_the_shards_memory_budget(tmp_path: Path, job: str) -> None:
    # --max-memory-mb 16: bucket 0 (1M elements; creating it is reckoned at 12 MB: parameters,
    # state and a published version) fits alone, and so would bucket 1, but not beside bucket 0:
    # bucket 1's init is refused naming the limit, and bucket 0 goes on training.
    s = Server(_lib.server_binary(), tmp_path, "--max-memory-mb", "16", "--max-stream-mb", "8", "--max-message-mb", "2")
    try:
        b0 = gradagg.Client(s.addr, bucket_job(job, 0), 0, 1, optimizer=gradagg.SGD(lr=0.5), **FAST)
        b0.add_tensor("b0", np.zeros(1 << 20, np.float32))
        b0.init()
        b1 = gradagg.Client(s.addr, bucket_job(job, 1), 0, 1, optimizer=gradagg.SGD(lr=0.5), **FAST)
        b1.add_tensor("b1", np.zeros(1 << 20, np.float32))
        with pytest.raises(errors.ResourceError, match="E_LIMIT: creating 1 tensors .* limit of 16777216"):
            b1.init()
        b1.close()
        for _ in range(3):
            b0.step([np.ones(1 << 20, np.float32)])
        assert b0.version == 3
        b0.close()
    finally:
        s.stop()
