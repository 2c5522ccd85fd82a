#!/usr/bin/python3
"""Shaped-network benchmark (issue 6): gradagg against torch.distributed gloo all_reduce.

W worker namespaces and one namespace per shard on a private bridge (bench/netbench_net.py),
each link tbf-shaped to the same rate both ways; for each link rate and tensor size, in one run:
gloo all_reduce fp32 and fp16, and gradagg (Python workers, the C library encodes and decodes)
with each codec for S = 1 and 2 shards, all on the same fixed random gradients. Prints the median
step time, the ratio to gloo fp32, the ratio to the wire bound, the step profile and each shard's
peak RSS against its memory bound; writes JSON and a PNG (bench/netbench_report.py).

Needs root (network namespaces). Everything it creates is removed at the end, also on an error,
Ctrl-C or SIGTERM; a run killed with SIGKILL is swept by the next one.

  sudo /usr/bin/python3 bench/netbench.py --server build/release/service/gradagg-server
       [--links 1gbit,10gbit,none] [--sizes 25000000,2500000] [--shards 1,2] [--world 4]
       [--systems gloo-fp32,gloo-fp16,none,fp16,2bit,topk,topk-fp32pull] [--journal-sync step]

Exit status: 0 when every row ran (S = 2 rows may be "pending") and every memory bound held.
"""
import argparse
import datetime
import mmap
import os
import platform
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, HERE)

import netbench_net as nn  # noqa: E402
import netbench_report as report  # noqa: E402
from netbench_procs import Proc, check_build, cpu_s, free_port, metrics, reset_hwm, thread_cpu_s, vm_status  # noqa: E402

MIB = 1 << 20


@dataclass(frozen=True)
class System:
    """One row kind: gloo (dtype) or gradagg (push codec and pull codec with their parameters)."""

    name: str
    gloo: Optional[str] = None  # "fp32" / "fp16" for gloo rows
    codec: str = "none"
    threshold: Optional[float] = None
    ratio: Optional[float] = None
    pull_codec: str = "none"
    pull_threshold: Optional[float] = None
    pull_ratio: Optional[float] = None
    lanes: bool = False  # the SDK's lanes (--lanes of them per shard) instead of one

    def label(self, lanes: int = 1) -> str:
        if self.gloo:
            return f"gloo {self.gloo}"
        push = self.codec + (f" {self.ratio:g}" if self.ratio else "")
        return (f"{push}, {'fp32' if self.pull_codec == 'none' else self.pull_codec} pull"
                + (f", {lanes} lanes" if self.lanes else ""))


# Gradients are N(0, 0.01^2) (netbench_grads.py); the 2bit push threshold is one std. The pulled
# deltas are about lr x the mean gradient (momentum grows them), so the pull threshold is 0.001.
SYSTEMS = {s.name: s for s in [
    System("gloo-fp32", gloo="fp32"),
    System("gloo-fp16", gloo="fp16"),
    System("none"),
    System("fp16", codec="fp16"),
    System("2bit", codec="2bit", threshold=0.01, pull_codec="2bit", pull_threshold=0.001),
    System("topk", codec="topk", ratio=0.001, pull_codec="2bit", pull_threshold=0.001),
    System("topk-fp32pull", codec="topk", ratio=0.001),
    System("2bit-fp32pull", codec="2bit", threshold=0.01),
    System("none-lanes", lanes=True),
    System("2bit-lanes", codec="2bit", threshold=0.01, pull_codec="2bit", pull_threshold=0.001, lanes=True),
    System("topk-lanes", codec="topk", ratio=0.001, pull_codec="2bit", pull_threshold=0.001, lanes=True),
]}
DEFAULT_SYSTEMS = "gloo-fp32,gloo-fp16,none,none-lanes,fp16,2bit,2bit-lanes,topk,topk-lanes,topk-fp32pull"


