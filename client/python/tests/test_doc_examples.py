"""docs/wire-format.md and docs/protocol.md, read from the docs themselves and checked: every
fenced `example` block (codec examples against the library's encoder and decoder and, for the
refusals, against a real server's answer to a push; job examples against a real server over raw
gRPC, _wire.py), and every fenced `python <name>` block, the normative formulas, run as written
over numpy float32 against the library (the top-k selection and its seeds) and against a real
server over several steps of random data (the mean and each optimizer). Nothing here hard-codes
a result: the expected values come from the docs."""
from __future__ import annotations

import ctypes
import math
import re
import struct
import zlib
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple

import grpc
import numpy as np
import pytest

import gradagg
from gradagg import _lib, _structs as S
from _wire import (channel, field_bytes, field_float, field_varint, fields, init_chunk, join_message, pull_request,
                   push_chunk, varint)
from conftest import Server

F32 = np.float32
DOCS = Path(__file__).resolve().parents[3] / "docs"
WIRE, PROTOCOL = DOCS / "wire-format.md", DOCS / "protocol.md"
SERVICE = "/gradagg.v1.Aggregator/"
CODECS = {"none": 0, "fp16": 1, "bf16": 2, "2bit": 3, "1bit": 4, "1bit_scaled": 5, "topk": 6, "int8": 7, "int4": 8}
OPTIMIZERS = {"none": 0, "sgd": 1, "adam": 2, "reduce": 3}

# ---- the docs ----

FENCE = re.compile(r"^(?P<indent> *)```(?P<lang>\S*)[ \t]*(?P<name>\S*)[ \t]*$")


def blocks(doc: Path) -> List[Tuple[str, str, int, str]]:
    """(language, name, line, text) of every fenced block of doc, indentation removed."""
    out: List[Tuple[str, str, int, str]] = []
    lines = doc.read_text().splitlines()
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m or not m.group("lang"):
            i += 1
            continue
        indent, start, body = len(m.group("indent")), i + 1, []
        i += 1
        while i < len(lines) and lines[i].strip() != "```":
            body.append(lines[i][indent:])
            i += 1
        out.append((m.group("lang"), m.group("name"), start, "\n".join(body) + "\n"))
        i += 1
    return out


def examples(doc: Path) -> List[Tuple[int, List[Tuple[str, str]]]]:
    """The `example` blocks of doc: (line, [(key, value)]) with the value after the first ':'."""
    out = []
    for lang, _, line, text in blocks(doc):
        if lang != "example":
            continue
        pairs = []
        for raw in text.replace("\u2212", "-").splitlines():
            if raw.strip():
                key, _, value = raw.partition(":")
                pairs.append((key.strip(), value.strip()))
        out.append((line, pairs))
    return out


def code(doc: Path, name: str) -> str:
    found = [text for lang, n, _, text in blocks(doc) if lang == "python" and n == name]
    assert len(found) == 1, f"{doc.name}: {len(found)} blocks 'python {name}'"
    return found[0]


def run(doc: Path, name: str, **names: Any) -> Dict[str, Any]:
    """Runs the block `python <name>` of doc with np, math and names bound; returns its names."""
    ns: Dict[str, Any] = {"np": np, "math": math, **names}
    exec(compile(code(doc, name), f"{doc.name}:{name}", "exec"), ns)
    return ns


def topk_reference() -> Callable[..., Tuple[np.ndarray, np.ndarray]]:
    """wire-format.md's topk_encode, quiet about the fp16 overflow its saturation handles."""
    f = run(WIRE, "topk")["topk_encode"]

    def quiet(*args: Any) -> Tuple[np.ndarray, np.ndarray]:
        with np.errstate(over="ignore"):
            return f(*args)
    return quiet


def number(tok: str) -> F32:
    """A decimal, or 0x and 8 hex digits: binary32 bits."""
    if re.fullmatch(r"0x[0-9A-Fa-f]{8}", tok):
        return np.array([int(tok, 16)], np.uint32).view(F32)[0]
    return F32(float(tok))


def floats(text: str) -> np.ndarray:
    if text.startswith("zeros "):
        return np.zeros(int(text.split()[1]), F32)
    return np.array([number(t) for t in text.replace("|", " ").split()], F32)


def hexbytes(text: str) -> bytes:
    return bytes.fromhex(text.replace("|", " "))


def pairs_of(text: str) -> Dict[str, str]:
    """'a 1, b two' -> {'a': '1', 'b': 'two'}."""
    out = {}
    for part in text.split(","):
        if part.strip():
            k, _, v = part.strip().partition(" ")
            out[k] = v.strip()
    return out


def bits(a: np.ndarray) -> List[str]:
    return [f"{int(u):08X}" for u in np.asarray(a, F32).view(np.uint32)]


