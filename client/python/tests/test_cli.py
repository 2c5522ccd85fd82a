"""The gradagg command line tool (client/cli, docs/cli.md) against real servers: jobs, status
(members, lagging and missing ranks, version, commits, bytes by codec), delete and health, as
tables and as JSON, its exit codes, tokens (an operator token lists every job; a job's token
does not; neither trains), and several shards."""
from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any, Dict, List, Tuple

import numpy as np
import pytest

import gradagg
from conftest import Server
from gradagg import _lib
from _util import FAST, build_dir

N = 1000  # elements of the job's one tensor


def cli_path() -> str:
    p = build_dir() / "client" / "gradagg"
    assert p.is_file(), f"{p} is not built"
    return str(p)


def cli(*args: str, env: Dict[str, str] | None = None) -> Tuple[int, str, str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("GRADAGG_") or k == "GRADAGG_LIB"}
    r = subprocess.run([cli_path(), *args], capture_output=True, text=True, timeout=60, env={**base, **(env or {})})
    return r.returncode, r.stdout, r.stderr


def cli_json(*args: str, env: Dict[str, str] | None = None) -> Tuple[int, Any]:
    rc, out, err = cli("--json", *args, env=env)
    return rc, json.loads(out)


def clients(addr: str, job: str, ranks: List[int], world: int, **kw: Any) -> List[gradagg.Client]:
    out = []
    for r in ranks:
        c = gradagg.Client(addr, job, r, world, optimizer=gradagg.SGD(lr=0.1), **FAST, **kw)
        c.add_tensor("w", np.zeros(N, np.float32), codec="2bit", threshold=0.5)
        c.init()
        out.append(c)
    return out


