"""Elastic jobs and bounded staleness (docs/protocol.md, "Elastic jobs", "Bounded staleness"),
with real servers and worker processes (elastic_worker.py): workers join and leave a running job
at random steps, one is killed, the server restarts in the middle of a change; every step's
contributors, as the server records them and as the workers saw them, and the final parameters
against a scalar replay of that membership; a job below its minimum waits and says why; workers
with uneven amounts of data; a bounded-staleness job never lets a push be more than s versions
stale, and refuses a push s + 1 steps ahead."""
from __future__ import annotations

import json
import os
import random
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Dict, List

import numpy as np
import pytest

import gradagg
from conftest import Server
from _util import FAST, child_env
from elastic_worker import N, grad, initial
from test_cli import cli_json

WORKER = Path(__file__).resolve().parent / "elastic_worker.py"
F32 = np.float32


class Worker:
    def __init__(self, tmp: Path, name: str, addr: str, job: str, *args: str) -> None:
        self.log = tmp / f"{name}.log"
        self.out = open(tmp / f"{name}.out", "wb")
        env = child_env()
        self.proc = subprocess.Popen([sys.executable, str(WORKER), "--server", addr, "--job", job, "--log",
                                      str(self.log), *args], stdout=self.out, stderr=subprocess.STDOUT, env=env)

    def events(self) -> List[Dict[str, Any]]:
        if not self.log.exists():
            return []
        return [json.loads(line) for line in self.log.read_text().splitlines() if line.strip()]

    def steps_done(self) -> int:
        return sum(1 for e in self.events() if "step" in e)

    def wait(self, timeout: float = 120) -> None:
        rc = self.proc.wait(timeout=timeout)
        self.out.close()
        assert rc == 0, f"worker exited {rc}: {Path(self.out.name).read_text(errors='replace')}"

    def wait_for(self, what, timeout: float = 60) -> None:
        end = time.monotonic() + timeout
        while not what(self):
            assert self.proc.poll() is None or what(self), f"worker ended: {Path(self.out.name).read_text()}"
            assert time.monotonic() < end, "timed out"
            time.sleep(0.01)


def status(addr: str, job: str) -> Dict[str, Any]:
    rc, doc = cli_json("--server", addr, "status", job)
    assert rc == 0, doc
    return doc["shards"][0]


def replay(records: Dict[int, List[int]], version: int) -> np.ndarray:
    """The parameters a mean job with no server optimizer reaches: each step's contributions
    summed in rank order in fp32, times (float)(1 / contributors), added."""
    p = initial()
    for t in range(version):
        ranks = records[t]
        assert ranks, f"step {t} has no contributor"
        s = np.zeros(N, F32)
        for r in sorted(ranks):
            s = (s + grad(r, t)).astype(F32)
        scale = F32(1.0 / len(ranks)) if len(ranks) > 1 else F32(1)
        p = (p + (s * scale).astype(F32)).astype(F32)
    return p


def seen_contributors(workers: List[Worker]) -> Dict[int, List[int]]:
    """Step -> the ranks whose push of that step the workers saw acknowledged."""
    out: Dict[int, List[int]] = {}
    for w in workers:
        ev = w.events()
        rank = ev[0]["rank"]
        for e in ev:
            if "step" in e:
                out.setdefault(e["step"], []).append(rank)
    return out


