"""Workers of examples/straggler_study.py: the digits MLP trained through gradagg by processes
that may be slow (a sleep per step, the straggler), may join a running elastic job late and leave
it early. Each worker is one process (multiprocessing, spawn) and reports one Report."""
from __future__ import annotations

import random
import time
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple

from . import data


@dataclass(frozen=True)
class Mode:
    """How the job treats a straggler: the DistributedOptimizer / Client arguments that differ."""
    name: str
    mode: str = "sync"
    staleness: int = 0
    deadline_ms: int = 0
    quorum: int = 0
    lr_scale: float = 1.0  # async applies every push alone: lr / W keeps one round's step size


@dataclass(frozen=True)
class Spec:
    server: str
    job: str
    rank: Any               # int, or "any" (an elastic job)
    world: int              # the job's ranks (elastic: the most)
    mode: Mode
    seed: int = 0
    lr: float = 0.05
    momentum: float = 0.9
    batch: int = 64         # global batch; each rank takes its 1/world of it
    step_sleep: float = 0.0  # seconds of simulated work per step (the straggler's is larger)
    jitter: bool = False    # each step's work uniform in [0, 2 x step_sleep] instead (seeded by rank)
    seconds: float = 0.0    # stop after this long (0: no time limit)
    until_version: int = 0  # stop once the job reached this version (0: no limit)
    min_world: int = 0      # > 0: an elastic job
    eval_every_s: float = 0.0  # > 0: evaluate the training loss this often (the curve)
    tag: str = ""           # the coordinator's name for this worker, echoed in its Report
    codec: str = "none"     # how the worker pushes: a codec name, "2bit:auto" or "topk:<ratio>"


@dataclass
class Report:
    rank: int
    tag: str = ""
    steps: int = 0
    version: int = 0
    seconds: float = 0.0
    first_version: int = 0
    curve: List[Tuple[float, int, float]] = field(default_factory=list)  # (seconds, version, train loss)
    test_acc: float = 0.0
    error: Optional[str] = None


def run(spec: Spec, results: Any, go: Any = None) -> None:
    """Trains spec's job as spec.rank; puts its Report on results. go: an event to wait for
    after the imports, so the coordinator decides when the worker joins, not its start-up."""
    import traceback
    try:
        import torch  # noqa: F401 - imported before the wait: joining then takes milliseconds
        import gradagg  # noqa: F401
        if go is not None:
            go.wait()
        results.put(_train(spec))
    except BaseException:  # noqa: BLE001 - the coordinator reports it
        results.put(Report(rank=-1, error=traceback.format_exc()))


def _train(spec: Spec) -> Report:
    import torch
    import gradagg
    from gradagg.torch import DistributedOptimizer

    from . import model as mdl
    torch.set_num_threads(1)
    digits = data.load()
    x_tr, y_tr = torch.from_numpy(digits.x_train), torch.from_numpy(digits.y_train)
    x_te, y_te = torch.from_numpy(digits.x_test), torch.from_numpy(digits.y_test)
    net = mdl.build(spec.seed)
    m = spec.mode
    kwargs: Dict[str, Any] = dict(mode=m.mode, staleness=m.staleness, deadline_ms=m.deadline_ms, quorum=m.quorum)
    name, _, param = spec.codec.partition(":")
    kwargs["codec"] = name
    if param:
        kwargs["threshold" if name == "2bit" else "ratio"] = param if param == "auto" else float(param)
    if spec.min_world:
        kwargs["min_world_size"] = spec.min_world
    opt = DistributedOptimizer(net.named_parameters(), server=spec.server, job=spec.job, rank=spec.rank,
                               world_size=spec.world, overlap=False, threads=1, step_timeout_ms=120_000,
                               optimizer=gradagg.SGD(lr=spec.lr * m.lr_scale, momentum=spec.momentum), **kwargs)
    per_epoch = len(data.epoch_batches(len(y_tr), spec.batch, spec.seed, 0))
    out = Report(rank=opt.rank, tag=spec.tag, first_version=opt.version)
    t0 = next_eval = time.monotonic()
    own = 0  # this worker's steps: the batch sequence of an async worker
    rng = random.Random(1000 * spec.seed + out.rank)
    with opt:
        while True:
            now = time.monotonic()
            if spec.eval_every_s and now >= next_eval:
                out.curve.append((now - t0, opt.version, mdl.evaluate(net, x_tr, y_tr)[0]))
                next_eval += spec.eval_every_s
            out_of_time = spec.seconds and now - t0 >= spec.seconds
            if out_of_time or (spec.until_version and opt.version >= spec.until_version):
                break
            t = own if m.mode == "async" else opt.version
            idx = data.epoch_batches(len(y_tr), spec.batch, spec.seed, t // per_epoch)[t % per_epoch]
            mine = torch.from_numpy(data.shard(idx, out.rank, spec.world))
            opt.zero_grad()
            torch.nn.functional.cross_entropy(net(x_tr[mine]), y_tr[mine]).backward()
            if spec.step_sleep:
                time.sleep(spec.step_sleep * (rng.uniform(0.0, 2.0) if spec.jitter else 1.0))
            opt.step()
            own += 1
        out.steps, out.version, out.seconds = own, opt.version, time.monotonic() - t0
    out.test_acc = mdl.evaluate(net, x_te, y_te)[1]
    if spec.eval_every_s:
        out.curve.append((out.seconds, out.version, mdl.evaluate(net, x_tr, y_tr)[0]))
    return out
