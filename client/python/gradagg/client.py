"""gradagg.Client: one rank of one job, over ga_client (gradagg.h).

Every call goes to libgradagg; this module converts arguments, checks Python-side types before
any C call (TypeError / ValueError), keeps the registered arrays alive for as long as the C
client may write into them, and turns error statuses into gradagg.errors exceptions carrying
ga_client_error's message.

Threads: ctypes releases the GIL during each library call, so clients in different threads
step concurrently. One client is used by one thread at a time (gradagg.h); a lock serialises
calls on the same client rather than letting two race inside the library.
"""
from __future__ import annotations

import ctypes
import math
import multiprocessing
import multiprocessing.process
import multiprocessing.util
import os
import signal
import sys
import threading
import weakref
from dataclasses import dataclass
from typing import Any, List, Optional, Sequence, Tuple, Union

from . import _lib, _structs as S
from ._arrays import describe, synchronize
from .errors import error_for
from .launch import fill_options, from_environment
from .options import DGC, SGD, Adam, Stats

ArrayLike = Any  # numpy.ndarray | torch.Tensor (torch is optional)
Threshold = Union[float, str, None]

_RETRIES_UNBOUNDED = 0xFFFFFFFF  # GA_RETRIES_UNBOUNDED: retry_budget_ms alone bounds the retries
_RANK_ANY = 0xFFFFFFFF  # GA_RANK_ANY: an elastic job's server picks the rank
_MODES = {"sync": 0, "async": 1}
_AUTO_LEVELS = ("mean", "threshold")  # ga_auto_level, in enum order
_OPTIM_NONE, _OPTIM_SGD, _OPTIM_ADAM, _OPTIM_REDUCE = 0, 1, 2, 3
_U32 = (1 << 32) - 1
_U64 = (1 << 64) - 1


def codecs() -> List[str]:
    """Codec names the library knows, by wire id ("none", "fp16", ..., "topk")."""
    out: List[str] = []
    i = 0
    while True:
        name = _lib.ga_codec_name(i)
        if not name:
            return out
        out.append(name.decode())
        i += 1


def lane_job(job: str, k: int) -> str:
    """The job of lane k of `job` (docs/protocol.md, "Lanes"): the job itself for k = 0,
    "<job>/lane<k>" after."""
    return job if k == 0 else f"{job}/lane{k}"


def codec_has_residual(name: str) -> bool:
    """True for the codecs that keep an error-feedback residual on the sender (2bit, 1bit,
    1bit_scaled, topk, int8, int4): they send part of each gradient and carry the rest to later
    steps."""
    return bool(_lib.ga_codec_has_residual(codec_id(name)))


def codec_id(name: str) -> int:
    """The wire id of a codec name; gradagg.errors.CodecError for an unknown one."""
    if not isinstance(name, str):
        raise TypeError(f"codec: {type(name).__name__}, expected a codec name (str)")
    out = ctypes.c_int()
    st = _lib.ga_codec_from_name(name.encode(), ctypes.byref(out))
    if st != 0:
        raise error_for(st, f"unknown codec {name!r} (known: {', '.join(codecs())})")
    return out.value


def cuda_built() -> bool:
    """True when libgradagg was built with CUDA."""
    return bool(_lib.ga_cuda_built())


def cuda_device_count() -> int:
    """Usable CUDA devices: 0 without CUDA in the library, a driver, or a GPU."""
    return int(_lib.ga_cuda_device_count())


def _uint(what: str, v: Any, top: int = _U32) -> int:
    # ctypes would silently wrap -1 into 4294967295: check first.
    if isinstance(v, bool) or not isinstance(v, int):
        raise TypeError(f"{what}: {type(v).__name__}, expected int")
    if not 0 <= v <= top:
        raise ValueError(f"{what}: {v} outside [0, {top}]")
    return v


def _float(what: str, v: Any) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise TypeError(f"{what}: {type(v).__name__}, expected float")
    return float(v)


def _opt_str(v: Optional[str]) -> Optional[bytes]:
    return None if v is None else str(v).encode()


_TOPK_VALUES = ("fp32", "fp16")      # ga_topk_values, in enum order
_TOPK_INDICES = ("int32", "varint")  # ga_topk_indices, in enum order


