"""The techniques tuned mode tries, each a change of one or two config fields, and where each
applies. A lever that cannot apply says why, so the lever table shows it rather than hiding it."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable

from dlbench.models.base import ModelSpec
from dlbench.models.zoo.text import VOCAB_MULTIPLE
from dlbench.records.lever_trials import describe_change  # noqa: F401 (re-exported)
from dlbench.records.throughput import ThroughputConfig

# (new config, None) when the lever applies; (None, why not) when it does not.
Outcome = tuple[ThroughputConfig | None, str | None]


@dataclass(frozen=True)
class Lever:
    name: str
    what: str
    apply: Callable[[ThroughputConfig, ModelSpec, str], Outcome]


def uses_attention(spec: ModelSpec) -> bool:
    """Models whose attention runs through scaled_dot_product_attention: the transformers of
    the registry (transformers' sdpa implementation; torchvision's ViT through MultiheadAttention)."""
    return spec.kind == "text" or spec.name.startswith("vit")


# Why a lever does not apply to a kind of model: said in a lever table, left out of a recipe's
# notes (a recipe for an image model need not say it pads no vocabulary).
NOT_IMAGE = "not an image model"
NOT_LANGUAGE = "not a language model"


def _scaler_syncs(cfg: ThroughputConfig) -> bool:
    """fp16 training whose GradScaler reads the overflow flag on the host: any optimizer but a
    fused one, whose kernel reads the flag on the device (see workloads.step.update)."""
    return (cfg.mode == "train" and cfg.method == "standard" and cfg.precision == "fp16"
            and cfg.optimizer_impl != "fused")


def _graph_blocker(cfg: ThroughputConfig) -> str | None:
    if _scaler_syncs(cfg):
        return ("fp16 training with unfused optimizer kernels: GradScaler reads its overflow "
                "flag on the host each step")
    if cfg.compile in ("reduce-overhead", "max-autotune"):
        return f"compile mode {cfg.compile} captures CUDA graphs itself"
    if cfg.checkpointing:
        return "activation checkpointing saves RNG state, which a capture forbids"
    return None


def _pad_vocab(cfg, spec, device) -> Outcome:
    if spec.kind != "text":
        return None, NOT_LANGUAGE
    if cfg.pad_vocab:
        return None, "already padded"
    if spec.num_classes % VOCAB_MULTIPLE == 0:
        return None, f"vocabulary already a multiple of {VOCAB_MULTIPLE}"
    return replace(cfg, pad_vocab=True), None


def _channels_last(cfg, spec, device) -> Outcome:
    if spec.kind != "image":
        return None, NOT_IMAGE
    if cfg.channels_last:
        return None, "already channels_last"
    return replace(cfg, channels_last=True), None


def _fused_optimizer(cfg, spec, device) -> Outcome:
    if cfg.mode != "train" or cfg.method != "standard":
        return None, "no optimizer step"
    if cfg.optimizer_impl == "fused":
        return None, "already fused"
    return replace(cfg, optimizer_impl="fused"), None


def _flash(cfg, spec, device) -> Outcome:
    if not uses_attention(spec):
        return None, "no attention"
    if device != "cuda":
        return None, "flash attention kernels are CUDA's"
    if cfg.precision not in ("fp16", "bf16"):
        return None, "flash attention needs fp16 or bf16"
    return replace(cfg, attention="flash"), None


# Why compile levers stay off the CPU (the lever table and tuned mode's notes say it).
NO_COMPILE_ON_CPU = "not tried on the CPU: compile time there outweighs a short benchmark"


def _compile(cfg, spec, device) -> Outcome:
    if device != "cuda":
        return None, NO_COMPILE_ON_CPU
    if cfg.compile:
        return None, f"already compiled ({cfg.compile})"
    return replace(cfg, compile="default"), None


def _compile_loss(cfg, spec, device) -> Outcome:
    if not cfg.compile:
        return None, "the model is not compiled"
    if cfg.mode != "train" or cfg.method != "standard":
        return None, "no loss"
    if cfg.compile_loss:
        return None, "already compiled with the model"
    return replace(cfg, compile_loss=True), None


def _max_autotune(cfg, spec, device) -> Outcome:
    if device != "cuda":
        return None, NO_COMPILE_ON_CPU
    if cfg.compile == "max-autotune-no-cudagraphs":
        return None, "already max-autotune"
    # A kept CUDA graph is no obstacle: the graph's warm-up steps run outside the capture, and
    # Inductor compiles and times its kernels there.
    return replace(cfg, compile="max-autotune-no-cudagraphs"), None


def _cuda_graph(cfg, spec, device) -> Outcome:
    if device != "cuda":
        return None, "CUDA graphs need a CUDA GPU"
    if cfg.cuda_graph:
        return None, "already captured"
    if _scaler_syncs(cfg):  # fused kernels take GradScaler's overflow check onto the device
        cfg = replace(cfg, optimizer_impl="fused")
    blocker = _graph_blocker(cfg)
    return (None, blocker) if blocker else (replace(cfg, cuda_graph=True), None)


def _other_16bit(cfg, spec, device) -> Outcome:
    if device != "cuda":
        return None, "the CPU's 16-bit autocast is bf16"
    if cfg.precision == "bf16":
        # Under a CUDA graph kept before, fp16 training needs the fused kernels (GradScaler).
        fused = cfg.cuda_graph and _scaler_syncs(replace(cfg, cuda_graph=False, precision="fp16"))
        return replace(cfg, precision="fp16",
                       optimizer_impl="fused" if fused else cfg.optimizer_impl), None
    if cfg.precision == "fp16":
        return replace(cfg, precision="bf16"), None
    return None, f"{cfg.precision} was asked for; only a 16-bit type is swapped"


def _double_batch(cfg, spec, device) -> Outcome:
    return replace(cfg, batch_size=cfg.batch_size * 2), None


LEVERS: tuple[Lever, ...] = (
    # First: it changes the model's shape, which every later lever (compile above all) sees.
    Lever("pad-vocab", f"vocabulary padded to a multiple of {VOCAB_MULTIPLE}", _pad_vocab),
    Lever("channels_last", "NHWC memory layout", _channels_last),
    Lever("fused-optimizer", "the optimizer's fused kernels", _fused_optimizer),
    Lever("flash-attention", "SDPA pinned to flash attention", _flash),
    # Before the CUDA graph, which then captures whichever 16-bit type won (fp16 training
    # with fused optimizer kernels: the graph lever sets them where they were not kept).
    Lever("other-16-bit", "fp16 instead of bf16 (or back)", _other_16bit),
    Lever("compile", "torch.compile, default mode", _compile),
    # After compile, which it widens: model and loss in one graph.
    Lever("compile-loss", "the loss compiled with the model, one graph", _compile_loss),
    Lever("cuda-graph", "whole step captured in one CUDA graph", _cuda_graph),
    Lever("batch-x2", "twice the batch", _double_batch),
)

# Tried only when named in --levers: Inductor's autotuning outlasted three tries of ResNet-50 on
# an H100 (max-autotune; docs/tuning.md), more than a default search should spend.
EXTRA_LEVERS: tuple[Lever, ...] = (
    Lever("max-autotune", "torch.compile, max-autotune-no-cudagraphs mode (minutes)",
          _max_autotune),
)

BY_NAME = {lever.name: lever for lever in LEVERS + EXTRA_LEVERS}


def lever_named(name: str) -> Lever:
    try:
        return BY_NAME[name]
    except KeyError:
        raise ValueError(f"unknown lever {name!r}; levers: {', '.join(BY_NAME)}") from None


def flags_of(cfg: ThroughputConfig) -> str:
    """The ``dlbench throughput`` flags that reproduce ``cfg`` by hand."""
    out = [f"-m {cfg.model}", f"-b {cfg.batch_size}", f"--precision {cfg.precision}"]
    if cfg.mode != "train":
        out.append(f"--mode {cfg.mode}")
    if cfg.method != "standard":
        out.append(f"--method {cfg.method}")
    if cfg.input_size:
        out.append(f"--seq-len {cfg.input_size}")
    if cfg.channels_last:
        out.append("--channels-last on")
    if cfg.compile:
        out.append(f"--compile {cfg.compile}")
    if cfg.compile_loss:
        out.append("--compile-loss on")
    if cfg.cuda_graph:
        out.append("--cuda-graph on")
    if cfg.optimizer != "sgd":
        out.append(f"--optimizer {cfg.optimizer}")
    if cfg.optimizer_impl != "default":
        out.append(f"--optimizer-impl {cfg.optimizer_impl}")
    if cfg.attention:
        out.append(f"--attention {cfg.attention}")
    if cfg.pad_vocab:
        out.append("--pad-vocab")
    return " ".join(out)
