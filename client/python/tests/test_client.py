"""gradagg.Client against a real server: numpy and torch buffers, W workers in threads checked
bit for bit against a numpy reference, leaving, DGC and the automatic threshold."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import gradagg
from gradagg import errors
from _util import (FAST, F32, regression_data, regression_grads, regression_init, regression_loss, run_ranks)

W, STEPS, LR = 4, 30, 0.1


def test_threads_match_numpy_reference(server, job) -> None:
    """4 workers, codec none, mean + SGD: every rank ends with the reference's exact bits."""
    data = [regression_data(r) for r in range(W)]

    def worker(r: int):
        w, b = regression_init()
        x, y = data[r]
        with gradagg.Client(server.addr, job, r, W, mean=True, optimizer=gradagg.SGD(lr=LR), **FAST) as c:
            assert c.add_tensor("w", w) == 0
            assert c.add_tensor("b", b) == 1
            c.init()
            for _ in range(STEPS):
                c.step(regression_grads(w, b, x, y))
            return w, b, c.version, c.stats

    out = run_ranks(worker, W)

    # Reference: the server's math in float32: sum in rank order, times (float)(1/W), SGD.
    w, b = regression_init()
    loss0 = regression_loss(w, b, data)
    for _ in range(STEPS):
        gs = [regression_grads(w, b, *data[r]) for r in range(W)]
        sw, sb = np.zeros_like(w), np.zeros_like(b)
        for gw, gb in gs:
            sw, sb = sw + gw, sb + gb
        scale = F32(1.0 / W)
        w = w - F32(LR) * (sw * scale)
        b = b - F32(LR) * (sb * scale)
    for r, (rw, rb, version, stats) in enumerate(out):
        np.testing.assert_array_equal(rw, w, err_msg=f"rank {r}")
        np.testing.assert_array_equal(rb, b, err_msg=f"rank {r}")
        assert version == STEPS
        assert stats.steps == STEPS and stats.bytes_pushed == (w.size + b.size) * 4 and stats.late_pushes == 0
    assert regression_loss(w, b, data) < 0.2 * loss0


def test_torch_cpu_tensors(server, job) -> None:
    p = torch.zeros(3, 2)
    q = torch.zeros(())  # a 0-d tensor is one element
    with gradagg.Client(server.addr, job, 0, 1, optimizer=gradagg.SGD(lr=0.5), **FAST) as c:
        c.add_tensor("p", p, codec="fp16")
        c.add_tensor("q", q)
        assert [(t.name, t.shape, t.size, t.codec, t.cuda_device) for t in c.tensors] == [
            ("p", (3, 2), 6, "fp16", None), ("q", (), 1, "none", None)]
        c.init()
        c.step([torch.arange(6, dtype=torch.float32).reshape(3, 2), torch.tensor(2.0)])
        assert torch.equal(p, -0.5 * torch.arange(6, dtype=torch.float32).reshape(3, 2))
        assert q.item() == -1.0
        with pytest.raises(TypeError, match="torch.float64"):
            c.step([torch.zeros(3, 2, dtype=torch.float64), torch.tensor(0.0)])
        with pytest.raises(ValueError, match="shape"):
            c.step([torch.zeros(2, 3), torch.tensor(0.0)])
        # numpy and torch gradients mix freely on host tensors.
        c.step([np.ones((3, 2), F32), torch.tensor(0.0)])
        assert c.version == 2 and p[0, 0].item() == -0.5


def test_reassigned_torch_storage_is_refused(server, job) -> None:
    m = torch.nn.Linear(2, 1)
    with gradagg.Client(server.addr, job, 0, 1, optimizer=gradagg.SGD(lr=0.5), **FAST) as c:
        c.add_tensor("w", m.weight)
        c.init()
        m.weight.data = torch.zeros(1, 2)
        with pytest.raises(RuntimeError, match="moved in memory"):
            c.step([torch.zeros(1, 2)])


def test_close_leaves_the_rank(server, job) -> None:
    with gradagg.Client(server.addr, job, 0, 2, **FAST) as c:
        assert not c.closed
        # While it is held, another incarnation cannot take rank 0.
        with pytest.raises(errors.RankHeldError):
            gradagg.Client(server.addr, job, 0, 2, **FAST)
    assert c.closed
    with gradagg.Client(server.addr, job, 0, 2, **FAST) as c2:
        assert c2.rank == 0 and not c2.closed
    # Garbage collection of an unclosed client leaves too.
    c3 = gradagg.Client(server.addr, job, 1, 2, **FAST)
    del c3
    gradagg.Client(server.addr, job, 1, 2, **FAST).close()