def codec_params(codec: int, threshold: Optional[float] = None, ratio: Optional[float] = None,
                 topk_values: Optional[str] = None, topk_indices: Optional[str] = None) -> S.CodecParams:
    """ga_codec_params_default(codec) with the given fields replaced (the library validates)."""
    p = _lib.ga_codec_params_default(codec)
    if threshold is not None:
        p.threshold = _float("threshold", threshold)
    if ratio is not None:
        p.ratio = _float("ratio", ratio)
    if topk_values is not None:
        if topk_values not in _TOPK_VALUES:
            raise ValueError(f"topk_values: {topk_values!r}, expected one of {_TOPK_VALUES}")
        p.topk_values = _TOPK_VALUES.index(topk_values)
    if topk_indices is not None:
        if topk_indices not in _TOPK_INDICES:
            raise ValueError(f"topk_indices: {topk_indices!r}, expected one of {_TOPK_INDICES}")
        p.topk_indices = _TOPK_INDICES.index(topk_indices)
    return p


@dataclass(frozen=True)
class TensorInfo:
    """A registered tensor: its name, shape, element count, codec, and where its data lives."""
    name: str
    shape: Tuple[int, ...]
    size: int
    codec: str
    cuda_device: Optional[int]
    ptr: int



def failure_text(exc: BaseException) -> str:
    """What a failed rank tells the job: the exception's type and message, on one line."""
    return f"{type(exc).__name__}: {exc}".replace("\n", " ")[:200]


#: Clients not closed yet: an exception that ends the program closes them as failed.
_open_clients: "weakref.WeakSet[Client]" = weakref.WeakSet()
_hook_installed = False


def _install_excepthook() -> None:
    """Once: an exception that ends the program closes every open client as failed before the
    previous hook reports it, so the other ranks learn of it at once, not a lease later."""
    global _hook_installed
    if _hook_installed:
        return
    _hook_installed = True
    previous = sys.excepthook

    def hook(tp: Any, value: BaseException, tb: Any) -> None:
        for client in list(_open_clients):
            try:
                client.close(failure_text(value))
            except Exception:  # noqa: BLE001 - the original exception is the one to report
                pass
        previous(tp, value, tb)

    sys.excepthook = hook


#: The process whose exit finalizer is installed (a forked child inherits the parent's globals).
_exit_finalizer_pid = 0
#: The exception that ended this process's multiprocessing target, if one did (_record_child_exits).
_child_exit: List[BaseException] = []


def _record_child_exits() -> None:
    """Once, at import: multiprocessing's child entry (BaseProcess._bootstrap, the same from
    Python 3.8 on) runs the process's run() through a wrapper that records the exception ending
    it. From Python 3.12 multiprocessing runs its finalizers at exit, after it has handled that
    exception, so the exit finalizer can no longer see it as it propagates. A child imports
    gradagg before it starts (spawn unpickles the target, which imports it; fork copies the
    parent, which imported it), so its entry is the wrapped one; a child that imports gradagg only
    inside its target is not watched (its rank is then lost when its lease ends)."""
    process_class = multiprocessing.process.BaseProcess
    bootstrap = getattr(process_class, "_bootstrap", None)
    if bootstrap is None or getattr(bootstrap, "_gradagg_records_exit", False):
        return

    def recording_bootstrap(self: Any, *args: Any, **kwargs: Any) -> Any:
        run = self.run

        def recorded_run() -> Any:
            try:
                return run()
            except BaseException as e:
                _child_exit.append(e)
                raise

        self.run = recorded_run
        return bootstrap(self, *args, **kwargs)

    recording_bootstrap._gradagg_records_exit = True  # type: ignore[attr-defined]
    process_class._bootstrap = recording_bootstrap  # type: ignore[method-assign]


_record_child_exits()


