"""gradagg.torch: a torch.optim.Optimizer whose step runs through gradagg-server.

    # The optimizer on the workers, over the mean gradient (DDP's semantics: param groups,
    # clip_grad_norm_, GradScaler, any scheduler, as under DDP):
    opt = DistributedOptimizer(model.named_parameters(), optimizer=torch.optim.AdamW(groups, lr=3e-4),
                               server=addr, job="j", rank=r, world_size=w)
    # The optimizer on the server (SGD, or gradagg.Adam), parameters pulled, compressed both ways:
    opt = DistributedOptimizer(model.named_parameters(), server=addr, job="j", rank=r, world_size=w,
                               lr=0.1, momentum=0.9, codec="2bit", pull_codec="2bit")
    # under torchrun (or a Kubernetes indexed Job) with GRADAGG_SERVER set, server, job, rank and
    # world_size come from the environment (gradagg.launch).
    for x, y in data:
        opt.zero_grad(); loss_fn(model(x), y).backward(); opt.step()

Two places for the optimizer (docs/sdk.md, "DistributedOptimizer"):

- optimizer=<a torch.optim.Optimizer> (worker-side): the server reduces only (a reduce job per
  bucket); backward() returns once every parameter's .grad holds the mean gradient over the
  ranks, as with DDP, so whatever runs between backward() and step() (clip_grad_norm_,
  GradScaler.unscale_, gradient checks) sees what it sees under DDP, and step() runs the given
  optimizer. Rank 0's parameters are every rank's at the start (a fresh job), as DDP broadcasts
  them.
- otherwise (server-side): SGD, or optimizer=gradagg.Adam/gradagg.SGD, runs on the server, which
  writes every new parameter version into the model. Each float32 parameter is registered with
  the client as its own storage: param.data must be contiguous (on the CPU, or on a CUDA device
  with a CUDA build) and must not be reassigned afterwards. A float16 or bfloat16 parameter
  trains through an fp32 master copy (opt.masters), which step() rounds into it. Param groups
  may set the server optimizer's hyper-parameters per group; the lr may change from step to step
  (any torch.optim.lr_scheduler, per group); the others are fixed for the job.

Either way each gradient is taken when backward produced it (its AccumulateGrad hook, as DDP
and Horovod do); a gradient changed after that (replaced, or written in place: a clip, an
unscale, a hook) raises RuntimeError instead of stepping on other values than the ones sent.

Overlap with backward: the parameters are grouped into buckets in backward order (the reverse
of their order here, DDP's bucket_cap_mb rule), one gradagg.Client each; a bucket's step starts
(Client.step_start) as soon as backward has produced its last gradient, so its push, the
server's step and its pull overlap the rest of backward. Gradient accumulation runs the earlier
backward passes inside opt.no_sync(), as with DDP.

DDP users can keep DDP and their optimizer instead:
ddp.register_comm_hook(CommHookState(server, job, rank, world_size, codec=...), comm_hook)
reduces each DDP bucket through gradagg (gradagg/_comm_hook.py; with a codec that keeps a
residual, give the hook momentum= and the optimizer none).
"""
from __future__ import annotations

import contextlib
from typing import Any, Callable, Dict, Iterable, Iterator, List, Optional, Set, Tuple, Union

import torch

from . import _momentum_adam, _param_groups, _reduce_job
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

#: Buckets an optimizer may keep: bucket k is lane k of the job (docs/sdk.md, "Lanes").
MAX_BUCKETS = 16


def bucket_plan(sizes: List[int], cap_bytes: int, group_of: Optional[List[int]] = None,
                most: int = MAX_BUCKETS) -> List[List[int]]:
    """The buckets of parameters of sizes[i] bytes (in registration order): indices in backward
    order (the reverse), a bucket closing once it holds at least cap_bytes (DDP's rule) or when
    the next parameter is of another param group (group_of[i]), the cap doubled until there are
    at most `most` (MAX_BUCKETS). cap_bytes 0: one bucket per group."""
    order = list(range(len(sizes) - 1, -1, -1))
    group_of = group_of or [0] * len(sizes)
    if len(set(group_of)) > most:
        raise ValueError(f"{len(set(group_of))} param groups; a server-side optimizer keeps each group in buckets "
                         f"of its own, at most {most}")
    cap = cap_bytes
    while True:
        out: List[List[int]] = [[]]
        held = 0
        for i in order:
            if out[-1] and ((cap and held >= cap) or group_of[i] != group_of[out[-1][-1]]):
                out.append([])
                held = 0
            out[-1].append(i)
            held += sizes[i]
        if len(out) <= most:
            return out
        cap = cap * 2 if cap else 1  # only reached with a cap: one bucket per group fits


