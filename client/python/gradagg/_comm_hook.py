"""gradagg.torch.comm_hook: DDP's gradient buckets reduced through gradagg-server.

    state = gradagg.torch.CommHookState(server="gradagg:7070", job="j", rank=r, world_size=w,
                                        codec="2bit", pull_codec="2bit")
    ddp.register_comm_hook(state, gradagg.torch.comm_hook)

Each DDP bucket (its flat gradient buffer) is one tensor of a reduce-only job (optimizer
"reduce": every version the server publishes is the step's mean gradient), on lane k of `job`
for the k-th distinct bucket the hook sees (docs/sdk.md, "DDP comm hook"). The hook starts
the bucket's step (Client.step_start: encode with the bucket's codec and error feedback, push,
pull the mean) and returns a future that a waiter thread completes with the mean gradient, so
DDP goes on with backward meanwhile; the model's own optimizer then applies it, as with DDP's
all-reduce. With pull_codec "none", a bucket where any rank's gradient holds NaN or Inf comes
back NaN on every rank, so GradScaler skips the step everywhere (gradagg/_reduce_job.py: each
rank pushes its buffer / W, DDP's own division, and the server sums).
"""
# No `from __future__ import annotations`: DDP's register_comm_hook checks comm_hook's
# annotations as objects (dist.GradBucket, torch.futures.Future[torch.Tensor]).
import queue
import threading
from typing import Any, Dict, Optional, Tuple, Union

import torch
import torch.distributed as dist

from . import _reduce_job
from .client import Client, lane_job
from .launch import from_environment
from .options import DGC

#: Distinct buckets (index, size) one state may reduce: each is a lane of the job.
MAX_HOOK_BUCKETS = 16


