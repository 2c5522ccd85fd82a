"""Hostile clients against a real server (docs/reliability.md, "Memory"): every byte the server
holds for an unfinished stream is in --max-memory-mb before it is kept, a stream is checked
against its job and membership at its first chunk, one client host holds at most
--max-streams-per-client streams open and one job at most --max-streams-per-job, a list too long to unpack is refused before it is, and
the admin port answers its probes under a slow-loris. Each test reproduces an attack with hand-built gRPC
(_wire.py), bounds the server's RSS from /proc while it runs, and then trains a legitimate job
on the same server."""
from __future__ import annotations

import json
import os
import re
import resource
import shutil
import signal
import socket
import subprocess
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any, List

import grpc
import numpy as np
import pytest

import gradagg
from gradagg import _lib, errors
from _util import FAST, build_dir, run_ranks
from _wire import (SERVICE, HeldStream, RssPeak, channel, init_chunk, join_request, pull_request, push_chunk, rss_mib,
                   unary)
from conftest import Server

MIB = 1 << 20
CHUNK = 16 * MIB
ELEMS = CHUNK // 4
BUDGET_MB = 256
# What the server may hold beyond --max-memory-mb (docs/reliability.md, "Memory"): its own code,
# gRPC's and the allocator's pools, and per completion-queue thread one message being unpacked.
OVERHEAD_MB = 160


def hostile_server(tmp_path: Path, *extra: str) -> Server:
    return Server(_lib.server_binary(), tmp_path, "--max-memory-mb", str(BUDGET_MB), "--max-stream-mb", "128",
                  "--max-message-mb", "20", *extra)


def legitimate_job_trains(s: Server, job: str) -> None:
    p = np.zeros(1000, np.float32)
    with gradagg.Client(s.addr, job, 0, 1, optimizer=gradagg.SGD(lr=0.5), **FAST) as c:
        c.add_tensor("p", p)
        c.init()
        for _ in range(3):
            c.step([np.ones_like(p)])
        assert c.version == 3
    assert np.array_equal(p, np.full(1000, -1.5, np.float32))


def member(s: Server, job: str, incarnation: int) -> grpc.Channel:
    """A job of one rank whose rank 0 (this incarnation) holds a tensor "w" of ELEMS elements."""
    ch = channel(s.addr)
    unary(ch, "Join", join_request(job, 0, incarnation, 1))
    zeros = bytes(CHUNK)
    init = HeldStream(ch, "InitTensors", [init_chunk(job, 0, incarnation, "w", [ELEMS], 0, ELEMS, zeros)])
    init.release()
    assert init.outcome(30)[0] == grpc.StatusCode.OK
    return ch


def test_streams_for_a_job_that_does_not_exist_end_at_their_first_chunk(tmp_path: Path) -> None:
    # 64 streams each send 16 MiB chunks naming a job that does not exist and stay open: each is
    # refused while it is still open, at its first chunk (NOT_FOUND) or, while the others' chunks
    # are being received, for want of room for its own (RESOURCE_EXHAUSTED, E_BUSY); the server
    # never holds them.
    s = hostile_server(tmp_path)
    try:
        ch = channel(s.addr)
        before = rss_mib(s.proc.pid)
        with RssPeak(s.proc.pid) as rss:
            streams = [HeldStream(ch, "Push", [push_chunk("no-such-job", 0, 7, 0, "w", 0, ELEMS, bytes(CHUNK))] * 3)
                       for _ in range(64)]
            outcomes = [st.outcome(30) for st in streams]
        for st in streams:
            st.release()
        codes = [code for code, _ in outcomes]  # every one ended while its stream was held open
        assert set(codes) <= {grpc.StatusCode.NOT_FOUND, grpc.StatusCode.RESOURCE_EXHAUSTED}, outcomes[:3]
        found = [d for code, d in outcomes if code == grpc.StatusCode.NOT_FOUND]
        assert found and "job 'no-such-job' does not exist" in found[0] and "first chunk" in found[0], outcomes[:3]
        print(f"RSS {before:.0f} -> peak {rss.peak:.0f} MiB (budget {BUDGET_MB})")
        assert rss.peak < BUDGET_MB + OVERHEAD_MB, f"RSS {before:.0f} -> {rss.peak:.0f} MiB"
        legitimate_job_trains(s, "legit")
    finally:
        s.stop()


