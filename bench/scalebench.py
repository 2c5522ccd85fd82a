#!/usr/bin/python3
"""Scaling benchmark (issue 44): how a shard's cost grows with the ranks of a job, the shards of
a job, and the jobs of a server. Real gradagg-server processes on 127.0.0.1, real SDK clients
(gradagg.Client over libgradagg, one thread per rank: ctypes releases the GIL, so the ranks
encode and decode in parallel); every rank connects from the one address 127.0.0.1, as many
ranks behind a relay or a NAT do, so the shards run with --trusted-client-hosts 127.0.0.1
(docs/operations.md, "Admission").

Ranks: for each shard count S in --shards and world size W in --worlds, one job of W ranks, each
pushing a --elements tensor (codec --codec, pulls --pull-codec) for at least --steps measured
steps and --rank-steps rank-steps after --warmup: per shard, the server CPU per rank-step (utime + stime of the shard processes over the
measured steps, / steps / W / S) and per element pushed, the peak RSS, and the step's wall time.
The reference in the same run is the smallest W at the same S: "x ref" is the CPU per
rank-step over the reference's (1.00 = linear in W). The clients' CPU per rank-step (this
process's, over the same interval) is in the JSON: the worker side of the cost model
(docs/scaling.md, "The cost model").

Jobs: one server, --jobs small jobs (one rank, 1024 elements, one step each, the clients kept
open), then at --jobs / 10 in the same run as the reference: descriptors, RSS, /metrics bytes,
then SIGKILL and restart: the time until /readyz answers 200 with every job restored, and RSS
and descriptors after it.

  /usr/bin/python3 bench/scalebench.py [--worlds 4,16,64,256] [--shards 1,2,4] [--jobs 1000]
      [--elements 1048576] [--lanes 1] [--steps 8] [--json FILE]

Needs the Release build (GRADAGG_BUILD, default build/unit). The figures are in
docs/scaling.md."""
import argparse
import json
import os
import shutil
import signal
import statistics
import sys
import tempfile
import multiprocessing as mp
import threading
import time
import urllib.request
from typing import Any, Callable, Dict, List, Optional, Tuple

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
BUILD = os.environ.get("GRADAGG_BUILD", os.path.join(REPO, "build", "unit"))
os.environ.setdefault("GRADAGG_LIB", os.path.join(BUILD, "client", "libgradagg.so"))
sys.path.insert(0, os.path.join(REPO, "client", "python"))
sys.path.insert(0, HERE)

import numpy as np  # noqa: E402

import gradagg  # noqa: E402
from netbench_procs import Proc, cpu_s, vm_status  # noqa: E402

SERVER = os.path.join(BUILD, "service", "gradagg-server")
MIB = 1 << 20


class Shard:
    """One gradagg-server on 127.0.0.1 with its own data dir; .addr, .admin."""

    def __init__(self, work: str, name: str, *extra: str) -> None:
        self.dir = os.path.join(work, name)
        os.makedirs(self.dir, exist_ok=True)
        self.extra = extra
        self.proc: Optional[Proc] = None
        self.start()

    def start(self) -> float:
        """Starts the server; returns the seconds until /readyz answered 200."""
        t0 = time.monotonic()
        self.proc = Proc(os.path.basename(self.dir), [
            SERVER, "--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0", "--data-dir",
            os.path.join(self.dir, "data"), "--trusted-client-hosts", "127.0.0.1", "--log-level", "warn",
            *self.extra], os.path.join(self.dir, "server.log"))
        deadline = time.monotonic() + 120
        self.addr = self.admin = ""
        while not (self.addr and self.admin):
            line = self.proc.next_line(deadline)
            if line is None:
                raise RuntimeError(f"server did not start: {self.proc.tail()}")
            if line.startswith("gradagg-server: listening on "):
                self.addr = line.split()[-1]
            elif line.startswith("gradagg-server: admin on "):
                self.admin = line.split()[-1]
        while not self.ready():
            if time.monotonic() > deadline:
                raise RuntimeError(f"/readyz never answered 200: {self.proc.tail()}")
            time.sleep(0.01)
        return time.monotonic() - t0

    def ready(self) -> bool:
        try:
            with urllib.request.urlopen(f"http://{self.admin}/readyz", timeout=5) as r:
                return r.status == 200
        except OSError:
            return False

    def scrape_bytes(self) -> int:
        with urllib.request.urlopen(f"http://{self.admin}/metrics", timeout=30) as r:
            return len(r.read())

    def fds(self) -> int:
        return len(os.listdir(f"/proc/{self.proc.pid}/fd"))

    def rss(self, key: str = "VmRSS") -> int:
        return vm_status(self.proc.pid, key)

    def cpu(self) -> float:
        return cpu_s(self.proc.pid)

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.proc:
            self.proc.stop(sig)
            self.proc = None


