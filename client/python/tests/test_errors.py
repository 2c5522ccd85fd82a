"""Status -> exception mapping, and the errors of the library as Python sees them."""
from __future__ import annotations

import numpy as np
import pytest

import gradagg
from gradagg import _lib, errors
from _util import FAST, F32


def test_one_class_per_status() -> None:
    assert sorted(errors.BY_STATUS) == list(range(-47, 0))
    names = set()
    for st, cls in errors.BY_STATUS.items():
        assert cls.status == st
        assert "GA_" + cls.name == _lib.ga_status_name(st).decode()
        assert issubclass(cls, gradagg.GradaggError)
        e = errors.error_for(st)
        assert type(e) is cls and str(e) == _lib.ga_strerror(st).decode()
        names.add(cls.__name__)
        assert getattr(errors, cls.__name__) is cls
    assert len(names) == 47
    assert errors.NonFiniteError.name == "E_NONFINITE" and errors.NonFiniteError.status == -7
    assert issubclass(errors.NonFiniteError, errors.InvalidArgumentError)
    assert issubclass(errors.JobConfigError, errors.JobError)
    assert issubclass(errors.ConfigError, errors.InvalidArgumentError)
    for n in ("ServerUnavailableError", "DrainingError", "DeadlineError", "CancelledError", "TransportError"):
        assert issubclass(getattr(errors, n), errors.UnavailableError)
    for n in ("UnauthenticatedError", "PermissionDeniedError"):
        assert issubclass(getattr(errors, n), errors.AuthError)
    assert issubclass(errors.NoCudaError, errors.DeviceError)
    # An unknown status still maps to a GradaggError.
    e = errors.error_for(-1000, "odd")
    assert type(e) is gradagg.GradaggError and e.status == -1000 and e.name == "UNKNOWN" and str(e) == "odd"


def test_bad_codec_name(server, job) -> None:
    with pytest.raises(errors.CodecError, match="unknown codec 'zip'"):
        gradagg.codec_id("zip")
    with pytest.raises(errors.CodecError):
        gradagg.Client(server.addr, job, 0, 1, pull_codec="zip", **FAST)
    with gradagg.Client(server.addr, job, 0, 1, **FAST) as c:
        with pytest.raises(errors.CodecError) as ei:
            c.add_tensor("w", np.zeros(4, F32), codec="3bit")
        assert ei.value.status == -3 and ei.value.name == "E_CODEC"
        assert c.tensors == []


def test_job_config_conflict(server, job) -> None:
    with gradagg.Client(server.addr, job, 0, 2, optimizer=gradagg.SGD(lr=0.1), **FAST):
        with pytest.raises(errors.JobConfigError) as ei:
            gradagg.Client(server.addr, job, 1, 2, optimizer=gradagg.SGD(lr=0.2), **FAST)
    e = ei.value
    assert e.status == -27 and e.name == "E_JOB_CONFIG"
    # The library's message (which call, which job, the server's reason), not only the status text.
    assert f"join job '{job}' rank 1" in str(e) and "E_JOB_CONFIG" in str(e)


def test_options_checked_by_the_library(server, job) -> None:
    with pytest.raises(errors.ConfigError, match="rank 3 outside"):
        gradagg.Client(server.addr, job, 3, 2, **FAST)
    with pytest.raises(errors.ConfigError, match="sgd lr"):
        gradagg.Client(server.addr, job, 0, 1, optimizer=gradagg.SGD(lr=0.1, momentum=1.5), **FAST)
    with gradagg.Client(server.addr, job, 0, 1, **FAST) as c:
        with pytest.raises(errors.ThresholdError):
            c.add_tensor("w", np.zeros(4, F32), codec="2bit", threshold=-1.0)
        with pytest.raises(errors.ConfigError, match="DGC momentum 1 outside"):
            c.add_tensor("w", np.zeros(4, F32), codec="topk", dgc=gradagg.DGC(momentum=1.0))
        with pytest.raises(errors.InvalError, match="before init"):
            c.step([])


