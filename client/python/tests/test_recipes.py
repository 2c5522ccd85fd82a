"""The recipes users bring, through every path, against DDP (client/python/tests/recipe_worker.py
trains them; W = 2 processes over gloo and one real server): SGD with momentum, Adam and AdamW
with two param groups, each with gradient clipping, dynamic loss scaling (overflowing on one
rank only), accumulation, per-group LR schedules and resume from state_dict.

- Worker-side DistributedOptimizer (overlap on and off) and the comm hook: bit for bit DDP's
  parameters, losses and loss scales (W = 2: DDP's a/2 + b/2 is gradagg's (a + b) * 0.5).
- Worker-side with int8 gradients both ways: the same bits on every rank, DDP's loss-scale and
  lr sequences, parameters within INT8_TOLERANCE of DDP's.
- Server-side DistributedOptimizer: within 1e-6 relative of DDP for accumulation, schedules and
  resume (the server's float32 optimizer order, docs/protocol.md "Optimizers"); a clip or an
  unscale after backward is a RuntimeError that says what to do, never a step on other values.
"""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, Dict

import pytest
import torch

from _util import run_rank_processes

WORKER = Path(__file__).with_name("recipe_worker.py")
sys.path.insert(0, str(WORKER.parent))
import recipe_worker as rw  # noqa: E402

WORLD = 2
#: How far int8 both ways may end from DDP after the matrix's 24 steps (relative norm of each
#: parameter's difference); measured: at most 0.009 (2026-11-27).
INT8_TOLERANCE = 0.03


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> Dict[int, Dict[Any, Any]]:
    from conftest import Server  # the module's own server: every run of the matrix shares it
    from gradagg import _lib
    tmp = tmp_path_factory.mktemp("recipes")
    server = Server(_lib.server_binary(), tmp, "--max-jobs", "1024", "--max-unused-jobs-per-client", "1024")  # 6 jobs a run, 105 runs
    try:
        run_rank_processes("recipes", lambda r: [str(WORKER), "--rank", str(r), "--world", str(WORLD), "--store",
                                                 str(tmp / "store"), "--server", server.addr, "--out",
                                                 str(tmp / f"{r}.pt")], WORLD, timeout=600)
        return {r: torch.load(tmp / f"{r}.pt") for r in range(WORLD)}
    finally:
        server.stop()


def trained(res: Dict[str, Any], what: str) -> Dict[str, Any]:
    assert "error" not in res, f"{what}: {res['error']}"
    return res


CASES = [(k, r) for k in rw.OPTIMIZERS for r in rw.RECIPES]


@pytest.mark.parametrize("kind,recipe", CASES)
@pytest.mark.parametrize("system", ["worker", "worker-nooverlap", "hook"])
def test_bit_identical_to_ddp(results, kind: str, recipe: str, system: str) -> None:
    for r in range(WORLD):
        ref = trained(results[r][(kind, recipe, "ddp")], "ddp")
        got = trained(results[r][(kind, recipe, system)], system)
        assert torch.equal(torch.tensor(got["losses"]), torch.tensor(ref["losses"])), f"rank {r}"
        assert got["scales"] == ref["scales"] and got["lrs"] == ref["lrs"]
        for i, (p, q) in enumerate(zip(got["params"], ref["params"])):
            assert torch.equal(p, q), f"rank {r} parameter {i}: max diff {(p - q).abs().max().item()}"


@pytest.mark.parametrize("kind", rw.OPTIMIZERS)
@pytest.mark.parametrize("recipe", rw.RECIPES)
def test_int8_keeps_every_recipe(results, kind: str, recipe: str) -> None:
    # int8 both ways (docs/sdk.md, "Adam with int8 gradients"): every rank ends with the same bits,
    # the loss scaler skips exactly DDP's steps (the #nonfinite flag travels in int8 pulls), the
    # schedules are DDP's, and the parameters stay within INT8_TOLERANCE of DDP's.
    ref = trained(results[0][(kind, recipe, "ddp")], "ddp")
    got = [trained(results[r][(kind, recipe, "worker-int8")], "worker-int8") for r in range(WORLD)]
    for i, (p, q) in enumerate(zip(got[0]["params"], got[1]["params"])):
        assert torch.equal(p, q), f"parameter {i} differs between the ranks"
    assert got[0]["scales"] == ref["scales"] and got[0]["lrs"] == ref["lrs"]
    for i, (p, q) in enumerate(zip(got[0]["params"], ref["params"])):
        rel = ((p - q).norm() / q.norm()).item()
        assert rel <= INT8_TOLERANCE, f"parameter {i}: relative difference {rel:.3g} from DDP"


