"""Rank, world size, job and server from the launcher's environment (docs/launch.md).

torchrun sets RANK, WORLD_SIZE, LOCAL_RANK and TORCHELASTIC_RUN_ID; a Kubernetes indexed Job sets
JOB_COMPLETION_INDEX; GRADAGG_SERVER, GRADAGG_JOB, GRADAGG_RANK, GRADAGG_WORLD_SIZE (which win
over the launchers' variables), GRADAGG_AUTH_TOKEN and GRADAGG_TLS_* give the rest. An argument
given in code wins over all of them. gradagg.Client, gradagg.torch.DistributedOptimizer and
gradagg.torch.CommHookState resolve the arguments they are not given this way:

    # torchrun --nproc_per_node 4 train.py, with GRADAGG_SERVER=gradagg:7070
    opt = gradagg.torch.DistributedOptimizer(model.named_parameters(), lr=0.1, codec="2bit")

The resolution itself is the C SDK's ga_client_options_from_env (gradagg.h), so the C and Python
workers of a job read the same variables the same way.
"""
from __future__ import annotations

import ctypes
import os
from dataclasses import dataclass
from typing import Optional, Sequence, Union

from . import _lib
from . import _structs as S
from .errors import error_for

_NO_RANK = (1 << 32) - 1  # never a valid rank: world_size < 2^32


@dataclass(frozen=True)
class Launch:
    """Where this process trains: the server (shard list), the job, its rank and the world size,
    and local_rank (LOCAL_RANK, else 0): its index on its node, e.g. the CUDA device to use."""
    server: str
    job: str
    rank: Union[int, str]  # "any": an elastic job's server picks it (GRADAGG_RANK=any)
    world_size: int
    local_rank: int


def fill_options(o: S.ClientOptions) -> None:
    """Fills the fields of o that the environment gives (ga_client_options_from_env)."""
    msg = ctypes.create_string_buffer(512)
    st = _lib.ga_client_options_from_env(ctypes.byref(o), msg, len(msg))
    if st != 0:
        raise error_for(st, msg.value.decode(errors="replace"))


def from_environment(server: Union[str, Sequence[str], None] = None, job: Optional[str] = None,
                     rank: Union[int, str, None] = None, world_size: Optional[int] = None) -> Launch:
    """The Launch of this process: each argument that is None comes from the environment
    (docs/launch.md). ValueError names what neither the arguments nor the environment give;
    gradagg.errors.InvalError a variable that is set but malformed (RANK=abc)."""
    o = S.ClientOptions()
    o.rank, o.world_size = _NO_RANK, 0
    fill_options(o)
    if server is None:
        if not o.server:
            raise ValueError("server: not given, and GRADAGG_SERVER is not set")
        server = o.server.decode()
    elif not isinstance(server, str):
        server = ",".join(str(a) for a in server)
    if job is None:
        if not o.job:
            raise ValueError("job: not given, and neither GRADAGG_JOB nor TORCHELASTIC_RUN_ID (torchrun) is set")
        job = o.job.decode()
    if rank is None and os.environ.get("GRADAGG_RANK") == "any":
        rank = "any"
    if rank is None:
        if o.rank == _NO_RANK:
            raise ValueError("rank: not given, and none of GRADAGG_RANK, RANK (torchrun) and JOB_COMPLETION_INDEX "
                             "(a Kubernetes indexed Job) is set")
        rank = int(o.rank)
    if world_size is None:
        if o.world_size == 0:
            raise ValueError("world_size: not given, and neither GRADAGG_WORLD_SIZE nor WORLD_SIZE (torchrun) is set")
        world_size = int(o.world_size)
    local = os.environ.get("LOCAL_RANK", "")
    if local and not local.isdigit():
        raise ValueError(f"environment: LOCAL_RANK={local!r} is not a non-negative integer")
    if isinstance(rank, str) and rank != "any":
        raise ValueError(f"rank: {rank!r}, expected an integer or 'any'")
    return Launch(str(server), str(job), rank, world_size, int(local) if local else 0)
