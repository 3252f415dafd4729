"""Model factories, one module per source library.

Factories import their library inside the function body, so ``import dlbench.models`` costs only
the import of torch; timm and transformers (slow to import) load when a model that needs them is
built.
"""

from __future__ import annotations

import importlib
from types import ModuleType


def require(module: str, pip_name: str | None = None) -> ModuleType:
    """Import ``module`` or raise an ImportError that says what to pip install.

    Args:
        module: dotted module name to import (``timm``, ``transformers``).
        pip_name: distribution name when it differs from the module name.
    """
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        name = pip_name or module.split(".")[0]
        raise ImportError(
            f"this model needs the '{name}' package, which is not importable ({exc}); "
            f"install it with: pip install {name}"
        ) from exc
