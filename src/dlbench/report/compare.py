"""Comparing two sets of throughput results: pure functions, no I/O.

Records are matched by config key (same model, batch, precision, mode, ...). For each pair:

- **ratio** = throughput B / throughput A. Both are samples over window time at the same batch,
  so the ratio is mean step time A over mean step time B.
- **its interval**: from the two batch-means intervals (the ones the tables show), combined on the
  log scale: ``ratio * exp(+-sqrt(ln(1+rA)^2 + ln(1+rB)^2))`` where ``r`` is each side's relative
  half-width. Batch means account for the correlation of consecutive steps, so this interval is
  the honest one; it is unbounded when either side has no interval.
- **significance**: Welch's t-test on the raw step times (unequal variances, Welch-Satterthwaite
  degrees of freedom), two-sided. Consecutive steps are correlated, which makes this test somewhat
  eager; a pair is called a regression only when it is both significant and past the threshold.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Sequence

from dlbench import env as envmod
from dlbench.measure.stats import mean, t_cdf
from dlbench.report.table import Table, fmt_num

DEFAULT_THRESHOLD = 0.05
DEFAULT_ALPHA = 0.05


@dataclass(frozen=True)
class Welch:
    """Welch's t-test of two samples: statistic, Welch-Satterthwaite df, two-sided p-value."""

    t: float
    df: float
    p: float


def welch_t(a: Sequence[float], b: Sequence[float]) -> Welch:
    """Welch's unequal-variance t-test of mean(a) against mean(b), two-sided.

    ``t = (mean_a - mean_b) / sqrt(va/na + vb/nb)`` with sample variances; ``df`` from the
    Welch-Satterthwaite equation. When both samples have zero variance the test is degenerate:
    p = 1 for equal means, 0 otherwise (t = +-inf).
    """
    na, nb = len(a), len(b)
    if na < 2 or nb < 2:
        raise ValueError(f"Welch's t needs at least two values per sample, got {na} and {nb}")
    ma, mb = mean(a), mean(b)
    va = math.fsum((x - ma) ** 2 for x in a) / (na - 1)
    vb = math.fsum((x - mb) ** 2 for x in b) / (nb - 1)
    sa, sb = va / na, vb / nb
    se2 = sa + sb
    if se2 == 0.0:
        if ma == mb:
            return Welch(0.0, float(na + nb - 2), 1.0)
        return Welch(math.copysign(math.inf, ma - mb), float(na + nb - 2), 0.0)
    t = (ma - mb) / math.sqrt(se2)
    df = se2 ** 2 / ((sa ** 2 / (na - 1) if sa else 0.0) + (sb ** 2 / (nb - 1) if sb else 0.0))
    p = 2.0 * t_cdf(-abs(t), df)
    return Welch(t, df, min(1.0, max(0.0, p)))


def ratio_interval(ratio: float, rel_a: float, rel_b: float) -> tuple[float, float]:
    """Interval of a ratio from the two sides' relative half-widths (log scale, in quadrature)."""
    if not (math.isfinite(rel_a) and math.isfinite(rel_b)):
        return 0.0, math.inf
    w = math.hypot(math.log1p(rel_a), math.log1p(rel_b))
    return ratio * math.exp(-w), ratio * math.exp(w)


@dataclass(frozen=True)
class Pair:
    """One config measured on both sides; figures in samples/s, ``ratio`` = B over A."""

    key: str
    label: str
    a_id: str
    b_id: str
    a_per_s: float
    b_per_s: float
    ratio: float
    ratio_low: float
    ratio_high: float
    t: float
    df: float
    p: float
    significant: bool
    regression: bool
    improvement: bool
    env_differences: tuple[str, ...]


@dataclass(frozen=True)
class Comparison:
    pairs: tuple[Pair, ...]
    only_a: tuple[str, ...]           # labels of configs with an ok result on A only
    only_b: tuple[str, ...]
    env_differences: tuple[str, ...]  # union over the pairs, in order of first appearance
    threshold: float
    alpha: float

    @property
    def regressions(self) -> tuple[Pair, ...]:
        return tuple(p for p in self.pairs if p.regression)


