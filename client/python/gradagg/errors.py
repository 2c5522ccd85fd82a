"""Exceptions for the library's ga_status values: one class per status, generated at import from
ga_status_name / ga_strerror (ga_status.h), grouped under a few bases.

    GradaggError                 .status (int), .name ("E_NONFINITE"), str() = the library's message
    +- InvalidArgumentError      bad arguments, codec or optimizer parameters, configuration
    +- UnavailableError          the server could not be reached or the call did not finish;
    |                            a step that failed with one may or may not have been counted
    +- AuthError                 missing or wrong credentials (never retried)
    +- JobError                  job, rank, membership, tensor and step conflicts
    +- ProtocolError             malformed or inconsistent messages (a bug or a version skew)
    +- ResourceError             memory, server limits, I/O
    +- DeviceError               CUDA absent or failing

Python-side checks that run before any C call raise the built-in TypeError or ValueError,
never a GradaggError: a GradaggError always comes from the library.
"""
from __future__ import annotations

from typing import Dict, Optional, Type

from . import _lib


class GradaggError(Exception):
    """An error status from libgradagg."""

    status: int = 0
    name: str = ""

    def __init__(self, message: str = "", status: Optional[int] = None) -> None:
        if status is not None:
            self.status = status
            self.name = status_name(status)
        super().__init__(message or strerror(self.status))

    @property
    def message(self) -> str:
        return str(self)


class InvalidArgumentError(GradaggError):
    """Bad arguments, codec or optimizer parameters, or configuration."""


class UnavailableError(GradaggError):
    """The server was unreachable, draining, too slow or the call broke (after the retries)."""


class AuthError(GradaggError):
    """Missing, malformed or refused credentials."""


class JobError(GradaggError):
    """A conflict with the job's state: its configuration, ranks, membership, tensors or steps."""


class ProtocolError(GradaggError):
    """A malformed or inconsistent message."""


class ResourceError(GradaggError):
    """Memory, a server limit, or I/O."""


class DeviceError(GradaggError):
    """CUDA is not built in, no device is usable, or the CUDA runtime failed."""


# Status name -> base. A status missing here (added to ga_status.h later) gets GradaggError.
_GROUPS: Dict[str, Type[GradaggError]] = {}
for _base, _names in (
    (InvalidArgumentError, "INVAL CODEC THRESHOLD RATIO NONFINITE RANGE TOO_LARGE BACKEND OPTIM CONFIG"),
    (UnavailableError, "UNAVAILABLE DRAINING DEADLINE CANCELLED TRANSPORT"),
    (AuthError, "UNAUTHENTICATED PERMISSION_DENIED"),
    (JobError, "UNKNOWN_JOB UNKNOWN_TENSOR RANK RANK_HELD STALE NOT_MEMBER JOB_CONFIG SHAPE "
               "STEP_CLOSED STEP_FUTURE VERSION RANK_FAILED ROLLED_BACK"),
    (ProtocolError, "LENGTH INDEX_RANGE INDEX_ORDER CAPACITY VARINT PROTO UNIMPLEMENTED COVERAGE "
                    "STREAM_MIXED UNKNOWN_SERVICE"),
    (ResourceError, "NOMEM LIMIT IO BUSY"),
    (DeviceError, "NO_CUDA NO_DEVICE CUDA"),
):
    for _n in _names.split():
        _GROUPS["E_" + _n] = _base

# Class names where the mechanical CamelCase reads badly or would hide a base class.
_CLASS_NAMES = {
    "E_INVAL": "InvalError",
    "E_NOMEM": "OutOfMemoryError",
    "E_NONFINITE": "NonFiniteError",
    "E_UNAVAILABLE": "ServerUnavailableError",
    "E_IO": "IoError",
}

#: Lowest status value probed; ga_status.h has -1..-47, a few spare for later additions.
_LOWEST = -128


def status_name(status: int) -> str:
    """"E_NONFINITE" for -7 (ga_status_name without its "GA_" prefix)."""
    raw = _lib.ga_status_name(status) or b"GA_UNKNOWN"
    name = raw.decode()
    return name[3:] if name.startswith("GA_") else name


def strerror(status: int) -> str:
    """The library's short description of a status."""
    raw = _lib.ga_strerror(status)
    return raw.decode() if raw else f"status {status}"


def _class_name(name: str) -> str:
    if name in _CLASS_NAMES:
        return _CLASS_NAMES[name]
    return "".join(w.capitalize() for w in name[2:].split("_")) + "Error"


#: status value -> exception class.
BY_STATUS: Dict[int, Type[GradaggError]] = {}


def _generate() -> None:
    for st in range(-1, _LOWEST - 1, -1):
        name = status_name(st)
        if name == "UNKNOWN":
            continue
        base = _GROUPS.get(name, GradaggError)
        doc = f"{name} ({st}): {strerror(st)}."
        cls = type(_class_name(name), (base,), {"status": st, "name": name, "__doc__": doc, "__module__": __name__})
        globals()[cls.__name__] = cls
        BY_STATUS[st] = cls


_generate()


def error_for(status: int, message: str = "") -> GradaggError:
    """The exception for a status, with the library's message (its short description when empty)."""
    cls = BY_STATUS.get(status)
    if cls is None:
        return GradaggError(message, status)
    return cls(message)


__all__ = ["GradaggError", "InvalidArgumentError", "UnavailableError", "AuthError", "JobError", "ProtocolError",
           "ResourceError", "DeviceError", "error_for", "status_name", "strerror", "BY_STATUS"] + \
          sorted(c.__name__ for c in BY_STATUS.values())


def __getattr__(name: str) -> Type[GradaggError]:
    # Only reached for names _generate() did not define; tells type checkers that the
    # generated per-status classes (NonFiniteError, JobConfigError, ...) are GradaggError types.
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
