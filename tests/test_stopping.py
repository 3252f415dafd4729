"""The stopping rule, driven by a fake clock."""

import random

import pytest

from dlbench.measure.stopping import StopReason, StopRule, decide
from dlbench.measure.timer import CpuTimer


class FakeClock:
    """Each read returns the current time; ``tick`` advances it."""

    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t

    def tick(self, dt: float) -> None:
        self.t += dt


RULE = StopRule(min_steps=5, min_seconds=1.0, max_seconds=10.0, target_rel_ci=0.01)


def run_loop(step_durations, rule=RULE):
    """The measured loop's shape with a fake clock: step, lap, ask the rule."""
    clock = FakeClock()
    timer = CpuTimer(clock)
    timer.start()
    t0 = clock()
    issued, reason = 0, None
    for d in step_durations:
        clock.tick(d)
        timer.lap()
        issued += 1
        reason = decide(timer.ready(), issued, clock() - t0, rule)
        if reason:
            break
    return reason, timer.finish()


def test_steady_steps_stop_when_min_time_reached():
    reason, times = run_loop([0.125] * 1000)  # binary-exact, so the clock sums exactly
    assert reason == StopReason.CONVERGED
    assert len(times) == 8  # min_seconds 1.0 / 0.125 s per step
    assert times == [0.125] * 8


def test_min_steps_holds_even_when_time_passed():
    reason, times = run_loop([0.5] * 100)
    assert reason == StopReason.CONVERGED and len(times) == 5


def test_noisy_steps_run_to_time_cap():
    rng = random.Random(0)
    durations = [rng.uniform(0.02, 0.18) for _ in range(1000)]  # cv ~46%: 1% needs far more than 10 s
    reason, times = run_loop(durations)
    assert reason == StopReason.TIME_CAP
    assert sum(times) == pytest.approx(10.0, abs=0.15)


def test_step_cap():
    rule = StopRule(min_steps=5, min_seconds=100.0, max_seconds=1000.0, max_steps=7)
    reason, times = run_loop([0.1] * 100, rule)
    assert reason == StopReason.STEP_CAP and len(times) == 7


def test_lagging_times_do_not_stop_early():
    # On a GPU the times known lag the steps issued: with 3 known steps the rule must wait.
    assert decide([0.1, 0.1, 0.1], issued_steps=50, elapsed_s=5.0, rule=RULE) is None
    assert decide([0.1] * 5, issued_steps=50, elapsed_s=5.0, rule=RULE) == StopReason.CONVERGED


@pytest.mark.parametrize("kwargs, flag", [
    (dict(min_steps=1), "^min_steps"), (dict(min_steps=10, max_steps=5), "^max_steps"),
    (dict(min_seconds=5, max_seconds=1), "^max_seconds"),
    (dict(target_rel_ci=1.5), "^target_rel_ci"),
])
def test_bad_rules_name_the_flag(kwargs, flag):
    with pytest.raises(ValueError, match=flag):
        StopRule(**kwargs)


def test_steps_in_flight_keep_about_a_second_of_work_queued_and_one_at_least():
    from dlbench.measure.window import IN_FLIGHT_S, steps_in_flight
    assert IN_FLIGHT_S == 1.0
    assert steps_in_flight(0.001) == 1000   # fast steps: the launch queue bounds them first
    assert steps_in_flight(0.16) == 7
    assert steps_in_flight(0.6) == 2
    assert steps_in_flight(60.0) == 1  # minute-long steps: one queued behind the one running
    assert steps_in_flight(0.0) >= 1


def test_the_cpu_timer_never_waits_in_throttle():
    clock = iter(range(100)).__next__
    timer = CpuTimer(clock)
    timer.start()
    for _ in range(5):
        timer.lap()
        timer.throttle(2)
    assert timer.finish() == [1, 1, 1, 1, 1]


def test_the_minimum_wins_over_the_time_cap():
    """Steps of 4 s against a 10 s cap and a minimum of 5: the window runs to 5 steps (20 s)
    and then stops for the cap, never storing a figure of 2 or 3 steps."""
    reason, times = run_loop([4.0, 4.1] * 50)
    assert reason == StopReason.TIME_CAP and len(times) == 5
    # a user's --min-steps 3 is kept too
    rule = StopRule(min_steps=3, min_seconds=0.0, max_seconds=1.0, target_rel_ci=0.01)
    reason, times = run_loop([2.0, 3.0] * 10, rule)
    assert reason == StopReason.TIME_CAP and len(times) == 3
    # a window that reaches its interval at the cap is labelled converged, not capped
    steady = StopRule(min_steps=5, min_seconds=0.0, max_seconds=1.0, target_rel_ci=0.01)
    reason, times = run_loop([0.25] * 10, steady)
    assert reason == StopReason.CONVERGED and len(times) == 5
