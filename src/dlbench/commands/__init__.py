"""Subcommands: one module per concern, each with ``register(subparsers)`` and an ``ORDER``.

A new subcommand is a new module here; ``dlbench.cli`` finds it, so no central list is edited.
"""

from __future__ import annotations

import importlib
import pkgutil
from types import ModuleType


def modules() -> list[ModuleType]:
    """Every module of this package that registers subcommands, in ``ORDER``."""
    found = []
    for info in pkgutil.iter_modules(__path__):
        mod = importlib.import_module(f"{__name__}.{info.name}")
        if hasattr(mod, "register"):
            found.append(mod)
    return sorted(found, key=lambda m: (getattr(m, "ORDER", 50), m.__name__))