def _install_exit_finalizer() -> None:
    """Once per process that multiprocessing started (torch.multiprocessing.spawn included): an
    exception that ends such a child never reaches sys.excepthook (multiprocessing catches it, or
    torch's spawn turns it into sys.exit(1)), but multiprocessing runs its finalizers as the child
    ends (while it propagates up to Python 3.11, at exit from 3.12: _record_child_exits keeps it).
    This one closes the clients this process opened as failed — naming the exception,
    or the exit status of a SystemExit that is not 0 — so the other ranks learn of it at once,
    not a lease later. A child that returns normally closes nothing here."""
    global _exit_finalizer_pid
    if _exit_finalizer_pid == os.getpid() or multiprocessing.parent_process() is None:
        return
    _exit_finalizer_pid = os.getpid()

    def finalize() -> None:
        exc = _child_exit[-1] if _child_exit else sys.exc_info()[1]
        if exc is None or (isinstance(exc, SystemExit) and exc.code in (None, 0)):
            return
        why = (f"the process exited with status {exc.code} (a multiprocessing child ended by an exception)"
               if isinstance(exc, SystemExit) else failure_text(exc))
        for client in list(_open_clients):
            if client._pid == os.getpid():  # not a forked copy of the parent's clients
                try:
                    client.close(why)
                except Exception:  # noqa: BLE001 - the process is ending with its own error
                    pass

    multiprocessing.util.Finalize(None, finalize, exitpriority=100)


_sigterm_installed = False


def _install_sigterm() -> None:
    """Once, for elastic jobs, where the main thread has the default SIGTERM disposition: a
    SIGTERM (torchrun stopping its workers to change the membership, a node drained or
    preempted) makes every open elastic client leave its job before the process ends as it would
    have, so the others' steps go on at once instead of waiting a lease for the lost rank."""
    global _sigterm_installed
    if _sigterm_installed or threading.current_thread() is not threading.main_thread():
        return
    if signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
        return  # the program's own handler decides
    _sigterm_installed = True

    def handler(signum: int, frame: Any) -> None:
        for client in list(_open_clients):
            if client._elastic:  # stopped, not finished: the job goes on, and is not over
                try:
                    client.close("stopped by SIGTERM")
                except Exception:  # noqa: BLE001 - ending is what matters now
                    pass
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGTERM)

    signal.signal(signal.SIGTERM, handler)


