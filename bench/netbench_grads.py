"""The fixed gradients of bench/netbench.py: the same per rank for gradagg and gloo workers."""
import numpy as np

SCALE = 0.01  # gradient standard deviation; the 2bit thresholds in netbench.py are set against it


def make_grad(rank: int, elements: int, seed: int = 1) -> np.ndarray:
    """Rank's gradient: `elements` float32 normals of std SCALE. Generated sequentially, so the
    first k elements of make_grad(r, n) equal make_grad(r, k) (the gloo check relies on it)."""
    g = np.random.default_rng([seed, rank]).standard_normal(elements, dtype=np.float32)
    g *= np.float32(SCALE)
    return g