def _server_optimizer(optimizer: Union[SGD, Adam, None], lr: Optional[float], momentum: float,
                      weight_decay: float, nesterov: bool, dgc: Optional[DGC]) -> Union[SGD, Adam]:
    """The job's server-side optimizer: `optimizer` as given, else SGD from the arguments."""
    if optimizer is None:
        if lr is None:
            raise TypeError("DistributedOptimizer: give lr (SGD on the server), optimizer=gradagg.Adam(...), or "
                            "optimizer=<a torch.optim.Optimizer> (on the workers)")
        return SGD(lr=lr, momentum=momentum, weight_decay=weight_decay, nesterov=nesterov)
    if not isinstance(optimizer, (SGD, Adam)):
        raise TypeError(f"optimizer: {type(optimizer).__name__}, expected gradagg.SGD, gradagg.Adam or a "
                        "torch.optim.Optimizer")
    _no_arguments_with(optimizer, lr, momentum, weight_decay, nesterov)
    if dgc and isinstance(optimizer, Adam):
        raise ValueError("dgc runs SGD momentum on the worker; it cannot be combined with a server-side Adam")
    if dgc and optimizer.momentum != 0.0:
        raise ValueError("dgc runs the momentum on the worker: the server's SGD must have momentum 0")
    return optimizer


def _no_arguments_with(optimizer: Any, lr: Optional[float], momentum: float, weight_decay: float,
                       nesterov: bool) -> None:
    given = [n for n, v, d in (("lr", lr, None), ("momentum", momentum, 0.0), ("weight_decay", weight_decay, 0.0),
                               ("nesterov", nesterov, False)) if v != d]
    if given:
        raise TypeError(f"DistributedOptimizer: {', '.join(given)} given with optimizer=; set them in the "
                        f"{type(optimizer).__name__} instead")


class _Taken:
    """What each parameter's .grad was when gradagg took it (the tensor and its version
    counter), to find a gradient changed afterwards."""

    def __init__(self) -> None:
        self._marks: Dict[int, Tuple[Optional[torch.Tensor], int]] = {}

    def mark(self, i: int, p: torch.Tensor) -> None:
        g = p.grad
        self._marks[i] = (g, g._version if g is not None else -1)

    def changed(self, params: List[torch.Tensor], names: List[str]) -> Optional[str]:
        """The first parameter whose .grad is not what was taken, as a message; None if none."""
        for i, (g, version) in self._marks.items():
            now = params[i].grad
            if now is not g:
                how = "set" if g is None else "replaced" if now is not None else "set to None"
                return f"the gradient of {names[i]!r} was {how} after gradagg took it"
            if g is not None and g._version != version:
                return f"the gradient of {names[i]!r} was changed in place after gradagg took it"
        return None

    def clear(self) -> None:
        self._marks = {}


