"""The names the five reference articles had before they were named by what they are: the one
module that knows the old ids. Whatever reads a store, a shipped table or a command line that
may hold one (a throughput config's method, a run's suite or tag, a reference source, a flag)
reads it through here, under today's name. It imports nothing of dlbench: records sit low, and
every layer above may ask it.

Format history:

- Until 2026-11: the articles dlbench was built from (docs/articles.md) went by working
  numbers, ``seed000`` to ``seed004``, and the numbers were public names: the suites
  ``seed000`` (the tf_cnn_benchmarks study's six CNNs) and ``seed002`` (ms per batch of the
  classic per-model scripts), ``throughput --method seed002``, ``whatif --seed004``, and the
  source ids of the published results shipped in ``reference/results.json``. Stores of that
  time hold them in a throughput config's ``method``, in a run's ``suite``, ``tag`` (the
  campaigns tagged a suite's runs with its name) and ``command``.
- 2026-11: each article is named by what it is (:data:`ARTICLES`), and the suites, the method
  and the flag by what they do. A number meant nothing to someone who had not read the project's
  history, and the same number named an article, a suite and a method at once. The old names are
  still accepted on the command line (never shown) and read from old stores under the new ones.
  A config's key did not change: it is the hash of the config as first stored, so the
  ``fwd-bwd`` method is still hashed under its old name (:func:`method_in_key`), and --resume
  and comparisons match records stored before the renaming.
"""

from __future__ import annotations

from types import MappingProxyType
from typing import Mapping

#: Each article's working number -> its id: ``dlbench gpus --source`` and the source ids of
#: ``reference/results.json`` (the three whose tables are shipped), the names docs/articles.md
#: gives them.
ARTICLES: Mapping[str, str] = MappingProxyType({
    "seed000": "tf-cnn-benchmarks",   # tf_cnn_benchmarks on 4x Quadro RTX 8000, NVLink on/off
    "seed001": "mlperf-v0.5",         # MLPerf Training v0.5 on T4 vs V100-PCIe, time to train
    "seed002": "ms-per-batch",        # RTX 3060: ms per batch of VGG-16, ResNet-152, DenseNet-161
    "seed003": "cifar10-frameworks",  # PyTorch vs TensorFlow/Keras on CIFAR-10, 2x RTX 2080 Ti
    "seed004": "slow-networks",       # distributed TensorFlow over 1 GbE, 10 GbE and InfiniBand
})

#: Old suite names -> today's (``run --suite``, ``results show --view``, a run's suite column,
#: and the tags the campaigns gave a suite's runs).
SUITES: Mapping[str, str] = MappingProxyType({"seed000": "classic-cnn",
                                              "seed002": "ms-per-batch"})

#: Old ``throughput --method`` names -> today's (a stored config's ``method``).
METHODS: Mapping[str, str] = MappingProxyType({"seed002": "fwd-bwd"})

#: Old flags -> today's (``whatif``: the 2017 parameter-server cluster, predicted).
FLAGS: Mapping[str, str] = MappingProxyType({"--seed004": "--ps-cluster"})


def current(names: Mapping[str, str], name: str) -> str:
    """``name`` as it is called now: an old one mapped through ``names`` (one of this module's
    tables), any other returned as it is."""
    return names.get(name, name)


def former(names: Mapping[str, str], name: str) -> tuple[str, ...]:
    """The old names that ``names`` maps to ``name`` (none for a name that never had one)."""
    return tuple(old for old, new in names.items() if new == name)


def spellings(names: Mapping[str, str], name: str) -> tuple[str, ...]:
    """Every name a stored value meaning ``name`` may carry, today's first: what a query for
    ``name`` must match in a store written before the renaming."""
    now = current(names, name)
    return (now, *former(names, now))


def method_in_key(method: str) -> str:
    """The method as a config's key spells it: its first stored name, so that the key of a
    config measured today equals the key of the same config stored before the renaming."""
    return next(iter(former(METHODS, method)), method)