def test_status_names_lagging_and_missing_ranks_and_counts_bytes(server) -> None:
    addr = server.addr
    c0, c1 = clients(addr, "lag", [0, 1], 3)
    g = np.ones(N, np.float32)
    c0.step_start([g])  # rank 0 committed step 0; rank 1 has not; rank 2 never joined
    rc, doc = cli_json("--server", addr, "status", "lag")
    assert rc == 0, doc
    (s,) = doc["shards"]
    assert (s["server"], s["job"], s["mode"], s["world_size"]) == (addr, "lag", "sync", 3)
    assert (s["version"], s["open_step"], s["committed"]) == (0, 0, 1)
    assert [m["state"] for m in s["members"]] == ["committed", "lagging", "missing"]
    assert s["lagging"] == [1] and s["missing"] == [2]
    assert s["tensors"] == [{"name": "w", "shape": [N], "elements": N}]
    rc, out, _ = cli("--server", addr, "status", "lag")
    assert rc == 0 and "lagging ranks: 1; missing ranks: 2" in out and "committed 1/3" in out, out
    rc, out, _ = cli("--server", addr, "jobs")
    assert rc == 0 and any(line.split()[:2] == ["lag", "3"] and "waiting 2/3" in line for line in out.splitlines()), out

    (c2,) = clients(addr, "lag", [2], 3)
    c1.step_start([g])
    c2.step([g])
    c0.step_wait()
    c1.step_wait()
    rc, doc = cli_json("--server", addr, "status", "lag")
    (s,) = doc["shards"]
    assert (s["version"], s["committed"], s["steps"]) == (1, 0, 1)
    assert [m["state"] for m in s["members"]] == ["idle"] * 3 and s["lagging"] == [] and s["missing"] == []
    (recv,) = s["received"]
    # three 2bit pushes of N elements: 16 elements a 32-bit word, against 4 bytes an element
    assert recv == {"codec": "2bit", "bytes": 3 * ((N + 15) // 16 * 4), "fp32_bytes": 3 * N * 4}, recv

    for c in (c0, c1, c2):
        c.close()
    rc, doc = cli_json("--server", addr, "jobs")
    assert rc == 0
    (job,) = [j for j in doc["shards"][0]["jobs"] if j["job"] == "lag"]
    assert job["state"] == "finished" and job["joined"] == 0 and job["version"] == 1, job
    rc, out, _ = cli("--server", addr, "delete", "lag")
    assert rc == 0 and "deleted job lag" in out, out
    rc, out, err = cli("--server", addr, "status", "lag")
    assert rc == 1 and "GA_E_UNKNOWN_JOB" in err, (out, err)
    rc, doc = cli_json("--server", addr, "jobs")
    assert doc["shards"][0]["jobs"] == []


def test_a_failed_job_and_a_refused_delete(server) -> None:
    c0, c1 = clients(server.addr, "failing", [0, 1], 2)
    rc, out, err = cli("--server", server.addr, "delete", "failing")  # live ranks: refused, nothing removed
    assert rc == 1 and "GA_E_RANK_HELD" in err, (out, err)
    c1.close(failure="out of data")
    rc, doc = cli_json("--server", server.addr, "jobs")
    (job,) = doc["shards"][0]["jobs"]
    assert job["state"] == "failed" and "out of data" in job["failure"], job
    rc, out, _ = cli("--server", server.addr, "jobs")
    assert "failed: " in out and "out of data" in out, out
    c0.close()


def test_health_and_exit_codes(tmp_path: Path) -> None:
    s = Server(_lib.server_binary(), tmp_path)
    addr = s.addr
    try:
        rc, out, _ = cli("--server", addr, "health")
        assert rc == 0 and out.split("\n")[1].split() == [addr, "SERVING", "SERVING"], out
        rc, doc = cli_json("--server", addr, "health")
        assert doc == {"shards": [{"server": addr, "status": "SERVING", "aggregator": "SERVING"}]}
        assert cli("--server", addr, "status")[0] == 2  # no job named
        assert cli("--server", addr, "frobnicate")[0] == 2
        assert cli("--server", addr, "--timeout-ms", "0", "jobs")[0] == 2
        assert cli("--server", addr, "jobs", "extra")[0] == 2
        assert cli("--help")[0] == 0
        # GRADAGG_SERVER gives the address (docs/launch.md)
        assert cli("health", env={"GRADAGG_SERVER": addr})[0] == 0
    finally:
        s.stop()
    rc, out, err = cli("--server", addr, "--timeout-ms", "2000", "health")
    assert rc == 3 and "GA_E_UNAVAILABLE" in out, (out, err)


def test_tokens_an_operator_lists_a_job_token_does_not(tmp_path: Path) -> None:
    job_tok, op_tok = "job-token-0123456789", "operator-token-0123456789"
    tokens = tmp_path / "tokens"
    tokens.write_text(f"secured {job_tok}\n* {op_tok}\n")
    s = Server(_lib.server_binary(), tmp_path, "--auth-tokens", str(tokens))
    try:
        (c,) = clients(s.addr, "secured", [0], 1, auth_token=job_tok)
        rc, out, err = cli("--server", s.addr, "jobs")
        assert rc == 4 and "GA_E_UNAUTHENTICATED" in err, err
        rc, out, err = cli("--server", s.addr, "--token", job_tok, "jobs")
        assert rc == 4 and "operator token" in err and "GA_E_PERMISSION_DENIED" in err, err
        rc, doc = cli_json("--server", s.addr, "jobs", env={"GRADAGG_AUTH_TOKEN": op_tok})
        assert rc == 0 and [j["job"] for j in doc["shards"][0]["jobs"]] == ["secured"], doc
        for tok in (job_tok, op_tok):  # the job's own token, and an operator's, see its status
            rc, doc = cli_json("--server", s.addr, "--token", tok, "status", "secured")
            assert rc == 0 and doc["shards"][0]["world_size"] == 1
        # an operator token trains nothing
        with pytest.raises(gradagg.errors.PermissionDeniedError):
            gradagg.Client(s.addr, "secured", 0, 1, auth_token=op_tok, **FAST)
        c.close()
    finally:
        s.stop()


def test_several_shards_are_asked_each(tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    sa, sb = Server(_lib.server_binary(), a), Server(_lib.server_binary(), b)
    try:
        (c,) = clients(f"{sa.addr},{sb.addr}", "sharded", [0], 1, shard_split_elements=100)
        rc, doc = cli_json("--server", f"{sa.addr},{sb.addr}", "jobs")
        assert rc == 0 and [x["server"] for x in doc["shards"]] == [sa.addr, sb.addr]
        assert all([j["job"] for j in x["jobs"]] == ["sharded"] for x in doc["shards"]), doc
        rc, out, _ = cli("--server", f"{sa.addr},{sb.addr}", "jobs")
        assert rc == 0 and out.count("sharded") == 2 and sa.addr in out and sb.addr in out, out
        rc, out, _ = cli("--server", f"{sa.addr},{sb.addr}", "health")
        assert rc == 0 and out.count("SERVING") == 4, out
        c.close()
        sb.stop()  # one shard gone: the worst exit status wins
        rc, doc = cli_json("--server", f"{sa.addr},{sb.addr}", "--timeout-ms", "2000", "jobs")
        assert rc == 3 and doc["shards"][1]["error"]["status"] == "GA_E_UNAVAILABLE", doc
    finally:
        sa.stop()
        sb.stop()
