"""The optimizer update every training loop of dlbench shares."""

from __future__ import annotations

import torch


def update(loss: torch.Tensor, opt: torch.optim.Optimizer,
           scaler: torch.amp.GradScaler | None) -> None:
    """Backward and one optimizer step; through ``scaler`` when fp16 training scales the loss.

    With default or foreach kernels, GradScaler.step reads its found-inf flag on the host: a
    sync point per step that every such fp16 PyTorch training loop has, so it belongs in the
    measured figure. A fused optimizer (``_step_supports_amp_scaling``) is handed the scale and
    the flag as tensors instead, and its kernel unscales and skips the update on the device;
    GradScaler.update adjusts the scale on the device too. No sync then, which is what lets a
    CUDA graph capture an fp16 step.
    """
    opt.zero_grad(set_to_none=True)
    if scaler is None:
        loss.backward()
        opt.step()
    else:
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