def test_unfinished_streams_stay_within_the_memory_budget(tmp_path: Path) -> None:
    # A member's incarnation opens 32 streams of 3 x 16 MiB and never ends them: chunks are taken
    # from the budget as they come, and those past it are refused (RESOURCE_EXHAUSTED, naming
    # --max-memory-mb) while the streams are open. The RSS stays under the budget and its
    # overhead; once the streams end, the server is back to what it held.
    s = hostile_server(tmp_path)
    try:
        ch = member(s, "victim", 7)
        chunk = push_chunk("victim", 0, 7, 0, "w", 0, ELEMS, bytes(CHUNK))
        before = rss_mib(s.proc.pid)
        with RssPeak(s.proc.pid) as rss:
            streams = [HeldStream(ch, "Push", [chunk] * 3) for _ in range(32)]
            deadline = time.monotonic() + 60
            refused: List[str] = []
            while time.monotonic() < deadline and len(refused) < 20:
                time.sleep(0.2)
                refused = [d for st in streams for code, d in [st.outcome(0)]
                           if code == grpc.StatusCode.RESOURCE_EXHAUSTED]
            open_now = sum(1 for st in streams if st.outcome(0)[0] is None)
        assert len(refused) >= 20, f"only {len(refused)} of 32 refused"
        assert "--max-memory-mb" in refused[0] and "memory is full" in refused[0], refused[0]
        assert open_now >= 1, "no stream was left holding memory: the budget was never reached"
        print(f"RSS {before:.0f} -> peak {rss.peak:.0f} MiB (budget {BUDGET_MB})")
        assert rss.peak < BUDGET_MB + OVERHEAD_MB, f"RSS {before:.0f} -> {rss.peak:.0f} MiB"
        for st in streams:
            st.release()
        for st in streams:
            code, details = st.outcome(30)
            assert code is not None, "a released stream never ended"
        legitimate_job_trains(s, "legit")
    finally:
        s.stop()


def test_one_client_host_holds_at_most_its_streams(tmp_path: Path) -> None:
    s = hostile_server(tmp_path, "--max-streams-per-client", "4")
    try:
        ch = member(s, "victim", 7)
        small = push_chunk("victim", 0, 7, 0, "w", 0, 1024, bytes(4096))
        held = [HeldStream(ch, "Push", [small]) for _ in range(4)]
        time.sleep(1.0)  # the four are open, each holding its chunk
        assert all(st.outcome(0)[0] is None for st in held)
        fifth = HeldStream(ch, "Push", [small])
        code, details = fifth.outcome(30)
        assert code == grpc.StatusCode.RESOURCE_EXHAUSTED, (code, details)
        assert "has 4 streams open" in details and "--max-streams-per-client" in details, details
        fifth.release()
        held[0].release()  # ends: its pushes do not cover the tensor (INVALID_ARGUMENT), and it closes
        assert held[0].outcome(30)[0] is not None
        again = HeldStream(ch, "Push", [small])
        time.sleep(1.0)
        assert again.outcome(0)[0] is None, "a stream slot did not come back"
        for st in held[1:] + [again]:
            st.release()
            assert st.outcome(30)[0] is not None
        legitimate_job_trains(s, "legit")
    finally:
        s.stop()


