#!/usr/bin/python3
"""Hierarchical aggregation benchmark (issue 28, docs/relay.md): 2 nodes x 4 workers.

Three network namespaces on one bridge (bench/netbench_net.py): node w0 and node w1, each with
4 worker processes, and s0 with the upstream gradagg-server. Every namespace's veth is tbf-shaped
to --link both ways: the cross-node links. Inside a node, workers reach their relay on 127.0.0.1
(unshaped, as PCIe/NVLink would be). For each codec, in one run:

  flat-<codec>   every worker pushes <codec> to the server and pulls from it (4 pushes and 4
                 pulls per step on each node's link);
  relay-<codec>  every worker pushes fp32 to its node's relay (gradagg-server --relay-to), which
                 pushes the node's sum upstream with <codec> and its own residual and pulls once;
  relay-<codec>-inner (--inner) the same with the workers pushing <codec> to the relay too;
  gloo-fp32      torch.distributed gloo all_reduce fp32 of the same gradients over the same
                 layout (DDP's fp32 exchange): the reference.

Pull codecs as bench/netbench.py's rows (2bit and topk pull 2bit deltas, none and fp16 pull fp32).
Per row: the median step (wall time of the slowest rank per step), the bytes each node's link
carried per step (both directions), the CPU seconds per step of the ranks (all of them), the
upstream server and a relay (the mean of the two), and for relay rows the ratios to flat's bytes
and step for the same codec, against the targets (bytes <= 1/4, step <= 0.5x).

  sudo /usr/bin/python3 bench/relaybench.py [--server build/release/service/gradagg-server]
       [--link 1gbit] [--elements 2500000] [--codecs none,fp16,2bit,topk] [--steps 5] [--inner]

Needs root. Everything it creates is removed at the end, also on an error or a signal. Exit
status: 0 when every row ran.
"""
import argparse
import json
import os
import signal
import statistics
import sys
import tempfile
import time
from typing import Any, Dict, List, Optional

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, HERE)

import netbench  # noqa: E402
import netbench_net as nn  # noqa: E402
from netbench import Interrupted, machine, on_signal  # noqa: E402
from netbench_procs import Proc, check_build, cpu_s  # noqa: E402

NODES, PER_NODE = 2, 4
WORLD = NODES * PER_NODE
UPSTREAM_PORT, RELAY_PORT = 7070, 7080
# Gradients are N(0, 0.01^2) (netbench_grads.py): the 2bit push threshold is one std, the pulled
# deltas are about lr x the mean gradient, so the pull threshold is 0.001 (as netbench.py). A
# node's sum is about 2x a worker's gradient (4 independent ones): its 2bit threshold is 0.02.
CODECS = {
    "none": dict(push=[], pull=[], relay="none"),
    "fp16": dict(push=["--codec", "fp16"], pull=[], relay="fp16"),
    "2bit": dict(push=["--codec", "2bit", "--threshold", "0.01"],
                 pull=["--pull-codec", "2bit", "--pull-threshold", "0.001"], relay="2bit:0.02"),
    "topk": dict(push=["--codec", "topk", "--ratio", "0.001"],
                 pull=["--pull-codec", "2bit", "--pull-threshold", "0.001"], relay="topk:0.001"),
}