@pytest.mark.parametrize("seed", [1, 2])
def test_ranks_join_and_leave_at_random_steps(tmp_path: Path, seed: int) -> None:
    """Rank 0 trains throughout; three workers join at random steps and leave after random
    counts, two more take the ranks they freed, one of which is killed and lost. Every step's
    contributors are what the workers saw, ranks never collide, and the parameters every worker
    ends with are the replay's. Rank 0 is held back while a worker starts (however long that
    takes on a loaded machine), so the run fits the server's recent_steps whatever the speed."""
    rng = random.Random(seed)
    server = Server(gradagg._lib.server_binary(), tmp_path, "--rank-lost-ms", "1000")
    try:
        addr, job, stop, pause = server.addr, f"elastic-{seed}", tmp_path / "stop", tmp_path / "pause"
        common = ["--world", "4", "--min", "1", "--sleep-ms", "15", "--jitter"]

        def start(name: str, *args: str) -> Worker:
            """A worker started while rank 0 waits, released once the worker has joined."""
            pause.touch()
            try:
                w = Worker(tmp_path, name, addr, job, *common, *args)
                w.wait_for(lambda w: bool(w.events()))
            finally:
                pause.unlink()
            return w

        first = Worker(tmp_path, "w0", addr, job, *common, str(seed), "--stop", str(stop), "--pause", str(pause))
        k = rng.randint(1, 4)
        first.wait_for(lambda w: w.steps_done() >= k)
        wave = []
        for i in range(3):
            wave.append(start(f"w{i + 1}", str(seed * 10 + i), "--steps", str(rng.randint(3, 9))))
            k = first.steps_done() + rng.randint(0, 2)
            first.wait_for(lambda w: w.steps_done() >= k)
        for w in wave:
            w.wait()
        # The ranks wave 1 freed are taken again; one of the new workers dies without a word.
        killed = start("w4", str(seed * 10 + 4))
        late = start("w5", str(seed * 10 + 5), "--steps", str(rng.randint(3, 8)))
        k = rng.randint(1, 3)
        killed.wait_for(lambda w: w.steps_done() >= k)
        killed.proc.kill()
        killed.proc.wait()
        late.wait()
        done = first.steps_done()
        first.wait_for(lambda w: w.steps_done() >= done + 3)  # steps close without the lost rank
        stop.touch()
        first.wait()

        s = status(addr, job)
        version = s["version"]
        assert 0 < version <= 64, version  # recent_steps holds the whole run
        records = {r["step"]: r["ranks"] for r in s["recent_steps"]}
        assert sorted(records) == list(range(version)), sorted(records)
        # What each worker saw acknowledged is what the server says contributed, for the workers
        # that ended their runs; the killed one's acknowledged pushes are a subset.
        seen = seen_contributors([first, *wave, late, killed])
        killed_rank = killed.events()[0]["rank"]
        killed_steps = [e["step"] for e in killed.events() if "step" in e]
        for t in range(version):
            ranks = seen.get(t, [])
            assert len(set(ranks)) == len(ranks), f"step {t}: ranks collide: {ranks}"
            unseen = set(records[t]) - set(ranks)
            # The killed worker's last push may have been acknowledged after its last log line.
            assert not unseen or (unseen == {killed_rank} and t == killed_steps[-1] + 1), (t, ranks, records[t])
            assert set(ranks) <= set(records[t]), (t, ranks, records[t])
        assert len(set(records[version - 1])) == 1 and records[version - 1] == [first.events()[0]["rank"]]
        # Membership changed: more than one set of contributors, and ranks were reused.
        assert len({tuple(v) for v in records.values()}) >= 3, records
        ranks_wave2 = {killed_rank, late.events()[0]["rank"]}
        assert ranks_wave2 <= {w.events()[0]["rank"] for w in wave}, ranks_wave2
        # The parameters: every worker that finished holds its final version's replay, bit for bit.
        for w in (first, *wave, late):
            final = w.events()[-1]
            np.testing.assert_array_equal(np.array(final["params"], F32), replay(records, final["final"]))
    finally:
        server.stop()


