"""fp8 inference of a decoder LM's linear layers (``dlbench generate --precision fp8``) through
torchao's float8 quantization, the recipe torchao documents for H100-class GPUs.

:func:`quantize` runs ``torchao.quantization.quantize_`` with
``Float8DynamicActivationFloat8WeightConfig(granularity=PerRow())`` on the model built in bf16:
each eligible layer's weight becomes fp8 (e4m3) with one fp32 scale per output row, and at every
call its input is quantized to fp8 with one scale per token (dynamic scales), so the layer is
one scaled fp8 matmul (``torch._scaled_mm``) with a bf16 output. A decode step reads those
weights at one byte per parameter, plus their scales.

Left in bf16, as torchao's and gpt-fast's recipes leave them: the LM head (its logits are what
greedy decoding takes the argmax of, where fp8's 3-bit mantissa would change the tokens most;
torchtitan's fp8 training leaves it too), the input embedding (a lookup, not a matmul), the
norms, and every linear layer whose dimensions do not divide by 16 (``torch._scaled_mm`` needs
multiples of 16). The KV cache and attention stay bf16.

With ``--fuse`` the model is fused first and each fused weight
(:class:`~dlbench.workloads.fusion.FusedWeight`, computed with ``F.linear`` as a linear layer's
is) is quantized as one: one fp8 matmul per group. Scales are per row and rows belong to one
part each, so fusing then quantizing equals quantizing each part. ``--fold-gqa`` changes
attention only.

torchao is optional (``pip install torchao``, a version matching the installed torch);
:func:`check_ready` says before any model is built what is missing, an sm_89+ GPU or torchao,
with the device and install checks of :mod:`dlbench.workloads.fp8`.
"""

from __future__ import annotations

import inspect
from typing import Any, Callable

import torch
from torch import nn

from dlbench.config import ConfigError
from dlbench.workloads import fp8
from dlbench.workloads.devices import UnsupportedError
from dlbench.workloads.fusion import FusedWeight

FLAG = "--precision fp8"
#: What to use where fp8 cannot run.
INSTEAD = "use --precision bf16 (or fp32 on the CPU)"
#: The torchao module dlbench quantizes with.
MODULE = "torchao.quantization"
WHAT = "float8 inference (torchao.quantization)"


def check_installed() -> None:
    """Raise :class:`ConfigError` with what to install unless torchao's quantization imports."""
    fp8.check_installed(MODULE, FLAG, WHAT)


def check_ready(device: torch.device) -> None:
    """Raise, with what to do, unless fp8 inference can run on ``device``: an sm_89+ GPU
    (:class:`UnsupportedError`; checked first, since installing torchao would not help a CPU)
    and torchao importable (:class:`ConfigError`)."""
    fp8.check_device(device, FLAG, INSTEAD)
    check_installed()


def layer_filter(model: nn.Module) -> Callable[[nn.Module, str], bool]:
    """torchao's ``filter_fn`` for ``model``: True for the layers to quantize, every
    ``nn.Linear`` and fused weight (``--fuse``) but the LM head, with both dimensions
    multiples of 16."""
    get = getattr(model, "get_output_embeddings", None)
    head = get() if callable(get) else fp8.output_head(model)

    def quantizes(module: nn.Module, fqn: str = "") -> bool:
        if not isinstance(module, (nn.Linear, FusedWeight)) or module is head:
            return False
        out_features, in_features = module.weight.shape
        return (in_features % fp8.DIM_MULTIPLE == 0
                and out_features % fp8.DIM_MULTIPLE == 0)
    return quantizes


def recipe() -> tuple[Callable[..., Any], Any]:
    """torchao's ``quantize_`` and the dynamic fp8 config with per-row scales, under the names
    of the installed torchao: ``Float8DynamicActivationFloat8WeightConfig`` since 0.9, the
    function ``float8_dynamic_activation_float8_weight`` before. ``set_inductor_config`` is
    turned off where it exists: on, it sets inductor's global options (coordinate-descent
    tuning...) for the rest of the process, so every later compiled config of the sweep would
    be compiled differently from a run without fp8 before it; the compile path sets its own."""
    try:
        from torchao.quantization import quantize_  # heavy, optional: only fp8 needs it
        try:
            from torchao.quantization import PerRow  # heavy, optional
        except ImportError:
            from torchao.quantization.granularity import PerRow  # heavy, optional: torchao < 0.7
        try:
            from torchao.quantization import (  # heavy, optional
                Float8DynamicActivationFloat8WeightConfig as make)
        except ImportError:
            from torchao.quantization import (  # heavy, optional: torchao < 0.9
                float8_dynamic_activation_float8_weight as make)
    except ImportError as e:
        raise ConfigError(f"{fp8.install_hint(FLAG, WHAT)} ({e})") from None
    kwargs: dict[str, Any] = {"granularity": PerRow()}
    if "set_inductor_config" in inspect.signature(make).parameters:
        kwargs["set_inductor_config"] = False
    return quantize_, make(**kwargs)


def quantize(model: nn.Module, config: Any = None) -> list[str]:
    """Quantize ``model``'s eligible layers (:func:`layer_filter`) in place with ``config``,
    by default the dynamic fp8 recipe (:func:`recipe`); returns their names. Raises
    :class:`UnsupportedError` when no layer is eligible (GPT-2's blocks are ``Conv1D``, not
    linear layers: a run would measure no fp8 matmul under an fp8 label), :class:`ConfigError`
    without torchao."""
    keep = layer_filter(model)
    names = [n for n, m in model.named_modules() if keep(m, n)]
    if not names:
        raise UnsupportedError(
            f"{FLAG}: {type(model).__name__} has no linear layer to quantize (besides its LM "
            f"head, none whose dimensions divide by {fp8.DIM_MULTIPLE}); {INSTEAD}")
    quantize_, default = recipe()
    quantize_(model, default if config is None else config, filter_fn=keep)
    return names
