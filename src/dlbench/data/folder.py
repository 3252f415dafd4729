"""An ImageNet-style tree: ``DIR/train/<class>/<image>`` and ``DIR/val/<class>/<image>``.

Read with ``torchvision.datasets.ImageFolder``: each image is decoded when it is drawn (by the
DataLoader's workers), resized so its short side is the image size, centre-cropped to a square and
kept as uint8; the device normalises it. The class list comes from the training folders, and the
evaluation folders must use the same names.
"""

from __future__ import annotations

from pathlib import Path

from dlbench.data.base import DatasetMissingError, FolderDataset, Reader, register

# ImageNet's channel statistics (torchvision's reference scripts): the usual choice for a tree of
# natural photographs, where a pass over every image to measure its own would cost minutes.
IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
DEFAULT_SIZE = 224
EVAL_NAMES = ("val", "validation", "test")

HOWTO = """no ImageFolder tree was found{where}.
--dataset imagefolder reads DIR/train/<class>/<images> and DIR/val/<class>/<images> (as ImageNet's
train and val sets are usually laid out, one folder per class; 'validation' or 'test' also work
for val). Pass the tree's root as --data-dir DIR."""


def imagefolder(data_dir: Path | None, image_size: int | None = None) -> FolderDataset:
    if data_dir is None or not (data_dir / "train").is_dir():
        where = f" in {data_dir}" if data_dir else " (no --data-dir given)"
        raise DatasetMissingError(HOWTO.format(where=where))
    eval_dir = next((data_dir / n for n in EVAL_NAMES if (data_dir / n).is_dir()), None)
    if eval_dir is None:
        raise DatasetMissingError(HOWTO.format(where=f": {data_dir} has train/ but no val/"))
    from torchvision import datasets, transforms  # slow to import: only for an image folder

    size = image_size or DEFAULT_SIZE
    tf = transforms.Compose([transforms.Resize(size), transforms.CenterCrop(size),
                             transforms.PILToTensor()])
    rgb = _rgb_loader()
    train = datasets.ImageFolder(str(data_dir / "train"), transform=tf, loader=rgb)
    evals = datasets.ImageFolder(str(eval_dir), transform=tf, loader=rgb)
    if evals.classes != train.classes:
        missing = sorted(set(train.classes) ^ set(evals.classes))
        raise DatasetMissingError(f"{eval_dir} and {data_dir / 'train'} have different classes "
                                  f"({', '.join(missing[:5])}...); they must match")
    return FolderDataset(name="imagefolder", train=train, eval=evals,
                         num_classes=len(train.classes), size=size, mean=IMAGENET_MEAN,
                         std=IMAGENET_STD, source=str(data_dir))


def _rgb_loader():
    from PIL import Image  # torchvision's dependency, needed only when a folder is read

    def load(path: str):
        # Grey and palette images exist in ImageNet; every sample must have three channels.
        with open(path, "rb") as f:
            return Image.open(f).convert("RGB")
    return load


register(Reader("imagefolder", imagefolder,
                "an ImageFolder tree DIR/train/<class>/*, DIR/val/<class>/* (ImageNet-style)"))
