"""Shard discovery (docs/sdk.md, "Shard discovery"): a shard set named by one DNS name,
shards://NAME:PORT. Three real servers listen on 127.0.0.2-4 with one port; NAME resolves to
all three, in an order unrelated to the shards' indices, through a hosts file that only the
workers see: cwrap's nss_wrapper (LD_PRELOAD=libnss_wrapper.so, NSS_WRAPPER_HOSTS), which
answers the process's getaddrinfo from that file. Workers given the
name train exactly as workers given the list in index order; a server in no set, a set missing
a shard, and a shard that comes up late are each handled as documented."""
from __future__ import annotations

import os
import ctypes
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Dict, List, Tuple

import pytest

from conftest import Server
from gradagg import _lib
from _util import build_dir

NAME = "gradagg-set.test"
IPS = ["127.0.0.3", "127.0.0.2", "127.0.0.4"]  # shard i listens on IPS[i]; the name lists them sorted

NSS_WRAPPER = "libnss_wrapper.so"  # Debian's libnss-wrapper (scripts/bootstrap installs it)


def free_port() -> int:
    """A port free on every IP of the set."""
    for _ in range(50):
        socks = []
        try:
            s0 = socket.socket()
            s0.bind((IPS[0], 0))
            port = s0.getsockname()[1]
            socks.append(s0)
            for ip in IPS[1:]:
                s = socket.socket()
                s.bind((ip, port))
                socks.append(s)
            return port
        except OSError:
            continue
        finally:
            for s in socks:
                s.close()
    raise RuntimeError("no port free on every IP")


def start_shard(tmp: Path, i: int, port: int, *extra: str) -> Server:
    d = tmp / f"shard{i}"
    d.mkdir(exist_ok=True)
    return Server(_lib.server_binary(), d, "--shard-count", "3", "--shard-index", str(i), "--advertise-address",
                  f"{IPS[i]}:{port}", *extra, listen=f"{IPS[i]}:{port}")


def resolver(tmp: Path) -> Dict[str, str]:
    """The environment under which NAME resolves to every IP of the set (and nothing else changes)."""
    try:
        ctypes.CDLL(NSS_WRAPPER)
    except OSError as e:
        pytest.fail(f"{NSS_WRAPPER}: {e}: install libnss-wrapper (scripts/bootstrap does)")
    hosts = tmp / "hosts"
    hosts.write_text("127.0.0.1 localhost\n" + "".join(f"{ip} {NAME}\n" for ip in sorted(IPS)))
    return {"LD_PRELOAD": NSS_WRAPPER, "NSS_WRAPPER_HOSTS": str(hosts)}


WORKER = """
import hashlib, sys, numpy as np, gradagg
server, job, rank = sys.argv[1], sys.argv[2], int(sys.argv[3])
w = np.zeros(3000, np.float32)
opts = dict(optimizer=gradagg.SGD(lr=0.5), shard_split_elements=1000, call_timeout_ms=10000,
            step_timeout_ms=30000, retry_budget_ms=int(sys.argv[4]))
try:
    with gradagg.Client(server, job, rank, 2, **opts) as c:
        c.add_tensor("w", w, codec="2bit", threshold=0.25)
        c.init()
        for s in range(3):
            c.step([np.sin(np.arange(3000, dtype=np.float32) * (rank + 1) + s).astype(np.float32)])
        print("w", hashlib.sha256(w.tobytes()).hexdigest(), float(np.abs(w).sum()))
except gradagg.GradaggError as e:
    print("error", type(e).__name__, e)
    sys.exit(3)
"""


def spawn(server: str, job: str, rank: int, env: Dict[str, str], budget_ms: int) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", WORKER, server, job, str(rank), str(budget_ms)],
                            env={**os.environ, **env}, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def workers(server: str, job: str, env: Dict[str, str], budget_ms: int = 20000,
            server1: str = "") -> List[Tuple[int, str]]:
    """Two ranks (rank 1 given server1 when set) under the resolver env."""
    procs = [spawn(server1 if r and server1 else server, job, r, env, budget_ms) for r in range(2)]
    return [(p.wait(timeout=120), p.stdout.read()) for p in procs]  # type: ignore[union-attr]


