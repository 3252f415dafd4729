"""The input pipeline: how batches of real data reach the model, and how fast it is on its own.

Two loaders, chosen with ``--loader``:

``gpu``        the whole dataset is copied to the device once (at init) as uint8; each epoch a
               permutation is drawn there and every batch is gathered there. No host work per
               step: the input pipeline all but disappears, as in the fastest MLPerf entries.
``dataloader`` torch's DataLoader: ``workers`` processes index (or, for an ImageFolder, decode)
               samples and collate them into pinned host memory; the batch crosses to the device
               with ``non_blocking=True``. What most training scripts do.

Either way the device turns the uint8 batch into normalised floats (and augments it), so the
host never moves more than a byte per pixel. Every rank draws the same permutation of the
training set for an epoch (from the seed and the epoch number) and takes its own interleaved
share; the few samples beyond a multiple of the world size are left out of that epoch, so every
rank takes the same number of steps, which data-parallel training needs.
"""

from __future__ import annotations

import time
from typing import Callable, Iterator

import torch
from torch.nn import functional as F

from dlbench.data.base import ArrayDataset, FolderDataset
from dlbench.measure.timer import synchronize
from dlbench.records.train import batch_sizes


def epoch_permutation(n: int, seed: int, epoch: int) -> torch.Tensor:
    """The training order of one epoch: the same on every rank and every run with this seed."""
    g = torch.Generator().manual_seed(seed * 1_000_003 + epoch)
    return torch.randperm(n, generator=g)


def shard(order: torch.Tensor, rank: int, world: int, even: bool) -> torch.Tensor:
    """Rank ``rank``'s share of ``order``: every ``world``-th sample; ``even`` trims the tail so
    that every rank gets the same count."""
    if even:
        order = order[: len(order) - len(order) % world]
    return order[rank::world]


class Normalizer:
    """uint8 images on the device -> normalised float, with optional crop-and-flip augmentation."""

    def __init__(self, mean, std, device: torch.device, augment: bool = False,
                 seed: int = 0) -> None:
        c = len(mean)
        self.mean = torch.tensor(mean, device=device, dtype=torch.float32).view(1, c, 1, 1)
        self.std = torch.tensor(std, device=device, dtype=torch.float32).view(1, c, 1, 1)
        self.augment = augment
        self.gen = torch.Generator(device=device).manual_seed(seed) if augment else None

    def __call__(self, x: torch.Tensor, train: bool = True) -> torch.Tensor:
        x = x.float().div_(255.0)
        if train and self.augment:
            x = self._crop_flip(x)
        return (x - self.mean) / self.std

    def _crop_flip(self, x: torch.Tensor, pad: int = 4) -> torch.Tensor:
        """Random crop from a zero-padded image and a random horizontal flip, per sample,
        vectorised over the batch (the CIFAR recipe of the ResNet and WRN papers)."""
        n, _, h, w = x.shape
        dev = x.device
        padded = F.pad(x, (pad, pad, pad, pad))
        oy = torch.randint(0, 2 * pad + 1, (n, 1), device=dev, generator=self.gen)
        ox = torch.randint(0, 2 * pad + 1, (n, 1), device=dev, generator=self.gen)
        rows = (oy + torch.arange(h, device=dev)).view(n, 1, h, 1)
        cols = (ox + torch.arange(w, device=dev)).view(n, 1, 1, w)
        idx = torch.arange(n, device=dev).view(n, 1, 1, 1)
        chans = torch.arange(x.shape[1], device=dev).view(1, -1, 1, 1)
        out = padded[idx, chans, rows, cols]
        flip = torch.rand(n, device=dev, generator=self.gen) < 0.5
        return torch.where(flip.view(n, 1, 1, 1), out.flip(3), out)


