"""Statistics of a series of step times: small pure functions, tested on known numbers.

Throughput is total samples over total time, never a mean of per-step rates. Consecutive steps on
a GPU are not independent (the CPU runs ahead, a slow step is followed by a fast one, clocks
drift), so a t-interval over raw steps is too narrow. The interval of the mean step time
(:func:`interval`) accounts for that in one of two ways, and says which:

- ``batch-means`` for long windows (at least ``MIN_BATCHES`` batches, each at least
  ``MIN_BATCH_STEPS`` steps and ``BATCH_TAUS`` integrated autocorrelation times long):
  contiguous blocks are averaged first, which removes the correlation when the blocks are long
  enough, and a t-interval is taken over the block means (Law & Kelton, "Simulation Modeling
  and Analysis", ch. 9, who advise 10 to 30 batches; pyperf uses whole processes as its blocks
  for the same reason). With fewer steps the blocks would be too short and the interval would
  be the plain t-interval over correlated steps again.
- ``ess`` for the other windows: the effective sample size from the autocovariance, as MCMC
  diagnostics compute it (Geyer's initial positive sequence, "Practical Markov Chain Monte
  Carlo", Stat. Sci. 1992), with the bias a short series puts in it corrected, a floor from the
  lag-1 correlation where Geyer's sum cannot see correlation as long as the window, and a t
  quantile whose degrees of freedom are those of the variance estimate (see
  :func:`correlation_time`).

A window shorter than about three correlation times cannot be told from one of uncorrelated
steps, so strongly correlated short windows are covered less than 95% (8 to 30 steps at lag-1
0.9: 84-91%); a window shorter than two correlation times gets an interval as wide as its
steps' own spread (:func:`ess_interval`). tests/test_coverage.py measures every case.

:func:`mean_interval_batch_means` is the method dlbench used for every window before: batch
means at any length (a plain t over steps below 40 steps). It stays for comparisons of coverage.
"""

from __future__ import annotations

import functools
import itertools
import math
import operator
from dataclasses import dataclass
from typing import Callable, Sequence

# A result whose relative standard deviation reaches this is flagged noisy (pyperf warns at 10%).
NOISY_CV = 0.10
# Blocks used for the batch-means interval when there are enough steps.
MAX_BLOCKS = 20
# Batch means only with at least this many batches of at least this many steps (200 steps; up to
# MAX_BLOCKS batches as the window grows). Fewer batches widen the t quantile a lot (df =
# batches - 1); shorter batches leave the batch means correlated: for AR(1) steps with lag-1
# correlation 0.6 (integrated autocorrelation time 4 steps), 10-step batches cover 93%, 20-step
# batches 94-95% (tests/test_coverage.py measures it).
MIN_BATCHES = 10
MIN_BATCH_STEPS = 20
# ... and of at least this many integrated autocorrelation times (tau from correlation_time), so
# that the batch means are nearly independent whatever the correlation. Their variance falls
# short of the mean's by about 2 * sum(k * rho_k) / (b * tau) for b-step batches: for AR(1) steps
# at lag-1 0.9 (tau 19) 20-step batches covered 88% of 250-step windows and 50-step ones 93% of
# 1,000-step windows; 5-tau batches cover 94% (their variance still 10% short), 10-tau batches
# 95% (20,000 simulated windows each). A window too short for MIN_BATCHES such batches takes the
# effective-sample-size interval, which covers there (Law & Kelton, "Simulation Modeling and
# Analysis", ch. 9: batches long enough that their means are uncorrelated).
BATCH_TAUS = 10
# The effective-sample-size interval's bias correction divides by 1 - (2M + 1) / n, where M is
# the last lag summed; capped at 1/2 (at most a doubling) so that a window of a few steps gets a
# wide interval rather than an unbounded one.
MAX_BIAS_FRACTION = 0.5
# ... and M is taken as at least this many lags: on a short window Geyer's sum often stops at lag
# 1 because the estimated pairs are noisy, while a true lag-1 correlation of 0.6 still leaves
# 0.2 at lag 3. Without this floor 15-step windows of such steps are covered 92%, with it 96%.
MIN_BIAS_LAG = 3
# From this many steps tau is at least the AR(1) time of the window's lag-1 correlation (see
# correlation_time). Below it the lag-1 correlation's standard error (about 1 / sqrt(n), 0.26
# at 15 steps) is as large as the correlation it would detect: on 15-step windows the AR(1)
# floor raised coverage at lag-1 0.75 by half a point and the mean interval at lag-1 0.4 by 20%.
MIN_AR_STEPS = 20
# ... and that AR(1) time is capped at this fraction of the window: a window shorter than two
# correlation times is credited with one effective step (its interval is a t quantile times the
# steps' own standard deviation), not with an unbounded interval.
MAX_AR_FRACTION = 0.5
# Above this many steps tau is estimated on the means of groups of consecutive steps, at most
# this many groups (cost; see correlation_time).
MAX_TAU_POINTS = 1000

