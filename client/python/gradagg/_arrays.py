"""What the library needs to know about a numpy array or a torch tensor: its address, shape,
and whether it is usable as a float32 buffer (host, or CUDA device memory). torch is never
imported here: a tensor is recognised only when the caller has imported torch already."""
from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any, Optional, Tuple

import numpy as np


@dataclass(frozen=True)
class Buffer:
    """A float32 buffer's address and layout. cuda_device is the CUDA device index of a torch
    CUDA tensor, None for host memory."""
    ptr: int
    shape: Tuple[int, ...]
    size: int
    cuda_device: Optional[int]


def _torch_tensor_type() -> Optional[type]:
    torch = sys.modules.get("torch")
    return getattr(torch, "Tensor", None) if torch is not None else None


def is_torch(obj: Any) -> bool:
    t = _torch_tensor_type()
    return t is not None and isinstance(obj, t)


def describe(obj: Any, what: str, *, writable: bool) -> Buffer:
    """The Buffer of obj, or TypeError (not an array, not float32) / ValueError (not
    contiguous, read-only, empty, an unsupported device) naming `what`."""
    if isinstance(obj, np.ndarray):
        if obj.dtype != np.float32:
            raise TypeError(f"{what}: dtype {obj.dtype}, expected float32")
        if not obj.flags.c_contiguous:
            raise ValueError(f"{what}: not C-contiguous (use np.ascontiguousarray)")
        if writable and not obj.flags.writeable:
            raise ValueError(f"{what}: read-only array; the library writes the pulled parameters into it")
        if obj.size == 0:
            raise ValueError(f"{what}: empty array")
        return Buffer(obj.ctypes.data, tuple(obj.shape), int(obj.size), None)
    if is_torch(obj):
        torch = sys.modules["torch"]
        if obj.dtype != torch.float32:
            raise TypeError(f"{what}: dtype {obj.dtype}, expected torch.float32")
        if obj.layout != torch.strided:
            raise ValueError(f"{what}: {obj.layout} tensor, expected a dense (strided) tensor")
        if not obj.is_contiguous():
            raise ValueError(f"{what}: not contiguous (use .contiguous())")
        if obj.numel() == 0:
            raise ValueError(f"{what}: empty tensor")
        dev = obj.device
        if dev.type == "cpu":
            cuda = None
        elif dev.type == "cuda":
            cuda = dev.index if dev.index is not None else torch.cuda.current_device()
        else:
            raise ValueError(f"{what}: device {dev}, expected cpu or cuda")
        return Buffer(int(obj.data_ptr()), tuple(obj.shape), int(obj.numel()), cuda)
    raise TypeError(f"{what}: {type(obj).__name__}, expected a numpy.ndarray or a torch.Tensor")


def synchronize(cuda_device: int) -> None:
    """Waits for torch's queued work on a device, so the library reads finished gradients."""
    sys.modules["torch"].cuda.synchronize(cuda_device)