def own_cpu_s() -> float:
    """This process's CPU seconds (every rank's thread: the SDK's encode, decode and calls)."""
    t = os.times()
    return t.user + t.system


def rank_loop(addrs: List[str], job: str, r: int, world: int, grad: np.ndarray, steps: int, a: argparse.Namespace,
              start: Any, end: Any) -> Tuple[List[float], float]:
    """One rank: warm up, then the measured steps between the two barriers. Returns its step times
    and its CPU seconds over them (meaningful in a process of its own)."""
    params = np.zeros(a.elements, np.float32)
    step_s: List[float] = []
    with gradagg.Client(addrs, job, r, world, pull_codec=a.pull_codec, mean=True, threads=1, lanes=a.lanes,
                        call_timeout_ms=600000, step_timeout_ms=600000) as c:
        c.add_tensor("w", params, codec=a.codec)
        c.init()
        for _ in range(a.warmup):
            c.step([grad])
        start.wait()
        cpu0 = own_cpu_s()
        for _ in range(steps):
            t0 = time.monotonic()
            c.step([grad])
            step_s.append(time.monotonic() - t0)
        cpu = own_cpu_s() - cpu0
        end.wait()
    return step_s, cpu


def start_ranks(addrs: List[str], job: str, world: int, grads: List[np.ndarray], steps: int,
                a: argparse.Namespace) -> Tuple[Any, Any, Callable[[], Tuple[List[float], Optional[float]]]]:
    """Starts the W ranks (threads of this process, or with --rank-processes processes of their
    own); returns the two barriers and a function that waits for the ranks and gives rank 0's
    step times and, with processes, the ranks' CPU seconds over the measured steps."""
    if not a.rank_processes:
        start, end = threading.Barrier(world + 1), threading.Barrier(world + 1)
        errors: List[str] = []
        result: Dict[int, Tuple[List[float], float]] = {}

        def rank(r: int) -> None:
            try:
                result[r] = rank_loop(addrs, job, r, world, grads[r % len(grads)], steps, a, start, end)
            except BaseException as e:  # noqa: BLE001 - reported, and the barriers broken
                errors.append(f"rank {r}: {type(e).__name__}: {e}")
                start.abort()
                end.abort()
        threads = [threading.Thread(target=rank, args=(r,), daemon=True) for r in range(world)]
        for t in threads:
            t.start()

        def finish_threads() -> Tuple[List[float], Optional[float]]:
            for t in threads:
                t.join(timeout=600)
            if errors:
                raise RuntimeError("; ".join(errors[:3]))
            return result[0][0], None  # the caller measures this process's CPU between the barriers
        return start, end, finish_threads
    # Processes: each rank its own client and connection, as training processes are. Forked
    # before this process has made any gRPC client.
    ctx = mp.get_context("fork")
    start, end = ctx.Barrier(world + 1), ctx.Barrier(world + 1)
    queue = ctx.Queue()

    def proc(r: int) -> None:
        try:
            queue.put((r, rank_loop(addrs, job, r, world, grads[r % len(grads)], steps, a, start, end), None))
        except BaseException as e:  # noqa: BLE001 - reported, and the barriers broken
            queue.put((r, None, f"rank {r}: {type(e).__name__}: {e}"))
            start.abort()
            end.abort()
    procs = [ctx.Process(target=proc, args=(r,), daemon=True) for r in range(world)]
    for p in procs:
        p.start()

    def finish_procs() -> Tuple[List[float], Optional[float]]:
        got = [queue.get(timeout=600) for _ in procs]
        for p in procs:
            p.join(timeout=60)
        errors = [e for _, _, e in got if e]
        if errors:
            raise RuntimeError("; ".join(errors[:3]))
        by_rank = {r: res for r, res, _ in got}
        return by_rank[0][0], sum(res[1] for res in by_rank.values())
    return start, end, finish_procs


