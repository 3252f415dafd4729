"""CIFAR-10 in torchvision's on-disk format: ``cifar-10-batches-py/data_batch_{1..5}`` and
``test_batch``, pickled dicts of ``data`` (N x 3072 uint8, channel-major) and ``labels``.

Read directly, as ``torchvision.datasets.CIFAR10(root, download=False)`` would read it, but
without its MD5 check of the archive's files, so a re-packed or partial copy still loads (the
record names the files it read).

The batches are pickles, and an ordinary ``pickle.load`` runs whatever a crafted file asks for
(torchvision's reader does just that). They are read here with :class:`BatchUnpickler`, which
builds only what the format holds: dicts, lists, strings, bytes, numbers and numpy arrays; any
other name a file asks for is refused (:class:`CifarFormatError`, naming the file), before it is
imported or called.
"""

from __future__ import annotations

import pickle
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

FOLDER = "cifar-10-batches-py"
TRAIN = tuple(f"data_batch_{i}" for i in range(1, 6))
TEST = "test_batch"

HOWTO = """CIFAR-10 was not found{where}.
dlbench reads torchvision's on-disk format: a folder {folder}/ holding data_batch_1..5 and
test_batch. To get it (once, on a machine with a network):
  python -c "import torchvision; torchvision.datasets.CIFAR10('DIR', download=True)"
or download cifar-10-python.tar.gz from https://www.cs.toronto.edu/~kriz/cifar.html and unpack it
in DIR; then pass --data-dir DIR (or DIR/{folder})."""


class CifarFormatError(DatasetFormatError):
    """A CIFAR batch file that is not what the format holds (or asks to run code)."""


#: The only globals a CIFAR batch may name: how numpy pickles an array and its dtype (under
#: numpy 1's module names, numpy 2's, and protocol 5's buffer form), and how protocol 2
#: pickles bytes from Python 3 (``_codecs.encode``; ``bytes()`` when empty). Dicts, lists,
#: strings and numbers have opcodes of their own and name no global.
ALLOWED = frozenset({
    ("numpy.core.multiarray", "_reconstruct"), ("numpy._core.multiarray", "_reconstruct"),
    ("numpy.core.numeric", "_frombuffer"), ("numpy._core.numeric", "_frombuffer"),
    ("numpy", "ndarray"), ("numpy", "dtype"),
    ("_codecs", "encode"), ("codecs", "encode"),
    ("builtins", "bytes"), ("__builtin__", "bytes"), ("builtins", "bytearray"),
    ("__builtin__", "bytearray"),
})


class BatchUnpickler(pickle.Unpickler):
    """A ``pickle.Unpickler`` that resolves only the :data:`ALLOWED` globals."""

    def __init__(self, file, path: Path) -> None:
        super().__init__(file, encoding="latin1")  # Python 2's str, as torchvision reads it
        self.path = path

    def find_class(self, module: str, name: str):
        if (module, name) not in ALLOWED:
            raise CifarFormatError(f"{self.path}: refused to load {module}.{name}: a CIFAR-10 "
                                   "batch holds only arrays, lists and strings (a crafted "
                                   "pickle can run code; dlbench reads these with a "
                                   "restricted unpickler)")
        return super().find_class(module, name)


def _batch(path: Path) -> tuple[np.ndarray, np.ndarray]:
    try:
        with open(path, "rb") as f:
            d = BatchUnpickler(f, path).load()
    except CifarFormatError:
        raise
    except (pickle.UnpicklingError, EOFError, ValueError, TypeError, AttributeError,
            IndexError, OSError) as exc:
        raise CifarFormatError(f"{path}: not a CIFAR-10 batch ({type(exc).__name__}: "
                               f"{exc})") from None
    if not isinstance(d, dict):
        raise CifarFormatError(f"{path}: not a CIFAR-10 batch (a {type(d).__name__}, "
                               "not a dict)")
    # Python 2's pickles give str keys (latin1); pickles written by Python 3 may give bytes.
    d = {k.decode("latin1") if isinstance(k, bytes) else k: v for k, v in d.items()}
    try:
        data = np.asarray(d["data"], dtype=np.uint8).reshape(-1, 3, 32, 32)
        labels = np.asarray(d["labels"], dtype=np.int64)
    except (KeyError, ValueError, TypeError) as exc:
        raise CifarFormatError(f"{path}: not a CIFAR-10 batch ({type(exc).__name__}: "
                               f"{exc})") from None
    if labels.shape != (len(data),):
        raise CifarFormatError(f"{path}: {len(data)} images but labels of shape "
                               f"{labels.shape}")
    return data, labels


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