@pytest.mark.parametrize("kind", rw.OPTIMIZERS)
@pytest.mark.parametrize("recipe", ["accum", "sched", "resume"])
@pytest.mark.parametrize("system", ["server", "server-nooverlap"])
def test_server_side_within_1e6_of_ddp(results, kind: str, recipe: str, system: str) -> None:
    for r in range(WORLD):
        ref = trained(results[r][(kind, recipe, "ddp")], "ddp")
        got = trained(results[r][(kind, recipe, system)], system)
        assert got["lrs"] == ref["lrs"]
        for i, (p, q) in enumerate(zip(got["params"], ref["params"])):
            rel = ((p - q).norm() / q.norm()).item()
            assert rel <= 1e-6, f"rank {r} parameter {i}: relative difference {rel:.3g}"


@pytest.mark.parametrize("kind", rw.OPTIMIZERS)
@pytest.mark.parametrize("recipe", ["clip", "scaler"])
@pytest.mark.parametrize("system", ["server", "server-nooverlap"])
def test_server_side_refuses_changed_gradients(results, kind: str, recipe: str, system: str) -> None:
    for r in range(WORLD):
        res = results[r][(kind, recipe, system)]
        assert "error" in res, f"rank {r}: {system} trained through a {recipe} it cannot apply"
        # the clip, unscale or GradScaler named; or, for an overflowing scaled loss, the gradient refused
        expected = ("after gradagg took it", "second backward", "holds NaN or Inf", "GradScaler.step()")
        assert any(e in res["error"] for e in expected), res["error"]


def test_the_matrix_exercises_its_recipes(results) -> None:
    # The reference itself: the clip binds, the scaler overflows on rank 1 alone at first and
    # skips steps on both ranks, the schedules move each group's lr apart, and training learns.
    for kind in rw.OPTIMIZERS:
        scaled = results[0][(kind, "scaler", "ddp")]
        skipped = [a > b for a, b in zip(scaled["scales"], scaled["scales"][1:])]
        assert any(skipped) and not all(skipped), scaled["scales"]
        lrs = results[0][(kind, "sched", "ddp")]["lrs"]
        assert lrs[-1][0] < lrs[0][0]
        if kind == "adamw2":
            assert lrs[-1][0] / lrs[0][0] != lrs[-1][1] / lrs[0][1]
        for recipe in ("scaler", "accum", "sched", "resume"):
            losses = results[0][(kind, recipe, "ddp")]["losses"]
            assert min(losses[-8:]) < 0.7 * losses[0], (kind, recipe, losses)
        # The plain run (resume: exact, no clip) ends elsewhere: the clip changed the steps.
        clipped = results[0][(kind, "clip", "ddp")]["params"]
        plain = results[0][(kind, "resume", "ddp")]["params"]
        assert any(not torch.allclose(p, q, rtol=1e-3, atol=1e-4) for p, q in zip(clipped, plain))


def readme_recipe() -> str:
    """The README's first PyTorch block: the AdamW recipe users copy."""
    text = (Path(__file__).resolve().parents[3] / "README.md").read_text()
    start = text.index("```python\nfrom gradagg.torch import DistributedOptimizer")
    return text[start + len("```python\n"):text.index("```", start + 3)]


def test_readme_recipe_runs_as_written(server) -> None:
    # The block as printed, its server address the test's: one rank trains a small model with
    # it and ends bit-identical to the same lines with plain torch.optim.AdamW (W = 1: the mean
    # is the rank's own gradient), with the same scheduled lr.
    code = readme_recipe().replace('"127.0.0.1:7070"', repr(server.addr))
    assert "optimizer=adamw" in code and "clip_grad_norm_" in code and "OneCycleLR" in code

    def run(source: str) -> Dict[str, Any]:
        torch.manual_seed(3)
        model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.LayerNorm(16), torch.nn.Linear(16, 2))
        g = torch.Generator().manual_seed(4)
        batches = [(x, x @ rw.TEACHER) for x in (torch.randn(16, 8, generator=g) for _ in range(12))]
        scope: Dict[str, Any] = dict(torch=torch, model=model, batches=batches, rank=0,
                                     loss_fn=torch.nn.functional.mse_loss)
        exec(compile(source, "README.md", "exec"), scope)
        if "opt" in scope and hasattr(scope["opt"], "close"):
            scope["opt"].close()
        return dict(params=[p.detach().clone() for p in model.parameters()], lr=scope["sched"].get_last_lr())

    plain = ("import torch\nclass DistributedOptimizer(torch.optim.Optimizer):\n"
             "    def __new__(cls, named, optimizer, **kw):\n        return optimizer\n")
    got = run(code.replace("world_size=4", "world_size=1"))
    ref = run(plain + code.split("\n", 1)[1])
    assert got["lr"] == ref["lr"]
    for p, q in zip(got["params"], ref["params"]):
        assert torch.equal(p, q)
