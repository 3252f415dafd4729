"""Energy and window arithmetic on sampled series: small pure functions, tested on known numbers.

A series is a list of times (``perf_counter`` seconds) and a list of values, some of which may be
None (a read that failed). Two ways to the energy of a window ``[t0, t1]``:

- **the counter**: NVML's total-energy counter (millijoules since the driver loaded, Volta and
  newer) read at the samples around ``t0`` and ``t1`` and interpolated linearly to the bounds. It
  counts every joule, whatever happens between two samples, so it is preferred where it exists.
- **integration**: the trapezoid rule over power samples, with the power interpolated at the
  bounds. It misses what happens between samples (and NVML's power reading is itself an average
  over up to a second on recent drivers), so it is the fallback.

The counter is an unsigned 64-bit integer. A decrease is taken as a wrap at 2**64 when the
wrapped step is physically plausible, else as a reset (driver reload): that interval's energy then
comes from the power samples instead.
"""

from __future__ import annotations

import math
from typing import Sequence

COUNTER_MODULUS_MJ = 2 ** 64
# No single GPU draws more than this; a "wrapped" counter step implying more is a reset.
MAX_PLAUSIBLE_W = 5_000.0


def _pairs(ts: Sequence[float], vs: Sequence[float | None]) -> list[tuple[float, float]]:
    return [(t, float(v)) for t, v in zip(ts, vs) if v is not None and math.isfinite(float(v))]


def interpolate(points: Sequence[tuple[float, float]], t: float) -> float | None:
    """The value at ``t`` by linear interpolation; None when ``t`` lies outside the points."""
    if not points or t < points[0][0] or t > points[-1][0]:
        return None
    lo, hi = 0, len(points) - 1
    while hi - lo > 1:  # bisection: series are a few thousand points
        mid = (lo + hi) // 2
        if points[mid][0] <= t:
            lo = mid
        else:
            hi = mid
    (ta, va), (tb, vb) = points[lo], points[hi]
    if tb == ta:
        return vb
    return va + (vb - va) * (t - ta) / (tb - ta)


def clip(points: Sequence[tuple[float, float]], t0: float, t1: float) -> list[tuple[float, float]]:
    """The points inside ``[t0, t1]`` with interpolated end points at ``t0`` and ``t1``.

    Empty when the points do not cover the whole window (the caller reports no figure).
    """
    a, b = interpolate(points, t0), interpolate(points, t1)
    if a is None or b is None or t1 < t0:
        return []
    return [(t0, a)] + [p for p in points if t0 < p[0] < t1] + [(t1, b)]


def integrate(points: Sequence[tuple[float, float]]) -> float:
    """Trapezoid rule: the area under the points (W x s = J)."""
    return sum((tb - ta) * (va + vb) / 2 for (ta, va), (tb, vb) in zip(points, points[1:]))


def power_energy_j(ts: Sequence[float], power_w: Sequence[float | None], t0: float,
                   t1: float) -> float | None:
    """Energy over ``[t0, t1]`` by integrating power; None if the samples do not cover it."""
    pts = clip(_pairs(ts, power_w), t0, t1)
    return integrate(pts) if pts else None


def unwrap_counter(ts: Sequence[float], counter_mj: Sequence[float | None],
                   power_w: Sequence[float | None] | None = None,
                   modulus: int = COUNTER_MODULUS_MJ) -> list[tuple[float, float]]:
    """The energy counter as a monotonic series in joules, starting at 0.

    A decrease is a wrap if ``value + modulus - previous`` is plausible for the time between the
    samples, else a reset; across a reset the step is the power integral of that interval (or 0
    without power samples).
    """
    power = _pairs(ts, power_w) if power_w is not None else []
    out: list[tuple[float, float]] = []
    prev_t = prev_v = None
    total = 0.0
    # Raw values, not floats: near 2**64 a float64 is off by kilojoules.
    for t, v in ((t, v) for t, v in zip(ts, counter_mj) if v is not None):
        if prev_v is not None:
            step = v - prev_v
            if step < 0:
                wrapped = v + modulus - prev_v
                dt = max(t - prev_t, 1e-9)
                if wrapped / 1e3 / dt <= MAX_PLAUSIBLE_W:
                    step = wrapped
                else:
                    seg = clip(power, prev_t, t)
                    step = integrate(seg) * 1e3 if seg else 0.0
            total += step / 1e3
        out.append((t, total))
        prev_t, prev_v = t, v
    return out


def counter_energy_j(ts: Sequence[float], counter_mj: Sequence[float | None], t0: float,
                     t1: float, power_w: Sequence[float | None] | None = None) -> float | None:
    """Energy over ``[t0, t1]`` from the total-energy counter; None if it does not cover it."""
    pts = unwrap_counter(ts, counter_mj, power_w)
    a, b = interpolate(pts, t0), interpolate(pts, t1)
    if a is None or b is None:
        return None
    return b - a