@pytest.mark.parametrize("pull_codec", ["none", "2bit"])
def test_a_rank_that_joins_takes_the_current_parameters(server, pull_codec: str) -> None:
    """A joiner starts from the version the others hold (pulled in full; with compressed pulls
    the published copy the others hold, not the server's exact parameters) and trains in step
    with them."""
    job = f"joiner-{pull_codec}"
    opts: Dict[str, Any] = dict(min_world_size=1, **FAST)
    if pull_codec == "2bit":
        opts.update(pull_codec="2bit", pull_threshold=0.01)
    a = gradagg.Client(server.addr, job, "any", 4, **opts)
    pa = initial()
    a.add_tensor("w", pa)
    a.init()
    for t in range(3):
        a.step([grad(a.rank, t)])
    if pull_codec == "2bit":  # the copy the workers hold has drifted from the exact parameters
        assert not np.array_equal(pa, replay({0: [0], 1: [0], 2: [0]}, 3))
    b = gradagg.Client(server.addr, job, "any", 4, **opts)
    pb = np.zeros(N, F32)
    b.add_tensor("w", pb)
    b.init()
    assert (a.rank, b.rank) == (0, 1)
    assert b.version == a.version == 3
    np.testing.assert_array_equal(pa, pb)
    a.step_start([grad(0, 3)])
    b.step([grad(1, 3)])
    a.step_wait()
    np.testing.assert_array_equal(pa, pb)
    if pull_codec == "none":
        np.testing.assert_array_equal(pa, replay({0: [0], 1: [0], 2: [0], 3: [0, 1]}, 4))
    a.close()
    b.close()


def test_fewer_than_min_ranks_wait_with_a_clear_status(server) -> None:
    job = "below-min"
    a = gradagg.Client(server.addr, job, "any", 3, min_world_size=2, **FAST)
    pa = initial()
    a.add_tensor("w", pa)
    a.init()
    a.step_start([grad(0, 0)])
    time.sleep(0.5)
    assert not a.step_done(), "a step closed with 1 contributor, below the minimum of 2"
    s = status(server.addr, job)
    assert s["waiting"].startswith("waiting for ranks: 1 joined, step 0 needs 2 contributors"), s["waiting"]
    assert s["min_world_size"] == 2 and s["committed"] == 1 and s["version"] == 0
    assert [m["state"] for m in s["members"]] == ["committed", "free", "free"], s["members"]
    b = gradagg.Client(server.addr, job, "any", 3, min_world_size=2, **FAST)
    pb = np.zeros(N, F32)
    b.add_tensor("w", pb)
    b.init()
    assert b.rank == 1 and b.version == 0  # taken into the waiting step
    b.step([grad(1, 0)])
    a.step_wait()
    assert status(server.addr, job)["waiting"] == ""
    np.testing.assert_array_equal(pa, replay({0: [0, 1]}, 1))
    np.testing.assert_array_equal(pa, pb)
    # One leaves: the other's next step waits again.
    b.close()
    a.step_start([grad(0, 1)])
    time.sleep(0.3)
    assert not a.step_done()
    assert "1 joined" in status(server.addr, job)["waiting"]
    c = gradagg.Client(server.addr, job, "any", 3, min_world_size=2, **FAST)
    pc = np.zeros(N, F32)
    c.add_tensor("w", pc)
    c.init()
    assert c.rank == 1  # the rank b freed
    c.step([grad(1, 1)])
    a.step_wait()
    np.testing.assert_array_equal(pa, replay({0: [0, 1], 1: [0, 1]}, 2))
    # Rank 0 leaves and rank 1 pushes alone: nothing is added into the step's sum below the
    # minimum, so a worker that takes rank 0 now still joins this step rather than the next,
    # which could never come.
    a.close()
    c.step_start([grad(1, 2)])
    time.sleep(0.3)
    d = gradagg.Client(server.addr, job, "any", 3, min_world_size=2, **FAST)
    pd = np.zeros(N, F32)
    d.add_tensor("w", pd)
    d.init()
    assert d.rank == 0 and d.version == 2
    d.step([grad(0, 2)])
    c.step_wait()
    np.testing.assert_array_equal(pc, replay({0: [0, 1], 1: [0, 1], 2: [0, 1]}, 3))
    np.testing.assert_array_equal(pc, pd)
    c.close()
    d.close()