@dataclass
class Shard:
    proc: Proc
    addr: str  # host:port it listens on
    prefix: List[str]  # runs a command in its namespace
    metrics_url: str

    def memory(self) -> Dict[str, float]:
        """VmRSS now, the accounted allocator's bytes (now and at most since start) and the
        buffered push payloads."""
        m = metrics(self.prefix, self.metrics_url,
                    ["gradagg_memory_bytes", "gradagg_memory_peak_bytes", "gradagg_held_bytes"])
        return {"vm_rss": vm_status(self.proc.pid, "VmRSS"), "vm_hwm": vm_status(self.proc.pid),
                "accounted": m.get("gradagg_memory_bytes"), "accounted_peak": m.get("gradagg_memory_peak_bytes"),
                "held": m.get("gradagg_held_bytes")}


class Interrupted(BaseException):
    """SIGTERM/SIGHUP: unwinds like Ctrl-C so every finally block cleans up."""


def on_signal(signum: int, _frame: Any) -> None:
    raise Interrupted(f"signal {signum}")


@dataclass
class Bench:
    args: argparse.Namespace
    net: Optional[nn.Network] = None
    procs: List[Proc] = field(default_factory=list)
    dirs: List[str] = field(default_factory=list)
    logdir: str = ""
    port: int = 29500
    row_id: int = 0
    env: Dict[str, str] = field(default_factory=dict)

    # ---- where things run ----

    def prefix(self, link: str, node: str) -> List[str]:
        return [] if link == "lo" else self.net.exec_prefix(node)

    def addr(self, link: str, node: str) -> str:
        return "127.0.0.1" if link == "lo" else self.net.nodes[node].addr

    def spawn(self, name: str, argv: List[str], stdin: bool = False, env: Optional[Dict[str, str]] = None) -> Proc:
        log = os.path.join(self.logdir, f"{self.row_id:03d}-{name}.log")
        p = Proc(f"{name} (row {self.row_id})", argv, log, env=env or self.env, stdin=stdin)
        self.procs.append(p)
        return p

    def stop_all(self) -> None:
        while self.procs:
            self.procs.pop().stop(grace=20)
        for d in self.dirs:
            shutil.rmtree(d, ignore_errors=True)
        self.dirs.clear()

    # ---- servers ----

    def start_shards(self, link: str, shards: int, deadline: float) -> List[Shard]:
        out = []
        for k in range(shards):
            node = f"s{k}"
            data = tempfile.mkdtemp(prefix="gnb-data-")  # fresh: nothing to restore
            self.dirs.append(data)
            host = self.addr(link, node)
            listen = f"{host}:{0 if link == 'lo' else 7070}"
            admin = f"{host}:{free_port() if link == 'lo' else 7071}"  # /metrics: the accounted memory
            env = dict(self.env, **dict(kv.split("=", 1) for kv in self.args.server_env))
            p = self.spawn(f"{node}-server", self.prefix(link, node) + [
                self.args.server, "--listen", listen, "--admin-listen", admin, "--data-dir", data,
                "--journal-sync", self.args.journal_sync, "--log-level", "warn"], env=env)
            while True:
                line = p.next_line(deadline)
                if line is None:
                    raise RuntimeError(f"{p.name} exited: {p.tail()}")
                if "listening on " in line:
                    out.append(Shard(p, line.split("listening on ", 1)[1].strip(), self.prefix(link, node),
                                     f"http://{admin}/metrics"))
                    break
        return out

    # ---- one row ----

    def run_gradagg(self, link: str, elements: int, sysm: System, shards: int) -> Dict[str, Any]:
        a = self.args
        steps, warmup = self.steps_for(elements)
        deadline = time.monotonic() + a.run_timeout
        servers = self.start_shards(link, shards, deadline)
        target = ",".join(sh.addr for sh in servers)
        job = f"nb-{sysm.name}-{elements}"
        workers = []
        for r in range(a.world):
            argv = [sys.executable, os.path.join(HERE, "netbench_worker.py"), "--server", target, "--job", job,
                    "--rank", str(r), "--world", str(a.world), "--elements", str(elements), "--codec", sysm.codec,
                    "--pull-codec", sysm.pull_codec, "--warmup", str(warmup), "--steps", str(steps),
                    "--threads", str(a.threads), "--lanes", str(a.lanes if sysm.lanes else 1)]
            for flag, v in (("--threshold", sysm.threshold), ("--ratio", sysm.ratio),
                            ("--pull-threshold", sysm.pull_threshold), ("--pull-ratio", sysm.pull_ratio)):
                if v is not None:
                    argv += [flag, repr(v)]
            workers.append(self.spawn(f"w{r}-gradagg", self.prefix(link, f"w{r}") + argv, stdin=True))
        for w in workers:
            w.next_event(deadline)  # "warm": joined, initialised, warm-up steps done
        warm = [sh.memory() for sh in servers]  # its VmHWM: the peak of start-up, init and warm-up
        for sh in servers:
            reset_hwm(sh.proc.pid)  # from here VmHWM is the peak of the measured steps
        cpu0 = [cpu_s(sh.proc.pid) for sh in servers]
        thr0 = [thread_cpu_s(sh.proc.pid) for sh in servers]
        link0 = self.counters(link)
        for w in workers:
            w.send("go")
        reports = [w.next_event(deadline) for w in workers]
        link1 = self.counters(link)
        cpu1 = [cpu_s(sh.proc.pid) for sh in servers]
        thr1 = [thread_cpu_s(sh.proc.pid) for sh in servers]
        end = [sh.memory() for sh in servers]
        codes = [sh.proc.stop() for sh in servers]
        for w in workers:
            w.stop(grace=20)
        if any(c != 0 for c in codes):
            raise RuntimeError(f"a server exited with {codes} after SIGTERM")
        row = report.gradagg_row(reports, steps)
        row["server_cpu_s_per_step"] = sum(c1 - c0 for c0, c1 in zip(cpu0, cpu1)) / steps
        row["link_bytes_per_step"] = report.link_delta(link0, link1, steps)
        row["server_threads_cpu_s_per_step"] = [report.thread_split(t0, t1, steps) for t0, t1 in zip(thr0, thr1)]
        row["shard_mem"] = [report.memory_check(w0, e, elements, shards, a.world, row["bytes_pushed"], self.momentum)
                            for w0, e in zip(warm, end)]
        return row

    def run_gloo(self, link: str, elements: int, sysm: System) -> Dict[str, Any]:
        a = self.args
        steps, warmup = self.steps_for(elements)
        deadline = time.monotonic() + a.run_timeout
        self.port += 1
        master = f"{self.addr(link, 'w0')}:{self.port}"
        ranks = [self.spawn(f"w{r}-gloo", self.prefix(link, f"w{r}") + [
            sys.executable, os.path.join(HERE, "netbench_gloo.py"), "--rank", str(r), "--world", str(a.world),
            "--master", master, "--iface", "lo" if link == "lo" else nn.IFACE, "--elements", str(elements),
            "--dtype", sysm.gloo, "--warmup", str(warmup), "--steps", str(steps)], stdin=True)
            for r in range(a.world)]
        for p in ranks:
            p.next_event(deadline)  # "warm"
        link0 = self.counters(link)
        for p in ranks:
            p.send("go")
        reports = [p.next_event(deadline) for p in ranks]
        link1 = self.counters(link)
        for p in ranks:
            p.stop(grace=20)
        return dict(report.gloo_row(reports), link_bytes_per_step=report.link_delta(link0, link1, steps))

    def counters(self, link: str) -> Optional[Dict[str, List[int]]]:
        return None if link == "lo" else self.net.counters()

    def steps_for(self, elements: int) -> Tuple[int, int]:
        big = elements >= 10_000_000
        return (self.args.big_steps if big else self.args.steps), (1 if big else self.args.warmup)

    @property
    def momentum(self) -> bool:
        return True  # netbench_worker.py's server SGD has momentum 0.9: one state array

    def run_row(self, link: str, elements: int, sysm: System, shards: int, shard_ok: Tuple[bool, str]
                ) -> Dict[str, Any]:
        base = {"link": link, "elements": elements, "system": sysm.name, "label": sysm.label(self.args.lanes),
                "shards": 0 if sysm.gloo else shards, "lanes": self.args.lanes if sysm.lanes else 1,
                "world": self.args.world}
        if not sysm.gloo and shards > 1 and not shard_ok[0]:
            return {**base, "status": "pending", "error": shard_ok[1]}
        t0 = time.monotonic()
        self.row_id += 1
        try:
            row = self.run_gloo(link, elements, sysm) if sysm.gloo else self.run_gradagg(link, elements, sysm, shards)
            row = {**base, "status": "ok", **row}
        except (Exception, TimeoutError) as e:
            row = {**base, "status": "failed", "error": f"{type(e).__name__}: {e}"}
        finally:
            self.stop_all()
        row["wall_s"] = time.monotonic() - t0
        return row


