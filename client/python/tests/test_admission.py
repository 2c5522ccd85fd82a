"""Admission caps beside the per-host ones (docs/operations.md, "Admission: hosts, tokens, relays
and NATs"). With bearer tokens on, one job's token holds at most --max-streams-per-token streams
and --max-unused-jobs-per-token unused jobs, its lanes counted with the job, whichever host they
come from; --trusted-client-hosts lets a relay or a NAT (many legitimate jobs behind one
address) past the per-host caps, while the per-job and per-token ones still hold. Hand-built
gRPC (python3-grpcio), as in test_hostile.py."""
from __future__ import annotations

import subprocess
import time
from pathlib import Path
from typing import List, Optional

import grpc
import pytest

from gradagg import _lib
from _wire import HeldStream, bearer, channel, init_chunk, join_request, push_chunk, unary
from conftest import Server

N = 1024
TOKENS = {"victim": "victim-token-0123456789", "other": "other-token-0123456789"}


def token_server(tmp_path: Path, *extra: str) -> Server:
    tokens = tmp_path / "tokens"
    tokens.write_text("".join(f"{job} {token}\n" for job, token in TOKENS.items()))
    return Server(_lib.server_binary(), tmp_path, "--auth-tokens", str(tokens), *extra)


def md(job: str) -> Optional[List]:
    """The metadata of a call for job: its base job's token, or none for a job without one."""
    base = job.split("/lane")[0]
    return bearer(TOKENS[base]) if base in TOKENS else None


def member(s: Server, job: str, incarnation: int = 7) -> grpc.Channel:
    """A job of one rank whose rank 0 (this incarnation) holds a tensor "w" of N elements."""
    ch = channel(s.addr)
    unary(ch, "Join", join_request(job, 0, incarnation, 1), metadata=md(job))
    init = HeldStream(ch, "InitTensors", [init_chunk(job, 0, incarnation, "w", [N], 0, N, bytes(4 * N))],
                      metadata=md(job))
    init.release()
    assert init.outcome(30)[0] == grpc.StatusCode.OK
    return ch


def held_push(ch: grpc.Channel, job: str) -> HeldStream:
    """A Push stream of step 0 that sends its chunk and stays open until released."""
    return HeldStream(ch, "Push", [push_chunk(job, 0, 7, 0, "w", 0, N, bytes(4 * N))], metadata=md(job))


def still_open(streams: List[HeldStream]) -> bool:
    time.sleep(1.0)  # long enough for a refusal at the first chunk to have come back
    return all(st.outcome(0)[0] is None for st in streams)


def end_all(streams: List[HeldStream]) -> None:
    for st in streams:
        st.release()
    for st in streams:
        assert st.outcome(30)[0] is not None, "a released stream never ended"


def join_refused(ch: grpc.Channel, job: str) -> str:
    with pytest.raises(grpc.RpcError) as refused:
        unary(ch, "Join", join_request(job, 0, 7, 1), metadata=md(job))
    assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED, refused.value
    return refused.value.details() or ""


def test_a_token_holds_at_most_its_streams_its_lanes_with_it(tmp_path: Path) -> None:
    s = token_server(tmp_path, "--max-streams-per-token", "3")
    try:
        job, lane, other = member(s, "victim"), member(s, "victim/lane1"), member(s, "other")
        held = [held_push(job, "victim"), held_push(job, "victim"), held_push(lane, "victim/lane1")]
        assert still_open(held)
        # The lane, from another connection: the job's token is full (no per-job or per-host cap is).
        fourth = held_push(channel(s.addr), "victim/lane1")
        code, details = fourth.outcome(30)
        assert code == grpc.StatusCode.RESOURCE_EXHAUSTED, (code, details)
        assert "the token of job 'victim' has 3 streams open" in details, details
        assert "--max-streams-per-token" in details, details
        fourth.release()
        theirs = held_push(other, "other")  # another token's stream from the same host is let in
        assert still_open([theirs])
        end_all(held[:1])
        again = held_push(lane, "victim/lane1")
        assert still_open([again]), "a slot of the token did not come back"
        end_all(held[1:] + [again, theirs])
    finally:
        s.stop()


def test_a_token_creates_at_most_its_unused_jobs(tmp_path: Path) -> None:
    s = token_server(tmp_path, "--max-unused-jobs-per-token", "2")
    try:
        ch = channel(s.addr)
        unary(ch, "Join", join_request("victim", 0, 7, 1), metadata=md("victim"))
        unary(ch, "Join", join_request("victim/lane1", 0, 7, 1), metadata=md("victim"))
        details = join_refused(ch, "victim/lane2")
        assert "the token of job 'victim' has 2 jobs that never got a push" in details, details
        assert "--max-unused-jobs-per-token" in details, details
        unary(ch, "Join", join_request("other", 0, 7, 1), metadata=md("other"))  # its own token's count
    finally:
        s.stop()


@pytest.mark.parametrize("trusted,capped", [("", True), ("127.0.0.1", False), ("10.0.0.0/8, 127.0.0.0/8", False),
                                            ("10.0.0.0/8,::1", True)])
def test_a_trusted_host_is_not_capped_per_host(tmp_path: Path, trusted: str, capped: bool) -> None:
    """Per-host caps of 2 streams and 2 unused jobs: a third of each from 127.0.0.1 is refused
    naming the flag (and the way out), unless the host is trusted; the per-job cap still holds."""
    extra = ["--trusted-client-hosts", trusted] if trusted else []
    s = Server(_lib.server_binary(), tmp_path, "--max-streams-per-client", "2", "--max-unused-jobs-per-client", "2",
               "--max-streams-per-job", "3", *extra)
    try:
        ch = member(s, "relayed")  # one unused job until its first push
        held = [held_push(ch, "relayed") for _ in range(2)]
        assert still_open(held)
        third = held_push(ch, "relayed")
        if capped:
            code, details = third.outcome(30)
            assert code == grpc.StatusCode.RESOURCE_EXHAUSTED, (code, details)
            assert "--max-streams-per-client" in details and "--trusted-client-hosts" in details, details
        else:
            assert still_open([third])
            fourth = held_push(channel(s.addr), "relayed")  # the job's own cap (3) holds for a trusted host
            code, details = fourth.outcome(30)
            assert code == grpc.StatusCode.RESOURCE_EXHAUSTED and "--max-streams-per-job" in details, (code, details)
            fourth.release()
        end_all(held + [third])  # their pushes close step 0: "relayed" is no longer unused
        unary(ch, "Join", join_request("squat-1", 0, 7, 1))
        unary(ch, "Join", join_request("squat-2", 0, 7, 1))
        if capped:
            details = join_refused(ch, "squat-3")
            assert "created 2 jobs that never got a push" in details, details
            assert "--max-unused-jobs-per-client" in details and "--trusted-client-hosts" in details, details
        else:
            unary(ch, "Join", join_request("squat-3", 0, 7, 1))
    finally:
        s.stop()


@pytest.mark.parametrize("entry", ["10.0.0.1/8", "relay.example", "10.0.0.0/33", "10.0.0.1,,10.0.0.2"])
def test_a_bad_trusted_host_entry_stops_the_start(tmp_path: Path, entry: str) -> None:
    r = subprocess.run([_lib.server_binary(), "--listen", "127.0.0.1:0", "--admin-listen", "", "--data-dir",
                        str(tmp_path / "data"), "--trusted-client-hosts", entry],
                       capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert r.returncode != 0, r
    assert "--trusted-client-hosts" in r.stderr and "listening on" not in r.stdout, r.stderr