def test_every_rank_held_refuses_any_rank(server) -> None:
    job = "full"
    cs = [gradagg.Client(server.addr, job, "any", 2, min_world_size=1, **FAST) for _ in range(2)]
    assert sorted(c.rank for c in cs) == [0, 1]
    with pytest.raises(gradagg.errors.GradaggError, match="every rank of job 'full' is held"):
        gradagg.Client(server.addr, job, "any", 2, min_world_size=1, **FAST)
    with pytest.raises(gradagg.errors.GradaggError, match="any_rank needs an elastic job|GA_RANK_ANY"):
        gradagg.Client(server.addr, "fixed", "any", 2, **FAST)
    for c in cs:
        c.close()


def test_a_restart_in_the_middle_of_a_change_loses_nothing(tmp_path: Path) -> None:
    """The server is killed right after a worker joined a step that already had a commit, and
    again while another leaves: the restarted server takes the joiner into the same step (its
    Join is journaled), no acknowledged push is lost or counted twice, and the replay holds."""
    server = Server(gradagg._lib.server_binary(), tmp_path)
    try:
        addr, job = server.addr, "restart-elastic"
        opts = dict(min_world_size=1, call_timeout_ms=5000, step_timeout_ms=60000)
        a = gradagg.Client(addr, job, "any", 3, **opts)
        pa = initial()
        a.add_tensor("w", pa)
        a.init()
        for t in range(2):
            a.step([grad(0, t)])
        b = gradagg.Client(addr, job, "any", 3, **opts)  # rank 1, joins step 2 with nothing added yet
        pb = np.zeros(N, F32)
        b.add_tensor("w", pb)
        b.init()
        a.step_start([grad(0, 2)])  # step 2 waits for rank 1
        time.sleep(0.2)
        server.stop()  # SIGKILL: the journal has rank 1's Join and rank 0's commit of step 2
        server = server.restart()
        b.step([grad(1, 2)])
        a.step_wait()
        assert a.version == b.version == 3
        for t in range(3, 5):
            a.step_start([grad(0, t)])
            b.step([grad(1, t)])
            a.step_wait()
        b.close()
        server.stop()
        server = server.restart()
        a.step([grad(0, 5)])  # closes alone: rank 1 left before the restart
        s = status(server.addr, job)
        records = {r["step"]: r["ranks"] for r in s["recent_steps"]}
        assert [records[t] for t in range(6)] == [[0], [0], [0, 1], [0, 1], [0, 1], [0]], records
        np.testing.assert_array_equal(pa, replay(records, 6))
        a.close()
    finally:
        server.stop()


def test_uneven_inputs_each_rank_runs_to_its_own_end(server) -> None:
    """A fixed job whose ranks have different amounts of data (apache/mxnet#7888 hung here): a
    rank that runs out leaves as finished, the others' steps go on without it to their own ends,
    the mean of each step divides by its contributors, and the job then counts as finished."""
    job, counts = "uneven", [7, 4, 2]
    workers = []
    for r, steps in enumerate(counts):
        workers.append(Worker(server.data_dir, f"u{r}", server.addr, job, "--world", "3", "--min", "0", "--rank",
                              str(r), "--steps", str(steps), "--sleep-ms", "5", "--jitter", str(r)))
    for w in workers:
        w.wait()
    records = {t: [r for r, n in enumerate(counts) if t < n] for t in range(max(counts))}
    s = status(server.addr, job)
    assert s["version"] == 7 and s["finished"], s
    assert {r["step"]: r["ranks"] for r in s["recent_steps"]} == records
    for w in workers:
        final = w.events()[-1]
        np.testing.assert_array_equal(np.array(final["params"], F32), replay(records, final["final"]))


