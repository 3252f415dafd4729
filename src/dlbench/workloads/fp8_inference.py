"""fp8 inference of a decoder LM's linear layers (``dlbench generate --precision fp8``) through
torchao's float8 quantization, in one of two recipes (``--fp8-recipe``, :data:`RECIPES`).

``dynamic`` (the default), the recipe torchao documents for H100-class GPUs: :func:`quantize`
runs ``torchao.quantization.quantize_`` with
``Float8DynamicActivationFloat8WeightConfig(granularity=PerRow())`` on the model built in bf16:
each eligible layer's weight becomes fp8 (e4m3) with one fp32 scale per output row, and at every
call its input is quantized to fp8 with one scale per token (dynamic scales), so the layer is
one scaled fp8 matmul (``torch._scaled_mm``) with a bf16 output. A decode step reads those
weights at one byte per parameter, plus their scales.

``weight-only``: ``Float8WeightOnlyConfig(weight_dtype=float8_e4m3fn, granularity=PerRow())``
stores the same weights (fp8 e4m3, one fp32 scale per output row) and leaves the input bf16:
the weight is dequantized to bf16 in the matmul, which runs in bf16. It is the recipe for
decode at batch 1, which is bound by memory: a step reads every weight once, at one byte as
with the dynamic recipe, for a matrix-vector product that leaves the tensor cores idle either
way, so fp8 matmuls have little to gain there, while the dynamic recipe still quantizes every
input (an absolute-max reduction and a cast per layer and step) before each one. Where the
matmuls are bound by compute (the prefill, large batches) only the dynamic recipe's fp8
matmuls can be faster than bf16's. Both count the weights at one byte per parameter, plus
their scales, in the decode roofline; a weight-only prefill's MFU is against the bf16 peak,
the type its matmuls run in.

Left in bf16 by both, as torchao's and gpt-fast's recipes leave them: the LM head (its logits
are what greedy decoding takes the argmax of, where fp8's 3-bit mantissa would change the tokens
most; torchtitan's fp8 training leaves it too), the input embedding (a lookup, not a matmul),
the norms, and every linear layer whose dimensions do not divide by 16 (``torch._scaled_mm``
needs multiples of 16; the weight-only recipe keeps the same layers, so the two differ in the
recipe alone). The KV cache and attention stay bf16.

With ``--fuse`` the model is fused first and each fused weight
(:class:`~dlbench.workloads.fusion.FusedWeight`, computed with ``F.linear`` as a linear layer's
is) is quantized as one: one matmul with fp8 weights per group. Scales are per row and rows
belong to one part each, so fusing then quantizing equals quantizing each part. ``--fold-gqa``
changes attention only.

torchao is optional (``pip install torchao``, a version matching the installed torch);
:func:`check_ready` says before any model is built what is missing, an sm_89+ GPU or torchao,
with the device and install checks of :mod:`dlbench.workloads.fp8`.
"""

from __future__ import annotations

import inspect
from typing import Any, Callable

import torch
from torch import nn

from dlbench.config import ConfigError, choice
from dlbench.records.generate import FP8_RECIPES
from dlbench.workloads import fp8
from dlbench.workloads.devices import UnsupportedError
from dlbench.workloads.fusion import FusedWeight

#: The setting the errors name (:func:`dlbench.workloads.fp8.install_hint`), its field first.
SETTING = "precision fp8"
FIELD = "precision"
#: What to use where fp8 cannot run.
INSTEAD = 'use precision="bf16" (or fp32 on the CPU)'
#: The torchao module dlbench quantizes with.
MODULE = "torchao.quantization"
WHAT = "float8 inference (torchao.quantization)"
#: The recipes (``--fp8-recipe``), the default first.
RECIPES = FP8_RECIPES


def check_installed() -> None:
    """Raise :class:`ConfigError` with what to install unless torchao's quantization imports."""
    fp8.check_installed(MODULE, SETTING, WHAT)


def check_ready(device: torch.device) -> None:
    """Raise, with what to do, unless fp8 inference can run on ``device``: an sm_89+ GPU
    (:class:`UnsupportedError`; checked first, since installing torchao would not help a CPU)
    and torchao importable (:class:`ConfigError`)."""
    fp8.check_device(device, SETTING, INSTEAD)
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


def recipe(kind: str = "dynamic") -> tuple[Callable[..., Any], Any]:
    """torchao's ``quantize_`` and the fp8 config of ``kind`` (:data:`RECIPES`), both with
    per-row scales and e4m3 weights, under the names of the installed torchao:

    - ``dynamic``: ``Float8DynamicActivationFloat8WeightConfig`` since 0.9, the function
      ``float8_dynamic_activation_float8_weight`` before;
    - ``weight-only``: ``Float8WeightOnlyConfig`` since 0.9, the function
      ``float8_weight_only`` before (whose scales are per row, with no ``granularity`` to pass).

    ``set_inductor_config`` is turned off where it exists: on, it sets inductor's global options
    (coordinate-descent tuning...) for the rest of the process, so every later compiled config
    of the sweep would be compiled differently from a run without fp8 before it; the compile
    path sets its own."""
    choice("fp8_recipe", kind, RECIPES)
    try:
        from torchao.quantization import quantize_  # heavy, optional: only fp8 needs it
        try:
            from torchao.quantization import PerRow  # heavy, optional
        except ImportError:
            from torchao.quantization.granularity import PerRow  # heavy, optional: torchao < 0.7
        make = _config_maker(kind)
    except ImportError as e:
        raise ConfigError(f"{fp8.install_hint(SETTING, WHAT)} ({e})", FIELD) from None
    params = inspect.signature(make).parameters
    kwargs: dict[str, Any] = {}
    if "granularity" in params:
        kwargs["granularity"] = PerRow()
    if "weight_dtype" in params:
        kwargs["weight_dtype"] = torch.float8_e4m3fn
    if "set_inductor_config" in params:
        kwargs["set_inductor_config"] = False
    return quantize_, make(**kwargs)


def _config_maker(kind: str) -> Callable[..., Any]:
    """The installed torchao's config class (or, before 0.9, function) of ``kind``; raises
    ImportError where it has neither name."""
    if kind == "weight-only":
        try:
            from torchao.quantization import (  # heavy, optional
                Float8WeightOnlyConfig as make)
        except ImportError:
            from torchao.quantization import (  # heavy, optional: torchao < 0.9
                float8_weight_only as make)
        return make
    try:
        from torchao.quantization import (  # heavy, optional
            Float8DynamicActivationFloat8WeightConfig as make)
    except ImportError:
        from torchao.quantization import (  # heavy, optional: torchao < 0.9
            float8_dynamic_activation_float8_weight as make)
    return make


def quantize(model: nn.Module, kind: str = "dynamic") -> list[str]:
    """Quantize ``model``'s eligible layers (:func:`layer_filter`) in place with the fp8 recipe
    ``kind`` (:func:`recipe`: ``dynamic`` or ``weight-only``); returns their names. Raises
    :class:`UnsupportedError` when no layer is eligible (GPT-2's blocks are ``Conv1D``, not
    linear layers: a run would measure no fp8 matmul under an fp8 label), :class:`ConfigError`
    without torchao."""
    keep = layer_filter(model)
    names = [n for n, m in model.named_modules() if keep(m, n)]
    if not names:
        raise UnsupportedError(
            f"{SETTING}: {type(model).__name__} has no linear layer to quantize (besides its "
            f"LM head, none whose dimensions divide by {fp8.DIM_MULTIPLE}); {INSTEAD}", FIELD)
    quantize_, config = recipe(kind)
    quantize_(model, config, filter_fn=keep)
    return names
