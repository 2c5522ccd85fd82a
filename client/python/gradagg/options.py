"""Plain option records of the Python API: the server optimizers, DGC, and the step figures.
They hold values only; the library checks them (ga_client_create, ga_client_add_tensor)."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class SGD:
    """SGD run on the server after each step (PyTorch semantics, dampening 0; ga_optim.h)."""
    lr: float
    momentum: float = 0.0
    weight_decay: float = 0.0
    nesterov: bool = False


@dataclass(frozen=True)
class Adam:
    """Adam on the server (AdamW when decoupled; ga_optim.h)."""
    lr: float = 1e-3
    beta1: float = 0.9
    beta2: float = 0.999
    eps: float = 1e-8
    weight_decay: float = 0.0
    decoupled: bool = False


@dataclass(frozen=True)
class DGC:
    """Deep Gradient Compression on the worker, per tensor (gradagg.h ga_dgc_options).

    momentum: momentum correction u = m*u + g; v += u (0 = off). Use it with a server optimizer
    without momentum, or momentum runs twice. nesterov: u = (u + g)*m; v += u + g.
    factor_masking: zero u and v where values were sent. clip_norm: clip the local gradient to
    this L2 norm first (0 = off). warmup_epochs: exponentially decreasing keep ratio for the
    first epochs (Client.set_epoch). With a dense codec (none, fp16, bf16) it is momentum on the
    worker: every element is sent, and masking does not apply.
    """
    momentum: float = 0.9
    nesterov: bool = False
    factor_masking: bool = True
    clip_norm: float = 0.0
    warmup_epochs: int = 0


@dataclass(frozen=True)
class Stats:
    """ga_client_stats: the last step's times (seconds) and payload bytes, and running totals."""
    encode_s: float
    push_s: float
    pull_s: float
    decode_s: float
    bytes_pushed: int
    bytes_pulled: int
    steps: int
    retries: int
    late_pushes: int
    rejoins: int
    versions_lost: int  # versions a killed server lost (--durability checkpoint) that this worker moved back over
