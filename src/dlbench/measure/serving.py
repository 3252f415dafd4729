"""The arithmetic of serving under load: per-request latencies, goodput under service-level
objectives, distribution-free intervals of percentiles, arrival schedules. Pure functions,
tested on known numbers (docs/serving.md defines every figure).

Definitions (as vLLM's ``bench serve`` and MLPerf Inference's Server scenario use them):

- **TTFT**, time to first token: from the moment a request is sent to the first streamed event
  that carries generated text.
- **ITL**, inter-token latency: the gap between two consecutive events that carry text. A server
  that sends several tokens in one event shows one gap for them, as a user sees it.
- **TPOT**, time per output token of one request: ``(e2e - TTFT) / (output tokens - 1)``, the
  mean gap after the first token; undefined for a one-token output (it then meets any TPOT
  limit, as vLLM counts it).
- **e2e**: from sending to the last event that carries text.
- **Goodput**: requests per second that completed and met every stated limit (TTFT, TPOT,
  e2e); a failed request never counts.

Intervals: a percentile's is distribution-free, from order statistics (the number of samples
below the true q-quantile is Binomial(n, q)): exact binomial tails up to ``EXACT_MAX_N``
samples, the normal approximation beyond. An end that ``n`` samples cannot bound is None
(``p99`` of 100 requests has no upper bound at 95%). The interval of a mean allows for
correlated consecutive requests (:func:`dlbench.measure.stats.interval`); a proportion's is
Wilson's score interval.
"""

from __future__ import annotations

import functools
import math
import random
import re
from dataclasses import dataclass
from typing import Sequence

from dlbench.measure.stats import interval, mean, percentile, t_quantile

#: Exact binomial tails up to this many samples; the normal approximation above.
EXACT_MAX_N = 2000

#: MLPerf Inference's Llama-3.1-8B Server scenario: TTFT <= 2 s and TPOT <= 100 ms, judged at
#: the 99th percentile (https://github.com/mlcommons/inference/blob/master/loadgen/mlperf.conf:
#: llama3_1-8b.Server.ttft_latency = 2000, .tpot_latency = 100 (ms);
#: *.Server.target_latency_percentile = 99).
MLPERF_LLAMA31_8B_SERVER = {"ttft": 2.0, "tpot": 0.1}


# -- service-level objectives ---------------------------------------------------------------------
@dataclass(frozen=True)
class Slo:
    """Per-request limits, in seconds; None: no limit on that figure."""

    ttft_s: float | None = MLPERF_LLAMA31_8B_SERVER["ttft"]
    tpot_s: float | None = MLPERF_LLAMA31_8B_SERVER["tpot"]
    e2e_s: float | None = None

    @property
    def label(self) -> str:
        """``TTFT <= 2000 ms, TPOT <= 100 ms``."""
        parts = [f"{name} <= {v * 1e3:g} ms" for name, v in
                 (("TTFT", self.ttft_s), ("TPOT", self.tpot_s), ("e2e", self.e2e_s))
                 if v is not None]
        return ", ".join(parts) or "none"

    def meets(self, ttft_s: float | None, tpot_s: float | None, e2e_s: float | None) -> bool:
        """Whether a completed request met every limit (``tpot_s`` None, a one-token output,
        meets the TPOT limit)."""
        if self.ttft_s is not None and (ttft_s is None or ttft_s > self.ttft_s):
            return False
        if self.tpot_s is not None and tpot_s is not None and tpot_s > self.tpot_s:
            return False
        if self.e2e_s is not None and (e2e_s is None or e2e_s > self.e2e_s):
            return False
        return True


_SLO_PART = re.compile(r"\s*(ttft|tpot|e2e)\s*=\s*([0-9.]+(?:e[-+]?\d+)?)\s*(ms|s)?\s*", re.I)


