"""A failed rank fails the job, loudly and fast (docs/protocol.md and docs/sdk.md, "Failed
ranks"): a rank that raises, one that ends the program with an exception, one that dies in a
multiprocessing child (torch.multiprocessing.spawn too), one that is SIGKILLed; the other ranks'
next call (or the one they wait in) raises RankFailedError naming the rank and why, within the
stated bound, never after step_timeout_ms. A job with a straggler policy goes on without the
rank instead. A rank busy longer than --rank-lost-ms between calls is not lost (heartbeats), and
the job resumes once every rank is restarted."""
from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from typing import Any, Dict

import numpy as np
import pytest

import gradagg
from gradagg import _lib, errors
from _util import child_env, run_ranks
from test_cli import cli_json
from conftest import Server

LOST_MS = 1000  # --rank-lost-ms here: a rank is lost after 1 s, heartbeats every 250 ms
# The bound on telling the other ranks: a failed Leave reaches them at once (their waiting calls
# are ended); a lost rank after LOST_MS plus one sweep (LOST_MS / 4). Both with room for a
# loaded machine, and far below the step timeout the ranks would otherwise wait out.
RETRY = dict(call_timeout_ms=10000, step_timeout_ms=60000, retry_budget_ms=30000)
SLOW = 5.0


@pytest.fixture
def lossy(tmp_path: Path):
    s = Server(_lib.server_binary(), tmp_path, "--rank-lost-ms", str(LOST_MS))
    yield s
    s.stop()


def client(server: Server, job: str, rank: int, world: int, **kw: Any) -> gradagg.Client:
    return gradagg.Client(server.addr, job, rank, world, optimizer=gradagg.SGD(lr=0.1), **{**RETRY, **kw})


def steps_until_failure(c: gradagg.Client, p: np.ndarray, limit: int = 1000) -> errors.GradaggError:
    """Steps until the job fails; returns the error (the test fails if it never does)."""
    for _ in range(limit):
        try:
            c.step([np.ones_like(p)])
        except errors.GradaggError as e:
            return e
    pytest.fail(f"{limit} steps and no failure")


def rank_1_program(server: Server, job: str, then: str, **popen: Any) -> subprocess.Popen:
    """Rank 1 of a world of 2 as a Python program of its own: 3 steps, then `then`."""
    script = textwrap.dedent(f"""
        import time, numpy as np, gradagg
        c = gradagg.Client({server.addr!r}, {job!r}, 1, 2, optimizer=gradagg.SGD(lr=0.1))
        p = np.zeros(1000, np.float32)
        c.add_tensor("p", p)
        c.init()
        for i in range(3):
            c.step([np.ones_like(p)])
    """) + then + "\n"
    env = child_env()
    return subprocess.Popen([sys.executable, "-c", script], env=env, text=True, **popen)


def test_a_raising_rank_fails_the_job(lossy, job) -> None:
    raised: Dict[str, float] = {}

    def worker(r: int) -> Any:
        p = np.zeros(1000, np.float32)
        if r == 1:
            with pytest.raises(RuntimeError):
                with client(lossy, job, r, 2) as c:
                    c.add_tensor("p", p)
                    c.init()
                    for _ in range(3):
                        c.step([np.ones_like(p)])
                    raised["at"] = time.monotonic()
                    raise RuntimeError("boom: out of data")
            return None
        with client(lossy, job, r, 2) as c:
            c.add_tensor("p", p)
            c.init()
            e = steps_until_failure(c, p)
            return e, time.monotonic()

    e, at = run_ranks(worker, 2, timeout=60)[0]
    assert isinstance(e, errors.RankFailedError), repr(e)
    assert f"job '{job}' failed: rank 1 failed: RuntimeError: boom: out of data" in str(e)
    print(f"a raising rank: told after {at - raised['at']:.3f} s")
    assert at - raised["at"] < SLOW, f"told after {at - raised['at']:.1f} s"


def test_an_exception_that_ends_the_program_fails_the_job(lossy, job) -> None:
    # Rank 1 is a program of its own that raises at its fourth step, outside any with block.
    proc = rank_1_program(lossy, job, 'raise ValueError("bad batch " + str(3))', stderr=subprocess.PIPE)
    p = np.zeros(1000, np.float32)
    with client(lossy, job, 0, 2) as c:
        c.add_tensor("p", p)
        c.init()
        t0 = time.monotonic()
        e = steps_until_failure(c, p)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode != 0 and "ValueError: bad batch 3" in err, err
    assert isinstance(e, errors.RankFailedError), repr(e)
    assert "rank 1 failed: ValueError: bad batch 3" in str(e)
    assert "lost" not in str(e)  # told by the rank itself, not noticed by its lease
    assert time.monotonic() - t0 < 60


