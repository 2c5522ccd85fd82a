"""Server restarts under live workers: SIGTERM (a rolling update: the server drains and exits)
or SIGKILL at a random moment of training (mid push, mid step close, mid pull), and the server
started again on the same address and data dir after a random pause. The workers go on by
themselves and end bit for bit where a run without a restart ends, with no version lost:
Python ranks (gradagg.torch.DistributedOptimizer, several buckets, each its own job) and C
ranks (tests/support/fault_worker.c, processes). Trials are seeded by their index
(GRADAGG_RESTART_TRIALS of each kind; the soak stage runs more)."""
from __future__ import annotations

import os
import random
import signal
import subprocess
import threading
import time
from pathlib import Path
from typing import Any, Dict, List, Optional

import pytest
import torch
import torch.nn.functional as F

from _util import built_program, run_ranks
from conftest import Server
from gradagg import _lib
from gradagg.torch import DistributedOptimizer

torch.set_num_threads(1)

TRIALS = int(os.environ.get("GRADAGG_RESTART_TRIALS", "6"))
WORLD = 2
STEPS = 40
SERVER_ARGS = ("--drain-delay-ms", "0", "--shutdown-grace-ms", "500")  # the drain starts at once
# A restart may take a few seconds here; the budget only bounds how long a broken run hangs.
RETRY = dict(call_timeout_ms=10000, step_timeout_ms=60000, retry_budget_ms=60000, backoff_max_ms=200)
_SEEDING = threading.Lock()  # ranks run in threads; torch's seed is global


def train(addr: str, job: str, rank: int, codec: str, progress: Optional[List[int]] = None,
          gate: Optional[threading.Event] = None) -> Dict[str, Any]:
    """progress[rank]: the steps this rank finished, for the test to pick its moment; rank 0
    waits for gate before its last step, so the run cannot end before the restart."""
    with _SEEDING:
        torch.manual_seed(rank)  # init() makes every rank start from rank 0's values
        model = torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.Tanh(), torch.nn.Linear(64, 64),
                                    torch.nn.Tanh(), torch.nn.Linear(64, 4))
    g = torch.Generator().manual_seed(500 + rank)
    x = torch.randn(64, 16, generator=g)
    y = torch.tanh(x @ torch.randn(16, 4, generator=torch.Generator().manual_seed(7)))
    kw: Dict[str, Any] = dict(codec=codec, pull_codec=codec)
    if codec == "2bit":
        kw.update(threshold=0.02, pull_threshold=0.005)
    # Tiny buckets: one per parameter, six jobs (lanes) stepping in turn during backward.
    with DistributedOptimizer(model.named_parameters(), server=addr, job=job, rank=rank, world_size=WORLD,
                              lr=0.05, momentum=0.9, bucket_cap_mb=1e-6, **kw, **RETRY) as opt:
        for step in range(STEPS):
            if gate is not None and rank == 0 and step == STEPS - 1:
                assert gate.wait(120), "the restart did not come"
            opt.zero_grad()
            F.mse_loss(model(x), y).backward()
            opt.step()
            if progress is not None:
                progress[rank] = step + 1
        return dict(params=[p.detach().clone() for p in model.parameters()],
                    versions=[c.version for c in opt.clients], buckets=len(opt.clients),
                    versions_lost=sum(c.stats.versions_lost for c in opt.clients))


_reference: Dict[str, Any] = {}


def reference(codec: str, tmp: Path) -> Dict[str, Any]:
    """The run without a restart (once per codec) and how long one step took."""
    if codec not in _reference:
        tmp.mkdir()
        s = Server(_lib.server_binary(), tmp, *SERVER_ARGS)
        try:
            t0 = time.monotonic()
            out = run_ranks(lambda r: train(s.addr, "ref", r, codec), WORLD, timeout=120)
            _reference[codec] = dict(out=out, step_s=(time.monotonic() - t0) / STEPS)
        finally:
            s.stop()
    return _reference[codec]