class DistributedOptimizer(torch.optim.Optimizer):
    """Data-parallel training through gradagg-server (docs/sdk.md, "DistributedOptimizer").

    params: model.named_parameters() (names become the server's tensor names and must match
    across ranks), plain tensors (named param0, param1, ...), or torch param-group dicts whose
    "params" hold either.
    optimizer: where the optimizer runs.
      - a torch.optim.Optimizer over the same parameters (its own param groups; params then only
        names them): worker-side. The server reduces; backward() leaves the mean gradient over
        the ranks in every .grad (NaN in a bucket where any rank's gradient was not finite, so
        GradScaler skips the step everywhere); step() runs this optimizer. Parameters that do
        not require grad are not synchronised.
      - None (SGD from lr, momentum, weight_decay, nesterov), gradagg.SGD(...) or gradagg.Adam(...)
        (AdamW with decoupled=True): server-side. Param-group dicts may set lr, weight_decay and
        momentum/nesterov (SGD) or betas/eps (Adam) per group; each group's buckets are jobs of
        their own with its hyper-parameters. With dgc the momentum runs on the worker instead (DGC
        momentum correction, docs/sdk.md) and the server runs SGD with momentum 0; dgc=True means
        DGC(momentum=momentum, nesterov=nesterov, warmup_epochs=4).
    codec, threshold ("auto" for the automatic 2bit threshold, auto_bits its budget; a 2bit
    tensor without a threshold gets "auto"), ratio (topk without a ratio and without dgc:
    TOPK_TRAINING, 10% with fp16 values and varint indices): how gradients are pushed; codec_for(name,
    param) may return another codec for a parameter (e.g. "none" for small biases), None for the
    default. pull_codec and **client_kwargs go to gradagg.Client (deadline_ms, chunk_bytes,
    auth_token, pull_threshold, ...); pull_codec="2bit" without a pull_threshold gets the server's
    automatic one (pull_threshold="auto", 1.5 bits per element).
    Server-side SGD momentum with a codec that keeps a residual (2bit, 1bit, 1bit_scaled, topk):
    when any parameter uses one and neither dgc nor optimizer= is given, momentum and weight decay
    run on the worker before the encode (DGC's momentum correction, without factor masking or
    warm-up), group by group, and the server runs plain SGD: momentum on the server would act on
    sums that error feedback makes bursty and overshoot. optimizer=gradagg.SGD(lr, momentum=m)
    keeps the momentum on the server.
    A parameter whose .grad is None pushes zeros.
    adam_warmup (worker-side torch.optim.Adam or AdamW with a coarse codec, one that holds most of
    each element back: 2bit, 1bit, 1bit_scaled, topk; default 100): compressed Adam (docs/sdk.md; 1-bit Adam's scheme): the first adam_warmup steps exchange
    exact gradients (codec none, fp32 pulls) and run the optimizer as given; then its second
    moment is frozen and each step exchanges the first moment with `codec` and `pull_codec`
    instead (_momentum_adam). 0: the gradients are exchanged with `codec` throughout.
    overlap (default True): each bucket of about bucket_cap_mb MB (default 5: smaller than DDP's
    25, since a gradagg bucket costs one push and one pull, not a ring; backward order, DDP's rule,
    never two param groups of a server-side optimizer in one; at most MAX_BUCKETS, the cap grows
    to fit) is its own gradagg.Client on lane k of the job (bucket 0: the job itself) and starts
    its step as soon as backward produced its gradients. Backward passes before the last one of
    an accumulated step run inside opt.no_sync(); a second backward into a bucket already sent
    raises RuntimeError. With several buckets the lanes= client argument is refused (the buckets
    are the lanes). overlap=False: one bucket (per group), sent at the end of backward
    (worker-side) or by step() (server-side).
    """

    def __init__(self, params: Iterable[Any], *, server: Optional[str] = None, job: Optional[str] = None,
                 rank: Union[int, str, None] = None, world_size: Optional[int] = None, lr: Optional[float] = None,
                 momentum: float = 0.0, weight_decay: float = 0.0, nesterov: bool = False,
                 codec: str = "none", threshold: Union[float, str, None] = None, auto_bits: float = 1.5,
                 ratio: Optional[float] = None, dgc: Union[bool, DGC] = False, pull_codec: str = "none",
                 codec_for: Optional[CodecFor] = None,
                 optimizer: Union[SGD, Adam, torch.optim.Optimizer, None] = None,
                 overlap: bool = True, bucket_cap_mb: float = 5.0, adam_warmup: Optional[int] = None,
                 **client_kwargs: Any) -> None:
        launch = from_environment(server, job, rank, world_size)  # rank "any": an elastic job's server picks it
        server, job, rank, world_size = launch.server, launch.job, launch.rank, launch.world_size
        named, groups = _param_groups.parse(params)
        #: The torch optimizer step() runs (worker-side), or None (server-side).
        self.inner: Optional[torch.optim.Optimizer] = \
            optimizer if isinstance(optimizer, torch.optim.Optimizer) else None
        #: Where the optimizer runs: "worker" (optimizer= a torch.optim.Optimizer) or "server".
        self.optimizer_on = "worker" if self.inner is not None else "server"
        #: fp32 master values of the float16 / bfloat16 parameters, by parameter index (server-side).
        self.masters: Dict[int, torch.Tensor] = {}
        if dgc is True:
            dgc_opt: Optional[DGC] = DGC(momentum=momentum, nesterov=nesterov, warmup_epochs=4)
        elif dgc is False or dgc is None:
            dgc_opt = None
        elif isinstance(dgc, DGC):
            dgc_opt = dgc
        else:
            raise TypeError(f"dgc: {type(dgc).__name__}, expected bool or gradagg.DGC")
        if self.inner is not None:
            named = self._worker_side(named, groups, lr, momentum, weight_decay, nesterov, dgc_opt, rank,
                                      client_kwargs)
            groups = [dict(index=list(range(len(named))))]
        else:
            self._check_server_side_tensors(named)
        self._names = [n for n, _ in named]
        #: The tensors of the job, by parameter index.
        self._tensors = [p for _, p in named]
        codecs = [(codec_for(name, p) if codec_for else None) or codec for name, p in named]
        group_of = [0] * len(named)
        for g, group in enumerate(groups):
            for i in group["index"]:
                group_of[i] = g
        # Per group: the client optimizer, each tensor's DGC and worker weight decay.
        self._worker_weight_decay: Dict[int, float] = {}
        tensor_dgc: Dict[int, Optional[DGC]] = {i: dgc_opt for i in range(len(named))}
        self._world = world_size
        #: Worker-side Adam/AdamW with compressed momentum after adam_warmup exact steps
        #: (_momentum_adam), or 0: every step exchanges gradients.
        self.adam_warmup = 0
        if self.inner is not None:
            group_opts: List[Any] = ["reduce"]
            client_kwargs["mean"] = False  # the pushes are g / W (_reduce_job)
            self._fixed: List[Dict[str, Any]] = []
            self.momentum_on = "worker"
            if adam_warmup is not None or any(c in _reduce_job.COARSE_CODECS for c in codecs):
                why = _momentum_adam.unsupported(self.inner)
                if adam_warmup is not None and adam_warmup < 0:
                    raise ValueError(f"adam_warmup: {adam_warmup}, expected >= 1, or 0 (off: the gradients are "
                                     "exchanged compressed and the optimizer runs as given)")
                if why is None:
                    self.adam_warmup = _momentum_adam.DEFAULT_WARMUP if adam_warmup is None else adam_warmup
                elif adam_warmup:
                    raise TypeError(f"adam_warmup with this optimizer: {why}")
        else:
            if adam_warmup is not None:
                raise TypeError("adam_warmup is for a worker-side torch.optim.Adam or AdamW")
            group_opts = self._server_side(named, groups, codecs, optimizer, lr, momentum, weight_decay, nesterov,
                                           dgc_opt, tensor_dgc)
        self._job = job
        self._zeros: Dict[int, torch.Tensor] = {}
        if pull_codec == "2bit" and client_kwargs.get("pull_threshold") is None:
            client_kwargs["pull_threshold"] = "auto"
        if bucket_cap_mb < 0:
            raise ValueError(f"bucket_cap_mb: {bucket_cap_mb}, expected >= 0")
        cap = int(bucket_cap_mb * (1 << 20)) if overlap else 0
        #: The parameter indices of each bucket, in backward order (bucket k: clients[k]).
        self.buckets = bucket_plan([p.numel() * 4 for _, p in named], cap, group_of,
                                   most=MAX_BUCKETS // 2 if self.adam_warmup else MAX_BUCKETS)
        self._group_of_bucket = [group_of[b[0]] for b in self.buckets]
        if len(self.buckets) > 1 and client_kwargs.get("lanes", 1) not in (0, 1):
            raise ValueError(f"lanes={client_kwargs['lanes']} with {len(self.buckets)} buckets: the buckets are the "
                             "job's lanes; give overlap=False (or a larger bucket_cap_mb) to use lanes")
        #: Worker-side: the mean gradient each step pulls, by parameter index (rank 0's
        #: parameters at a fresh job's start), the pulled momentum (compressed Adam), and each
        #: bucket client's non-finite flag (pull "none").
        self._means: Dict[int, torch.Tensor] = {}
        self._momenta: Dict[int, torch.Tensor] = {}
        self._flags: Dict[Client, torch.Tensor] = {}
        #: One gradagg.Client per bucket; with compressed Adam these exchange the warm-up's exact
        #: gradients (codec none, fp32 pulls), and momentum_clients the momentum after it.
        self.clients: List[Client] = []
        self.momentum_clients: List[Client] = []

        def join(k: int, lane: int, dest: Dict[int, torch.Tensor], exact: bool) -> Client:
            """Bucket k's client on lane `lane`: its tensors registered (worker-side: into dest) and
            init done."""
            nonlocal rank
            pulls = "none" if exact else pull_codec
            extra = {key: v for key, v in client_kwargs.items() if not (exact and key.startswith("pull_"))}
            client = Client(server, lane_job(job, lane), rank, world_size,
                            optimizer=group_opts[self._group_of_bucket[k]], pull_codec=pulls, **extra)
            rank = client.rank  # the rank an elastic job's server picked: every bucket's job the same
            try:
                for i in self.buckets[k]:
                    name, p = named[i]
                    if self.inner is not None:  # the gradient jobs start from rank 0's parameters, the momentum at 0
                        p = dest[i] = p.detach().to(torch.float32, memory_format=torch.contiguous_format, copy=True)
                        if dest is self._momenta:
                            p.zero_()
                    p = self.masters.get(i, p)
                    c = "none" if exact else codecs[i]
                    thr = threshold if c == codec else None
                    sparse: Dict[str, Any] = dict(ratio=ratio if c == codec else None)
                    if c == "topk" and sparse["ratio"] is None and not dgc:
                        sparse = TOPK_TRAINING
                    client.add_tensor(name, p, codec=c, threshold="auto" if thr is None and c == "2bit" else thr,
                                      auto_bits=auto_bits, dgc=tensor_dgc[i], **sparse)
                if self.inner is not None and _reduce_job.carries_flag(pulls):
                    self._flags[client] = torch.zeros(1)
                    client.add_tensor(_reduce_job.FLAG_TENSOR, self._flags[client])
                with torch.no_grad():
                    client.init()
            except BaseException:
                client.close()
                raise
            return client

        try:
            for k in range(len(self.buckets)):
                self.clients.append(join(k, k, self._means, exact=bool(self.adam_warmup)))
            for k in range(len(self.buckets) if self.adam_warmup else 0):
                self.momentum_clients.append(join(k, len(self.buckets) + k, self._momenta, exact=False))
            self._round_masters()
            if self.inner is not None and all(c.version == 0 for c in self.clients):
                with torch.no_grad():  # a fresh job: rank 0's parameters, as DDP broadcasts them
                    for i, mean in self._means.items():
                        self._tensors[i].copy_(mean)
        except BaseException:
            self.close()
            raise
        #: Worker-side: the exchanges done (steps with a synchronised backward).
        self._exchanges = sum(c.version for c in self.clients[:1] + self.momentum_clients[:1]) \
            if self.inner is not None else 0
        self._momentum_step = False  # the last exchange was of the momentum: step() runs frozen_step
        self._bucket_of = {i: k for k, bucket in enumerate(self.buckets) for i in bucket}
        self._overlap = overlap
        #: Server-side, torch's GradScaler hands this optimizer the scaling instead of unscaling
        #: .grad in place (its unscale bumps no version counter, so _Taken would miss it); step()
        #: then refuses it (_scaler_message).
        self._step_supports_amp_scaling = self.inner is None
        self._ready: List[Set[int]] = [set() for _ in self.buckets]
        self._started = [False] * len(self.buckets)
        self._step_lr: Dict[int, float] = {}  # per group: the lr the current step's buckets carry
        self._client_lr = [float(getattr(o, "lr", 0.0)) for o in (group_opts[g] for g in self._group_of_bucket)]
        self._taken = _Taken()
        self._sync = True
        self._exchange_queued = False  # worker-side: the end-of-backward exchange is queued
        self._exchanged = False  # worker-side: .grad holds the mean since the last step()
        self._hooks: List[Tuple[Any, Any]] = []  # (AccumulateGrad node, its hook's handle)
        self._hook_accumulators(self._tensors)

    def _worker_side(self, named: List[Tuple[str, torch.Tensor]], groups: List[Dict[str, Any]], lr: Optional[float],
                     momentum: float, weight_decay: float, nesterov: bool, dgc: Optional[DGC],
                     rank: Union[int, str, None], client_kwargs: Dict[str, Any]) -> List[Tuple[str, torch.Tensor]]:
        """Checks a worker-side optimizer's arguments, takes its param groups and returns the
        parameters the job synchronises (those that require grad)."""
        inner = self.inner
        assert inner is not None
        _no_arguments_with(inner, lr, momentum, weight_decay, nesterov)
        if dgc is not None:
            raise TypeError("dgc runs SGD momentum on the worker; with a torch optimizer use its own momentum")
        if len(groups) > 1 or set(groups[0]) != {"index"}:
            raise TypeError("param groups given to DistributedOptimizer with optimizer=<a torch.optim.Optimizer>: "
                            "give the groups to that optimizer; params only names the parameters")
        for key in _reduce_job.REFUSED_OPTIONS:
            if key in client_kwargs:
                raise TypeError(f"{key}= with a worker-side optimizer: its jobs are a sync sum of g / W over a fixed "
                                "membership, as DDP's all-reduce")
        if rank == "any":
            raise ValueError("rank='any' with a worker-side optimizer: a joiner would not get the parameters (the "
                             "server holds only the mean gradient)")
        mine = {id(p) for group in inner.param_groups for p in group["params"]}
        given = {id(p) for _, p in named}
        if mine != given:
            raise ValueError(f"optimizer= holds {len(mine - given)} parameter(s) not in params and params "
                             f"{len(given - mine)} not in optimizer=: give both the same parameters")
        for name, p in named:
            if not p.is_floating_point():
                raise TypeError(f"parameter {name!r}: dtype {p.dtype}; gradagg trains floating-point parameters")
        super().__init__([p for _, p in named], inner.defaults)
        self.param_groups = inner.param_groups
        self.state = inner.state
        trained = [(n, p) for n, p in named if p.requires_grad]
        if not trained:
            raise ValueError("DistributedOptimizer: no parameter requires grad")
        return trained

    @staticmethod
    def _check_server_side_tensors(named: List[Tuple[str, torch.Tensor]]) -> None:
        for name, p in named:
            if p.dtype not in (torch.float32, torch.float16, torch.bfloat16):
                raise TypeError(f"parameter {name!r}: dtype {p.dtype}; gradagg trains float32, float16 and "
                                "bfloat16 parameters")
            if p.dtype == torch.float32 and not p.is_contiguous():
                raise ValueError(f"parameter {name!r}: not contiguous; the library writes into its storage")

    def _server_side(self, named: List[Tuple[str, torch.Tensor]], groups: List[Dict[str, Any]], codecs: List[str],
                     optimizer: Union[SGD, Adam, None], lr: Optional[float], momentum: float, weight_decay: float,
                     nesterov: bool, dgc: Optional[DGC], tensor_dgc: Dict[int, Optional[DGC]]) -> List[Any]:
        """Sets up param_groups for a server-side optimizer and returns each group's server
        optimizer; fills each tensor's DGC and worker weight decay (momentum on the worker)."""
        for i, (_, p) in enumerate(named):
            if p.dtype in (torch.float16, torch.bfloat16):
                self.masters[i] = p.detach().to(torch.float32, memory_format=torch.contiguous_format).clone()
        base = _server_optimizer(optimizer, lr, momentum, weight_decay, nesterov, dgc)
        hypers = [_param_groups.hyper(base, group, g) for g, group in enumerate(groups)]
        worker_momentum = (dgc is None and optimizer is None and any(h["momentum"] for h in hypers)
                           and any(codec_has_residual(c) for c in codecs))
        opts: List[Any] = []
        for group, h in zip(groups, hypers):
            if worker_momentum:
                # momentum (and weight decay) on the worker, before the encode: DGC without masking
                for i in group["index"]:
                    tensor_dgc[i] = DGC(momentum=h["momentum"], nesterov=h["nesterov"], factor_masking=False) \
                        if h["momentum"] else None
                    self._worker_weight_decay[i] = h["weight_decay"]
                opts.append(SGD(lr=h["lr"]))
            elif dgc is not None:  # DGC carries the momentum: the server must not add it a second time
                opts.append(SGD(lr=h["lr"], weight_decay=h["weight_decay"]))
            else:
                opts.append(_param_groups.server_optimizer(base, h))
        #: Each group's server-side optimizer (gradagg.SGD or gradagg.Adam), as sent to the server.
        self.server_optimizers = opts
        #: The first group's (the job's, with one group).
        self.server_optimizer = opts[0]
        #: Where SGD momentum runs: "worker" (DGC momentum correction before the encode) or "server".
        self.momentum_on = "worker" if worker_momentum or (dgc and dgc.momentum) else "server"
        torch_groups = [dict({k: v for k, v in group.items() if k == "name"},
                             params=[named[i][1] for i in group["index"]], **h) for group, h in zip(groups, hypers)]
        super().__init__(torch_groups, _param_groups.hyper(base, {}, 0))
        self._fixed = [{k: v for k, v in h.items() if k != "lr"} for h in hypers]
        return opts

    def add_param_group(self, param_group: Dict[str, Any]) -> None:
        """torch.optim's, while the constructor builds the groups; later RuntimeError: the job's
        tensors and buckets are fixed at its start."""
        if hasattr(self, "clients"):
            raise RuntimeError("DistributedOptimizer: the param groups are fixed when the job starts; give every "
                               "group to the constructor")
        super().add_param_group(param_group)

    @property
    def rank(self) -> int:
        """The rank this optimizer trains as (the server's pick for rank="any")."""
        return self.clients[0].rank

    @property
    def version(self) -> int:
        """The version the job holds: the steps it has applied. A worker that joins a running
        (elastic, server-side) job starts from it: its data position and LR schedule."""
        applied = min(c.version for c in self.clients)
        return applied + (min(c.version for c in self.momentum_clients) if self.momentum_clients else 0)

    @property
    def client(self) -> Client:
        """The client, when there is one bucket (overlap=False, or a model within bucket_cap_mb);
        else see clients."""
        if len(self.clients) != 1:
            raise RuntimeError(f"{len(self.clients)} buckets, one client each: use opt.clients")
        return self.clients[0]

    @property
    def buckets_in_flight(self) -> int:
        """Buckets whose step has started and that nobody has waited for yet: after a
        server-side backward pass with overlap, every bucket whose gradients it produced."""
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
                raise RuntimeError(f"a second backward into parameter {self._names[i]!r} (bucket {k}) after gradagg "
                                   "took its gradient: run the earlier backward passes of an accumulated step inside "
                                   "opt.no_sync()")
            if self.inner is not None and not self._exchange_queued:
                # worker-side: backward returns once .grad holds the mean, as DDP's does
                torch.autograd.Variable._execution_engine.queue_callback(self._finish_backward)  # type: ignore
                self._exchange_queued = True
            self._taken.mark(i, self._tensors[i])
            self._ready[k].add(i)
            if (self._overlap or self.inner is not None) and len(self._ready[k]) == len(self.buckets[k]):
                self._start(k)
        return hook

    @contextlib.contextmanager
    def no_sync(self) -> Iterator[None]:
        """Backward passes inside accumulate into .grad without starting any push (DDP's no_sync);
        the backward after it sends the sum."""
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
                z = self._zeros[i] = torch.zeros_like(p, dtype=torch.float32, memory_format=torch.contiguous_format)
            g = z
        elif g.is_sparse:
            g = g.to_dense()
        g = g.detach().to(torch.float32)
        wd = self._worker_weight_decay.get(i)
        if wd:
            g = g + wd * self.masters.get(i, p).detach()
        return g.contiguous()

    @torch.no_grad()
    def _round_masters(self) -> None:
        """The model's float16 / bfloat16 parameters from their fp32 masters."""
        for i, master in self.masters.items():
            self._tensors[i].copy_(master)

    def _lr_now(self, g: int) -> float:
        """Group g's lr (an LR scheduler's); its other hyper-parameters must be as given."""
        group = self.param_groups[g]
        for key, was in self._fixed[g].items():
            if group[key] != was:
                raise RuntimeError(f"param group {g}: {key} changed to {group[key]} (was {was}): only the lr may "
                                   "change during training (OneCycleLR: give cycle_momentum=False)")
        return float(group["lr"])

    @torch.no_grad()
    def _start(self, k: int) -> None:
        grads = [self._grad(i, self._tensors[i]) for i in self.buckets[k]]
        client = self.clients[k]
        if self.inner is not None:
            if self._momentum_phase():
                client = self.momentum_clients[k]
                group_of = {id(p): group for group in self.inner.param_groups for p in group["params"]}
                grads = [_momentum_adam.local_momentum(self.inner, group_of[id(self._tensors[i])], self._tensors[i], g)
                         for i, g in zip(self.buckets[k], grads)]
            grads = _reduce_job.push_values(grads, self._world, client in self._flags)
        else:
            g = self._group_of_bucket[k]
            lr = self._lr_now(g)
            was = self._step_lr.setdefault(g, lr)
            if lr != was:
                raise RuntimeError(f"lr changed to {lr} (was {was}) after this step's first bucket was sent: "
                                   "change it after opt.step() (scheduler.step()), not between backward and step()")
            if self._client_lr[k] != lr:
                client.set_lr(lr)
                self._client_lr[k] = lr
        client.step_start(grads)
        self._started[k] = True

    def _momentum_phase(self) -> bool:
        """Worker-side compressed Adam past its warm-up: this step exchanges the momentum."""
        return bool(self.adam_warmup) and self._exchanges >= self.adam_warmup

    def _run_buckets(self) -> Optional[BaseException]:
        """Starts every bucket not yet started and waits for all; the first failure, if any."""
        failure: Optional[BaseException] = None
        try:
            for k in range(len(self.buckets)):
                if not self._started[k]:
                    self._start(k)
        except BaseException as e:  # the buckets already in flight are waited for first
            failure = e
        for client in self.clients + self.momentum_clients:  # an idle client returns at once
            try:
                client.step_wait()
            except BaseException as e:  # the others still run: wait for them first
                failure = failure or e
        self._ready = [set() for _ in self.buckets]
        self._started = [False] * len(self.buckets)
        self._step_lr = {}
        return failure

    def _changed_message(self, what: str, keep: bool = False) -> Optional[str]:
        changed = self._taken.changed(self._tensors, self._names)
        if not keep:
            self._taken.clear()
        return f"{changed} {what}" if changed else None

    @torch.no_grad()
    def _finish_backward(self) -> None:
        """Worker-side, at the end of backward: every bucket exchanged, the mean in every .grad."""
        self._exchange_queued = False
        momentum = self._momentum_phase()
        failure = self._run_buckets()
        changed = self._changed_message("(a hook or another thread, during backward): gradagg sent the value it "
                                        "took; change gradients after backward() returns, where .grad holds the mean",
                                        keep=momentum)
        if failure is not None:
            raise failure
        if changed:
            raise RuntimeError(changed)
        self._exchanges += 1
        self._exchanged, self._momentum_step = True, momentum
        for k, bucket in enumerate(self.buckets):
            client = self.momentum_clients[k] if momentum else self.clients[k]
            nonfinite = client in self._flags and _reduce_job.pulled_nonfinite(self._flags[client])
            if momentum:
                if nonfinite:
                    raise RuntimeError(f"bucket {k}: a rank's gradient held NaN or Inf after the Adam warm-up (the "
                                       "momentum is exchanged then, and cannot skip a step)")
                for i in bucket:
                    self.inner.state[self._tensors[i]]["exp_avg"].copy_(self._momenta[i])
                continue
            for i in bucket:
                p, mean = self._tensors[i], self._means[i]
                if nonfinite:
                    mean = torch.full_like(mean, float("nan"))
                if p.grad is None:
                    p.grad = mean.to(p.dtype, copy=True)
                else:
                    p.grad.copy_(mean)

    def _scaler_message(self, kwargs: Dict[str, Any]) -> Optional[str]:
        """Server-side: whether torch's GradScaler is stepping this optimizer — it passes
        grad_scaler= (torch 1.x) or sets found_inf (2.x) on an optimizer that supports AMP scaling."""
        if "grad_scaler" in kwargs or hasattr(self, "found_inf"):
            return "GradScaler.step() scales the gradients and skips steps on overflow"
        return None

    @torch.no_grad()
    def step(self, closure: Optional[Callable[[], Any]] = None, **kwargs: Any) -> Any:  # type: ignore[override]
        """Worker-side: runs the optimizer over the mean gradients backward left in .grad.
        Server-side: pushes every gradient not yet sent and writes the new parameters into the
        model. closure, when given, re-evaluates the model and returns the loss (as in torch.optim).
        kwargs: what torch's GradScaler passes (server-side it is refused)."""
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        if self.inner is not None:
            if not self._exchanged and any(p.grad is not None for p in self._tensors):
                raise RuntimeError("step() without a synchronised backward since the last step: the gradients are "
                                   "this rank's own (was the last backward inside opt.no_sync()?)")
            self._exchanged = False
            if not self._momentum_step:
                self.inner.step(**kwargs)
                return loss
            changed = self._changed_message("between backward() and step(): after the Adam warm-up the momentum "
                                            "of each gradient as backward produced it was sent, and this step applied "
                                            "it (a clip or an unscale acts only in the warm-up; adam_warmup)")
            if changed:
                raise RuntimeError(changed)
            _momentum_adam.frozen_step(self.inner, {id(p) for p in self._tensors})
            return loss
        unknown = sorted(set(kwargs) - {"grad_scaler"})
        if unknown:
            raise TypeError(f"step() got unexpected keyword arguments {unknown} (the optimizer runs on the server)")
        scaler = self._scaler_message(kwargs)
        changed = None if self._overlap else (f"{scaler}: nothing was sent" if scaler else self._changed_message(
            "(a clip, GradScaler.unscale_ or an edit between backward() and step()): nothing was sent"))
        if changed:
            self._taken.clear()
            raise RuntimeError(f"{changed}. A server-side optimizer takes each gradient as backward produced it; "
                               "to clip or unscale the mean gradient as DDP does, run the optimizer on the workers: "
                               "optimizer=torch.optim.<...>(...)")
        failure = self._run_buckets()
        self._round_masters()
        changed = self._changed_message("(a clip, GradScaler.unscale_ or an edit between backward() and step()): "
                                        "this step applied the gradients as backward left them")
        if scaler:
            changed = f"{scaler}: this step applied the gradients as backward left them"
        if failure is not None:
            raise failure
        if changed:
            raise RuntimeError(f"{changed}. A server-side optimizer takes each gradient as backward produced it; "
                               "to clip or unscale the mean gradient as DDP does, run the optimizer on the workers: "
                               "optimizer=torch.optim.<...>(...)")
        return loss

    def state_dict(self) -> Dict[str, Any]:
        """torch.optim's state_dict (param_groups, so the lr a scheduler set; worker-side, the
        torch optimizer's state) and, under "gradagg", the job and each bucket client's own
        training state (Client.state: residuals, DGC momentum, late gradients, epoch).
        Server-side, the parameters and the optimizer's state live on the server, which keeps
        them. Take it after step()."""
        saved = (self.inner if self.inner is not None else super()).state_dict()
        saved["gradagg"] = dict(job=self._job, optimizer_on=self.optimizer_on, buckets=[list(b) for b in self.buckets],
                                workers=[c.state() for c in self.clients + self.momentum_clients],
                                exchanges=self._exchanges)
        return saved

    def load_state_dict(self, state_dict: Dict[str, Any]) -> None:
        """Takes over a state_dict() of this rank's optimizer of the same job and model (a
        resumed training script, after this optimizer joined the job; create it with
        resume=True, else a job whose ranks all left is started afresh): param_groups (each
        group's lr), the worker-side optimizer's state and every bucket client's state.
        Worker-side, load the model's parameters too (the server holds only gradients).
        ValueError when it does not fit."""
        own = state_dict.get("gradagg")
        if not isinstance(own, dict):
            raise ValueError("not a gradagg DistributedOptimizer state_dict (no 'gradagg' entry)")
        if own["job"] != self._job:
            raise ValueError(f"state_dict of job {own['job']!r}, this optimizer trains {self._job!r}")
        if own.get("optimizer_on", "server") != self.optimizer_on:
            raise ValueError(f"state_dict of an optimizer on the {own.get('optimizer_on', 'server')}, this one runs "
                             f"on the {self.optimizer_on}")
        if own["buckets"] != [list(b) for b in self.buckets]:
            raise ValueError(f"state_dict with buckets {own['buckets']}, this optimizer has {self.buckets} "
                             "(give the same model and bucket_cap_mb)")
        rest = {k: v for k, v in state_dict.items() if k != "gradagg"}
        if self.inner is not None:
            self.inner.load_state_dict(rest)
            self.param_groups, self.state = self.inner.param_groups, self.inner.state
        else:
            if len(state_dict["param_groups"]) != len(self._fixed):
                raise ValueError(f"state_dict with {len(state_dict['param_groups'])} param groups, the job has "
                                 f"{len(self._fixed)}")
            for g, (group, fixed) in enumerate(zip(state_dict["param_groups"], self._fixed)):
                for key, was in fixed.items():
                    if (tuple(group[key]) if key == "betas" else group[key]) != was:
                        raise ValueError(f"state_dict with {key} {group[key]} in param group {g}, the job's is {was}")
            super().load_state_dict(rest)
        if len(own["workers"]) != len(self.clients + self.momentum_clients):
            raise ValueError(f"state_dict of {len(own['workers'])} bucket clients, this optimizer has "
                             f"{len(self.clients + self.momentum_clients)} (adam_warmup on one side only?)")
        for client, state in zip(self.clients + self.momentum_clients, own["workers"]):
            client.load_state(state)
        self._exchanges = own.get("exchanges", self._exchanges)

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
        for client in getattr(self, "clients", []) + getattr(self, "momentum_clients", []):
            client.close(failure)

    def __enter__(self) -> "DistributedOptimizer":
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        self.close(failure_text(exc) if exc is not None else None)
