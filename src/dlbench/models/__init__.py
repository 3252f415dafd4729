"""Benchmarkable models: ``get_model(name)`` returns a ``ModelSpec`` that builds the module and its batch."""

from dlbench.models.base import ModelSpec, UnknownModelError
from dlbench.models.registry import (
    MODERN_MODELS,
    SEED_MODELS,
    TEST_MODELS,
    get_model,
    list_models,
    model_names,
)

__all__ = [
    "MODERN_MODELS",
    "SEED_MODELS",
    "TEST_MODELS",
    "ModelSpec",
    "UnknownModelError",
    "get_model",
    "list_models",
    "model_names",
]
