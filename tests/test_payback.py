"""records.payback: when a tuned setup's extra build and first-step time is earned back, on
made-up records whose numbers are easy to work out by hand."""

import math

import pytest

from dlbench.records.payback import Payback, payback, setup_s
from dlbench.records.throughput import ThroughputConfig, ThroughputRecord


def rec(step_s, first=None, build=None, batch=10, **kw):
    cfg = ThroughputConfig(model="resnet50", batch_size=batch, precision="bf16", **kw)
    return ThroughputRecord(config=cfg, env={}, step_times_s=(step_s,) * 10,
                            samples_per_step=batch, unit="images", stop_reason="converged",
                            first_step_s=first, build_s=build)


def test_setup_is_build_plus_first_step_and_a_missing_part_counts_zero():
    assert setup_s(rec(0.1, first=2.5, build=0.5)) == pytest.approx(3.0)
    assert setup_s(rec(0.1, first=2.5)) == pytest.approx(2.5)
    assert setup_s(rec(0.1)) == 0.0


def test_a_faster_config_with_a_cheaper_setup_is_ahead_at_once():
    plain = rec(0.1, first=5.0, build=1.0)
    tuned = rec(0.08, first=2.0, build=1.0, channels_last=True)
    assert payback(plain, tuned) == Payback(-3.0, 0.0, 0.0, 0.0)


def test_an_equally_fast_config_never_pays_back_whatever_its_setup():
    plain = rec(0.1, first=1.0)
    p = payback(plain, rec(0.1, first=0.5, channels_last=True))
    assert p.never and math.isinf(p.seconds) and p.extra_setup_s == pytest.approx(-0.5)


def test_steps_and_seconds_are_counted_in_the_tuned_configs_own_steps():
    # Plain: batch 10 at 0.1 s (100/s), no setup. Tuned: batch 20 at 0.1 s (200/s), 4 s setup.
    # Each sample saves 1/100 - 1/200 = 5 ms: 800 samples, 40 tuned steps, 4 s of tuned running.
    p = payback(rec(0.1), rec(0.1, first=4.0, batch=20))
    assert (p.samples, p.steps, p.seconds) == pytest.approx((800, 40, 4.0))
    assert not p.never


def test_tuned_mode_reads_the_one_payback():
    from dlbench.tuning import payback as tuned_mode
    assert tuned_mode.payback is payback and tuned_mode.setup_s is setup_s
