"""gradagg.torch.DistributedOptimizer: W ranks in threads train one small torch model."""
from __future__ import annotations

import contextlib
import threading
from typing import Any, Dict, List, Optional

import pytest
import torch
import torch.nn.functional as F

import gradagg
from gradagg import errors
from gradagg.torch import DistributedOptimizer
from _util import FAST, run_ranks

torch.set_num_threads(1)  # 4 ranks share 2 cores


_SEEDING = threading.Lock()  # ranks run in threads; torch's seed is global


def make_model(seed: int) -> torch.nn.Module:
    with _SEEDING:
        torch.manual_seed(seed)  # different per rank: init() must make them equal
        return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 2))


def linear_twins(seed: int, n_in: int, n_out: int):
    """A Linear layer and a copy of it: one for gradagg, one for the torch.optim reference."""
    torch.manual_seed(seed)
    model = torch.nn.Linear(n_in, n_out)
    ref = torch.nn.Linear(n_in, n_out)
    ref.load_state_dict(model.state_dict())
    return model, ref


def rank_data(r: int):
    g = torch.Generator().manual_seed(1000 + r)
    x = torch.randn(128, 8, generator=g)
    t = torch.Generator().manual_seed(1)
    teacher = torch.randn(8, 2, generator=t)
    return x, x @ teacher