def test_one_job_holds_at_most_its_streams(tmp_path: Path) -> None:
    """--max-streams-per-job: with tokens on, the cap per token (a token is one job's)."""
    s = hostile_server(tmp_path, "--max-streams-per-job", "3")
    try:
        ch = member(s, "victim", 7)
        other = member(s, "other", 9)
        small = push_chunk("victim", 0, 7, 0, "w", 0, 1024, bytes(4096))
        held = [HeldStream(ch, "Push", [small]) for _ in range(3)]
        time.sleep(1.0)
        assert all(st.outcome(0)[0] is None for st in held)
        fourth = HeldStream(channel(s.addr), "Push", [small])  # another connection: the job is full
        code, details = fourth.outcome(30)
        assert code == grpc.StatusCode.RESOURCE_EXHAUSTED, (code, details)
        assert "job 'victim' has 3 streams open" in details and "--max-streams-per-job" in details, details
        fourth.release()
        # Another job's stream from the same host is let in: the cap is the job's, not the host's.
        theirs = HeldStream(other, "Push", [push_chunk("other", 0, 9, 0, "w", 0, 1024, bytes(4096))])
        time.sleep(1.0)
        assert theirs.outcome(0)[0] is None
        held[0].release()
        assert held[0].outcome(30)[0] is not None
        again = HeldStream(ch, "Push", [small])
        time.sleep(1.0)
        assert again.outcome(0)[0] is None, "a stream slot of the job did not come back"
        for st in held[1:] + [again, theirs]:
            st.release()
            assert st.outcome(30)[0] is not None
        legitimate_job_trains(s, "legit")
    finally:
        s.stop()


def test_a_shape_of_millions_of_numbers_is_refused_before_it_is_unpacked(tmp_path: Path) -> None:
    # The attack: one 60 MiB InitTensors message whose shape is 1-byte numbers (480 MB
    # unpacked). Counted on the wire first, it is refused naming the field, and the RSS hardly
    # moves; four at once change nothing either.
    s = Server(_lib.server_binary(), tmp_path, "--max-message-mb", "64")
    try:
        ch = channel(s.addr)
        unary(ch, "Join", join_request("victim", 0, 7, 1))
        bomb = init_chunk("victim", 0, 7, "w", [], 0, 1, b"", packed_shape=b"\x01" * (60 * MIB))
        before = rss_mib(s.proc.pid)
        with RssPeak(s.proc.pid) as rss:
            streams = [HeldStream(ch, "InitTensors", [bomb]) for _ in range(4)]
            outcomes = [st.outcome(60) for st in streams]
        for st in streams:
            st.release()
        print(f"RSS {before:.0f} -> peak {rss.peak:.0f} MiB")
        assert all(code == grpc.StatusCode.INVALID_ARGUMENT for code, _ in outcomes), outcomes
        assert "field 'shape' holds 62914560 elements" in outcomes[0][1], outcomes[0][1]
        # Four 60 MiB messages are in gRPC's buffers at once (within --max-memory-mb's room for
        # messages being received); nothing is unpacked.
        assert rss.peak < before + 4 * 64 + 64, f"RSS {before:.0f} -> {rss.peak:.0f} MiB"
        legitimate_job_trains(s, "legit")
    finally:
        s.stop()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("attacker", ["127.0.0.2", "127.0.0.1"])