def parse_slo(text: str) -> Slo:
    """``ttft=2000ms,tpot=100ms`` (``e2e=30s`` too; a bare number is milliseconds; ``none``: no
    limits). Figures not named have no limit. ValueError names what is wrong."""
    if text.strip().lower() in ("none", "off", ""):
        return Slo(None, None, None)
    got: dict[str, float] = {}
    for part in text.split(","):
        m = _SLO_PART.fullmatch(part)
        if not m:
            raise ValueError(f"expected NAME=VALUE[ms|s] with NAME ttft, tpot or e2e, got "
                             f"{part.strip()!r}")
        name, value, unit = m.group(1).lower(), float(m.group(2)), (m.group(3) or "ms").lower()
        if not value > 0 or not math.isfinite(value):
            raise ValueError(f"{name} must be > 0, got {m.group(2)}")
        got[name] = value / 1e3 if unit == "ms" else value
    return Slo(got.get("ttft"), got.get("tpot"), got.get("e2e"))


# -- per request ----------------------------------------------------------------------------------
def request_tpot(e2e_s: float, ttft_s: float, output_tokens: int | None) -> float | None:
    """Time per output token of one request: the time after its first token over the tokens
    after the first; None for fewer than two tokens."""
    if output_tokens is None or output_tokens < 2:
        return None
    return (e2e_s - ttft_s) / (output_tokens - 1)


# -- intervals ------------------------------------------------------------------------------------
def _binom_cdf(n: int, p: float) -> list[float]:
    """P(B <= k) for k = 0..n, B ~ Binomial(n, p): every term in log space, summed once
    (exact; n up to a few thousand)."""
    lp, lq, base = math.log(p), math.log1p(-p), math.lgamma(n + 1)
    logs = [base - math.lgamma(i + 1) - math.lgamma(n - i + 1) + i * lp + (n - i) * lq
            for i in range(n + 1)]
    top = max(logs)
    terms = [math.exp(t - top) for t in logs]
    total = math.fsum(terms)
    out, run = [], 0.0
    for t in terms:
        run += t
        out.append(min(1.0, run / total))
    return out


def _z(confidence: float) -> float:
    return t_quantile(0.5 + confidence / 2.0, 1e9)  # the normal quantile: t with df -> inf


@functools.lru_cache(maxsize=4096, typed=True)  # pure, and asked again for every latency figure
def quantile_ranks(n: int, q: float, confidence: float = 0.95) -> tuple[int | None, int | None]:
    """0-based indices ``(lo, hi)`` into ``n`` sorted samples such that ``[x[lo], x[hi]]`` covers
    the ``q``-quantile (0 < q < 1) with at least ``confidence``; an end that ``n`` samples
    cannot bound is None. The count of samples below the quantile is Binomial(n, q): ``lo`` is
    the largest index with P(count <= lo) <= alpha/2, ``hi`` the smallest with
    P(count >= hi + 1) <= alpha/2."""
    if not 0 < q < 1:
        raise ValueError(f"q must be in (0, 1), got {q}")
    if n < 1:
        return None, None
    alpha = 1.0 - confidence
    if n <= EXACT_MAX_N:
        cdf = _binom_cdf(n, q)
        # [x_(l), x_(u)] (1-based ranks) misses below when the count is <= l - 1 and above when
        # it is >= u: l as large and u as small as each tail's alpha/2 allows.
        lo = next((l1 - 1 for l1 in range(n, 0, -1) if cdf[l1 - 1] <= alpha / 2), None)
        hi = next((u1 - 1 for u1 in range(1, n + 1) if 1.0 - cdf[u1 - 1] <= alpha / 2), None)
        return lo, hi
    z = _z(confidence)
    sd = math.sqrt(n * q * (1 - q))
    l1 = math.floor(n * q - z * sd)
    u1 = math.ceil(n * q + z * sd) + 1
    return (l1 - 1 if l1 >= 1 else None), (u1 - 1 if u1 <= n else None)


