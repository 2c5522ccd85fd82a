"""The parameters DistributedOptimizer is given, as torch.optim takes them: tensors, (name,
tensor) pairs, or param-group dicts; and each group's server-side optimizer (docs/sdk.md,
"Parameter groups")."""
from __future__ import annotations

import dataclasses
from typing import Any, Dict, Iterable, List, Tuple, Union

import torch

from .options import SGD, Adam

#: The keys a group may set, by server optimizer, in torch.optim's spelling; values torch's
#: optimizers take that the server's do not run are allowed only at their defaults.
GROUP_KEYS = {SGD: ("lr", "momentum", "weight_decay", "nesterov"), Adam: ("lr", "betas", "eps", "weight_decay")}
_DEFAULT_ONLY = {"dampening": 0.0, "amsgrad": False, "maximize": False, "foreach": None, "capturable": False,
                 "differentiable": False, "fused": None}


def _named(params: Iterable[Any], first: int, where: str) -> List[Tuple[str, torch.Tensor]]:
    out: List[Tuple[str, torch.Tensor]] = []
    for i, p in enumerate(params, first):
        if isinstance(p, tuple) and len(p) == 2 and isinstance(p[0], str) and isinstance(p[1], torch.Tensor):
            out.append((p[0], p[1]))
        elif isinstance(p, torch.Tensor):
            out.append((f"param{i}", p))
        else:
            raise TypeError(f"{where}[{i - first}]: expected a tensor or a (name, tensor) pair, got "
                            f"{type(p).__name__}")
    return out


def parse(params: Iterable[Any]) -> Tuple[List[Tuple[str, torch.Tensor]], List[Dict[str, Any]]]:
    """(every parameter as (name, tensor), in order; the groups, each its own keys and "index":
    the positions of its parameters). Plain tensors are named param<i> by their position over
    all groups. One group when params holds no dict."""
    items = list(params)
    if not items:
        raise ValueError("DistributedOptimizer: no parameters")
    dicts = [isinstance(p, dict) for p in items]
    if any(dicts) and not all(dicts):
        raise TypeError("params: mix of param-group dicts and parameters; give one or the other")
    groups_in = items if all(dicts) else [{"params": items}]
    named: List[Tuple[str, torch.Tensor]] = []
    groups: List[Dict[str, Any]] = []
    for g, group in enumerate(groups_in):
        if "params" not in group:
            raise TypeError(f"param group {g}: no 'params'")
        ps = group["params"]
        ps = [ps] if isinstance(ps, torch.Tensor) else list(ps)
        these = _named(ps, len(named), f"param group {g} params" if all(dicts) else "params")
        if not these:
            raise ValueError(f"param group {g}: no parameters")
        groups.append(dict({k: v for k, v in group.items() if k != "params"},
                           index=list(range(len(named), len(named) + len(these)))))
        named += these
    seen: Dict[int, str] = {}
    for name, p in named:
        if id(p) in seen:
            raise ValueError(f"parameter {name!r} given twice (also as {seen[id(p)]!r})")
        seen[id(p)] = name
    if len({n for n, _ in named}) != len(named):
        raise ValueError("parameter names are not unique")
    return named, groups


def hyper(base: Union[SGD, Adam], group: Dict[str, Any], g: int) -> Dict[str, Any]:
    """Group g's hyper-parameters in torch's spelling: base's, overridden by the group's keys;
    TypeError for a key the server's optimizer does not take."""
    kind = type(base)
    out: Dict[str, Any] = dict(lr=base.lr, weight_decay=base.weight_decay)
    if kind is SGD:
        out.update(momentum=base.momentum, nesterov=base.nesterov)
    else:
        out.update(betas=(base.beta1, base.beta2), eps=base.eps)
    for key, value in group.items():
        if key in ("index", "name"):
            continue
        if key in GROUP_KEYS[kind]:
            out[key] = tuple(value) if key == "betas" else value
        elif key in _DEFAULT_ONLY and value == _DEFAULT_ONLY[key]:
            continue
        else:
            raise TypeError(f"param group {g}: {key}={value!r}; the server's {kind.__name__} takes "
                            f"{', '.join(GROUP_KEYS[kind])} per group")
    return out


def server_optimizer(base: Union[SGD, Adam], h: Dict[str, Any]) -> Union[SGD, Adam]:
    """base with one group's hyper-parameters h (from hyper())."""
    if isinstance(base, SGD):
        return dataclasses.replace(base, lr=h["lr"], momentum=h["momentum"], weight_decay=h["weight_decay"],
                                   nesterov=h["nesterov"])
    return dataclasses.replace(base, lr=h["lr"], beta1=h["betas"][0], beta2=h["betas"][1], eps=h["eps"],
                               weight_decay=h["weight_decay"])