class CommHookState:
    """The state of gradagg.torch.comm_hook for one rank: the server, the job and how buckets are
    sent. codec (threshold, auto_bits, ratio, dgc as in Client.add_tensor; a 2bit bucket without
    a threshold uses the automatic one) compresses each bucket's push; pull_codec its pull of the
    mean (pull_codec="2bit" without pull_threshold: the server's automatic threshold). Other
    keyword arguments go to every bucket's gradagg.Client (the job is sync, mean, optimizer
    "reduce"). momentum > 0 runs SGD momentum in the hook, before the encode (DGC's momentum
    correction without factor masking, dgc=DGC(momentum, factor_masking=False)): the mean the
    hook returns is then the mean of the ranks' momentum updates, and the model's optimizer must
    run without momentum (torch.optim.SGD(params, lr)). With a codec that keeps a residual this
    is what keeps training: momentum applied after the decode acts on sums that error feedback
    makes bursty (docs/benchmarks.md, "Training"). close() leaves the jobs; the state is also a
    context manager."""

    def __init__(self, server: Optional[str] = None, job: Optional[str] = None, rank: Optional[int] = None,
                 world_size: Optional[int] = None, *, codec: str = "none",
                 threshold: Union[float, str, None] = None, auto_bits: float = 1.5, ratio: Optional[float] = None,
                 momentum: float = 0.0, dgc: Optional[DGC] = None, pull_codec: str = "none",
                 **client_kwargs: Any) -> None:
        launch = from_environment(server, job, rank, world_size)
        server, job, rank, world_size = launch.server, launch.job, launch.rank, launch.world_size
        for k in (*_reduce_job.REFUSED_OPTIONS, "lanes"):
            if k in client_kwargs:
                raise TypeError(f"CommHookState: {k}= is fixed by the hook (a sync reduce job of one lane over a fixed "
                                "membership, as DDP's all-reduce)")
        if momentum:
            if dgc is not None:
                raise TypeError("CommHookState: give momentum or dgc, not both")
            dgc = DGC(momentum=momentum, factor_masking=False)
        if pull_codec == "2bit" and client_kwargs.get("pull_threshold") is None:
            client_kwargs["pull_threshold"] = "auto"
        self.server, self.job, self.rank, self.world_size = server, job, rank, world_size
        if threshold is None and codec == "2bit":
            threshold = "auto"
        self._tensor_options = dict(codec=codec, threshold=threshold, auto_bits=auto_bits, ratio=ratio, dgc=dgc)
        self._client_kwargs = dict(client_kwargs, pull_codec=pull_codec)
        #: (bucket index, elements) -> (its client, the tensor the mean gradient is pulled into)
        self.buckets: Dict[Tuple[int, int], Tuple[Client, torch.Tensor]] = {}
        #: Each bucket client's pulled non-finite flag (pull codecs that are not coarse).
        self._flags: Dict[Client, torch.Tensor] = {}
        self._waits: "queue.Queue[Optional[Tuple[Client, torch.Tensor, torch.futures.Future]]]" = queue.Queue()
        self._waiter = threading.Thread(target=self._wait_loop, name="gradagg-comm-hook", daemon=True)
        self._waiter.start()

    def _wait_loop(self) -> None:
        while True:
            item = self._waits.get()
            if item is None:
                return
            client, out, fut = item
            try:
                client.step_wait()
            except BaseException as e:  # noqa: BLE001 - DDP raises it from the future
                fut.set_exception(e)
            else:
                flag = self._flags.get(client)
                nonfinite = flag is not None and _reduce_job.pulled_nonfinite(flag)
                fut.set_result(torch.full_like(out, float("nan")) if nonfinite else out)

    def bucket(self, index: int, buffer: torch.Tensor) -> Tuple[Client, torch.Tensor]:
        """The client of DDP bucket `index` with `buffer`'s size, joined (and the job's initial
        zeros set) at its first use."""
        key = (index, buffer.numel())
        found = self.buckets.get(key)
        if found is not None:
            return found
        k = len(self.buckets)
        if k >= MAX_HOOK_BUCKETS:
            raise RuntimeError(f"gradagg comm hook: a {k + 1}th distinct DDP bucket (index {index}, {key[1]} "
                               f"elements); at most {MAX_HOOK_BUCKETS} (one lane each): give DDP a larger "
                               "bucket_cap_mb")
        out = torch.zeros(buffer.numel(), dtype=torch.float32, device=buffer.device)
        client = Client(self.server, lane_job(self.job, k), self.rank, self.world_size, optimizer="reduce",
                        mean=False, **self._client_kwargs)
        try:
            client.add_tensor(f"bucket{index}", out, **self._tensor_options)
            if _reduce_job.carries_flag(self._client_kwargs["pull_codec"]):
                self._flags[client] = torch.zeros(1)
                client.add_tensor(_reduce_job.FLAG_TENSOR, self._flags[client])
            client.init()
        except BaseException:
            client.close()
            raise
        self.buckets[key] = (client, out)
        return client, out

    def reduce(self, bucket: "dist.GradBucket") -> "torch.futures.Future[torch.Tensor]":
        """Starts the step of DDP bucket `bucket` and returns the future of its mean gradient."""
        buf = bucket.buffer()
        if buf.dtype != torch.float32:
            raise TypeError(f"gradagg comm hook: bucket {bucket.index()} is {buf.dtype}; gradagg reduces float32")
        client, out = self.bucket(bucket.index(), buf)
        fut: "torch.futures.Future[torch.Tensor]" = torch.futures.Future()
        client.step_start(_reduce_job.push_values([buf], self.world_size, client in self._flags))
        self._waits.put((client, out, fut))
        return fut

    def close(self) -> None:
        """Waits for the steps in flight and leaves every bucket's job."""
        if self._waiter.is_alive():
            self._waits.put(None)
            self._waiter.join()
        for client, _ in self.buckets.values():
            client.close()

    def __enter__(self) -> "CommHookState":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def comm_hook(state: CommHookState, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    """DDP communication hook (model.register_comm_hook(state, comm_hook)): starts the bucket's
    gradagg step and returns a future of the mean gradient over the ranks."""
    return state.reduce(bucket)
