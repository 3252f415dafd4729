"""A least-squares line through the origin, with a prediction interval: the ms-per-batch study's
analysis (speed on FP32 TFLOPS) and ``dlbench gpus``'s predictions for GPUs nobody measured.

The points come from :mod:`dlbench.reference` (the published rows, the spec table); the
statistics are here, beside :mod:`dlbench.measure.stats`, so the reference data imports nothing.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

from dlbench.measure.stats import t_quantile
from dlbench.reference import reference_points


@dataclass(frozen=True)
class OriginFit:
    """y = slope * x, least squares. ``r2`` is uncentred (1 - SSR / sum y^2), the R^2 of a
    model without intercept; ``r2_centered`` (1 - SSR / sum (y - mean y)^2) is given beside it
    because it is the stricter figure (it can be negative)."""

    slope: float
    r2: float
    r2_centered: float
    n: int
    s: float            # residual standard error, n - 1 degrees of freedom
    sxx: float          # sum of x^2

    def predict(self, x: float, confidence: float = 0.95) -> tuple[float, float, float]:
        """Prediction for a new GPU at ``x``, with a prediction interval (low, high).

        The interval is slope*x +- t(n-1) * s * sqrt(1 + x^2 / sum x^2): the uncertainty of
        the slope and the scatter of a single new GPU around the line.
        """
        y = self.slope * x
        if self.n < 2:
            return y, math.nan, math.nan
        t = t_quantile(0.5 + confidence / 2, self.n - 1)
        half = t * self.s * math.sqrt(1 + x * x / self.sxx)
        return y, y - half, y + half


def fit_through_origin(xs: Sequence[float], ys: Sequence[float]) -> OriginFit:
    """Least-squares slope of y on x with no intercept."""
    if len(xs) != len(ys) or not xs:
        raise ValueError("need as many x as y, at least one")
    sxx = sum(x * x for x in xs)
    if sxx == 0:
        raise ValueError("all x are zero")
    slope = sum(x * y for x, y in zip(xs, ys)) / sxx
    ssr = sum((y - slope * x) ** 2 for x, y in zip(xs, ys))
    syy = sum(y * y for y in ys)
    mean = sum(ys) / len(ys)
    sst = sum((y - mean) ** 2 for y in ys)
    n = len(xs)
    s = math.sqrt(ssr / (n - 1)) if n > 1 else math.nan
    return OriginFit(slope=slope, r2=1 - ssr / syy if syy else math.nan,
                     r2_centered=1 - ssr / sst if sst else math.nan, n=n, s=s, sxx=sxx)


def ms_per_batch_fit(model: str = "vgg16", mode: str = "eval") -> OriginFit:
    """The ms-per-batch study's analysis from the shipped data: 1/time on FP32 TFLOPS through
    the origin (its VGG-16 fit gave R^2 = 0.984)."""
    pts = reference_points(model, mode)
    return fit_through_origin([p.x_tflops for p in pts], [p.y_speed for p in pts])
