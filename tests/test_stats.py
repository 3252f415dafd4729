"""Statistics on known numbers."""

import math
import random

import pytest

from dlbench.measure import stats


@pytest.mark.parametrize("df, expected", [(1, 12.7062047), (2, 4.3026527), (5, 2.5705818),
                                          (10, 2.2281389), (30, 2.0422725), (1000, 1.9623391)])
def test_t_quantile_matches_tables(df, expected):
    assert stats.t_quantile(0.975, df) == pytest.approx(expected, abs=1e-6)


def test_t_quantile_is_symmetric_and_inverts_cdf():
    assert stats.t_quantile(0.025, 7) == pytest.approx(-stats.t_quantile(0.975, 7))
    assert stats.t_cdf(stats.t_quantile(0.9, 4), 4) == pytest.approx(0.9, abs=1e-9)
    with pytest.raises(ValueError):
        stats.t_quantile(1.0, 3)


def test_percentile_interpolates_like_numpy():
    xs = [4.0, 1.0, 3.0, 2.0]
    assert stats.percentile(xs, 50) == 2.5
    assert stats.percentile(xs, 0) == 1.0
    assert stats.percentile(xs, 100) == 4.0
    assert stats.percentile(xs, 25) == pytest.approx(1.75)


def test_stdev_sample():
    assert stats.stdev([2, 4, 4, 4, 5, 5, 7, 9]) == pytest.approx(2.138089935)
    assert stats.stdev([1.0]) == 0.0


def test_block_means_drop_leading_remainder():
    # 23 values, 20 blocks of 1 after dropping the first 3
    xs = list(range(23))
    assert stats.block_means(xs) == [float(x) for x in range(3, 23)]
    # 40 values: 20 blocks of 2
    assert stats.block_means(list(range(40)))[:2] == [0.5, 2.5]


def test_batch_means_interval_known_value():
    # Five blocks of one value each: the plain t interval of the mean (the old method).
    xs = [1.0, 2.0, 3.0, 4.0, 5.0]
    h = stats.mean_interval_batch_means(xs)
    assert h == pytest.approx(2.7764451 * stats.stdev(xs) / math.sqrt(5), rel=1e-6)
    assert stats.mean_interval_batch_means([1.0]) == math.inf


def test_integrated_time_known_value():
    # 1..5 around 3: autocovariances 2, 0.8, -0.2, -0.8 (divisor 5); the first pair 2.8 is
    # kept, the second (-1.0) ends the sum: tau = (-2 + 2 * 2.8) / 2 = 1.8, last lag 1.
    assert stats.integrated_time([1.0, 2.0, 3.0, 4.0, 5.0]) == pytest.approx((1.8, 1))
    assert stats.integrated_time([2.0] * 6) == (1.0, 0)


def test_ess_interval_known_value():
    # tau 1.8, bias fraction (2 * 3 + 1) / 5 capped at 1/2: tau 3.6, ESS 5 / 3.6, df 1.
    xs = [1.0, 2.0, 3.0, 4.0, 5.0]
    iv = stats.interval(xs)
    assert iv.method == stats.ESS
    assert iv.ess == pytest.approx(5 / 3.6) and iv.df == 1.0
    assert iv.halfwidth == pytest.approx(12.7062047 * stats.stdev(xs) / math.sqrt(5 / 3.6),
                                         rel=1e-6)


def test_ess_interval_of_independent_steps_is_near_the_plain_t():
    # Alternating steps have negative correlation: ESS is capped at n, never credited above it.
    xs = [1.0, 1.2] * 50
    iv = stats.interval(xs)
    assert iv.method == stats.ESS and iv.ess == 100.0


def test_method_by_window_length():
    assert stats.interval([1.0]).method == stats.NONE
    assert stats.interval([1.0]).halfwidth == math.inf
    assert stats.interval([1.0, 2.0] * 99 + [1.5]).method == stats.ESS       # 199 steps
    long = stats.interval([1.0, 2.0] * 100)                                  # 200 steps
    assert long.method == stats.BATCH_MEANS and long.ess == 10 and long.df == 9
    assert stats.interval([1.0, 2.0] * 500).ess == stats.MAX_BLOCKS


