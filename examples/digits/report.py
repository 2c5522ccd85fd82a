"""The results as a markdown table and as JSON."""
from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Dict, List, Optional


def _num(x: float, fmt: str) -> str:
    return "n/a" if x is None or (isinstance(x, float) and math.isnan(x)) else format(x, fmt)


def _bytes(b: float) -> str:
    return f"{b:,.0f}"


def table(records: List[Dict[str, Any]], targets: Optional[Dict[str, float]] = None) -> str:
    """Markdown: one row per config. targets maps a config name to its allowed loss in pp
    (default 1.0); the last column says whether the mean difference meets it."""
    head = ("| config | test acc % mean ± sd (min–max) | Δ vs none, pp (mean ± se; worst seed) "
            "| pushed B/step/worker | same, last epoch | pulled B/step/worker | push ratio | target |")
    rows = [head, "|" + "---|" * 8]
    for r in records:
        s = r["summary"]
        limit = (targets or {}).get(r["name"], 1.0)
        diff = s["diff_pp_mean"]
        if r["name"] == "none":
            verdict, delta = "baseline", "—"
        else:
            # accuracies are multiples of 1/360: a mean exactly on the limit must not fail by rounding
            verdict = f"{'yes' if diff >= -limit - 1e-6 else 'NO'} (≤ {limit:g} pp)"
            delta = f"{diff:+.2f} ± {_num(s['diff_pp_se'], '.2f')}; {s['diff_pp_min']:+.2f}"
        acc = f"{s['acc_mean']:.2f} ± {_num(s['acc_sd'], '.2f')} ({s['acc_min']:.2f}–{s['acc_max']:.2f})"
        rows.append(
            f"| {r['name']} | {acc} | {delta} | {_bytes(s['pushed_per_step'])} | {_bytes(s['last_epoch_pushed_per_step'])} "
            f"| {_bytes(s['pulled_per_step'])} | {s['push_ratio']:.1f}x | {verdict} |")
    return "\n".join(rows)


def _strict(v: Any) -> Any:
    """v with every NaN or infinite float as None (JSON null), so strict readers take the file."""
    if isinstance(v, float) and not math.isfinite(v):
        return None
    if isinstance(v, dict):
        return {k: _strict(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_strict(x) for x in v]
    return v


def write_json(path: Path, doc: Dict[str, Any]) -> None:
    """Strict JSON: a statistic that does not exist (the spread of one seed) is null."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(_strict(doc), indent=1, allow_nan=False) + "\n")
