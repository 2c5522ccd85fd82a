"""A real gradagg-server for the examples: started on a free loopback port with a fresh data
dir, its port read from its stdout, stopped with SIGTERM and required to exit 0."""
from __future__ import annotations

import re
import shutil
import signal
import subprocess
import time
from pathlib import Path
from typing import Optional, Sequence

_LISTENING = re.compile(r"^gradagg-server: listening on 127\.0\.0\.1:(\d+)$", re.M)


class ServerError(RuntimeError):
    """The server did not start, died, or did not stop cleanly; the message quotes its log."""


class Server:
    """gradagg-server on 127.0.0.1:<free port>; a context manager (stop() on a clean exit,
    SIGKILL on an exception so a failure never leaves it running)."""

    def __init__(self, binary: Path, workdir: Path, *, max_jobs: int = 64, start_timeout_s: float = 10.0,
                 extra: Sequence[str] = ()) -> None:
        """extra: more flags (a node relay's --relay-to ..., docs/relay.md)."""
        self.binary = Path(binary)
        self.extra = list(extra)
        self.max_jobs = max_jobs  # a job stays on the server after its ranks leave: one per run
        self.workdir = Path(workdir)
        self.start_timeout_s = start_timeout_s
        self.proc: Optional[subprocess.Popen] = None
        self.address = ""

    def _log_tail(self, lines: int = 20) -> str:
        log = self.workdir / "server.log"
        text = log.read_text(errors="replace") if log.exists() else ""
        return "\n".join(text.splitlines()[-lines:])

    def start(self) -> "Server":
        """Starts it with a fresh data dir (no job may resume from an earlier run's checkpoints)
        and waits until it reports its port. Raises ServerError with its log otherwise."""
        if not self.binary.is_file():
            raise ServerError(f"{self.binary}: no gradagg-server binary (build it first)")
        data = self.workdir / "data"
        shutil.rmtree(data, ignore_errors=True)
        data.mkdir(parents=True)
        out_path = self.workdir / "server.out"
        with open(out_path, "w") as out, open(self.workdir / "server.log", "w") as err:
            self.proc = subprocess.Popen(
                [str(self.binary), "--listen", "127.0.0.1:0", "--admin-listen", "", "--data-dir", str(data),
                 "--max-jobs", str(self.max_jobs), *self.extra],
                stdin=subprocess.DEVNULL, stdout=out, stderr=err,
                start_new_session=True)  # a ^C reaches the coordinator, which stops it in order
        deadline = time.monotonic() + self.start_timeout_s
        while time.monotonic() < deadline:
            m = _LISTENING.search(out_path.read_text(errors="replace"))
            if m:
                self.address = f"127.0.0.1:{m.group(1)}"
                return self
            if self.proc.poll() is not None:
                raise ServerError(f"gradagg-server exited with status {self.proc.returncode} before listening; "
                                  f"its log:\n{self._log_tail()}")
            time.sleep(0.05)
        self.kill()
        raise ServerError(f"gradagg-server did not report its port within {self.start_timeout_s:.0f} s")

    def stop(self, timeout_s: float = 15.0) -> None:
        """SIGTERM (the server checkpoints and exits); raises ServerError unless it exits 0 in time."""
        if self.proc is None:
            return
        proc, self.proc = self.proc, None
        if proc.poll() is not None:
            raise ServerError(f"gradagg-server died during the run (status {proc.returncode}); its log:\n"
                              f"{self._log_tail()}")
        proc.send_signal(signal.SIGTERM)
        try:
            rc = proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            raise ServerError(f"gradagg-server did not exit within {timeout_s:.0f} s of SIGTERM") from None
        if rc != 0:
            raise ServerError(f"gradagg-server exited with status {rc} after SIGTERM; its log:\n{self._log_tail()}")

    def kill(self) -> None:
        """SIGKILL, for the failure paths."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self.proc = None

    def __enter__(self) -> "Server":
        return self.start()

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.stop()
        else:
            self.kill()