def _options(server: Union[str, Sequence[str]], job: str, rank: Union[int, str], world_size: int, *,
             mean: bool = True, optimizer: Union[SGD, Adam, str, None] = None, mode: str = "sync",
             deadline_ms: int = 0, quorum: int = 0,
             pull_codec: str = "none", pull_threshold: Threshold = None, pull_auto_bits: float = 1.5,
             pull_ratio: Optional[float] = None, chunk_bytes: int = 1 << 20, call_timeout_ms: int = 30000,
             step_timeout_ms: int = 300000, max_retries: Optional[int] = None, backoff_ms: int = 50,
             backoff_max_ms: int = 2000, retry_budget_ms: int = 600000, threads: int = 0, incarnation: int = 0,
             tls_ca_file: Optional[str] = None, tls_cert_file: Optional[str] = None,
             tls_key_file: Optional[str] = None, tls_target_name: Optional[str] = None,
             auth_token: Optional[str] = None, shard_split_elements: int = 1 << 20,
             lanes: int = 1, resume: Optional[bool] = None, min_world_size: Optional[int] = None,
             staleness: int = 0) -> S.ClientOptions:
    """The C options of a Client (see Client for each)."""
    if mode not in _MODES:
        raise ValueError(f"mode: {mode!r}, expected 'sync' or 'async'")
    o = S.ClientOptions()
    o.version = ctypes.sizeof(S.ClientOptions)
    fill_options(o)  # the token and TLS files from the environment, unless given below
    if not isinstance(server, str):
        server = ",".join(str(a) for a in server)
    o.server = server.encode()
    o.job = str(job).encode()
    o.rank = _RANK_ANY if rank == "any" else _uint("rank", rank)
    o.world_size = _uint("world_size", world_size)
    o.incarnation = _uint("incarnation", incarnation, _U64)
    o.mode = _MODES[mode]
    o.mean = bool(mean)
    # The C defaults (GA_CLIENT_OPTIONS_INIT) for the optimizer that is not chosen.
    o.sgd = S.SgdParams(0.01, 0.0, 0.0, False)
    o.adam = S.AdamParams(0.001, 0.9, 0.999, 1e-8, 0.0, False)
    if optimizer is None:
        o.optimizer = _OPTIM_NONE
    elif optimizer == "reduce":
        o.optimizer = _OPTIM_REDUCE
    elif isinstance(optimizer, SGD):
        o.optimizer = _OPTIM_SGD
        o.sgd = S.SgdParams(_float("lr", optimizer.lr), _float("momentum", optimizer.momentum),
                            _float("weight_decay", optimizer.weight_decay), bool(optimizer.nesterov))
    elif isinstance(optimizer, Adam):
        o.optimizer = _OPTIM_ADAM
        o.adam = S.AdamParams(_float("lr", optimizer.lr), _float("beta1", optimizer.beta1),
                              _float("beta2", optimizer.beta2), _float("eps", optimizer.eps),
                              _float("weight_decay", optimizer.weight_decay), bool(optimizer.decoupled))
    else:
        raise TypeError(f"optimizer: {optimizer!r}, expected gradagg.SGD, gradagg.Adam, 'reduce' or None")
    o.deadline_ms = _uint("deadline_ms", deadline_ms)
    o.quorum = _uint("quorum", quorum)
    o.pull_codec = codec_id(pull_codec)
    auto = isinstance(pull_threshold, str)
    if auto and pull_threshold != "auto":
        raise ValueError(f"pull_threshold: {pull_threshold!r}, expected a float, 'auto' or None")
    o.pull_params = codec_params(o.pull_codec, None if auto else pull_threshold, pull_ratio)  # type: ignore[arg-type]
    if auto:
        o.pull_auto_bits = _float("pull_auto_bits", pull_auto_bits)
    o.chunk_bytes = _uint("chunk_bytes", chunk_bytes, _U64)
    o.call_timeout_ms = _uint("call_timeout_ms", call_timeout_ms)
    o.step_timeout_ms = _uint("step_timeout_ms", step_timeout_ms)
    o.max_retries = _RETRIES_UNBOUNDED if max_retries is None else _uint("max_retries", max_retries)
    o.retry_budget_ms = _uint("retry_budget_ms", retry_budget_ms)
    o.backoff_ms = _uint("backoff_ms", backoff_ms)
    o.backoff_max_ms = _uint("backoff_max_ms", backoff_max_ms)
    o.threads = _uint("threads", threads, (1 << 31) - 1)
    for field, value in (("tls_ca_file", tls_ca_file), ("tls_cert_file", tls_cert_file), ("tls_key_file", tls_key_file),
                         ("tls_target_name", tls_target_name), ("auth_token", auth_token)):
        if value is not None:
            setattr(o, field, _opt_str(value))
    o.shard_split_elements = _uint("shard_split_elements", shard_split_elements, _U64)
    o.lanes = _uint("lanes", lanes)
    if resume is not None:  # else the environment's (TORCHELASTIC_RESTART_COUNT), or False
        o.resume = bool(resume)
    if min_world_size is not None:  # else GRADAGG_MIN_WORLD_SIZE, or 0
        o.min_world_size = _uint("min_world_size", min_world_size)
    o.staleness = _uint("staleness", staleness)
    return o


