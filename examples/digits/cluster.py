"""The coordinator's side of the workers: W long-lived worker processes (spawned once, so torch
is imported once per rank, not once per job) that train one job at a time together."""
from __future__ import annotations

import multiprocessing as mp
import queue
import time
from typing import Callable, List, Optional

from . import worker


class JobError(RuntimeError):
    """A rank failed, died, or the job ran past its time limit."""


class Workers:
    """world_size worker processes (digits.worker.serve); a context manager that stops them."""

    def __init__(self, world_size: int) -> None:
        ctx = mp.get_context("spawn")  # no fork of a process that may hold threads
        self.results = ctx.Queue()
        self.queues = [ctx.Queue() for _ in range(world_size)]
        self.procs = [ctx.Process(target=worker.serve, args=(r, q, self.results), daemon=True, name=f"rank{r}")
                      for r, q in enumerate(self.queues)]
        for p in self.procs:
            p.start()

    def run(self, task: worker.Task, on_epoch: Optional[Callable[[int, float, float], None]] = None,
            timeout_s: float = 600.0) -> List[worker.Outcome]:
        """Trains task on every rank; returns each rank's Outcome (index = rank). on_epoch gets
        rank 0's (epoch, train loss, test accuracy). Raises JobError on any failure, after
        which this pool is unusable (close it)."""
        for q in self.queues:
            q.put(task)
        done: List[Optional[worker.Outcome]] = [None] * len(self.procs)
        deadline = time.monotonic() + timeout_s
        while any(o is None for o in done):
            try:
                kind, rank, job, body = self.results.get(timeout=0.5)
            except queue.Empty:
                dead = [p.name for p in self.procs if not p.is_alive()]
                if dead:
                    raise JobError(f"job {task.job}: worker {', '.join(dead)} died") from None
                if time.monotonic() > deadline:
                    raise JobError(f"job {task.job}: not done after {timeout_s:.0f} s") from None
                continue
            if job != task.job:
                continue
            if kind == "error":
                raise JobError(f"job {task.job}: rank {rank} failed:\n{body}")
            if kind == "epoch" and on_epoch:
                on_epoch(*body)
            elif kind == "done":
                done[rank] = body
        return done  # type: ignore[return-value]

    def close(self) -> None:
        """Asks every worker to stop, then terminates the ones that do not (a failed job leaves
        ranks blocked in a step)."""
        for q in self.queues:
            try:
                q.put(None)
            except (ValueError, OSError):
                pass
        for p in self.procs:
            p.join(timeout=5)
            if p.is_alive():
                p.terminate()
                p.join(timeout=5)

    def __enter__(self) -> "Workers":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
