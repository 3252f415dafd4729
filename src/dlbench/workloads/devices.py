"""Which device a config runs on, and whether that device can run it at all.

Checked before anything is built, so a precision the GPU lacks fails in a second with a message
that says what to use instead, not after minutes of a sweep.
"""

from __future__ import annotations

import torch

from dlbench.config import ConfigError
from dlbench.models.base import ModelSpec
from dlbench.records.base import ErrorType
from dlbench.records.throughput import ThroughputConfig


class UnsupportedError(ConfigError):
    """This device (or this dlbench) cannot run the config; the message says what would."""

    error_type = ErrorType.UNSUPPORTED  # the row it becomes (dlbench.launch.failures.classify)


def resolve_device(name: str) -> torch.device:
    """``auto`` is the first CUDA GPU when there is one, else the CPU."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    dev = torch.device(name)
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise UnsupportedError("device cuda: no CUDA GPU is visible (torch.cuda.is_available() is "
                               'False); use device="cpu", or check the driver and '
                               "CUDA_VISIBLE_DEVICES", "device")
    if dev.type == "cuda" and dev.index is not None and dev.index >= torch.cuda.device_count():
        raise UnsupportedError(f"device {name}: only {torch.cuda.device_count()} GPU(s) are "
                               "visible", "device")
    return dev


def check_supported(cfg: ThroughputConfig, spec: ModelSpec, device: torch.device) -> None:
    """Raise :class:`UnsupportedError` if ``cfg`` cannot run on ``device``."""
    p = cfg.precision
    if p == "fp8":
        raise UnsupportedError("precision fp8 is not implemented in dlbench yet; use bf16 or fp16",
                               "precision")
    if device.type == "cpu":
        if p == "tf32":
            raise UnsupportedError("precision tf32 is a mode of NVIDIA GPUs (Ampere and newer); "
                                   "on the CPU use fp32 or bf16", "precision")
    elif device.type == "cuda":
        major, minor = torch.cuda.get_device_capability(device)
        name = torch.cuda.get_device_name(device)
        if p == "tf32" and major < 8:
            raise UnsupportedError(f"precision tf32 needs an Ampere or newer GPU; {name} is "
                                   f"sm_{major}{minor}: use fp32 or fp16", "precision")
        if p == "bf16" and not torch.cuda.is_bf16_supported(including_emulation=False):
            raise UnsupportedError(f"precision bf16: {name} (sm_{major}{minor}) has no native "
                                   "bf16; use fp16", "precision")
    if device.type != "cuda" and cfg.cuda_graph:
        raise UnsupportedError("cuda_graph captures CUDA work: it needs a CUDA GPU; drop it "
                               "on the CPU (tuned mode leaves it out there by itself)",
                               "cuda_graph")
    if device.type != "cuda" and cfg.attention in ("flash", "efficient", "cudnn"):
        raise UnsupportedError(f"attention {cfg.attention} is a CUDA kernel; on the CPU use "
                               'attention="math" or leave the choice to PyTorch', "attention")
    if cfg.channels_last and spec.kind != "image":
        raise UnsupportedError(f"channels_last applies to image models; {spec.name} is a "
                               f"{spec.kind} model", "channels_last")
    if cfg.pad_vocab and spec.kind != "text":
        raise UnsupportedError(f"pad_vocab pads a language model's vocabulary; {spec.name} "
                               f"is an {spec.kind} model, with no vocabulary to pad", "pad_vocab")
    if cfg.method == "fwd-bwd" and spec.kind != "image":
        raise UnsupportedError("method fwd-bwd reproduces an image-model table; use it with "
                               "image models", "method")


def bf16_available() -> bool:
    """Whether the default device does bf16 natively (the CPU always can, through autocast)."""
    if not torch.cuda.is_available():
        return True
    return torch.cuda.is_bf16_supported(including_emulation=False)