class Bench(netbench.Bench):
    """netbench's processes, namespaces and logs; the rows of this benchmark."""

    def spawn_in(self, name: str, node: str, argv: List[str], stdin: bool = False) -> Proc:
        return self.spawn(name, self.net.exec_prefix(node) + argv, stdin=stdin)

    def server(self, name: str, node: str, listen: str, extra: List[str], deadline: float) -> Proc:
        data = tempfile.mkdtemp(prefix="grb-data-")
        self.dirs.append(data)
        p = self.spawn_in(name, node, [self.args.server, "--listen", listen, "--admin-listen", "", "--data-dir", data,
                                    "--log-level", "warn", *extra])
        while True:
            line = p.next_line(deadline)
            if line is None:
                raise RuntimeError(f"{p.name} exited: {p.tail()}")
            if "listening on " in line:
                return p

    def run_gradagg(self, codec: str, relay: bool, inner: bool = False) -> Dict[str, Any]:
        """relay: through node relays, whose workers push fp32 (inner: the codec, too)."""
        a, spec = self.args, CODECS[codec]
        deadline = time.monotonic() + a.run_timeout
        upstream = f"{self.net.nodes['s0'].addr}:{UPSTREAM_PORT}"
        servers = {"upstream": self.server("upstream", "s0", upstream, [], deadline)}
        if relay:
            for n in range(NODES):
                servers[f"relay{n}"] = self.server(f"relay{n}", f"w{n}", f"127.0.0.1:{RELAY_PORT}",
                            ["--relay-to", upstream, "--relay-node", str(n), "--relay-nodes", str(NODES),
                             "--relay-workers", str(PER_NODE), "--relay-codec", spec["relay"]], deadline)
        job = f"rb-{codec}-{'relay' if relay else 'flat'}{'-inner' if inner else ''}"
        workers = []
        for r in range(WORLD):
            node = f"w{r // PER_NODE}"
            target = f"127.0.0.1:{RELAY_PORT}" if relay else upstream
            argv = [sys.executable, os.path.join(HERE, "netbench_worker.py"), "--server", target, "--job", job,
                    "--rank", str(r), "--world", str(WORLD), "--elements", str(a.elements), "--warmup",
                    str(a.warmup), "--steps", str(a.steps), *(spec["push"] if inner or not relay else []),
                    *spec["pull"]]
            workers.append(self.spawn_in(f"w{r}-{job}", node, argv, stdin=True))
        return self.measure(workers, deadline, servers)

    def run_gloo(self) -> Dict[str, Any]:
        a = self.args
        deadline = time.monotonic() + a.run_timeout
        self.port += 1
        master = f"{self.net.nodes['w0'].addr}:{self.port}"
        ranks = [self.spawn_in(f"w{r}-gloo", f"w{r // PER_NODE}", [
            sys.executable, os.path.join(HERE, "netbench_gloo.py"), "--rank", str(r), "--world", str(WORLD),
            "--master", master, "--iface", nn.IFACE, "--elements", str(a.elements), "--dtype", "fp32",
            "--warmup", str(a.warmup), "--steps", str(a.steps)], stdin=True) for r in range(WORLD)]
        return self.measure(ranks, deadline)

    def measure(self, procs: List[Proc], deadline: float, servers: Optional[Dict[str, Proc]] = None) -> Dict[str, Any]:
        """The median step, the links' bytes per step, and the CPU seconds per step of the ranks
        (the sum of their medians), the upstream server and each relay (over the measured steps)."""
        servers = servers or {}
        for p in procs:
            p.next_event(deadline)  # "warm"
        before = self.net.counters()
        cpu0 = {name: cpu_s(p.pid) for name, p in servers.items()}
        for p in procs:
            p.send("go")
        reports = [p.next_event(deadline) for p in procs]
        cpu1 = {name: cpu_s(p.pid) for name, p in servers.items()}
        after = self.net.counters()
        steps = self.args.steps
        walls = [max(rep["steps"][i]["wall_s"] for rep in reports) for i in range(steps)]
        link = {n: sum(after[n][k] - before[n][k] for k in (0, 1)) / steps for n in ("w0", "w1", "s0")}
        self.stop_all()
        row = {"step_s": statistics.median(walls), "node_link_bytes": (link["w0"] + link["w1"]) / NODES,
               "server_link_bytes": link["s0"],
               "workers_cpu_s_per_step": sum(statistics.median(s["cpu_s"] for s in rep["steps"]) for rep in reports)}
        if "upstream" in servers:
            row["server_cpu_s_per_step"] = (cpu1["upstream"] - cpu0["upstream"]) / steps
        relays = [(cpu1[n] - cpu0[n]) / steps for n in servers if n.startswith("relay")]
        if relays:
            row["relay_cpu_s_per_step"] = statistics.mean(relays)
        return row

    def row(self, name: str, fn) -> Dict[str, Any]:
        self.row_id += 1
        try:
            return {"system": name, "status": "ok", **fn()}
        except (Exception, TimeoutError) as e:
            self.stop_all()
            return {"system": name, "status": "failed", "error": str(e)}