def rank_1_in_a_child(index: int, addr: str, job: str) -> None:
    """Rank 1 in a multiprocessing child (spawned: importable by name): 3 steps, then it raises."""
    c = gradagg.Client(addr, job, 1, 2, optimizer=gradagg.SGD(lr=0.1))
    p = np.zeros(1000, np.float32)
    c.add_tensor("p", p)
    c.init()
    for _ in range(3):
        c.step([np.ones_like(p)])
    raise ValueError("bad shard " + str(3))


@pytest.mark.parametrize("start", ["torch.multiprocessing.spawn", "multiprocessing.Process"])
def test_a_rank_that_dies_in_a_multiprocessing_child_fails_the_job(lossy, job, start: str) -> None:
    # The child's exception never reaches sys.excepthook (multiprocessing catches it; torch's
    # spawn turns it into sys.exit(1)); the SDK's exit finalizer closes its client as failed,
    # so rank 0 is told by the rank itself, not by its lease.
    import multiprocessing

    import torch.multiprocessing
    if start == "torch.multiprocessing.spawn":
        spawned = torch.multiprocessing.spawn(rank_1_in_a_child, args=(lossy.addr, job), nprocs=1, join=False)
    else:
        spawned = multiprocessing.get_context("spawn").Process(target=rank_1_in_a_child, args=(0, lossy.addr, job))
        spawned.start()
    p = np.zeros(1000, np.float32)
    with client(lossy, job, 0, 2) as c:
        c.add_tensor("p", p)
        c.init()
        e = steps_until_failure(c, p)
    if start == "torch.multiprocessing.spawn":
        with pytest.raises(Exception, match="bad shard 3"):  # torch re-raises the child's error here
            while not spawned.join(timeout=60):
                pass
        assert "rank 1 failed: the process exited with status 1" in str(e), str(e)
    else:
        spawned.join(timeout=60)
        assert spawned.exitcode == 1
        assert "rank 1 failed: ValueError: bad shard 3" in str(e), str(e)
    assert isinstance(e, errors.RankFailedError), repr(e)
    assert "lost" not in str(e)  # told by the rank itself, not noticed by its lease


def test_a_killed_rank_is_lost_within_the_bound(lossy, job) -> None:
    proc = rank_1_program(lossy, job, 'print("stepped", flush=True); time.sleep(600)', stdout=subprocess.PIPE)
    p = np.zeros(1000, np.float32)
    try:
        with client(lossy, job, 0, 2) as c:
            c.add_tensor("p", p)
            c.init()
            for _ in range(3):
                c.step([np.ones_like(p)])
            assert proc.stdout is not None and proc.stdout.readline() == "stepped\n"
            proc.send_signal(signal.SIGKILL)
            killed = time.monotonic()
            e = steps_until_failure(c, p)  # waits in the step rank 1 never pushes
            told = time.monotonic() - killed
    finally:
        proc.kill()
        proc.wait()
    assert isinstance(e, errors.RankFailedError), repr(e)
    assert "rank 1 lost: incarnation" in str(e) and "made no call and sent no heartbeat" in str(e)
    print(f"a killed rank: told after {told:.3f} s")
    bound = (LOST_MS + LOST_MS / 4) / 1000 + SLOW
    assert told < bound, f"told after {told:.1f} s, bound {bound:.1f} s"
    # Its last heartbeat may precede the kill by up to a heartbeat period (LOST_MS / 4).
    assert told >= (LOST_MS - LOST_MS / 4) / 1000 * 0.95, f"told after {told:.2f} s: before the lease could lapse"


def test_a_busy_rank_is_not_lost(lossy, job) -> None:
    # Three times --rank-lost-ms between steps, in the caller's own work: heartbeats keep it.
    def worker(r: int) -> int:
        p = np.zeros(100, np.float32)
        with client(lossy, job, r, 2) as c:
            c.add_tensor("p", p)
            c.init()
            for _ in range(2):
                if r == 1:
                    time.sleep(3 * LOST_MS / 1000)
                c.step([np.ones_like(p)])
            return c.version

    assert run_ranks(worker, 2, timeout=60) == [2, 2]


