"""One training worker: a process that holds one rank, takes jobs from its queue and trains the
digits MLP through gradagg (gradagg.torch.DistributedOptimizer) on its quarter of every global
batch. Rank 0 also evaluates the model after each epoch and reports it."""
from __future__ import annotations

import math
import time
import traceback
from dataclasses import dataclass, field
from typing import Any, Callable, List, Optional, Tuple, Union

from . import data


@dataclass(frozen=True)
class Compression:
    """How gradients are pushed: the arguments of DistributedOptimizer that differ per config."""
    name: str                                  # label in tables and plots
    codec: str = "none"
    threshold: Union[float, str, None] = None  # 2bit/1bit threshold, or "auto"
    auto_bits: float = 1.0                     # bits per element of the automatic threshold
    ratio: Optional[float] = None              # topk keep ratio
    dgc: bool = False                          # DGC momentum correction (worker momentum, factor masking)
    warmup_epochs: int = 4                     # DGC's keep-ratio warm-up
    dense_1d: bool = False                     # 1-d tensors (biases) uncompressed, as the DGC paper


@dataclass(frozen=True)
class Training:
    """What every config shares: model, optimizer (SGD with momentum, on the server but with DGC), schedule."""
    hidden: Tuple[int, ...] = (128,)
    lr: float = 0.05
    momentum: float = 0.9
    epochs: int = 30
    batch: int = 64           # global batch; each of the world_size workers takes batch/world_size
    world_size: int = 4


@dataclass(frozen=True)
class Task:
    """One job: a config and a seed (the seed draws the initial weights and the batch order)."""
    job: str
    server: str
    seed: int
    compression: Compression
    training: Training


@dataclass
class Outcome:
    """What one rank reports when a job ends. Curves (rank 0 only) are per epoch, after it."""
    rank: int
    steps: int = 0
    bytes_pushed: int = 0        # payload bytes this rank pushed, all steps
    bytes_pulled: int = 0
    last_epoch_pushed: int = 0   # the same, last epoch only (DGC's ratio is final by then)
    last_epoch_steps: int = 0
    seconds: float = 0.0
    train_loss: List[float] = field(default_factory=list)
    test_loss: List[float] = field(default_factory=list)
    test_acc: List[float] = field(default_factory=list)
    # 2bit/1bit, per epoch: each tensor's [threshold, density] of the epoch's last push
    thresholds: List[List[List[float]]] = field(default_factory=list)


def _threshold(client: Any, index: int) -> List[float]:
    from gradagg import GradaggError
    try:
        return [float(v) for v in client.threshold(index)]
    except (NotImplementedError, GradaggError):  # a library without the call; a codec without one
        return [math.nan, math.nan]


def train(task: Task, rank: int, digits: data.Digits,
          on_epoch: Optional[Callable[[int, float, float], None]] = None) -> Outcome:
    """Trains task's job as `rank` and returns what it measured. on_epoch(epoch, train_loss,
    test_acc) is called on rank 0 after each epoch."""
    import torch
    from gradagg import DGC, SGD
    from gradagg.torch import DistributedOptimizer

    from . import model as mdl

    tr, comp = task.training, task.compression
    net = mdl.build(task.seed, tr.hidden)
    x_tr, y_tr = torch.from_numpy(digits.x_train), torch.from_numpy(digits.y_train)
    x_te, y_te = torch.from_numpy(digits.x_test), torch.from_numpy(digits.y_test)
    out = Outcome(rank)
    t0 = time.monotonic()
    opt = DistributedOptimizer(
        net.named_parameters(), server=task.server, job=task.job, rank=rank, world_size=tr.world_size,
        codec=comp.codec, threshold=comp.threshold, auto_bits=comp.auto_bits, ratio=comp.ratio,
        # The study (docs/convergence.md) runs the momentum on the server, DGC's on the worker.
        **(dict(lr=tr.lr, momentum=tr.momentum, dgc=DGC(momentum=tr.momentum, warmup_epochs=comp.warmup_epochs))
           if comp.dgc else dict(optimizer=SGD(lr=tr.lr, momentum=tr.momentum))),
        codec_for=(lambda name, p: "none" if p.dim() == 1 else None) if comp.dense_1d else None,
        threads=1, step_timeout_ms=120_000)
    with opt:
        for epoch in range(tr.epochs):
            opt.set_epoch(epoch)
            pushed0 = out.bytes_pushed
            batches = data.epoch_batches(len(y_tr), tr.batch, task.seed, epoch)
            for idx in batches:
                mine = torch.from_numpy(data.shard(idx, rank, tr.world_size))
                opt.zero_grad()
                torch.nn.functional.cross_entropy(net(x_tr[mine]), y_tr[mine]).backward()
                opt.step()
                s = opt.client.stats
                out.bytes_pushed += s.bytes_pushed
                out.bytes_pulled += s.bytes_pulled
                out.steps += 1
            out.last_epoch_pushed = out.bytes_pushed - pushed0
            out.last_epoch_steps = len(batches)
            if rank == 0:
                train_loss, _ = mdl.evaluate(net, x_tr, y_tr)
                test_loss, test_acc = mdl.evaluate(net, x_te, y_te)
                out.train_loss.append(train_loss)
                out.test_loss.append(test_loss)
                out.test_acc.append(test_acc)
                if comp.codec in ("2bit", "1bit"):
                    out.thresholds.append([_threshold(opt.client, i) for i in range(len(opt.client.tensors))])
                if on_epoch:
                    on_epoch(epoch, train_loss, test_acc)
    out.seconds = time.monotonic() - t0
    return out


def serve(rank: int, tasks: Any, results: Any) -> None:
    """A worker process's loop: trains each Task from `tasks` as `rank` until None arrives.
    Puts ("epoch", rank, job, (epoch, loss, acc)) after each epoch on rank 0, then
    ("done", rank, job, Outcome) or ("error", rank, job, traceback text) on `results`."""
    import signal

    import torch
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # ^C is the coordinator's: it terminates the ranks
    torch.set_num_threads(1)  # 4 workers and the server share 2 cores
    digits = data.load()
    while True:
        task = tasks.get()
        if task is None:
            return
        def report(epoch: int, loss: float, acc: float, job: str = task.job) -> None:
            results.put(("epoch", rank, job, (epoch, loss, acc)))
        try:
            results.put(("done", rank, task.job, train(task, rank, digits, report if rank == 0 else None)))
        except BaseException:  # noqa: BLE001 - the coordinator decides; the text says what failed
            results.put(("error", rank, task.job, traceback.format_exc()))
