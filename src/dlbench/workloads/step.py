"""The optimizer update every training loop of dlbench shares."""

from __future__ import annotations

import torch


def update(loss: torch.Tensor, opt: torch.optim.Optimizer,
           scaler: torch.amp.GradScaler | None) -> None:
    """Backward and one optimizer step; through ``scaler`` when fp16 training scales the loss.

    GradScaler.step reads its found-inf flag on the host: a sync point per step that every
    eager fp16 PyTorch training loop has, so it belongs in the measured figure.
    """
    opt.zero_grad(set_to_none=True)
    if scaler is None:
        loss.backward()
        opt.step()
    else:
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
