"""Hand-built gradagg.v1 traffic for the hostile-client tests: a minimal protobuf encoder for
the messages they send (docs/wire-format.md, proto/gradagg/v1/gradagg.proto) and raw gRPC calls
through grpcio's generic API, so a test can send what no SDK would: streams that never end,
chunks for jobs that do not exist, oversized fields."""
from __future__ import annotations

import struct
import threading
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple

import grpc

SERVICE = "/gradagg.v1.Aggregator/"


def varint(n: int) -> bytes:
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        out.append(b | (0x80 if n else 0))
        if not n:
            return bytes(out)


def field_varint(num: int, v: int) -> bytes:
    return varint(num << 3) + varint(v) if v else b""


def field_bytes(num: int, data: bytes) -> bytes:
    return varint(num << 3 | 2) + varint(len(data)) + data if data else b""


def read_varint(msg: bytes, at: int) -> Tuple[int, int]:
    """The varint at msg[at:] and the offset after it."""
    n = shift = 0
    while True:
        b = msg[at]
        at += 1
        n |= (b & 0x7F) << shift
        shift += 7
        if not b & 0x80:
            return n, at


def fields(msg: bytes) -> Dict[int, List[Any]]:
    """An encoded message's fields: number -> values in wire order (ints for varints, bytes for
    length-delimited and fixed-width ones)."""
    out: Dict[int, List[Any]] = {}
    at = 0
    while at < len(msg):
        tag, at = read_varint(msg, at)
        kind = tag & 7
        if kind == 0:
            v, at = read_varint(msg, at)
        elif kind == 2:
            n, at = read_varint(msg, at)
            v, at = msg[at:at + n], at + n
        else:  # fixed64 (1) or fixed32 (5)
            size = 8 if kind == 1 else 4
            v, at = msg[at:at + size], at + size
        out.setdefault(tag >> 3, []).append(v)
    return out


def field_of(msg: bytes, num: int) -> bytes:
    """The bytes of length-delimited field `num` of an encoded message (the last one), b"" if absent."""
    values = fields(msg).get(num, [])
    return values[-1] if values and isinstance(values[-1], bytes) else b""


def field_float(num: int, v: float) -> bytes:
    return varint(num << 3 | 5) + struct.pack("<f", v) if v else b""


def join_request(job: str, rank: int, incarnation: int, world: int, lr: float = 0.1,
                 extra_config: bytes = b"") -> bytes:
    """extra_config: more JobConfig fields, appended."""
    optimizer = field_varint(1, 1) + field_float(2, lr)  # SGD
    return join_message(job, rank, incarnation, field_varint(1, world) + field_bytes(4, optimizer) + extra_config)


def join_message(job: str, rank: int, incarnation: int, config: bytes) -> bytes:
    """A JoinRequest carrying the encoded JobConfig `config`."""
    return field_bytes(1, job.encode()) + field_varint(2, rank) + field_varint(3, incarnation) + field_bytes(4, config)


def init_chunk(job: str, rank: int, incarnation: int, tensor: str, shape: Sequence[int], offset: int, count: int,
               values: bytes, packed_shape: Optional[bytes] = None) -> bytes:
    shape_bytes = packed_shape if packed_shape is not None else b"".join(varint(d) for d in shape)
    return (field_bytes(1, job.encode()) + field_varint(2, rank) + field_varint(3, incarnation) +
            field_bytes(4, tensor.encode()) + field_bytes(5, shape_bytes) + field_varint(6, offset) +
            field_varint(7, count) + field_bytes(15, values))


def push_chunk(job: str, rank: int, incarnation: int, step: int, tensor: str, offset: int, count: int,
               payload: bytes, more: bytes = b"") -> bytes:
    """more: the chunk's other fields (codec, lr, weight), encoded, placed before the payload."""
    return (field_bytes(1, job.encode()) + field_varint(2, rank) + field_varint(3, incarnation) +
            field_varint(4, step) + field_bytes(5, tensor.encode()) + field_varint(6, offset) +
            field_varint(7, count) + more + field_bytes(15, payload))


def pull_request(job: str, rank: int, incarnation: int, min_version: int, have: Optional[int] = None) -> bytes:
    """have: the version the puller holds (a delta pull from it)."""
    return (field_bytes(1, job.encode()) + field_varint(2, rank) + field_varint(3, incarnation) +
            field_varint(4, min_version) + field_varint(5, have is not None) + field_varint(6, have or 0))


def channel(addr: str, max_mb: int = 128) -> grpc.Channel:
    return grpc.insecure_channel(addr, options=[("grpc.max_send_message_length", max_mb << 20),
                                                ("grpc.max_receive_message_length", max_mb << 20)])


def bearer(token: str) -> List[Tuple[str, str]]:
    """The metadata of a call carrying a job's bearer token (--auth-tokens)."""
    return [("authorization", f"Bearer {token}")]


def unary(ch: grpc.Channel, method: str, request: bytes, timeout: float = 30,
          metadata: Optional[List[Tuple[str, str]]] = None) -> bytes:
    return ch.unary_unary(SERVICE + method)(request, timeout=timeout, metadata=metadata)


class HeldStream:
    """A client stream (Push or InitTensors) that sends `chunks` and then stays open, neither
    ending nor cancelling, until release(): what a slow or hostile client does."""

    def __init__(self, ch: grpc.Channel, method: str, chunks: List[bytes], timeout: float = 120,
                 metadata: Optional[List[Tuple[str, str]]] = None) -> None:
        self._release = threading.Event()
        self.sent = 0

        def requests() -> Iterator[bytes]:
            for c in chunks:
                yield c
                self.sent += 1
            self._release.wait()

        self.future = ch.stream_unary(SERVICE + method).future(requests(), timeout=timeout, metadata=metadata)

    def release(self) -> None:
        self._release.set()

    def outcome(self, timeout: float) -> Tuple[Optional[grpc.StatusCode], str]:
        """(status code, details) once the call ended; (None, "") if it is still open then."""
        try:
            self.future.result(timeout=timeout)
            return grpc.StatusCode.OK, ""
        except grpc.FutureTimeoutError:
            return None, ""
        except grpc.RpcError as e:
            return e.code(), e.details() or ""


def rss_mib(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS")


class RssPeak:
    """The highest RSS of a process, sampled every 20 ms from start() to stop()."""

    def __init__(self, pid: int) -> None:
        self.pid, self.peak = pid, 0.0
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, rss_mib(self.pid))
            self._stop.wait(0.02)

    def __enter__(self) -> "RssPeak":
        self._t.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self._t.join()
