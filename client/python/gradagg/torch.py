"""gradagg.torch: a torch.optim.Optimizer whose step runs through gradagg-server.

    opt = DistributedOptimizer(model.named_parameters(), server=addr, job="j", rank=r, world_size=w,
                               lr=0.1, momentum=0.9, codec="2bit", threshold=0.5)
    # under torchrun (or a Kubernetes indexed Job) with GRADAGG_SERVER set, server, job, rank and
    # world_size come from the environment (gradagg.launch):
    opt = DistributedOptimizer(model.named_parameters(), lr=0.1, momentum=0.9, codec="2bit")
    for x, y in data:
        opt.zero_grad(); loss_fn(model(x), y).backward(); opt.step()

Each float32 parameter is registered with the client as its own storage: param.data must be
contiguous (on the CPU, or on a CUDA device with a CUDA build), and must not be reassigned
afterwards, because the library writes every new parameter version into that memory in place.
A float16 or bfloat16 parameter trains through an fp32 master copy (opt.masters), which step()
rounds into it; its gradients are pushed as fp32. Under torch.autocast the parameters stay
float32, and so do their gradients.
The optimizer (SGD, or Adam/AdamW with optimizer=gradagg.Adam(...)) runs on the server. Its lr
may change from step to step (any torch.optim.lr_scheduler over this optimizer): each step's
pushes carry param_groups' lr, the same in every group, read when the step's first bucket is
sent. The other hyper-parameters are fixed for the job; changing one is refused rather than
silently ignored.

Overlap with backward: the parameters are grouped into buckets in backward order (the reverse
of their order here, DDP's bucket_cap_mb rule), one gradagg.Client each; a bucket's step starts
(Client.step_start) as soon as backward has produced its last gradient, so its push, the
server's step and its pull overlap the rest of backward, and step() waits for what is in
flight. Gradient accumulation therefore runs the earlier backward passes inside opt.no_sync(),
as with DDP.

DDP users can keep DDP and their optimizer instead:
ddp.register_comm_hook(CommHookState(server, job, rank, world_size, codec=...), comm_hook)
reduces each DDP bucket through gradagg (gradagg/_comm_hook.py; with a codec that keeps a
residual, give the hook momentum= and the optimizer none).
"""
from __future__ import annotations

import contextlib
from typing import Any, Callable, Dict, Iterable, Iterator, List, Optional, Set, Tuple, Union

import torch

from ._comm_hook import CommHookState, comm_hook
from .client import Client, codec_has_residual, failure_text, lane_job
from .launch import from_environment
from .options import DGC, SGD, Adam

__all__ = ["DistributedOptimizer", "CommHookState", "comm_hook", "bucket_plan", "MAX_BUCKETS", "TOPK_TRAINING"]

CodecFor = Callable[[str, torch.Tensor], Optional[str]]

#: topk's push settings when no ratio is given (and no dgc): 10% of the elements, fp16 values,
#: varint gaps (~2.4 bits per element). The codec's own default, ratio 0.001, and 0.01 do not reach
#: DDP's loss in PowerSGD's number of iterations (docs/benchmarks.md, "Training"); 0.1 does.
TOPK_TRAINING: Dict[str, Any] = dict(ratio=0.1, topk_values="fp16", topk_indices="varint")

#: Buckets an optimizer may keep: bucket k is lane k of the job (docs/protocol.md, "Lanes").
MAX_BUCKETS = 16


def bucket_plan(sizes: List[int], cap_bytes: int) -> List[List[int]]:
    """The buckets of parameters of sizes[i] bytes (in registration order): indices in backward
    order (the reverse), a bucket closing once it holds at least cap_bytes (DDP's rule), the cap
    doubled until there are at most MAX_BUCKETS. cap_bytes 0: one bucket."""
    order = list(range(len(sizes) - 1, -1, -1))
    cap = cap_bytes
    while True:
        out: List[List[int]] = [[]]
        held = 0
        for i in order:
            if cap and out[-1] and held >= cap:
                out.append([])
                held = 0
            out[-1].append(i)
            held += sizes[i]
        if len(out) <= MAX_BUCKETS:
            return out
        cap *= 2


def _named(params: Iterable[Any]) -> List[Tuple[str, torch.Tensor]]:
    out: List[Tuple[str, torch.Tensor]] = []
    for i, p in enumerate(params):
        if isinstance(p, tuple) and len(p) == 2 and isinstance(p[0], str):
            out.append((p[0], p[1]))
        elif isinstance(p, torch.Tensor):
            out.append((f"param{i}", p))
        else:
            raise TypeError(f"params[{i}]: expected a tensor or a (name, tensor) pair, got {type(p).__name__}")
    if not out:
        raise ValueError("DistributedOptimizer: no parameters")
    return out