def test_a_job_with_a_straggler_policy_goes_on(lossy, job) -> None:
    def worker(r: int) -> int:
        p = np.zeros(100, np.float32)
        if r == 2:
            with pytest.raises(RuntimeError):
                with client(lossy, job, r, 3, deadline_ms=300, quorum=2) as c:
                    c.add_tensor("p", p)
                    c.init()
                    c.step([np.ones_like(p)])
                    raise RuntimeError("gone")
            return -1
        with client(lossy, job, r, 3, deadline_ms=300, quorum=2) as c:
            c.add_tensor("p", p)
            c.init()
            for _ in range(5):
                c.step([np.ones_like(p)])
            return c.version

    assert run_ranks(worker, 3, timeout=60)[:2] == [5, 5]
    log = lossy.log.read_text(errors="replace")
    assert f"job '{job}': rank 2 failed: RuntimeError: gone; the job goes on without it (deadline 300 ms, " \
           "quorum 2 of 3)" in log


def test_the_job_resumes_when_every_rank_restarts(lossy, job) -> None:
    # Rank 1 fails once rank 0's push of step 2 is in; rank 0 is told; both come back as new
    # processes (new incarnations), as a launcher restarts a job, and train on from the version
    # the job had. Rank 0's push of step 2 again is its predecessor's, counted once: not folded
    # into step 3 as a lost answer's bytes would be.
    def first(r: int) -> Any:
        p = np.zeros(100, np.float32)
        try:
            with client(lossy, job, r, 2) as c:
                c.add_tensor("p", p)
                c.init()
                for _ in range(2):
                    c.step([np.ones_like(p)])
                if r == 1:
                    end = time.monotonic() + 30
                    while cli_json("--server", lossy.addr, "status", job)[1]["shards"][0].get("committed") != 1:
                        assert time.monotonic() < end, "rank 0 did not push step 2"
                        time.sleep(0.02)
                    raise RuntimeError("crash")
                steps_until_failure(c, p)
                raise RuntimeError("told")
        except RuntimeError as e:
            return str(e)

    assert run_ranks(first, 2, timeout=60) == ["told", "crash"]

    def again(r: int) -> Any:
        p = np.zeros(100, np.float32)
        with client(lossy, job, r, 2) as c:
            c.add_tensor("p", p)
            c.init()
            first = c.version  # 2, or 3 once the other rank closed step 2 (rank 0's push of it stayed)
            while c.version < 5:
                c.step([np.ones_like(p)])
            return first, c.version, p

    (first_a, end_a, a), (first_b, end_b, b) = run_ranks(again, 2, timeout=60)
    assert first_a >= 2 and first_b >= 2  # the job's parameters, not a fresh job's
    assert end_a == end_b == 5
    want = np.zeros(100, np.float32)
    for _ in range(5):  # every step's mean of one gradient of ones per rank: SGD p -= lr * (2 * 1/2)
        want = (want - np.float32(0.1) * (np.float32(2) * np.float32(0.5))).astype(np.float32)
    np.testing.assert_array_equal(a, want)
    np.testing.assert_array_equal(b, want)
    assert "every incarnation that saw its failure is gone" in lossy.log.read_text(errors="replace")


def test_a_deadline_names_the_ranks_that_did_not_push(lossy, job) -> None:
    # Rank 1 is alive (its heartbeats keep it) but never pushes: rank 0's pull runs out of time,
    # and the error says which ranks the step waits for.
    hold = threading.Event()

    def worker(r: int) -> Any:
        p = np.zeros(100, np.float32)
        with client(lossy, job, r, 2, **({"step_timeout_ms": 1500} if r == 0 else {})) as c:
            c.add_tensor("p", p)
            c.init()
            if r == 1:
                hold.wait(30)
                return None
            try:
                c.step([np.ones_like(p)])
            except errors.GradaggError as e:
                return e
            finally:
                hold.set()
            pytest.fail("the step did not run out of time")

    e = run_ranks(worker, 2, timeout=60)[0]
    assert isinstance(e, errors.DeadlineError), repr(e)
    assert "step 0 has no push from rank 1" in str(e), str(e)
