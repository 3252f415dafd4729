"""CIFAR-10 in torchvision's on-disk format: ``cifar-10-batches-py/data_batch_{1..5}`` and
``test_batch``, pickled dicts of ``data`` (N x 3072 uint8, channel-major) and ``labels``.

Read directly, as ``torchvision.datasets.CIFAR10(root, download=False)`` would read it, but
without its MD5 check of the archive's files, so a re-packed or partial copy still loads (the
record names the files it read).
"""

from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np
import torch

from dlbench.data.base import ArrayDataset, DatasetMissingError, Reader, channel_stats, register

FOLDER = "cifar-10-batches-py"
TRAIN = tuple(f"data_batch_{i}" for i in range(1, 6))
TEST = "test_batch"

HOWTO = """CIFAR-10 was not found{where}.
dlbench reads torchvision's on-disk format: a folder {folder}/ holding data_batch_1..5 and
test_batch. To get it (once, on a machine with a network):
  python -c "import torchvision; torchvision.datasets.CIFAR10('DIR', download=True)"
or download cifar-10-python.tar.gz from https://www.cs.toronto.edu/~kriz/cifar.html and unpack it
in DIR; then pass --data-dir DIR (or DIR/{folder})."""


def _batch(path: Path) -> tuple[np.ndarray, np.ndarray]:
    with open(path, "rb") as f:
        d = pickle.load(f, encoding="latin1")
    data = np.asarray(d["data"], dtype=np.uint8).reshape(-1, 3, 32, 32)
    return data, np.asarray(d["labels"], dtype=np.int64)


def cifar10(data_dir: Path | None, image_size: int | None = None) -> ArrayDataset:
    roots = [data_dir / FOLDER, data_dir] if data_dir else []
    root = next((r for r in roots if all((r / n).is_file() for n in TRAIN + (TEST,))), None)
    if root is None:
        where = f" (looked in {', '.join(str(r) for r in roots)})" if roots else \
            " (no --data-dir given)"
        raise DatasetMissingError(HOWTO.format(where=where, folder=FOLDER))
    parts = [_batch(root / n) for n in TRAIN]
    tx = np.concatenate([p[0] for p in parts])
    ty = np.concatenate([p[1] for p in parts])
    ex, ey = _batch(root / TEST)
    train_x = torch.from_numpy(tx)
    mean, std = channel_stats(train_x)
    return ArrayDataset(name="cifar10", train_x=train_x, train_y=torch.from_numpy(ty),
                        eval_x=torch.from_numpy(ex), eval_y=torch.from_numpy(ey), num_classes=10,
                        mean=mean, std=std, source=str(root),
                        files=tuple(str(root / n) for n in TRAIN + (TEST,)))


register(Reader("cifar10", cifar10, "CIFAR-10: 50,000 + 10,000 colour 32x32 images, 10 classes"))
