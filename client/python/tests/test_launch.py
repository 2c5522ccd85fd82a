"""Workers that take their place in a job from the launcher's environment (docs/launch.md):
torchrun running the digits example, a Kubernetes indexed Job's JOB_COMPLETION_INDEX for Python
and C workers, the order of the variables, and what is refused. Real server, real processes."""
from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Dict

import numpy as np
import pytest

import gradagg
from gradagg.launch import Launch, from_environment
from _util import FAST, build_dir

REPO = Path(__file__).resolve().parents[3]
LAUNCH_VARS = ("GRADAGG_SERVER", "GRADAGG_JOB", "GRADAGG_RANK", "GRADAGG_WORLD_SIZE", "RANK", "WORLD_SIZE",
               "LOCAL_RANK", "TORCHELASTIC_RUN_ID", "JOB_COMPLETION_INDEX", "GRADAGG_AUTH_TOKEN",
               "GRADAGG_TLS_CA_FILE", "GRADAGG_TLS_CERT_FILE", "GRADAGG_TLS_KEY_FILE", "GRADAGG_TLS_TARGET_NAME",
               "GRADAGG_MIN_WORLD_SIZE", "TORCHELASTIC_RESTART_COUNT")


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for k in LAUNCH_VARS:
        monkeypatch.delenv(k, raising=False)


def worker_env(**launch: str) -> Dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in LAUNCH_VARS}
    env.update(launch)
    return env


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def skip_without_torchrun_store() -> None:
    """torchrun's rendezvous creates torch's TCPStore with its defaults, which from PyTorch 2.4 ask
    for libuv; a torch built without it (Debian 13's 2.6) cannot start torchrun at all."""
    from datetime import timedelta

    from torch.distributed import TCPStore
    try:
        TCPStore("127.0.0.1", 0, 1, True, timeout=timedelta(seconds=10))
    except RuntimeError as e:
        if "libuv" in str(e):
            pytest.skip(f"this torch's torchrun cannot start: {e}")
        raise


def test_torchrun_trains_the_digits_example(server, tmp_path: Path) -> None:
    skip_without_torchrun_store()
    torchrun = shutil.which("torchrun") or "/usr/bin/torchrun"
    # One node, its store on 127.0.0.1 and a free port (static rendezvous) rather than
    # --standalone's localhost:29400: a minimal root may not resolve localhost or this host's name,
    # and two runs at once would share the port. Debian 12's torchrun (PyTorch 1.13 on Python
    # 3.11) fails at start unless --redirects and --tee are single non-zero values (docs/launch.md).
    run_id = str(uuid.uuid4())
    r = subprocess.run([sys.executable, torchrun, "--nnodes", "1", "--nproc_per_node", "4", "--rdzv_backend", "static",
                        "--master_addr", "127.0.0.1", "--master_port", str(free_port()), "--node_rank", "0",
                        "--rdzv_id", run_id, "-r", "1", "-t", "1",
                        "--log_dir", str(tmp_path / "logs"), str(REPO / "examples" / "digits_torchrun.py"),
                        "--epochs", "3"],
                       env=worker_env(GRADAGG_SERVER=server.addr), cwd=tmp_path, capture_output=True, text=True,
                       timeout=300)
    out = r.stdout + r.stderr
    assert r.returncode == 0, out[-4000:]
    final = re.search(r"final accuracy ([0-9.]+) job (\S+) world (\d+) codec 2bit", out)
    assert final, out[-4000:]
    assert float(final.group(1)) > 0.9, final.group(0)
    # The job is torchrun's run id, the world its 4 processes.
    assert final.group(2) == run_id, final.group(2)
    assert final.group(3) == "4"
    steps = sorted(re.findall(r"rank (\d) steps (\d+)", out))
    assert [s[0] for s in steps] == ["0", "1", "2", "3"] and len({s[1] for s in steps}) == 1, steps


