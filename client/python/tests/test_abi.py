"""The ctypes mirrors against the library's own layouts, and how the library is found."""
from __future__ import annotations

import ctypes
import os
import subprocess
import sys
from pathlib import Path

import pytest

import gradagg
from gradagg import _lib, _structs as S

PKG = str(Path(__file__).resolve().parents[1])


def test_structs_match_the_library() -> None:
    assert S.abi_mismatches(_lib.ga_client_abi_layout) == []
    # Spot checks that the query itself answers, so an all-zero answer cannot pass.
    assert _lib.ga_client_abi_layout(b"ga_client_options", None) == ctypes.sizeof(S.ClientOptions)
    assert _lib.ga_client_abi_layout(b"ga_tensor_options", b"device") == S.TensorOptions.device.offset > 0
    assert _lib.ga_client_abi_layout(b"ga_no_such_type", None) == S.ABI_UNKNOWN


def test_a_wrong_layout_is_reported() -> None:
    def shifted(t: bytes, f: bytes | None) -> int:
        m = S.MIRRORS[t.decode()]
        if f is None:
            return ctypes.sizeof(m)
        off = getattr(m, f.decode()).offset
        return off + 4 if (t, f) == (b"ga_tensor_options", b"device") else off

    assert S.abi_mismatches(shifted) == [
        f"offsetof(ga_tensor_options, device): library {S.TensorOptions.device.offset + 4}, "
        f"binding {S.TensorOptions.device.offset}"]
    with pytest.raises(ImportError, match="offsetof\\(ga_tensor_options, device\\)"):
        S.check_abi(shifted, "libfake.so")


def test_library_search_order_and_failure() -> None:
    env = dict(os.environ, PYTHONPATH=PKG, GRADAGG_LIB="/nonexistent/libgradagg.so")
    r = subprocess.run([sys.executable, "-c", "import gradagg"], env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode != 0
    assert "ImportError: gradagg: cannot load libgradagg.so; tried:" in r.stderr
    assert "/nonexistent/libgradagg.so ($GRADAGG_LIB)" in r.stderr
    env["GRADAGG_LIB"] = gradagg.LIBRARY_PATH
    r = subprocess.run([sys.executable, "-c", "import gradagg, sys; print(gradagg.LIBRARY_PATH); "
                        "print('torch' in sys.modules)"], env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == [gradagg.LIBRARY_PATH, "False"]  # gradagg never imports torch itself


def test_sanitizer_builds_are_not_searched(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name, cache, sanitized in [("asan", "GA_SANITIZE:STRING=address\n", True),
                                   ("tsan", "X:BOOL=ON\nGA_SANITIZE:STRING=thread\n", True),
                                   ("plain", "GA_SANITIZE:STRING=\n", False), ("none", None, False)]:
        build = tmp_path / name
        build.mkdir()
        if cache is not None:
            (build / "CMakeCache.txt").write_text(cache)
        assert _lib._sanitizer_build(build) is sanitized, name
    monkeypatch.delenv("GRADAGG_LIB", raising=False)
    searched = [Path(p).parents[1] for p, origin in _lib._candidates() if origin == "repo build"]
    assert not any(_lib._sanitizer_build(b) for b in searched), searched


def test_module_helpers() -> None:
    assert gradagg.codecs() == ["none", "fp16", "bf16", "2bit", "1bit", "1bit_scaled", "topk", "int8", "int4"]
    assert gradagg.codec_id("topk") == 6
    assert isinstance(gradagg.cuda_built(), bool)
    assert gradagg.cuda_device_count() >= 0
    if not gradagg.cuda_built():
        assert gradagg.cuda_device_count() == 0