@pytest.mark.parametrize("staleness", [1, 2])
def test_bounded_staleness_is_never_exceeded(tmp_path: Path, staleness: int) -> None:
    """Three ranks with random per-step delays, one of them slow: every push is computed from a
    version at most `staleness` behind its step (the SDK waits otherwise), fast ranks do run
    ahead, and the parameters are the replay of every step with all three contributions."""
    server = Server(gradagg._lib.server_binary(), tmp_path)
    try:
        job, steps = f"ssp-{staleness}", 20
        workers = [Worker(tmp_path, f"s{r}", server.addr, job, "--world", "3", "--min", "0", "--rank", str(r),
                          "--staleness", str(staleness), "--steps", str(steps), "--sleep-ms",
                          "40" if r == 2 else "8", "--jitter", str(r + 100 * staleness)) for r in range(3)]
        for w in workers:
            w.wait()
        ahead = 0
        for w in workers:
            for e in w.events():
                if "step" in e:
                    assert e["step"] - e["base"] <= staleness, (e, staleness)
                    ahead = max(ahead, e["step"] - e["base"])
        assert ahead == staleness, f"no push was ever {staleness} steps ahead (at most {ahead})"
        s = status(server.addr, job)
        assert s["staleness"] == staleness and s["version"] == steps
        records = {r["step"]: r["ranks"] for r in s["recent_steps"]}
        assert records == {t: [0, 1, 2] for t in range(steps)}
        for w in workers:
            final = w.events()[-1]
            np.testing.assert_array_equal(np.array(final["params"], F32), replay(records, final["final"]))
    finally:
        server.stop()


def test_a_push_more_than_staleness_ahead_is_refused(server) -> None:
    """The server's own bound, without the SDK: with staleness 1 a rank's push of the open step
    + 1 is acknowledged (and counted once when retried), of + 2 refused with E_STEP_FUTURE."""
    import grpc
    from _wire import channel, field_varint, init_chunk, join_request, push_chunk
    ch = channel(server.addr)
    job = "raw-ssp"
    for r in range(2):
        ch.unary_unary("/gradagg.v1.Aggregator/Join")(join_request(job, r, 7 + r, 2, extra_config=field_varint(9, 1)))
    values = np.zeros(4, F32).tobytes()
    ch.stream_unary("/gradagg.v1.Aggregator/InitTensors")(iter([init_chunk(job, 0, 7, "w", [4], 0, 4, values)]))
    push = ch.stream_unary("/gradagg.v1.Aggregator/Push")
    one = np.ones(4, F32).tobytes()
    push(iter([push_chunk(job, 0, 7, 0, "w", 0, 4, one)]))
    push(iter([push_chunk(job, 0, 7, 1, "w", 0, 4, one)]))  # ahead by 1: taken
    push(iter([push_chunk(job, 0, 7, 1, "w", 0, 4, one)]))  # a retry: counted once
    with pytest.raises(grpc.RpcError) as e:
        push(iter([push_chunk(job, 0, 7, 2, "w", 0, 4, one)]))
    assert e.value.code() == grpc.StatusCode.OUT_OF_RANGE, e.value  # E_STEP_FUTURE
    assert "more than 1 steps past the open step 0" in e.value.details()
    push(iter([push_chunk(job, 1, 8, 0, "w", 0, 4, one)]))  # step 0 closes; step 1 opens with rank 0's push
    push(iter([push_chunk(job, 1, 8, 1, "w", 0, 4, one)]))
    s = status(server.addr, job)
    assert s["version"] == 2 and s["duplicate_pushes"] == 1, s
    assert [r["ranks"] for r in s["recent_steps"]] == [[0, 1], [0, 1]]


