"""The flags a throughput table's row carries: why its figure deserves care. Shared by the
throughput tables and the PyTorch vs JAX view, so both word them alike."""

from __future__ import annotations

from typing import Any

from dlbench.telemetry.summary import energy_mismatch, mismatch_note


def window_cap(r: Any) -> str | None:
    """``time_cap`` / ``step_cap`` when a limit ended ``r``'s window (None for kinds whose
    records have no window)."""
    capped = getattr(r, "capped", None)
    return capped() if callable(capped) else None


def short_window(r: Any) -> tuple[int, int] | None:
    """(measured steps, minimum) when ``r``'s window measured fewer steps than its minimum."""
    short = getattr(r, "short_of_minimum", None)
    return short() if callable(short) else None


def window_unit(r: Any) -> str:
    """What a window counts: a generation record's requests, every other kind's steps."""
    return "requests" if getattr(r, "kind", "") == "generate" else "steps"


def flags(r: Any) -> list[str]:
    """Why a figure deserves care: a window that never reached its interval target or that a
    limit ended, fewer steps than the minimum, high spread, a GPU that throttled (power,
    thermal, clocks) during the window."""
    s = r.summary()
    if s is None:
        return []
    out = []
    cap = window_cap(r)
    if not r.converged():
        out.append(f"noisy ({r.stop_reason})")
    else:
        if cap:
            out.append(cap)      # the interval reached its target, but a limit ended the window
        if s.noisy:
            out.append(f"cv {s.cv:.0%}")
    short = short_window(r)
    if short:
        out.append(f"{short[0]}/{short[1]} {window_unit(r)}")
    throttled = ((getattr(r, "telemetry", None) or {}).get("summary") or {}).get("throttled")
    if throttled:
        out.append(f"throttled ({', '.join(throttled)})")
    mismatch = energy_mismatch(getattr(r, "telemetry", None))
    if mismatch:
        out.append(mismatch_note(mismatch))
    return out
