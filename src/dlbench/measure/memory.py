"""Peak memory of a measurement: the framework's allocator peaks and the device total."""

from __future__ import annotations

import resource
import sys

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
