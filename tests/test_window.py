"""The one measured window on a fake clock: phases kept apart, the stopping rule honoured, and the
bounded launch queue, on a fake device that runs steps while the host goes on."""

import bisect
import math
import random

import pytest

from dlbench.measure.stopping import StopRule
from dlbench.measure.timer import CpuTimer
from dlbench.measure.window import (
    CHECK_INTERVAL_S,
    MeasuredWindow,
    check_every,
    measure_window,
    steps_in_flight,
)


# -- fakes ---------------------------------------------------------------------------------------
class FakeClock:
    """A host clock that moves only when told to."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def host_steps(clock: FakeClock, durations):
    """A synchronous (CPU) step whose k-th call takes ``durations(k)`` seconds of host time."""
    calls = [0]

    def step():
        clock.now += durations(calls[0])
        calls[0] += 1
        return calls[0]
    step.calls = calls
    return step


class FakeDevice:
    """An asynchronous device: a step costs the host ``launch_s`` and queues ``step_s(k)`` of
    work that the device runs in order; the host waits only in ``sync`` and on events."""

    def __init__(self, clock: FakeClock, step_s, launch_s: float = 1e-4) -> None:
        self.clock, self.step_s, self.launch_s = clock, step_s, launch_s
        self.busy_until = 0.0   # when the device finishes the work queued so far
        self.issued = 0
        self.max_ahead = 0      # most steps ever queued and unfinished, seen at a launch

    def step(self):
        self.clock.now += self.launch_s
        start = max(self.busy_until, self.clock.now)
        self.busy_until = start + self.step_s(self.issued)
        self.issued += 1
        return self.issued

    def sync(self) -> None:
        self.clock.now = max(self.clock.now, self.busy_until)


class FakeEventTimer:
    """CudaEventTimer's logic on the fake device: an event completes when the device passes it."""

    def __init__(self, dev: FakeDevice) -> None:
        self.dev = dev
        self.events: list[float] = []
        self.times: list[float] = []

    def _record(self) -> None:
        self.events.append(max(self.dev.busy_until, self.dev.clock.now))

    def start(self) -> None:
        self.events, self.times = [], []
        self._record()

    def lap(self) -> None:
        self._record()
        self.dev.max_ahead = max(self.dev.max_ahead, self._unfinished())

    def _unfinished(self) -> int:
        # events complete in order: those past the device's time are the last ones
        return len(self.events) - bisect.bisect_right(self.events, self.dev.clock.now)

    def ready(self) -> list[float]:
        ev, i = self.events, len(self.times)
        while i + 1 < len(ev) and ev[i + 1] <= self.dev.clock.now:
            self.times.append(ev[i + 1] - ev[i])
            i += 1
        return self.times

    def throttle(self, max_in_flight: int) -> None:
        if len(self.events) - 1 - len(self.times) <= max_in_flight:
            return
        self.ready()
        if len(self.events) - 1 - len(self.times) > max_in_flight:
            self.dev.clock.now = max(self.dev.clock.now, self.events[-1 - max_in_flight])

    def finish(self) -> list[float]:
        if self.events:
            self.dev.clock.now = max(self.dev.clock.now, self.events[-1])
        return self.ready()


class NoThrottle(FakeEventTimer):
    """The timer without the bound: what the loops other than throughput's had before."""

    def throttle(self, max_in_flight: int) -> None:
        pass


def on_device(step_s, timer_cls=FakeEventTimer, **kw):
    clock = FakeClock()
    dev = FakeDevice(clock, step_s)
    window = MeasuredWindow(clock=clock, timer=timer_cls(dev), sync=dev.sync, **kw)
    return clock, dev, window


RULE = dict(min_steps=5, min_seconds=0.0, max_seconds=5.0, target_rel_ci=0.01)
#: A window that reaches the time cap: an interval target its steps' 0.1% jitter never meets
#: (the minimum wins over the cap, so a huge --min-steps would run past it instead).
NEVER = dict(min_steps=2, max_steps=100_000, target_rel_ci=1e-9)


def jitter(step_s: float, k: int) -> float:
    """``step_s`` give or take 0.1%: steps that never converge to a 1e-9 interval."""
    return step_s * (1 + 1e-3 * (k % 2))


# -- the phases ----------------------------------------------------------------------------------
def test_first_step_and_warm_up_are_kept_apart_from_the_window():
    clock = FakeClock()
    # first step 5 s (compilation), then warm-up steps of 2 s, window steps of 1 s
    step = host_steps(clock, lambda k: 5.0 if k == 0 else (2.0 if k <= 3 else 1.0))
    marks = []
    window = MeasuredWindow(clock=clock, timer=CpuTimer(clock), sync=lambda: None,
                            mark=lambda name, t: marks.append((name, t)))
    window.first_step(step)
    assert window.warm_up(step, 3) == (2.0, 2.0, 2.0)
    window.run(step, StopRule(min_steps=4, min_seconds=0.0, max_seconds=100.0))
    w = window.times()
    assert w.first_step_s == 5.0 and w.warmup_times_s == (2.0, 2.0, 2.0)
    assert set(w.step_times_s) == {1.0} and len(w.step_times_s) == 4
    assert w.stop_reason == "converged" and w.wall_s == sum(w.step_times_s)
    assert marks == [("warmup_start", 5.0), ("window_start", 11.0), ("window_end", 15.0)]


