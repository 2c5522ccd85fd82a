"""A job's life (docs/protocol.md, "A job's life"): a rerun under a finished job's name starts a
fresh job unless it asks to resume; resuming with another config is refused with both values;
a finished job is removed after --finished-job-retention-s (or kept aside); DeleteJob removes a
job once no rank of it is live; hundreds of short jobs in a row leave the server's memory, disk
and metric series flat; an idle server hands back the heap its last steps kept for the next."""
from __future__ import annotations

import socket
import time
import urllib.request
from pathlib import Path
from typing import Any, List

import numpy as np
import pytest

import gradagg
from gradagg import _lib, errors
from _util import run_ranks
from _wire import rss_mib
from conftest import Server

FAST = dict(call_timeout_ms=10000, step_timeout_ms=30000, retry_budget_ms=30000)


def train(server: Server, job: str, world: int, steps: int, lr: float = 0.5, **kw: Any) -> List[np.ndarray]:
    def worker(r: int) -> Any:
        p = np.zeros(64, np.float32)
        with gradagg.Client(server.addr, job, r, world, optimizer=gradagg.SGD(lr=lr), **FAST, **kw) as c:
            c.add_tensor("p", p)
            c.init()
            for _ in range(steps):
                c.step([np.ones_like(p)])
            return p.copy(), c.version
    return run_ranks(worker, world, timeout=60)


def job_dirs(server: Server) -> List[str]:
    return sorted(d.name for d in (server.data_dir / "data").iterdir() if d.name.startswith("job-"))


def test_a_rerun_starts_fresh_unless_it_resumes(server, job) -> None:
    (p, v), _ = train(server, job, 2, 3)
    assert v == 3 and float(p[0]) == pytest.approx(-1.5)
    # The job finished (both ranks left): the same script again trains from scratch.
    (p, v), _ = train(server, job, 2, 2)
    assert v == 2 and float(p[0]) == pytest.approx(-1.0)
    # With resume it goes on from where it ended.
    (p, v), _ = train(server, job, 2, 2, resume=True)
    assert v == 4 and float(p[0]) == pytest.approx(-2.0)
    # Resuming with another config is refused, with both values.
    with pytest.raises(AssertionError, match=r"optimizer.lr \(0.5, not 0.25\) differs") as e:
        train(server, job, 2, 1, lr=0.25, resume=True)
    assert isinstance(e.value.__cause__, errors.JobConfigError)


def test_a_resumed_job_waits_for_every_rank(server, job) -> None:
    """Every rank left (the job finished); rank 1 comes back first and pushes: its step waits for
    rank 0, as a fresh job's would, instead of closing without it (docs/protocol.md, "A job's
    life")."""
    train(server, job, 2, 2)
    p1, p0 = np.zeros(64, np.float32), np.zeros(64, np.float32)
    with gradagg.Client(server.addr, job, 1, 2, optimizer=gradagg.SGD(lr=0.5), resume=True, **FAST) as c1:
        c1.add_tensor("p", p1)
        c1.init()
        assert c1.version == 2
        c1.step_start([np.full(64, 3.0, np.float32)])
        time.sleep(1.0)
        assert not c1.step_done(), "step 2 closed without rank 0"
        with gradagg.Client(server.addr, job, 0, 2, optimizer=gradagg.SGD(lr=0.5), resume=True, **FAST) as c0:
            c0.add_tensor("p", p0)
            c0.init()
            c0.step([np.ones(64, np.float32)])
            c1.step_wait()
            # -0.5 x 2 steps of gradient 1, then the mean of 1 and 3: -1 - 0.5 x 2 = -2
            assert c0.version == c1.version == 3
            assert float(p0[0]) == float(p1[0]) == -2.0


@pytest.fixture
def expiring(tmp_path: Path):
    s = Server(_lib.server_binary(), tmp_path, "--finished-job-retention-s", "0", "--rank-lost-ms", "400")
    yield s
    s.stop()


def wait_for(cond, seconds: float = 10.0) -> bool:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if cond():
            return True
        time.sleep(0.05)
    return cond()


def test_a_finished_job_is_removed_after_its_retention(expiring, job) -> None:
    train(expiring, job, 1, 2)
    assert wait_for(lambda: not job_dirs(expiring)), job_dirs(expiring)
    assert f"job '{job}' removed at version 2 (finished, past --finished-job-retention-s)" in \
        expiring.log.read_text(errors="replace")


def test_kept_finished_jobs_are_moved_aside(tmp_path, job) -> None:
    s = Server(_lib.server_binary(), tmp_path, "--finished-job-retention-s", "0", "--rank-lost-ms", "400",
               "--finished-jobs", "keep")
    try:
        train(s, job, 1, 2)
        assert wait_for(lambda: any(".finished-" in d for d in job_dirs(s))), job_dirs(s)
        kept = [d for d in job_dirs(s) if ".finished-" in d]
        assert len(kept) == 1 and any(f.name.startswith("ckpt") or f.name.startswith("journal")
                                      for f in (s.data_dir / "data" / kept[0]).iterdir())
    finally:
        s.stop()
    # A restarted server does not restore what was put aside.
    again = Server(_lib.server_binary(), tmp_path)
    try:
        (p, v), = train(again, job, 1, 1)
        assert v == 1
    finally:
        again.stop()


