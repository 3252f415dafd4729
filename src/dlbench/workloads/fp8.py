"""fp8 training of a model's linear layers (``dlbench scale --fp8``) with torchao's float8
training, as torchtitan applies it.

:func:`convert` swaps each eligible ``nn.Linear`` for torchao's ``Float8Linear``
(``torchao.float8.convert_to_float8_training``) before any strategy wraps the model: before
tensor parallelism, per-block compile and FSDP2 sharding, or DDP (torchtitan's order). A
``Float8Linear`` is an ``nn.Linear``, so TP's plan and FSDP's units find it as before. Its
matmuls run in fp8 with dynamic tensorwise scales (torchao's default ``Float8LinearConfig``);
the weights stay in the run's precision, so FSDP2 gathers them in bf16 and each matmul casts
them: fp8 all-gathers (``enable_fsdp_float8_all_gather``) are left out, to keep one recipe for
every strategy. torchao says its casts are fast only under ``torch.compile``: use ``--compile``.

Left in the run's precision, as torchtitan leaves them: the LM head (the output projection,
whose logits fp8 would coarsen most) and every linear layer whose input or output features do
not divide by 16 (the fp8 matmul kernels, ``torch._scaled_mm``, need multiples of 16).

torchao is optional (``pip install torchao``, a version matching the installed torch); the
command checks it is importable before any process starts (:func:`check_installed`), and each
rank refuses a device without fp8 matmuls (:func:`check_device`) before it builds anything.
``dlbench generate --precision fp8`` makes the same two checks, in its own words
(:mod:`dlbench.workloads.fp8_inference`).
"""

from __future__ import annotations

import importlib
from typing import Callable

import torch
from torch import nn

from dlbench.config import ConfigError
from dlbench.workloads.devices import UnsupportedError


def install_hint(setting: str = "fp8", what: str = "float8 training") -> str:
    """What to install for ``setting`` (a config's field, and its value where that matters:
    ``fp8``, ``precision fp8``): torchao, a version matching the installed torch."""
    return (f"{setting} needs torchao's {what}: pip install torchao (a version matching your "
            "torch)")


INSTALL_HINT = install_hint()

#: The first compute capability with fp8 tensor cores: Ada (sm_89); Hopper is sm_90.
MIN_CAPABILITY = (8, 9)

#: The fp8 matmul (``torch._scaled_mm``) takes dimensions that are multiples of this.
DIM_MULTIPLE = 16


def _field(setting: str) -> str:
    """The config field a setting names: its first word (``precision`` of ``precision fp8``)."""
    return setting.split()[0]


def check_installed(module: str = "torchao.float8", setting: str = "fp8",
                    what: str = "float8 training") -> None:
    """Raise :class:`ConfigError` with what to install unless torchao's ``module`` imports
    (float8 training for ``fp8``; generation at ``precision fp8`` asks for its
    quantization API)."""
    try:
        importlib.import_module(module)  # heavy, optional: only fp8 needs it
    except ImportError as e:
        raise ConfigError(f"{install_hint(setting, what)} ({e})", _field(setting)) from None


def check_device(device: torch.device, setting: str = "fp8",
                 instead: str = "drop fp8=True") -> None:
    """Raise :class:`UnsupportedError` unless ``device`` has fp8 matmuls (sm_89 or newer); the
    message names ``setting`` (the config's field first, as :func:`install_hint` takes it) and
    says what to do ``instead``."""
    why = (f"{setting}: fp8 matmuls need an H100/Ada-class GPU (compute capability 8.9 or newer: "
           "L4, L40S, RTX 4090, H100, H200, B200)")
    if device.type != "cuda":
        raise UnsupportedError(f"{why}; this run is on the {device.type.upper()}: {instead}",
                               _field(setting))
    cap = torch.cuda.get_device_capability(device)
    if cap < MIN_CAPABILITY:
        name = torch.cuda.get_device_name(device)
        raise UnsupportedError(f"{why}; {name} is sm_{cap[0]}{cap[1]}: {instead}",
                               _field(setting))


def output_head(model: nn.Module) -> nn.Module | None:
    """The model's output layer: a language model's LM head (``get_output_embeddings``), else
    the last ``nn.Linear`` it registers (a classifier's); None without a linear layer."""
    inner = getattr(model, "model", model)  # text models are wrapped to return logits only
    get = getattr(inner, "get_output_embeddings", None)
    head = get() if callable(get) else None
    if isinstance(head, nn.Linear):
        return head
    linears = [m for m in model.modules() if isinstance(m, nn.Linear)]
    return linears[-1] if linears else None


def layer_filter(model: nn.Module) -> Callable[[nn.Module, str], bool]:
    """torchao's ``module_filter_fn`` for ``model``: True for the linear layers to train in fp8
    (every ``nn.Linear`` but the output head, with both dimensions multiples of 16)."""
    head = output_head(model)

    def converts(module: nn.Module, fqn: str) -> bool:
        return (isinstance(module, nn.Linear) and module is not head
                and module.in_features % DIM_MULTIPLE == 0
                and module.out_features % DIM_MULTIPLE == 0)
    return converts


def convert(model: nn.Module) -> list[str]:
    """Swap ``model``'s eligible linear layers for torchao's ``Float8Linear``, in place; returns
    their names. Raises :class:`UnsupportedError` when none is eligible (a run would measure
    no fp8 matmul under an fp8 label), :class:`ConfigError` without torchao."""
    keep = layer_filter(model)
    names = [n for n, m in model.named_modules() if keep(m, n)]
    if not names:
        raise UnsupportedError(f"fp8: {type(model).__name__} has no linear layer to train in "
                               f"fp8 (besides its output head, none whose features divide by "
                               f"{DIM_MULTIPLE}); drop fp8=True for this model", "fp8")
    try:
        from torchao.float8 import convert_to_float8_training  # heavy, optional
    except ImportError as e:
        raise ConfigError(f"{INSTALL_HINT} ({e})", "fp8") from None
    convert_to_float8_training(model, module_filter_fn=keep)
    return names
