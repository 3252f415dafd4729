"""What a dataset is to the training workload, and the registry of readers by name."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import torch

from dlbench.config import ConfigError


class DatasetMissingError(ConfigError):
    """The dataset is not on disk where dlbench looked; the message says how to get it."""


class DatasetFormatError(ConfigError):
    """A dataset file that is not in its format (truncated, garbage, another file); the message
    names the file."""


@dataclass(frozen=True, eq=False)
class ArrayDataset:
    """A whole dataset in memory: uint8 images ``N x C x H x W``, int64 labels.

    ``mean`` and ``std`` (per channel, on the 0..1 scale) normalise the images on the device, so
    the host only ever moves uint8 (a quarter of the bytes of float32).
    """

    name: str
    train_x: torch.Tensor
    train_y: torch.Tensor
    eval_x: torch.Tensor
    eval_y: torch.Tensor
    num_classes: int
    mean: tuple[float, ...]
    std: tuple[float, ...]
    source: str                      # where the files were read from
    files: tuple[str, ...] = field(default=())

    @property
    def channels(self) -> int:
        return int(self.train_x.shape[1])

    @property
    def size(self) -> int:
        return int(self.train_x.shape[-1])

    @property
    def train_len(self) -> int:
        return int(self.train_x.shape[0])

    @property
    def eval_len(self) -> int:
        return int(self.eval_x.shape[0])


@dataclass(frozen=True, eq=False)
class FolderDataset:
    """An ImageFolder tree, decoded per sample (by DataLoader workers, or once with ``--loader gpu``).

    ``train`` and ``eval`` are ``torchvision.datasets.ImageFolder`` objects whose samples are uint8
    ``C x size x size`` tensors (resized and centre-cropped).
    """

    name: str
    train: object
    eval: object
    num_classes: int
    size: int
    mean: tuple[float, ...]
    std: tuple[float, ...]
    source: str
    channels: int = 3

    @property
    def train_len(self) -> int:
        return len(self.train)

    @property
    def eval_len(self) -> int:
        return len(self.eval)


Dataset = ArrayDataset | FolderDataset


@dataclass(frozen=True)
class Reader:
    """How one dataset is found and read."""

    name: str
    read: Callable[[Path | None, int | None], Dataset]   # (data_dir, image size) -> dataset
    description: str


_READERS: dict[str, Reader] = {}


def register(reader: Reader) -> None:
    _READERS[reader.name] = reader


def dataset_names() -> list[str]:
    _load_readers()
    return list(_READERS)


def load_dataset(name: str, data_dir: str | Path | None = None,
                 image_size: int | None = None) -> Dataset:
    """Read dataset ``name`` from ``data_dir`` (or its usual places); raises
    :class:`DatasetMissingError` with instructions when it is not there."""
    _load_readers()
    key = name.strip().lower().replace("_", "-")
    key = {"fashionmnist": "fashion-mnist", "mnist-5k": "mnist5k", "cifar-10": "cifar10",
           "image-folder": "imagefolder"}.get(key, key)
    if key not in _READERS:
        raise ConfigError(f"--dataset must be one of {', '.join(_READERS)}; got {name!r}")
    if not data_dir:
        return _READERS[key].read(None, image_size)
    where = Path(data_dir).expanduser()
    if where.is_file() and key not in FILE_READERS:
        raise DatasetMissingError(f"--data-dir {data_dir} is a file; name the directory that "
                                  f"holds the {key} dataset (see 'dlbench train --help')")
    try:
        return _READERS[key].read(where, image_size)
    except (DatasetMissingError, DatasetFormatError) as exc:
        # Every data error names the flag the user can change, whichever reader raised it.
        if str(exc).startswith("--data-dir"):
            raise
        missing = "" if where.exists() else " does not exist"
        raise type(exc)(f"--data-dir {data_dir}{missing}: {exc}") from None


#: Readers that take ``--data-dir`` naming the one file they read (mnist5k's CSV).
FILE_READERS = frozenset({"mnist5k"})


def _load_readers() -> None:
    # Importing the reader modules registers them; done lazily so that `import dlbench.data` is cheap.
    for name in ("idx", "mnist5k", "cifar", "folder"):
        importlib.import_module(f"dlbench.data.{name}")


def first_existing(candidates: Sequence[Path], names: Sequence[Sequence[str]]) -> dict[str, Path] | None:
    """The first directory among ``candidates`` holding one file of every group in ``names``
    (each group lists accepted spellings, e.g. with and without ``.gz``)."""
    for d in candidates:
        found = {}
        for group in names:
            hit = next((d / n for n in group if (d / n).is_file()), None)
            if hit is None:
                break
            found[group[0]] = hit
        else:
            return found
    return None


def channel_stats(x: torch.Tensor) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """Per-channel mean and standard deviation of uint8 images, on the 0..1 scale.

    From a histogram of the 256 byte values: exact, and no float copy of the whole set.
    """
    values = torch.arange(256, dtype=torch.float64) / 255.0
    means, stds = [], []
    for c in range(x.shape[1]):
        hist = torch.bincount(x[:, c].reshape(-1).to(torch.int64), minlength=256).to(torch.float64)
        n = hist.sum()
        m = float((hist * values).sum() / n)
        var = float((hist * (values - m) ** 2).sum() / n)
        means.append(m)
        stds.append(max(var, 1e-12) ** 0.5)
    return tuple(means), tuple(stds)