@pytest.mark.parametrize("trial", range(TRIALS))
def test_restart_at_a_random_moment(tmp_path: Path, trial: int) -> None:
    rng = random.Random(trial)
    codec = ("none", "2bit")[trial % 2]
    sig = (signal.SIGTERM, signal.SIGKILL)[(trial // 2) % 2]
    ref = reference(codec, tmp_path.parent / f"restart-reference-{codec}")
    # The moment: once rank 0 finished a random step, a random part of a step later (its push,
    # the step's close or its pull, whichever is on then).
    after_step, into = rng.randrange(1, STEPS - 4), rng.uniform(0.0, 1.0)
    pause = rng.uniform(0.0, 1.0)
    what = (f"trial {trial}: {codec}, {sig.name} {into:.2f} of a step after step {after_step}, "
            f"restarted {pause:.2f} s later")

    server = Server(_lib.server_binary(), tmp_path, *SERVER_ARGS)
    restarted: List[Server] = []
    progress = [0] * WORLD
    gate = threading.Event()

    def restart() -> None:
        while progress[0] < after_step:
            time.sleep(0.001)
        time.sleep(into * ref["step_s"])
        server.stop(sig)
        gate.set()
        time.sleep(pause)
        restarted.append(server.restart())

    killer = threading.Thread(target=restart, daemon=True)
    killer.start()
    try:
        out = run_ranks(lambda r: train(server.addr, "job", r, codec, progress, gate), WORLD, timeout=180)
        killer.join(60)
        assert restarted, f"{what}: the server was not restarted"
    finally:
        gate.set()
        killer.join(60)
        for s in [server, *restarted]:
            s.stop()
    for r, (got, want) in enumerate(zip(out, ref["out"])):
        assert got["buckets"] == want["buckets"] == 6, what
        assert got["versions"] == [STEPS] * got["buckets"], f"{what}: rank {r} versions {got['versions']}"
        assert got["versions_lost"] == 0, f"{what}: rank {r}"
        for i, (a, b) in enumerate(zip(got["params"], want["params"])):
            assert torch.equal(a, b), f"{what}: rank {r} parameter {i} differs from the run without a restart"


def fault_worker() -> str:
    return built_program("fault_worker")


C_STEPS = 40
C_PAUSE_MS = 5  # before each step, so that a moment after a step falls before the next


def c_ranks(addr: str, out: Path, codec: str, gated: bool = False) -> List[subprocess.Popen]:
    """WORLD fault_worker processes training C_STEPS versions; rank r writes its parameters to
    out/r. Their stdout reports every step (fault_worker.c). gated: rank 0 waits for a line on
    its stdin before its last step."""
    out.mkdir(exist_ok=True)
    pull = "2bit" if codec == "2bit" else "none"
    procs = []
    for r in range(WORLD):
        gate = ["--hold-before-call", str(C_STEPS - 1)] if gated and r == 0 else []
        procs.append(subprocess.Popen(
            [fault_worker(), "--server", addr, "--job", "c", "--rank", str(r), "--world", str(WORLD), "--until",
             str(C_STEPS), "--elements", "200000", "--codec", codec, "--pull-codec", pull, "--backoff-max-ms", "200",
             "--pause-ms", str(C_PAUSE_MS), "--out", str(out / str(r)), *gate],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.PIPE if gate else subprocess.DEVNULL,
            text=True))
    return procs


def c_finish(procs: List[subprocess.Popen], what: str) -> List[str]:
    """Every rank's output, after checking that it exited 0."""
    outs = []
    for r, p in enumerate(procs):
        try:
            text, _ = p.communicate(timeout=180)
        except subprocess.TimeoutExpired:
            p.kill()
            text, _ = p.communicate()
            pytest.fail(f"{what}: C rank {r} still running:\n{text}")
        assert p.returncode == 0, f"{what}: C rank {r} exited {p.returncode}:\n{text}"
        outs.append(text)
    return outs


_c_reference: Dict[str, List[bytes]] = {}


@pytest.mark.parametrize("trial", range(TRIALS))
def test_restart_c_workers_at_a_random_moment(tmp_path: Path, trial: int) -> None:
    rng = random.Random(1000 + trial)
    codec = ("2bit", "none")[trial % 2]
    sig = (signal.SIGKILL, signal.SIGTERM)[(trial // 2) % 2]
    if codec not in _c_reference:
        ref_dir = tmp_path / "reference"
        ref_dir.mkdir()
        s = Server(_lib.server_binary(), ref_dir, *SERVER_ARGS)
        try:
            c_finish(c_ranks(s.addr, ref_dir / "out", codec), f"{codec} reference")
        finally:
            s.stop()
        _c_reference[codec] = [(ref_dir / "out" / str(r)).read_bytes() for r in range(WORLD)]
    after_step, into, pause = rng.randrange(1, C_STEPS - 4), rng.uniform(0.0, 0.02), rng.uniform(0.0, 1.0)
    what = (f"C trial {trial}: {codec}, {sig.name} {into * 1e3:.0f} ms after step {after_step}, "
            f"restarted {pause:.2f} s later")
    run = tmp_path / "run"
    run.mkdir()
    server = Server(_lib.server_binary(), run, *SERVER_ARGS)
    restarted: List[Server] = []
    procs = c_ranks(server.addr, run / "out", codec, gated=True)
    try:
        # Rank 0 reports each finished step ("call K ... version V ..."): the moment follows one.
        assert procs[0].stdout is not None
        lines = []
        while len([x for x in lines if x.startswith("call ")]) < after_step:
            line = procs[0].stdout.readline()
            assert line, f"{what}: rank 0 ended early:\n{''.join(lines)}"
            lines.append(line)
        time.sleep(into)
        server.stop(sig)
        assert procs[0].stdin is not None
        procs[0].stdin.write("go\n")  # rank 0's last step: the run cannot end before the restart
        procs[0].stdin.flush()
        time.sleep(pause)
        restarted.append(server.restart())
        outs = c_finish(procs, what)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
        for s in [server, *restarted]:
            s.stop()
    outs[0] = "".join(lines) + outs[0]
    for r, text in enumerate(outs):
        done = [x for x in text.splitlines() if x.startswith("done ")]
        assert done and done[0].startswith(f"done version {C_STEPS} "), f"{what}: rank {r}:\n{text}"
        assert (run / "out" / str(r)).read_bytes() == _c_reference[codec][r], \
            f"{what}: C rank {r} differs from the run without a restart"