class Client:
    """One worker (one rank of one job) of a gradagg-server.

    Joins at construction (the first rank to join creates the job with these settings; the
    others must pass the same, else gradagg.errors.JobConfigError). Register tensors with
    add_tensor, call init() once, then step(grads) once per training step: it pushes the
    gradients (compressed per tensor) and writes the new parameters into the registered arrays.
    close() (or leaving a ``with`` block) leaves the job and frees the C client.

    optimizer runs on the server: SGD, Adam, None (parameters += the reduced gradient) or
    "reduce" (parameters = the reduced gradient: each version pulled is the step's aggregate, a
    reduce-only job for gradagg.torch.comm_hook). mean: divide the sum by the ranks that
    contributed.
    pull_codec: "none" for fp32 pulls, else the codec of the compressed parameter deltas
    (pull_threshold / pull_ratio its parameters; pull_threshold="auto" with "2bit": the server
    picks each piece's threshold and level at every version for pull_auto_bits bits per element,
    docs/auto-threshold.md). See gradagg.h for the other options.
    resume: a job of this name that finished (every rank left as finished) goes on from where it
    ended; without it such a job is replaced by a fresh one, so a rerun trains from scratch.
    min_world_size > 0 makes the job elastic (docs/protocol.md, "Elastic jobs"): world_size is
    then the most ranks, ranks join and leave the running job at will, and a step closes only
    with at least min_world_size contributors; rank="any" lets the server pick a free rank
    (Client.rank says which). staleness > 0 (sync jobs): a rank may push up to that many steps
    past the open one, from parameters up to that many versions old (docs/protocol.md, "Bounded
    staleness").
    A call that fails because the server is unreachable, draining or stopping is retried with
    backoff for retry_budget_ms (10 minutes: a server's pod restarted or rescheduled; also bounded
    by max_retries when given), so a restart of the server costs the workers only the wait.

    server, job, rank, world_size: each one not given comes from the environment (torchrun's RANK,
    WORLD_SIZE and TORCHELASTIC_RUN_ID, a Kubernetes indexed Job's JOB_COMPLETION_INDEX,
    GRADAGG_SERVER, ...: gradagg.launch, docs/launch.md), as do auth_token and the TLS files.
    server may name several shards, "h1:p1,h2:p2" or a sequence of addresses, in the same order
    on every rank: tensors of at least shard_split_elements elements are cut into one range per
    shard (0 = never), smaller ones go whole to one shard (docs/sdk.md, "Sharding").
    lanes: independent jobs per address that a step pushes one after another and pulls as soon
    as each is in, so pulls overlap pushes on the link (sync only; docs/sdk.md, "Lanes").

    The options and their defaults: mean=True, optimizer=None, mode="sync", deadline_ms=0,
    quorum=0, pull_codec="none", pull_threshold=None, pull_auto_bits=1.5, pull_ratio=None,
    chunk_bytes=1 << 20, call_timeout_ms=30000, step_timeout_ms=300000, max_retries=None,
    backoff_ms=50, backoff_max_ms=2000, retry_budget_ms=600000, threads=0, incarnation=0,
    tls_ca_file, tls_cert_file, tls_key_file, tls_target_name, auth_token (None),
    shard_split_elements=1 << 20, lanes=1, resume and min_world_size from the environment (False
    and 0 without it; docs/launch.md), staleness=0 (the signature of _options).
    """

    _handle: Optional[ctypes.c_void_p] = None
    _elastic = False  # min_world_size > 0: a SIGTERM makes it leave (_install_sigterm)

    def __init__(self, server: Union[str, Sequence[str], None] = None, job: Optional[str] = None,
                 rank: Union[int, str, None] = None, world_size: Optional[int] = None, **options: Any) -> None:
        self._lock = threading.Lock()
        self._tensors: List[TensorInfo] = []
        self._keep: List[ArrayLike] = []  # the registered arrays: the C client writes into them
        self._inited = False
        self._in_flight: Optional[Tuple[Any, Any]] = None  # step_start's pointers and gradients
        launch = from_environment(server, job, rank, world_size)  # rank "any": the server picks it
        o = _options(launch.server, launch.job, launch.rank, launch.world_size, **options)
        self.server, self.job, self.rank, self.world_size = launch.server, launch.job, launch.rank, launch.world_size

        handle = ctypes.c_void_p()
        msg = ctypes.create_string_buffer(1024)
        st = _lib.ga_client_create(ctypes.byref(o), ctypes.byref(handle), msg, len(msg))
        if st != 0:
            raise error_for(st, msg.value.decode(errors="replace"))
        self._handle = handle
        self.rank = int(_lib.ga_client_rank(handle))  # the server's pick for rank="any"
        self._elastic = o.min_world_size > 0
        self._pid = os.getpid()
        _open_clients.add(self)
        _install_excepthook()
        _install_exit_finalizer()
        if self._elastic:
            _install_sigterm()

    # ---- life ----

    def close(self, failure: Optional[str] = None) -> None:
        """Leaves the job (best effort) and frees the C client. Idempotent. The registered arrays
        are released afterwards; they keep the last parameters pulled.

        failure: this rank failed (why, in a few words): the job fails for every other rank,
        naming this one and the reason, unless its straggler policy goes on without it
        (docs/protocol.md, "Failed ranks"). Leaving a ``with`` block by an exception, or an
        exception that ends the program, closes with the exception as the failure."""
        lock = getattr(self, "_lock", None)
        if lock is None:
            return
        with lock:
            h, self._handle = self._handle, None
            if h is not None and h.value:
                if failure is None:
                    _lib.ga_client_destroy(h)  # waits for a step in flight
                else:
                    _lib.ga_client_destroy_failed(h, failure.encode(errors="replace"))
            self._keep = []
            self._in_flight = None
            _open_clients.discard(self)

    @property
    def closed(self) -> bool:
        return self._handle is None

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        self.close(failure_text(exc) if exc is not None else None)

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # interpreter shutdown: the library or its module may be gone
            pass

    def __repr__(self) -> str:
        state = ("closed" if self.closed else "step in flight" if self._in_flight is not None
                 else f"version {self.version}")
        return (f"<gradagg.Client job={self.job!r} rank={self.rank}/{self.world_size} server={self.server!r} "
                f"tensors={len(self._tensors)} {state}>")

    def _h(self) -> ctypes.c_void_p:
        if self._handle is None:
            raise RuntimeError("gradagg.Client is closed")
        if self._in_flight is not None:
            raise RuntimeError("a step started by step_start() is in flight: call step_wait() first")
        return self._handle

    def _fail(self, st: int) -> Exception:
        msg = _lib.ga_client_error(self._handle)
        return error_for(st, msg.decode(errors="replace") if msg else "")

    # ---- tensors ----

    def add_tensor(self, name: str, params: ArrayLike, *, codec: str = "none", threshold: Threshold = None,
                   auto_bits: float = 1.5, auto_smoothing: float = 0.0, auto_sample_fraction: float = 0.0,
                   auto_level: str = "mean", ratio: Optional[float] = None, topk_values: Optional[str] = None,
                   topk_indices: Optional[str] = None, dgc: Optional[DGC] = None) -> int:
        """Registers params (float32, C-contiguous, writable; numpy array or torch tensor, CPU or
        CUDA) under name and returns its index. Before init() only. The client keeps a reference
        to params and the library writes each new parameter version into its memory, so it must
        not be reallocated (for torch: do not assign param.data).

        codec: how this tensor's gradients are pushed (codecs()). threshold: the 2bit/1bit
        threshold, or "auto" for the automatic 2bit threshold targeting auto_bits bits per element
        (auto_smoothing, auto_sample_fraction: 0 = the library's defaults; auto_level "mean" sends
        the mean |x| of the sampled elements at or above t, "threshold" sends t). ratio: the topk keep
        ratio, topk_values ("fp32", "fp16") and topk_indices ("int32", "varint") how its
        payload is written (None: the codec's defaults). dgc: Deep Gradient Compression options
        (a codec with a residual). A torch CUDA tensor is registered as a device tensor (the
        library must be built with CUDA).
        """
        if not isinstance(name, str) or not name:
            raise TypeError("name: expected a non-empty str")
        buf = describe(params, f"add_tensor {name!r}: params", writable=True)
        t = S.TensorOptions()
        t.version = ctypes.sizeof(S.TensorOptions)
        t.codec = codec_id(codec)
        auto = isinstance(threshold, str)
        if auto and threshold != "auto":
            raise ValueError(f"threshold: {threshold!r}, expected a float, 'auto' or None")
        t.params = codec_params(t.codec, None if auto else threshold, ratio,  # type: ignore[arg-type]
                                topk_values, topk_indices)
        if auto:
            if auto_level not in _AUTO_LEVELS:
                raise ValueError(f"auto_level: {auto_level!r}, expected one of {', '.join(_AUTO_LEVELS)}")
            t.auto_threshold = S.AutoThreshold(True, _float("auto_bits", auto_bits),
                                               _float("auto_smoothing", auto_smoothing),
                                               _float("auto_sample_fraction", auto_sample_fraction),
                                               _AUTO_LEVELS.index(auto_level))
        if dgc is not None:
            if not isinstance(dgc, DGC):
                raise TypeError(f"dgc: {type(dgc).__name__}, expected gradagg.DGC or None")
            t.dgc = S.DgcOptions(True, _float("dgc.momentum", dgc.momentum), bool(dgc.nesterov),
                                 bool(dgc.factor_masking), _float("dgc.clip_norm", dgc.clip_norm),
                                 _uint("dgc.warmup_epochs", dgc.warmup_epochs))
        t.device = buf.cuda_device is not None
        shape = buf.shape or (1,)  # a 0-d tensor is one element
        cshape = (ctypes.c_uint64 * len(shape))(*shape)
        index = ctypes.c_int()
        with self._lock:
            h = self._h()
            st = _lib.ga_client_add_tensor(h, name.encode(), cshape, len(shape), buf.ptr, ctypes.byref(t),
                                           ctypes.byref(index))
            if st != 0:
                raise self._fail(st)
            self._keep.append(params)
            self._tensors.append(TensorInfo(name, buf.shape, buf.size, codec, buf.cuda_device, buf.ptr))
        return index.value

    @property
    def tensors(self) -> List[TensorInfo]:
        """The registered tensors, in registration order (the order step() expects)."""
        return list(self._tensors)

    def init(self) -> None:
        """Rank 0 sends every tensor's current values as its initial value; the other ranks
        wait for them (up to step_timeout_ms). Then pulls the job's current version into every
        registered array, so every rank starts from rank 0's values."""
        with self._lock:
            self._sync_devices(range(len(self._tensors)))
            st = _lib.ga_client_init(self._h())
            if st != 0:
                raise self._fail(st)
            self._inited = True

    # ---- steps ----

    def _sync_devices(self, indices: Any) -> None:
        # The library reads device memory on its own stream: torch's queued kernels must be done.
        devs = {self._tensors[i].cuda_device for i in indices} - {None}
        for d in devs:
            synchronize(d)  # type: ignore[arg-type]

    def _grad_pointers(self, grads: Sequence[ArrayLike]) -> Any:
        if isinstance(grads, (str, bytes)) or not hasattr(grads, "__len__"):
            raise TypeError("grads: expected a sequence with one gradient per registered tensor")
        if len(grads) != len(self._tensors):
            raise ValueError(f"grads: {len(grads)} gradients for {len(self._tensors)} registered tensors")
        ptrs = (ctypes.c_void_p * max(1, len(grads)))()
        for i, (g, info) in enumerate(zip(grads, self._tensors)):
            what = f"grads[{i}] ({info.name!r})"
            b = describe(g, what, writable=False)
            if b.shape != info.shape and not (b.size == 1 and info.size == 1):
                raise ValueError(f"{what}: shape {b.shape}, expected {info.shape}")
            if b.cuda_device != info.cuda_device:
                where = lambda d: "host memory" if d is None else f"cuda:{d}"  # noqa: E731
                raise ValueError(f"{what}: in {where(b.cuda_device)}, the tensor is in {where(info.cuda_device)}")
            ptrs[i] = b.ptr
        return ptrs

    def step(self, grads: Sequence[ArrayLike]) -> None:
        """One training step: grads[i] is the gradient of tensor i (registration order), with
        the tensor's shape, float32, contiguous, on the tensor's device. Pushes them, waits for
        the next parameter version and writes it into the registered arrays. A non-finite
        gradient raises gradagg.errors.NonFiniteError and nothing is pushed."""
        self._call_step(_lib.ga_client_step, grads)

    def _call_step(self, fn: Any, grads: Sequence[ArrayLike], in_flight: bool = False) -> None:
        """fn(handle, gradient pointers) with the storage checked and the devices synchronised;
        raises its error. in_flight: the step goes on after fn returns, reading the pointers and
        gradients, which are kept until step_wait."""
        ptrs = self._grad_pointers(grads)
        with self._lock:
            h = self._h()
            self._check_storage()
            self._sync_devices(range(len(self._tensors)))
            st = fn(h, ptrs)
            if st != 0:
                raise self._fail(st)
            if in_flight:
                self._in_flight = (ptrs, grads)

    def step_start(self, grads: Sequence[ArrayLike]) -> None:
        """step(grads) on the library's own step thread: returns once the step started, so the
        caller goes on (with the backward pass that produces other gradients, say). The
        gradients are kept alive and must not change until step_wait(), and the registered
        arrays are written meanwhile; until step_wait() returns, every other call but
        step_done() raises RuntimeError. Errors of the step itself come from step_wait()."""
        self._call_step(_lib.ga_client_step_start, grads, in_flight=True)

    def step_done(self) -> bool:
        """True when no step started by step_start() is still running (step_wait() returns at once)."""
        done = ctypes.c_bool(True)
        h = self._handle
        if h is not None and self._in_flight is not None:
            _lib.ga_client_step_poll(h, ctypes.byref(done))
        return bool(done.value)

    def step_wait(self) -> None:
        """Waits for the step started by step_start() and raises its error, as step() would.
        No-op when none was started."""
        if self._in_flight is None or self._handle is None:
            return
        st = _lib.ga_client_step_wait(self._handle)  # without the lock: step_done() may poll
        with self._lock:
            self._in_flight = None
            if st != 0:
                raise self._fail(st)

    def _check_storage(self) -> None:
        # A torch parameter whose .data was reassigned no longer lives where the library writes.
        for info, obj in zip(self._tensors, self._keep):
            if hasattr(obj, "data_ptr") and obj.data_ptr() != info.ptr:
                raise RuntimeError(f"tensor {info.name!r} moved in memory since add_tensor (was .data "
                                   "reassigned?); the library writes the parameters into the old storage")

    def set_lr(self, lr: float) -> None:
        """The learning rate the following steps carry to the job's server-side SGD or Adam (an
        LR schedule's value; a step applies its lowest contributing rank's). Until the first call the
        job's configured lr applies. InvalidArgumentError unless finite and >= 0."""
        with self._lock:
            st = _lib.ga_client_set_lr(self._h(), float(lr))
            if st != 0:
                raise self._fail(st)

    def state(self) -> bytes:
        """The worker's own training state (residuals, DGC momentum, late gradients, threshold
        adaptation, epoch) for a training checkpoint; load_state() gives it to a successor."""
        with self._lock:
            size = _lib.ga_client_state_size(self._h())
            buf = ctypes.create_string_buffer(max(size, 1))
            n = ctypes.c_size_t(0)
            st = _lib.ga_client_state_save(self._h(), buf, size, ctypes.byref(n))
            if st != 0:
                raise self._fail(st)
            return buf.raw[:n.value]

    def load_state(self, state: bytes) -> None:
        """Takes over a state() of a worker with the same tensors, codecs and DGC settings, after
        init(): its next pushes are those the saved worker would have sent.
        InvalidArgumentError (nothing changes) when the bytes do not fit."""
        with self._lock:
            st = _lib.ga_client_state_load(self._h(), bytes(state), len(state))
            if st != 0:
                raise self._fail(st)

    def set_epoch(self, epoch: int) -> None:
        """The training epoch (0-based) for the DGC warm-up; call at each epoch start."""
        e = _uint("epoch", epoch)
        with self._lock:
            _lib.ga_client_set_epoch(self._h(), e)

    # ---- state ----

    @property
    def version(self) -> int:
        """The parameter version held in the registered arrays."""
        with self._lock:
            return int(_lib.ga_client_version(self._h()))

    @property
    def stats(self) -> Stats:
        """Figures of the last step (times in seconds, payload bytes) and totals."""
        s = S.ClientStats()
        with self._lock:
            _lib.ga_client_get_stats(self._h(), ctypes.byref(s))
        return Stats(*(getattr(s, f) for f, _ in S.ClientStats._fields_))

    def threshold(self, index: int) -> Tuple[float, float]:
        """(threshold, density) of tensor `index`'s last push: the (adapted) 2bit/1bit threshold
        and the fraction of elements sent as nonzero codes (NaN before the first step or for
        codecs other than 2bit). gradagg.errors.InvalError for a bad index or another codec."""
        t, d = ctypes.c_float(), ctypes.c_float(math.nan)
        with self._lock:
            st = _lib.ga_client_tensor_threshold(self._h(), _uint("index", index, (1 << 31) - 1),
                                                 ctypes.byref(t), ctypes.byref(d))
            if st != 0:
                raise self._fail(st)
        return float(t.value), float(d.value)


def delete_job(server: Union[str, Sequence[str], None], job: str, **options: Any) -> None:
    """Deletes a job on every shard (and lane) of server: its parameters, journal, checkpoints
    and metric series (the DeleteJob RPC). options: a Client's connection options (lanes, the
    TLS files, auth_token, timeouts). Refused (gradagg.errors.RankHeldError) while a rank of it
    is live; UnknownJobError when no shard has it. A finished job is removed by the server by
    itself after its --finished-job-retention-s. server None: GRADAGG_SERVER."""
    o = _options(from_environment(server, job, 0, 1).server, job, 0, 1, **options)
    msg = ctypes.create_string_buffer(1024)
    st = _lib.ga_job_delete(ctypes.byref(o), msg, len(msg))
    if st != 0:
        raise error_for(st, msg.value.decode(errors="replace"))
