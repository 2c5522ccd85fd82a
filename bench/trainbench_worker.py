#!/usr/bin/python3
"""One rank of bench/trainbench.py (runs inside its namespace).

Builds the student (bench/trainbench_model.py) and the system under test: the compute-only
floor (local SGD, no communication), PyTorch DDP over gloo (optionally with a comm hook), or
gradagg through gradagg.torch.DistributedOptimizer. Prints {"event": "ready"} once joined,
waits for a "go" line on stdin, trains --iters iterations and prints {"event": "done", ...}:
each iteration's wall time, and every --eval-every iterations the loss on the held-out set
(computed on every rank, outside the timed iterations, so the ranks stay in step).
Errors: {"event": "error"}, exit 1.
"""
import argparse
import os
import sys
import time
from typing import Any, List

import torch

import trainbench_gpt
from trainbench_model import Task, student
from worker_events import emit, fail, opt_float


def ddp_model(a: argparse.Namespace, model: torch.nn.Module) -> torch.nn.Module:
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    os.environ.setdefault("GLOO_SOCKET_IFNAME", a.iface)
    os.environ.setdefault("USE_LIBUV", "0")  # the store only bootstraps gloo; Debian's torch 2.x lacks libuv
    dist.init_process_group("gloo", init_method=f"tcp://{a.master}", rank=a.rank, world_size=a.world)
    if a.hook == "powersgd":
        # One bucket (DDP's first is 1 MB by default): with two, the hook's collectives are issued
        # from two threads, in an order that can differ between ranks, and gloo fails on it.
        dist._DEFAULT_FIRST_BUCKET_BYTES = int(a.bucket_mb * (1 << 20))
    ddp = DDP(model, bucket_cap_mb=25.0 if a.bucket_mb is None else a.bucket_mb)
    if a.hook == "fp16":
        from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
        ddp.register_comm_hook(None, default_hooks.fp16_compress_hook)
    elif a.hook == "powersgd":
        from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as ps
        # start_powerSGD_iter 2: the least the hook accepts with error feedback and warm start.
        state = ps.PowerSGDState(process_group=None, matrix_approximation_rank=a.psgd_rank,
                                 start_powerSGD_iter=2, use_error_feedback=True, warm_start=True)
        ddp.register_comm_hook(state, ps.powerSGD_hook)
    elif a.hook == "gradagg":
        from gradagg.torch import CommHookState, comm_hook
        ddp.gradagg_state = CommHookState(a.server, a.job, a.rank, a.world, codec=a.codec,
                                          momentum=a.momentum if a.hook_momentum else 0.0,
                                          threshold=gradagg_threshold(a), ratio=a.ratio, pull_codec=a.pull_codec,
                                          pull_threshold=a.pull_threshold, threads=1, call_timeout_ms=120000,
                                          step_timeout_ms=600000)
        ddp.register_comm_hook(ddp.gradagg_state, comm_hook)
    elif a.hook != "none":
        raise ValueError(f"hook {a.hook!r}")
    return ddp


def gradagg_clients(opt: Any, net: torch.nn.Module) -> List[Any]:
    """This rank's gradagg clients: DistributedOptimizer's buckets (with compressed Adam both
    sets: the warm-up's and the momentum's), or the comm hook's."""
    if hasattr(opt, "clients"):
        return opt.clients + opt.momentum_clients
    state = getattr(net, "gradagg_state", None)
    return [c for c, _ in state.buckets.values()] if state else []


def gradagg_threshold(a: argparse.Namespace) -> Any:
    return a.threshold if a.threshold in (None, "auto") else float(a.threshold)


def torch_optimizer(a: argparse.Namespace, model: torch.nn.Module) -> torch.optim.Optimizer:
    """The optimizer every system runs on the workers: SGD (the MLP task; without momentum when
    the gradagg comm hook applies it), or AdamW with weight decay on matrices only (gpt*)."""
    if a.optim == "adamw":
        return torch.optim.AdamW(trainbench_gpt.decay_groups(model, a.weight_decay), lr=a.lr, betas=(0.9, 0.95))
    return torch.optim.SGD(model.parameters(), lr=a.lr, momentum=0.0 if a.hook_momentum else a.momentum)