def test_probes_are_answered_under_a_slow_loris(tmp_path: Path, attacker: str) -> None:
    # 200 connections to the admin port each sending one byte of a request a second (from
    # another address, and from the probe's own): every /healthz and /readyz probe is answered,
    # since a new connection takes the slot of the one that waited longest for its request.
    port = free_port()
    s = Server(_lib.server_binary(), tmp_path, "--admin-listen", f"127.0.0.1:{port}")
    stop = threading.Event()
    opened = [0]

    def loris() -> None:
        socks: List[socket.socket] = []
        request = b"GET /metrics HTTP/1.1\r\nHost: x\r\n"
        while not stop.is_set():
            while len(socks) < 200 and not stop.is_set():
                k = socket.socket()
                k.settimeout(2)
                try:
                    k.bind((attacker, 0))
                    k.connect(("127.0.0.1", port))
                    k.send(request[:1])
                    socks.append(k)
                    opened[0] += 1
                except OSError:
                    k.close()
                    break
            alive = []
            for k in socks:
                try:
                    k.send(b"X-Slow: 1\r\n"[:1])
                    alive.append(k)
                except OSError:  # closed by the server to make room: open another
                    k.close()
            socks = alive
            stop.wait(1.0)
        for k in socks:
            k.close()

    t = threading.Thread(target=loris, daemon=True)
    try:
        t.start()
        time.sleep(2.0)  # the loris holds its connections
        # 40 probes, a quarter second apart, while the loris goes on. Each may take its time (a
        # loaded machine is slow, not wrong); what fails is a probe refused, reset or unanswered.
        answered, failures = 0, []
        deadline = time.monotonic() + 120  # only against a hang: 40 probes take ~10 s
        while answered + len(failures) < 40 and time.monotonic() < deadline:
            path = ("/healthz", "/readyz")[(answered + len(failures)) % 2]
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=15) as r:
                    if r.status == 200:
                        answered += 1
                    else:
                        failures.append(f"{path}: HTTP {r.status}")
            except OSError as e:
                failures.append(f"{path}: {type(e).__name__}: {e}")
            time.sleep(0.25)
        assert opened[0] >= 200, f"the loris opened only {opened[0]} connections"
        assert not failures and answered == 40, f"{answered} probes answered, {len(failures)} failed: {failures[:3]}"
    finally:
        stop.set()
        t.join(10)
        s.stop()


def test_pulls_that_never_read_cannot_pin_versions_past_the_budget(tmp_path: Path) -> None:
    # The attack: a 64 MiB job, and for each of 20 versions one pull that is answered
    # and never read, each pinning a version the job has left behind. Pinned versions count in
    # --max-memory-mb; once it is full the oldest such pulls are ended (RESOURCE_EXHAUSTED: pull
    # again), and the job trains on.
    admin = f"127.0.0.1:{free_port()}"
    s = Server(_lib.server_binary(), tmp_path, "--max-memory-mb", "600", "--max-stream-mb", "256", "--admin-listen", admin)
    try:
        n = 16 << 20  # 64 MiB of fp32
        p = np.zeros(n, np.float32)
        ch = channel(s.addr)
        before = rss_mib(s.proc.pid)
        pulls = []
        with RssPeak(s.proc.pid) as rss:
            with gradagg.Client(s.addr, "victim", 0, 1, optimizer=gradagg.SGD(lr=0.5), incarnation=7, **FAST) as c:
                c.add_tensor("w", p)
                c.init()
                g = np.ones(n, np.float32)
                for v in range(20):
                    pulls.append(ch.unary_stream(SERVICE + "Pull")(pull_request("victim", 0, 7, v), timeout=120))
                    next(pulls[-1])  # the answer has begun: the version is pinned; nothing more is read
                    c.step([g])
                assert c.version == 20
        text = urllib.request.urlopen(f"http://{admin}/metrics", timeout=10).read().decode()
        reclaimed = float(next(l.split()[-1] for l in text.splitlines() if l.startswith("gradagg_pulls_reclaimed_total ")))
        print(f"RSS {before:.0f} -> peak {rss.peak:.0f} MiB, {reclaimed:.0f} pulls reclaimed")
        assert reclaimed >= 5, text
        assert rss.peak < 600 + OVERHEAD_MB, f"RSS {before:.0f} -> {rss.peak:.0f} MiB"
        ended = 0
        for call in pulls:
            try:
                for _ in call:
                    pass
            except grpc.RpcError as e:
                if e.code() == grpc.StatusCode.RESOURCE_EXHAUSTED:
                    assert "superseded version" in (e.details() or "")
                    ended += 1
        assert ended >= 5
        assert np.array_equal(p, np.full(n, -10.0, np.float32))
    finally:
        s.stop()