class DeviceLoader:
    """The dataset held on the device; batches gathered there (``--loader gpu``)."""

    def __init__(self, x: torch.Tensor, y: torch.Tensor, batch: int, device: torch.device,
                 rank: int = 0, world: int = 1, seed: int = 0, train: bool = True) -> None:
        # note: a host-to-device copy of the whole set, once, during init (MLPerf's staging)
        self.x = x.to(device)
        self.y = y.to(device)
        self.batch, self.rank, self.world, self.seed, self.train = batch, rank, world, seed, train
        self.device = device
        n = len(x)
        self.per_rank = (n - n % world) // world if train else len(range(rank, n, world))

    def __len__(self) -> int:
        return -(-self.per_rank // self.batch)

    @property
    def samples_per_epoch(self) -> int:
        return self.per_rank * self.world

    @property
    def batch_sizes(self) -> tuple[int, ...]:
        return batch_sizes(self.per_rank, self.batch)

    def epoch(self, e: int) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        if self.train:
            order = shard(epoch_permutation(len(self.x), self.seed, e), self.rank, self.world, True)
        else:
            order = torch.arange(self.rank, len(self.x), self.world)
        order = order.to(self.device)
        for i in range(0, len(order), self.batch):
            idx = order[i:i + self.batch]
            yield self.x[idx], self.y[idx]


class _Samples(torch.utils.data.Dataset):
    """One sample at a time from in-memory arrays, as a map-style dataset for the DataLoader."""

    def __init__(self, x: torch.Tensor, y: torch.Tensor) -> None:
        self.x, self.y = x, y

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self.x[i], self.y[i]


class _EpochSampler(torch.utils.data.Sampler):
    """This rank's share of the epoch's permutation (or of the fixed order, for evaluation)."""

    def __init__(self, n: int, rank: int, world: int, seed: int, train: bool) -> None:
        self.n, self.rank, self.world, self.seed, self.train = n, rank, world, seed, train
        self.e = 0

    def set_epoch(self, e: int) -> None:
        self.e = e

    def __iter__(self):
        if self.train:
            return iter(shard(epoch_permutation(self.n, self.seed, self.e), self.rank,
                              self.world, True).tolist())
        return iter(range(self.rank, self.n, self.world))

    def __len__(self) -> int:
        if self.train:
            return (self.n - self.n % self.world) // self.world
        return len(range(self.rank, self.n, self.world))


class HostLoader:
    """torch DataLoader with worker processes and pinned memory (``--loader dataloader``)."""

    def __init__(self, dataset, batch: int, device: torch.device, workers: int, rank: int = 0,
                 world: int = 1, seed: int = 0, train: bool = True) -> None:
        self.sampler = _EpochSampler(len(dataset), rank, world, seed, train)
        self.device = device
        self.world = world
        self.loader = torch.utils.data.DataLoader(
            dataset, batch_size=batch, sampler=self.sampler, num_workers=workers,
            pin_memory=device.type == "cuda", drop_last=False,
            # Workers live across epochs: their start-up is paid once, in the first epoch.
            persistent_workers=workers > 0)

    def __len__(self) -> int:
        return len(self.loader)

    @property
    def samples_per_epoch(self) -> int:
        return len(self.sampler) * self.world

    @property
    def batch_sizes(self) -> tuple[int, ...]:
        return batch_sizes(len(self.sampler), self.loader.batch_size)

    def epoch(self, e: int) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        self.sampler.set_epoch(e)
        for x, y in self.loader:
            yield (x.to(self.device, non_blocking=True), y.to(self.device, non_blocking=True))


def make_loaders(data: ArrayDataset | FolderDataset, loader: str, batch: int, eval_batch: int,
                 device: torch.device, workers: int, rank: int, world: int, seed: int):
    """The training and evaluation loaders of one run."""
    if loader == "gpu":
        if isinstance(data, FolderDataset):
            data = materialize(data)
        return (DeviceLoader(data.train_x, data.train_y, batch, device, rank, world, seed, True),
                DeviceLoader(data.eval_x, data.eval_y, eval_batch, device, rank, world, seed,
                             False))
    if isinstance(data, FolderDataset):
        train_set, eval_set = data.train, data.eval
    else:
        train_set, eval_set = _Samples(data.train_x, data.train_y), _Samples(data.eval_x,
                                                                            data.eval_y)
    return (HostLoader(train_set, batch, device, workers, rank, world, seed, True),
            HostLoader(eval_set, eval_batch, device, workers, rank, world, seed, False))


def materialize(data: FolderDataset) -> ArrayDataset:
    """Decode every image of an ImageFolder tree once, for ``--loader gpu`` (small trees only:
    the whole set must fit in host and device memory as uint8)."""
    def decode(ds) -> tuple[torch.Tensor, torch.Tensor]:
        xs, ys = zip(*(ds[i] for i in range(len(ds))))
        return torch.stack(xs), torch.tensor(ys, dtype=torch.int64)
    tx, ty = decode(data.train)
    ex, ey = decode(data.eval)
    return ArrayDataset(name=data.name, train_x=tx, train_y=ty, eval_x=ex, eval_y=ey,
                        num_classes=data.num_classes, mean=data.mean, std=data.std,
                        source=data.source)


def measure_pipeline(loader, normalize: Normalizer, steps: int, device: torch.device,
                     epoch: int, clock: Callable[[], float] = time.perf_counter) -> dict:
    """The input pipeline alone: up to ``steps`` batches drawn, moved and normalised, no model.

    Returns this rank's samples and seconds (host clock, one synchronisation at the end).
    """
    synchronize(device)
    t = clock()
    samples = 0
    for i, (x, _) in enumerate(loader.epoch(epoch)):
        normalize(x)
        samples += len(x)
        if i + 1 >= steps:
            break
    synchronize(device)  # note: the batches' copies and normalisation must have finished
    return {"samples": samples, "seconds": clock() - t}
