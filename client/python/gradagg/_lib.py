"""Loading libgradagg.so and declaring the C prototypes (gradagg.h, ga_status.h, ga_codec.h).

Search order, first that loads wins:
  1. ``$GRADAGG_LIB`` (a path to the shared object; nothing else is tried when it is set),
  2. ``libgradagg.so`` inside this package (what ``pip install ./client/python`` puts there),
  3. ``<repo>/build/*/client/libgradagg.so``, newest first (the in-tree CMake builds), except
     sanitizer builds (``GA_SANITIZE`` set: their runtime must come first in the process, and
     loading one into Python aborts it rather than failing),
  4. ``ctypes.util.find_library("gradagg")`` (an installed library).
"""
from __future__ import annotations

import ctypes
import ctypes.util
import os
from pathlib import Path
from typing import List, Optional, Tuple

from . import _structs as S

#: <repo>, from client/python/gradagg/_lib.py.
REPO_ROOT = Path(__file__).resolve().parents[3]


def _sanitizer_build(build: Path) -> bool:
    """Whether the CMake build in build/ was configured with a sanitizer (GA_SANITIZE non-empty)."""
    try:
        cache = (build / "CMakeCache.txt").read_text(errors="replace")
    except OSError:
        return False
    return any(line.startswith("GA_SANITIZE:") and line.split("=", 1)[1].strip() for line in cache.splitlines())


def _candidates() -> List[Tuple[str, str]]:
    """(path, where it came from) in search order."""
    env = os.environ.get("GRADAGG_LIB")
    if env:
        return [(env, "$GRADAGG_LIB")]
    out: List[Tuple[str, str]] = []
    bundled = Path(__file__).resolve().parent / "libgradagg.so"
    if bundled.exists():
        out.append((str(bundled), "the installed package"))
    found = sorted((p for p in REPO_ROOT.glob("build/*/client/libgradagg.so")
                    if p.exists() and not _sanitizer_build(p.parents[1])),
                   key=lambda p: p.stat().st_mtime, reverse=True)
    out += [(str(p), "repo build") for p in found]
    name = ctypes.util.find_library("gradagg")
    if name:
        out.append((name, "ctypes.util.find_library"))
    return out


def _load() -> Tuple[ctypes.CDLL, str]:
    tried: List[str] = []
    for path, origin in _candidates():
        try:
            return ctypes.CDLL(path), path
        except OSError as e:
            # An ASan build, for one, cannot load into a plain interpreter: try the next.
            tried.append(f"  {path} ({origin}): {e}")
    if not tried:
        tried.append(f"  $GRADAGG_LIB: not set\n  {REPO_ROOT}/build/*/client/libgradagg.so: none\n"
                     "  ctypes.util.find_library('gradagg'): not found")
    raise ImportError("gradagg: cannot load libgradagg.so; tried:\n" + "\n".join(tried) +
                      "\nBuild it (ninja -C build/dev gradagg_shared) or set GRADAGG_LIB to its path.")


lib, LIBRARY_PATH = _load()


def _fn(name: str, restype, argtypes) -> ctypes._CFuncPtr:  # type: ignore[name-defined]
    """Declares lib.<name>; ImportError when the library lacks it (a build older than this package)."""
    f = getattr(lib, name, None)
    if f is None:
        raise ImportError(f"gradagg: {LIBRARY_PATH} does not export {name}: it is older than this package; rebuild it")
    f.restype = restype
    f.argtypes = argtypes
    return f


c_char_p, c_int, c_size_t, c_void_p = ctypes.c_char_p, ctypes.c_int, ctypes.c_size_t, ctypes.c_void_p
P = ctypes.POINTER

ga_status_name = _fn("ga_status_name", c_char_p, [c_int])
ga_strerror = _fn("ga_strerror", c_char_p, [c_int])
ga_codec_name = _fn("ga_codec_name", c_char_p, [c_int])
ga_codec_from_name = _fn("ga_codec_from_name", c_int, [c_char_p, P(c_int)])
ga_codec_params_default = _fn("ga_codec_params_default", S.CodecParams, [c_int])
ga_codec_has_residual = _fn("ga_codec_has_residual", ctypes.c_bool, [c_int])
ga_cuda_built = _fn("ga_cuda_built", ctypes.c_bool, [])
ga_cuda_device_count = _fn("ga_cuda_device_count", c_int, [])

ga_client_options_from_env = _fn("ga_client_options_from_env", c_int, [P(S.ClientOptions), ctypes.c_char_p, c_size_t])
ga_client_create = _fn("ga_client_create", c_int, [P(S.ClientOptions), P(c_void_p), ctypes.c_char_p, c_size_t])
ga_client_destroy = _fn("ga_client_destroy", None, [c_void_p])
ga_client_destroy_failed = _fn("ga_client_destroy_failed", None, [c_void_p, c_char_p])
ga_job_delete = _fn("ga_job_delete", c_int, [c_void_p, c_char_p, c_size_t])
ga_client_add_tensor = _fn("ga_client_add_tensor", c_int,
                           [c_void_p, c_char_p, P(ctypes.c_uint64), c_int, c_void_p, P(S.TensorOptions), P(c_int)])
ga_client_init = _fn("ga_client_init", c_int, [c_void_p])
ga_client_step = _fn("ga_client_step", c_int, [c_void_p, P(c_void_p)])
ga_client_step_start = _fn("ga_client_step_start", c_int, [c_void_p, P(c_void_p)])
ga_client_step_poll = _fn("ga_client_step_poll", c_int, [c_void_p, P(ctypes.c_bool)])
ga_client_step_wait = _fn("ga_client_step_wait", c_int, [c_void_p])
ga_client_set_epoch = _fn("ga_client_set_epoch", None, [c_void_p, ctypes.c_uint32])
ga_client_set_lr = _fn("ga_client_set_lr", ctypes.c_int, [c_void_p, ctypes.c_float])
ga_client_state_size = _fn("ga_client_state_size", c_size_t, [c_void_p])
ga_client_state_save = _fn("ga_client_state_save", c_int, [c_void_p, c_void_p, c_size_t, P(c_size_t)])
ga_client_state_load = _fn("ga_client_state_load", c_int, [c_void_p, c_char_p, c_size_t])
ga_client_version = _fn("ga_client_version", ctypes.c_uint64, [c_void_p])
ga_client_rank = _fn("ga_client_rank", ctypes.c_uint32, [c_void_p])
ga_client_error = _fn("ga_client_error", c_char_p, [c_void_p])
ga_client_get_stats = _fn("ga_client_get_stats", None, [c_void_p, P(S.ClientStats)])
ga_client_tensor_threshold = _fn("ga_client_tensor_threshold", c_int,
                                 [c_void_p, c_int, P(ctypes.c_float), P(ctypes.c_float)])
ga_client_abi_layout = _fn("ga_client_abi_layout", c_size_t, [c_char_p, c_char_p])

S.check_abi(ga_client_abi_layout, LIBRARY_PATH)


def server_binary() -> Optional[str]:
    """gradagg-server of the same build as the loaded library ($GRADAGG_SERVER_BIN first), or None."""
    env = os.environ.get("GRADAGG_SERVER_BIN")
    if env:
        return env
    p = Path(LIBRARY_PATH).resolve().parent.parent / "service" / "gradagg-server"
    return str(p) if p.is_file() else None