def test_python_checks_before_c(server, job) -> None:
    for bad, exc in ((-1, ValueError), (2.0, TypeError), (1 << 40, ValueError)):
        with pytest.raises(exc):
            gradagg.Client(server.addr, job, bad, 4, **FAST)
    with pytest.raises(ValueError, match="mode"):
        gradagg.Client(server.addr, job, 0, 1, mode="eventual", **FAST)
    with pytest.raises(TypeError, match="optimizer"):
        gradagg.Client(server.addr, job, 0, 1, optimizer="sgd", **FAST)  # type: ignore[arg-type]
    w = np.zeros((2, 3), F32)
    with gradagg.Client(server.addr, job, 0, 1, optimizer=gradagg.SGD(lr=1.0), **FAST) as c:
        with pytest.raises(TypeError, match="float32"):
            c.add_tensor("d", np.zeros(3, np.float64))
        with pytest.raises(ValueError, match="C-contiguous"):
            c.add_tensor("t", np.zeros((3, 2), F32).T)
        ro = np.zeros(3, F32)
        ro.flags.writeable = False
        with pytest.raises(ValueError, match="read-only"):
            c.add_tensor("r", ro)
        with pytest.raises(TypeError, match="list"):
            c.add_tensor("l", [1.0, 2.0])
        with pytest.raises(ValueError, match="'auto'"):
            c.add_tensor("w", w, codec="2bit", threshold="adaptive")
        assert c.add_tensor("w", w) == 0
        c.init()
        g = np.ones((2, 3), F32)
        cases = [([], ValueError, "0 gradients for 1"), ([g, g], ValueError, "2 gradients"),
                 ([g.astype(np.float64)], TypeError, "float64"), ([np.ones(6, F32)], ValueError, "shape"),
                 ([np.ones((3, 2), F32)], ValueError, "shape"), ([np.ones((3, 2), F32).T], ValueError, "contiguous"),
                 ([None], TypeError, "NoneType"), (g, ValueError, "2 gradients")]
        for grads, exc, msg in cases:
            with pytest.raises(exc, match=msg) as ei:
                c.step(grads)
            assert not isinstance(ei.value, gradagg.GradaggError)
        # None of them reached the library: no step, nothing pushed, parameters untouched.
        assert c.version == 0 and c.stats.steps == 0 and np.all(w == 0)
        c.step([g])
        assert c.version == 1 and np.all(w == -1)


def test_nonfinite_gradient_pushes_nothing(server, job) -> None:
    w = np.zeros(5, F32)
    with gradagg.Client(server.addr, job, 0, 1, optimizer=gradagg.SGD(lr=1.0), **FAST) as c:
        c.add_tensor("w", w, codec="2bit", threshold=0.5)
        c.init()
        bad = np.array([0.3, np.nan, 0.0, 0.0, 0.0], F32)
        with pytest.raises(errors.NonFiniteError) as ei:
            c.step([bad])
        assert ei.value.name == "E_NONFINITE" and str(ei.value)
        assert c.version == 0 and c.stats.bytes_pushed == 0 and np.all(w == 0)
        # The residual did not take the refused gradient: 0.3 alone stays below the threshold
        # (0.3 + 0.3 would have crossed it).
        c.step([np.array([0.3, 0.0, 0.0, 0.0, -0.7], F32)])
        assert c.version == 1
        np.testing.assert_array_equal(w, np.array([0, 0, 0, 0, 0.5], F32))


def test_closed_client(server, job) -> None:
    c = gradagg.Client(server.addr, job, 0, 1, **FAST)
    c.close()
    c.close()
    assert c.closed
    with pytest.raises(RuntimeError, match="closed"):
        c.add_tensor("w", np.zeros(3, F32))
    with pytest.raises(RuntimeError, match="closed"):
        _ = c.version