def same_bits(got: np.ndarray, want: np.ndarray, what: str) -> None:
    got, want = np.asarray(got), np.asarray(want)
    assert got.dtype == F32 and want.dtype == F32, f"{what}: dtypes {got.dtype}, {want.dtype}"
    assert got.shape == want.shape, f"{what}: shape {got.shape}, expected {want.shape}"
    diff = np.flatnonzero(got.view(np.uint32) != want.view(np.uint32))
    assert diff.size == 0, (f"{what}: {diff.size} elements differ, first at {diff[0]}: "
                            f"{got[diff[0]]!r} ({bits(got[diff[:1]])[0]}), expected {want[diff[0]]!r} "
                            f"({bits(want[diff[:1]])[0]})")


# ---- the library's codecs, through ctypes ----

class Exec(ctypes.Structure):
    """ga_exec."""
    _fields_ = [("backend", ctypes.c_int), ("max_threads", ctypes.c_int), ("simd", ctypes.c_int),
                ("cuda_stream", ctypes.c_void_p)]


class TopkPlan(ctypes.Structure):
    """ga_topk_plan (kernels/topk_select.h)."""
    _fields_ = ([(f, ctypes.c_size_t) for f in ("n", "k", "cap")] + [("exact", ctypes.c_int)] +
                [(f, ctypes.c_size_t) for f in ("start", "stride", "samples", "m")] +
                [("rounds", ctypes.c_uint32), ("fp16", ctypes.c_int), ("varint", ctypes.c_int),
                 ("value_bytes", ctypes.c_size_t)])


def _declare(name: str, restype: Any, argtypes: List[Any]) -> Any:
    f = getattr(_lib.lib, name)
    f.restype, f.argtypes = restype, argtypes
    return f


P, VP, SZ = ctypes.POINTER, ctypes.c_void_p, ctypes.c_size_t
INT, PARAMS = ctypes.c_int, P(S.CodecParams)
_encode = _declare("ga_codec_encode", INT, [P(Exec), INT, PARAMS, VP, VP, SZ, VP, SZ, P(SZ)])
_decode = _declare("ga_codec_decode_add", INT, [P(Exec), INT, PARAMS, VP, SZ, SZ, VP])
_size = _declare("ga_codec_encoded_size", INT, [INT, PARAMS, SZ, P(SZ)])
_plan = _declare("ga_topk_plan_init", None, [PARAMS, SZ, P(TopkPlan)])
CPU = Exec(0, 1, 0, None)


def status_name(rc: int) -> str:
    return _lib.ga_status_name(rc).decode()


def codec_of(spec: str) -> Tuple[str, S.CodecParams]:
    """'topk, ratio 0.15, values fp16' -> ('topk', its ga_codec_params)."""
    name, _, rest = spec.partition(",")
    name = name.strip()
    p = _lib.ga_codec_params_default(CODECS[name])
    for k, v in pairs_of(rest).items():
        if k in ("threshold", "ratio", "sample_fraction"):
            setattr(p, k, float(number(v)))
        elif k in ("adapt_rounds", "seed"):
            setattr(p, k, int(v, 0))
        elif k == "values":
            p.topk_values = ("fp32", "fp16").index(v)
        elif k == "indices":
            p.topk_indices = ("int32", "varint").index(v)
        else:
            raise AssertionError(f"unknown codec parameter {k!r}")
    return name, p


