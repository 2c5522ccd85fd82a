"""Acknowledged versions never go back silently (docs/reliability.md, "Durability"): with
--durability acked (every acknowledged push journaled) a worker that finds its job restored
below the version it was acknowledged at stops with RolledBackError naming both versions, and a
server whose journal segments after the restored checkpoint are gone refuses the job (GA_E_IO,
ERROR in the log, gradagg_journals_damaged); with --durability checkpoint moving back stays the
documented behaviour, said in the log and counted in the worker's versions_lost."""
from __future__ import annotations

import shutil
import signal
import socket
import urllib.request
from pathlib import Path

import numpy as np
import pytest

import gradagg
from gradagg import _lib, errors
from _util import FAST
from conftest import Server


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def metric(admin: str, name: str) -> float:
    text = urllib.request.urlopen(f"http://{admin}/metrics", timeout=10).read().decode()
    return float(next(line.split()[-1] for line in text.splitlines() if line.startswith(name + " ")))


def worker(s: Server, job: str) -> gradagg.Client:
    """A one-rank job's client, joined and initialised; it lives across server restarts."""
    c = gradagg.Client(s.addr, job, 0, 1, optimizer=gradagg.SGD(lr=0.5), **FAST)
    c.add_tensor("p", np.zeros(4096, np.float32))
    c.init()
    return c


def steps(c: gradagg.Client, n: int) -> None:
    for _ in range(n):
        c.step([np.ones(4096, np.float32)])


@pytest.mark.parametrize("durability", ["acked", "checkpoint"])
def test_an_older_snapshot_of_the_data_directory(tmp_path: Path, durability: str) -> None:
    # The data directory is put back to a snapshot taken at version 10 while the worker was
    # acknowledged at 16: nothing on the server can tell, the worker can.
    s = Server(_lib.server_binary(), tmp_path, "--durability", durability, "--checkpoint-steps", "5")
    c = worker(s, "snap")
    try:
        steps(c, 10)
        s.stop(signal.SIGTERM)  # a clean stop: checkpoint of version 10
        shutil.copytree(tmp_path / "data", tmp_path / "snapshot")
        s = s.restart()
        steps(c, 6)
        assert c.version == 16
        s.stop(signal.SIGKILL)
        shutil.rmtree(tmp_path / "data")
        shutil.copytree(tmp_path / "snapshot", tmp_path / "data")
        s = s.restart()
        if durability == "acked":
            with pytest.raises(errors.RolledBackError, match=r"came back at version 10, below version 16, which that "
                               r"server had acknowledged.*--durability acked"):
                steps(c, 1)
            assert c.version == 16
        else:
            steps(c, 1)  # moved back: step 10 again, published as version 11
            assert c.version == 11 and c.stats.versions_lost == 6
    finally:
        c.close()
        s.stop()


@pytest.mark.parametrize("durability", ["acked", "checkpoint"])
def test_journal_segments_removed_while_the_server_was_down(tmp_path: Path, durability: str) -> None:
    admin = f"127.0.0.1:{free_port()}"
    s = Server(_lib.server_binary(), tmp_path, "--durability", durability, "--checkpoint-steps", "10",
               "--admin-listen", admin)
    c = worker(s, "gone")
    try:
        steps(c, 25)  # checkpoint of version 20; the journal holds what came after it
        s.stop(signal.SIGKILL)
        removed = list((tmp_path / "data").glob("job-gone-*/journal-*"))
        assert removed, "the test's premise: the job has journal segments"
        for f in removed:
            f.unlink()
        s = s.restart()
        log = s.log.read_text(errors="replace")
        if durability == "acked":
            assert "journal segments after the checkpoint of version 20 are missing" in log, log[-2000:]
            assert metric(admin, "gradagg_journals_damaged") == 1
            with pytest.raises(errors.IoError, match="journal segments after the checkpoint of version 20 are "
                               "missing"):
                steps(c, 1)
        else:
            assert "no journal segment follows its checkpoint of version 20" in log, log[-2000:]
            assert metric(admin, "gradagg_journals_damaged") == 0
            steps(c, 1)
            assert c.version == 21 and c.stats.versions_lost == 5
    finally:
        c.close()
        s.stop()
