"""Statistics of a series of step times: small pure functions, tested on known numbers.

Throughput is total samples over total time, never a mean of per-step rates. The interval comes
from *batch means*: consecutive steps on a GPU are not independent (the CPU runs ahead, a slow step
is followed by a fast one), so a t-interval over raw steps is too narrow. Averaging contiguous
blocks first removes most of that correlation (the method of Law & Kelton, "Simulation Modeling
and Analysis", ch. 9; pyperf uses whole processes as its blocks for the same reason).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

# A result whose relative standard deviation reaches this is flagged noisy (pyperf warns at 10%).
NOISY_CV = 0.10
# Blocks used for the batch-means interval when there are enough steps.
MAX_BLOCKS = 20


def _betacf(a: float, b: float, x: float) -> float:
    """Continued fraction of the regularised incomplete beta (Numerical Recipes, betacf)."""
    tiny = 1e-300
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 300):
        m2 = 2 * m
        aa = m * (b - m) * x / ((qam + m2) * (a + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c if abs(1.0 + aa / c) > tiny else tiny
        h *= d * c
        aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c if abs(1.0 + aa / c) > tiny else tiny
        delta = d * c
        h *= delta
        if abs(delta - 1.0) < 3e-14:
            break
    return h


def _betainc(a: float, b: float, x: float) -> float:
    """Regularised incomplete beta I_x(a, b)."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    ln_front = (math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b)
                + a * math.log(x) + b * math.log1p(-x))
    front = math.exp(ln_front)
    if x < (a + 1.0) / (a + b + 2.0):
        return front * _betacf(a, b, x) / a
    return 1.0 - front * _betacf(b, a, 1.0 - x) / b


def t_cdf(t: float, df: float) -> float:
    """Cumulative distribution of Student's t with ``df`` degrees of freedom."""
    x = df / (df + t * t)
    tail = 0.5 * _betainc(df / 2.0, 0.5, x)
    return 1.0 - tail if t >= 0 else tail


def t_quantile(p: float, df: float) -> float:
    """Inverse of :func:`t_cdf` by bisection (exact to ~1e-10; no SciPy needed)."""
    if not 0.0 < p < 1.0:
        raise ValueError(f"p must be in (0, 1), got {p}")
    if df <= 0:
        raise ValueError(f"df must be positive, got {df}")
    if p < 0.5:
        return -t_quantile(1.0 - p, df)
    lo, hi = 0.0, 1.0
    while t_cdf(hi, df) < p:
        hi *= 2.0
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if t_cdf(mid, df) < p:
            lo = mid
        else:
            hi = mid
        if hi - lo < 1e-12 * max(1.0, hi):
            break
    return 0.5 * (lo + hi)


def mean(xs: Sequence[float]) -> float:
    return math.fsum(xs) / len(xs)


def stdev(xs: Sequence[float]) -> float:
    """Sample standard deviation (n - 1); 0.0 for fewer than two values."""
    n = len(xs)
    if n < 2:
        return 0.0
    m = mean(xs)
    return math.sqrt(math.fsum((x - m) ** 2 for x in xs) / (n - 1))


def percentile(xs: Sequence[float], q: float) -> float:
    """Percentile ``q`` in [0, 100] with linear interpolation (NumPy's default method)."""
    if not xs:
        raise ValueError("percentile of an empty series")
    s = sorted(xs)
    pos = (len(s) - 1) * q / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


def block_means(xs: Sequence[float], max_blocks: int = MAX_BLOCKS) -> list[float]:
    """Means of up to ``max_blocks`` contiguous equal blocks; leftover steps at the start are dropped
    (they are the ones nearest the warm-up)."""
    n = len(xs)
    k = min(n, max_blocks)
    if k == 0:
        return []
    size = n // k
    start = n - k * size
    return [mean(xs[start + i * size: start + (i + 1) * size]) for i in range(k)]


def mean_interval(xs: Sequence[float], confidence: float = 0.95) -> float:
    """Half-width of the ``confidence`` interval of the mean step time, by batch means.

    Returns ``inf`` when fewer than two blocks exist: no interval can be claimed.
    """
    blocks = block_means(xs)
    k = len(blocks)
    if k < 2:
        return math.inf
    t = t_quantile(0.5 + confidence / 2.0, k - 1)
    return t * stdev(blocks) / math.sqrt(k)


@dataclass(frozen=True)
class Summary:
    """Figures derived from the raw step times of one result. Holds no raw data and does no I/O."""

    steps: int
    total_s: float
    samples: int
    throughput: float            # samples per second over the whole window
    throughput_low: float        # lower end of the interval
    throughput_high: float       # upper end (inf when the interval is unbounded)
    rel_halfwidth: float         # half-width of the interval over the mean step time
    mean_s: float
    median_s: float
    p5_s: float
    p95_s: float
    stdev_s: float
    cv: float                    # stdev over mean of the raw step times
    confidence: float

    @property
    def noisy(self) -> bool:
        return self.cv >= NOISY_CV


def summarize(step_times: Sequence[float], samples_per_step: int,
              confidence: float = 0.95) -> Summary:
    """Summarise a window of step times (seconds) with ``samples_per_step`` samples each."""
    n = len(step_times)
    if n == 0:
        raise ValueError("no step times to summarise")
    total = math.fsum(step_times)
    m = total / n
    h = mean_interval(step_times, confidence)
    samples = samples_per_step * n
    sd = stdev(step_times)
    return Summary(
        steps=n,
        total_s=total,
        samples=samples,
        throughput=samples / total,
        throughput_low=samples_per_step / (m + h) if math.isfinite(h) else 0.0,
        throughput_high=samples_per_step / (m - h) if h < m else math.inf,
        rel_halfwidth=h / m,
        mean_s=m,
        median_s=percentile(step_times, 50),
        p5_s=percentile(step_times, 5),
        p95_s=percentile(step_times, 95),
        stdev_s=sd,
        cv=sd / m if m > 0 else 0.0,
        confidence=confidence,
    )


def aggregate(rank_step_times: Sequence[Sequence[float]], rank_samples_per_step: Sequence[int],
              confidence: float = 0.95) -> Summary:
    """The figure of a data-parallel window from every rank's raw step times.

    Ranks step in lockstep (they agree when to stop), so each did the same number of steps. The
    throughput is all ranks' samples over the *slowest* rank's window time; its interval comes
    from that rank's steps. Never a mean of per-rank rates.
    """
    if not rank_step_times or any(not t for t in rank_step_times):
        raise ValueError("every rank needs step times")
    counts = {len(t) for t in rank_step_times}
    if len(counts) != 1:
        raise ValueError(f"ranks measured different step counts {sorted(counts)}; "
                         "data-parallel ranks must step in lockstep")
    slowest = max(rank_step_times, key=math.fsum)
    return summarize(slowest, sum(rank_samples_per_step), confidence)
