"""A reduce job that stands in for DDP's all-reduce (a worker-side optimizer's buckets, the DDP
comm hook; docs/sdk.md, "Reduce jobs"). Each rank pushes its gradient divided by the world size
W (DDP's g / W, true division) and the server sums the pushes (config mean = false), so the
pulled value is DDP's sum of g / W, and finite gradients cannot overflow it. A rank whose
gradients hold NaN or Inf pushes zeros in their place and 1 in the bucket's one-element flag
tensor; a bucket whose pulled flag is 0.5 or more has a non-finite mean on every rank, which each
rank makes NaN, as DDP's all-reduce would carry it (so GradScaler skips the step everywhere). The
flag (a count of ranks, an integer) needs a pull codec that sends every element: none, fp16 and
bf16 carry it exactly, int8 and int4 to within a few float ulps (a one-element block is sent at
its full scale); the coarse codecs could hold it back, so a job pulling with one has no flag."""
from __future__ import annotations

from typing import List, Tuple

import torch

#: The flag tensor's name in a bucket's job (no parameter name starts with '#').
FLAG_TENSOR = "#nonfinite"

#: The codecs that hold most of each element back for later steps (ternary, sign, sparse). The
#: others (none, fp16, bf16, int8, int4) send every element to within its block's resolution.
COARSE_CODECS = ("2bit", "1bit", "1bit_scaled", "topk")

#: Client options of such a job that would break the sum of g / W over a fixed membership.
REFUSED_OPTIONS = ("optimizer", "mean", "mode", "deadline_ms", "quorum", "min_world_size", "staleness")


def shares(grads: List[torch.Tensor], world: int) -> Tuple[List[torch.Tensor], bool]:
    """(each gradient / world, whether any held NaN or Inf, which are pushed as 0). New tensors:
    the gradients themselves are not changed. One device synchronisation for all of them."""
    if not grads:
        return grads, False
    ok = torch.stack([torch.isfinite(g).all() for g in grads]).cpu()
    nonfinite = not bool(ok.all())
    if nonfinite:
        grads = [g if bool(good) else torch.nan_to_num(g, nan=0.0, posinf=0.0, neginf=0.0)
                 for g, good in zip(grads, ok)]
    return [torch.div(g, world) for g in grads], nonfinite


def push_values(grads: List[torch.Tensor], world: int, flagged: bool) -> List[torch.Tensor]:
    """What a rank pushes for grads: each / world; with the flag (flagged), NaN and Inf as 0 and
    the flag after them. Unflagged, a non-finite gradient is refused by the library."""
    if not flagged:
        return [torch.div(g, world) for g in grads]
    out, nonfinite = shares(grads, world)
    return [*out, torch.tensor([1.0 if nonfinite else 0.0], dtype=torch.float32)]


def carries_flag(pull_codec: str) -> bool:
    """Whether a reduce job pulling with pull_codec gets the flag tensor."""
    return pull_codec not in COARSE_CODECS


def pulled_nonfinite(flag: torch.Tensor) -> bool:
    """Whether a bucket's pulled flag says some rank's gradient was not finite (a count of
    ranks: 0.5 or more, which a pull that rounds it by a few ulps still gives)."""
    return float(flag[0]) >= 0.5
