"""Helpers shared by the tests: workers in threads with a bound, and a tiny numpy model whose
gradient uses only elementwise operations and axis sums (deterministic, no BLAS), so a
reference run of the same math reproduces the service's results bit for bit."""
from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any, Callable, Dict, List, Tuple

import numpy as np

F32 = np.float32

# Options that keep a hung test short: a broken server fails a call within seconds.
FAST = dict(call_timeout_ms=10000, step_timeout_ms=30000, max_retries=2)


def build_dir() -> Path:
    """The CMake build the tests' C programs come from: $GRADAGG_BUILD (scripts/test sets it),
    else the build the loaded libgradagg.so lies in."""
    from gradagg import _lib
    env = os.environ.get("GRADAGG_BUILD")
    return Path(env) if env else Path(_lib.LIBRARY_PATH).resolve().parent.parent


def child_env(**extra: str) -> Dict[str, str]:
    """os.environ for a Python worker process, plus extra: the worker imports the gradagg package
    this suite imported (the source tree or the installed package) and loads the same
    libgradagg.so, never another build's (a newer sanitizer build in build/ would abort it)."""
    import gradagg
    from gradagg import _lib
    package_dir = str(Path(gradagg.__file__).resolve().parents[1])
    env = dict(os.environ, GRADAGG_LIB=str(Path(_lib.LIBRARY_PATH).resolve()))
    env["PYTHONPATH"] = os.pathsep.join(p for p in (package_dir, env.get("PYTHONPATH", "")) if p)
    env.update(extra)
    return env


def built_program(name: str) -> str:
    """build_dir()/tests/<name>: fails the test where scripts/test built it (GRADAGG_BUILD set),
    else skips it when it is not built."""
    import pytest
    p = build_dir() / "tests" / name
    if not p.is_file():
        if os.environ.get("GRADAGG_BUILD"):
            pytest.fail(f"{p} is not built")
        pytest.skip(f"{p} is not built (ninja -C <build> {name})")
    return str(p)


def run_rank_processes(tag: str, command: Callable[[int], List[str]], world: int, timeout: float) -> None:
    """command(rank) for every rank, each a Python worker process (child_env, one OpenMP thread);
    fails the test when one exits non-zero (with its output) or runs past timeout seconds."""
    import subprocess
    import sys
    import pytest
    procs = [subprocess.Popen([sys.executable, *command(r)], env=child_env(OMP_NUM_THREADS="1"),
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT) for r in range(world)]
    for r, p in enumerate(procs):
        try:
            text, _ = p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            pytest.fail(f"{tag}: rank {r} still running after {timeout:.0f} s")
        assert p.returncode == 0, f"{tag} rank {r}:\n{text.decode(errors='replace')}"


def run_ranks(fn: Callable[[int], Any], world: int, timeout: float = 60.0) -> List[Any]:
    """fn(rank) for every rank, each in its own thread; re-raises the first failure."""
    results: Dict[int, Any] = {}
    errors: Dict[int, BaseException] = {}

    def body(r: int) -> None:
        try:
            results[r] = fn(r)
        except BaseException as e:  # noqa: BLE001 - reported below
            errors[r] = e

    threads = [threading.Thread(target=body, args=(r,), daemon=True) for r in range(world)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout)
    alive = [r for r, t in enumerate(threads) if t.is_alive()]
    assert not alive, f"ranks {alive} still running after {timeout}s"
    if errors:  # every rank's error: the first rank's may only be the consequence of another's
        r = min(errors)
        others = "".join(f"; rank {o}: {errors[o]!r}" for o in sorted(errors) if o != r)
        raise AssertionError(f"rank {r} failed: {errors[r]!r}{others}") from errors[r]
    return [results[r] for r in range(world)]


def regression_data(rank: int, n: int = 32, d: int = 6, k: int = 3) -> Tuple[np.ndarray, np.ndarray]:
    """rank's samples of y = x @ w* + b* (+ noise), float32."""
    t = np.random.default_rng(7)
    w_star = t.standard_normal((d, k)).astype(F32)
    b_star = t.standard_normal(k).astype(F32)
    rng = np.random.default_rng(100 + rank)
    x = rng.standard_normal((n, d)).astype(F32)
    y = (x[:, :, None] * w_star[None]).sum(1) + b_star + F32(0.01) * rng.standard_normal((n, k)).astype(F32)
    return x, y.astype(F32)


def regression_init(d: int = 6, k: int = 3) -> Tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(3)
    return (F32(0.1) * rng.standard_normal((d, k)).astype(F32)), np.zeros(k, F32)


def regression_grads(w: np.ndarray, b: np.ndarray, x: np.ndarray, y: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
    """Gradient of 0.5 * mean squared error over the samples."""
    err = (x[:, :, None] * w[None]).sum(1) + b - y
    inv = F32(1.0 / x.shape[0])
    return ((x[:, :, None] * err[:, None, :]).sum(0) * inv).astype(F32), (err.sum(0) * inv).astype(F32)


def regression_loss(w: np.ndarray, b: np.ndarray, data: List[Tuple[np.ndarray, np.ndarray]]) -> float:
    return float(np.mean([np.mean(((x[:, :, None] * w[None]).sum(1) + b - y).astype(np.float64) ** 2)
                          for x, y in data]))
