"""Child processes of bench/netbench.py: started in their own session, read line by line in the
background, and all killed (by process group) when a run ends or fails."""
import json
import os
import queue
import signal
import subprocess
import threading
import time
from typing import Any, Dict, List, Optional

CLK_TCK = os.sysconf("SC_CLK_TCK")


class Proc:
    """One child; its stdout lines land in `lines` (a queue), stderr goes to `log`."""

    def __init__(self, name: str, argv: List[str], log: str, env: Optional[Dict[str, str]] = None,
                 stdin: bool = False) -> None:
        self.name = name
        self.log = log
        self._logf = open(log, "w")
        self.p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=self._logf,
                                  stdin=subprocess.PIPE if stdin else subprocess.DEVNULL, text=True, env=env,
                                  start_new_session=True)
        self.lines: "queue.Queue[Optional[str]]" = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self.p.stdout:
            self.lines.put(line.rstrip("\n"))
        self.lines.put(None)  # end of output

    @property
    def pid(self) -> int:
        return self.p.pid

    def send(self, line: str) -> None:
        self.p.stdin.write(line + "\n")
        self.p.stdin.flush()

    def next_line(self, deadline: float) -> Optional[str]:
        """The next stdout line; None at end of output; TimeoutError past deadline (monotonic)."""
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError(f"{self.name}: no output in time")
        try:
            return self.lines.get(timeout=left)
        except queue.Empty:
            raise TimeoutError(f"{self.name}: no output in time") from None

    def next_event(self, deadline: float) -> Dict[str, Any]:
        """The next JSON line ({"event": ...}); other lines are skipped."""
        while True:
            line = self.next_line(deadline)
            if line is None:
                self.p.wait(timeout=10)
                raise RuntimeError(f"{self.name} exited ({self.p.returncode}) without a report; see {self.log}: "
                                   f"{self.tail()}")
            if line.startswith("{"):
                ev = json.loads(line)
                if ev.get("event") == "error":
                    raise RuntimeError(f"{self.name}: {ev.get('error')}")
                return ev

    def tail(self, n: int = 400) -> str:
        self._logf.flush()
        try:
            with open(self.log) as f:
                return f.read()[-n:].strip()
        except OSError:
            return ""

    def stop(self, sig: int = signal.SIGTERM, grace: float = 30.0) -> Optional[int]:
        """Signals the process group, then SIGKILL after grace seconds; returns the exit code."""
        if self.p.poll() is None:
            try:
                os.killpg(self.p.pid, sig)
                self.p.wait(timeout=grace)
            except ProcessLookupError:
                pass
            except subprocess.TimeoutExpired:
                self.kill()
        self.kill()
        self._logf.close()
        return self.p.returncode

    def kill(self) -> None:
        try:
            os.killpg(self.p.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        try:
            self.p.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass


def cpu_s(pid: int) -> float:
    """utime + stime of pid in seconds (/proc/pid/stat fields 14 and 15)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def thread_cpu_s(pid: int) -> Dict[str, float]:
    """CPU seconds of each thread of pid, by "comm+k", k = tid - pid (0: the main thread; unnamed
    threads inherit the process's name, k tells them apart). Threads that ended are not counted."""
    out = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/stat") as f:
                raw = f.read()
        except OSError:
            continue
        comm = raw[raw.index("(") + 1:raw.rindex(")")]
        fields = raw.rsplit(")", 1)[1].split()
        out[f"{comm}+{int(tid) - pid}"] = (int(fields[11]) + int(fields[12])) / CLK_TCK
    return out


def vm_status(pid: int, key: str = "VmHWM") -> int:
    """A /proc/pid/status size in bytes: VmHWM (peak resident set), VmRSS."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024
    raise RuntimeError(f"no {key} for {pid}")


def reset_hwm(pid: int) -> None:
    """Restarts pid's VmHWM from its current VmRSS (Linux >= 4.0, root or the owner)."""
    with open(f"/proc/{pid}/clear_refs", "w") as f:
        f.write("5")


def metrics(argv_prefix: List[str], url: str, names: List[str]) -> Dict[str, float]:
    """The named unlabelled-or-host samples of a Prometheus /metrics page, fetched with curl
    (inside the shard's namespace through argv_prefix); {} when it cannot be read."""
    try:
        r = subprocess.run(argv_prefix + ["curl", "-s", "-m", "5", url], stdout=subprocess.PIPE,
                           stderr=subprocess.DEVNULL, text=True, timeout=15)
    except (OSError, subprocess.TimeoutExpired):
        return {}
    out = {}
    for line in r.stdout.splitlines():
        for n in names:
            if line.startswith(n + " ") or line.startswith(n + '{device="host"} '):
                out[n] = float(line.rsplit(" ", 1)[1])
    return out


def check_build(ap: Any, a: Any, server_needed: bool = True) -> None:
    """The benchmarks' --server and --lib: ap.error unless a.server is an executable (when the run
    starts servers); a.lib defaults to the libgradagg.so of the server's build tree."""
    if server_needed and not os.access(a.server, os.X_OK):
        ap.error(f"--server {a.server}: not an executable (build: cmake -S . -B build/release -G Ninja "
                 "-DCMAKE_BUILD_TYPE=Release -DGA_WITH_CUDA=OFF && ninja -C build/release gradagg-server "
                 "gradagg_shared)")
    if a.lib is None:
        a.lib = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(a.server))), "client", "libgradagg.so")


def free_port() -> int:
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
