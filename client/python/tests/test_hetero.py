"""Heterogeneous clients (docs/design.md, "The path of a push"): two C workers
(tests/support/hetero_worker.c, codecs 2bit and topk) and two Python workers (fp16; none plus the
automatic 2bit threshold) train ONE job and end with bit-identical parameters. The model and its
gradient are implemented twice, in C and here, with the same integer hash and the same float32
operations."""
from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import List, Tuple

import numpy as np

import gradagg
from gradagg import _lib
from _util import FAST, F32, built_program, run_ranks

SHAPES: List[Tuple[str, Tuple[int, ...]]] = [("w", (16, 12)), ("b", (12,)), ("v", (300,))]
WORLD, STEPS, LR = 4, 30, 0.2


def hetero_worker() -> str:
    env = os.environ.get("GRADAGG_HETERO_WORKER")
    if env:
        return env
    return built_program("hetero_worker")


def hetero_hash(r: int, k: int, n: int) -> np.ndarray:
    """hash3 of hetero_worker.c for elements 0..n-1 (uint32 arithmetic wraps as in C)."""
    x = np.uint32(r * 7919 + k * 104729 + 12345) + np.arange(n, dtype=np.uint32) * np.uint32(31)
    x ^= x >> np.uint32(16)
    x *= np.uint32(0x7FEB352D)
    x ^= x >> np.uint32(15)
    x *= np.uint32(0x846CA68B)
    x ^= x >> np.uint32(16)
    return x


def curv_target(r: int, k: int, n: int) -> Tuple[np.ndarray, np.ndarray]:
    h = hetero_hash(r, k, n)
    a = (np.uint32(1) + h % np.uint32(4)).astype(F32) * F32(0.25)
    c = (((h >> np.uint32(8)) % np.uint32(2001)).astype(np.int32) - 1000).astype(F32) * F32(0.001)
    return a, c


def start(k: int, n: int) -> np.ndarray:
    return curv_target(99, k, n)[1] * F32(2.0)


def loss(params: List[np.ndarray]) -> float:
    total = 0.0
    for r in range(WORLD):
        for k, p in enumerate(params):
            a, c = curv_target(r, k, p.size)
            total += float(np.sum(0.5 * a.astype(np.float64) * (p.ravel().astype(np.float64) - c) ** 2))
    return total


def test_c_and_python_workers_train_one_job(server, job, tmp_path: Path) -> None:
    worker = hetero_worker()
    auto = _lib.ga_client_tensor_threshold is not None
    # The C ranks run as processes: rank 0 2bit (t = 0.05), rank 1 topk (ratio 0.25).
    procs = []
    for rank, codec, thr, ratio in ((0, "2bit", "0.05", "0"), (1, "topk", "0", "0.25")):
        out = tmp_path / f"rank{rank}.bin"
        procs.append((out, subprocess.Popen(
            [worker, server.addr, job, str(rank), str(WORLD), codec, thr, ratio, str(LR), str(STEPS), str(out)],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)))

    def python_rank(i: int) -> Tuple[bytes, int, List[float]]:
        rank = 2 + i
        params = [start(k, int(np.prod(s))).reshape(s) for k, (_, s) in enumerate(SHAPES)]
        coeffs = [curv_target(rank, k, p.size) for k, p in enumerate(params)]
        with gradagg.Client(server.addr, job, rank, WORLD, mean=True, optimizer=gradagg.SGD(lr=LR), **FAST) as c:
            for k, ((name, _), p) in enumerate(zip(SHAPES, params)):
                if rank == 2:
                    c.add_tensor(name, p, codec="fp16")
                elif name == "v" and auto:
                    c.add_tensor(name, p, codec="2bit", threshold="auto")
                else:
                    c.add_tensor(name, p, codec="none")
            c.init()
            for _ in range(STEPS):
                c.step([(a * (p.ravel() - cc)).reshape(p.shape) for p, (a, cc) in zip(params, coeffs)])
            thr = list(c.threshold(2)) if rank == 3 and auto else []
            return b"".join(p.tobytes() for p in params), c.version, thr

    py = run_ranks(python_rank, 2, timeout=120)
    finals = []
    for out, p in procs:
        try:
            stdout, stderr = p.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            p.kill()
            raise
        assert p.returncode == 0, stderr
        assert stdout.split() == ["version", str(STEPS)]
        finals.append(out.read_bytes())
    finals += [b for b, _, _ in py]

    for r, f in enumerate(finals):
        assert f == finals[0], f"rank {r}'s parameters differ from rank 0's"
    assert [v for _, v, _ in py] == [STEPS, STEPS]
    if auto:
        t, density = py[1][2]
        assert t > 0 and 0.0 < density < 1.0  # the automatic threshold adapted and sent codes

    # The server's version, asked by a new member after everyone left.
    with gradagg.Client(server.addr, job, 0, WORLD, mean=True, optimizer=gradagg.SGD(lr=LR), resume=True,
                        **FAST) as c:
        assert c.version == STEPS

    sizes = [int(np.prod(s)) for _, s in SHAPES]
    final = np.frombuffer(finals[0], dtype=F32)
    parts = np.split(final, np.cumsum(sizes)[:-1])
    first = [start(k, n) for k, n in enumerate(sizes)]
    # The optimum of the sum of the ranks' losses: per element, sum(a * c) / sum(a).
    best = []
    for k, n in enumerate(sizes):
        ac = [curv_target(r, k, n) for r in range(WORLD)]
        best.append(sum(a.astype(np.float64) * c for a, c in ac) / sum(a.astype(np.float64) for a, _ in ac))
    floor = loss(best)
    assert loss(parts) - floor < 0.05 * (loss(first) - floor), (loss(parts), loss(first), floor)


def test_c_worker_gradient_matches_numpy(server, job, tmp_path: Path) -> None:
    """The C worker alone (world 1, codec none) against the numpy model: the two implementations
    of the gradient agree bit for bit, so the heterogeneous job trains one model."""
    out = tmp_path / "rank0.bin"
    r = subprocess.run([hetero_worker(), server.addr, job, "0", "1", "none", "0", "0", str(LR), "5", str(out)],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    expect = []
    for k, (_, s) in enumerate(SHAPES):
        n = int(np.prod(s))
        p = start(k, n)
        a, c = curv_target(0, k, n)
        for _ in range(5):
            p = p - F32(LR) * (a * (p - c))  # mean of one rank: no scaling; SGD
        expect.append(p)
    np.testing.assert_array_equal(np.frombuffer(out.read_bytes(), dtype=F32), np.concatenate(expect))
