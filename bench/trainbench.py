#!/usr/bin/python3
"""Training benchmark (issue 23): a real training loop through gradagg against PyTorch DDP.

W ranks train the same MLP student on a teacher's labels (bench/trainbench_model.py): same model,
data, seeds and SGD (lr, momentum) for every system. Systems, in one run per link and regime:
the compute-only floor (each rank trains alone: no communication), DDP over gloo fp32, DDP with
the fp16 and PowerSGD comm hooks, and gradagg through gradagg.torch.DistributedOptimizer with
each codec. Each rank runs in its own network namespace behind a tbf-shaped link (one more for
the gradagg shard; bench/netbench_net.py), or everything on 127.0.0.1 for the link "lo". With
--colocate gradagg runs one shard on each worker's node instead (BytePS's colocated servers: each
link then carries what DDP's ring all-reduce does, 2 (W - 1) / W of the model each way).

Regimes: "comm" (32 samples per rank: the communication-bound regime of GPU training on slow
links; the run checks that DDP fp32 takes at least 2x the floor there) and "compute" (256
samples per rank: compute-heavy on these CPUs).

Per system: the median iteration (rank 0, evaluation excluded), its ratio to DDP fp32, to the
best DDP hook and to the floor max(compute, bytes on the busiest link / link rate); the held-out
loss after --iters iterations; the time to the target loss (the loss DDP fp32 reaches at
--iters): training wall time up to the first evaluation at or below it. JSON and a PNG (loss
against wall time) via bench/trainbench_report.py.

  sudo /usr/bin/python3 bench/trainbench.py [--links 1gbit,10gbit,lo] [--regimes compute,comm]
       [--systems floor,ddp-fp32,...] [--iters 100] [--model mlp10m]

With --model gpt3m or gpt6m the task is a byte-level GPT trained with AdamW (param groups, warm-up
and cosine schedule) on the Python standard library's source (bench/trainbench_gpt.py); every
system runs torch.optim.AdamW on the workers, gradagg's through DistributedOptimizer(optimizer=...).

--device cuda trains every rank on the one GPU (DDP all-reduces CUDA gradients over gloo; gradagg
pushes them from device memory); CPU otherwise.

Needs root unless --links lo. Everything it creates is removed at the end, also on an error.
Exit status: 0 when every row ran.
"""
import argparse
import os
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, HERE)

import netbench_net as nn  # noqa: E402
import trainbench_report as report  # noqa: E402
from netbench import Interrupted, bench_start  # noqa: E402
from netbench_procs import Proc, check_build  # noqa: E402


@dataclass(frozen=True)
class System:
    """One row: how a rank's gradients travel (the worker flags that select it)."""

    name: str
    kind: str  # floor | ddp | gradagg
    flags: tuple = ()

    @property
    def ddp_hook(self) -> bool:
        """One of DDP's own compression hooks (the peers gradagg is compared with)."""
        return self.kind == "ddp" and self.name.startswith("ddp-") and self.name != "ddp-fp32"

    @property
    def needs_shard(self) -> bool:
        """Runs through a gradagg-server: DistributedOptimizer, or DDP with gradagg's comm hook."""
        return self.name.startswith("gradagg-")