def joins_then_refused(ch: grpc.Channel, prefix: str, n: int) -> str:
    """Joins rank 0 of jobs prefix-0 .. prefix-(n-1) (one rank each), then prefix-n, which must be
    refused with RESOURCE_EXHAUSTED: returns its details."""
    for i in range(n):
        unary(ch, "Join", join_request(f"{prefix}-{i}", 0, 7, 1))
    with pytest.raises(grpc.RpcError) as refused:
        unary(ch, "Join", join_request(f"{prefix}-{n}", 0, 7, 1))
    assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED, refused.value
    return refused.value.details() or ""


def wait_unused_gone(s: Server, job: str, seconds: float = 30) -> None:
    """Until the log says job was removed as never pushed to (--unused-job-expiry-s)."""
    deadline = time.monotonic() + seconds
    while f"job '{job}' removed at version 0 (never pushed to" not in s.log.read_text(errors="replace"):
        assert time.monotonic() < deadline, f"the unused job {job} never went"
        time.sleep(0.2)


def test_joins_cannot_take_job_slots_for_good(tmp_path: Path) -> None:
    # Joins to distinct job names from one client, never pushing and never heartbeating: at most
    # --max-unused-jobs-per-client of them are created (the next Join is refused naming the
    # flag), and they go --unused-job-expiry-s after their ranks are lost; then new jobs are
    # created again and a legitimate job trains.
    s = Server(_lib.server_binary(), tmp_path, "--max-jobs", "8", "--max-unused-jobs-per-client", "4",
               "--unused-job-expiry-s", "1", "--rank-lost-ms", "400")
    try:
        ch = channel(s.addr)
        details = joins_then_refused(ch, "squat", 4)
        assert "created 4 jobs that never got a push" in details and "--max-unused-jobs-per-client" in details
        for i in range(4):
            wait_unused_gone(s, f"squat-{i}", 20)
        unary(ch, "Join", join_request("squat-4", 0, 7, 1))  # a slot again
        legitimate_job_trains(s, "legit")
    finally:
        s.stop()


def open_fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def test_jobs_stop_at_the_file_descriptors_the_journals_may_hold(tmp_path: Path) -> None:
    # RLIMIT_NOFILE soft 300, hard 320: the server raises it to 320, keeps 256 for connections,
    # so 64 descriptors for journals: 32 jobs with two journal copies. The 33rd Join is refused
    # naming the limit, the server keeps accepting connections and answering probes, and once
    # the unused jobs expired a legitimate job trains.
    s = Server(_lib.server_binary(), tmp_path, "--journal-copies", "2", "--max-jobs", "1000",
               "--max-unused-jobs-per-client", "1000", "--unused-job-expiry-s", "1", "--rank-lost-ms", "400",
               nofile=(300, 320))
    try:
        log = s.log.read_text(errors="replace")
        assert "RLIMIT_NOFILE 320 (raised to the hard limit), 256 kept" in log, log[-3000:]
        assert "leaves 64 for journals, so at most 32 jobs, not --max-jobs 1000" in log, log[-3000:]
        details = joins_then_refused(channel(s.addr), "many", 32)
        assert "RLIMIT_NOFILE" in details and "'many-32' not created" in details, details
        assert open_fds(s.proc.pid) < 320 - 128, open_fds(s.proc.pid)
        # New connections are accepted and probes answered (a channel of its own, not shared).
        for _ in range(20):
            fresh = grpc.insecure_channel(s.addr, options=[("grpc.use_local_subchannel_pool", 1)])
            assert fresh.unary_unary("/grpc.health.v1.Health/Check")(b"", timeout=10) == b"\x08\x01"  # SERVING
            fresh.close()
        wait_unused_gone(s, "many-0")
        legitimate_job_trains(s, "legit")
    finally:
        s.stop()


