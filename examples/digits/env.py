"""Where the examples find gradagg: the build tree's gradagg-server and libgradagg.so."""
from __future__ import annotations

import os
import platform
import signal
import sys
from datetime import date
from pathlib import Path
from typing import Any, Dict

REPO = Path(__file__).resolve().parents[2]


def gradagg_package() -> Any:
    """The gradagg package as installed (pip install ./client/python), else this checkout's
    (client/python, with the library of a build tree or $GRADAGG_LIB)."""
    try:
        import gradagg
    except ImportError:
        sys.path.insert(0, str(REPO / "client" / "python"))
        import gradagg
    return gradagg


def use_build(build: Path) -> Path:
    """Points the gradagg package at build/client/libgradagg.so (through $GRADAGG_LIB, so worker
    processes load the same one) and returns build/service/gradagg-server. Raises SystemExit
    with what to build when either is missing."""
    lib = build / "client" / "libgradagg.so"
    server = build / "service" / "gradagg-server"
    missing = [str(p) for p in (lib, server) if not p.exists()]
    if missing:
        raise SystemExit(f"missing {', '.join(missing)}: build them first, e.g.\n"
                         f"  cmake -S . -B {build} -G Ninja -DCMAKE_BUILD_TYPE=Release -DGA_WITH_CUDA=OFF && "
                         f"ninja -C {build} gradagg-server gradagg_shared")
    os.environ["GRADAGG_LIB"] = str(lib.resolve())
    return server


def machine() -> Dict[str, Any]:
    """What the figures were measured on."""
    import torch
    return {"date": date.today().isoformat(), "platform": platform.platform(), "cpus": os.cpu_count(),
            "python": platform.python_version(), "torch": torch.__version__}


def exit_on_sigterm() -> None:
    """SIGTERM unwinds like ^C (SystemExit 143), so the server and the workers are stopped by
    their context managers instead of being left behind."""
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