SYSTEMS = {s.name: s for s in [
    System("floor", "floor"),
    System("ddp-fp32", "ddp"),
    System("ddp-fp16", "ddp", ("--hook", "fp16")),
    System("ddp-powersgd1", "ddp", ("--hook", "powersgd", "--psgd-rank", "1", "--bucket-mb", "1024")),
    System("ddp-powersgd4", "ddp", ("--hook", "powersgd", "--psgd-rank", "4", "--bucket-mb", "1024")),
    System("gradagg-none", "gradagg", ("--codec", "none")),
    System("gradagg-none-serial", "gradagg", ("--codec", "none", "--no-overlap")),
    System("gradagg-fp16", "gradagg", ("--codec", "fp16")),
    # DistributedOptimizer's defaults: automatic 2bit thresholds both ways, momentum on the worker.
    System("gradagg-2bit", "gradagg", ("--codec", "2bit")),
    System("gradagg-2bit-2bitpull", "gradagg", ("--codec", "2bit", "--pull-codec", "2bit")),
    # The same in DDP's 25 MB buckets, and without overlap (one client, everything pushed in step()).
    System("gradagg-2bit-2bitpull-b25", "gradagg", ("--codec", "2bit", "--pull-codec", "2bit", "--bucket-mb", "25")),
    System("gradagg-2bit-2bitpull-serial", "gradagg", ("--codec", "2bit", "--pull-codec", "2bit", "--no-overlap")),
    System("gradagg-1bit_scaled", "gradagg", ("--codec", "1bit_scaled")),  # sign bits, a scale per 1024
    System("gradagg-topk", "gradagg", ("--codec", "topk")),  # TOPK_TRAINING: 10%, fp16, varint
    System("gradagg-topk-0.01", "gradagg", ("--codec", "topk", "--ratio", "0.01")),
    System("gradagg-topk-dgc", "gradagg", ("--codec", "topk", "--ratio", "0.001", "--dgc")),
    System("gradagg-topk-2bitpull", "gradagg", ("--codec", "topk", "--pull-codec", "2bit")),
    # AdamW (--model gpt*): compressed gradients with the optimizer as given (no exact warm-up, no
    # frozen variance), and the compressed-momentum scheme with other warm-ups than the default.
    System("gradagg-2bit-2bitpull-naive", "gradagg", ("--codec", "2bit", "--pull-codec", "2bit", "--adam-warmup", "0")),
    System("gradagg-2bit-2bitpull-w20", "gradagg", ("--codec", "2bit", "--pull-codec", "2bit", "--adam-warmup", "20")),
    System("gradagg-2bit-2bitpull-w50", "gradagg", ("--codec", "2bit", "--pull-codec", "2bit", "--adam-warmup", "50")),
    # AdamW on block-scaled integer gradients (docs/sdk.md, "Adam with int8 gradients").
    System("gradagg-int8", "gradagg", ("--codec", "int8", "--pull-codec", "int8")),
    System("gradagg-int4", "gradagg", ("--codec", "int4", "--pull-codec", "int4")),
    System("gradagg-int4-int8pull", "gradagg", ("--codec", "int4", "--pull-codec", "int8")),
    # DDP and torch.optim.SGD, the buckets reduced through gradagg.torch.comm_hook.
    System("gradagg-hook-none", "ddp", ("--hook", "gradagg", "--codec", "none")),
    System("gradagg-hook-fp16", "ddp", ("--hook", "gradagg", "--codec", "fp16")),
    System("gradagg-hook-2bit-2bitpull", "ddp", ("--hook", "gradagg", "--codec", "2bit", "--pull-codec", "2bit")),
    # The same with the momentum moved into the hook (DGC's correction before the encode) and the
    # model's SGD without momentum, as DistributedOptimizer does with a residual codec.
    System("gradagg-hook-2bit-2bitpull-wm", "ddp",
           ("--hook", "gradagg", "--codec", "2bit", "--pull-codec", "2bit", "--hook-momentum")),
    # top-k at DistributedOptimizer's training ratio (10%), the momentum in the hook.
    System("gradagg-hook-topk", "ddp", ("--hook", "gradagg", "--codec", "topk", "--ratio", "0.1", "--hook-momentum")),
]}
DEFAULT_SYSTEMS = ",".join(SYSTEMS)
# Samples per rank per iteration. With an optimised BLAS (scripts/bootstrap installs OpenBLAS) 32
# samples of mlp10m take ~0.06 s per rank on one core: at 1 Gbit that is communication-bound.
REGIMES = {"comm": 32, "compute": 256}
# The transformer task (bench/trainbench_gpt.py): windows of 64 bytes per rank per iteration. One
# window of gpt6m takes ~0.12 s per rank on one core, about what DDP's ring needs at 1 Gbit.
GPT_REGIMES = {"comm": 1, "compute": 8}
GPT_MODELS = ("gpt3m", "gpt6m")


def batch_size(model: str, regime: str) -> int:
    return (GPT_REGIMES if model in GPT_MODELS else REGIMES)[regime]