def sharding_supported(env: Dict[str, str]) -> Tuple[bool, str]:
    """Whether this libgradagg takes a comma-separated shard list: without shard support the
    whole list goes to the resolver as one host name ("DNS resolution failed")."""
    code = ("import gradagg\n"
            "try:\n"
            "    gradagg.Client('127.0.0.1:9,127.0.0.1:10', 'probe', 0, 1, max_retries=0, call_timeout_ms=2000)\n"
            "except Exception as e:\n"
            "    print(e)\n")
    r = subprocess.run([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       text=True, timeout=60)
    if "DNS resolution failed" in r.stdout or "Domain name not found" in r.stdout:
        return False, "this libgradagg takes one host:port (no shard lists yet)"
    return True, ""


def disk_probe(directory: str, total: int = 256 << 20, block: int = 2 << 20, rounds: int = 3) -> float:
    """Bytes per second of direct (O_DIRECT) writes into a new file in directory, the way the
    shards write their journals and checkpoints (service/persist/dfile.h): the median of rounds."""
    buf = mmap.mmap(-1, block)  # page aligned, as O_DIRECT wants
    buf.write(b"\x5a" * block)
    rates = []
    for _ in range(rounds):
        fd, path = tempfile.mkstemp(prefix="gnb-disk-", dir=directory)
        os.close(fd)
        fd = os.open(path, os.O_WRONLY | os.O_DIRECT)
        try:
            t0 = time.perf_counter()
            for _ in range(total // block):
                os.write(fd, buf)
            os.fdatasync(fd)
            rates.append(total / (time.perf_counter() - t0))
        finally:
            os.close(fd)
            os.unlink(path)
    return sorted(rates)[len(rates) // 2]


def machine() -> Dict[str, Any]:
    model = ""
    try:
        with open("/proc/cpuinfo") as f:
            model = next((l.split(":", 1)[1].strip() for l in f if l.startswith("model name")), "")
    except OSError:
        pass
    return {"date": datetime.datetime.now().isoformat(timespec="seconds"), "host": platform.node(),
            "kernel": platform.release(), "cpu": model, "cpus": os.cpu_count(), "loadavg_start": os.getloadavg()}


def parse_args(argv: Optional[List[str]] = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--server", default=os.path.join(REPO, "build/release/service/gradagg-server"))
    ap.add_argument("--lib", default=None, help="libgradagg.so (default: next to the server's build)")
    ap.add_argument("--links", default="1gbit,10gbit,none", help="tbf rates; 'none' = veth unshaped, 'lo' = "
                    "no namespaces, everything on 127.0.0.1")
    ap.add_argument("--sizes", default="25000000,2500000", help="floats per tensor")
    ap.add_argument("--shards", default="1,2")
    ap.add_argument("--world", type=int, default=4)
    ap.add_argument("--systems", default=DEFAULT_SYSTEMS, help=f"from {','.join(SYSTEMS)}")
    ap.add_argument("--steps", type=int, default=5, help="measured steps (tensors under 10M floats)")
    ap.add_argument("--warmup", type=int, default=2, help="warm-up steps (tensors under 10M floats)")
    ap.add_argument("--big-steps", type=int, default=3, help="measured steps from 10M floats (1 warm-up)")
    ap.add_argument("--threads", type=int, default=1, help="each gradagg worker's encode/decode threads")
    ap.add_argument("--lanes", type=int, default=16, help="lanes per shard of the '-lanes' systems")
    ap.add_argument("--journal-sync", default="step", choices=("none", "step", "push"))
    ap.add_argument("--server-env", action="append", default=[], metavar="KEY=VALUE",
                    help="environment of the shards (e.g. MALLOC_MMAP_THRESHOLD_=131072)")
    ap.add_argument("--run-timeout", type=float, default=600, help="seconds for one row, start to end")
    ap.add_argument("--probe-seconds", type=float, default=1.0)
    ap.add_argument("--json", default=os.path.join(REPO, "build/results/netbench.json"))
    ap.add_argument("--plot", default=os.path.join(REPO, "build/results/netbench.png"))
    a = ap.parse_args(argv)
    a.links = [x for x in a.links.split(",") if x]
    a.sizes = [int(x) for x in a.sizes.split(",") if x]
    a.shards = [int(x) for x in a.shards.split(",") if x]
    a.systems = [SYSTEMS[x] for x in a.systems.split(",") if x]
    for link in a.links:
        nn.rate_bits(link)  # raises on a bad rate
    check_build(ap, a)
    return a


def bench_start(tool: str, a: argparse.Namespace, **env: str) -> Optional[Tuple[Dict[str, str], Dict[str, Any]]]:
    """What netbench and trainbench do first: refuse shaped links without root (a message, then
    None), stop cleanly on SIGTERM and SIGHUP, and return the children's environment (the SDK and
    bench/ on PYTHONPATH, a.lib, quiet logs, and env) and the run's record (machine, arguments)."""
    if os.geteuid() != 0 and any(link != "lo" for link in a.links):
        print(f"{tool}: network namespaces need root (or --links lo)", file=sys.stderr)
        return None
    for s in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(s, on_signal)
    child_env = dict(os.environ, PYTHONPATH=os.pathsep.join([os.path.join(REPO, "client", "python"), HERE]),
                     GRADAGG_LIB=os.path.abspath(a.lib), GRADAGG_LOG_LEVEL="warn", **env)
    info = {"machine": machine(), "args": {k: (v if k != "systems" else [s.name for s in v])
                                           for k, v in vars(a).items()}, "probes": {}, "rows": []}
    return child_env, info


def main(argv: Optional[List[str]] = None) -> int:
    a = parse_args(argv)
    started = bench_start("netbench", a, OMP_NUM_THREADS=str(a.threads))
    if started is None:
        return 2
    env, info = started
    b = Bench(a, env=env, logdir=tempfile.mkdtemp(prefix="gnb-logs-"))
    swept = nn.sweep_stale()
    if swept:
        print(f"netbench: removed leftovers of a killed run: {' '.join(swept)}")
    shard_ok = sharding_supported(env) if max(a.shards) > 1 else (True, "")
    if not shard_ok[0]:
        print(f"netbench: S > 1 rows pending: {shard_ok[1]}")
    failed = False
    info["probes"]["disk_bytes_per_s"] = disk_probe(tempfile.gettempdir())
    print(f"== disk: direct writes into {tempfile.gettempdir()} (the shards' data) "
          f"{info['probes']['disk_bytes_per_s'] / 1e9:.2f} GB/s", flush=True)
    try:
        if any(link != "lo" for link in a.links):
            b.net = nn.Network(a.world, max(a.shards))
            b.net.create()
        for link in a.links:
            if link != "lo":
                b.net.shape(link)
                bits = nn.rate_bits(link)
                got = nn.probe(b.net, "w0", "s0", a.probe_seconds, bits)
                info["probes"][link] = got
                print(f"\n== link {link}: TCP probe w0 -> s0 {got / 1e9:.3f} Gbit/s"
                      + (f" ({got / bits:.1%} of the tbf rate)" if bits else " (unshaped veth)"), flush=True)
            else:
                print("\n== link lo: default namespace, 127.0.0.1, no shaping", flush=True)
            for elements in a.sizes:
                for sysm in a.systems:
                    for shards in ([1] if sysm.gloo else a.shards):
                        row = b.run_row(link, elements, sysm, shards, shard_ok)
                        info["rows"].append(row)
                        report.finish_rows(info["rows"], link, elements, a.world)
                        print(report.row_line(row), flush=True)
                        failed |= row["status"] == "failed"
    except (KeyboardInterrupt, Interrupted) as e:
        print(f"\nnetbench: interrupted ({str(e) or 'Ctrl-C'}); cleaning up", file=sys.stderr)
        failed = True
    finally:
        failed = nn.finish_run(b, "netbench", failed)
    info["machine"]["loadavg_end"] = os.getloadavg()
    mem_ok = report.summarise(info, a)
    if failed:
        print(f"netbench: worker/server logs kept in {b.logdir}", file=sys.stderr)
    return 0 if (not failed and mem_ok) else 1


if __name__ == "__main__":
    sys.exit(main())
