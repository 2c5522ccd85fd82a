"""Certificates and tokens rotate without a restart (docs/operations.md, "Rotate certificates and
tokens"): with a job training over TLS, the server's certificate (signed by another CA) and a
job's token are replaced in their files and the server is sent SIGHUP. New connections then
get the new certificate and the new token works while the old one is refused; the training job
never stops. A reload of a broken file changes nothing."""
from __future__ import annotations

import shutil
import signal
import subprocess
import threading
import time
from pathlib import Path

import numpy as np
import pytest

import gradagg
from gradagg import _lib, errors
from conftest import Server

TOK_TRAIN = "train-token-0123456789"
TOK_OLD = "rotating-token-old-0001"
TOK_NEW = "rotating-token-new-0002"
NAME = "gradagg.test"  # the certificates' name (tls_target_name)
QUICK = dict(call_timeout_ms=5000, step_timeout_ms=30000, retry_budget_ms=1500, backoff_max_ms=200)


def pki(d: Path) -> None:
    """Two CAs, each with a server certificate for NAME (P-256 keys: fast)."""
    if not shutil.which("openssl"):
        pytest.skip("no openssl")
    (d / "server.ext").write_text(f"subjectAltName=DNS:{NAME}\nextendedKeyUsage=serverAuth\n")
    key = "-newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes"
    script = " && ".join(
        f"openssl req -x509 {key} -keyout ca{i}.key -out ca{i}.pem -days 2 -subj /CN=rotation-ca-{i} && "
        f"openssl req {key} -keyout server{i}.key -out server{i}.csr -subj /CN={NAME} && "
        f"openssl x509 -req -in server{i}.csr -CA ca{i}.pem -CAkey ca{i}.key -CAcreateserial "
        f"-out server{i}.pem -days 2 -extfile server.ext"
        for i in (1, 2))
    subprocess.run(script, shell=True, cwd=d, check=True, capture_output=True)
    (d / "both.pem").write_text((d / "ca1.pem").read_text() + (d / "ca2.pem").read_text())


def reloaded(server: Server, count: int, what: str) -> None:
    server.proc.send_signal(signal.SIGHUP)
    end = time.monotonic() + 10
    while time.monotonic() < end:
        if server.log.read_text(errors="replace").count(what) >= count:
            return
        time.sleep(0.05)
    pytest.fail(f"no '{what}' in the log:\n{server.log.read_text(errors='replace')}")


def joins(server: Server, ca: Path, token: str) -> None:
    """A worker of job 'rot' joins (and leaves) over a new connection."""
    with gradagg.Client(server.addr, "rot", 0, 1, tls_ca_file=str(ca), tls_target_name=NAME, auth_token=token,
                        **QUICK) as c:
        c.add_tensor("p", np.zeros(4, np.float32))
        c.init()


def test_certificates_and_tokens_rotate_while_training(tmp_path: Path) -> None:
    pki(tmp_path)
    cert, key, tokens = tmp_path / "tls.pem", tmp_path / "tls.key", tmp_path / "tokens"
    shutil.copy(tmp_path / "server1.pem", cert)
    shutil.copy(tmp_path / "server1.key", key)
    tokens.write_text(f"train {TOK_TRAIN}\nrot {TOK_OLD}\n")
    server = Server(_lib.server_binary(), tmp_path, "--tls-cert", str(cert), "--tls-key", str(key),
                    "--auth-tokens", str(tokens))
    stop, trained = threading.Event(), {}

    def training() -> None:  # a job that must not notice the rotation
        p = np.zeros(1000, np.float32)
        try:
            with gradagg.Client(server.addr, "train", 0, 1, optimizer=gradagg.SGD(lr=0.01),
                                tls_ca_file=str(tmp_path / "both.pem"), tls_target_name=NAME, auth_token=TOK_TRAIN,
                                call_timeout_ms=10000, step_timeout_ms=30000) as c:
                c.add_tensor("p", p)
                c.init()
                steps = 0
                while not stop.is_set():
                    c.step([np.ones_like(p)])
                    steps += 1
                    time.sleep(0.01)
                trained.update(steps=steps, version=c.version)
        except Exception as e:  # noqa: BLE001 - reported by the test
            trained["error"] = e

    t = threading.Thread(target=training, daemon=True)
    t.start()
    try:
        # Before: the old certificate and the old token.
        joins(server, tmp_path / "ca1.pem", TOK_OLD)
        with pytest.raises(errors.UnavailableError):
            joins(server, tmp_path / "ca2.pem", TOK_OLD)  # the new CA does not know the old certificate

        # A broken token file: nothing changes.
        tokens.write_text("rot short\n")
        reloaded(server, 1, "SIGHUP: not reloaded")
        joins(server, tmp_path / "ca1.pem", TOK_OLD)

        # The rotation: new certificate (another CA), the job's new token.
        shutil.copy(tmp_path / "server2.pem", cert)
        shutil.copy(tmp_path / "server2.key", key)
        tokens.write_text(f"train {TOK_TRAIN}\nrot {TOK_NEW}\n")
        reloaded(server, 1, "SIGHUP: reloaded the TLS files and the tokens")
        joins(server, tmp_path / "ca2.pem", TOK_NEW)
        with pytest.raises(errors.AuthError, match="the bearer token is not valid"):
            joins(server, tmp_path / "ca2.pem", TOK_OLD)
        with pytest.raises(errors.UnavailableError):
            joins(server, tmp_path / "ca1.pem", TOK_NEW)  # new connections get the new certificate
        time.sleep(0.3)
    finally:
        stop.set()
        t.join(60)
        server.stop()
    assert "error" not in trained, repr(trained.get("error"))
    assert trained["steps"] > 10 and trained["version"] == trained["steps"]
