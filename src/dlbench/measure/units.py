"""Figures in the units people quote them in: pure formatting, shared by the what-if model
(which predicts link rates) and the report (which prints measured ones)."""

from __future__ import annotations

import math


def fmt_bps(bps: float) -> str:
    """Bits per second in the unit people quote links in."""
    if not math.isfinite(bps):
        return "inf"
    for unit, scale in (("Tbit/s", 1e12), ("Gbit/s", 1e9), ("Mbit/s", 1e6), ("kbit/s", 1e3)):
        if bps >= scale:
            return f"{bps / scale:.3g} {unit}"
    return f"{bps:.3g} bit/s"
