"""Fixtures: a real gradagg-server (the binary of the build the loaded libgradagg.so comes from,
or $GRADAGG_SERVER_BIN) on 127.0.0.1:0 with a fresh data dir, killed at teardown."""
from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Iterator, Optional, Tuple

import pytest

# client/python, unless the suite runs against the installed package (scripts/test package).
if os.environ.get("GRADAGG_PACKAGE") != "installed":
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from gradagg import _lib  # noqa: E402

if os.environ.get("GRADAGG_PACKAGE") == "installed":
    _source = Path(__file__).resolve().parents[1]
    assert _source not in Path(_lib.__file__).resolve().parents, f"gradagg imported from the source tree: {_lib.__file__}"
    assert Path(_lib.LIBRARY_PATH).resolve().parent == Path(_lib.__file__).resolve().parent, _lib.LIBRARY_PATH


_SET_NOFILE_AND_EXEC = ("import os, resource, sys; "
                        "resource.setrlimit(resource.RLIMIT_NOFILE, (int(sys.argv[1]), int(sys.argv[2]))); "
                        "os.execv(sys.argv[3], sys.argv[3:])")


class Server:
    """A running gradagg-server: .addr is "127.0.0.1:<port>"."""

    def __init__(self, binary: str, data_dir: Path, *extra: str, listen: str = "127.0.0.1:0",
                 nofile: Optional[Tuple[int, int]] = None) -> None:
        """nofile: the (soft, hard) RLIMIT_NOFILE the server starts with; None: this process's."""
        self.binary, self.data_dir, self.extra, self.nofile = binary, data_dir, extra, nofile
        self.log = data_dir / "server.log"  # appended to by every server started on data_dir
        argv = [binary, "--listen", listen, "--data-dir", str(data_dir / "data"), "--admin-listen", "", *extra]
        if nofile:
            # Set by a Python that then execs the server (same pid), not by a preexec_fn: forking
            # while grpcio's threads run can hang the child before it execs (Python 3.13).
            argv = [sys.executable, "-c", _SET_NOFILE_AND_EXEC, str(nofile[0]), str(nofile[1]), *argv]
        self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=open(self.log, "ab"),
                                     stdin=subprocess.DEVNULL)
        line = b""
        end = time.monotonic() + 20.0
        assert self.proc.stdout is not None
        while not line.endswith(b"\n") and time.monotonic() < end:
            r, _, _ = select.select([self.proc.stdout], [], [], 0.2)
            if r:
                ch = os.read(self.proc.stdout.fileno(), 1)
                if not ch:
                    break
                line += ch
        prefix = b"gradagg-server: listening on "
        if not line.startswith(prefix):
            self.stop()
            pytest.fail(f"server did not start: {line!r}; log:\n{self.log.read_text(errors='replace')}")
        self.addr = line[len(prefix):].strip().decode()

    def stop(self, sig: int = signal.SIGKILL) -> None:
        """Sends sig (SIGTERM: the server drains and exits 0) and waits for the exit."""
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        rc = self.proc.wait(timeout=60)
        if self.proc.stdout:
            self.proc.stdout.close()
        if sig == signal.SIGTERM and rc != 0:
            pytest.fail(f"server exited {rc} after SIGTERM; log:\n{self.log.read_text(errors='replace')}")

    def restart(self) -> "Server":
        """The same server again: same address, data dir and arguments (after stop())."""
        return Server(self.binary, self.data_dir, *self.extra, listen=self.addr, nofile=self.nofile)


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Server]:
    binary = _lib.server_binary()
    if not binary:
        pytest.fail(f"no gradagg-server next to {_lib.LIBRARY_PATH}; build it or set GRADAGG_SERVER_BIN")
    s = Server(binary, tmp_path)
    try:
        yield s
    finally:
        s.stop()


@pytest.fixture
def job(request: pytest.FixtureRequest) -> str:
    """A job name unique to the test."""
    return request.node.name.replace("[", "_").replace("]", "")