def lines(out: str, key: str) -> List[str]:
    return [l.split(" ", 1)[1] for l in out.splitlines() if l.startswith(key + " ")]


def test_a_set_named_by_one_name_trains_like_its_list(tmp_path: Path) -> None:
    port = free_port()
    shards = [start_shard(tmp_path, i, port) for i in range(3)]
    env = resolver(tmp_path)
    try:
        listed = ",".join(f"{ip}:{port}" for ip in IPS)
        by_name = workers(f"shards://{NAME}:{port}", "named", env)
        by_list = workers(listed, "listed", env)
        # a rank given the name and a rank given the list agree on every shard's place
        mixed = workers(f"shards://{NAME}:{port}", "mixed", env, server1=listed)
        for rc, out in by_name + by_list + mixed:
            assert rc == 0, out
        # the same placement as the list in index order: the same bits (and they moved)
        (w,) = lines(by_name[0][1], "w")
        assert float(w.split()[1]) > 0 and lines(by_list[0][1], "w") == lines(by_name[1][1], "w") == [w]
        assert lines(mixed[0][1], "w") == lines(mixed[1][1], "w") == [w]
        # every shard holds a part of the job, in index order (not the name's order)
        cli = str(build_dir() / "client" / "gradagg")
        r = subprocess.run([cli, "--server", f"shards://{NAME}:{port}", "jobs"], env={**os.environ, **env},
                           capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stderr
        assert [l.split()[0] for l in r.stdout.splitlines() if "named" in l] == [f"{ip}:{port}" for ip in IPS], r.stdout
    finally:
        for s in shards:
            s.stop()


def test_a_server_in_no_set_is_refused(tmp_path: Path) -> None:
    port = free_port()
    shards = [start_shard(tmp_path, i, port) for i in range(2)]
    d = tmp_path / "plain"
    d.mkdir()
    plain = Server(_lib.server_binary(), d, listen=f"{IPS[2]}:{port}")  # no --shard-count
    try:
        (rc, out), _ = workers(f"shards://{NAME}:{port}", "plain", resolver(tmp_path))
        assert rc == 3 and "ConfigError" in out and "is in no shard set" in out and f"{IPS[2]}:{port}" in out, out
    finally:
        for s in shards + [plain]:
            s.stop()


def test_a_missing_shard_is_waited_for_within_the_retry_budget(tmp_path: Path) -> None:
    port = free_port()
    shards = [start_shard(tmp_path, i, port) for i in range(2)]  # shard 2 not up
    env = resolver(tmp_path)
    try:
        (rc, out), _ = workers(f"shards://{NAME}:{port}", "short", env, budget_ms=1500)
        assert rc == 3 and "ServerUnavailableError" in out and "no answer from shard 2 of 3" in out, out
        # a shard that comes up while the workers wait (a restarting pod) is found
        procs = [spawn(f"shards://{NAME}:{port}", "late", r, env, 60000) for r in range(2)]
        time.sleep(2)
        assert all(p.poll() is None for p in procs), "the workers did not wait for the missing shard"
        shards.append(start_shard(tmp_path, 2, port))
        for p in procs:
            assert p.wait(timeout=120) == 0, p.stdout.read()  # type: ignore[union-attr]
    finally:
        for s in shards:
            s.stop()


def test_a_malformed_or_unknown_name_is_refused() -> None:
    import gradagg
    for bad in ("shards://no-port", "shards://:7070", "shards://h:70x0", "shards://[::1:7070"):
        with pytest.raises(gradagg.errors.InvalError, match="expected shards://NAME:PORT"):
            gradagg.Client(bad, "j", 0, 1, retry_budget_ms=0)
    with pytest.raises(gradagg.errors.ServerUnavailableError, match="does not resolve"):
        gradagg.Client("shards://no-such-host.invalid:7070", "j", 0, 1, retry_budget_ms=300, backoff_ms=50)
