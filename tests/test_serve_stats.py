"""The arithmetic of serving (dlbench.measure.serving) on known numbers: SLO parsing and
judging, TPOT, the order-statistic intervals of percentiles (against the published table and by
simulation), Wilson's interval, arrival schedules, lateness."""

from __future__ import annotations

import math
import random

import pytest

from dlbench.measure import serving as sv


@pytest.mark.parametrize("text,want", [
    ("ttft=2000ms,tpot=100ms", sv.Slo(2.0, 0.1, None)),
    ("ttft=2s", sv.Slo(2.0, None, None)),
    ("TPOT = 50, e2e=30s", sv.Slo(None, 0.05, 30.0)),
    ("none", sv.Slo(None, None, None)),
])
def test_slo_parses_names_values_and_units(text, want):
    assert sv.parse_slo(text) == want


@pytest.mark.parametrize("text", ["ttft", "ttft=fast", "latency=2s", "ttft=0ms", "tpot=-1"])
def test_a_bad_slo_is_refused_with_what_is_wrong(text):
    with pytest.raises(ValueError, match="ttft|tpot|e2e|> 0"):
        sv.parse_slo(text)


def test_default_slo_is_mlperfs_llama_server_and_judges_each_limit():
    slo = sv.Slo()
    assert (slo.ttft_s, slo.tpot_s, slo.e2e_s) == (2.0, 0.1, None)
    assert slo.label == "TTFT <= 2000 ms, TPOT <= 100 ms"
    assert slo.meets(2.0, 0.1, 99.0)                 # at the limits: within
    assert not slo.meets(2.001, 0.05, 1.0)
    assert not slo.meets(0.5, 0.1001, 1.0)
    assert slo.meets(0.5, None, 1.0)                 # one output token: no TPOT to judge
    assert not sv.Slo(None, None, 1.0).meets(0.1, 0.01, 1.5)


def test_tpot_is_the_time_after_the_first_token_over_the_tokens_after_it():
    assert sv.request_tpot(0.14, 0.10, 5) == pytest.approx(0.01)
    assert sv.request_tpot(0.1, 0.1, 1) is None and sv.request_tpot(0.1, 0.1, None) is None


@pytest.mark.parametrize("n,q,want", [
    # 1-based ranks of the distribution-free 95% interval of the median (any textbook's table,
    # e.g. Conover, "Practical Nonparametric Statistics", table A3): 0-based here
    (10, 0.5, (1, 8)), (20, 0.5, (5, 14)), (100, 0.5, (39, 60)),
    (5, 0.5, (None, None)),     # 5 samples cannot bound a median at 95% (2 x 0.5^5 > 0.05)
    (100, 0.99, (96, None)),    # nor 100 a p99 from above: 0.99^100 = 0.37 > 0.025
    (368, 0.99, (359, 367)), (367, 0.99, (358, None)),  # 0.99^368 < 0.025 < 0.99^367
])
def test_quantile_ranks_match_the_binomial_table(n, q, want):
    assert sv.quantile_ranks(n, q) == want


def test_quantile_interval_covers_the_true_quantile_at_least_95_percent():
    """Exponential samples (true median ln 2): over 2,000 sets of 40 and of 3,000 samples (the
    normal approximation), the interval holds the median in at least 94% (95% nominal, the
    exact method conservative)."""
    rng = random.Random(1)
    for n in (40, 3000):
        hits = 0
        sets = 2000 if n == 40 else 300
        for _ in range(sets):
            xs = [rng.expovariate(1.0) for _ in range(n)]
            lo, hi = sv.quantile_interval(xs, 0.5)
            hits += lo <= math.log(2) <= hi
        assert hits / sets >= 0.94, (n, hits / sets)


def test_wilson_interval_on_known_numbers():
    # 8 of 10: Wilson (z = 1.96) gives 0.4902 to 0.9433 (Newcombe 1998, table I, method 3)
    lo, hi = sv.wilson(8, 10)
    assert lo == pytest.approx(0.4902, abs=1e-4) and hi == pytest.approx(0.9433, abs=1e-4)
    assert sv.wilson(0, 0) == (0.0, 1.0)
    lo, hi = sv.wilson(10, 10)
    assert hi == 1.0 and lo == pytest.approx(0.7225, abs=1e-4)


def test_distribution_of_known_samples():
    d = sv.distribution([float(i) for i in range(1, 101)])
    assert d.n == 100 and d.mean_s == 50.5 and d.p50_s == 50.5 and d.max_s == 100.0
    assert d.p90_s == pytest.approx(90.1) and d.p99_s == pytest.approx(99.01)
    assert (d.p50_low_s, d.p50_high_s) == (40.0, 61.0)
    assert d.p99_high_s is None and d.p99_low_s == 97.0
    assert d.mean_low_s < 50.5 < d.mean_high_s
    assert sv.distribution([]) is None


def test_arrivals_poisson_have_the_rate_and_the_seed_fixes_them():
    a = sv.arrivals(10.0, count=5000, seed=3)
    assert a[0] == 0.0 and len(a) == 5000 and a == sorted(a)
    gaps = [y - x for x, y in zip(a, a[1:])]
    mean = sum(gaps) / len(gaps)
    assert mean == pytest.approx(0.1, rel=0.05)
    cv = math.sqrt(sum((g - mean) ** 2 for g in gaps) / len(gaps)) / mean
    assert cv == pytest.approx(1.0, rel=0.08)       # exponential gaps: cv 1
    assert sv.arrivals(10.0, count=5000, seed=3) == a
    assert sv.arrivals(10.0, count=5000, seed=4) != a


def test_burstiness_shapes_the_gaps():
    def cv(b):
        a = sv.arrivals(5.0, b, count=4000, seed=0)
        g = [y - x for x, y in zip(a, a[1:])]
        m = sum(g) / len(g)
        return m, math.sqrt(sum((x - m) ** 2 for x in g) / len(g)) / m
    m, c = cv(0.25)
    assert m == pytest.approx(0.2, rel=0.1) and c == pytest.approx(2.0, rel=0.15)  # 1/sqrt(k)
    m, c = cv(4.0)
    assert m == pytest.approx(0.2, rel=0.05) and c == pytest.approx(0.5, rel=0.1)
    assert sv.arrivals(4.0, math.inf, count=4) == [0.0, 0.25, 0.5, 0.75]


def test_arrivals_for_a_duration_stop_before_it():
    a = sv.arrivals(4.0, math.inf, duration_s=1.0)
    assert a == [0.0, 0.25, 0.5, 0.75]
    with pytest.raises(ValueError):
        sv.arrivals(4.0, count=3, duration_s=1.0)
    with pytest.raises(ValueError):
        sv.arrivals(math.inf, count=3)


def test_late_count():
    assert sv.late_count([0.0, 1.0, 2.0], [0.005, 1.011, 2.0], 0.01) == 1
