"""gradagg: the Python client of gradagg-server, over libgradagg.so (ctypes).

    import gradagg
    with gradagg.Client("127.0.0.1:7070", "job", rank, world, optimizer=gradagg.SGD(lr=0.1)) as c:
        c.add_tensor("w", w, codec="2bit", threshold=0.5)   # w: float32 numpy array or torch tensor
        c.init()
        for ...:
            c.step([grad_w])                                  # w now holds the new parameters

Rank, world size, job and server left out come from torchrun's or a Kubernetes indexed Job's
environment and GRADAGG_SERVER (gradagg.launch).
PyTorch: gradagg.torch.DistributedOptimizer (imports torch; gradagg itself does not).
Errors: gradagg.errors. Library search order: gradagg._lib (set GRADAGG_LIB to choose one).
"""
from . import errors, launch
from ._lib import LIBRARY_PATH
from .client import Client, TensorInfo, codec_id, codecs, cuda_built, cuda_device_count, delete_job
from .errors import GradaggError
from .options import DGC, SGD, Adam, Stats

__all__ = ["Client", "delete_job", "launch", "TensorInfo", "SGD", "Adam", "DGC", "Stats", "GradaggError", "errors",
           "codecs", "codec_id", "cuda_built", "cuda_device_count", "LIBRARY_PATH"]
