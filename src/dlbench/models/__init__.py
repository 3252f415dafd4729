"""Benchmarkable models: ``get_model(name)`` returns a ``ModelSpec`` that builds the module and its batch.

The names below are loaded on first use (PEP 562): ``base`` and the registry import torch, and
``dlbench --help`` reaches this package (for :class:`UnknownModelError`) without needing a model.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from dlbench.models.errors import ModelSourceError, UnknownModelError
from dlbench.models.input_spec import InputSpec

if TYPE_CHECKING:
    from dlbench.models.base import ModelSpec
    from dlbench.models.sources import SOURCES_HELP
    from dlbench.models.registry import (
        MODERN_MODELS,
        SEED_MODELS,
        TEST_MODELS,
        get_model,
        list_models,
        model_names,
    )

_LAZY = {
    "ModelSpec": "dlbench.models.base",
    "SOURCES_HELP": "dlbench.models.sources",
    "MODERN_MODELS": "dlbench.models.registry",
    "SEED_MODELS": "dlbench.models.registry",
    "TEST_MODELS": "dlbench.models.registry",
    "get_model": "dlbench.models.registry",
    "list_models": "dlbench.models.registry",
    "model_names": "dlbench.models.registry",
}

__all__ = [
    "SOURCES_HELP",
    "InputSpec",
    "ModelSourceError",
    "MODERN_MODELS",
    "SEED_MODELS",
    "TEST_MODELS",
    "ModelSpec",
    "UnknownModelError",
    "get_model",
    "list_models",
    "model_names",
]


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(_LAZY[name]), name)
    globals()[name] = value  # the next lookup is a plain attribute
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