def train(server, job: str, world: int, steps: int, **kw: Any) -> List[Dict[str, Any]]:
    def worker(r: int) -> Dict[str, Any]:
        model = make_model(r)
        x, y = rank_data(r)
        losses, in_flight = [], []
        with DistributedOptimizer(model.named_parameters(), server=server.addr, job=job, rank=r, world_size=world,
                                  **FAST, **kw) as opt:
            start = [p.detach().clone() for p in model.parameters()]
            for step in range(steps):
                opt.set_epoch(step // 10)
                opt.zero_grad()
                loss = F.mse_loss(model(x), y)
                loss.backward()
                in_flight.append(opt.buckets_in_flight)
                opt.step()
                losses.append(loss.item())
            version = opt.clients[0].version
            pulled = sum(c.stats.bytes_pulled for c in opt.clients)
            buckets = len(opt.clients)
        return dict(params=[p.detach().clone() for p in model.parameters()], start=start, losses=losses,
                    version=version, model=model, pulled=pulled, buckets=buckets, in_flight=in_flight)

    return run_ranks(worker, world, timeout=120)


def assert_identical_and_learning(out: List[Dict[str, Any]], steps: int, factor: float) -> None:
    for r, o in enumerate(out):
        assert o["version"] == steps
        for a, b in zip(o["params"], out[0]["params"]):
            assert torch.equal(a, b), f"rank {r} differs"
        for a, b in zip(o["start"], out[0]["start"]):
            assert torch.equal(a, b), f"rank {r} started from other values than rank 0"
        assert o["losses"][-1] < factor * o["losses"][0], o["losses"]


@pytest.mark.parametrize("codec", ["none", "2bit"])
def test_buckets_overlap_backward(server, job, codec: str) -> None:
    # One bucket per parameter (4, in backward order, each a lane of the job): every bucket's step
    # starts within backward, and the result is bit for bit that of one client pushing
    # everything in step().
    kw: Dict[str, Any] = dict(lr=0.05, momentum=0.5, codec=codec, pull_codec=codec)
    if codec == "2bit":
        kw.update(threshold=0.05, pull_threshold=0.01)
    one = train(server, job, 2, 8, overlap=False, **kw)
    many = train(server, job + "-b", 2, 8, bucket_cap_mb=1e-6, **kw)
    assert [o["buckets"] for o in one] == [1, 1] and [o["buckets"] for o in many] == [4, 4]
    assert all(n == 0 for o in one for n in o["in_flight"])
    assert all(n == 4 for o in many for n in o["in_flight"])
    for a, b in zip(one, many):
        assert b["version"] == 8
        for p, q in zip(a["params"], b["params"]):
            assert torch.equal(p, q)
    assert many[0]["losses"][-1] < many[0]["losses"][0]


def test_topk_defaults_train(server, job) -> None:
    # topk without a ratio: TOPK_TRAINING (10%, fp16 values, varint indices), the momentum on the
    # worker: identical ranks that learn.
    out = train(server, job, 2, 40, codec="topk", lr=0.05, momentum=0.5)
    assert_identical_and_learning(out, 40, 0.3)


def test_bucket_plan() -> None:
    from gradagg.torch import MAX_BUCKETS, bucket_plan
    # Backward order, a bucket closing once it holds the cap (DDP's rule).
    assert bucket_plan([4, 40, 8, 80], 40) == [[3], [2, 1], [0]]
    assert bucket_plan([4, 40, 8, 80], 50) == [[3], [2, 1, 0]]
    assert bucket_plan([4, 40, 8, 80], 0) == [[3, 2, 1, 0]]
    assert bucket_plan([4, 40, 8, 80], 1 << 30) == [[3, 2, 1, 0]]
    many = bucket_plan([4] * 100, 4)
    assert len(many) <= MAX_BUCKETS and sorted(i for b in many for i in b) == list(range(100))


@pytest.mark.parametrize("where", ["worker", "server"])
def test_sgd_momentum_2bit(server, job, where: str) -> None:
    # Biases uncompressed, weights 2bit: with the defaults (automatic threshold, the momentum on
    # the worker), and with a fixed threshold and the momentum on the server.
    kw: Dict[str, Any] = dict(lr=0.05, momentum=0.5) if where == "worker" else \
        dict(optimizer=gradagg.SGD(lr=0.05, momentum=0.5), threshold=0.1)
    out = train(server, job, 4, 40, codec="2bit", codec_for=lambda name, p: "none" if p.dim() == 1 else None, **kw)
    assert_identical_and_learning(out, 40, 0.3)


def test_automatic_pull_threshold(server, job) -> None:
    # 2bit both ways with the defaults: the SDK's automatic push threshold, the server's automatic
    # pull threshold (pieces of 2 bits per element). Every rank holds the same parameters, and
    # the model learns.
    out = train(server, job, 4, 40, lr=0.05, momentum=0.5, codec="2bit", pull_codec="2bit")
    assert_identical_and_learning(out, 40, 0.3)
    model = out[0]["model"]
    n = sum(p.numel() for p in model.parameters())
    # Pulled bytes of the last step: 2-bit deltas, 4 bytes per 16 elements of each tensor.
    assert out[0]["pulled"] == sum(4 * ((p.numel() + 15) // 16) for p in model.parameters()) < 4 * n
    kw = dict(server=server.addr, job=job + "-bad", rank=0, world_size=1, **FAST)
    with pytest.raises(errors.GradaggError, match="pull_auto_bits"):
        DistributedOptimizer(model.parameters(), lr=0.1, pull_codec="topk", pull_threshold="auto", **kw)
    with pytest.raises(errors.GradaggError, match="pull_auto_bits 2 outside"):
        DistributedOptimizer(model.parameters(), lr=0.1, pull_codec="2bit", pull_auto_bits=2.0, **kw)


@pytest.mark.parametrize("overlap", [True, False])
def test_gradient_accumulation(server, job, overlap: bool) -> None:
    # Several backward passes before one step() push their sum once, as torch.optim.SGD applies
    # it. With overlap the last backward starts the push: the earlier ones run in no_sync().
    model, ref = linear_twins(4, 5, 2)
    torch_opt = torch.optim.SGD(ref.parameters(), lr=0.1, momentum=0.9)
    batches = [torch.randn(3, 5) for _ in range(6)]
    with DistributedOptimizer(model.named_parameters(), server=server.addr, job=job, rank=0, world_size=1, lr=0.1,
                              momentum=0.9, overlap=overlap, **FAST) as opt:
        for step in range(2):
            for m, o in ((model, opt), (ref, torch_opt)):
                o.zero_grad()
                quiet = opt.no_sync() if o is opt and overlap else contextlib.nullcontext()
                with quiet:
                    for x in batches[3 * step:3 * step + 2]:
                        (m(x) ** 2).mean().backward()
                (m(batches[3 * step + 2]) ** 2).mean().backward()
                o.step()
        assert opt.client.version == 2
        for p, q in zip(model.parameters(), ref.parameters()):
            assert torch.allclose(p, q, rtol=1e-6, atol=1e-7), (p, q)
        if overlap:
            # A second backward into a bucket already sent is refused, not silently dropped.
            opt.zero_grad()
            (model(batches[0]) ** 2).mean().backward()
            with pytest.raises(RuntimeError, match="no_sync"):
                (model(batches[1]) ** 2).mean().backward()
            # That backward still added into .grad before its hook refused it: step() completes
            # the step with what was sent, and says the gradients differ from it.
            with pytest.raises(RuntimeError, match="changed in place after gradagg took it"):
                opt.step()
            assert opt.client.version == 3


def test_momentum_moves_to_the_worker(server, job) -> None:
    # With a residual codec in the job, momentum and weight decay run on the worker and the
    # server runs plain SGD. The dense parameters then follow torch.optim.SGD(momentum,
    # weight_decay) exactly (up to float32 rounding): momentum or weight decay applied on the
    # server as well would show. The 2bit parameter takes no part in the loss (zero gradients).
    torch.manual_seed(5)
    model = torch.nn.Linear(4, 3)
    ref = torch.nn.Linear(4, 3)
    ref.load_state_dict(model.state_dict())
    unused = torch.nn.Parameter(torch.zeros(64))
    torch_opt = torch.optim.SGD(ref.parameters(), lr=0.1, momentum=0.9, weight_decay=0.05)
    x = torch.randn(6, 4)
    params = list(model.named_parameters()) + [("unused", unused)]
    with DistributedOptimizer(params, server=server.addr, job=job, rank=0, world_size=1, lr=0.1, momentum=0.9,
                              weight_decay=0.05, codec_for=lambda name, p: "2bit" if name == "unused" else None,
                              **FAST) as opt:
        for _ in range(4):
            for m, o in ((model, opt), (ref, torch_opt)):
                o.zero_grad()
                (m(x) ** 2).sum().backward()
                o.step()
        for p, q in zip(model.parameters(), ref.parameters()):
            assert torch.allclose(p, q, rtol=1e-5, atol=1e-7), (p, q)
        assert opt.param_groups[0]["weight_decay"] == 0.05
        assert opt.momentum_on == "worker"
        assert opt.server_optimizer == gradagg.SGD(lr=0.1, momentum=0.0, weight_decay=0.0)


def test_dgc_topk(server, job) -> None:
    out = train(server, job, 2, 40, lr=0.05, momentum=0.9, codec="topk", ratio=0.25, dgc=True)
    assert_identical_and_learning(out, 40, 0.3)


def test_none_grads_push_zeros(server, job) -> None:
    model = torch.nn.Linear(3, 1)
    extra = torch.nn.Parameter(torch.ones(4))  # never used: its grad stays None
    params = list(model.named_parameters()) + [("extra", extra)]
    with DistributedOptimizer(params, server=server.addr, job=job, rank=0, world_size=1, lr=0.1, **FAST) as opt:
        before = model.weight.detach().clone()
        for _ in range(2):
            opt.zero_grad()
            model(torch.ones(2, 3)).sum().backward()
            opt.step()
        assert torch.equal(extra.detach(), torch.ones(4))
        # d(sum)/dw = 2 per element; the server's float32 SGD, twice.
        lr = torch.tensor(0.1)
        assert torch.equal(model.weight.detach(), (before - lr * 2.0) - lr * 2.0)
        assert opt.client.version == 2
        # A new lr (what a scheduler writes) reaches the server's SGD with the next step.
        w = model.weight.detach().clone()
        opt.param_groups[0]["lr"] = 0.01
        opt.zero_grad()
        model(torch.ones(2, 3)).sum().backward()
        opt.step()
        assert torch.equal(model.weight.detach(), w - torch.tensor(0.01) * 2.0)
        # The other hyper-parameters are the job's: a change is refused, not ignored.
        opt.param_groups[0]["momentum"] = 0.5
        with pytest.raises(RuntimeError, match="momentum changed"):
            opt.step()


@pytest.mark.parametrize("decoupled", [False, True])
def test_server_adam_matches_torch(server, job, decoupled: bool) -> None:
    # optimizer=gradagg.Adam runs Adam (AdamW when decoupled) on the server; the same gradients
    # through torch.optim give the same parameters up to float32 rounding (ga_optim.h's order).
    model, ref = linear_twins(3, 3, 2)
    hp = dict(lr=0.01, betas=(0.8, 0.99), eps=1e-6, weight_decay=0.1)
    torch_opt = (torch.optim.AdamW if decoupled else torch.optim.Adam)(ref.parameters(), **hp)
    adam = gradagg.Adam(lr=0.01, beta1=0.8, beta2=0.99, eps=1e-6, weight_decay=0.1, decoupled=decoupled)
    x = torch.randn(5, 3)
    start = [p.detach().clone() for p in model.parameters()]
    with DistributedOptimizer(model.named_parameters(), server=server.addr, job=job, rank=0, world_size=1,
                              optimizer=adam, **FAST) as opt:
        for _ in range(3):
            for m, o in ((model, opt), (ref, torch_opt)):
                o.zero_grad()
                (m(x) ** 2).sum().backward()
                o.step()
        assert all(not torch.equal(p, s) for p, s in zip(model.parameters(), start))
        for p, q in zip(model.parameters(), ref.parameters()):
            assert torch.allclose(p, q, rtol=1e-5, atol=1e-7), (p, q)
        assert opt.param_groups[0]["lr"] == 0.01


@pytest.mark.parametrize("kind", ["sgd", "adam"])
def test_lr_scheduler_matches_torch(server, job, kind: str) -> None:
    # An LR scheduler over DistributedOptimizer (4 buckets, each a client of its own) steps the
    # server's optimizer with each step's lr: the same parameters as torch.optim under the same
    # scheduler, up to float32 rounding; a run that kept the first lr would be far off.
    model, ref = linear_twins(4, 3, 2)
    fixed_model = torch.nn.Linear(3, 2)
    fixed_model.load_state_dict(model.state_dict())
    x = torch.randn(5, 3)
    if kind == "sgd":
        torch_opt: torch.optim.Optimizer = torch.optim.SGD(ref.parameters(), lr=0.1, momentum=0.9)
        kw: Dict[str, Any] = dict(lr=0.1, momentum=0.9)
    else:
        torch_opt = torch.optim.Adam(ref.parameters(), lr=0.05)
        kw = dict(optimizer=gradagg.Adam(lr=0.05))
    with DistributedOptimizer([("w", model.weight), ("b", model.bias)], server=server.addr, job=job, rank=0,
                              world_size=1, bucket_cap_mb=1e-6, **kw, **FAST) as opt:
        assert len(opt.clients) == 2
        schedules = [torch.optim.lr_scheduler.StepLR(o, step_size=2, gamma=0.3) for o in (opt, torch_opt)]
        for _ in range(6):
            for m, o in ((model, opt), (ref, torch_opt)):
                o.zero_grad()
                (m(x) ** 2).sum().backward()
                o.step()
            for sched in schedules:
                sched.step()
        assert opt.param_groups[0]["lr"] == pytest.approx(kw.get("lr", 0.05) * 0.3 ** 3)
        for p, q in zip(model.parameters(), ref.parameters()):
            assert torch.allclose(p, q, rtol=1e-5, atol=1e-7), (p, q)
    # The same six steps at the first lr end elsewhere: the schedule did change the steps.
    with DistributedOptimizer(fixed_model.named_parameters(), server=server.addr, job=job + "-f", rank=0,
                              world_size=1, overlap=False, **kw, **FAST) as fixed:
        for _ in range(6):
            fixed.zero_grad()
            (fixed_model(x) ** 2).sum().backward()
            fixed.step()
    assert not torch.allclose(fixed_model.weight, model.weight, rtol=1e-3, atol=1e-5)


def test_lr_must_not_change_within_a_step(server, job) -> None:
    model = torch.nn.Sequential(torch.nn.Linear(3, 3), torch.nn.Linear(3, 1))
    with DistributedOptimizer(model.named_parameters(), server=server.addr, job=job, rank=0, world_size=1, lr=0.1,
                              bucket_cap_mb=1e-6, **FAST) as opt:
        opt.zero_grad()
        model(torch.ones(2, 3)).sum().backward()  # every bucket sent with lr 0.1
        opt.param_groups[0]["lr"] = 0.05
        opt.step()  # nothing left to send: the buckets in flight finish with 0.1
        assert opt.clients[0].version == 1
        opt.zero_grad()
        with opt.no_sync():
            model(torch.ones(2, 3)).sum().backward()
        opt.step()
        # A group added later would hold parameters the job does not have.
        with pytest.raises(RuntimeError, match="param groups are fixed"):
            opt.add_param_group(dict(params=[torch.nn.Parameter(torch.ones(2))], lr=0.2))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_half_parameters_train_fp32_masters(server, job, dtype: torch.dtype) -> None:
    # A bfloat16 / float16 model: the server's SGD steps fp32 masters with the fp32 gradients,
    # and each step rounds them into the model. Steps far below the half-precision spacing add
    # up in the masters (a half-precision SGD would lose them); larger ones reach the model.
    torch.manual_seed(6)
    w = torch.nn.Parameter(torch.randn(3, 4).to(dtype))
    b = torch.nn.Parameter(torch.randn(3).to(dtype))
    x = torch.randn(6, 4).to(dtype)
    start = [w.detach().float(), b.detach().float()]
    master = [t.clone() for t in start]
    with DistributedOptimizer([("w", w), ("b", b)], server=server.addr, job=job, rank=0, world_size=1, lr=1e-6,
                              bucket_cap_mb=1e-6, **FAST) as opt:
        assert sorted(opt.masters) == [0, 1] and len(opt.clients) == 2
        for step in range(8):
            lr = 1e-6 if step < 5 else 1e-2
            opt.param_groups[0]["lr"] = lr
            opt.zero_grad()
            # Elementwise (the CPU has no float16 matmul): y = x w^T + b.
            ((x[:, None, :] * w).sum(-1) + b).float().pow(2).sum().backward()
            grads = [w.grad.float(), b.grad.float()]
            opt.step()
            master = [m - torch.tensor(lr) * g for m, g in zip(master, grads)]
            for p, m, mo in zip((w, b), master, opt.masters.values()):
                assert p.dtype == dtype
                assert torch.equal(mo, m)
                assert torch.equal(p.detach(), m.to(dtype))
            if step == 4:  # the masters moved, the model did not
                assert all(not torch.equal(m, s) for m, s in zip(master, start))
                assert all(torch.equal(p.detach().float(), s) for p, s in zip((w, b), start))
    assert all(not torch.equal(p.detach().float(), s) for p, s in zip((w, b), start))


def test_autocast_trains(server, job) -> None:
    # Mixed precision with torch.autocast: bfloat16 matmuls, float32 parameters and gradients;
    # the ranks stay identical and learn.
    def worker(r: int) -> Dict[str, Any]:
        model = make_model(r)
        x, y = rank_data(r)
        losses = []
        with DistributedOptimizer(model.named_parameters(), server=server.addr, job=job, rank=r, world_size=2,
                                  lr=0.05, momentum=0.5, **FAST) as opt:
            for _ in range(20):
                opt.zero_grad()
                with torch.autocast("cpu", dtype=torch.bfloat16):
                    out = model(x)
                assert out.dtype == torch.bfloat16
                loss = F.mse_loss(out.float(), y)
                loss.backward()
                opt.step()
                losses.append(loss.item())
        return dict(params=[p.detach().clone() for p in model.parameters()], losses=losses)

    out = run_ranks(worker, 2, timeout=120)
    for a, b in zip(out[0]["params"], out[1]["params"]):
        assert a.dtype == torch.float32 and torch.equal(a, b)
    assert out[0]["losses"][-1] < 0.5 * out[0]["losses"][0]


def _resumable_run(server, job: str, steps: int, stop_at: Optional[int], resume: bool) -> List[List[torch.Tensor]]:
    """2 ranks, 2bit with worker momentum and the automatic threshold, 4 buckets and a StepLR:
    trains `steps` steps; with stop_at, every rank saves its state_dicts there, closes its
    optimizer and goes on with a new model and optimizer, loading them when `resume`."""
    # resume: the server's job goes on when the ranks come back (between, all of them had left).
    kw: Dict[str, Any] = dict(lr=0.05, momentum=0.9, codec="2bit", pull_codec="2bit", bucket_cap_mb=1e-6,
                              resume=True, **FAST)
    # The script stops as a whole: both ranks have left before either comes back (a rank back
    # early would push while the other's old incarnation still held its rank, and its Leave would
    # then close that step without it).
    stopped = threading.Barrier(2)

    def worker(r: int) -> List[torch.Tensor]:
        x, y = rank_data(r)
        saved: Dict[str, Any] = {}
        done = 0
        while done < steps:
            model = make_model(r + 10 * done)  # a new process would start from other values
            with DistributedOptimizer(model.named_parameters(), server=server.addr, job=job, rank=r, world_size=2,
                                      **kw) as opt:
                sched = torch.optim.lr_scheduler.StepLR(opt, step_size=3, gamma=0.5)
                if saved and resume:
                    opt.load_state_dict(saved["opt"])
                    sched.load_state_dict(saved["sched"])
                end = stop_at if stop_at is not None and done < stop_at else steps
                for _ in range(done, end):
                    opt.zero_grad()
                    F.mse_loss(model(x), y).backward()
                    opt.step()
                    sched.step()
                done = end
                saved = dict(opt=opt.state_dict(), sched=sched.state_dict())
            if done < steps:
                stopped.wait(60)
        return [p.detach().clone() for p in model.parameters()]

    return run_ranks(worker, 2, timeout=120)


def test_state_dict_resumes_exactly(server, job) -> None:
    # A training script stopped after step 5 and resumed from its state_dicts (the worker's
    # residuals, momentum and threshold state, the scheduler's lr) ends bit for bit where the
    # uninterrupted run ends; resumed without them it does not.
    straight = _resumable_run(server, job + "-s", 10, None, True)
    resumed = _resumable_run(server, job + "-r", 10, 5, True)
    fresh = _resumable_run(server, job + "-f", 10, 5, False)
    for r in range(2):
        for a, b in zip(straight[r], resumed[r]):
            assert torch.equal(a, b), f"rank {r}"
    assert not all(torch.equal(a, b) for a, b in zip(straight[0], fresh[0]))


def test_state_dict_must_fit(server, job) -> None:
    model = torch.nn.Linear(3, 2)
    with DistributedOptimizer(model.named_parameters(), server=server.addr, job=job, rank=0, world_size=1, lr=0.1,
                              codec="2bit", **FAST) as opt:
        sd = opt.state_dict()
        assert sd["gradagg"]["job"] == job and len(sd["gradagg"]["workers"]) == 1
    other = torch.nn.Linear(3, 2)
    with DistributedOptimizer(other.named_parameters(), server=server.addr, job=job + "-o", rank=0, world_size=1,
                              lr=0.1, codec="2bit", **FAST) as opt:
        with pytest.raises(ValueError, match="state_dict of job"):
            opt.load_state_dict(sd)
        with pytest.raises(ValueError, match="no 'gradagg' entry"):
            opt.load_state_dict(torch.optim.SGD(other.parameters(), lr=0.1).state_dict())
        with pytest.raises(errors.InvalidArgumentError, match="not a gradagg worker state"):
            opt.client.load_state(b"\0" * 16)
        with pytest.raises(errors.InvalidArgumentError, match="is 'wei9ht' in the state, 'weight' here"):
            state = opt.client.state()
            opt.client.load_state(state.replace(b"weight", b"wei9ht"))
        opt.client.load_state(opt.client.state())


def test_server_optimizer_arguments_are_checked(server, job) -> None:
    model = torch.nn.Linear(2, 1)
    kw = dict(server=server.addr, job=job, rank=0, world_size=1, **FAST)
    with pytest.raises(TypeError, match="give lr"):
        DistributedOptimizer(model.parameters(), **kw)
    with pytest.raises(TypeError, match="lr given with optimizer"):
        DistributedOptimizer(model.parameters(), lr=0.1, optimizer=gradagg.Adam(), **kw)
    with pytest.raises(ValueError, match="server-side Adam"):
        DistributedOptimizer(model.parameters(), optimizer=gradagg.Adam(), codec="topk", dgc=True, **kw)
    with pytest.raises(ValueError, match="momentum 0"):
        DistributedOptimizer(model.parameters(), optimizer=gradagg.SGD(0.1, momentum=0.9), codec="topk", dgc=True,
                             **kw)
    with pytest.raises(TypeError, match="expected gradagg.SGD, gradagg.Adam or a torch.optim.Optimizer"):
        DistributedOptimizer(model.parameters(), optimizer=torch.optim.SGD, **kw)


def test_plain_params_and_closure(server, job) -> None:
    model = torch.nn.Linear(2, 1, bias=False)
    with DistributedOptimizer(model.parameters(), server=server.addr, job=job, rank=0, world_size=1, lr=0.1,
                              **FAST) as opt:
        assert [t.name for t in opt.client.tensors] == ["param0"]

        def closure():
            opt.zero_grad()
            loss = model(torch.ones(1, 2)).sum()
            loss.backward()
            return loss

        assert isinstance(opt.step(closure), torch.Tensor)
    with pytest.raises(TypeError, match="float32, float16 and bfloat16"):
        DistributedOptimizer([torch.nn.Parameter(torch.zeros(2, dtype=torch.float64))], server=server.addr,
                             job=job + "x", rank=0, world_size=1, lr=0.1, **FAST)


@pytest.mark.parametrize("overlap", [True, False])
def test_server_side_refuses_grad_scaler(server, job, overlap: bool) -> None:
    # torch's GradScaler unscales .grad without bumping its version counter, so the server-side
    # optimizer takes the scaling over (_step_supports_amp_scaling) and refuses it: torch 2.x sets
    # found_inf (and grad_scale) before step(), torch 1.x passes grad_scaler=. Worker-side the
    # optimizer leaves the unscale to GradScaler (test_recipes.py: bit for bit DDP).
    model = torch.nn.Linear(2, 1, bias=False)
    with DistributedOptimizer(model.parameters(), server=server.addr, job=job, rank=0, world_size=1, lr=0.1,
                              overlap=overlap, **FAST) as opt:
        assert opt._step_supports_amp_scaling
        for handed in ({"grad_scaler": object()}, None):
            model(torch.ones(1, 2)).sum().backward()
            if handed is None:
                opt.found_inf, opt.grad_scale = torch.zeros(1), torch.ones(1)
            with pytest.raises(RuntimeError, match="GradScaler.step"):
                opt.step(**(handed or {}))
            opt.zero_grad()
        del opt.found_inf, opt.grad_scale
        model(torch.ones(1, 2)).sum().backward()
        opt.step()  # without a scaler it steps
        with pytest.raises(TypeError, match="unexpected keyword arguments"):
            opt.step(foo=1)
    worker = torch.nn.Linear(2, 1, bias=False)
    inner = torch.optim.SGD(worker.parameters(), lr=0.1)
    with DistributedOptimizer(worker.named_parameters(), server=server.addr, job=job + "w", rank=0, world_size=1,
                              optimizer=inner, **FAST) as opt:
        assert not opt._step_supports_amp_scaling


def test_dgc_with_dense_biases(server, job) -> None:
    # As in the DGC paper: weights sparse, 1-d tensors dense; the dense ones get the momentum on
    # the worker too (no masking), and the server runs SGD with momentum 0 for all.
    out = train(server, job, 2, 40, lr=0.05, momentum=0.9, codec="topk", ratio=0.25, dgc=True,
                codec_for=lambda name, p: "none" if p.dim() == 1 else None)
    assert_identical_and_learning(out, 40, 0.3)


def test_a_failed_constructor_leaves_the_job(server, job) -> None:
    model = torch.nn.Linear(2, 2)
    with pytest.raises(errors.CodecError):
        DistributedOptimizer(model.named_parameters(), server=server.addr, job=job, rank=0, world_size=1, lr=0.1,
                             codec="topk", codec_for=lambda n, p: "nope" if p.dim() == 1 else None, **FAST)
    # The failed constructor left the job: the rank is free again.
    DistributedOptimizer(model.named_parameters(), server=server.addr, job=job, rank=0, world_size=1, lr=0.1,
                         **FAST).close()


@pytest.mark.skipif(gradagg.cuda_device_count() == 0 or not torch.cuda.is_available(),
                    reason="needs a CUDA build of libgradagg and a GPU")
def test_cuda_tensors(server, job) -> None:
    out = train_cuda(server, job)
    for a, b in zip(out[0], out[1]):
        assert torch.equal(a, b)


def train_cuda(server, job):
    def worker(r: int):
        model = make_model(r).cuda()
        x, y = (t.cuda() for t in rank_data(r))
        with DistributedOptimizer(model.named_parameters(), server=server.addr, job=job, rank=r, world_size=2,
                                  lr=0.05, codec="2bit", threshold=0.02, **FAST) as opt:
            assert all(t.cuda_device is not None for t in opt.client.tensors)
            first = None
            for _ in range(20):
                opt.zero_grad()
                loss = F.mse_loss(model(x), y)
                loss.backward()
                opt.step()
                first = loss.item() if first is None else first
            assert loss.item() < first
        return [p.detach().cpu() for p in model.parameters()]

    return run_ranks(worker, 2, timeout=120)


def _mlp3() -> torch.nn.Module:
    torch.manual_seed(5)
    return torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.Tanh(), torch.nn.Linear(64, 64), torch.nn.Tanh(),
                               torch.nn.Linear(64, 4))


@pytest.mark.parametrize("where", ["worker", "server"])
def test_clip_after_backward_probe(server, job, where: str) -> None:
    # One rank, codec none, lr 1, three buckets, a gradient norm in the millions clipped to 1e-3
    # between backward and step, five times: worker-side, the update's norm is within
    # max_norm x lr every time (the clip acts on the mean gradient); server-side, the gradients
    # were sent during backward, and every run raises instead of stepping on other values.
    max_norm = 1e-3
    x = torch.randn(32, 64) * 1e4
    for attempt in range(5):
        model = _mlp3()
        kw: Dict[str, Any] = dict(optimizer=torch.optim.SGD(model.parameters(), lr=1.0)) if where == "worker" \
            else dict(lr=1.0)
        with DistributedOptimizer(model.named_parameters(), server=server.addr, job=f"{job}-{attempt}", rank=0,
                                  world_size=1, bucket_cap_mb=0.001, **kw, **FAST) as opt:
            assert len(opt.buckets) == 3
            before = torch.cat([p.detach().flatten().clone() for p in model.parameters()])
            opt.zero_grad()
            ((model(x) ** 2).sum() * 1e6).backward()
            norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
            assert norm > 1e6
            if where == "worker":
                opt.step()
                after = torch.cat([p.detach().flatten() for p in model.parameters()])
                assert (after - before).norm() <= max_norm * 1.0001, attempt
            else:
                with pytest.raises(RuntimeError, match="changed in place after gradagg took it.*optimizer=torch.optim"):
                    opt.step()


def test_worker_side_refusals(server, job) -> None:
    model = torch.nn.Sequential(torch.nn.Linear(3, 3), torch.nn.Linear(3, 1))
    kw = dict(server=server.addr, job=job, rank=0, world_size=1, **FAST)
    inner = torch.optim.AdamW(model.parameters())
    with pytest.raises(ValueError, match="give both the same parameters"):
        DistributedOptimizer(list(model.named_parameters())[:2], optimizer=inner, **kw)
    with pytest.raises(TypeError, match="give the groups to that optimizer"):
        DistributedOptimizer([dict(params=list(model.parameters()), lr=0.1)], optimizer=inner, **kw)
    with pytest.raises(TypeError, match="dgc runs SGD momentum"):
        DistributedOptimizer(model.named_parameters(), optimizer=inner, dgc=True, **kw)
    with pytest.raises(TypeError, match="lr given with optimizer"):
        DistributedOptimizer(model.named_parameters(), optimizer=inner, lr=0.1, **kw)
    with pytest.raises(TypeError, match="deadline_ms= with a worker-side optimizer"):
        DistributedOptimizer(model.named_parameters(), optimizer=inner, deadline_ms=100, **kw)
    with pytest.raises(TypeError, match=r"param group 1: amsgrad=True"):
        DistributedOptimizer([dict(params=[model[0].weight]), dict(params=[model[0].bias], amsgrad=True)],
                             optimizer=gradagg.Adam(), **kw)
    with pytest.raises(TypeError, match="mix of param-group dicts"):
        DistributedOptimizer([dict(params=[model[0].weight]), model[0].bias], lr=0.1, **kw)


def test_worker_side_catches_unsynchronised_and_changed_gradients(server, job) -> None:
    model = torch.nn.Sequential(torch.nn.Linear(3, 3), torch.nn.Linear(3, 1))
    x = torch.randn(4, 3)
    with DistributedOptimizer(model.named_parameters(), server=server.addr, job=job, rank=0, world_size=1,
                              optimizer=torch.optim.SGD(model.parameters(), lr=0.1), **FAST) as opt:
        opt.zero_grad()
        with opt.no_sync():
            model(x).sum().backward()
        with pytest.raises(RuntimeError, match="without a synchronised backward"):
            opt.step()
        # A hook that runs after gradagg's (registered later on the same node) and changes the
        # gradient it already took: backward raises instead of leaving the other value in .grad.
        opt.zero_grad()
        acc = model[0].bias.expand_as(model[0].bias).grad_fn.next_functions[0][0]

        def double(*_: Any) -> None:
            model[0].bias.grad.mul_(2.0)
        handle = acc.register_hook(double)
        try:
            with pytest.raises(RuntimeError, match=r"'0.bias' was changed in place after gradagg took it"):
                model(x).sum().backward()
        finally:
            handle.remove()
        opt.zero_grad()
        model(x).sum().backward()  # and the job goes on (the refused backward's exchange was step 1)
        opt.step()
        assert opt.version == 2


def test_server_side_param_groups_match_torch(server, job) -> None:
    # Two groups with their own lr and weight decay (AdamW on the server, one bucket per group at
    # least) under a scheduler that moves them apart: torch.optim.AdamW's parameters.
    model, ref = linear_twins(6, 4, 3)
    x = torch.randn(6, 4)
    groups = lambda m: [dict(params=[m.weight], weight_decay=0.1), dict(params=[m.bias], weight_decay=0.0, lr=0.03)]
    torch_opt = torch.optim.AdamW(groups(ref), lr=0.01, betas=(0.8, 0.99))
    with DistributedOptimizer(groups(model), server=server.addr, job=job, rank=0, world_size=1,
                              optimizer=gradagg.Adam(lr=0.01, beta1=0.8, beta2=0.99, decoupled=True), **FAST) as opt:
        assert len(opt.buckets) == 2 and [o.lr for o in opt.server_optimizers] == [0.01, 0.03]
        assert [o.weight_decay for o in opt.server_optimizers] == [0.1, 0.0]
        scheds = [torch.optim.lr_scheduler.LambdaLR(o, [lambda s: 0.8 ** s, lambda s: 1.0 / (1 + s)])
                  for o in (opt, torch_opt)]
        for _ in range(8):
            for m, o in ((model, opt), (ref, torch_opt)):
                o.zero_grad()
                (m(x) ** 2).sum().backward()
                o.step()
            for s in scheds:
                s.step()
        for p, q in zip(model.parameters(), ref.parameters()):
            assert torch.allclose(p, q, rtol=1e-6, atol=1e-7), (p, q)
        opt.param_groups[1]["betas"] = (0.9, 0.99)
        opt.zero_grad()
        with pytest.raises(RuntimeError, match="param group 1: betas changed"):
            with opt.no_sync():
                (model(x) ** 2).sum().backward()
            opt.step()


def test_worker_side_frozen_and_unused_parameters(server, job) -> None:
    # A frozen parameter is not in the job (and stays as it was); a parameter backward never
    # reached pushes zeros and gets the mean (zeros) in .grad, as DDP with every parameter used.
    model = torch.nn.Sequential(torch.nn.Linear(3, 3), torch.nn.Linear(3, 1), torch.nn.Linear(1, 1))
    model[0].weight.requires_grad_(False)
    frozen = model[0].weight.detach().clone()
    with DistributedOptimizer(model.named_parameters(), server=server.addr, job=job, rank=0, world_size=1,
                              optimizer=torch.optim.SGD(model.parameters(), lr=0.1), **FAST) as opt:
        assert sorted(opt._names) == ["0.bias", "1.bias", "1.weight", "2.bias", "2.weight"]
        for _ in range(2):
            opt.zero_grad(set_to_none=True)
            model[1](model[0](torch.randn(4, 3))).sum().backward()  # model[2] unused
            assert torch.equal(model[2].weight.grad, torch.zeros(1, 1))
            opt.step()
        assert torch.equal(model[0].weight, frozen) and opt.version == 2


def _adamw_reference(model: torch.nn.Module, batches: List[torch.Tensor], warmup: int, lr: float = 0.01,
                     wd: float = 0.1, betas=(0.9, 0.99), eps: float = 1e-8) -> None:
    """AdamW for `warmup` steps, then with the second moment frozen and bias-corrected at the
    warm-up's last step (_momentum_adam's formula, written out)."""
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=wd, betas=betas, eps=eps)
    for t, x in enumerate(batches, 1):
        opt.zero_grad()
        (model(x) ** 2).mean().backward()
        if t <= warmup:
            opt.step()
            continue
        with torch.no_grad():
            for p in model.parameters():
                st = opt.state[p]
                st["exp_avg"].mul_(betas[0]).add_(p.grad, alpha=1 - betas[0])
                p.mul_(1 - lr * wd)
                denom = (st["exp_avg_sq"].sqrt() / (1 - betas[1] ** warmup) ** 0.5).add_(eps)
                p.addcdiv_(st["exp_avg"], denom, value=-lr / (1 - betas[0] ** t))


def test_compressed_adam_formula(server, job) -> None:
    # One rank, codec none, adam_warmup 3: three exact AdamW steps, then the momentum exchanged
    # and v frozen: the parameters of the formula in _momentum_adam, written out here.
    model, ref = linear_twins(7, 5, 3)
    batches = [torch.randn(4, 5) for _ in range(8)]
    _adamw_reference(ref, batches, warmup=3)
    inner = torch.optim.AdamW(model.parameters(), lr=0.01, weight_decay=0.1, betas=(0.9, 0.99))
    with DistributedOptimizer(model.named_parameters(), server=server.addr, job=job, rank=0, world_size=1,
                              optimizer=inner, adam_warmup=3, **FAST) as opt:
        assert len(opt.momentum_clients) == len(opt.clients) == 1
        # The momentum jobs start at 0 (a published copy of the parameters would reach a
        # compressed pull as momentum): init pulled their version 0.
        assert all(not m.any() for m in opt._momenta.values())
        for x in batches:
            opt.zero_grad()
            (model(x) ** 2).mean().backward()
            opt.step()
        assert opt.version == 8 and opt.clients[0].version == 3
        assert float(inner.state[model.weight]["frozen_step"]) == 3.0
        for p, q in zip(model.parameters(), ref.parameters()):
            assert torch.allclose(p, q, rtol=1e-6, atol=1e-7), (p - q).abs().max()


def test_compressed_adam_2bit_trains_identically_on_every_rank(server, job) -> None:
    # W = 4, 2bit pushes and pulls, AdamW on the workers: the warm-up exchanges exact gradients,
    # then the momentum goes 2bit; every rank ends with the same bits and the model learned.
    def worker(r: int) -> Dict[str, Any]:
        model = make_model(r)
        x, y = rank_data(r)
        inner = torch.optim.AdamW(model.parameters(), lr=0.01)
        losses = []
        with DistributedOptimizer(model.named_parameters(), server=server.addr, job=job, rank=r, world_size=4,
                                  optimizer=inner, codec="2bit", pull_codec="2bit", adam_warmup=5,
                                  bucket_cap_mb=1e-4, **FAST) as opt:
            assert opt.adam_warmup == 5 and len(opt.buckets) == len(opt.momentum_clients) == 2
            for _ in range(40):
                opt.zero_grad()
                loss = F.mse_loss(model(x), y)
                loss.backward()
                opt.step()
                losses.append(loss.item())
            pushed = sum(c.stats.bytes_pushed for c in opt.momentum_clients)
        return dict(params=[p.detach().clone() for p in model.parameters()], losses=losses, pushed=pushed)

    out = run_ranks(worker, 4, timeout=120)
    for o in out[1:]:
        for a, b in zip(o["params"], out[0]["params"]):
            assert torch.equal(a, b)
    assert out[0]["losses"][-1] < 0.2 * out[0]["losses"][0], out[0]["losses"]
    assert 0 < out[0]["pushed"]


def test_compressed_adam_refuses_a_clip_after_warmup_and_resumes(server, job) -> None:
    model = _mlp3()
    x = torch.randn(8, 64)
    saved = None
    with DistributedOptimizer(model.named_parameters(), server=server.addr, job=job, rank=0, world_size=1,
                              optimizer=torch.optim.Adam(model.parameters(), lr=1e-3), codec="2bit",
                              adam_warmup=2, **FAST) as opt:
        for step in range(4):
            opt.zero_grad()
            (model(x) ** 2).sum().backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1e-3)
            if step < 2:
                opt.step()  # the warm-up steps on the clipped mean, as under DDP
            else:
                with pytest.raises(RuntimeError, match="after the Adam warm-up"):
                    opt.step()
        saved = opt.state_dict()
    assert saved["gradagg"]["exchanges"] == 4 and len(saved["gradagg"]["workers"]) == 2
    with pytest.raises(TypeError, match="adam_warmup with this optimizer"):
        DistributedOptimizer(model.named_parameters(), server=server.addr, job=job + "-sgd", rank=0, world_size=1,
                             optimizer=torch.optim.SGD(model.parameters(), lr=0.1), adam_warmup=2, **FAST)