def quantile_interval(xs: Sequence[float], q: float, confidence: float = 0.95
                      ) -> tuple[float | None, float | None]:
    """The distribution-free ``confidence`` interval of the ``q``-quantile of ``xs``'s
    population (q in (0, 1)); an end ``xs`` cannot bound is None."""
    s = sorted(xs)
    lo, hi = quantile_ranks(len(s), q, confidence)
    return (None if lo is None else s[lo]), (None if hi is None else s[hi])


def wilson(k: int, n: int, confidence: float = 0.95) -> tuple[float, float]:
    """Wilson's score interval of a proportion ``k / n``; (0, 1) for ``n`` = 0."""
    if n <= 0:
        return 0.0, 1.0
    z = _z(confidence)
    p = k / n
    den = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / den
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / den
    # the ends are exactly 0 and 1 for none and all (the formula reaches them up to rounding)
    lo = 0.0 if k == 0 else max(0.0, centre - half)
    return lo, 1.0 if k == n else min(1.0, centre + half)


@dataclass(frozen=True)
class Distribution:
    """A latency's distribution over a set of samples (seconds), each figure with its interval
    (None: unbounded at that end, or no interval with one sample)."""

    n: int
    mean_s: float
    mean_low_s: float | None
    mean_high_s: float | None
    p50_s: float
    p50_low_s: float | None
    p50_high_s: float | None
    p90_s: float
    p99_s: float
    p99_low_s: float | None
    p99_high_s: float | None
    max_s: float

    def percentile(self, q: int) -> float:
        return {50: self.p50_s, 90: self.p90_s, 99: self.p99_s}[q]


def distribution(xs: Sequence[float], confidence: float = 0.95) -> Distribution | None:
    """Mean (its interval allowing for correlated consecutive samples, in the order given),
    median, p90, p99 (medians and p99 with distribution-free intervals) and maximum of ``xs``;
    None when it is empty."""
    if not xs:
        return None
    m = mean(xs)
    h = interval(xs, confidence).halfwidth
    fin = math.isfinite(h)
    p50 = quantile_interval(xs, 0.5, confidence)
    p99 = quantile_interval(xs, 0.99, confidence)
    return Distribution(len(xs), m, max(0.0, m - h) if fin else None, m + h if fin else None,
                        percentile(xs, 50), *p50, percentile(xs, 90), percentile(xs, 99), *p99,
                        max(xs))


# -- arrivals -------------------------------------------------------------------------------------
def arrivals(rate: float, burstiness: float = 1.0, *, count: int | None = None,
             duration_s: float | None = None, seed: int = 0) -> list[float]:
    """Send times (seconds from the start) of requests arriving at ``rate`` per second: gaps
    drawn from a gamma distribution of shape ``burstiness`` and mean ``1 / rate`` (shape 1: a
    Poisson process; below 1 burstier, above 1 more regular; ``inf``: evenly spaced). The
    first request is sent at 0; ``count`` requests, or every arrival before ``duration_s``.
    Seeded: the same arguments give the same schedule."""
    if not rate > 0 or not math.isfinite(rate):
        raise ValueError(f"rate must be a finite number > 0, got {rate}")
    if not burstiness > 0:
        raise ValueError(f"burstiness must be > 0, got {burstiness}")
    if (count is None) == (duration_s is None):
        raise ValueError("give count or duration_s, not both")
    rng = random.Random(seed)
    out, t = [], 0.0
    while (count is not None and len(out) < count) or (duration_s is not None and
                                                        t < duration_s):
        out.append(t)
        t += (1.0 / rate if math.isinf(burstiness)
              else rng.gammavariate(burstiness, 1.0 / (rate * burstiness)))
    return out


def late_count(sched_s: Sequence[float], start_s: Sequence[float], threshold_s: float) -> int:
    """Requests sent more than ``threshold_s`` after they were due."""
    return sum(1 for a, b in zip(sched_s, start_s) if b - a > threshold_s)


__all__ = ["Distribution", "EXACT_MAX_N", "MLPERF_LLAMA31_8B_SERVER", "Slo", "arrivals",
           "distribution", "late_count", "parse_slo", "quantile_interval", "quantile_ranks",
           "request_tpot", "wilson"]