@dataclass
class Bench:
    args: argparse.Namespace
    env: Dict[str, str]
    logdir: str
    net: Optional[nn.Network] = None
    procs: List[Proc] = field(default_factory=list)
    shards: List[Proc] = field(default_factory=list)  # this row's gradagg-server processes
    dirs: List[str] = field(default_factory=list)
    row_id: int = 0
    port: int = 29600

    def prefix(self, link: str, node: str) -> List[str]:
        return [] if link == "lo" else self.net.exec_prefix(node)

    def addr(self, link: str, node: str) -> str:
        return "127.0.0.1" if link == "lo" else self.net.nodes[node].addr

    def spawn(self, name: str, argv: List[str], stdin: bool = False) -> Proc:
        p = Proc(f"{name} (row {self.row_id})", argv, os.path.join(self.logdir, f"{self.row_id:03d}-{name}.log"),
                 env=self.env, stdin=stdin)
        self.procs.append(p)
        return p

    def stop_all(self) -> None:
        while self.procs:
            self.procs.pop().stop(grace=20)
        self.shards.clear()
        for d in self.dirs:
            shutil.rmtree(d, ignore_errors=True)
        self.dirs.clear()

    def start_shards(self, link: str, deadline: float) -> str:
        """The gradagg-server address list: one server on node s0, or with --colocate one shard
        on every worker's node (each link then carries what DDP's ring does)."""
        nodes = [f"w{r}" for r in range(self.args.world)] if self.args.colocate else ["s0"]
        return ",".join(self.start_shard(link, node, deadline) for node in nodes)

    def start_shard(self, link: str, node: str, deadline: float) -> str:
        data = tempfile.mkdtemp(prefix="gtb-data-")
        self.dirs.append(data)
        host = self.addr(link, node)
        p = self.spawn(f"{node}-server", self.prefix(link, node) + [
            self.args.server, "--listen", f"{host}:{0 if link == 'lo' else 7070}", "--admin-listen", f"{host}:0",
            "--data-dir", data, "--log-level", "warn", *self.args.server_arg])
        self.shards.append(p)
        while True:
            line = p.next_line(deadline)
            if line is None:
                raise RuntimeError(f"{p.name} exited: {p.tail()}")
            if "listening on " in line:
                return line.split("listening on ", 1)[1].strip()

    def run_system(self, link: str, regime: str, sysm: System) -> Dict[str, Any]:
        a = self.args
        deadline = time.monotonic() + a.run_timeout
        common = ["--system", sysm.kind, "--world", str(a.world), "--model", a.model, "--batch",
                  str(batch_size(a.model, regime)), "--iters", str(a.iters), "--eval-every", str(a.eval_every),
                  "--seed", str(a.seed), "--lr", str(a.lr), "--momentum", str(a.momentum), "--optim", a.optim,
                  "--weight-decay", str(a.weight_decay), "--warmup", str(a.warmup), "--eval-samples",
                  str(a.eval_samples), "--device", a.device, *sysm.flags]
        if sysm.needs_shard:
            common += ["--server", self.start_shards(link, deadline), "--job", f"tb-{self.row_id}"]
        if sysm.kind == "ddp":
            self.port += 1
            common += ["--master", f"{self.addr(link, 'w0')}:{self.port}", "--iface",
                       "lo" if link == "lo" else nn.IFACE]
        ranks = [self.spawn(f"w{r}-{sysm.name}", self.prefix(link, f"w{r}") + [
            sys.executable, os.path.join(HERE, "trainbench_worker.py"), "--rank", str(r), *common], stdin=True)
            for r in range(a.world)]
        for p in ranks:
            p.next_event(deadline)  # "ready": joined, model built
        link0 = None if link == "lo" else self.net.counters()
        shard_cpu0 = sum(cpu_seconds(p.pid) for p in self.shards)
        for p in ranks:
            p.send("go")
        reports = [p.next_event(deadline) for p in ranks]
        shard_cpu = sum(cpu_seconds(p.pid) for p in self.shards) - shard_cpu0
        link1 = None if link == "lo" else self.net.counters()
        return report.system_row(reports, a.iters, link0, link1, shard_cpu)

    def run_row(self, link: str, regime: str, sysm: System) -> Dict[str, Any]:
        base = {"link": link, "regime": regime, "batch": batch_size(self.args.model, regime), "system": sysm.name,
                "kind": sysm.kind,
                "ddp_hook": sysm.ddp_hook, "world": self.args.world}
        t0 = time.monotonic()
        self.row_id += 1
        try:
            row = {**base, "status": "ok", **self.run_system(link, regime, sysm)}
        except (Exception, TimeoutError) as e:
            row = {**base, "status": "failed", "error": f"{type(e).__name__}: {e}"}
        finally:
            self.stop_all()
        row["wall_s"] = time.monotonic() - t0
        return row