def gradagg_optimizer(a: argparse.Namespace, model: torch.nn.Module) -> Any:
    from gradagg.torch import DistributedOptimizer

    sgd = dict(lr=a.lr, momentum=a.momentum, dgc=a.dgc) if a.optim == "sgd" else \
        dict(optimizer=torch_optimizer(a, model), adam_warmup=a.adam_warmup)  # AdamW on the workers
    return DistributedOptimizer(model.named_parameters(), server=a.server, job=a.job, rank=a.rank,
                                world_size=a.world, codec=a.codec, threshold=gradagg_threshold(a), ratio=a.ratio,
                                pull_codec=a.pull_codec, pull_threshold=a.pull_threshold, pull_ratio=a.pull_ratio,
                                threads=1, overlap=not a.no_overlap, call_timeout_ms=120000, step_timeout_ms=600000,
                                **sgd, **({} if a.bucket_mb is None else {"bucket_cap_mb": a.bucket_mb}))


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--system", choices=("floor", "ddp", "gradagg"), required=True)
    ap.add_argument("--rank", type=int, required=True)
    ap.add_argument("--world", type=int, required=True)
    ap.add_argument("--model", default="mlp10m")
    ap.add_argument("--batch", type=int, default=32, help="samples per rank per iteration")
    ap.add_argument("--iters", type=int, default=100)
    ap.add_argument("--eval-every", type=int, default=5)
    ap.add_argument("--device", default="cpu", help="cpu or cuda: the model, the batches and the evaluation")
    ap.add_argument("--eval-samples", type=int, default=512)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--momentum", type=float, default=0.9)
    ap.add_argument("--optim", choices=("sgd", "adamw"), default="sgd")
    ap.add_argument("--weight-decay", type=float, default=0.1, help="adamw: on matrices")
    ap.add_argument("--warmup", type=int, default=0, help="adamw: lr warm-up iterations, then cosine to 10%%")
    # ddp
    ap.add_argument("--master", help="host:port of rank 0's store")
    ap.add_argument("--iface", default="eth0")
    ap.add_argument("--hook", default="none", choices=("none", "fp16", "powersgd", "gradagg"))
    ap.add_argument("--psgd-rank", type=int, default=1)
    ap.add_argument("--bucket-mb", type=float, default=None,
                    help="bucket_cap_mb of DDP (default 25) or of DistributedOptimizer (default its own)")
    # gradagg
    ap.add_argument("--server")
    ap.add_argument("--job", default="trainbench")
    ap.add_argument("--codec", default="none")
    ap.add_argument("--threshold", default=None, help="a float or 'auto'")
    ap.add_argument("--ratio", type=opt_float, default=None)
    ap.add_argument("--dgc", action="store_true")
    ap.add_argument("--pull-codec", default="none")
    ap.add_argument("--pull-threshold", type=opt_float, default=None)
    ap.add_argument("--pull-ratio", type=opt_float, default=None)
    ap.add_argument("--no-overlap", action="store_true", help="gradagg: one client, everything pushed in step()")
    ap.add_argument("--adam-warmup", type=int, default=None,
                    help="gradagg AdamW: exact steps before the momentum is compressed (0: compressed gradients "
                         "throughout; default: DistributedOptimizer's)")
    ap.add_argument("--hook-momentum", action="store_true",
                    help="gradagg comm hook: momentum in the hook, before the encode; the model's SGD without it")
    a = ap.parse_args()
    torch.set_num_threads(1)
    try:
        gpt = a.model in trainbench_gpt.MODELS
        task: Any = trainbench_gpt.TextTask(a.model, a.seed, a.eval_samples) if gpt else Task(a.seed, a.eval_samples)
        model = trainbench_gpt.gpt(a.model, a.seed) if gpt else student(a.model, a.seed)
        device = torch.device(a.device)
        model.to(device)  # the same initial weights on every device: built on the CPU, then moved
        task.eval_x, task.eval_y = task.eval_x.to(device), task.eval_y.to(device)
        # A CUDA iteration is timed once its kernels have finished.
        sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
        opt: Any
        if a.system == "gradagg":
            opt = gradagg_optimizer(a, model)
            net = model
        else:
            net = ddp_model(a, model) if a.system == "ddp" else model
            opt = torch_optimizer(a, model)
        sched = torch.optim.lr_scheduler.LambdaLR(opt, trainbench_gpt.lr_lambda(a.warmup, a.iters)) \
            if a.optim == "adamw" else None
        emit({"event": "ready", "rank": a.rank})
        if sys.stdin.readline().strip() != "go":
            raise RuntimeError("no go line on stdin")
        iter_s: List[float] = []
        fwdbwd_s: List[float] = []  # zero_grad, forward and backward: the rest of iter_s is step()
        cpu_s: List[float] = []  # this process's CPU time (every thread) over the same part as iter_s
        evals: List[List[float]] = [[0, task.eval_loss(model)]]
        pushed = pulled = 0
        phases_s: List[List[float]] = []  # gradagg: encode, push, wait + pull, decode; all bucket clients' sums
        for i in range(a.iters):
            x, y = (t.to(device) for t in task.batch(a.rank, i, a.batch))
            sync()
            c0, t0 = time.process_time(), time.perf_counter()
            opt.zero_grad(set_to_none=False)
            torch.nn.functional.cross_entropy(net(x), y).backward()
            sync()
            fwdbwd_s.append(time.perf_counter() - t0)
            opt.step()
            if sched:
                sched.step()
            sync()
            iter_s.append(time.perf_counter() - t0)
            cpu_s.append(time.process_time() - c0)
            phases = [0.0] * 4
            for client in gradagg_clients(opt, net):
                st = client.stats
                pushed += st.bytes_pushed
                pulled += st.bytes_pulled
                for j, v in enumerate((st.encode_s, st.push_s, st.pull_s, st.decode_s)):
                    phases[j] += v
            phases_s.append(phases)
            if (i + 1) % a.eval_every == 0 or i + 1 == a.iters:
                evals.append([i + 1, task.eval_loss(model)])
        if not all(torch.isfinite(p).all() for p in model.parameters()):
            raise RuntimeError("non-finite parameters after training")
        if a.system == "gradagg":
            opt.close()
        if hasattr(net, "gradagg_state"):
            net.gradagg_state.close()
        emit({"event": "done", "rank": a.rank, "iter_s": iter_s, "fwdbwd_s": fwdbwd_s, "cpu_s": cpu_s, "phases_s": phases_s, "evals": evals,
              "bytes_pushed": pushed, "bytes_pulled": pulled})
        return 0
    except Exception as e:
        return fail(a.rank, e)


if __name__ == "__main__":
    sys.exit(main())