def test_bad_elastic_and_staleness_configs_are_refused_and_create_nothing(server) -> None:
    """What the server itself refuses (the SDK checks the same before it sends)."""
    import grpc
    from _wire import channel, field_varint, join_request
    ch = channel(server.addr)
    join = ch.unary_unary("/gradagg.v1.Aggregator/Join")
    cases = [(field_varint(8, 5), "config.min_world_size 5 exceeds world_size 4"),
             (field_varint(9, 33), "config.staleness 33 outside [0, 32]"),
             (field_varint(2, 1) + field_varint(9, 1), "config.staleness 1 needs sync mode"),
             (field_varint(2, 1) + field_varint(8, 1), "config.min_world_size 1 needs sync mode")]
    for extra, message in cases:
        with pytest.raises(grpc.RpcError) as e:
            join(join_request("bad", 0, 7, 4, extra_config=extra))
        assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT and message in e.value.details(), e.value
    with pytest.raises(grpc.RpcError) as e:  # any_rank (JoinRequest field 6) of a fixed job
        join(join_request("bad", 0, 7, 4) + field_varint(6, 1))
    assert "any_rank needs an elastic job" in e.value.details(), e.value
    rc, doc = cli_json("--server", server.addr, "jobs")
    assert rc == 0 and doc["shards"][0]["jobs"] == [], doc
    with pytest.raises(gradagg.errors.GradaggError, match="min_world_size 5 exceeds world_size 4"):
        gradagg.Client(server.addr, "bad", "any", 4, min_world_size=5, **FAST)


def test_c_workers_come_and_go_in_an_elastic_job(server) -> None:
    """The C SDK's example as the elastic Kubernetes Job runs it (deploy/examples/
    elastic-training-job.yaml: GRADAGG_RANK=any, GRADAGG_MIN_WORLD_SIZE, --steps of the job): a
    second worker joins the running job, is stopped by SIGTERM (it leaves as stopped, exit 143),
    a third takes its rank, and every worker still running ends at the job's last step."""
    import signal
    from _util import build_dir
    program = str(build_dir() / "client" / "softmax_train")
    env = {k: v for k, v in os.environ.items() if not k.startswith("GRADAGG_") or k == "GRADAGG_LIB"}
    env.update(GRADAGG_SERVER=server.addr, GRADAGG_JOB="softmax-elastic", GRADAGG_RANK="any",
               GRADAGG_WORLD_SIZE="4", GRADAGG_MIN_WORLD_SIZE="1")
    steps = 1500

    def start() -> subprocess.Popen:
        return subprocess.Popen([program, "--codec", "2bit", "--threshold", "0.05", "--steps", str(steps), "--lr", "1"],
                                env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)

    def wait_status(ok) -> Dict[str, Any]:
        end = time.monotonic() + 60
        while True:
            rc, doc = cli_json("--server", server.addr, "status", "softmax-elastic")
            if rc == 0 and ok(doc["shards"][0]):
                return doc["shards"][0]
            assert time.monotonic() < end, doc
            time.sleep(0.005)

    def joined(s: Dict[str, Any]) -> List[int]:
        return [m["rank"] for m in s["members"] if m["joined"]]

    a = start()
    wait_status(lambda s: s["version"] >= 20)
    b = start()
    s = wait_status(lambda s: joined(s) == [0, 1] and s["version"] < steps - 200)
    b.send_signal(signal.SIGTERM)
    out_b = b.communicate(timeout=60)[0]
    assert b.returncode == 143 and "stopped by SIGTERM" in out_b, out_b
    assert wait_status(lambda s: joined(s) == [0])["version"] < steps
    c = start()
    out_a, out_c = a.communicate(timeout=120)[0], c.communicate(timeout=120)[0]
    assert a.returncode == 0 and c.returncode == 0, (out_a, out_c)
    s = wait_status(lambda s: True)
    assert s["version"] == steps and s["finished"], s
    assert "stats rank 1" in out_c, out_c  # the rank b freed
    ranks = {tuple(r["ranks"]) for r in s["recent_steps"]}
    assert ranks <= {(0,), (0, 1)}, ranks
    # As good as the teacher that labelled the data (the population optimum), within 0.02.
    teacher = re.search(r"teacher loss [0-9.]+ accuracy ([0-9.]+)", out_a)
    final = re.search(r"final loss [0-9.]+ accuracy ([0-9.]+)", out_a)
    assert teacher and final and float(final.group(1)) > float(teacher.group(1)) - 0.02, out_a[-2000:]