def test_warm_up_lasts_its_steps_and_its_seconds():
    clock = FakeClock()
    step = host_steps(clock, lambda k: 0.25)
    w = measure_window(step, 3, warmup_steps=2, warmup_seconds=1.0, clock=clock,
                       timer=CpuTimer(clock), sync=lambda: None)
    assert w.warmup_times_s == (0.25,) * 4          # 2 steps were not a second: 4 are
    assert len(w.step_times_s) == 3 and w.stop_reason == "step_cap"  # a fixed count
    w = measure_window(host_steps(clock, lambda k: 0.75), 2, warmup_steps=3,
                       warmup_seconds=1.0, clock=clock, timer=CpuTimer(clock), sync=lambda: None)
    assert len(w.warmup_times_s) == 3               # a second passed within the 3 steps


def test_times_before_the_window_ran_is_an_error():
    with pytest.raises(RuntimeError, match="not run"):
        MeasuredWindow().times()


# -- the stopping rule ---------------------------------------------------------------------------
def window_on_host(durations, **rule):
    clock = FakeClock()
    step = host_steps(clock, durations)
    return measure_window(step, StopRule(**{**RULE, **rule}), clock=clock,
                          timer=CpuTimer(clock), sync=lambda: None)


def test_steady_steps_stop_at_the_first_check_past_min_steps():
    # Steps of 1/64 s (binary-exact): the rule is asked every 7 steps (0.109 s >= 0.1 s).
    w = window_on_host(lambda k: 1 / 64, min_steps=30)
    assert w.stop_reason == "converged" and len(w.step_times_s) == 35


def test_min_time_holds_the_window_open():
    w = window_on_host(lambda k: 0.01, min_steps=5, min_seconds=2.0)
    assert w.stop_reason == "converged"
    assert sum(w.step_times_s) >= 2.0 > sum(w.step_times_s) - 0.01 - CHECK_INTERVAL_S


def test_target_interval_decides_between_converged_and_the_time_cap():
    rng = random.Random(0)
    noise = [rng.uniform(0.01, 0.05) for _ in range(1000)]
    noisy = noise.__getitem__
    # steps of 10 to 50 ms at random: never within 0.1% in 3 s, so the time cap ends it ...
    w = window_on_host(noisy, target_rel_ci=0.001, max_seconds=3.0)
    assert w.stop_reason == "time_cap" and sum(w.step_times_s) >= 3.0
    # ... and within 20% at once: converged at the minimum
    w = window_on_host(noisy, target_rel_ci=0.2, min_steps=20, max_steps=20)
    assert w.stop_reason == "step_cap" and len(w.step_times_s) == 20
    w = window_on_host(noisy, target_rel_ci=0.5, min_steps=20)
    assert w.stop_reason == "converged" and 20 <= len(w.step_times_s) < 20 + 5


def test_max_time_on_the_host_overruns_by_one_check_at_most():
    w = window_on_host(lambda k: jitter(0.03, k), **{**NEVER, "max_seconds": 2.0})
    assert w.stop_reason == "time_cap"
    assert 2.0 <= w.wall_s <= 2.0 + CHECK_INTERVAL_S + 0.03 * 1.001


def test_max_steps():
    w = window_on_host(lambda k: 0.01, min_steps=5, max_steps=7, target_rel_ci=0.001,
                       max_seconds=100.0)
    assert w.stop_reason == "step_cap" and len(w.step_times_s) == 7


# -- the bounded launch queue --------------------------------------------------------------------
def test_the_fake_device_runs_ahead_of_the_host_as_a_gpu_does():
    clock, dev, window = on_device(lambda k: 0.5)
    window.first_step(dev.step)
    assert window.first_step_s == pytest.approx(0.5 + 1e-4)  # the sync waited for it
    window.run(dev.step, 10)
    # events time the device: the first step from the idle device's event, its launch too
    assert window.step_times_s == pytest.approx((0.5 + 1e-4,) + (0.5,) * 9)
    # in flight: 2 steps (a second of 0.5 s steps), and the one just issued before its wait
    assert window.in_flight == 2 and dev.max_ahead == 3


@pytest.mark.parametrize("step_s", [0.4, 3.0, 60.0])
def test_a_slow_step_overruns_max_time_by_the_queue_depth_at_most(step_s):
    # Uniformly slow steps (a model at its memory boundary): the host may queue in_flight steps
    # of them, and no more, past the moment its clock passes --max-time.
    clock, dev, window = on_device(lambda k: jitter(step_s, k))
    window.first_step(dev.step)
    window.warm_up(dev.step, 2)
    window.run(dev.step, StopRule(**{**RULE, **NEVER}))
    k = window.in_flight
    assert k == steps_in_flight(step_s) and dev.max_ahead <= k + 1
    assert window.stop_reason == "time_cap"
    # past the cap, or past the minimum's two steps where those outlast it (60 s steps)
    reach = max(RULE["max_seconds"], NEVER["min_steps"] * step_s * 1.001)
    assert window.wall_s <= reach + (k + 1) * step_s * 1.001 + 1e-6
    assert sum(window.step_times_s) == pytest.approx(window.wall_s, abs=1e-3)