def _latest_ok(records: Sequence[Any]) -> dict[str, Any]:
    """Ok throughput records by config key; a later record of the same key wins (a rerun)."""
    out: dict[str, Any] = {}
    for r in records:
        if getattr(r, "kind", None) == "throughput" and r.ok and len(r.step_times_s) >= 2:
            out[r.config.key()] = r
    return out


def compare_pair(a: Any, b: Any, threshold: float = DEFAULT_THRESHOLD,
                 alpha: float = DEFAULT_ALPHA) -> Pair:
    """Compare two throughput records of the same config."""
    sa, sb = a.summary(), b.summary()
    ratio = sb.throughput / sa.throughput
    low, high = ratio_interval(ratio, sa.rel_halfwidth, sb.rel_halfwidth)
    w = welch_t(a.step_times_s, b.step_times_s)
    significant = w.p < alpha
    return Pair(key=a.config.key(), label=a.config.label, a_id=a.id, b_id=b.id,
                a_per_s=sa.throughput, b_per_s=sb.throughput, ratio=ratio, ratio_low=low,
                ratio_high=high, t=w.t, df=w.df, p=w.p, significant=significant,
                regression=significant and ratio < 1.0 - threshold,
                improvement=significant and ratio > 1.0 + threshold,
                env_differences=tuple(envmod.differences(a.env or {}, b.env or {})))


def compare(a_records: Sequence[Any], b_records: Sequence[Any],
            threshold: float = DEFAULT_THRESHOLD, alpha: float = DEFAULT_ALPHA) -> Comparison:
    """Match the ok throughput records of A and B by config key and compare each pair."""
    if threshold < 0:
        raise ValueError(f"threshold must be >= 0, got {threshold}")
    ra, rb = _latest_ok(a_records), _latest_ok(b_records)
    pairs = tuple(compare_pair(ra[k], rb[k], threshold, alpha) for k in ra if k in rb)
    diffs = tuple(dict.fromkeys(d for p in pairs for d in p.env_differences))
    return Comparison(pairs=pairs,
                      only_a=tuple(r.config.label for k, r in ra.items() if k not in rb),
                      only_b=tuple(r.config.label for k, r in rb.items() if k not in ra),
                      env_differences=diffs, threshold=threshold, alpha=alpha)


def _verdict(p: Pair) -> str:
    if p.regression:
        return "REGRESSION"
    if p.improvement:
        return "faster"
    if p.significant:
        return "within threshold"
    return "no change"


def comparison_table(c: Comparison, title: str = "B against A") -> Table:
    """One row per matched config: both figures, the ratio and its interval, the test."""
    rows = tuple((
        p.label, fmt_num(p.a_per_s), fmt_num(p.b_per_s), f"{p.ratio:.4f}",
        f"{p.ratio_low:.4f}-{p.ratio_high:.4f}" if math.isfinite(p.ratio_high) else "unbounded",
        f"{p.p:.2g}", "yes" if p.significant else "no", _verdict(p),
    ) for p in c.pairs)
    notes = (f"ratio = throughput B / A (samples/s); interval 95% from the two batch-means "
             f"intervals; p: Welch's t-test on the raw step times, significant when p < "
             f"{c.alpha:g}; regression: significant and B slower than A by more than "
             f"{c.threshold:.1%}",)
    return Table(title, ("config", "A samples/s", "B samples/s", "B/A", "95% interval", "p",
                         "significant", "verdict"), rows, notes)


def to_dict(c: Comparison) -> dict[str, Any]:
    """A JSON-ready form (infinite interval ends as None)."""
    def fin(x: float) -> float | None:
        return x if math.isfinite(x) else None
    return {
        "threshold": c.threshold, "alpha": c.alpha, "regressions": len(c.regressions),
        "env_differences": list(c.env_differences), "only_a": list(c.only_a),
        "only_b": list(c.only_b),
        "pairs": [{"config": p.label, "key": p.key, "a": p.a_id, "b": p.b_id,
                   "a_samples_per_s": p.a_per_s, "b_samples_per_s": p.b_per_s, "ratio": p.ratio,
                   "interval": [p.ratio_low, fin(p.ratio_high)], "t": fin(p.t), "df": p.df,
                   "p": p.p, "significant": p.significant, "regression": p.regression,
                   "verdict": _verdict(p)} for p in c.pairs],
    }