def window_energy_j(ts: Sequence[float], counter_mj: Sequence[float | None],
                    power_w: Sequence[float | None], t0: float,
                    t1: float) -> tuple[float | None, str | None]:
    """``(joules, method)``: the counter where it covers the window, else integrated power."""
    e = counter_energy_j(ts, counter_mj, t0, t1, power_w)
    if e is not None:
        return e, "counter"
    e = power_energy_j(ts, power_w, t0, t1)
    return (e, "power") if e is not None else (None, None)


def mean_in(ts: Sequence[float], vs: Sequence[float | None], t0: float,
            t1: float) -> float | None:
    """Mean of the samples taken inside ``[t0, t1]`` (None when there are none)."""
    xs = [v for t, v in _pairs(ts, vs) if t0 <= t <= t1]
    return sum(xs) / len(xs) if xs else None


def max_in(ts: Sequence[float], vs: Sequence[float | None], t0: float, t1: float) -> float | None:
    xs = [v for t, v in _pairs(ts, vs) if t0 <= t <= t1]
    return max(xs) if xs else None


def counter_rate(ts: Sequence[float], counter: Sequence[float | None],
                 scale: float = 1.0) -> list[float | None]:
    """Per-sample rate of a cumulative counter (first sample None): for NVLink KiB counters."""
    out: list[float | None] = [None] * len(ts)
    prev = None
    for i, (t, v) in enumerate(zip(ts, counter)):
        if v is None:
            prev = None
            continue
        if prev is not None and t > prev[0] and v >= prev[1]:
            out[i] = (v - prev[1]) * scale / (t - prev[0])
        prev = (t, v)
    return out


# -- the counter against the sampled power -------------------------------------------------------
#: NVML's power reading (``nvmlDeviceGetPowerUsage``) is not instantaneous: on Ampere and newer
#: parts with recent drivers it is the average over the last second. A sample taken at ``t``
#: therefore speaks for ``[t - 1 s, t]``.
POWER_AVERAGING_S = 1.0
#: The two paths to a window's mean power may differ by this much however long the window:
#: they are different sensors (an energy accumulator and the power monitor the 700 W cap
#: regulates on). Over 30 s on an H100 they agreed within 0.1% (counter 563.5 W, nvidia-smi
#: 563.8 W), and windows of 8 s or more in the committed stores within 0.9%; windows of 2 s or more whose
#: counter read above the 700 W cap read 1.4-2.9% apart (docs/telemetry.md).
POWER_AGREEMENT_BASE = 0.03
#: How far the power before the window (the warm-up's end, clocks settling) may plausibly
#: differ from the window's own, as a fraction: the share of the sampled mean that lies before
#: the window, ``(averaging + interval) / window``, can move it by this fraction of itself.
POWER_DRIFT = 0.05


def power_agreement_tolerance(window_s: float, interval_s: float,
                              averaging_s: float = POWER_AVERAGING_S) -> float:
    """How far (relative) the counter's and the samples' mean power over a window may differ.

    ``POWER_AGREEMENT_BASE`` for two sensors, plus ``POWER_DRIFT`` times the share of the
    sampled mean that comes from before the window: each reading averages the ``averaging_s``
    before it, and the first sample inside the window lands up to ``interval_s`` after its
    start. A 1.2-second window sampled every 0.1 s may differ by 7.6%, a 4-second one by 4.4%,
    a 30-second one by 3.2%.
    """
    if window_s <= 0:
        return math.inf
    return POWER_AGREEMENT_BASE + POWER_DRIFT * (averaging_s + max(interval_s, 0.0)) / window_s


def sample_interval(ts: Sequence[float]) -> float:
    """The median time between samples (0 for fewer than two)."""
    gaps = sorted(b - a for a, b in zip(ts, ts[1:]) if b > a)
    return gaps[len(gaps) // 2] if gaps else 0.0


def power_agreement(counter_w: float | None, sampled_w: float | None, window_s: float,
                    interval_s: float) -> dict | None:
    """Whether the counter's mean power over a window agrees with the mean of the power samples
    taken inside it: ``{"counter_w", "sampled_w", "rel_diff", "tolerance", "agree"}``, with
    ``rel_diff`` = counter / sampled - 1; None where either is missing (nothing to compare)."""
    if counter_w is None or sampled_w is None or sampled_w <= 0:
        return None
    rel = counter_w / sampled_w - 1.0
    tol = power_agreement_tolerance(window_s, interval_s)
    return {"counter_w": counter_w, "sampled_w": sampled_w, "rel_diff": rel, "tolerance": tol,
            "agree": abs(rel) <= tol}
