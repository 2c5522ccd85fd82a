"""Node relays (docs/relay.md): W = 8 workers as 2 nodes x 4, each node's workers joined to its
relay (gradagg-server --relay-to), the relays to one upstream server. Every worker ends with the
exact float32 result of the scalar model of that aggregation (each node's sum in rank order,
pushed with the relay's codec and residual, the upstream mean over the workers), whatever the
arrival order; through a relay killed and restarted mid-step, and a worker SIGKILLed inside a
node; and what a relay refuses. Real servers on 127.0.0.1:0."""
from __future__ import annotations

import random
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np
import pytest

import gradagg
from conftest import Server
from _util import F32, FAST, child_env, regression_data, regression_grads, regression_init, run_ranks
from test_cli import cli_json
from _wire import SERVICE, channel, fields, pull_request

NODES, K = 2, 4
W = NODES * K
LR = 0.1
Params = Tuple[np.ndarray, np.ndarray]


class StallProxy:
    """A TCP relay in front of `target` whose answers (target to client) can be held: hold()
    stops forwarding them, release() forwards what was held and goes on. The client's direction
    always flows, so a request arrives while its answer waits."""

    def __init__(self, target: str) -> None:
        self.target = target
        self.flowing = threading.Event()
        self.flowing.set()
        self.closed = False
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.addr = f"127.0.0.1:{self.sock.getsockname()[1]}"
        self.conns: List[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        host, port = self.target.rsplit(":", 1)
        while True:
            try:
                down, _ = self.sock.accept()
            except OSError:
                return
            up = socket.create_connection((host, int(port)))
            self.conns += [down, up]
            threading.Thread(target=self._pump, args=(down, up, False), daemon=True).start()
            threading.Thread(target=self._pump, args=(up, down, True), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket, answers: bool) -> None:
        try:
            while data := src.recv(65536):
                if answers:
                    self.flowing.wait()
                dst.sendall(data)
        except OSError:
            pass
        for s in (src, dst):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def hold(self) -> None:
        self.flowing.clear()

    def release(self) -> None:
        self.flowing.set()

    def close(self) -> None:
        self.release()
        self.sock.close()
        for s in self.conns:
            s.close()


class Layout:
    """An upstream server and one relay per node, stopped at teardown."""

    def __init__(self, tmp: Path, *relay_args: str, stall_node: Optional[int] = None,
                 up_args: Sequence[str] = ()) -> None:
        """relay_args "auto": the relays are given K alone and learn each job's node and node
        count from its workers (a relay per Kubernetes node); else node and nodes are given.
        stall_node: that node's relay reaches the upstream through a StallProxy (.proxy).
        up_args: the upstream server's flags."""
        binary = gradagg._lib.server_binary()
        (tmp / "up").mkdir()
        self.up = Server(binary, tmp / "up", *up_args)
        self.proxy = StallProxy(self.up.addr) if stall_node is not None else None
        self.relays: List[Server] = []
        self.admin: List[str] = []  # each relay's /metrics
        auto = "auto" in relay_args
        for n in range(NODES):
            (tmp / f"node{n}").mkdir()
            place = [] if auto else ["--relay-node", str(n), "--relay-nodes", str(NODES)]
            with socket.socket() as s:
                s.bind(("127.0.0.1", 0))
                self.admin.append(f"127.0.0.1:{s.getsockname()[1]}")
            upstream = self.proxy.addr if self.proxy and n == stall_node else self.up.addr
            self.relays.append(Server(binary, tmp / f"node{n}", "--relay-to", upstream, *place,
                                      "--relay-workers", str(K), "--admin-listen", self.admin[-1],
                                      *[a for a in relay_args if a != "auto"]))

    def metric(self, node: int, sample: str) -> float:
        """One sample of relay `node`'s /metrics, by its text up to the value."""
        text = urllib.request.urlopen(f"http://{self.admin[node]}/metrics", timeout=10).read().decode()
        for line in text.splitlines():
            if line.startswith(sample + " "):
                return float(line.rsplit(" ", 1)[1])
        raise AssertionError(f"no {sample} in relay {node}'s metrics")

    def relay_of(self, rank: int) -> Server:
        return self.relays[rank // K]

    def stop(self) -> None:
        for s in self.relays + [self.up]:
            s.stop()
        if self.proxy:
            self.proxy.close()


@pytest.fixture
def layout(tmp_path: Path, request: pytest.FixtureRequest):
    lay = Layout(tmp_path, *getattr(request, "param", ()))
    yield lay
    lay.stop()


def quantize_2bit(residual: np.ndarray, g: np.ndarray, t: float) -> np.ndarray:
    """The SDK's 2bit error feedback (kernels/codec_math.h): v = r + g is sent as +-t when
    |v| >= t, and what is sent leaves the residual. Updates residual; returns what was sent."""
    v = (residual + g).astype(F32)
    sent = np.where(v >= F32(t), F32(t), np.where(v <= F32(-t), F32(-t), F32(0))).astype(F32)
    residual[...] = np.where(sent != 0, v - sent, v)
    return sent


def scalar_model(steps: int, members: Sequence[Sequence[int]], worker_codec: str = "none",
                 relay_codec: str = "none", threshold: float = 0.0) -> Params:
    """members[s]: the ranks whose gradients step s sums. Each node sums its members' decoded
    pushes in rank order; the node's push is its sum, or the relay's 2bit of it with the relay's
    residual; upstream sums the nodes in order and the mean divides by the workers summed."""
    data = [regression_data(r) for r in range(W)]
    w, b = regression_init()
    residual = [[np.zeros_like(w), np.zeros_like(b)] for _ in range(NODES)]
    for s in range(steps):
        total = [np.zeros_like(w), np.zeros_like(b)]
        for n in range(NODES):
            node = [np.zeros_like(w), np.zeros_like(b)]
            for r in range(n * K, (n + 1) * K):
                if r not in members[s]:
                    continue
                for i, g in enumerate(regression_grads(w, b, *data[r])):
                    if worker_codec == "fp16":
                        g = g.astype(np.float16).astype(F32)
                    node[i] = (node[i] + g).astype(F32)
            for i in range(2):
                sent = node[i] if relay_codec == "none" else quantize_2bit(residual[n][i], node[i], threshold)
                total[i] = (total[i] + sent).astype(F32)
        scale = F32(1.0 / len(members[s]))
        w = (w - F32(LR) * (total[0] * scale)).astype(F32)
        b = (b - F32(LR) * (total[1] * scale)).astype(F32)
    return w, b


def train(lay: Layout, job: str, rank: int, steps: int, codec: str = "none", jitter: float = 0.0,
          before_step=None, **options) -> Tuple[np.ndarray, np.ndarray, int]:
    """options: the Client's, over FAST."""
    w, b = regression_init()
    x, y = regression_data(rank)
    rng = random.Random(rank)
    opts = dict(FAST, **options)
    with gradagg.Client(lay.relay_of(rank).addr, job, rank, W, mean=True, optimizer=gradagg.SGD(lr=LR),
                        **opts) as c:
        c.add_tensor("w", w, codec=codec)
        c.add_tensor("b", b, codec=codec)
        c.init()
        for s in range(steps):
            if before_step:
                before_step(rank, s)
            if jitter:
                time.sleep(rng.uniform(0, jitter))
            c.step(regression_grads(w, b, x, y))
        return w, b, c.version


def assert_all_equal(out: Sequence[Tuple[np.ndarray, np.ndarray, int]], want: Params, version: int) -> None:
    for r, (w, b, v) in enumerate(out):
        assert v == version, f"rank {r} at version {v}"
        np.testing.assert_array_equal(w, want[0], err_msg=f"rank {r}")
        np.testing.assert_array_equal(b, want[1], err_msg=f"rank {r}")


STEPS = 12


@pytest.mark.parametrize("layout, worker_codec, relay_codec", [
    ((), "none", "none"),
    (("--relay-codec", "2bit:0.05", "auto"), "fp16", "2bit"),
], indirect=["layout"], ids=["none-none", "fp16-2bit-auto"])
def test_two_relays_of_four_equal_the_scalar_model(layout: Layout, job: str, worker_codec: str,
                                                   relay_codec: str) -> None:
    """Random arrival order inside each node; every worker ends with the model's exact bits, and
    the upstream job saw two members, each pushing the node's sum once per step. The second case
    gives the relays no node index: each learns its node from its workers' ranks."""
    out = run_ranks(lambda r: train(layout, job, r, STEPS, worker_codec, jitter=0.01), W, timeout=120)
    want = scalar_model(STEPS, [range(W)] * STEPS, worker_codec, relay_codec, 0.05)
    assert_all_equal(out, want, STEPS)
    rc, doc = cli_json("--server", layout.up.addr, "status", job)
    assert rc == 0, doc
    status = doc["shards"][0]
    assert status["world_size"] == NODES and len(status["members"]) == NODES, status
    if relay_codec == "2bit":  # the cross-node pushes were 2bit: 16x smaller than fp32
        received = {c["codec"]: c for c in status["received"]}
        assert set(received) == {"2bit"}, received
    # Each relay's metrics: one upstream exchange per step, fp32 bytes (codec none) both ways.
    fp32 = (want[0].size + want[1].size) * 4
    label = f'ga_job="{job}"'
    for n in range(NODES):
        assert layout.metric(n, f"gradagg_relay_upstream_seconds_count{{{label}}}") == STEPS
        pushed = layout.metric(n, f'gradagg_relay_upstream_bytes_total{{{label},direction="pushed"}}')
        pulled = layout.metric(n, f'gradagg_relay_upstream_bytes_total{{{label},direction="pulled"}}')
        assert pulled == STEPS * fp32
        assert pushed == STEPS * fp32 if relay_codec == "none" else 0 < pushed < STEPS * fp32 / 4


def test_compressed_pulls_pass_through_the_relays(layout: Layout, job: str) -> None:
    """A job with 2bit pulls (fixed threshold): each relay pulls the upstream's delta once and
    serves the same bytes to its workers, who pull compressed (not fp32) and end holding the
    upstream's published copy, bit for bit the model's: q += 2bit(p - q) after each SGD step on
    p, the gradients computed at q."""
    tp = 0.002
    data = [regression_data(r) for r in range(W)]

    def worker(rank: int):
        w, b = regression_init()
        with gradagg.Client(layout.relay_of(rank).addr, job, rank, W, mean=True, optimizer=gradagg.SGD(lr=LR),
                            pull_codec="2bit", pull_threshold=tp, pull_auto_bits=0.0, **FAST) as c:
            c.add_tensor("w", w)
            c.add_tensor("b", b)
            c.init()
            pulled = []
            for _ in range(STEPS):
                c.step(regression_grads(w, b, *data[rank]))
                pulled.append(c.stats.bytes_pulled)
            return w, b, c.version, pulled

    out = run_ranks(worker, W, timeout=120)
    p = list(regression_init())
    q = [x.copy() for x in p]
    for _ in range(STEPS):
        total = [np.zeros_like(x) for x in p]
        for n in range(NODES):
            node = [np.zeros_like(x) for x in p]
            for r in range(n * K, (n + 1) * K):
                node = [(a + g).astype(F32) for a, g in zip(node, regression_grads(q[0], q[1], *data[r]))]
            total = [(a + g).astype(F32) for a, g in zip(total, node)]
        p = [(x - F32(LR) * (g * F32(1.0 / W))).astype(F32) for x, g in zip(p, total)]
        for i in range(2):
            d = (p[i] - q[i]).astype(F32)
            q[i] = (q[i] + np.where(d >= F32(tp), F32(tp), np.where(d <= F32(-tp), F32(-tp), F32(0)))).astype(F32)
    fp32 = (q[0].size + q[1].size) * 4
    for r, (w, b, v, pulled) in enumerate(out):
        assert v == STEPS
        np.testing.assert_array_equal(w, q[0], err_msg=f"rank {r}")
        np.testing.assert_array_equal(b, q[1], err_msg=f"rank {r}")
        assert max(pulled[1:]) < fp32 / 4, f"rank {r} pulled {pulled} bytes a step (fp32: {fp32})"


def status_of(server: Server, job: str) -> Dict:
    rc, doc = cli_json("--server", server.addr, "status", job)
    return doc["shards"][0] if rc == 0 else {}


def wait_for(what: str, check, seconds: float = 60.0) -> None:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if check():
            return
        time.sleep(0.05)
    pytest.fail(f"never: {what}")


@pytest.mark.parametrize("when", ["in-its-step", "sigterm-in-its-step", "after-its-push", "after-the-close"])
def test_a_relay_restarted_loses_nothing(layout: Layout, job: str, when: str) -> None:
    """Node 1's relay is SIGKILLed at step 5 and started again on its address: in-its-step, while
    it holds ranks 4 and 5's acknowledged pushes and not 6 and 7's (sigterm-: stopped by SIGTERM
    there, as a rolling update does: it drains without closing the step); after-its-push, once its
    node's sum reached the upstream step (node 0's workers held back, so the step stays open);
    after-the-close, stopped (SIGSTOP) once its push was in, killed after the upstream step
    closed and before its workers got the version. Its workers join it again and push again
    (the SDK), the relay comes back as the same upstream member and learns which of its steps
    were counted, and every worker ends with the scalar model's exact bits: no push lost, none
    counted twice."""
    KILL_AT = 5
    release = {n: threading.Event() for n in ("node0", "late")}
    in_step = when.endswith("in-its-step")
    held = {6, 7} if in_step else {0, 1, 2, 3}

    def before_step(rank: int, s: int) -> None:
        if s == KILL_AT and rank in held:
            assert release["late" if in_step else "node0"].wait(60)

    results: List = []
    # A long pull timeout: the other node's workers wait out the relay's restart (slow under load);
    # node 1's retry for as long as it may take (the SDK's default), not FAST's two retries.
    retry = dict(step_timeout_ms=120000, max_retries=None, retry_budget_ms=120000)
    t = threading.Thread(target=lambda: results.append(
        run_ranks(lambda r: train(layout, job, r, STEPS, before_step=before_step, **retry), W, timeout=240)))
    t.start()
    relay = layout.relays[1]
    if in_step:
        wait_for("relay 1 holds 2 commits of step 5", lambda: status_of(relay, job).get("open_step") == KILL_AT
                 and status_of(relay, job).get("committed") == 2)
    else:
        def node1_pushed() -> bool:
            members = status_of(layout.up, job).get("members", [])
            return any(m["rank"] == 1 and m["has_pushed"] and m["last_step"] == KILL_AT for m in members)
        wait_for("node 1's push of step 5 upstream", node1_pushed)
    if when == "after-the-close":
        relay.proc.send_signal(signal.SIGSTOP)
        release["node0"].set()
        wait_for("the upstream step 5 closed", lambda: status_of(layout.up, job).get("version") == KILL_AT + 1)
    relay.stop(signal.SIGTERM if when.startswith("sigterm") else signal.SIGKILL)
    layout.relays[1] = relay.restart()
    if when == "after-its-push":  # the new relay takes the still open upstream step, then node 0 closes it
        wait_for("relay 1 back at version 5", lambda: status_of(layout.relays[1], job).get("version") == KILL_AT)
    release["node0"].set()
    release["late"].set()
    t.join(250)
    assert results, "the workers did not finish"
    assert_all_equal(results[0], scalar_model(STEPS, [range(W)] * STEPS), STEPS)


def test_a_worker_lost_inside_a_node(layout: Layout, job: str, tmp_path: Path) -> None:
    """Rank 7 (node 1) is SIGKILLed after 4 steps. With deadline 3 s and quorum 6 of 8 the node's
    relay closes its steps without it (quorum ceil(6 * 4 / 8) = 3 of its 4) and pushes the sum of
    3 workers: the upstream mean divides by 7 from then on, as the scalar model."""
    LOST_AT, deadline, quorum = 4, 3000, 6
    env = child_env()
    worker = subprocess.Popen(
        [sys.executable, str(Path(__file__).parent / "relay_worker.py"), "--server", layout.relay_of(7).addr,
         "--job", job, "--rank", "7", "--world", str(W), "--steps", str(LOST_AT), "--lr", str(LR),
         "--deadline-ms", str(deadline), "--quorum", str(quorum)],
        stdout=subprocess.PIPE, stdin=subprocess.PIPE, text=True, env=env)
    try:
        def body(rank: int):
            w, b = regression_init()
            x, y = regression_data(rank)
            with gradagg.Client(layout.relay_of(rank).addr, job, rank, W, mean=True, optimizer=gradagg.SGD(lr=LR),
                                deadline_ms=deadline, quorum=quorum, **FAST) as c:
                c.add_tensor("w", w)
                c.add_tensor("b", b)
                c.init()
                for s in range(STEPS):
                    if s == LOST_AT and rank == 0:
                        assert worker.stdout is not None
                        line = worker.stdout.readline()
                        assert line.strip() == f"done {LOST_AT}", line
                        worker.kill()
                    c.step(regression_grads(w, b, x, y))
                return w, b, c.version

        out = run_ranks(body, W - 1, timeout=120)
    finally:
        worker.kill()
        worker.wait()
    members = [range(W)] * LOST_AT + [range(W - 1)] * (STEPS - LOST_AT)
    assert_all_equal(out, scalar_model(STEPS, members), STEPS)


FAIL_AT = 3  # rank 5 (node 1) leaves as failed before its step 3


def train_until_rank_5_fails(layout: Layout, job: str, before_step, after_failure) -> None:
    """Every worker trains; rank 5 leaves as failed at step FAIL_AT, then calls after_failure();
    before_step(rank, s) runs before each other step. Without a straggler policy every other
    worker of both nodes gets GA_E_RANK_FAILED naming it by its global rank (node 0's through
    the upstream job, where node 1's relay is rank 1)."""
    def first(rank: int) -> str:
        w, b = regression_init()
        x, y = regression_data(rank)
        c = gradagg.Client(layout.relay_of(rank).addr, job, rank, W, mean=True, optimizer=gradagg.SGD(lr=LR), **FAST)
        c.add_tensor("w", w)
        c.add_tensor("b", b)
        c.init()
        try:
            for s in range(STEPS):
                if s == FAIL_AT and rank == 5:
                    c.close(failure="boom")
                    after_failure()
                    return "failed"
                before_step(rank, s)
                c.step(regression_grads(w, b, x, y))
        except gradagg.errors.RankFailedError as e:
            c.close()
            return str(e)
        c.close()
        return "finished"

    outcomes = run_ranks(first, W, timeout=60)
    for r, o in enumerate(outcomes):
        want = ("failed" if r == 5 else "rank 5 failed: boom" if r >= K
                else "upstream rank 1 failed: rank 5 failed: boom")
        assert want in o, (r, o)


def resume_to_the_end(layout: Layout, job: str) -> None:
    """Every worker started again as a new incarnation (resume) trains to version STEPS: each
    ends with the scalar model's exact bits, every step counted once."""
    def again(rank: int):
        w, b = regression_init()
        x, y = regression_data(rank)
        with gradagg.Client(layout.relay_of(rank).addr, job, rank, W, mean=True, optimizer=gradagg.SGD(lr=LR),
                            resume=True, **FAST) as c:
            c.add_tensor("w", w)
            c.add_tensor("b", b)
            c.init()
            while c.version < STEPS:
                c.step(regression_grads(w, b, x, y))
            return w, b, c.version

    assert_all_equal(run_ranks(again, W, timeout=120), scalar_model(STEPS, [range(W)] * STEPS), STEPS)


def test_a_failed_worker_fails_the_relayed_job_and_restarting_resumes_it(layout: Layout, job: str) -> None:
    """Rank 5 leaves as failed at step 3 and the others push step 3 after it: every worker of
    both nodes gets GA_E_RANK_FAILED naming it; the relays leave upstream. The workers started
    again (new incarnations) make the relays join upstream again and the job goes on from
    version 3, the step the failure interrupted counted once: every worker ends with the scalar
    model's exact bits."""
    failed = threading.Event()  # no step closes without rank 5

    def before_step(rank: int, s: int) -> None:
        if s == FAIL_AT:
            assert failed.wait(30)

    train_until_rank_5_fails(layout, job, before_step, failed.set)
    resume_to_the_end(layout, job)


def test_a_version_the_failure_kept_from_a_relay_is_taken_when_it_joins_again(tmp_path: Path, job: str) -> None:
    """Node 0's relay pushes step 2 upstream while the upstream's answers to it are held (a
    StallProxy) until the upstream job has failed: step 2 closed upstream (version 3, which
    node 1 got), then rank 5 failed, and node 0's relay learns of the failure instead of version
    3. Once the workers are started again the relays join upstream again, and node 0's relay
    takes version 3 as the result of the step it pushed (the upstream counted it) rather than
    failing on the versions' difference: every worker ends with the scalar model's bits."""
    layout = Layout(tmp_path, stall_node=0)
    proxy = layout.proxy
    assert proxy is not None
    try:
        node0_at_step_2 = threading.Barrier(K, action=proxy.hold, timeout=30)

        def before_step(rank: int, s: int) -> None:
            if s == FAIL_AT - 1 and rank < K:
                node0_at_step_2.wait()

        def upstream_failed() -> bool:
            rc, doc = cli_json("--server", layout.up.addr, "status", job)
            return rc == 0 and bool(doc["shards"][0].get("failure"))

        def release_once_upstream_failed() -> None:
            wait_for("the upstream job failed", upstream_failed, 30)
            proxy.release()

        train_until_rank_5_fails(layout, job, before_step, release_once_upstream_failed)
        resume_to_the_end(layout, job)
    finally:
        layout.stop()


def test_relays_reach_a_tls_upstream_with_their_workers_token(tmp_path: Path, job: str) -> None:
    """The upstream takes only TLS with a client certificate and each job's bearer token; the
    relays have the upstream's CA, a client certificate of their own and the workers' token file.
    Each relay's calls upstream carry the token its workers joined the job with: W = 8 trains to
    the scalar model's exact bits. A job whose token the relays grant and the upstream does not
    know is refused at its init with the upstream's E_UNAUTHENTICATED, the message saying so."""
    import subprocess as sp
    from test_rotation import NAME, pki
    pki(tmp_path)
    (tmp_path / "client.ext").write_text("extendedKeyUsage=clientAuth\n")
    sp.run("openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout relay.key -out relay.csr "
           "-subj /CN=relay && openssl x509 -req -in relay.csr -CA ca1.pem -CAkey ca1.key -CAcreateserial "
           "-out relay.pem -days 2 -extfile client.ext", shell=True, cwd=tmp_path, check=True, capture_output=True)
    token, other = "relayed-token-0123456789", "unknown-upstream-0123456789"
    (tmp_path / "up-tokens").write_text(f"{job} {token}\n")
    (tmp_path / "relay-tokens").write_text(f"{job} {token}\nstranger {other}\n")
    pem = {n: str(tmp_path / n) for n in ("server1.pem", "server1.key", "ca1.pem", "relay.pem", "relay.key")}
    layout = Layout(tmp_path, "--relay-tls-ca", pem["ca1.pem"], "--relay-tls-cert", pem["relay.pem"],
                    "--relay-tls-key", pem["relay.key"], "--relay-tls-target-name", NAME,
                    "--auth-tokens", str(tmp_path / "relay-tokens"),
                    up_args=("--tls-cert", pem["server1.pem"], "--tls-key", pem["server1.key"],
                             "--tls-client-ca", pem["ca1.pem"], "--auth-tokens", str(tmp_path / "up-tokens")))
    try:
        out = run_ranks(lambda r: train(layout, job, r, STEPS, auth_token=token), W, timeout=120)
        assert_all_equal(out, scalar_model(STEPS, [range(W)] * STEPS), STEPS)
        with pytest.raises(gradagg.errors.GradaggError) as e:
            with gradagg.Client(layout.relays[0].addr, "stranger", 0, W, auth_token=other, **FAST) as c:
                c.add_tensor("w", np.zeros(4, F32))
                c.init()
        assert "E_UNAUTHENTICATED" in str(e.value) and "upstream join" in str(e.value), str(e.value)
    finally:
        layout.stop()


def test_hostile_requests_to_a_relay(layout: Layout, job: str) -> None:
    """Raw requests naming a rank of another node, for every method that names a rank (Join,
    Leave, Heartbeat, Pull, Push, InitTensors), and Joins whose world size the relay cannot
    place: each refused with its own status and message before the job changes; then the job
    trains exactly as if none had come."""
    import grpc
    from _wire import channel, field_bytes, field_varint, init_chunk, join_request, pull_request, push_chunk
    ch = channel(layout.relays[0].addr)
    svc = "/gradagg.v1.Aggregator/"

    def refused(method: str, request: bytes, code: grpc.StatusCode, says: str, stream: bool = False) -> None:
        with pytest.raises(grpc.RpcError) as e:
            if stream:
                ch.stream_unary(svc + method)(iter([request]), timeout=10)
            elif method == "Pull":
                list(ch.unary_stream(svc + method)(request, timeout=10))
            else:
                ch.unary_unary(svc + method)(request, timeout=10)
        assert e.value.code() == code and says in e.value.details(), (method, e.value.code(), e.value.details())

    rank_msg = "rank 5 is not on this node: its relay serves ranks 0..3"
    refused("Join", join_request(job, 5, 9, W), grpc.StatusCode.INVALID_ARGUMENT, rank_msg)
    refused("Join", join_request(job, 0, 9, 6), grpc.StatusCode.INVALID_ARGUMENT,
            "world_size 6 is not --relay-nodes x 4 workers per node")
    refused("Join", join_request(job, 0, 9, 0), grpc.StatusCode.INVALID_ARGUMENT, "world_size 0")
    ch.unary_unary(svc + "Join")(join_request(job, 0, 9, W), timeout=10)  # the job exists now
    member = field_bytes(1, job.encode()) + field_varint(2, 5) + field_varint(3, 9)
    refused("Leave", member, grpc.StatusCode.INVALID_ARGUMENT, rank_msg)
    refused("Heartbeat", member, grpc.StatusCode.INVALID_ARGUMENT, rank_msg)
    refused("Pull", pull_request(job, 5, 9, 0), grpc.StatusCode.INVALID_ARGUMENT, rank_msg)
    refused("Push", push_chunk(job, 5, 9, 0, "w", 0, 1, b"\0" * 4), grpc.StatusCode.INVALID_ARGUMENT, rank_msg,
            stream=True)
    refused("InitTensors", init_chunk(job, 5, 9, "w", [1], 0, 1, b"\0" * 4), grpc.StatusCode.INVALID_ARGUMENT,
            rank_msg, stream=True)
    ch.unary_unary(svc + "Leave")(field_bytes(1, job.encode()) + field_varint(2, 0) + field_varint(3, 9), timeout=10)
    out = run_ranks(lambda r: train(layout, job + "-after", r, 2), W, timeout=60)
    assert_all_equal(out, scalar_model(2, [range(W)] * 2), 2)


def test_a_pull_still_answering_keeps_its_version_at_a_relay(tmp_path: Path, job: str) -> None:
    """A relay writes each upstream version into the blob it publishes when nothing else holds
    that blob (service/core/core_relay.c). A pull of version 2 that has begun and is not read
    (64 MiB: most of it still waits in the relay's send) holds it, so versions 3 and 4 go into
    new blobs and the held pull, read at last, carries version 2's values bit for bit."""
    binary = gradagg._lib.server_binary()
    (tmp_path / "up").mkdir()
    (tmp_path / "node").mkdir()
    up = Server(binary, tmp_path / "up")
    relay = Server(binary, tmp_path / "node", "--relay-to", up.addr, "--relay-node", "0", "--relay-nodes", "1",
                   "--relay-workers", "1")
    n = 16 << 20
    try:
        w = np.zeros(n, F32)
        with gradagg.Client(relay.addr, job, 0, 1, optimizer=gradagg.SGD(lr=LR), incarnation=7, **FAST) as c:
            c.add_tensor("w", w)
            c.init()
            for s in range(2):
                c.step([np.full(n, s + 1, F32)])
            v2 = w.copy()
            held = channel(relay.addr).unary_stream(SERVICE + "Pull")(pull_request(job, 0, 7, 2), timeout=120)
            chunks = [next(held)]  # its answer has begun; the rest waits unread
            for s in range(2, 4):
                c.step([np.full(n, s + 1, F32)])
            assert c.version == 4 and not np.array_equal(w, v2)
        chunks += list(held)
        got = np.zeros(n, F32)
        for chunk in chunks:
            f = fields(chunk)
            assert f[1] == [2] and f[2] == [b"w"] and f.get(5, [0]) == [0], f"not version 2's full values: {f.keys()}"
            off, count = f.get(3, [0])[0], f[4][0]
            got[off:off + count] = np.frombuffer(f[15][0], F32)
        np.testing.assert_array_equal(got, v2)
    finally:
        relay.stop()
        up.stop()


def test_what_a_relay_refuses(layout: Layout, job: str) -> None:
    """A rank of another node, an elastic rank, an async job, a world size that is not nodes x
    workers: each refused with its own status and message; the relay still serves its node."""
    addr = layout.relays[0].addr
    with pytest.raises(gradagg.errors.RankError, match="not on this node: its relay serves ranks 0..3"):
        gradagg.Client(addr, job, 5, W, **FAST)
    with pytest.raises(gradagg.errors.ConfigError, match="elastic"):
        gradagg.Client(addr, job, "any", W, min_world_size=2, **FAST)
    with pytest.raises(gradagg.errors.ConfigError, match="async"):
        gradagg.Client(addr, job + "a", 0, W, mode="async", **FAST)
    with pytest.raises(gradagg.errors.ConfigError, match="world_size 4 is not --relay-nodes x 4 workers per node"):
        gradagg.Client(addr, job + "w", 0, 4, **FAST)
    out = run_ranks(lambda r: train(layout, job, r, 2), W, timeout=60)
    assert_all_equal(out, scalar_model(2, [range(W)] * 2), 2)