def cpu_seconds(pid: int) -> float:
    """A live process's user + system CPU time, every thread ((14) utime and (15) stime of
    /proc/PID/stat, after the parenthesised command name)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def parse_args(argv: Optional[List[str]] = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--server", default=os.path.join(REPO, "build/release/service/gradagg-server"))
    ap.add_argument("--lib", default=None, help="libgradagg.so (default: next to the server's build)")
    ap.add_argument("--links", default="1gbit,10gbit,lo", help="tbf rates, 'none' (veth unshaped) or 'lo' "
                    "(no namespaces, 127.0.0.1)")
    ap.add_argument("--regimes", default="comm,compute", help=f"from {','.join(REGIMES)}")
    ap.add_argument("--systems", default=DEFAULT_SYSTEMS, help=f"from {','.join(SYSTEMS)}")
    ap.add_argument("--world", type=int, default=4)
    ap.add_argument("--model", default="mlp10m", help="mlp10m or mlp25m (bench/trainbench_model.py), gpt3m or "
                    "gpt6m (bench/trainbench_gpt.py: AdamW on the Python stdlib's source, bytes)")
    ap.add_argument("--iters", type=int, default=100)
    ap.add_argument("--eval-every", type=int, default=5)
    ap.add_argument("--target-iter", type=int, default=None,
                    help="the target loss is DDP fp32's after this many iterations (default: --iters); run "
                         "longer than it to see how far past it the others reach it")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--lr", type=float, default=None, help="default 0.05 (SGD), 3e-3 (AdamW)")
    ap.add_argument("--momentum", type=float, default=0.9, help="SGD")
    ap.add_argument("--weight-decay", type=float, default=0.1, help="AdamW, on matrices")
    ap.add_argument("--warmup", type=int, default=None, help="AdamW: lr warm-up iterations (default iters / 10), "
                    "then cosine to 10%% at --iters")
    ap.add_argument("--eval-samples", type=int, default=None, help="held-out samples (default 512; gpt: 128 "
                    "windows of 64 bytes)")
    ap.add_argument("--device", default="cpu", help="where the ranks train: cpu, or cuda (every rank on the one "
                    "GPU; gradagg pushes the gradients from device memory, DDP all-reduces them over gloo)")
    ap.add_argument("--server-arg", action="append", default=[], help="one more gradagg-server argument")
    ap.add_argument("--colocate", action="store_true",
                    help="gradagg: one shard on each worker's node (BytePS's colocated servers) instead of one "
                         "server on a node of its own")
    ap.add_argument("--run-timeout", type=float, default=1800, help="seconds for one row, start to end")
    ap.add_argument("--json", default=os.path.join(REPO, "build/results/trainbench.json"))
    ap.add_argument("--plot", default=os.path.join(REPO, "build/results/trainbench.png"))
    a = ap.parse_args(argv)
    a.optim = "adamw" if a.model in GPT_MODELS else "sgd"
    a.lr = a.lr if a.lr is not None else 3e-3 if a.optim == "adamw" else 0.05
    a.warmup = a.warmup if a.warmup is not None else a.iters // 10
    a.eval_samples = a.eval_samples or (128 if a.optim == "adamw" else 512)
    a.links = [x for x in a.links.split(",") if x]
    a.regimes = [x for x in a.regimes.split(",") if x]
    for r in a.regimes:
        if r not in REGIMES:
            ap.error(f"--regimes: {r!r} is not one of {', '.join(REGIMES)}")
    names = [x for x in a.systems.split(",") if x]
    for n in names:
        if n not in SYSTEMS:
            ap.error(f"--systems: {n!r} is not one of {', '.join(SYSTEMS)}")
    # The floor and DDP fp32 come first: every other row is measured against them.
    a.systems = [SYSTEMS[n] for n in sorted(set(names), key=lambda n: list(SYSTEMS).index(n))]
    for link in a.links:
        nn.rate_bits(link)  # raises on a bad rate
    check_build(ap, a, server_needed=any(s.needs_shard for s in a.systems))
    return a


def main(argv: Optional[List[str]] = None) -> int:
    a = parse_args(argv)
    started = bench_start("trainbench", a, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
    if started is None:
        return 2
    env, info = started
    b = Bench(a, env=env, logdir=tempfile.mkdtemp(prefix="gtb-logs-"))
    swept = nn.sweep_stale()
    if swept:
        print(f"trainbench: removed leftovers of a killed run: {' '.join(swept)}")
    failed = False
    try:
        if any(link != "lo" for link in a.links):
            b.net = nn.Network(a.world, 1)
            b.net.create()
        for link in a.links:
            bits = nn.rate_bits(link)
            if link != "lo":
                b.net.shape(link)
                got = nn.probe(b.net, "w0", "w1", 1.0, bits)
                info["probes"][link] = got
                print(f"\n== link {link}: TCP probe w0 -> w1 {got / 1e9:.3f} Gbit/s", flush=True)
            else:
                print("\n== link lo: default namespace, 127.0.0.1, no shaping", flush=True)
            for regime in a.regimes:
                print(f"-- {regime} regime: {batch_size(a.model, regime)} samples per rank, {a.iters} iterations",
                      flush=True)
                print(report.HEADER, flush=True)
                for sysm in a.systems:
                    row = b.run_row(link, regime, sysm)
                    info["rows"].append(row)
                    report.finish_rows(info["rows"], link, regime, bits, a.target_iter)
                    print(report.row_line(row), flush=True)
                    failed |= row["status"] == "failed"
    except (KeyboardInterrupt, Interrupted) as e:
        print(f"\ntrainbench: interrupted ({str(e) or 'Ctrl-C'}); cleaning up", file=sys.stderr)
        failed = True
    finally:
        failed = nn.finish_run(b, "trainbench", failed)
    info["machine"]["loadavg_end"] = os.getloadavg()
    report.summarise(info, a)
    if failed:
        print(f"trainbench: worker/server logs kept in {b.logdir}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