BATCH_MEANS = "batch-means"
ESS = "ess"
NONE = "none"


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


@functools.lru_cache(maxsize=4096)
def t_quantile(p: float, df: float) -> float:
    """Inverse of :func:`t_cdf` by bisection (exact to ~1e-10; no SciPy needed). Cached: a
    store's records ask for a few (confidence, df) pairs again and again, and each bisection
    costs 200 incomplete-beta evaluations (an export of 100,000 records spent most of its time
    here)."""
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
    return _sorted_percentile(sorted(xs), q)


def _sorted_percentile(s: Sequence[float], q: float) -> float:
    """:func:`percentile` of a series already sorted (a summary takes three of one series)."""
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


def mean_interval_batch_means(xs: Sequence[float], confidence: float = 0.95) -> float:
    """Half-width of the ``confidence`` interval of the mean step time, by batch means over up to
    ``MAX_BLOCKS`` blocks at any window length: dlbench's method before :func:`interval`.

    Below ``2 * MAX_BLOCKS`` steps its blocks are one step long, i.e. a plain t-interval over
    correlated steps, too narrow (tests/test_coverage.py shows by how much). Kept for the
    coverage comparisons (``benchmarks/coverage.py``). ``inf`` with fewer than two blocks.
    """
    blocks = block_means(xs)
    k = len(blocks)
    if k < 2:
        return math.inf
    t = t_quantile(0.5 + confidence / 2.0, k - 1)
    return t * stdev(blocks) / math.sqrt(k)


@dataclass(frozen=True)
class Interval:
    """The half-width of an interval of the mean, and how it was made.

    ``method``: ``batch-means``, ``ess`` or ``none`` (fewer than two steps: no interval).
    ``ess``: the effective number of independent steps (the batch count for batch means).
    ``df``: the degrees of freedom of the t quantile used.
    """

    halfwidth: float
    method: str
    ess: float | None = None
    df: float | None = None


def _autocovariance(d: Sequence[float], lag: int) -> float:
    """Autocovariance at ``lag`` of the centred series ``d`` (divisor n, as is usual: it keeps
    the estimate positive definite)."""
    n = len(d)
    # the products d[i] * d[i + lag], i < n - lag, in one C-level pass (fsum is exact: order
    # does not matter)
    return math.fsum(map(operator.mul, d, itertools.islice(d, lag, None))) / n


def _geyer(d: Sequence[float]) -> tuple[float, int, float, float]:
    """:func:`integrated_time` of the centred series ``d``, with its lag-0 and lag-1
    autocovariances: (tau, M, gamma_0, gamma_1)."""
    n = len(d)
    g0 = _autocovariance(d, 0)
    if g0 <= 0:
        return 1.0, 0, g0, 0.0
    g1 = _autocovariance(d, 1) if n > 1 else 0.0
    total, prev, k = 0.0, math.inf, 0
    while 2 * k + 1 < n:
        pair = (g0 + g1) if k == 0 else _autocovariance(d, 2 * k) + _autocovariance(d, 2 * k + 1)
        if pair <= 0:
            break
        pair = min(pair, prev)
        total += pair
        prev = pair
        k += 1
    return (-g0 + 2.0 * total) / g0, max(2 * k - 1, 1), g0, g1