def aligned(data: bytes) -> np.ndarray:
    buf = np.zeros(len(data) // 4 + 1, np.uint32)
    buf.view(np.uint8)[:len(data)] = np.frombuffer(data, np.uint8)
    return buf


def encode(codec: str, p: S.CodecParams, g: np.ndarray, r: Optional[np.ndarray]) -> bytes:
    """The library's payload of g; r (the residual) is updated in place."""
    g = np.ascontiguousarray(g, F32)
    cap = SZ()
    assert _size(CODECS[codec], ctypes.byref(p), len(g), ctypes.byref(cap)) == 0
    out, n = np.zeros(cap.value // 4 + 1, np.uint32), SZ()
    rc = _encode(ctypes.byref(CPU), CODECS[codec], ctypes.byref(p), g.ctypes.data,
                 None if r is None else r.ctypes.data, len(g), out.ctypes.data, cap.value, ctypes.byref(n))
    assert rc == 0, f"encode {codec}: {status_name(rc)}"
    return out.view(np.uint8)[:n.value].tobytes()


def decode(codec: str, p: S.CodecParams, payload: bytes, n: int, into: Optional[np.ndarray] = None
           ) -> Tuple[str, np.ndarray]:
    """(status name, into + decoded); into (zeros by default) is changed in place."""
    s = np.zeros(n, F32) if into is None else into
    buf = aligned(payload)
    rc = _decode(ctypes.byref(CPU), CODECS[codec], ctypes.byref(p), buf.ctypes.data, len(payload), n, s.ctypes.data)
    return status_name(rc), s


def topk_payload(idx: np.ndarray, values: np.ndarray, varint_indices: bool) -> bytes:
    """wire-format.md "Payload" of top-k, from the indices and wire values."""
    out = struct.pack("<I", len(idx)) + values.tobytes()
    if not varint_indices:
        return out + np.asarray(idx, "<u4").tobytes()
    prev = -1
    for i in (int(x) for x in idx):
        out += varint(i - prev - 1)
        prev = i
    return out


# ---- a real server over raw gRPC ----

def codec_msg(name: str, p: S.CodecParams) -> bytes:
    return (field_varint(1, CODECS[name]) + field_float(2, p.threshold) + field_float(3, p.ratio) +
            field_float(4, p.sample_fraction) + field_varint(5, p.adapt_rounds) + field_varint(6, p.seed) +
            field_varint(7, p.topk_values) + field_varint(8, p.topk_indices))


def config_msg(spec: Dict[str, str]) -> bytes:
    """A JobConfig from an example's `job:` pairs (docs/protocol.md names)."""
    f = {k: float(number(v)) for k, v in spec.items() if k in ("lr", "momentum", "weight_decay", "beta1", "beta2",
                                                                 "eps")}
    optim = (field_varint(1, OPTIMIZERS[spec.get("optimizer", "none")]) + field_float(2, f.get("lr", 0)) +
             field_float(3, f.get("momentum", 0)) + field_float(4, f.get("weight_decay", 0)) +
             field_varint(5, spec.get("nesterov") == "true") + field_float(6, f.get("beta1", 0)) +
             field_float(7, f.get("beta2", 0)) + field_float(8, f.get("eps", 0)) +
             field_varint(9, spec.get("decoupled") == "true"))
    pull = b""
    if "pull_codec" in spec:
        name, p = codec_of(spec["pull_codec"].replace(";", ","))
        pull = field_bytes(6, codec_msg(name, p))
    return (field_varint(1, int(spec["world_size"])) + field_varint(2, spec.get("mode") == "async") +
            field_varint(3, spec.get("reduce") == "mean") + field_bytes(4, optim) + pull +
            field_varint(8, int(spec.get("min_world_size", 0))))


def one(m: Dict[int, List[Any]], num: int, default: Any = 0) -> Any:
    return m.get(num, [default])[-1]


class Refused(Exception):
    def __init__(self, status: str, details: str) -> None:
        super().__init__(f"{status}: {details}")
        self.status = status


def call(fn: Callable[[], Any]) -> Any:
    try:
        return fn()
    except grpc.RpcError as e:
        meta = dict(e.trailing_metadata() or ())
        raise Refused(meta.get("gradagg-status", str(e.code())), e.details() or "") from None


class Job:
    """One job on a server, every rank joined (incarnation 100 + rank), tensor "w"."""

    def __init__(self, addr: str, name: str, spec: Dict[str, str]) -> None:
        self.ch, self.name, self.world = channel(addr), name, int(spec["world_size"])
        cfg = config_msg(spec)
        for r in range(self.world):
            req = join_message(name, r, 100 + r, cfg)
            call(lambda: self.ch.unary_unary(SERVICE + "Join")(req, timeout=30))

    def init(self, values: np.ndarray, tensor: str = "w") -> None:
        n = len(values)
        chunk = init_chunk(self.name, 0, 100, tensor, [n], 0, n, values.astype(F32).tobytes())
        call(lambda: self.ch.stream_unary(SERVICE + "InitTensors")(iter([chunk]), timeout=30))

    def push(self, rank: int, step: int, chunks: Sequence[Tuple[int, int, str, S.CodecParams, bytes]],
             weight: int = 0, lr: Optional[float] = None, tensor: str = "w") -> Tuple[int, bool, int]:
        """chunks: (offset, count, codec, params, payload). Returns the ack (step, duplicate, version)."""
        msgs = []
        for off, count, codec, p, payload in chunks:
            lr_fields = field_varint(9, 1) + field_float(10, lr) if lr is not None else b""
            more = field_bytes(8, codec_msg(codec, p)) + lr_fields + field_varint(11, weight)
            msgs.append(push_chunk(self.name, rank, 100 + rank, step, tensor, off, count, payload, more))
        m = fields(call(lambda: self.ch.stream_unary(SERVICE + "Push")(iter(msgs), timeout=30)))
        return one(m, 1), bool(one(m, 2)), one(m, 3)

    def push_values(self, rank: int, step: int, g: np.ndarray, codec: str = "none", **kw: Any) -> np.ndarray:
        """Pushes g whole with a dense codec; returns what the server decodes."""
        p = _lib.ga_codec_params_default(CODECS[codec])
        payload = encode(codec, p, g, None)
        self.push(rank, step, [(0, len(g), codec, p, payload)], **kw)
        return decode(codec, p, payload, len(g))[1]

    def pull(self, min_version: int, have: Optional[int] = None, rank: int = 0) -> List[Dict[int, List[Any]]]:
        req = pull_request(self.name, rank, 100 + rank, min_version, have)
        return [fields(raw) for raw in call(lambda: list(self.ch.unary_stream(SERVICE + "Pull")(req, timeout=30)))]

    def params(self, version: int, n: int, tensor: str = "w") -> np.ndarray:
        out = np.full(n, np.nan, F32)
        for c in self.pull(version):
            assert one(c, 1) == version and one(c, 5) == 0  # PULL_FULL of that version
            if one(c, 2, b"").decode() == tensor:
                out[one(c, 3):one(c, 3) + one(c, 4)] = np.frombuffer(one(c, 15, b""), F32)
        return out

    def leave(self, rank: int) -> None:
        req = field_bytes(1, self.name.encode()) + field_varint(2, rank) + field_varint(3, 100 + rank)
        call(lambda: self.ch.unary_unary(SERVICE + "Leave")(req, timeout=30))


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Callable[..., Server]]:
    """servers(*flags): one server per distinct set of flags, for the whole module."""
    binary = _lib.server_binary()
    if not binary:
        pytest.fail(f"no gradagg-server next to {_lib.LIBRARY_PATH}; build it or set GRADAGG_SERVER_BIN")
    running: Dict[Tuple[str, ...], Server] = {}

    def get(*flags: str) -> Server:
        if flags not in running:
            running[flags] = Server(binary, tmp_path_factory.mktemp("server"), *flags)
        return running[flags]

    yield get
    for s in running.values():
        s.stop()


# ---- wire-format.md: the codec examples ----

CODEC_EXAMPLES = [(line, dict(p)) for line, p in examples(WIRE) if p[0][0] == "codec"]


def test_the_docs_hold_examples() -> None:
    assert len(CODEC_EXAMPLES) >= 15
    assert len([1 for _, p in CODEC_EXAMPLES if "status" in p]) >= 6
    assert len(SERVER_EXAMPLES) >= 8


@pytest.mark.parametrize("line,ex", CODEC_EXAMPLES, ids=[f"wire-format.md:{line}" for line, _ in CODEC_EXAMPLES])
def test_codec_example(line: int, ex: Dict[str, str]) -> None:
    codec, p = codec_of(ex["codec"])
    payload = hexbytes(ex["payload"])
    checked = 0
    if "gradient" in ex:
        g = floats(ex["gradient"])
        r = floats(ex["residual before"]) if "residual before" in ex else np.zeros(len(g), F32)
        has_residual = _lib.ga_codec_has_residual(CODECS[codec])
        assert has_residual or "residual" not in ex
        got = encode(codec, p, g, r if has_residual else None)
        assert got.hex(" ").upper() == payload.hex(" ").upper()
        if "residual" in ex:
            same_bits(r, floats(ex["residual"]), "residual")
        checked += 1
    n = len(floats(ex["gradient"])) if "gradient" in ex else int(ex["n"])
    if "decoded" in ex:
        want = np.zeros(n, F32)
        for tok in ex["decoded"].split():
            if "=" in tok:
                i, _, v = tok.partition("=")
                want[int(i)] = number(v)
        if "=" not in ex["decoded"]:
            want = floats(ex["decoded"])
        st, got_sum = decode(codec, p, payload, n)
        assert st == "GA_OK"
        same_bits(got_sum, want, "decoded")
        checked += 1
    if "status" in ex:
        before = np.arange(n, dtype=F32)
        st, after = decode(codec, p, payload, n, before.copy())
        assert st == ex["status"]
        same_bits(after, before, "a refused payload changes nothing")
        checked += 1
    assert checked, "the example checks nothing"


REFUSALS = [(line, ex) for line, ex in CODEC_EXAMPLES if "status" in ex]


@pytest.mark.parametrize("line,ex", REFUSALS, ids=[f"wire-format.md:{line}" for line, _ in REFUSALS])
def test_a_server_refuses_the_refused_payloads(servers: Callable[..., Server], line: int, ex: Dict[str, str]) -> None:
    codec, p = codec_of(ex["codec"])
    n = int(ex["n"])
    job = Job(servers().addr, f"refuse{line}", {"world_size": "1"})
    job.init(np.zeros(n, F32))
    with pytest.raises(Refused) as e:
        job.push(0, 0, [(0, n, codec, p, hexbytes(ex["payload"]))])
    assert e.value.status == ex["status"]


# ---- wire-format.md: the top-k selection and its seeds ----

def test_topk_plan_example() -> None:
    """The plan example against the doc's topk_plan and the library's ga_topk_plan_init."""
    [ex] = [dict(p) for _, p in examples(WIRE) if p[0][0] == "topk plan"]
    spec = pairs_of(ex["topk plan"])
    n, seed = int(spec["n"]), int(spec["seed"])
    ratio, fraction = number(spec["ratio"]), number(spec["sample_fraction"])
    want = tuple(int(ex[k]) for k in ("k", "stride", "start", "samples", "m"))
    ref = run(WIRE, "topk")
    assert ref["splitmix64"](seed) == int(ex["splitmix64"], 16)
    k, sample = ref["topk_plan"](n, ratio, fraction, seed)
    assert (k, *sample) == want
    p = _lib.ga_codec_params_default(CODECS["topk"])
    p.ratio, p.sample_fraction, p.seed = float(ratio), float(fraction), seed
    plan = TopkPlan()
    _plan(ctypes.byref(p), n, ctypes.byref(plan))
    assert (plan.k, plan.stride, plan.start, plan.samples, plan.m) == want


def library_start(n: int, p: S.CodecParams) -> Tuple[int, int]:
    """(start, stride) of the library's sample for n elements."""
    plan = TopkPlan()
    _plan(ctypes.byref(p), n, ctypes.byref(plan))
    return plan.start, plan.stride


def ramp(n: int, rng: np.random.Generator) -> np.ndarray:
    """Magnitudes that grow with the index, so the sampled threshold (and with it what is sent)
    depends on where the sample starts, that is on the seed."""
    return (np.linspace(0.5, 2.0, n) * rng.choice([-1, 1], n) + 1e-3 * rng.standard_normal(n)).astype(F32)


TOPK_CASES = 36


def topk_case(case: int) -> Tuple[str, np.ndarray, np.ndarray, S.CodecParams]:
    """Random residuals and gradients over both paths: ties at the k-th key, zeros, fp16
    saturation, seed-dependent samples, and samples that overestimate (relaxations)."""
    rng = np.random.default_rng(29 + case)
    n = [10, 1000, 65536, 65537, 100000, 300000][case % 6]
    kind = case // 6
    p = _lib.ga_codec_params_default(CODECS["topk"])
    p.ratio = float(F32([0.001, 0.01, 0.3, 1.0, 0.0123][case % 5]))
    p.sample_fraction = float(F32([0.01, 0.003, 0.5, 1.0, 1e-7, 0.25, 0.0123][case % 7]))
    p.adapt_rounds = [0, 1, 10, 64][case % 4]
    p.seed = int(rng.integers(0, 2**63)) * 2 + case % 2
    p.topk_values, p.topk_indices = case % 2, (case // 2) % 2
    g = rng.standard_normal(n).astype(F32)
    if kind == 1:
        g = np.round(g * 2).astype(F32)  # few distinct magnitudes: ties at the k-th key
    elif kind == 2:
        g[rng.random(n) < 0.6] = 0  # keys of 0 are never sent
    elif kind == 3:
        g = (g * F32(1e5)).astype(F32)  # fp16 values saturate
    elif kind == 4:
        g = ramp(n, rng)
    elif kind == 5:
        start, stride = library_start(n, p)
        g[start::max(stride, 1)] *= F32(50)  # the sample sees only the spikes: the threshold relaxes
        p.adapt_rounds = max(p.adapt_rounds, 3 + case % 5)
    r = (rng.standard_normal(n) * 0.1).astype(F32) if case % 3 else np.zeros(n, F32)
    return f"case{case}-n{n}-kind{kind}", g, r, p


@pytest.mark.parametrize("case", range(TOPK_CASES))
def test_topk_selection_as_written_is_the_encoder(case: int) -> None:
    name, g, r0, p = topk_case(case)
    ref = topk_reference()
    r_lib, r_doc = r0.copy(), r0.copy()
    payload = encode("topk", p, g, r_lib)
    idx, values = ref(r_doc, g, F32(p.ratio), F32(p.sample_fraction), p.adapt_rounds, p.seed, p.topk_values)
    assert topk_payload(idx, values, p.topk_indices == 1) == payload, name
    same_bits(r_doc, r_lib, f"{name}: residual")


def test_the_sdk_seeds_its_topk_pushes_as_written(servers: Callable[..., Server]) -> None:
    """A one-rank sum job with optimizer none: the parameters after each step are the initial ones
    plus what the SDK sent, which the doc's selection with the doc's push seed reproduces (the
    gradients are ramps, so what is sent depends on the seed)."""
    n, ratio = 100000, 0.01
    topk, push_seed = topk_reference(), run(WIRE, "push_seed")["push_seed"]
    rng = np.random.default_rng(5)
    p0 = rng.standard_normal(n).astype(F32)
    params, want, r = p0.copy(), p0.copy(), np.zeros(n, F32)
    defaults = _lib.ga_codec_params_default(CODECS["topk"])
    with gradagg.Client(servers().addr, "sdk-seeds", 0, 1, mean=False, call_timeout_ms=30000) as c:
        c.add_tensor("w", params, codec="topk", ratio=ratio)
        c.init()
        for step in range(3):
            g = ramp(n, rng)
            c.step([g])
            idx, values = topk(r, g, F32(ratio), F32(defaults.sample_fraction), defaults.adapt_rounds,
                               push_seed(defaults.seed, step, 0), False)
            want[idx] = want[idx] + values
            same_bits(params, want, f"step {step}")


# ---- protocol.md: the job examples against a real server ----

SERVER_EXAMPLES = [(line, p) for line, p in examples(PROTOCOL)]


def run_server_example(servers: Callable[..., Server], line: int, lines: List[Tuple[str, str]]) -> int:
    """Runs one example of protocol.md; returns how many things it checked."""
    flags: Tuple[str, ...] = ()
    job: Optional[Job] = None
    n = 0
    last: Any = None  # the last push's ack or Refused, the last pull's chunks
    checked = 0
    i = 0
    while i < len(lines):
        key, value = lines[i]
        words = key.split()
        nxt = lines[i + 1][0] if i + 1 < len(lines) else ""
        if key == "server":
            flags = tuple(value.split())
        elif key == "job":
            job = Job(servers(*flags).addr, f"ex{line}", pairs_of(value))
        elif key == "init":
            assert job
            v = floats(value)
            n = len(v)
            job.init(v)
        elif words[0] == "push":
            assert job
            opts = dict(zip(words[1::2], words[2::2]))
            rank, off = int(opts["rank"]), int(opts.get("offset", 0))
            chunks = []
            for part in value.split("|"):
                codec, _, rest = part.strip().partition(" ")
                if codec not in CODECS:
                    codec, rest = "none", part
                p = _lib.ga_codec_params_default(CODECS[codec])
                g = floats(rest.strip())
                chunks.append((off, len(g), codec, p, encode(codec, p, g, None)))
                off += len(g)
            try:
                last = job.push(rank, int(opts.get("step", 0)), chunks, weight=int(opts.get("weight", 0)),
                                lr=float(number(opts["lr"])) if "lr" in opts else None)
            except Refused as e:
                last = e
            if nxt != "status" and isinstance(last, Refused):
                raise AssertionError(f"protocol.md:{line}: {key}: refused: {last}")
        elif key == "status":
            assert isinstance(last, Refused) and last.status == value, f"protocol.md:{line}: {last!r}, not {value}"
            checked += 1
        elif key == "ack":
            spec = pairs_of(value)
            want = (int(spec["step"]), "duplicate" in spec, int(spec["version"]))
            assert last == want, f"protocol.md:{line}: ack {last}, expected {want}"
            checked += 1
        elif words[0] == "leave":
            assert job
            job.leave(int(words[2]))
        elif words[0] == "pull":
            assert job
            opts = dict(zip(words[1::2], words[2::2]))
            version = int(opts["version"])
            try:
                last = job.pull(version, int(opts["from"]) if "from" in opts else None)
            except Refused as e:
                last = e
                assert nxt == "status" and not value, f"protocol.md:{line}: {key}: refused: {e}"
            if value:
                same_bits(job.params(version, n), floats(value), f"protocol.md:{line}: {key}")
                checked += 1
        elif key == "pieces":
            got = [f"{one(c, 3)}+{one(c, 4)}" for c in last]
            assert got == value.split(), f"protocol.md:{line}: pieces {got}"
            checked += 1
        elif key == "payload bytes":
            got = [str(len(one(c, 15, b""))) for c in last]
            assert got == value.split(), f"protocol.md:{line}: payload bytes {got}"
            checked += 1
        else:
            raise AssertionError(f"protocol.md:{line}: unknown example line {key!r}")
        i += 1
    return checked


@pytest.mark.parametrize("line,lines", SERVER_EXAMPLES, ids=[f"protocol.md:{line}" for line, _ in SERVER_EXAMPLES])
def test_protocol_example(servers: Callable[..., Server], line: int, lines: List[Tuple[str, str]]) -> None:
    assert run_server_example(servers, line, lines) > 0, "the example checks nothing"


# ---- protocol.md: the mean and the optimizers as written, against a real server ----

def doc_mean(decoded: List[np.ndarray], weights: Sequence[int], mean: bool) -> np.ndarray:
    C = sum(w or 1 for w in weights)
    g = run(PROTOCOL, "mean", n=len(decoded[0]), decoded=decoded, C=C, mean=mean)["g"]
    assert g.dtype == F32
    return g


class DocOptimizer:
    """The optimizer blocks of protocol.md, with their state, over float32 arrays."""

    def __init__(self, spec: Dict[str, str], n: int) -> None:
        self.kind = spec.get("optimizer", "none")
        self.hp = {k: number(spec[k]) for k in ("lr", "momentum", "weight_decay", "beta1", "beta2", "eps")
                   if k in spec}
        self.hp.update({k: spec.get(k) == "true" for k in ("nesterov", "decoupled")})
        self.state = {"buf": np.zeros(n, F32), "m": np.zeros(n, F32), "v": np.zeros(n, F32)}
        self.t = 0

    def step(self, p: np.ndarray, g: np.ndarray, lr: Optional[F32] = None) -> np.ndarray:
        hp = dict(self.hp, lr=lr if lr is not None else self.hp.get("lr", F32(0)))
        if self.kind == "none":
            out = run(PROTOCOL, "none", p=p, g=g)["p"]
        elif self.kind == "reduce":
            out = run(PROTOCOL, "reduce", p=p, g=g)["p"]
        elif self.kind == "sgd":
            ns = run(PROTOCOL, "sgd", p=p, g=g, buf=self.state["buf"], **{k: hp.get(k, F32(0)) for k in
                     ("lr", "momentum", "weight_decay")}, nesterov=hp["nesterov"])
            out, self.state["buf"] = ns["p"], ns["buf"]
        else:
            self.t += 1
            ns = run(PROTOCOL, "adam", p=p, g=g, m=self.state["m"], v=self.state["v"], t=self.t,
                     decoupled=hp["decoupled"], **{k: hp.get(k, F32(0)) for k in
                                                   ("lr", "beta1", "beta2", "eps", "weight_decay")})
            out, self.state["m"], self.state["v"] = ns["p"], ns["m"], ns["v"]
        for a in (out, *self.state.values()):
            assert a.dtype == F32 and a.shape == p.shape
        return out


SCENARIOS = {
    # the job; per rank: its push's codecs (one chunk each), weight and lr; (rank, step) leaving
    "sgd-nesterov-wd-mean": dict(job="world_size 3, reduce mean, optimizer sgd, lr 0.05, momentum 0.9, "
                                     "nesterov true, weight_decay 0.01",
                                 codecs=[["none"], ["fp16"], ["bf16", "none"]]),
    "sgd-plain-sum": dict(job="world_size 3, reduce sum, optimizer sgd, lr 0.1", codecs=[["none"]] * 3),
    "sgd-momentum-mean": dict(job="world_size 2, reduce mean, optimizer sgd, lr 0.02, momentum 0.5",
                              codecs=[["none"], ["fp16", "bf16"]]),
    "sgd-wd-lrs": dict(job="world_size 3, reduce mean, optimizer sgd, lr 0.1, weight_decay 0.5",
                       codecs=[["none"]] * 3, lrs=[0.03, 0.07, 0.2]),
    "adam-l2-mean": dict(job="world_size 3, reduce mean, optimizer adam, lr 0.01, beta1 0.9, beta2 0.999, "
                             "eps 1e-8, weight_decay 0.01", codecs=[["none"], ["fp16"], ["none"]]),
    "adamw-mean": dict(job="world_size 2, reduce mean, optimizer adam, lr 0.003, beta1 0.8, beta2 0.99, eps 1e-6, "
                           "weight_decay 0.1, decoupled true", codecs=[["bf16"], ["none"]], lrs=[0.005, 0.001]),
    "adam-sum": dict(job="world_size 2, reduce sum, optimizer adam, lr 0.5, beta1 0.5, beta2 0.5, eps 0.001",
                     codecs=[["none"], ["none"]]),
    "none-weighted-leave": dict(job="world_size 3, reduce mean, optimizer none", codecs=[["none"]] * 3,
                                weights=[3, 0, 2], leave=(2, 2)),
    "reduce-mean": dict(job="world_size 3, reduce mean, optimizer reduce", codecs=[["none"], ["fp16"], ["none"]],
                        weights=[1, 7, 0]),
    "async-weighted-sgd": dict(job="world_size 2, mode async, reduce mean, optimizer sgd, lr 0.1, momentum 0.9",
                               codecs=[["none"], ["none"]], weights=[3, 5]),
}


def push_random(job: Job, rank: int, step: int, codecs: Sequence[str], weight: int, lr: Optional[float],
                rng: np.random.Generator, n: int) -> np.ndarray:
    """Pushes random gradients of rank, one chunk per codec; returns what the server decodes."""
    g = (rng.standard_normal(n) * (rank + 1)).astype(F32)
    cuts = np.linspace(0, n, len(codecs) + 1).astype(int)
    chunks, decoded = [], np.zeros(n, F32)
    for codec, lo, hi in zip(codecs, cuts[:-1], cuts[1:]):
        cp = _lib.ga_codec_params_default(CODECS[codec])
        payload = encode(codec, cp, g[lo:hi], None)
        chunks.append((int(lo), int(hi - lo), codec, cp, payload))
        decoded[lo:hi] = decode(codec, cp, payload, int(hi - lo))[1]
    job.push(rank, step, chunks, weight=weight, lr=lr)
    return decoded


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_mean_and_optimizer_as_written_match_the_server(servers: Callable[..., Server], name: str) -> None:
    """Four steps of random pushes; after each, the server's parameters are those the doc's mean and
    optimizer blocks compute (sync: the step's lr is its lowest rank's; async: every commit alone)."""
    sc = SCENARIOS[name]
    spec = pairs_of(sc["job"])
    world, n = int(spec["world_size"]), 2500
    mean, asynchronous = spec.get("reduce") == "mean", spec.get("mode") == "async"
    weights = sc.get("weights", [0] * world)
    lrs = [F32(x) for x in sc["lrs"]] if "lrs" in sc else None
    leave_rank, leave_at = sc.get("leave", (None, None))
    rng = np.random.default_rng(zlib.crc32(name.encode()))
    job = Job(servers().addr, f"formula-{name}", spec)
    p = rng.standard_normal(n).astype(F32)
    job.init(p)
    opt = DocOptimizer(spec, n)
    version = 0
    for step in range(4):
        if step == leave_at:
            job.leave(leave_rank)
        ranks = [r for r in range(world) if not (r == leave_rank and step >= leave_at)]
        decoded = []
        for r in ranks:
            lr = lrs[r] if lrs else None
            decoded.append(push_random(job, r, step, sc["codecs"][r], weights[r],
                                       None if lr is None else float(lr), rng, n))
            if asynchronous:
                version += 1
                p = opt.step(p, doc_mean(decoded[-1:], [weights[r]], mean), lr)
                same_bits(job.params(version, n), p, f"{name}: version {version}")
        if not asynchronous:
            version += 1
            p = opt.step(p, doc_mean(decoded, [weights[r] for r in ranks], mean), lrs[min(ranks)] if lrs else None)
            same_bits(job.params(version, n), p, f"{name}: version {version}")


# ---- protocol.md "Pull": pieces and the top-k pull seed, against a real server ----

PULL_FLAGS = ("--pull-chunk-kb", "300")


@pytest.mark.parametrize("values,indices", [("fp32", "int32"), ("fp16", "varint")])
def test_topk_pulls_are_seeded_as_written(servers: Callable[..., Server], values: str, indices: str) -> None:
    """A topk pull codec: every piece of version v is the doc's selection of params - published
    with the seed pull_codec.seed + v; the chunk carries the configured codec."""
    n, piece, seed = 200000, 300 * 1024 // 4 // 1024 * 1024, 2**64 - 2
    spec = pairs_of(f"world_size 1, optimizer none, pull_codec topk; ratio 0.01; sample_fraction 0.01; "
                    f"adapt_rounds 3; seed {seed}; values {values}; indices {indices}")
    job = Job(servers(*PULL_FLAGS).addr, f"topk-pull-{values}", spec)
    _, cp = codec_of(spec["pull_codec"].replace(";", ","))
    topk, pull_seed = topk_reference(), run(WIRE, "pull_seed")["pull_seed"]
    rng = np.random.default_rng(11)
    params = rng.standard_normal(n).astype(F32)
    job.init(params)
    published = params.copy()
    for v in range(1, 4):
        g = ramp(n, rng)
        job.push(0, v - 1, [(0, n, "none", _lib.ga_codec_params_default(0), g.tobytes())])
        params = run(PROTOCOL, "none", p=params, g=doc_mean([g], [1], False))["p"]
        chunks = job.pull(v, have=v - 1)
        assert [(one(c, 3), one(c, 4)) for c in chunks] == [(lo, min(piece, n - lo)) for lo in range(0, n, piece)]
        for c in chunks:
            lo, count = one(c, 3), one(c, 4)
            assert one(c, 5) == 1 and one(c, 7) == v - 1  # PULL_DELTA on version v - 1
            assert fields(one(c, 6, b"")) == fields(codec_msg("topk", cp))  # the configured codec, seed included
            delta = params[lo:lo + count] - published[lo:lo + count]
            idx, vals = topk(np.zeros(count, F32), delta, F32(cp.ratio), F32(cp.sample_fraction), cp.adapt_rounds,
                             pull_seed(seed, v), values == "fp16")
            assert one(c, 15, b"") == topk_payload(idx, vals, indices == "varint"), f"version {v} piece at {lo}"
            published[lo + idx] = published[lo + idx] + vals.astype(F32)
        same_bits(job.params(v, n), published, f"version {v}: the published copy")
