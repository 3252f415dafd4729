"""Memory of a measurement: the allocator peaks, the device total, and what the peak is made of."""

from __future__ import annotations

import resource
import sys
from typing import Any, Iterable

import torch


def reset_peak_memory(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)


def peak_memory(device: torch.device) -> dict[str, int | None]:
    """Allocated and reserved peaks since the last reset, in bytes.

    On the CPU there is no allocator peak to read; the process's peak resident size is given
    instead, and it covers the whole process lifetime (so it only grows across a sweep).
    """
    if device.type == "cuda":
        return {
            "allocated_peak_bytes": torch.cuda.max_memory_allocated(device),
            "reserved_peak_bytes": torch.cuda.max_memory_reserved(device),
            "device_total_bytes": torch.cuda.get_device_properties(device).total_memory,
        }
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return {
        "allocated_peak_bytes": None,
        "reserved_peak_bytes": None,
        "device_total_bytes": None,
        # ru_maxrss is KiB on Linux, bytes on macOS
        "host_rss_peak_bytes": rss if sys.platform == "darwin" else rss * 1024,
    }


def tensor_bytes(tensors: Iterable[torch.Tensor | None]) -> int:
    """Bytes of the distinct storages behind ``tensors`` (a tied weight is counted once)."""
    seen: dict[tuple[str, int], int] = {}
    for t in tensors:
        if t is None or not isinstance(t, torch.Tensor):
            continue
        storage = t.untyped_storage()
        seen[(str(t.device), storage.data_ptr())] = storage.nbytes()
    return sum(seen.values())


def memory_breakdown(model: torch.nn.Module, optimizer: torch.optim.Optimizer | None,
                     batch: Iterable[torch.Tensor], peak: dict[str, Any]) -> dict[str, Any]:
    """Parameters, gradients, optimizer state and the input batch counted directly, in bytes.

    ``activations_bytes`` is the allocated peak minus those four: the activations kept for the
    backward pass plus temporaries and library workspaces alive at the peak. The gradients of the
    previous step are still alive during the forward pass (they are dropped just before
    backward), so all four are resident when activations peak. Where the allocator has no peak
    (the CPU) it is None, and ``breakdown_note`` says why.
    """
    params = tensor_bytes(model.parameters())
    grads = tensor_bytes(p.grad for p in model.parameters())
    opt = None
    if optimizer is not None:
        opt = tensor_bytes(v for state in optimizer.state.values() for v in state.values()
                           if isinstance(v, torch.Tensor))
    data = tensor_bytes(batch)
    out: dict[str, Any] = {"params_bytes": params, "grads_bytes": grads,
                           "optimizer_state_bytes": opt, "batch_bytes": data,
                           "activations_bytes": None}
    allocated = peak.get("allocated_peak_bytes")
    if allocated is None:
        out["breakdown_note"] = ("no allocator peak on this device: activations cannot be told "
                                 "apart from the process's other memory")
    else:
        out["activations_bytes"] = max(0, allocated - params - grads - (opt or 0) - data)
    return out