def test_a_scrape_stays_small_however_many_jobs(tmp_path: Path) -> None:
    # 300 jobs: /metrics answers at once, with per-job series for the oldest 256 only.
    admin = f"127.0.0.1:{free_port()}"
    s = Server(_lib.server_binary(), tmp_path, "--max-jobs", "400", "--max-unused-jobs-per-client", "400",
               "--admin-listen", admin)
    try:
        ch = channel(s.addr)
        for i in range(300):
            unary(ch, "Join", join_request(f"many-{i:03d}", 0, 7, 1))
        t0 = time.monotonic()
        text = urllib.request.urlopen(f"http://{admin}/metrics", timeout=10).read().decode()
        took = time.monotonic() - t0
        lines = text.splitlines()
        assert "gradagg_jobs 300" in lines and "gradagg_metrics_jobs_omitted 44" in lines
        versions = [l for l in lines if l.startswith("gradagg_version{")]
        assert len(versions) == 256 and 'ga_job="many-000"' in versions[0], versions[:2]
        assert not any('ga_job="many-299"' in l for l in lines)
        assert len(text) < 4 << 20 and took < 5, (len(text), took)
    finally:
        s.stop()


def test_thousands_of_jobs_stay_small_and_restart_small(tmp_path: Path) -> None:
    # Up to 5000 jobs that each hold a journal in two copies (as many as the descriptor limit
    # allows): two open files per job and a few KiB of memory each, before and after a restart
    # that restores all of them; /metrics answers at once throughout.
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    hard = 1 << 20 if hard == resource.RLIM_INFINITY else min(hard, 1 << 20)
    jobs = min(5000, (hard - max(256, hard // 4)) // 2 - 16)
    if jobs < 500:
        pytest.skip(f"RLIMIT_NOFILE {hard} holds too few journals")
    admin = f"127.0.0.1:{free_port()}"
    s = Server(_lib.server_binary(), tmp_path, "--journal-copies", "2", "--max-jobs", str(jobs),
               "--max-unused-jobs-per-client", str(jobs), "--unused-job-expiry-s", "3600",
               "--rank-lost-ms", "3600000", "--member-lease-ms", "3600000", "--admin-listen", admin)
    try:
        ch = channel(s.addr)
        base_rss = rss_mib(s.proc.pid)
        for i in range(jobs):
            unary(ch, "Join", join_request(f"many-{i}", 0, 7, 1))
        rss, fds = rss_mib(s.proc.pid), open_fds(s.proc.pid)
        print(f"{jobs} jobs: RSS {base_rss:.0f} -> {rss:.0f} MiB, {fds} descriptors")
        assert 2 * jobs <= fds < 2 * jobs + 64
        assert rss < base_rss + jobs * 48 / 1024, (base_rss, rss)  # under 48 KiB a job
        t0 = time.monotonic()
        text = urllib.request.urlopen(f"http://{admin}/metrics", timeout=10).read().decode()
        assert f"gradagg_jobs {jobs}" in text.splitlines() and time.monotonic() - t0 < 5
        s.stop(signal.SIGKILL)
        t0 = time.monotonic()
        s = s.restart()
        took = time.monotonic() - t0
        rss, fds = rss_mib(s.proc.pid), open_fds(s.proc.pid)
        print(f"restart: {took:.1f} s, RSS {rss:.0f} MiB, {fds} descriptors")
        text = urllib.request.urlopen(f"http://{admin}/metrics", timeout=10).read().decode()
        assert f"gradagg_jobs {jobs}" in text.splitlines()
        assert 2 * jobs <= fds < 2 * jobs + 64
        assert rss < base_rss + jobs * 48 / 1024, (base_rss, rss)
    finally:
        s.stop()


def test_idle_connections_stay_within_grpc_memory(tmp_path: Path) -> None:
    # gRPC's own memory (connections' buffers and state) is bounded by --grpc-memory-mb, its
    # resource quota: past it gRPC closes idle connections. 3000 idle connections against 16 MiB
    # stay under the base + 2 x 16 + 16 MiB (docs/reliability.md, "The bound"); without the
    # quota they take 21 KiB each (about 62 MiB). Then a legitimate job trains.
    quota = 16
    s = Server(_lib.server_binary(), tmp_path, "--grpc-memory-mb", str(quota))
    try:
        base = rss_mib(s.proc.pid)
        chs = []
        for _ in range(3000):
            ch = grpc.insecure_channel(s.addr, options=[("grpc.use_local_subchannel_pool", 1)])
            # wait_for_ready: a connect that fails at once is retried after its backoff (Debian 13's
            # grpcio now and then reports a connect as failed with EINVAL that the kernel completed).
            check = ch.unary_unary("/grpc.health.v1.Health/Check")
            assert check(b"", timeout=10, wait_for_ready=True) == b"\x08\x01"
            chs.append(ch)
        time.sleep(1.0)
        rss, fds = rss_mib(s.proc.pid), open_fds(s.proc.pid)
        print(f"3000 connections, --grpc-memory-mb {quota}: RSS {base:.0f} -> {rss:.0f} MiB, {fds} descriptors")
        assert rss < base + 3 * quota, (base, rss)
        assert fds < 3000, fds  # idle connections were closed
        legitimate_job_trains(s, "legit")
        for ch in chs:
            ch.close()
    finally:
        s.stop()


@pytest.mark.parametrize("checkpoint_steps", [0, 1, 2])
@pytest.mark.parametrize("stop", [signal.SIGKILL, signal.SIGTERM])
@pytest.mark.parametrize("backend", ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(
    gradagg.cuda_device_count() == 0, reason="no CUDA device: the CUDA store is not tried"))])
def test_a_step_that_overflows_is_not_published(tmp_path: Path, checkpoint_steps: int, stop: int,
                                                backend: str) -> None:
    # Two ranks push finite gradients of 3e38: their sum is +Inf. The step is not published:
    # every rank is told (NonFiniteError naming the tensor and the versions), keeps the last
    # finite version, the log says so at ERROR and gradagg_overflows_total counts it; a restart
    # (SIGKILL or SIGTERM) replays to the same refusal instead of serving Inf, also when a
    # checkpoint was due at the refused version (none is written of it).
    admin = f"127.0.0.1:{free_port()}"
    ckpt = ["--checkpoint-steps", str(checkpoint_steps)] if checkpoint_steps else []
    s = Server(_lib.server_binary(), tmp_path, "--admin-listen", admin, "--backend", backend, *ckpt)
    try:
        def worker(r: int) -> Any:
            p = np.zeros(1024, np.float32)
            with gradagg.Client(s.addr, "overflow", r, 2, optimizer=gradagg.SGD(lr=1.0), **FAST) as c:
                c.add_tensor("w", p)
                c.init()
                c.step([np.full(1024, -1.0, np.float32)])  # version 1: w = 1
                with pytest.raises(errors.GradaggError) as e:
                    c.step([np.full(1024, -3e38, np.float32)])
                return e.value, p.copy()

        results = run_ranks(worker, 2, timeout=60)
        for err, p in results:
            assert err.name == "E_NONFINITE", err
            assert "tensor 'w' would hold NaN or Inf, so version 2 is not published" in str(err), str(err)
            assert np.array_equal(p, np.ones(1024, np.float32))  # the last finite version
        assert "step 1 overflowed" in s.log.read_text(errors="replace")
        text = urllib.request.urlopen(f"http://{admin}/metrics", timeout=10).read().decode()
        assert "gradagg_overflows_total 1" in text.splitlines()
        deadline = time.monotonic() + 30
        while checkpoint_steps and "checkpoint of version 2" not in s.log.read_text(errors="replace"):
            assert time.monotonic() < deadline, "the checkpoint due at version 2 was never dealt with"
            time.sleep(0.01)  # before SIGKILL: the checkpoint task has run (and written nothing)
        s.stop(stop)
        checkpointed = {int(f.name[len("checkpoint-"):-len(".gack")]) for f in tmp_path.rglob("checkpoint-*.gack")}
        assert 2 not in checkpointed, "the refused version was checkpointed"
        assert (1 in checkpointed) == (checkpoint_steps == 1), checkpointed  # the premise: checkpoints are written
        s = s.restart()
        with pytest.raises(errors.GradaggError, match="version 2 is not published"):
            with gradagg.Client(s.addr, "overflow", 0, 2, optimizer=gradagg.SGD(lr=1.0), resume=True, **FAST) as c:
                c.add_tensor("w", np.zeros(1024, np.float32))
                c.init()
                c.step([np.zeros(1024, np.float32)])
    finally:
        s.stop()


# Client-chosen names and reasons that would break a line, a label or a document: a newline
# followed by a forged log line, a carriage return, a terminal escape, quotes and backslashes,
# non-ASCII, and the longest name a server takes (255 bytes).
HOSTILE_NAMES = [
    "evil\n2026-11-27T00:00:00.000Z ERROR forged line",
    "cr\rtab\t\x1b[31mred\x7f",
    'quote"back\\slash\\x0a',
    "caf\u00e9-\u20ac-\U0001F600",
    "x" * 250 + "\n\x01\x02",
]
LOG_LINE = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z (ERROR|WARN |INFO |DEBUG) ")


def test_client_strings_are_escaped_in_logs_metrics_and_the_cli(tmp_path: Path) -> None:
    # Each name is a one-rank job whose rank fails with a reason holding a newline too: the
    # server logs the name and the reason (the failure at ERROR); every line of the log is one
    # line of its own format, /metrics passes promtool, the CLI prints one table row per job and
    # JSON that parses back to the exact names.
    admin = f"127.0.0.1:{free_port()}"
    s = Server(_lib.server_binary(), tmp_path, "--admin-listen", admin, "--log-level", "debug")
    try:
        for name in HOSTILE_NAMES:
            c = gradagg.Client(s.addr, name, 0, 1, optimizer=gradagg.SGD(lr=0.1), **FAST)
            c.add_tensor("w\nforged", np.zeros(16, np.float32))
            c.init()
            c.close(failure=f"boom\n{name}")
        log = s.log.read_text(errors="strict")
        assert log.count("ERROR job ") >= len(HOSTILE_NAMES), log[-3000:]  # every failure logged
        for line in log.splitlines():
            assert LOG_LINE.match(line), f"a log line not of the log's format: {line!r}"
        assert "\\x0a2026-11-27T00:00:00.000Z ERROR forged line" in log  # escaped, on the line it belongs to
        assert "quote\"back\\\\slash\\\\x0a" in log  # a backslash is doubled: an escape is never the client's
        scrape = urllib.request.urlopen(f"http://{admin}/metrics", timeout=10).read().decode()
        if shutil.which("promtool"):
            r = subprocess.run(["promtool", "check", "metrics"], input=scrape, capture_output=True, text=True,
                               timeout=60)
            assert r.returncode == 0 and not r.stdout.strip() and not r.stderr.strip(), (r.stdout, r.stderr)
        cli_bin = str(build_dir() / "client" / "gradagg")
        rows = subprocess.run([cli_bin, "--server", s.addr, "jobs"], capture_output=True, text=True, timeout=60)
        assert rows.returncode == 0, rows.stderr
        assert len(rows.stdout.splitlines()) == 1 + len(HOSTILE_NAMES), rows.stdout
        doc = subprocess.run([cli_bin, "--json", "--server", s.addr, "jobs"], capture_output=True, text=True,
                             timeout=60)
        listed = {j["job"] for shard in json.loads(doc.stdout)["shards"] for j in shard["jobs"]}
        assert listed == set(HOSTILE_NAMES)
        for name in HOSTILE_NAMES:
            st = subprocess.run([cli_bin, "--server", s.addr, "status", name], capture_output=True, text=True,
                                timeout=60)
            assert st.returncode == 0 and st.stdout.startswith("job "), (st.stdout, st.stderr)
            assert all(not line.startswith("2026-11-27") for line in st.stdout.splitlines()), st.stdout
    finally:
        s.stop()
