"""The main job's code (examples/digits_run.py, what scripts/run runs) end to end, shortened: a
real server, 4 worker processes, 2bit with the automatic threshold and uncompressed, the table
and the plot. The accuracy gate is scripts/run's; here the run is too short for it (2 epochs),
so only the loss going down and the artefacts are checked."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from _util import build_dir, child_env

REPO = Path(__file__).resolve().parents[3]


def test_digits_main_job_runs_end_to_end(tmp_path: Path) -> None:
    build = build_dir()
    env = child_env()
    r = subprocess.run([sys.executable, str(REPO / "examples" / "digits_run.py"), "--build", str(build),
                        "--out", str(tmp_path), "--seeds", "1", "--epochs", "2", "--max-loss-pp", "100"],
                       env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert (tmp_path / "digits.png").stat().st_size > 10_000
    # Strict JSON: one seed has no spread, written as null, never NaN.
    result = json.loads((tmp_path / "digits.json").read_text(),
                        parse_constant=lambda c: pytest.fail(f"digits.json is not strict JSON: {c}"))
    configs = {c["name"]: c for c in result["configs"]}
    assert set(configs) == {"none", "2bit auto 1.0 bit"}
    for c in configs.values():
        (run,) = c["runs"]
        loss = run["curves"]["train_loss"]
        assert len(loss) == 2 and loss[1] < loss[0] < 2.3, (c["name"], loss)  # ln 10 = 2.30: chance
        assert run["test_acc"] > 0.8, (c["name"], run["test_acc"])
    # 2 bits against 32 per element, plus the 2bit words' padding: 16x fewer bytes pushed.
    ratio = configs["none"]["runs"][0]["pushed_per_step"] / configs["2bit auto 1.0 bit"]["runs"][0]["pushed_per_step"]
    assert 15.5 < ratio < 16.5, ratio
    assert "gradagg-server stopped cleanly (SIGTERM, exit 0)" in r.stdout
