"""The flags a throughput table's row carries: why its figure deserves care. Shared by the
throughput tables and the PyTorch vs JAX view, so both word them alike."""

from __future__ import annotations

from typing import Any

from dlbench.telemetry.summary import energy_mismatch, mismatch_note


def flags(r: Any) -> list[str]:
    """Why a figure deserves care: a window that never reached its interval target, high spread,
    a GPU that throttled (power, thermal, clocks) during the window."""
    s = r.summary()
    if s is None:
        return []
    out = []
    if not r.converged():
        out.append(f"noisy ({r.stop_reason})")
    elif s.noisy:
        out.append(f"cv {s.cv:.0%}")
    throttled = ((getattr(r, "telemetry", None) or {}).get("summary") or {}).get("throttled")
    if throttled:
        out.append(f"throttled ({', '.join(throttled)})")
    mismatch = energy_mismatch(getattr(r, "telemetry", None))
    if mismatch:
        out.append(mismatch_note(mismatch))
    return out
