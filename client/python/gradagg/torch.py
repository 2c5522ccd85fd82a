"""gradagg.torch: a torch.optim.Optimizer whose step runs through gradagg-server.

    opt = DistributedOptimizer(model.named_parameters(), server=addr, job="j", rank=r, world_size=w,
                               lr=0.1, momentum=0.9, codec="2bit", threshold=0.5)
    for x, y in data:
        opt.zero_grad(); loss_fn(model(x), y).backward(); opt.step()

Each parameter is registered with the client as its own storage: param.data must be float32 and
contiguous (on the CPU, or on a CUDA device with a CUDA build), and must not be reassigned
afterwards, because the library writes every new parameter version into that memory in place.
The optimizer (SGD, or Adam/AdamW with optimizer=gradagg.Adam(...)) runs on the server with
hyper-parameters fixed for the job: changing param_groups' lr (an LR scheduler) is refused
rather than silently ignored.
"""
from __future__ import annotations

from typing import Any, Callable, Dict, Iterable, List, Optional, Tuple, Union

import torch

from .client import Client, codec_has_residual
from .options import DGC, SGD, Adam

CodecFor = Callable[[str, torch.Tensor], Optional[str]]


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
    tensor without a threshold gets "auto"), ratio: how gradients are pushed; codec_for(name,
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
    A parameter whose .grad is None pushes zeros.
    """

    def __init__(self, params: Iterable[Any], *, server: str, job: str, rank: int, world_size: int,
                 lr: Optional[float] = None, momentum: float = 0.0, weight_decay: float = 0.0,
                 nesterov: bool = False,
                 codec: str = "none", threshold: Union[float, str, None] = None, auto_bits: float = 1.5,
                 ratio: Optional[float] = None, dgc: Union[bool, DGC] = False, pull_codec: str = "none",
                 codec_for: Optional[CodecFor] = None, optimizer: Union[SGD, Adam, None] = None,
                 **client_kwargs: Any) -> None:
        named = _named(params)
        for name, p in named:
            if p.dtype != torch.float32:
                raise TypeError(f"parameter {name!r}: dtype {p.dtype}; gradagg trains float32 parameters")
            if not p.is_contiguous():
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
        self._lr = lr
        self._zeros: Dict[int, torch.Tensor] = {}
        if pull_codec == "2bit" and client_kwargs.get("pull_threshold") is None:
            client_kwargs["pull_threshold"] = "auto"
        self.client = Client(server, job, rank, world_size, optimizer=server_opt, pull_codec=pull_codec,
                             **client_kwargs)
        try:
            for (name, p), c in zip(named, codecs):
                thr = threshold if c == codec else None
                self.client.add_tensor(name, p, codec=c, threshold="auto" if thr is None and c == "2bit" else thr,
                                       auto_bits=auto_bits, ratio=ratio if c == codec else None, dgc=dgc_opt)
            with torch.no_grad():
                self.client.init()
        except BaseException:
            self.client.close()
            raise

    def _grads(self) -> List[torch.Tensor]:
        out: List[torch.Tensor] = []
        for i, p in enumerate(self._params()):
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
            out.append(g.contiguous())
        return out

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
        for group in self.param_groups:
            if group["lr"] != self._lr:
                raise RuntimeError(f"lr changed to {group['lr']} (was {self._lr}): the learning rate belongs "
                                   "to the job's server-side SGD and cannot change during training")
        self.client.step(self._grads())
        return loss

    def set_epoch(self, epoch: int) -> None:
        """Starts epoch `epoch` (0-based) for the DGC warm-up."""
        self.client.set_epoch(epoch)

    def close(self) -> None:
        """Leaves the job; the model keeps the last parameters pulled."""
        self.client.close()

    def __enter__(self) -> "DistributedOptimizer":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