def integrated_time(xs: Sequence[float]) -> tuple[float, int]:
    """Geyer's initial monotone positive sequence estimate of the integrated autocorrelation
    time tau = 1 + 2 * sum of the autocorrelations, and the last lag M it summed.

    Pairs of autocovariances (lags 2k and 2k+1) are summed while positive and kept
    non-increasing; the first non-positive pair ends the sum (beyond it is noise). Computed
    lazily, so a window costs n * M operations, not n squared. Returns (1.0, 0) for a constant
    series. This is the raw estimate: :func:`correlation_time` corrects it for a short window.
    """
    m = mean(xs)
    tau, lag, _, _ = _geyer([x - m for x in xs])
    return tau, lag


def _window_time(xs: Sequence[float]) -> tuple[float, float]:
    """:func:`correlation_time` computed on every step of ``xs`` (see there)."""
    n = len(xs)
    m = mean(xs)
    tau, lag, g0, g1 = _geyer([x - m for x in xs])
    frac = min((2 * max(lag, MIN_BIAS_LAG) + 1) / n, MAX_BIAS_FRACTION)
    tau = max(1.0, tau / (1.0 - frac))
    df = max(1.0, min(n / tau - 1.0, n / (2 * lag + 1)))
    if n >= MIN_AR_STEPS and g0 > 0:
        # Kendall's bias of the lag-1 autocorrelation of a series around its own mean,
        # E r1 = phi - (1 + 3 phi) / n, solved for phi
        phi = (n * g1 / g0 + 1.0) / (n - 3)
        if phi > 0:
            cap = MAX_AR_FRACTION * n
            ar = (1.0 + phi) / (1.0 - phi) if phi < 1 else cap
            ar = min(ar, cap)
            # the window's variance around its own mean misses Var(mean), about tau / n of it
            tau = max(tau, ar / (1.0 - ar / n))
    return tau, df