def test_torchrun_elastic_scales_up_during_training(server, tmp_path: Path) -> None:
    """torchrun --nnodes 1:2 (c10d rendezvous on 127.0.0.1): one node of 2 processes trains the
    elastic digits example; a second node joins mid-run, so torchrun stops the first node's
    workers (gradagg leaves the job for them on SIGTERM) and starts all 4 with new ranks. They go
    on with the same job from its version, the job's steps then have 4 contributors, and it
    ends with the fixed-membership accuracy."""
    skip_without_torchrun_store()
    try:  # Debian's /etc/hosts has it; a bare root (the fresh-machine tool's) may have no such file
        socket.getaddrinfo("localhost", None)
    except OSError:
        pytest.skip("torchrun's elastic agent binds 'localhost' for its workers' store, and it does not resolve here")
    torchrun = shutil.which("torchrun") or "/usr/bin/torchrun"
    run_id, port = str(uuid.uuid4()), free_port()
    cmd = [sys.executable, torchrun, "--nnodes", "1:2", "--nproc_per_node", "2", "--rdzv_backend", "c10d",
           "--rdzv_endpoint", f"127.0.0.1:{port}", "--rdzv_id", run_id, "--rdzv_conf",
           "join_timeout=120,last_call_timeout=1", "--monitor_interval", "1", "--max_restarts", "3", "-r", "1", "-t",
           "1"]
    script = [str(REPO / "examples" / "digits_elastic.py"), "--min-world", "2", "--max-world", "4", "--epochs", "3",
              "--step-sleep", "0.25"]
    env = worker_env(GRADAGG_SERVER=server.addr)
    nodes = [subprocess.Popen([*cmd, "--log_dir", str(tmp_path / "logs-a"), *script], env=env, cwd=tmp_path,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)]
    from test_cli import cli_json
    end = time.monotonic() + 120
    while True:  # the first node trains alone for a few steps
        rc, doc = cli_json("--server", server.addr, "status", run_id)
        if rc == 0 and doc["shards"][0]["version"] >= 5:
            break
        assert time.monotonic() < end and nodes[0].poll() is None, nodes[0].communicate()[0][-4000:]
        time.sleep(0.2)
    nodes.append(subprocess.Popen([*cmd, "--log_dir", str(tmp_path / "logs-b"), *script], env=env, cwd=tmp_path,
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
    outs = [n.communicate(timeout=300)[0] for n in nodes]
    out = "\n".join(outs)
    assert all(n.returncode == 0 for n in nodes), out[-6000:]
    final = re.search(r"final accuracy ([0-9.]+) job (\S+) steps (\d+)", out)
    assert final and float(final.group(1)) > 0.9 and final.group(2) == run_id, out[-4000:]
    ends = re.findall(r"rank (\d) world (\d) from version (\d+) to (\d+)", out)
    # The last round: four ranks, started after the first node's steps, ended at the job's last step.
    assert sorted(e[0] for e in ends if e[1] == "4") == ["0", "1", "2", "3"], ends
    assert all(int(e[2]) >= 5 and e[3] == final.group(3) for e in ends if e[1] == "4"), ends
    rc, doc = cli_json("--server", server.addr, "status", run_id)
    steps = doc["shards"][0]["recent_steps"]
    assert steps[0]["ranks"] == [0, 1] and steps[-1]["ranks"] == [0, 1, 2, 3], steps
    assert doc["shards"][0]["finished"], doc


PY_WORKER = """
import numpy as np, gradagg
w = np.zeros(4, np.float32)
with gradagg.Client(optimizer=gradagg.SGD(lr=1.0), call_timeout_ms=10000, step_timeout_ms=30000) as c:
    c.add_tensor("w", w)
    c.init()
    c.step([np.full(4, c.rank + 1, np.float32)])
    print("rank", c.rank, "of", c.world_size, "job", c.job, "w", " ".join(f"{x:g}" for x in w))
"""


def test_an_indexed_job_gives_python_workers_their_ranks(server) -> None:
    procs = [subprocess.Popen([sys.executable, "-c", PY_WORKER], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True, env=worker_env(GRADAGG_SERVER=server.addr, GRADAGG_JOB="indexed",
                                                        GRADAGG_WORLD_SIZE="3", JOB_COMPLETION_INDEX=str(i)))
             for i in range(3)]
    outs = [p.communicate(timeout=120)[0] for p in procs]
    assert all(p.returncode == 0 for p in procs), outs
    # mean of 1, 2, 3 = 2; SGD with lr 1 from 0: -2
    assert sorted(o.strip() for o in outs) == [f"rank {i} of 3 job indexed w -2 -2 -2 -2" for i in range(3)], outs


def test_an_indexed_job_gives_c_workers_their_ranks(server) -> None:
    """softmax_train (the C SDK example the Kubernetes example Job runs) with no --rank, --world,
    --job or --server: ga_client_options_from_env."""
    program = build_dir() / "client" / "softmax_train"
    assert program.is_file(), f"{program} is not built"
    procs = [subprocess.Popen([str(program), "--steps", "20"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True, env=worker_env(GRADAGG_SERVER=server.addr, GRADAGG_JOB="softmax-indexed",
                                                        GRADAGG_WORLD_SIZE="2", JOB_COMPLETION_INDEX=str(i)))
             for i in range(2)]
    outs = [p.communicate(timeout=120)[0] for p in procs]
    assert all(p.returncode == 0 for p in procs), outs
    assert "2 ranks" in outs[0] and re.search(r"^final loss ", outs[0], re.M), outs[0]
    for i, o in enumerate(outs):
        assert re.search(rf"^stats rank {i} .* steps 20 ", o, re.M), o


def test_the_order_of_the_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GRADAGG_SERVER", "a:1,b:2")
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "run")
    monkeypatch.setenv("JOB_COMPLETION_INDEX", "3")
    monkeypatch.setenv("WORLD_SIZE", "8")
    assert from_environment() == Launch("a:1,b:2", "run", 3, 8, 0)
    monkeypatch.setenv("RANK", "5")  # torchrun's rank before the pod's index
    monkeypatch.setenv("LOCAL_RANK", "1")
    assert from_environment() == Launch("a:1,b:2", "run", 5, 8, 1)
    monkeypatch.setenv("GRADAGG_RANK", "6")
    monkeypatch.setenv("GRADAGG_WORLD_SIZE", "7")
    monkeypatch.setenv("GRADAGG_JOB", "mine")
    assert from_environment() == Launch("a:1,b:2", "mine", 6, 7, 1)
    # arguments in code win over every variable
    assert from_environment(["h:1", "h:2"], "code", 0, 1) == Launch("h:1,h:2", "code", 0, 1, 1)


def test_what_is_missing_or_malformed_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ValueError, match="GRADAGG_SERVER"):
        from_environment()
    monkeypatch.setenv("GRADAGG_SERVER", "h:1")
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "none")  # torchrun without --rdzv-id: not a name
    with pytest.raises(ValueError, match="TORCHELASTIC_RUN_ID"):
        from_environment(rank=0, world_size=1)
    with pytest.raises(ValueError, match="JOB_COMPLETION_INDEX"):
        from_environment(job="j", world_size=1)
    with pytest.raises(ValueError, match="WORLD_SIZE"):
        from_environment(job="j", rank=0)
    monkeypatch.setenv("RANK", "one")
    with pytest.raises(gradagg.errors.InvalError, match='RANK="one"'):
        from_environment(job="j", world_size=1)
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("LOCAL_RANK", "-1")
    with pytest.raises(ValueError, match="LOCAL_RANK"):
        from_environment(job="j", world_size=1)


def test_a_token_from_the_environment_is_sent(server_with_tokens, monkeypatch: pytest.MonkeyPatch) -> None:
    srv, token = server_with_tokens
    w = np.zeros(2, np.float32)
    with pytest.raises(gradagg.errors.UnauthenticatedError):
        gradagg.Client(srv.addr, "tok", 0, 1, **FAST)
    monkeypatch.setenv("GRADAGG_AUTH_TOKEN", token)
    with gradagg.Client(srv.addr, "tok", 0, 1, **FAST) as c:
        c.add_tensor("w", w)
        c.init()
    # one given in code wins
    with pytest.raises(gradagg.errors.UnauthenticatedError):
        gradagg.Client(srv.addr, "tok", 0, 1, auth_token="wrong", **FAST)


@pytest.fixture
def server_with_tokens(tmp_path: Path):
    from conftest import Server
    from gradagg import _lib
    tokens = tmp_path / "tokens"
    tokens.write_text("tok s3cret-token-0123456789\n")
    tokens.chmod(0o600)
    s = Server(_lib.server_binary(), tmp_path, "--auth-tokens", str(tokens))
    try:
        yield s, "s3cret-token-0123456789"
    finally:
        s.stop()
