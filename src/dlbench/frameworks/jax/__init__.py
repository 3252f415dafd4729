"""JAX (XLA) beside PyTorch: Flax models, Optax optimizers, a jit-compiled step, the shared window.

Nothing here imports JAX at module level except the modules that need it; :func:`require`
turns a missing install into one line that names the extra.
"""

from __future__ import annotations

import importlib.util

INSTALL_HINT = ("--framework jax needs JAX, Flax and Optax: pip install 'dlbench[jax]' "
                "(on a GPU also JAX's CUDA plugin, e.g. pip install 'jax[cuda13]')")


class JaxMissingError(ImportError):
    """JAX, Flax or Optax is not installed."""


def available() -> bool:
    return all(importlib.util.find_spec(m) is not None for m in ("jax", "flax", "optax"))


def require() -> None:
    """Raise :class:`JaxMissingError` (naming the extra) unless JAX, Flax and Optax import."""
    if not available():
        raise JaxMissingError(INSTALL_HINT)


def versions() -> dict[str, str | None]:
    """jax, jaxlib, flax, optax and the XLA backend (platform and its version), or {} without
    JAX. Initialises JAX's backend, so only call it where JAX will run anyway."""
    if not available():
        return {}
    import flax  # heavy: jax
    import jax  # heavy: jax
    import jaxlib  # heavy: jax
    import optax  # heavy: jax
    out = {"jax": jax.__version__, "jaxlib": jaxlib.__version__, "flax": flax.__version__,
           "optax": optax.__version__}
    try:
        backend = jax.extend.backend.get_backend() if hasattr(jax, "extend") else None
        devices = jax.devices()
        out["xla_platform"] = devices[0].platform
        out["xla_platform_version"] = getattr(backend, "platform_version", None)
        out["xla_devices"] = f"{len(devices)}x{getattr(devices[0], 'device_kind', '?')}"
    except Exception as exc:  # a broken plugin must not lose the record
        out["xla_platform"] = f"unavailable: {exc}"[:200]
    return out