def test_delete_job(server, job) -> None:
    p = np.zeros(8, np.float32)
    with gradagg.Client(server.addr, job, 0, 1, **FAST) as c:
        c.add_tensor("p", p)
        c.init()
        with pytest.raises(errors.RankHeldError, match=f"job '{job}' has a live rank 0"):
            gradagg.delete_job(server.addr, job)
    gradagg.delete_job(server.addr, job)
    assert not job_dirs(server)
    with pytest.raises(errors.UnknownJobError, match="does not exist"):
        gradagg.delete_job(server.addr, job)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_many_short_jobs_leave_nothing_behind(tmp_path) -> None:
    admin = f"127.0.0.1:{free_port()}"
    s = Server(_lib.server_binary(), tmp_path, "--finished-job-retention-s", "0", "--rank-lost-ms", "400",
               "--admin-listen", admin)
    metrics = lambda: urllib.request.urlopen(f"http://{admin}/metrics", timeout=10).read().decode()  # noqa: E731

    def figures():
        text = metrics()
        series = sum(1 for line in text.splitlines() if "ga_job=\"" in line and not line.startswith("#"))
        memory = next(float(line.split()[-1]) for line in text.splitlines()
                      if line.startswith('gradagg_memory_bytes{device="host"}'))
        rss = int(next(line.split()[1] for line in Path(f"/proc/{s.proc.pid}/status").read_text().splitlines()
                       if line.startswith("VmRSS:")))
        return series, memory, rss

    try:
        def batch(first: int, n: int) -> None:
            for i in range(first, first + n):
                train(s, f"short-{i}", 1, 2)
            assert wait_for(lambda: not job_dirs(s), 20), job_dirs(s)[:5]
        batch(0, 50)  # warm: the allocator's and gRPC's pools reach their size
        series0, memory0, rss0 = figures()
        batch(50, 250)
        series1, memory1, rss1 = figures()
        print(f"after 50 jobs: {series0} job series, {memory0:.0f} B accounted, RSS {rss0} kB; "
              f"after 300: {series1}, {memory1:.0f} B, RSS {rss1} kB")
        assert series1 == series0 == 0
        # A few hundred bytes come and go with the calls in flight at a scrape; a leak of 64
        # bytes a job would be 16 KiB over the 250 jobs.
        assert memory1 <= memory0 + 16384, (memory0, memory1)
        assert rss1 < rss0 * 1.2 + 4096, (rss0, rss1)
        assert not job_dirs(s)
    finally:
        s.stop()


#: glibc's largest heap of an arena other than the main one (HEAP_MAX_SIZE on 64-bit).
ARENA_HEAP_MIB = 64


def test_an_idle_server_hands_the_heap_back(tmp_path) -> None:
    # While it works the server's arenas keep the chunk payloads a step freed for the next one
    # (docs/reliability.md, "Memory"): 2 ranks x 48 MiB of fp32 pushes a step, in 1 MiB chunks.
    # Once no bundle has arrived for a whole sweep period (--rank-lost-ms / 4) it gives that
    # memory back, and its RSS returns to what it was before the job, but for the top of the second
    # arena's heap, which glibc's malloc_trim does not shrink (under 64 MiB; docs/reliability.md).
    # Without the hand-back the job leaves about 130 MiB more.
    s = Server(_lib.server_binary(), tmp_path, "--finished-job-retention-s", "0", "--rank-lost-ms", "400")
    try:
        train(s, "warm", 1, 2)  # gRPC's and the allocator's own pools
        assert wait_for(lambda: not job_dirs(s), 20), job_dirs(s)
        before = rss_mib(s.proc.pid)
        n = 12 << 20

        def worker(r: int) -> None:
            p = np.zeros(n, np.float32)
            with gradagg.Client(s.addr, "big", r, 2, optimizer=gradagg.SGD(lr=0.1), **FAST) as c:
                c.add_tensor("p", p)
                c.init()
                for _ in range(3):
                    c.step([np.full(n, 1e-3, np.float32)])
                # Idle past a sweep period before leaving: the hand-back comes while the job lives,
                # and the job's own memory, freed when it is removed, must be handed back too.
                time.sleep(1.0)
        run_ranks(worker, 2, timeout=120)
        assert wait_for(lambda: not job_dirs(s), 20), job_dirs(s)
        settled = wait_for(lambda: rss_mib(s.proc.pid) < before + ARENA_HEAP_MIB, 30)
        print(f"RSS before the job {before:.0f} MiB, after it {rss_mib(s.proc.pid):.0f} MiB")
        assert settled, (before, rss_mib(s.proc.pid))
    finally:
        s.stop()
