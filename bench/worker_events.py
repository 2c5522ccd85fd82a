"""What a benchmark worker (bench/netbench_worker.py, bench/trainbench_worker.py) tells its
orchestrator: one JSON object per line on stdout ("ready", "done", "error", ...), and the
argument parsing both share."""
import json
from typing import Any, Dict, Optional


def emit(obj: Dict[str, Any]) -> None:
    """One event, as a JSON line, flushed at once (the orchestrator reads the pipe as it comes)."""
    print(json.dumps(obj), flush=True)


def fail(rank: int, e: BaseException) -> int:
    """Reports an exception as an "error" event (the orchestrator records the row as failed) and
    returns the worker's exit status, 1."""
    emit({"event": "error", "rank": rank, "error": f"{type(e).__name__}: {e}"})
    return 1


def opt_float(v: str) -> Optional[float]:
    """An optional float argument: "" or "none" for None."""
    return None if v in ("", "none") else float(v)