def _server_optimizer(optimizer: Union[SGD, Adam, None], lr: Optional[float], momentum: float,
                      weight_decay: float, nesterov: bool, dgc: Optional[DGC]) -> Union[SGD, Adam]:
    """The job's server-side optimizer: `optimizer` as given, else SGD from the arguments."""
    if optimizer is None:
        if lr is None:
            raise TypeError("DistributedOptimizer: give lr (SGD on the server) or optimizer=gradagg.Adam(...)")
        # DGC carries the momentum on the worker: the server must not add it a second time.
        return SGD(lr=lr, momentum=0.0 if dgc else momentum, weight_decay=weight_decay,
                   nesterov=False if dgc else nesterov)
    if not isinstance(optimizer, (SGD, Adam)):
        raise TypeError(f"optimizer: {type(optimizer).__name__}, expected gradagg.SGD or gradagg.Adam")
    given = [n for n, v, d in (("lr", lr, None), ("momentum", momentum, 0.0), ("weight_decay", weight_decay, 0.0),
                               ("nesterov", nesterov, False)) if v != d]
    if given:
        raise TypeError(f"DistributedOptimizer: {', '.join(given)} given with optimizer=; set them in the "
                        f"{type(optimizer).__name__} instead")
    if dgc and isinstance(optimizer, Adam):
        raise ValueError("dgc runs SGD momentum on the worker; it cannot be combined with a server-side Adam")
    if dgc and optimizer.momentum != 0.0:
        raise ValueError("dgc runs the momentum on the worker: the server's SGD must have momentum 0")
    return optimizer


