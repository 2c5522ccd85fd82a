"""The data: sklearn's digits (1797 8x8 images, 10 classes), one fixed stratified train/test
split, features standardised with the training set's statistics, and the per-step batches each
worker trains on."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

SPLIT_SEED = 0  # the split never changes between runs: seeds vary the model and the batch order
TEST_FRACTION = 0.2


@dataclass(frozen=True)
class Digits:
    x_train: np.ndarray  # float32 [n_train, 64], standardised
    y_train: np.ndarray  # int64 [n_train]
    x_test: np.ndarray
    y_test: np.ndarray


def load() -> Digits:
    """The fixed split (1437 train, 360 test), standardised with the training mean and std."""
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    bunch = load_digits()
    x_tr, x_te, y_tr, y_te = train_test_split(
        bunch.data, bunch.target, test_size=TEST_FRACTION, stratify=bunch.target, random_state=SPLIT_SEED)
    mean = x_tr.mean(axis=0)
    std = x_tr.std(axis=0)
    std[std == 0] = 1.0  # pixels that are always blank stay 0
    def scale(x: np.ndarray) -> np.ndarray:
        return np.ascontiguousarray((x - mean) / std, dtype=np.float32)
    return Digits(scale(x_tr), y_tr.astype(np.int64), scale(x_te), y_te.astype(np.int64))


def epoch_batches(n: int, batch: int, seed: int, epoch: int) -> list[np.ndarray]:
    """The global batches of one epoch: a permutation drawn from (seed, epoch), cut into batches
    of `batch` indices; the last, short batch is dropped so every step has the same size."""
    order = np.random.default_rng([seed, epoch]).permutation(n)
    return [order[i:i + batch] for i in range(0, n - batch + 1, batch)]


def shard(indices: np.ndarray, rank: int, world_size: int) -> np.ndarray:
    """Worker `rank`'s part of a global batch: its contiguous 1/world_size of the indices."""
    per = len(indices) // world_size
    return indices[rank * per:(rank + 1) * per]
