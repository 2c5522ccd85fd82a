"""ctypes mirrors of the public structs of gradagg.h, ga_codec.h and ga_optim.h.

Field names are the C names, so the import-time check against ``ga_client_abi_layout`` compares
sizeof and offsetof field by field; a mismatch (a header changed without this file) is an
ImportError rather than memory corruption.
"""
from __future__ import annotations

import ctypes
from ctypes import c_bool, c_char_p, c_double, c_float, c_int, c_size_t, c_uint8, c_uint32, c_uint64
from typing import Callable, List, Optional

# C enums (ga_job_mode, ga_server_optim, ga_codec_id) are int-sized on every ABI we target.
c_enum = c_int


class SgdParams(ctypes.Structure):
    """ga_sgd_params."""
    _fields_ = [("lr", c_float), ("momentum", c_float), ("weight_decay", c_float), ("nesterov", c_bool)]


class AdamParams(ctypes.Structure):
    """ga_adam_params."""
    _fields_ = [("lr", c_float), ("beta1", c_float), ("beta2", c_float), ("eps", c_float),
                ("weight_decay", c_float), ("decoupled", c_bool)]


class CodecParams(ctypes.Structure):
    """ga_codec_params."""
    _fields_ = [("threshold", c_float), ("ratio", c_float), ("sample_fraction", c_float),
                ("adapt_rounds", c_uint32), ("seed", c_uint64), ("topk_values", c_uint8),
                ("topk_indices", c_uint8), ("select", c_float)]


class ClientOptions(ctypes.Structure):
    """ga_client_options."""
    _fields_ = [("version", c_uint32), ("server", c_char_p), ("job", c_char_p), ("rank", c_uint32),
                ("world_size", c_uint32), ("incarnation", c_uint64), ("mode", c_enum), ("mean", c_bool),
                ("optimizer", c_enum), ("sgd", SgdParams), ("adam", AdamParams), ("deadline_ms", c_uint32),
                ("quorum", c_uint32), ("pull_codec", c_enum), ("pull_params", CodecParams),
                ("chunk_bytes", c_size_t), ("call_timeout_ms", c_uint32), ("step_timeout_ms", c_uint32),
                ("max_retries", c_uint32), ("backoff_ms", c_uint32), ("backoff_max_ms", c_uint32),
                ("threads", c_int), ("tls_ca_file", c_char_p), ("tls_cert_file", c_char_p),
                ("tls_key_file", c_char_p), ("tls_target_name", c_char_p), ("auth_token", c_char_p),
                ("shard_split_elements", c_uint64), ("lanes", c_uint32), ("pull_auto_bits", c_float),
                ("retry_budget_ms", c_uint32), ("resume", c_bool), ("min_world_size", c_uint32),
                ("staleness", c_uint32)]


class DgcOptions(ctypes.Structure):
    """ga_dgc_options."""
    _fields_ = [("enabled", c_bool), ("momentum", c_float), ("nesterov", c_bool), ("factor_masking", c_bool),
                ("clip_norm", c_float), ("warmup_epochs", c_uint32)]


class AutoThreshold(ctypes.Structure):
    """ga_auto_threshold."""
    _fields_ = [("enabled", c_bool), ("bits", c_float), ("smoothing", c_float), ("sample_fraction", c_float),
                ("level", c_enum)]


class TensorOptions(ctypes.Structure):
    """ga_tensor_options."""
    _fields_ = [("version", c_uint32), ("codec", c_enum), ("params", CodecParams), ("dgc", DgcOptions),
                ("auto_threshold", AutoThreshold), ("device", c_bool)]


class ClientStats(ctypes.Structure):
    """ga_client_stats."""
    _fields_ = [("encode_s", c_double), ("push_s", c_double), ("pull_s", c_double), ("decode_s", c_double),
                ("bytes_pushed", c_uint64), ("bytes_pulled", c_uint64), ("steps", c_uint64),
                ("retries", c_uint64), ("late_pushes", c_uint64), ("rejoins", c_uint64),
                ("versions_lost", c_uint64)]


#: C type name -> mirror, as ga_client_abi_layout names them.
MIRRORS = {
    "ga_client_options": ClientOptions,
    "ga_tensor_options": TensorOptions,
    "ga_codec_params": CodecParams,
    "ga_sgd_params": SgdParams,
    "ga_adam_params": AdamParams,
    "ga_dgc_options": DgcOptions,
    "ga_auto_threshold": AutoThreshold,
    "ga_client_stats": ClientStats,
}

ABI_UNKNOWN = ctypes.c_size_t(-1).value


def abi_mismatches(layout: Callable[[bytes, Optional[bytes]], int]) -> List[str]:
    """Every sizeof/offsetof where a mirror differs from the library, as readable lines."""
    bad: List[str] = []
    for cname, mirror in MIRRORS.items():
        size = layout(cname.encode(), None)
        if size != ctypes.sizeof(mirror):
            bad.append(f"sizeof({cname}): library {size}, binding {ctypes.sizeof(mirror)}")
        for fname, _ in mirror._fields_:
            off = layout(cname.encode(), fname.encode())
            mine = getattr(mirror, fname).offset
            if off != mine:
                bad.append(f"offsetof({cname}, {fname}): library {'unknown' if off == ABI_UNKNOWN else off}, "
                           f"binding {mine}")
    return bad


def check_abi(layout: Callable[[bytes, Optional[bytes]], int], path: str) -> None:
    """ImportError when the library's struct layouts differ from these mirrors."""
    bad = abi_mismatches(layout)
    if bad:
        raise ImportError(f"gradagg: the ctypes structures do not match {path}:\n  " + "\n  ".join(bad) +
                          "\n(client/python/gradagg/_structs.py must follow client/gradagg.h)")
