"""The shaped test network of bench/netbench.py: one network namespace per node on one bridge.

Each node (worker or shard) is a namespace with one veth whose peer sits on a private bridge;
addresses are 10.77.0.0/24 inside the namespaces only. Shaping puts a tbf on both ends of every
veth (egress out of the namespace, and egress from the bridge into it), so each node has a
full-duplex link of the given rate. Everything is named after this process's pid, so two runs
never collide and a run killed with SIGKILL can be swept by the next (sweep_stale).
"""
import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

SUBNET = "10.77.0"
PREFIX = "gnb"  # every namespace, bridge and veth this benchmark creates starts with it
IFACE = "eth0"  # the veth's name inside each namespace


def sh(*args: str, check: bool = True, timeout: float = 20.0) -> subprocess.CompletedProcess:
    """Runs one ip/tc command; raises with its stderr when check and it fails."""
    r = subprocess.run(list(args), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=timeout)
    if check and r.returncode != 0:
        raise RuntimeError(f"{' '.join(args)}: {r.stderr.strip()}")
    return r


def rate_bits(rate: str) -> Optional[float]:
    """'1gbit' -> 1e9 bits/s; 'none' (no shaping) -> None."""
    if rate in ("none", "lo"):
        return None
    m = re.fullmatch(r"(\d+(?:\.\d+)?)([kmg])bit", rate)
    if not m:
        raise ValueError(f"link rate {rate!r}: expected e.g. 1gbit, 10gbit, 500mbit, none or lo")
    return float(m.group(1)) * {"k": 1e3, "m": 1e6, "g": 1e9}[m.group(2)]


def tbf_args(bits: float) -> List[str]:
    """tbf for a link of `bits`/s: a bucket of 2 ms at the rate (at least 64 KiB: GSO packets
    bigger than the bucket would be segmented by tbf) and 20 ms of queue."""
    burst = max(64 << 10, int(bits / 8 * 0.002))
    return ["tbf", "rate", f"{int(bits)}bit", "burst", str(burst), "latency", "20ms"]


@dataclass
class Node:
    name: str  # w0.. / s0..
    ns: str  # namespace
    host_if: str  # the veth's end on the bridge
    addr: str


@dataclass
class Network:
    """Namespaces for `workers` workers and `shards` shards on one bridge, not shaped yet."""

    workers: int
    shards: int
    tag: str = field(default_factory=lambda: f"{PREFIX}{os.getpid()}")
    nodes: Dict[str, Node] = field(default_factory=dict)
    bridge: str = ""
    up: bool = False

    def create(self) -> None:
        self.bridge = f"{self.tag}br"
        sh("ip", "link", "add", self.bridge, "type", "bridge")
        self.up = True  # from here on, destroy() has something to remove
        sh("ip", "link", "set", self.bridge, "up")
        names = [f"w{i}" for i in range(self.workers)] + [f"s{i}" for i in range(self.shards)]
        for i, name in enumerate(names):
            host = 1 + i if name[0] == "w" else 101 + int(name[1:])
            node = Node(name, f"{self.tag}{name}", f"{self.tag}{name}", f"{SUBNET}.{host}")
            self.nodes[name] = node
            sh("ip", "netns", "add", node.ns)
            sh("ip", "link", "add", node.host_if, "type", "veth", "peer", "name", IFACE, "netns", node.ns)
            sh("ip", "link", "set", node.host_if, "master", self.bridge, "up")
            sh("ip", "-n", node.ns, "addr", "add", f"{node.addr}/24", "dev", IFACE)
            sh("ip", "-n", node.ns, "link", "set", IFACE, "up")
            sh("ip", "-n", node.ns, "link", "set", "lo", "up")

    def shape(self, rate: str) -> None:
        """tbf at `rate` on both ends of every veth; 'none' removes the shaping."""
        bits = rate_bits(rate)
        for node in self.nodes.values():
            for prefix, dev in ((["tc"], node.host_if), (["tc", "-n", node.ns], IFACE)):
                if bits is None:
                    sh(*prefix, "qdisc", "del", "dev", dev, "root", check=False)
                else:
                    sh(*prefix, "qdisc", "replace", "dev", dev, "root", *tbf_args(bits))

    def counters(self) -> Dict[str, List[int]]:
        """Bytes each node has received and sent so far, [rx, tx], read on the bridge side of its
        veth (what the bridge sends is what the node receives). GSO super-packets count their
        headers once, so this is the payload plus little more."""
        out = {}
        for name, node in self.nodes.items():
            stat = f"/sys/class/net/{node.host_if}/statistics"
            with open(f"{stat}/tx_bytes") as f_tx, open(f"{stat}/rx_bytes") as f_rx:
                out[name] = [int(f_tx.read()), int(f_rx.read())]
        return out

    def exec_prefix(self, node: str) -> List[str]:
        return ["ip", "netns", "exec", self.nodes[node].ns]

    def destroy(self) -> None:
        """Removes every namespace (its veth goes with it) and the bridge; never raises."""
        for node in self.nodes.values():
            sh("ip", "link", "del", node.host_if, check=False)  # both ends, at once
            sh("ip", "netns", "del", node.ns, check=False)
        if self.up:
            sh("ip", "link", "del", self.bridge, check=False)
        self.up = False
        for _ in range(50):  # a namespace's teardown finishes asynchronously
            if not leftovers(self.tag):
                break
            time.sleep(0.1)


