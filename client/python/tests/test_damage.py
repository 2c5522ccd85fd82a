"""Damage on disk is detected, never taken for a torn tail (docs/reliability.md, "A damaged
journal"): a byte flipped in the middle of a job's journal makes the restarted server refuse the
job, loudly (ERROR in the log, gradagg_journals_damaged, GA_E_IO naming the segment to every
worker), instead of serving it at the version before the damage; with --journal-copies 2 the
same damage loses nothing; a write cut short at the journal's end (a crash) is cut and the job
goes on; other jobs on the server are unaffected."""
from __future__ import annotations

import signal
import socket
import time
import urllib.request
from pathlib import Path
from typing import List, Tuple

import numpy as np
import pytest

import gradagg
from gradagg import _lib, errors
from _util import FAST
from conftest import Server

STEPS = 25


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def train(s: Server, job: str, steps: int, resume: bool = False) -> Tuple[np.ndarray, int]:
    """steps steps of a one-rank job; its parameters and version at the end."""
    p = np.zeros(4096, np.float32)
    with gradagg.Client(s.addr, job, 0, 1, optimizer=gradagg.SGD(lr=0.5), resume=resume, **FAST) as c:
        c.add_tensor("p", p)
        c.init()
        for _ in range(steps):
            c.step([np.ones_like(p)])
        return p, c.version


def segments(s: Server, job: str) -> List[Path]:
    dirs = [d for d in (s.data_dir / "data").iterdir() if d.name.startswith(f"job-{job}-")]
    assert len(dirs) == 1, dirs
    return sorted(dirs[0].glob("journal-*.log"))


def metric(admin: str, name: str) -> float:
    text = urllib.request.urlopen(f"http://{admin}/metrics", timeout=10).read().decode()
    return float(next(line.split()[-1] for line in text.splitlines() if line.startswith(name + " ")))


def test_a_flipped_byte_mid_journal_refuses_the_job(tmp_path: Path) -> None:
    admin = f"127.0.0.1:{free_port()}"
    s = Server(_lib.server_binary(), tmp_path, "--admin-listen", admin)
    try:
        train(s, "damaged", STEPS)
        intact, _ = train(s, "intact", STEPS)
        s.stop(signal.SIGKILL)
        seg = segments(s, "damaged")[0]
        data = bytearray(seg.read_bytes())
        data[len(data) // 3] ^= 0x40  # inside a record in the middle: intact records follow it
        seg.write_bytes(bytes(data))
        s = s.restart()
        log = s.log.read_text(errors="replace")
        assert "its journal is damaged" in log and "job 'damaged'" in log, log[-2000:]
        assert "a torn tail" not in log
        assert metric(admin, "gradagg_journals_damaged") == 1
        ready = urllib.request.urlopen(f"http://{admin}/readyz", timeout=10)
        assert ready.status == 200  # the shard serves its other jobs
        assert "1 job(s) refused: a damaged journal" in ready.read().decode()
        # Every worker is told, with where the damage is; nothing is served at an older version.
        with pytest.raises(errors.IoError, match=r"journal is damaged \(.*journal-.*at byte \d+\)"):
            train(s, "damaged", 1)
        # The other job on the same server goes on where it was.
        p, version = train(s, "intact", 0, resume=True)
        assert version == STEPS and np.array_equal(p, intact)
    finally:
        s.stop()


def test_a_second_copy_survives_a_flipped_byte(tmp_path: Path) -> None:
    """--journal-copies 2: the same flipped byte costs nothing; the record comes from the copy,
    the log and a metric say the disk damaged it, the next version is checkpointed so no later
    restore needs the damaged segment, and the job trains on bit-exactly."""
    admin = f"127.0.0.1:{free_port()}"
    s = Server(_lib.server_binary(), tmp_path, "--admin-listen", admin, "--journal-copies", "2")
    try:
        train(s, "copied", STEPS)
        s.stop(signal.SIGKILL)
        seg = segments(s, "copied")[0]
        twin = seg.with_suffix(".copy")
        assert twin.read_bytes() == seg.read_bytes()
        data = bytearray(seg.read_bytes())
        data[len(data) // 3] ^= 0x40
        seg.write_bytes(bytes(data))
        s = s.restart()
        log = s.log.read_text(errors="replace")
        assert "job 'copied'" in log and "were read from its copy" in log, log[-2000:]
        assert "its journal is damaged" not in log and "a torn tail" not in log
        assert f"restore: job 'copied' at version {STEPS} " in log, log[-2000:]
        assert metric(admin, "gradagg_journal_records_from_copy") >= 1
        assert metric(admin, "gradagg_journals_damaged") == 0
        p, version = train(s, "copied", 1, resume=True)
        assert version == STEPS + 1
        assert np.array_equal(p, np.full(4096, -0.5 * (STEPS + 1), np.float32))
        deadline = time.monotonic() + 30
        while f"job 'copied': checkpoint of version {STEPS + 1} written" not in s.log.read_text(errors="replace"):
            assert time.monotonic() < deadline, "the version after the repair was not checkpointed"
            time.sleep(0.05)
        s.stop(signal.SIGKILL)
        s = s.restart()
        assert metric(admin, "gradagg_journal_records_from_copy") == 0  # the checkpoint covers it
        p, version = train(s, "copied", 0, resume=True)
        assert version == STEPS + 1 and np.all(p == -0.5 * (STEPS + 1))
    finally:
        s.stop()


def test_a_write_cut_short_at_the_end_is_a_torn_tail(tmp_path: Path) -> None:
    s = Server(_lib.server_binary(), tmp_path)
    try:
        train(s, "torn", STEPS)
        s.stop(signal.SIGKILL)
        seg = segments(s, "torn")[-1]
        data = seg.read_bytes().rstrip(b"\0")  # a killed writer leaves its last block's zero padding
        seg.write_bytes(data[:-100])  # the last record cut short, as a crash mid-write leaves it
        s = s.restart()
        log = s.log.read_text(errors="replace")
        assert "a torn tail" in log and "damaged" not in log, log[-2000:]
        # The cut record was the last step's push (a torn record is never acknowledged in a real
        # crash; here the test cut it): the job is served at the version before it and goes on.
        assert f"restore: job 'torn' at version {STEPS - 1} " in log, log[-2000:]
        _, version = train(s, "torn", 1, resume=True)
        assert version == STEPS
    finally:
        s.stop()