def correlation_time(xs: Sequence[float]) -> tuple[float, float]:
    """The integrated autocorrelation time tau that the intervals use, relative to the
    window's variance around its own mean (divisor n), and the degrees of freedom of the
    variance estimate it makes: ESS = n / tau effective independent steps.

    - Geyer's estimate (:func:`integrated_time`) from autocovariances taken around the window's
      own mean: each is biased low by about Var(mean), so their sum over lags -M..M falls short
      of the long-run variance by a factor 1 - (2M + 1) / n; tau is divided by that (M at least
      ``MIN_BIAS_LAG``, the fraction capped at ``MAX_BIAS_FRACTION``). tau is at least 1 (ESS
      at most n): a negatively correlated series is not credited with more information than
      independent steps.
    - From ``MIN_AR_STEPS`` steps on, tau is at least the AR(1) time (1 + phi) / (1 - phi) of
      the lag-1 correlation, after Kendall's correction of its bias (Kendall, "Note on bias in
      the estimation of autocorrelation", Biometrika 1954), capped at ``MAX_AR_FRACTION`` of
      the window and divided by 1 - tau / n for the variance the window's own mean hides.
      Geyer's sum cannot see correlation that lasts as long as the window: around the
      window's mean the autocovariances of strongly correlated steps turn negative after a
      few lags and end the sum early (at lag-1 0.9, tau 19, it covered 86% of 30-step windows
      and 92% of 100-step ones; with the floor 91% and 95%). The floor only ever widens the
      interval: where the correlation decays faster than AR(1)'s (a one-step echo, or the
      means of groups of AR(1) steps) it is conservative.
    - The degrees of freedom are the smaller of ESS - 1 (Geyer's ESS) and n / (2M + 1), the
      equivalent degrees of freedom of a variance estimated from M lags (Priestley, "Spectral
      Analysis and Time Series", 6.2.3), at least 1.
    - Above ``MAX_TAU_POINTS`` steps, all this is computed on the means of groups of s
      consecutive steps (at most ``MAX_TAU_POINTS`` groups) and scaled back: the long-run
      variance of the steps is s times that of the group means. Geyer's sum costs n * M
      products, and on a drifting window M grows with n (24,384 steps took 11 s, every time
      a record of them is read); the groups keep it under a million, whatever the window.
    """
    n = len(xs)
    if n <= MAX_TAU_POINTS:
        return _window_time(xs)
    groups = block_means(xs, n // -(-n // MAX_TAU_POINTS))
    size = n // len(groups)
    grouped = len(groups) * size            # the steps the groups hold: the last ones
    m = mean(groups)
    # their variance as the mean square less the squared mean: one C-level pass, where
    # centring them first would cost two (fsum is exact; the cancellation costs ~1e-10 of the
    # variance when the steps spread by 0.1% of their mean)
    tail = functools.partial(itertools.islice, xs, n - grouped, None)
    var_steps = math.fsum(map(operator.mul, tail(), tail())) / grouped - m * m
    if var_steps <= 0:
        return 1.0, float(n)
    tau_g, df = _window_time(groups)
    var_groups = _autocovariance([g - m for g in groups], 0)
    return max(1.0, size * var_groups * tau_g / var_steps), df


def ess_interval(xs: Sequence[float], confidence: float = 0.95) -> Interval:
    """Interval of the mean from the effective sample size ESS = n / tau, tau and the t
    quantile's degrees of freedom from :func:`correlation_time`.

    A window too short for its correlation gets a very wide interval, not a false one: once
    the AR(1) time reaches half the window (``MAX_AR_FRACTION``) the window counts as one
    effective step, so the interval is a t quantile times the steps' own standard deviation.
    Below ``MIN_AR_STEPS`` steps the lag-1 correlation is too noisy to extrapolate (its standard
    error is about 1 / sqrt(n)), and the data cannot tell slowly wandering steps from steady
    ones: there, and wherever the window holds fewer than about 3 tau steps, strongly
    correlated steps are covered less than 95% of the time (8 or 15 steps at lag-1 0.9: 84%,
    30 steps: 91%; tests/test_coverage.py measures every case).
    """
    n = len(xs)
    if n < 2:
        return Interval(math.inf, NONE)
    return _ess_interval(xs, *correlation_time(xs), confidence)


def _ess_interval(xs: Sequence[float], tau: float, df: float, confidence: float) -> Interval:
    ess = len(xs) / tau
    t = t_quantile(0.5 + confidence / 2.0, df)
    return Interval(t * stdev(xs) / math.sqrt(ess), ESS, ess, df)


def interval(xs: Sequence[float], confidence: float = 0.95) -> Interval:
    """The ``confidence`` interval of the mean step time: batch means when the window holds at
    least ``MIN_BATCHES`` batches of at least ``MIN_BATCH_STEPS`` steps and ``BATCH_TAUS``
    correlation times (:func:`correlation_time`), up to ``MAX_BLOCKS`` batches; else the
    effective-sample-size interval (:func:`ess_interval`); ``none`` (infinite) with fewer than
    two steps."""
    n = len(xs)
    if n < 2:
        return Interval(math.inf, NONE)
    tau, df = correlation_time(xs)
    if n >= MIN_BATCHES * MIN_BATCH_STEPS:
        size = max(MIN_BATCH_STEPS, math.ceil(BATCH_TAUS * tau))
        k = min(MAX_BLOCKS, n // size)
        if k >= MIN_BATCHES:
            blocks = block_means(xs, k)
            t = t_quantile(0.5 + confidence / 2.0, k - 1)
            return Interval(t * stdev(blocks) / math.sqrt(k), BATCH_MEANS, float(k), float(k - 1))
    return _ess_interval(xs, tau, df, confidence)


def mean_interval(xs: Sequence[float], confidence: float = 0.95) -> float:
    """Half-width of the ``confidence`` interval of the mean step time (:func:`interval`);
    ``inf`` when no interval can be claimed."""
    return interval(xs, confidence).halfwidth


def across_processes(figures: Sequence[float], confidence: float = 0.95) -> tuple[float, float]:
    """Mean of independent per-process figures and the half-width of its t-interval (n - 1
    degrees of freedom); ``inf`` for a single process. Processes are independent runs (fresh
    autotuning, allocator, clocks), so a plain t-interval is the right one here."""
    n = len(figures)
    if n == 0:
        raise ValueError("no figures")
    m = mean(figures)
    if n < 2:
        return m, math.inf
    return m, t_quantile(0.5 + confidence / 2.0, n - 1) * stdev(figures) / math.sqrt(n)


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
    interval_method: str = BATCH_MEANS   # batch-means | ess | none (see :func:`interval`)
    ess: float | None = None     # effective number of independent steps (batches for batch-means)
    df: float | None = None      # degrees of freedom of the interval's t quantile

    @property
    def noisy(self) -> bool:
        return self.cv >= NOISY_CV


#: The last few summaries of :func:`summarize` and :func:`aggregate`, with the very arguments
#: they came from (see :func:`_remembered`).
_RECENT: list[tuple[tuple, tuple, Summary]] = []
_RECENT_AGGREGATES: list[tuple[tuple, tuple, Summary]] = []
_REMEMBERED = 4


def _remembered(cache: list[tuple[tuple, tuple, Summary]], same: tuple, equal: tuple,
                compute: Callable[[], Summary]) -> Summary:
    """``compute()``, or the summary ``cache`` kept for the very objects ``same`` (compared by
    identity: tuples, which cannot change, so a large window is never compared element by
    element) and the values ``equal`` (compared by type and value)."""
    for s_key, e_key, s in cache:
        if all(a is b for a, b in zip(s_key, same)) and all(
                type(a) is type(b) and a == b for a, b in zip(e_key, equal)):
            return s
    s = compute()
    cache.insert(0, (same, equal, s))
    del cache[_REMEMBERED:]
    return s


def summarize(step_times: Sequence[float], samples_per_step: int,
              confidence: float = 0.95) -> Summary:
    """Summarise a window of step times (seconds) with ``samples_per_step`` samples each.

    A record's figures (its throughput, interval, flags, TFLOP/s) each ask for its summary:
    the last few are kept, keyed on the identity of the step times, which a tuple (what a
    record holds) cannot change, so an export computes a record's summary once."""
    if type(step_times) is tuple:
        return _remembered(_RECENT, (step_times,), (samples_per_step, confidence),
                           lambda: _summarize(step_times, samples_per_step, confidence))
    return _summarize(step_times, samples_per_step, confidence)


def _summarize(step_times: Sequence[float], samples_per_step: int,
               confidence: float) -> Summary:
    n = len(step_times)
    if n == 0:
        raise ValueError("no step times to summarise")
    total = math.fsum(step_times)
    m = total / n
    iv = interval(step_times, confidence)
    h = iv.halfwidth
    samples = samples_per_step * n
    sd = stdev(step_times)
    ordered = sorted(step_times)
    return Summary(
        steps=n,
        total_s=total,
        samples=samples,
        throughput=samples / total,
        throughput_low=samples_per_step / (m + h) if math.isfinite(h) else 0.0,
        throughput_high=samples_per_step / (m - h) if h < m else math.inf,
        rel_halfwidth=h / m,
        mean_s=m,
        median_s=_sorted_percentile(ordered, 50),
        p5_s=_sorted_percentile(ordered, 5),
        p95_s=_sorted_percentile(ordered, 95),
        stdev_s=sd,
        cv=sd / m if m > 0 else 0.0,
        confidence=confidence,
        interval_method=iv.method,
        ess=iv.ess,
        df=iv.df,
    )


def aggregate(rank_step_times: Sequence[Sequence[float]], rank_samples_per_step: Sequence[int],
              confidence: float = 0.95) -> Summary:
    """The figure of a data-parallel window from every rank's raw step times.

    Ranks step in lockstep (they agree when to stop), so each did the same number of steps. The
    throughput is all ranks' samples over the *slowest* rank's window time; its interval comes
    from that rank's steps. Never a mean of per-rank rates.

    As :func:`summarize`, the last few are kept, keyed on the identity of the arguments where
    they are tuples (of tuples), which cannot change.
    """
    if (type(rank_step_times) is tuple and type(rank_samples_per_step) is tuple
            and all(type(t) is tuple for t in rank_step_times)):
        return _remembered(_RECENT_AGGREGATES, (rank_step_times, rank_samples_per_step),
                           (confidence,),
                           lambda: _aggregate(rank_step_times, rank_samples_per_step, confidence))
    return _aggregate(rank_step_times, rank_samples_per_step, confidence)


def _aggregate(rank_step_times: Sequence[Sequence[float]], rank_samples_per_step: Sequence[int],
               confidence: float) -> Summary:
    if not rank_step_times or any(not t for t in rank_step_times):
        raise ValueError("every rank needs step times")
    counts = {len(t) for t in rank_step_times}
    if len(counts) != 1:
        raise ValueError(f"ranks measured different step counts {sorted(counts)}; "
                         "data-parallel ranks must step in lockstep")
    slowest = max(rank_step_times, key=math.fsum)
    return summarize(slowest, sum(rank_samples_per_step), confidence)