def test_pushes_ahead_survive_restarts_and_checkpoints(tmp_path: Path) -> None:
    """Bounded staleness 2 with a checkpoint every version (one kept, so journal segments go as
    soon as they may): the server is killed twice while ranks have pushes acknowledged ahead of
    the open step; the restarted server replays them, and the result is the replay of every step
    with all three contributions."""
    server = Server(gradagg._lib.server_binary(), tmp_path, "--checkpoint-steps", "1", "--checkpoint-keep", "1")
    try:
        job, steps = "ssp-restart", 40
        workers = [Worker(tmp_path, f"r{r}", server.addr, job, "--world", "3", "--min", "0", "--rank", str(r),
                          "--staleness", "2", "--steps", str(steps), "--sleep-ms", "60" if r == 2 else "10",
                          "--jitter", str(r)) for r in range(3)]
        for kill_at in (8, 24):
            workers[0].wait_for(lambda w: w.steps_done() >= kill_at)
            server.stop()
            server = server.restart()
        for w in workers:
            w.wait()
        ahead = max(e["step"] - e["base"] for w in workers for e in w.events() if "step" in e)
        assert ahead == 2, ahead
        s = status(server.addr, job)
        assert s["version"] == steps, s
        records = {t: [0, 1, 2] for t in range(steps)}
        for w in workers:
            final = w.events()[-1]
            np.testing.assert_array_equal(np.array(final["params"], F32), replay(records, final["final"]))
        segments = sorted(p.name for p in (tmp_path / "data").rglob("journal-*.log"))
        assert len(segments) < 10, segments  # pruned as the checkpoints went by
    finally:
        server.stop()


def test_a_late_distributed_optimizer_takes_the_model_and_the_step(server) -> None:
    """gradagg.torch in an elastic job: a DistributedOptimizer created while the job trains gets
    a rank from the server, the job's current parameters in its model (not its own initial
    ones) and the version to go on from; then both train the same steps."""
    torch = pytest.importorskip("torch")
    from gradagg.torch import DistributedOptimizer

    def model(seed: int) -> Any:
        torch.manual_seed(seed)
        return torch.nn.Sequential(torch.nn.Linear(8, 4), torch.nn.Tanh(), torch.nn.Linear(4, 2))

    x, y = torch.randn(32, 8, generator=torch.Generator().manual_seed(0)), torch.arange(32) % 2

    def step(net: Any, opt: Any, part: slice) -> None:
        opt.zero_grad()
        torch.nn.functional.cross_entropy(net(x[part]), y[part]).backward()
        opt.step()

    common = dict(server=server.addr, job="late-torch", rank="any", world_size=4, min_world_size=1,
                  optimizer=gradagg.SGD(lr=0.1, momentum=0.9), **FAST)
    first = model(1)
    a = DistributedOptimizer(first.parameters(), **common)
    for _ in range(3):
        step(first, a, slice(0, 32))
    late = model(2)
    b = DistributedOptimizer(late.parameters(), **common)
    assert (a.rank, b.rank) == (0, 1) and b.version == a.version == 3
    for p, q in zip(first.parameters(), late.parameters()):
        assert torch.equal(p, q)
    import threading
    t = threading.Thread(target=step, args=(first, a, slice(0, 16)))
    t.start()
    step(late, b, slice(16, 32))
    t.join(30)
    assert a.version == b.version == 4
    for p, q in zip(first.parameters(), late.parameters()):
        assert torch.equal(p, q)
    a.close()
    b.close()