def test_dgc_topk_trains(server, job) -> None:
    data = [regression_data(r, d=16, k=8) for r in range(2)]

    def worker(r: int):
        w, b = regression_init(16, 8)
        x, y = data[r]
        with gradagg.Client(server.addr, job, r, 2, optimizer=gradagg.SGD(lr=0.05), **FAST) as c:
            c.add_tensor("w", w, codec="topk", ratio=0.1, dgc=gradagg.DGC(momentum=0.9, warmup_epochs=2))
            c.add_tensor("b", b, codec="topk", ratio=0.5, dgc=gradagg.DGC(momentum=0.9))
            c.init()
            for step in range(40):
                if step % 10 == 0:
                    c.set_epoch(step // 10)
                c.step(regression_grads(w, b, x, y))
            return w, b, c.stats.bytes_pushed

    (w0, b0, sent), (w1, b1, _) = run_ranks(worker, 2)
    np.testing.assert_array_equal(w0, w1)
    np.testing.assert_array_equal(b0, b1)
    assert sent < 16 * 8 * 4  # compressed: fewer bytes than fp32
    w, b = regression_init(16, 8)
    assert regression_loss(w0, b0, data) < 0.5 * regression_loss(w, b, data)


def test_auto_threshold(server, job) -> None:
    rng = np.random.default_rng(5)
    w = np.zeros(20000, F32)
    with gradagg.Client(server.addr, job, 0, 1, optimizer=gradagg.SGD(lr=0.01), **FAST) as c:
        c.add_tensor("w", w, codec="2bit", threshold="auto", auto_bits=1.0)
        c.add_tensor("fixed", np.zeros(8, F32), codec="2bit", threshold=0.25)
        c.add_tensor("plain", np.zeros(8, F32))
        c.init()
        t0, d0 = c.threshold(0)
        assert t0 > 0 and math.isnan(d0)
        for _ in range(5):
            c.step([rng.standard_normal(w.size).astype(F32), np.zeros(8, F32), np.zeros(8, F32)])
        t, d = c.threshold(0)
        assert t != t0 and 0.0 < d < 1.0
        # 1 bit per element of a ternary code with equally likely signs: about 23% nonzero (h(p) + p = 1).
        assert 0.1 < d < 0.35
        assert c.threshold(1)[0] == pytest.approx(0.25)
        with pytest.raises(errors.InvalError):
            c.threshold(2)
        with pytest.raises(errors.InvalError):
            c.threshold(7)
        with pytest.raises(errors.InvalError):
            c.add_tensor("late", np.zeros(8, F32), codec="2bit", threshold="auto")  # after init


def test_auto_threshold_needs_2bit(server, job) -> None:
    with gradagg.Client(server.addr, job, 0, 1, **FAST) as c:
        with pytest.raises(errors.InvalError):
            c.add_tensor("w", np.zeros(8, F32), codec="topk", threshold="auto")


def test_step_start_and_wait(server, job) -> None:
    """Two ranks from one thread: rank 0's step cannot end before rank 1 pushes, so it is in
    flight and every other call on it is refused; both end with the bits step() gives; the
    step's own error comes from step_wait()."""
    w0, b0 = regression_init()
    w1, b1 = regression_init()
    x, y = regression_data(0)
    with gradagg.Client(server.addr, job, 0, 2, optimizer=gradagg.SGD(lr=LR), **FAST) as c0, \
            gradagg.Client(server.addr, job, 1, 2, optimizer=gradagg.SGD(lr=LR), **FAST) as c1:
        for c, w, b in ((c0, w0, b0), (c1, w1, b1)):
            c.add_tensor("w", w)
            c.add_tensor("b", b)
        c0.init()
        c1.init()
        g = regression_grads(w0, b0, x, y)
        c0.step_start(g)
        assert not c0.step_done()
        for call in (lambda: c0.version, lambda: c0.step(g), lambda: c0.step_start(g), lambda: c0.stats):
            with pytest.raises(RuntimeError, match="in flight"):
                call()
        assert "step in flight" in repr(c0)
        c1.step_start(g)
        c1.step_wait()
        c0.step_wait()
        assert c0.step_done() and c0.version == 1 and c1.version == 1
        np.testing.assert_array_equal(w0, w1)
        want_w, want_b = regression_init()
        np.testing.assert_array_equal(w0, want_w - F32(LR) * g[0])
        bad = [np.full_like(g[0], np.nan), g[1]]
        c0.step_start(bad)
        with pytest.raises(errors.NonFiniteError):
            c0.step_wait()
        c0.step_wait()  # nothing in flight any more: a no-op
        assert c0.version == 1