def test_ar1_floor_known_value():
    # Runs of 4 ones and 4 twos, 24 steps: lag-1 autocorrelation 13/24; Kendall's correction
    # gives phi = (24 * 13/24 + 1) / 21 = 2/3, AR(1) time (1 + phi) / (1 - phi) = 5, and 5 /
    # (1 - 5/24) = 120/19 for the variance the window's own mean hides. Geyer's sum says less
    # (25/12 at M = 1, 50/17 after its bias correction), so the floor wins; the degrees of
    # freedom stay Geyer's: min(24 / (50/17) - 1, 24 / 3) = 7.16.
    xs = ([1.0] * 4 + [2.0] * 4) * 3
    assert stats.integrated_time(xs) == pytest.approx((25 / 12, 1))
    assert stats.correlation_time(xs) == pytest.approx((120 / 19, 7.16))
    iv = stats.interval(xs)
    assert iv.ess == pytest.approx(24 / (120 / 19)) and iv.df == pytest.approx(7.16)
    # below MIN_AR_STEPS the floor does not apply: 16 steps of the same runs
    short = ([1.0] * 4 + [2.0] * 4) * 2
    tau, lag = stats.integrated_time(short)
    assert stats.correlation_time(short)[0] == pytest.approx(
        tau / (1 - min((2 * max(lag, 3) + 1) / 16, 0.5)))


def test_a_window_too_short_for_its_correlation_counts_as_one_step():
    # Ten steps at one level, then ten at another: the lag-1 correlation (17/20) puts the AR(1)
    # time beyond half the window, so the window is one effective step and its interval a t
    # quantile (1 degree of freedom here) times the steps' own standard deviation.
    xs = [1.0] * 10 + [2.0] * 10
    iv = stats.interval(xs)
    assert iv.method == stats.ESS and iv.ess == 1.0 and iv.df == 1.0
    assert iv.halfwidth == pytest.approx(12.7062047 * stats.stdev(xs), rel=1e-6)


def test_batches_follow_the_correlation_time():
    # 400 steps in runs of 20 (a slow square wave): tau is about 20, so batches of 10 tau leave
    # room for 2, not 10: the ESS interval. The same steps alternating every step: 20 batches.
    slow = ([1.0] * 20 + [2.0] * 20) * 10
    assert stats.interval(slow).method == stats.ESS
    fast = [1.0, 2.0] * 200
    assert stats.interval(fast).method == stats.BATCH_MEANS and stats.interval(fast).ess == 20


def test_long_windows_estimate_tau_on_group_means(monkeypatch):
    # Above MAX_TAU_POINTS steps Geyer's sum runs on at most that many group means: a random
    # walk of 30,000 steps (its sum would otherwise run over thousands of lags, n products
    # each) costs a few hundred thousand products, and is one effective step.
    rng = random.Random(1)
    walk, x = [], 0.0
    for _ in range(30000):
        x += rng.gauss(0.0, 1.0)
        walk.append(100.0 + x)
    products = []
    counted = stats._autocovariance

    def count(d, lag):
        products.append(len(d) - lag)
        return counted(d, lag)
    monkeypatch.setattr(stats, "_autocovariance", count)
    iv = stats.interval(walk)
    assert sum(products) < 1_000_000
    assert iv.method == stats.ESS and iv.ess == pytest.approx(1.0, abs=0.01)
    # steps alternating around a level: the group means (pairs) are constant, tau is 1
    assert stats.correlation_time([1.0, 2.0] * 1000)[0] == 1.0


def test_across_processes_known_value():
    m, h = stats.across_processes([100.0, 102.0, 104.0])
    assert m == 102.0
    assert h == pytest.approx(4.3026527 * 2.0 / math.sqrt(3), rel=1e-6)
    assert stats.across_processes([5.0]) == (5.0, math.inf)


def test_summary_says_which_interval():
    s = stats.summarize([0.1, 0.11, 0.1, 0.12] * 5, samples_per_step=8)
    assert s.interval_method == stats.ESS and s.ess is not None and s.df >= 1
    assert stats.summarize([0.1, 0.11] * 150, 8).interval_method == stats.BATCH_MEANS


def test_summarize_throughput_is_total_samples_over_total_time():
    # Steps of 0.1 s and 0.3 s: mean of per-step rates would be (320+106.7)/2 = 213; truth is 160.
    s = stats.summarize([0.1, 0.3], samples_per_step=32)
    assert s.throughput == pytest.approx(64 / 0.4)
    assert s.samples == 64 and s.steps == 2
    assert s.median_s == pytest.approx(0.2)


def test_summarize_interval_brackets_the_throughput():
    xs = [0.0100, 0.0102, 0.0098, 0.0100, 0.0101, 0.0099, 0.0100, 0.0103, 0.0097, 0.0100] * 3
    s = stats.summarize(xs, samples_per_step=100)
    assert s.throughput_low < s.throughput < s.throughput_high
    assert 0 < s.rel_halfwidth < 0.05
    assert not s.noisy


def test_noisy_flag_at_ten_percent_cv():
    s = stats.summarize([1.0, 1.5] * 10, samples_per_step=1)
    assert s.cv > 0.1 and s.noisy


def test_constant_series_has_zero_width_interval():
    s = stats.summarize([0.5] * 10, samples_per_step=4)
    assert s.rel_halfwidth == 0.0
    assert s.throughput == pytest.approx(8.0)
    assert s.throughput_low == pytest.approx(8.0) and s.throughput_high == pytest.approx(8.0)