def teardown(net: Optional[Network], who: str) -> bool:
    """Destroys net (None: nothing to do); False, with the names on stderr, when something of it
    is left."""
    if net is None:
        return True
    net.destroy()
    left = leftovers(net.tag)
    if left:
        print(f"{who}: could not remove {left}", file=sys.stderr)
    return not left


def finish_run(bench: Any, who: str, failed: bool) -> bool:
    """Ends a benchmark run (netbench, trainbench): stops every process of bench, tears its
    network down, and removes its log folder when nothing failed. Returns whether the run failed
    (a teardown that leaves something behind fails it)."""
    bench.stop_all()
    if not teardown(bench.net, who):
        failed = True
    if not failed:
        shutil.rmtree(bench.logdir, ignore_errors=True)
    return failed


def leftovers(tag: str) -> List[str]:
    """Namespaces and links whose names start with tag (empty after a clean destroy)."""
    ns = [l.split()[0] for l in sh("ip", "netns", "list").stdout.splitlines() if l.startswith(tag)]
    links = re.findall(r"^\d+: (" + re.escape(tag) + r"[^:@]*)", sh("ip", "-o", "link", "show").stdout, re.M)
    return ns + links


def sweep_stale() -> List[str]:
    """Removes what an earlier run, now dead (SIGKILL), left behind; returns the names."""
    gone = []
    for name in leftovers(PREFIX):
        m = re.match(PREFIX + r"(\d+)", name)
        if m and not os.path.exists(f"/proc/{m.group(1)}"):
            if name in sh("ip", "netns", "list").stdout:
                sh("ip", "netns", "del", name, check=False)
            else:
                sh("ip", "link", "del", name, check=False)
            gone.append(name)
    return gone


PROBE = r"""
import socket, sys, time
mode, host, port, total = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
if mode == "recv":
    s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((host, port)); s.listen(1); print("ready", flush=True)
    c, _ = s.accept(); buf = bytearray(1 << 20); got = 0; t0 = None
    while True:
        n = c.recv_into(buf)
        if not n: break
        if t0 is None: t0 = time.perf_counter()
        got += n
    print(got * 8 / (time.perf_counter() - t0), flush=True)
else:
    c = socket.create_connection((host, port)); b = bytes(1 << 20); sent = 0
    while sent < total: c.sendall(b); sent += len(b)
    c.close()
"""


def probe(net: Network, src: str, dst: str, seconds: float = 1.0, rate: Optional[float] = None) -> float:
    """TCP goodput (bits/s) of one stream from node src to node dst, about `seconds` long."""
    total = int((rate or 10e9) / 8 * seconds)
    addr = net.nodes[dst].addr
    recv = subprocess.Popen(net.exec_prefix(dst) + [sys.executable, "-c", PROBE, "recv", addr, "5201", "0"],
                            stdout=subprocess.PIPE, text=True)
    try:
        assert recv.stdout.readline().strip() == "ready"
        subprocess.run(net.exec_prefix(src) + [sys.executable, "-c", PROBE, "send", addr, "5201", str(total)],
                       check=True, timeout=60)
        out, _ = recv.communicate(timeout=60)
        return float(out.strip())
    finally:
        if recv.poll() is None:
            recv.kill()
            recv.wait()


if __name__ == "__main__":  # manual check: python3 bench/netbench_net.py 1gbit
    n = Network(2, 1)
    try:
        n.create()
        n.shape(sys.argv[1] if len(sys.argv) > 1 else "1gbit")
        t = time.time()
        print(f"w0 -> s0: {probe(n, 'w0', 's0', rate=rate_bits(sys.argv[1] if len(sys.argv) > 1 else '1gbit')) / 1e9:.3f} Gbit/s")
    finally:
        n.destroy()
        print("left:", leftovers(n.tag))