def test_without_the_bound_the_window_overran_max_time_by_the_launch_queue():
    # The same steps with a timer that never waits: the host, whose launches cost 0.1 ms,
    # queues ~50,000 steps while its clock reaches 5 s; the window then waits for all of them.
    clock, dev, window = on_device(lambda k: jitter(0.4, k), timer_cls=NoThrottle)
    window.first_step(dev.step)
    window.warm_up(dev.step, 2)
    window.run(dev.step, StopRule(**{**RULE, **NEVER}))
    assert window.wall_s > 1000 * RULE["max_seconds"]


def test_a_sudden_slowdown_overruns_by_the_queue_depth_it_was_given():
    # Warm-up steps of 10 ms leave 100 steps in flight; window steps of 0.2 s can then overrun
    # by those 100 (and one being issued), never by the launch queue's depth.
    clock, dev, window = on_device(lambda k: 0.01 if k < 6 else jitter(0.2, k))
    window.first_step(dev.step)
    window.warm_up(dev.step, 5)
    window.run(dev.step, StopRule(**{**RULE, **NEVER}))
    assert window.in_flight == 100
    assert window.wall_s <= RULE["max_seconds"] + 101 * 0.2 * 1.001 + 1e-6
    assert dev.max_ahead <= 101


def test_a_fixed_count_is_bounded_too():
    clock, dev, window = on_device(lambda k: 2.0)
    window.first_step(dev.step)
    window.warm_up(dev.step, 1)
    window.run(dev.step, 20)
    assert len(window.step_times_s) == 20 and dev.max_ahead <= window.in_flight + 1 == 2


# -- ranks that agree ----------------------------------------------------------------------------
class Leader:
    """Rank 0 of a job, alone: every value it gives is the one every rank gets."""

    leader = True

    def __init__(self) -> None:
        self.calls: list[int] = []

    def __call__(self, value: int) -> int:
        self.calls.append(value)
        return value


class Follower:
    """Another rank: it gets rank 0's values, scripted."""

    leader = False

    def __init__(self, values) -> None:
        self.values, self.calls = list(values), []

    def __call__(self, value: int) -> int:
        self.calls.append(value)
        return self.values.pop(0)


def test_ranks_check_every_agreed_count_and_rank_zero_decides():
    assert check_every([0.01] * 4) == 10 and check_every([0.5]) == 1 and check_every([]) == 1
    assert check_every([1e-9]) == 1000
    agree = Leader()
    clock, dev, window = on_device(lambda k: jitter(0.5, k), agree=agree)
    window.first_step(dev.step)
    window.warm_up(dev.step, 2, 0.0)
    window.run(dev.step, StopRule(**{**RULE, **NEVER}))
    assert window.check_every == 1 and window.stop_reason == "time_cap"
    # the warm-up's end and the cadence were agreed, then one decision per step (0 = go on)
    assert agree.calls[:2] == [1, 1] and agree.calls[-1] == 2 and set(agree.calls[2:-1]) == {0}
    # the bound across ranks: the steps between two checks, and the queue
    k = window.in_flight
    assert window.wall_s <= RULE["max_seconds"] + (window.check_every + k + 1) * 0.5005 + 1e-6


def test_a_follower_stops_when_rank_zero_says_and_asks_nothing_itself():
    clock = FakeClock()
    step = host_steps(clock, lambda k: 0.01)
    # warm-up: not yet, done; cadence: 5; then go on, go on, converged
    agree = Follower([0, 1, 5, 0, 0, 1])
    w = measure_window(step, StopRule(**RULE), warmup_steps=1, clock=clock,
                       timer=CpuTimer(clock), sync=lambda: None, agree=agree)
    assert len(w.warmup_times_s) == 2 and len(w.step_times_s) == 15
    assert w.stop_reason == "converged"
    assert agree.calls[3:] == [0, 0, 0]  # a follower never consults the rule


def test_every_rank_stops_at_max_steps_without_a_message():
    agree = Leader()
    clock = FakeClock()
    rule = StopRule(**{**RULE, "min_steps": 6, "max_steps": 6})
    w = measure_window(host_steps(clock, lambda k: 0.5), rule,
                       clock=clock, timer=CpuTimer(clock), sync=lambda: None, agree=agree)
    assert w.stop_reason == "step_cap" and len(w.step_times_s) == 6
    # the warm-up's end, the cadence, then checks after steps 1..5, none after 6
    assert agree.calls == [1, 1, 0, 0, 0, 0, 0]
    assert math.isclose(w.wall_s, 3.0)