def line(row: Dict[str, Any]) -> str:
    if row["status"] != "ok":
        return f"{row['system']:<19} FAILED: {row['error']}"
    out = (f"{row['system']:<19} step {row['step_s'] * 1e3:9.1f} ms   node link {row['node_link_bytes'] / 1e6:9.3f} "
           f"MB/step   server link {row['server_link_bytes'] / 1e6:9.3f} MB/step")
    if "server_cpu_s_per_step" in row:
        out += (f"   CPU/step: ranks {row['workers_cpu_s_per_step'] * 1e3:.1f} ms, server "
                f"{row['server_cpu_s_per_step'] * 1e3:.1f} ms"
                + (f", a relay {row['relay_cpu_s_per_step'] * 1e3:.1f} ms" if "relay_cpu_s_per_step" in row else ""))
    if "bytes_ratio" in row:
        out += (f"   vs flat: bytes {row['bytes_ratio']:.3f} (target <= 0.25 {'met' if row['bytes_met'] else 'MISSED'})"
                f", step {row['step_ratio']:.3f} (target <= 0.5 {'met' if row['step_met'] else 'MISSED'})")
    if "vs_gloo" in row:
        out += f"   step / gloo fp32 {row['vs_gloo']:.3f}"
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--server", default=os.path.join(REPO, "build/release/service/gradagg-server"))
    ap.add_argument("--lib", default=None, help="libgradagg.so (default: next to the server's build)")
    ap.add_argument("--link", default="1gbit", help="tbf rate of every node's link")
    ap.add_argument("--elements", type=int, default=2_500_000, help="floats in the model (one tensor)")
    ap.add_argument("--codecs", default="none,fp16,2bit,topk")
    ap.add_argument("--no-gloo", action="store_true")
    ap.add_argument("--inner", action="store_true",
                    help="also relay-<codec>-inner rows: the workers push the codec to their relay as well")
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--run-timeout", type=float, default=600)
    ap.add_argument("--json", default=os.path.join(REPO, "build/results/relaybench.json"))
    a = ap.parse_args()
    check_build(ap, a)
    if os.geteuid() != 0:
        print("relaybench: network namespaces need root", file=sys.stderr)
        return 2
    for s in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(s, on_signal)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([os.path.join(REPO, "client", "python"), HERE]),
               GRADAGG_LIB=os.path.abspath(a.lib), GRADAGG_LOG_LEVEL="warn", OMP_NUM_THREADS="1")
    b = Bench(a, env=env, logdir=tempfile.mkdtemp(prefix="grb-logs-"))
    nn.sweep_stale()
    info: Dict[str, Any] = {"machine": machine(), "args": vars(a), "nodes": NODES, "per_node": PER_NODE, "rows": []}
    failed = False
    try:
        b.net = nn.Network(NODES, 1)
        b.net.create()
        b.net.shape(a.link)
        got = nn.probe(b.net, "w0", "s0", 1.0, nn.rate_bits(a.link))
        info["probe_bits"] = got
        print(f"== {NODES} nodes x {PER_NODE} workers, {a.elements} floats, every node's link {a.link} "
              f"(TCP probe {got / 1e9:.3f} Gbit/s)", flush=True)
        rows = info["rows"]
        if not a.no_gloo:
            rows.append(b.row("gloo-fp32", b.run_gloo))
            print(line(rows[-1]), flush=True)
        gloo = rows[0] if rows and rows[0]["status"] == "ok" else None
        for codec in [c for c in a.codecs.split(",") if c]:
            flat = b.row(f"flat-{codec}", lambda: b.run_gradagg(codec, False))
            relays = [b.row(f"relay-{codec}", lambda: b.run_gradagg(codec, True))]
            if a.inner and codec != "none":  # the workers push the codec to their relay too
                relays.append(b.row(f"relay-{codec}-inner", lambda: b.run_gradagg(codec, True, inner=True)))
            for relay in relays:
                if flat["status"] == relay["status"] == "ok":
                    relay["bytes_ratio"] = relay["node_link_bytes"] / flat["node_link_bytes"]
                    relay["step_ratio"] = relay["step_s"] / flat["step_s"]
                    relay["bytes_met"] = relay["bytes_ratio"] <= 0.25
                    relay["step_met"] = relay["step_ratio"] <= 0.5
            for r in [flat] + relays:
                if gloo and r["status"] == "ok":
                    r["vs_gloo"] = r["step_s"] / gloo["step_s"]
                rows.append(r)
                print(line(r), flush=True)
                failed |= r["status"] != "ok"
    except (KeyboardInterrupt, Interrupted) as e:
        print(f"relaybench: interrupted ({str(e) or 'Ctrl-C'}); cleaning up", file=sys.stderr)
        failed = True
    finally:
        failed = nn.finish_run(b, "relaybench", failed)
    os.makedirs(os.path.dirname(a.json), exist_ok=True)
    with open(a.json, "w") as f:
        json.dump(info, f, indent=1)
    if failed:
        print(f"relaybench: logs kept in {b.logdir}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