class DistributedOptimizer(torch.optim.Optimizer):
    """Data-parallel SGD through gradagg-server: step() pushes every parameter's gradient
    (compressed with `codec`) and writes the new parameters into the model in place.

    params: model.named_parameters() (names become the server's tensor names and must match
    across ranks), or plain tensors (named param0, param1, ...).
    lr, momentum, weight_decay, nesterov: SGD on the server. optimizer=gradagg.Adam(...) (Adam,
    AdamW with decoupled=True) or gradagg.SGD(...) names the server's optimizer instead; lr and
    the SGD arguments are then left out. With dgc the momentum runs on the worker instead (DGC
    momentum correction, REFERENCE.md) and the server runs SGD with momentum 0; dgc=True means
    DGC(momentum=momentum, nesterov=nesterov, warmup_epochs=4).
    codec, threshold ("auto" for the automatic 2bit threshold, auto_bits its budget; a 2bit
    tensor without a threshold gets "auto"), ratio (topk without a ratio and without dgc:
    TOPK_TRAINING, 10% with fp16 values and varint indices): how gradients are pushed; codec_for(name,
    param) may return another codec for a parameter (e.g. "none" for small biases), None for the
    default. pull_codec and **client_kwargs go to gradagg.Client (mean, mode, deadline_ms,
    chunk_bytes, auth_token, pull_threshold, ...); pull_codec="2bit" without a pull_threshold
    gets the server's automatic one (pull_threshold="auto", 1.5 bits per element).
    Momentum with a codec that keeps a residual (2bit, 1bit, 1bit_scaled, topk): when any
    parameter uses one and neither dgc nor optimizer= is given, momentum and weight decay run on
    the worker before the encode (DGC's momentum correction, without factor masking or warm-up)
    and the server runs plain SGD. Momentum on the server would act on sums that error feedback
    makes bursty (an element is sent only every few steps, then all at once), and a burst
    multiplied by the momentum's 1 / (1 - momentum) overshoots; on the worker it acts on the
    gradients themselves, so the same update is what gets compressed. optimizer=gradagg.SGD(lr,
    momentum=m) keeps the momentum on the server.
    A parameter whose .grad is None pushes zeros. float16 / bfloat16 parameters: see the module
    docstring (fp32 masters).
    overlap (default True): each bucket of about bucket_cap_mb MB (default 5: smaller than DDP's
    25, since a gradagg bucket costs one push and one pull, not a ring; backward order, DDP's rule; at
    most MAX_BUCKETS, the cap grows to fit) is its own gradagg.Client on lane k of the job
    (bucket 0: the job itself) and starts its step as soon as backward produced its gradients;
    step() starts the buckets backward did not complete (unused parameters) and waits for all.
    Backward passes before the last one of an accumulated step run inside opt.no_sync(); a
    second backward into a bucket already sent raises RuntimeError. With several buckets the
    lanes= client argument is refused (the buckets are the lanes). overlap=False: one client,
    step() pushes everything.
    """

    def __init__(self, params: Iterable[Any], *, server: Optional[str] = None, job: Optional[str] = None,
                 rank: Union[int, str, None] = None, world_size: Optional[int] = None, lr: Optional[float] = None,
                 momentum: float = 0.0, weight_decay: float = 0.0, nesterov: bool = False,
                 codec: str = "none", threshold: Union[float, str, None] = None, auto_bits: float = 1.5,
                 ratio: Optional[float] = None, dgc: Union[bool, DGC] = False, pull_codec: str = "none",
                 codec_for: Optional[CodecFor] = None, optimizer: Union[SGD, Adam, None] = None,
                 overlap: bool = True, bucket_cap_mb: float = 5.0, **client_kwargs: Any) -> None:
        launch = from_environment(server, job, rank, world_size)  # rank "any": an elastic job's server picks it
        server, job, rank, world_size = launch.server, launch.job, launch.rank, launch.world_size
        named = _named(params)
        #: fp32 master values of the float16 / bfloat16 parameters, by parameter index: the
        #: library trains these, and each step rounds them into the model's parameters.
        self.masters: Dict[int, torch.Tensor] = {}
        for i, (name, p) in enumerate(named):
            if p.dtype in (torch.float16, torch.bfloat16):
                self.masters[i] = p.detach().to(torch.float32, memory_format=torch.contiguous_format).clone()
            elif p.dtype != torch.float32:
                raise TypeError(f"parameter {name!r}: dtype {p.dtype}; gradagg trains float32, float16 and "
                                "bfloat16 parameters")
            elif not p.is_contiguous():
                raise ValueError(f"parameter {name!r}: not contiguous; the library writes into its storage")
        if dgc is True:
            dgc_opt: Optional[DGC] = DGC(momentum=momentum, nesterov=nesterov, warmup_epochs=4)
        elif dgc is False or dgc is None:
            dgc_opt = None
        elif isinstance(dgc, DGC):
            dgc_opt = dgc
        else:
            raise TypeError(f"dgc: {type(dgc).__name__}, expected bool or gradagg.DGC")
        codecs = [(codec_for(name, p) if codec_for else None) or codec for name, p in named]
        self._worker_weight_decay = 0.0
        if dgc_opt is None and optimizer is None and momentum and any(codec_has_residual(c) for c in codecs):
            dgc_opt = DGC(momentum=momentum, nesterov=nesterov, factor_masking=False)
            self._worker_weight_decay, weight_decay = weight_decay, 0.0
        server_opt = _server_optimizer(optimizer, lr, momentum, weight_decay, nesterov, dgc_opt)
        #: The job's server-side optimizer (gradagg.SGD or gradagg.Adam), as sent to the server.
        self.server_optimizer = server_opt
        #: Where SGD momentum runs: "worker" (DGC momentum correction before the encode) or "server".
        self.momentum_on = "worker" if dgc_opt and dgc_opt.momentum else "server"
        lr = server_opt.lr
        defaults = dict(lr=lr, momentum=momentum, weight_decay=weight_decay + self._worker_weight_decay,
                        nesterov=nesterov)
        super().__init__([p for _, p in named], defaults)
        self._names = [n for n, _ in named]
        self._hyper = {k: defaults[k] for k in ("momentum", "weight_decay", "nesterov")}
        self._job = job
        self._step_lr: Optional[float] = None  # the lr the current step's buckets carry
        self._zeros: Dict[int, torch.Tensor] = {}
        if pull_codec == "2bit" and client_kwargs.get("pull_threshold") is None:
            client_kwargs["pull_threshold"] = "auto"
        if bucket_cap_mb < 0:
            raise ValueError(f"bucket_cap_mb: {bucket_cap_mb}, expected >= 0")
        cap = int(bucket_cap_mb * (1 << 20)) if overlap else 0
        #: The parameter indices of each bucket, in backward order (bucket k: clients[k]).
        self.buckets = bucket_plan([p.numel() * 4 for _, p in named], cap)
        if len(self.buckets) > 1 and client_kwargs.get("lanes", 1) not in (0, 1):
            raise ValueError(f"lanes={client_kwargs['lanes']} with {len(self.buckets)} buckets: the buckets are the "
                             "job's lanes; give overlap=False (or a larger bucket_cap_mb) to use lanes")
        #: One gradagg.Client per bucket.
        self.clients: List[Client] = []
        try:
            for k, bucket in enumerate(self.buckets):
                client = Client(server, lane_job(job, k), rank, world_size, optimizer=server_opt,
                                pull_codec=pull_codec, **client_kwargs)
                rank = client.rank  # the rank an elastic job's server picked: every bucket's job the same
                self.clients.append(client)
                for i in bucket:
                    name, p = named[i]
                    p = self.masters.get(i, p)
                    c = codecs[i]
                    thr = threshold if c == codec else None
                    sparse: Dict[str, Any] = dict(ratio=ratio if c == codec else None)
                    if c == "topk" and sparse["ratio"] is None and not dgc:
                        sparse = TOPK_TRAINING
                    client.add_tensor(name, p, codec=c, threshold="auto" if thr is None and c == "2bit" else thr,
                                      auto_bits=auto_bits, dgc=dgc_opt, **sparse)
                with torch.no_grad():
                    client.init()
            self._round_masters()
        except BaseException:
            self.close()
            raise
        self._bucket_of = {i: k for k, bucket in enumerate(self.buckets) for i in bucket}
        self._ready: List[Set[int]] = [set() for _ in self.buckets]
        self._started = [False] * len(self.buckets)
        self._client_lr = [float(lr)] * len(self.buckets)  # what each client's pushes carry
        self._sync = True
        self._hooks: List[Tuple[Any, Any]] = []  # (AccumulateGrad node, its hook's handle)
        if overlap:
            self._hook_accumulators([p for _, p in named])

    @property
    def rank(self) -> int:
        """The rank this optimizer trains as (the server's pick for rank="any")."""
        return self.clients[0].rank

    @property
    def version(self) -> int:
        """The parameter version the model holds: the steps the job has applied. A worker that
        joins a running (elastic) job starts from it: its data position and LR schedule."""
        return min(c.version for c in self.clients)

    @property
    def client(self) -> Client:
        """The client, when there is one bucket (overlap=False, or a model within bucket_cap_mb);
        else see clients."""
        if len(self.clients) != 1:
            raise RuntimeError(f"{len(self.clients)} buckets, one client each: use opt.clients")
        return self.clients[0]

    @property
    def buckets_in_flight(self) -> int:
        """Buckets whose step has started and that step() has not yet waited for: after a
        backward pass with overlap, every bucket whose gradients it produced."""
        return sum(self._started)

    def _hook_accumulators(self, params: List[torch.Tensor]) -> None:
        # The hook of each parameter's AccumulateGrad node runs once .grad holds this backward's
        # gradient (DDP and Horovod hook the same node). The nodes are kept: a hook lives with it.
        for i, p in enumerate(params):
            if not p.requires_grad:
                continue
            acc = p.expand_as(p).grad_fn.next_functions[0][0]  # type: ignore[union-attr]
            self._hooks.append((acc, acc.register_hook(self._make_hook(i))))

    def _make_hook(self, i: int) -> Callable[..., None]:
        def hook(*_: Any) -> None:
            if not self._sync:
                return
            k = self._bucket_of[i]
            if self._started[k]:
                raise RuntimeError(f"a second backward into bucket {k} (parameter {self._names[i]!r}) after its "
                                   "step started: run the earlier backward passes of an accumulated step inside "
                                   "opt.no_sync()")
            self._ready[k].add(i)
            if len(self._ready[k]) == len(self.buckets[k]):
                self._start(k)
        return hook

    @contextlib.contextmanager
    def no_sync(self) -> Iterator[None]:
        """Backward passes inside accumulate into .grad without starting any push (DDP's no_sync);
        the backward after it, or step(), sends the sum."""
        old, self._sync = self._sync, False
        try:
            yield
        finally:
            self._sync = old

    def _grad(self, i: int, p: torch.Tensor) -> torch.Tensor:
        g = p.grad
        if g is None:
            z = self._zeros.get(i)
            if z is None:
                z = self._zeros[i] = torch.zeros_like(p, memory_format=torch.contiguous_format)
            g = z
        elif g.is_sparse:
            g = g.to_dense()
        g = g.detach().to(torch.float32)
        if self._worker_weight_decay:
            g = g + self._worker_weight_decay * p.detach()
        return g.contiguous()

    @torch.no_grad()
    def _round_masters(self) -> None:
        """The model's float16 / bfloat16 parameters from their fp32 masters."""
        params = self._params()
        for i, master in self.masters.items():
            params[i].copy_(master)

    def _lr_now(self) -> float:
        """The lr of param_groups (an LR scheduler's), the same in every group; the other
        hyper-parameters as given."""
        lrs = {g["lr"] for g in self.param_groups}
        if len(lrs) != 1:
            raise ValueError(f"param groups with lrs {sorted(lrs)}: a gradagg job has one learning rate")
        for g in self.param_groups:
            for key, was in self._hyper.items():
                if g[key] != was:
                    raise RuntimeError(f"{key} changed to {g[key]} (was {was}): only the lr may change during "
                                       "training (OneCycleLR: give cycle_momentum=False)")
        return float(lrs.pop())

    @torch.no_grad()
    def _start(self, k: int) -> None:
        lr = self._lr_now()
        if self._step_lr is None:
            self._step_lr = lr
        elif lr != self._step_lr:
            raise RuntimeError(f"lr changed to {lr} (was {self._step_lr}) after this step's first bucket was sent: "
                               "change it after opt.step() (scheduler.step()), not between backward and step()")
        if self._client_lr[k] != lr:
            self.clients[k].set_lr(lr)
            self._client_lr[k] = lr
        params = self._params()
        self.clients[k].step_start([self._grad(i, params[i]) for i in self.buckets[k]])
        self._started[k] = True

    def _params(self) -> List[torch.Tensor]:
        return [p for group in self.param_groups for p in group["params"]]

    @torch.no_grad()
    def step(self, closure: Optional[Callable[[], Any]] = None) -> Any:  # type: ignore[override]
        """Pushes every gradient and writes the new parameters into the model. closure, when
        given, re-evaluates the model and returns the loss (as in torch.optim)."""
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        failure: Optional[BaseException] = None
        try:
            for k in range(len(self.buckets)):
                if not self._started[k]:
                    self._start(k)
        except BaseException as e:  # the buckets already in flight are waited for first
            failure = e
        for client in self.clients:
            try:
                client.step_wait()
            except BaseException as e:  # the others still run: wait for them first
                failure = failure or e
        self._ready = [set() for _ in self.buckets]
        self._started = [False] * len(self.buckets)
        self._step_lr = None
        self._round_masters()
        if failure is not None:
            raise failure
        return loss

    def state_dict(self) -> Dict[str, Any]:
        """torch.optim's state_dict (param_groups, so the lr a scheduler set) and, under
        "gradagg", the job and each bucket client's own training state (Client.state: residuals,
        DGC momentum, late gradients, epoch). The parameters and the optimizer's state live on
        the server, which keeps them. Take it after step()."""
        saved = super().state_dict()
        saved["gradagg"] = dict(job=self._job, buckets=[list(b) for b in self.buckets],
                                workers=[c.state() for c in self.clients])
        return saved

    def load_state_dict(self, state_dict: Dict[str, Any]) -> None:
        """Takes over a state_dict() of this rank's optimizer of the same job and model (a
        resumed training script, after this optimizer joined and pulled the job's parameters;
        create it with resume=True, else a job whose ranks all left is started afresh):
        param_groups' lr and every bucket client's state. ValueError when it does not fit."""
        own = state_dict.get("gradagg")
        if not isinstance(own, dict):
            raise ValueError("not a gradagg DistributedOptimizer state_dict (no 'gradagg' entry)")
        if own["job"] != self._job:
            raise ValueError(f"state_dict of job {own['job']!r}, this optimizer trains {self._job!r}")
        if own["buckets"] != [list(b) for b in self.buckets]:
            raise ValueError(f"state_dict with buckets {own['buckets']}, this optimizer has {self.buckets} "
                             "(give the same model and bucket_cap_mb)")
        for g in state_dict["param_groups"]:
            for key, was in self._hyper.items():
                if g[key] != was:
                    raise ValueError(f"state_dict with {key} {g[key]}, the job's is {was}")
        super().load_state_dict({k: v for k, v in state_dict.items() if k != "gradagg"})
        for client, state in zip(self.clients, own["workers"]):
            client.load_state(state)

    def set_epoch(self, epoch: int) -> None:
        """Starts epoch `epoch` (0-based) for the DGC warm-up."""
        for client in self.clients:
            client.set_epoch(epoch)

    def close(self, failure: Optional[str] = None) -> None:
        """Leaves the job; the model keeps the last parameters pulled. Backward passes after it
        no longer reach this optimizer. failure: this rank failed, as gradagg.Client.close
        takes it (leaving a ``with`` block by an exception passes the exception)."""
        for _, handle in getattr(self, "_hooks", []):
            handle.remove()
        self._hooks = []
        for client in getattr(self, "clients", []):
            client.close(failure)

    def __enter__(self) -> "DistributedOptimizer":
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        self.close(failure_text(exc) if exc is not None else None)
