"""How many parameters a model has, counted without building it for real.

A model is built on the meta device, where tensors have shapes and no storage: the count is
exact, costs no memory, and the random initialisation (the slow part of a build on meta) is
skipped. A source that knows a faster way (a transformers config with thousands of layers)
gives its spec a ``param_count`` of its own. The size guard
(:mod:`dlbench.workloads.size_guard`) reads these counts before anything is built.
"""

from __future__ import annotations

import contextlib
import functools
from dataclasses import dataclass
from typing import Callable, Iterator

import torch
from torch import nn

#: torch.nn.init's in-place initialisers: made no-ops while counting (the values are never read).
_INITS = ("uniform_", "normal_", "trunc_normal_", "constant_", "ones_", "zeros_", "eye_",
          "dirac_", "xavier_uniform_", "xavier_normal_", "kaiming_uniform_", "kaiming_normal_",
          "orthogonal_", "sparse_")


@dataclass(frozen=True)
class ParamCount:
    """Parameters of a model: all of them, and those that train (get gradients and state)."""

    total: int
    trainable: int


#: How many counts are under way: while above 0, the initialisers below skip their work.
_skipping = 0


def _skippable(fn: Callable[..., torch.Tensor]) -> Callable[..., torch.Tensor]:
    """``fn`` that does nothing while a count is under way, and all of its work otherwise."""
    @functools.wraps(fn)
    def init(tensor: torch.Tensor, *args: object, **kwargs: object) -> torch.Tensor:
        return tensor if _skipping else fn(tensor, *args, **kwargs)
    init.__wrapped_init__ = fn
    return init


@contextlib.contextmanager
def _no_init() -> Iterator[None]:
    """torch.nn.init's initialisers skip their work within the block.

    A library first imported within the block may keep references to the initialisers it
    found (transformers' ``initialization.TORCH_INIT_FUNCTIONS`` does, at import): those
    references must go on initialising once the block ends, or every model that library
    builds later in the process keeps PyTorch's default weights (an embedding drawn from
    N(0, 1), not transformers' N(0, 0.02)). So each initialiser is replaced by a wrapper that
    skips only while a count is under way, never by a bare no-op.
    """
    global _skipping
    saved = {name: getattr(nn.init, name) for name in _INITS if hasattr(nn.init, name)}
    try:
        for name, fn in saved.items():
            if not hasattr(fn, "__wrapped_init__"):
                setattr(nn.init, name, _skippable(fn))
        _skipping += 1
        yield
    finally:
        _skipping -= 1
        for name, fn in saved.items():
            setattr(nn.init, name, fn)


def count_module(model: nn.Module) -> ParamCount:
    """The parameters of ``model``, each shared (tied) tensor once."""
    params = list(model.parameters())  # parameters() yields a shared tensor once
    return ParamCount(total=sum(p.numel() for p in params),
                      trainable=sum(p.numel() for p in params if p.requires_grad))


def count_on_meta(build: Callable[[], nn.Module]) -> ParamCount | None:
    """The parameters of what ``build()`` returns, built on the meta device; None when it cannot
    be built there (code that insists on real tensors, a user's factory that fails)."""
    try:
        with torch.device("meta"), _no_init():
            return count_module(build())
    except Exception:  # noqa: BLE001  no count: the caller goes on without one
        return None


def extrapolate(counts: list[ParamCount], layers: list[int], target: int) -> ParamCount:
    """A lower bound on the count at ``target`` layers from exact counts at a few small layer
    counts (consecutive, ascending): the last count plus each further layer at the smallest
    per-layer growth seen, so a stack whose layers differ (a dense layer, then experts) is
    never over-counted."""
    def bound(values: list[int]) -> int:
        steps = [b - a for a, b in zip(values, values[1:])]
        return values[-1] + (target - layers[-1]) * max(0, min(steps))
    return ParamCount(total=bound([c.total for c in counts]),
                      trainable=bound([c.trainable for c in counts]))