def run_ranks(work: str, shards: int, world: int, a: argparse.Namespace) -> Dict[str, Any]:
    """One job of `world` ranks over `shards` servers: the measured steps' figures."""
    steps = max(a.steps, -(-a.rank_steps // world))
    servers = [Shard(work, f"s{shards}w{world}-{k}", *a.server_args.split()) for k in range(shards)]
    addrs = [s.addr for s in servers]
    job = f"scale-{shards}-{world}"
    rng = np.random.default_rng(world)
    grads = [rng.standard_normal(a.elements, dtype=np.float32) * 1e-3 for _ in range(min(world, 8))]
    try:
        start, end, finish = start_ranks(addrs, job, world, grads, steps, a)
        try:
            start.wait(timeout=600)
            cpu0 = sum(s.cpu() for s in servers)
            own0 = own_cpu_s()
            t0 = time.monotonic()
            end.wait(timeout=3600)
            wall = time.monotonic() - t0
            cpu1 = sum(s.cpu() for s in servers)
            own1 = own_cpu_s()
        except threading.BrokenBarrierError:
            pass
        step_s, client_cpu = finish()
        if client_cpu is None:  # the ranks are this process's threads
            client_cpu = own1 - own0
        hwm = [s.rss("VmHWM") for s in servers]
    finally:
        for s in servers:
            s.stop()
    cpu = cpu1 - cpu0
    return {
        "shards": shards, "world": world, "elements": a.elements, "lanes": a.lanes, "steps": steps,
        "ranks_as": "processes" if a.rank_processes else "threads",
        "step_s": statistics.median(step_s), "wall_s": wall,
        "server_cpu_s": cpu,
        "cpu_ms_per_rank_step_per_shard": 1e3 * cpu / steps / world / shards,
        "cpu_ns_per_element": 1e9 * cpu / steps / world / a.elements,
        "client_cpu_ms_per_rank_step": 1e3 * client_cpu / steps / world,
        "codec": a.codec, "pull_codec": a.pull_codec,
        "peak_rss_mib_per_shard": max(hwm) / MIB,
    }


def jobs_figures(work: str, count: int) -> Dict[str, Any]:
    """count one-rank jobs on one server, kept open: before and after a SIGKILL and restart."""
    s = Shard(work, f"jobs{count}", "--max-jobs", str(count + 16), "--max-unused-jobs-per-client", str(count + 16))
    clients: List[gradagg.Client] = []
    try:
        base_rss, base_fds = s.rss(), s.fds()
        grad = np.ones(1024, np.float32)
        t0 = time.monotonic()
        for i in range(count):
            c = gradagg.Client(s.addr, f"small-{i}", 0, 1, optimizer=gradagg.SGD(lr=0.1), call_timeout_ms=60000)
            clients.append(c)
            c.add_tensor("w", np.zeros(1024, np.float32))
            c.init()
            c.step([grad])
        create_s = time.monotonic() - t0
        before = {"rss_mib": s.rss() / MIB, "fds": s.fds(), "scrape_bytes": s.scrape_bytes()}
        s.proc.kill()
        s.proc = None
        restart_s = s.start()
        after = {"rss_mib": s.rss() / MIB, "fds": s.fds(), "scrape_bytes": s.scrape_bytes()}
    finally:
        for c in clients:
            c.close()
        s.stop()
    return {"jobs": count, "create_s": create_s, "base_rss_mib": base_rss / MIB, "base_fds": base_fds,
            "before": before, "restart_s": restart_s, "after": after}


def ranks_table(rows: List[Dict[str, Any]]) -> None:
    print("\n| shards S | ranks W | step s (median) | server CPU ms per rank-step, per shard | x ref (smallest W) "
          "| ns per element pushed | peak RSS MiB per shard |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    ref: Dict[int, float] = {}
    for r in rows:
        ref.setdefault(r["shards"], r["cpu_ms_per_rank_step_per_shard"])
        x = f"{r['cpu_ms_per_rank_step_per_shard'] / ref[r['shards']]:.2f}" if ref[r["shards"]] > 0 else "-"
        print(f"| {r['shards']} | {r['world']} | {r['step_s']:.3f} | {r['cpu_ms_per_rank_step_per_shard']:.2f} | "
              f"{x} | {r['cpu_ns_per_element']:.2f} | {r['peak_rss_mib_per_shard']:.0f} |")


def jobs_table(rows: List[Dict[str, Any]]) -> None:
    print("\n| jobs | RSS MiB (KiB per job over the empty server) | descriptors | /metrics bytes | restart s "
          "(to /readyz 200) | RSS MiB after restart | descriptors after |")
    print("|---:|---|---:|---:|---:|---:|---:|")
    for r in rows:
        b, af = r["before"], r["after"]
        per_job = (b["rss_mib"] - r["base_rss_mib"]) * 1024 / r["jobs"]
        print(f"| {r['jobs']} | {b['rss_mib']:.0f} ({per_job:.0f}) | {b['fds']} | {b['scrape_bytes']} | "
              f"{r['restart_s']:.2f} | {af['rss_mib']:.0f} | {af['fds']} |")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--worlds", default="4,16,64,256")
    ap.add_argument("--shards", default="1,2,4")
    ap.add_argument("--elements", type=int, default=1 << 20)
    ap.add_argument("--codec", default="2bit")
    ap.add_argument("--pull-codec", default="2bit")
    ap.add_argument("--lanes", type=int, default=1, help="lanes per shard (docs/sdk.md, \"Lanes\")")
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--steps", type=int, default=8, help="measured steps, at least")
    ap.add_argument("--rank-steps", type=int, default=512,
                    help="measured rank-steps, at least (more steps for small W: the CPU clock ticks at 10 ms)")
    ap.add_argument("--jobs", type=int, default=1000, help="0: skip the jobs part")
    ap.add_argument("--server-args", default="", help="more gradagg-server flags for the ranks part")
    ap.add_argument("--rank-processes", action="store_true",
                    help="each rank a process of its own (own client and connection, as training processes are); "
                         "default: threads of this process, whose clients share one connection per shard")
    ap.add_argument("--json", help="write every figure here")
    a = ap.parse_args()
    worlds = [int(w) for w in a.worlds.split(",")]
    shard_counts = [int(s) for s in a.shards.split(",")] if a.shards else []
    work = tempfile.mkdtemp(prefix="scalebench-")
    out: Dict[str, Any] = {"ranks": [], "jobs": [], "machine": os.uname().nodename, "cores": os.cpu_count(),
                           "date": time.strftime("%Y-%m-%d")}
    try:
        for s in shard_counts:
            for w in worlds:
                row = run_ranks(work, s, w, a)
                print(json.dumps(row), flush=True)
                out["ranks"].append(row)
        if a.jobs:
            for j in (max(1, a.jobs // 10), a.jobs):
                row = jobs_figures(work, j)
                print(json.dumps(row), flush=True)
                out["jobs"].append(row)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if out["ranks"]:
        ranks_table(out["ranks"])
    if out["jobs"]:
        jobs_table(out["jobs"])
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
