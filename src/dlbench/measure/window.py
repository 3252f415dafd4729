"""The one measured window: a first step apart, a warm-up apart, then the timed steps.

Every workload that times training steps (throughput, scaling's ddp/dp/ps ranks, the synthetic
side measurement of ``dlbench train``, the collectives of ``dlbench comm``) runs its steps through
:class:`MeasuredWindow`, in three phases:

1. ``first_step``: one step, timed alone with ``perf_counter`` around a synchronize. It holds
   compilation, cuDNN autotuning, lazy initialisation and communicator set-up, so it is stored
   apart and never mixed into the steady state.
2. ``warm_up``: at least ``steps`` steps and ``seconds`` seconds (clocks ramp up), timed with the
   one timer and stored apart; it ends with a synchronize, before the window.
3. ``run``: the measured window. A boundary event after every step, read once at the end (no
   per-step synchronize, which would drain the launch queue and change the figure); the stopping
   rule (:mod:`dlbench.measure.stopping`) is consulted every ``CHECK_INTERVAL_S`` on events the
   GPU has already passed; and the *launch queue is bounded*: before going on after step i the
   host waits for step i-k to finish (``timer.throttle``), k being about ``IN_FLIGHT_S`` of
   work, so the host clock that the time cap reads is never more than k steps ahead of the GPU,
   and a slow step cannot overrun ``--max-time`` by more than k steps (plus, across ranks, the
   steps between two stop checks).

With several ranks every rank must run the same number of steps (each step holds collectives
the others wait on), so the ranks agree through an :class:`Agreement` (rank 0's value on every
rank, e.g. :class:`RankZero`, a broadcast on a host-side gloo group): on the end of the warm-up,
on how many steps lie between two stop checks, and on every stop decision, which rank 0 takes
from its own step times.

The clock, the timer and the synchronize are injectable, so tests drive all of it on a fake
clock (a fake device too). Measurement code prints nothing and writes nothing.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any, Callable, Protocol

import torch
import torch.distributed as dist

from dlbench.measure.stopping import StopReason, StopRule, decide
from dlbench.measure.timer import StepTimer, make_timer, synchronize

# How often the loop asks the stopping rule (host seconds). Reading a few events and computing
# batch means costs ~0.1 ms; at 10 Hz that is under 0.1% of the window.
CHECK_INTERVAL_S = 0.1

# GPU work (seconds) the host may queue ahead of the GPU: enough to keep it fed through any host
# hiccup, and a bound on how far past --max-time the window's end waits when steps are slow.
IN_FLIGHT_S = 1.0

# Steps between two stop checks across ranks, at most: the broadcast costs a host round trip.
MAX_CHECK_EVERY = 1000

# Stop codes the ranks agree on (0 = go on).
_REASONS = (None, StopReason.CONVERGED, StopReason.TIME_CAP, StopReason.STEP_CAP)


def steps_in_flight(step_s: float) -> int:
    """How many steps of ``step_s`` make ``IN_FLIGHT_S`` of queued work; 1 at least: the host
    then waits for the step before the one it just queued, so one step always runs while the
    next is queued behind it."""
    return max(1, math.ceil(IN_FLIGHT_S / max(step_s, 1e-6)))


def check_every(warmup_times_s: tuple[float, ...] | list[float]) -> int:
    """Steps between two stop checks across ranks: about ``CHECK_INTERVAL_S`` of warm-up steps."""
    if not warmup_times_s:
        return 1
    mean_s = sum(warmup_times_s) / len(warmup_times_s)
    return max(1, min(MAX_CHECK_EVERY, math.ceil(CHECK_INTERVAL_S / max(mean_s, 1e-6))))


class Agreement(Protocol):
    """How the ranks of a job agree: ``leader`` is the rank that decides, and calling it with an
    integer returns the leader's integer on every rank (every rank must call it alike)."""

    leader: bool

    def __call__(self, value: int) -> int: ...


class RankZero:
    """Rank 0's value on every rank: a broadcast of one integer on ``group``, which should be a
    gloo group, so the message touches no GPU stream and never queues behind GPU work."""

    def __init__(self, group: Any) -> None:
        self._dist, self._group = dist, group
        self.leader = dist.get_rank() == 0

    def __call__(self, value: int) -> int:
        t = torch.tensor([value], dtype=torch.int64)
        self._dist.broadcast(t, src=0, group=self._group)
        return int(t.item())


@dataclass(frozen=True)
class WindowTimes:
    """The raw times of one window (seconds).

    Attributes:
        first_step_s: the first step, host clock around a synchronize (None if not run).
        warmup_times_s: every warm-up step, by the one timer.
        step_times_s: every measured step; they tile the window, so their sum is its time.
        wall_s: host clock from the window's start to the end of its one synchronize.
        stop_reason: a :class:`StopReason` value (``step_cap`` for a fixed count of steps).
    """

    first_step_s: float | None
    warmup_times_s: tuple[float, ...]
    step_times_s: tuple[float, ...]
    wall_s: float
    stop_reason: str


def _no_mark(name: str, t: float) -> None:
    pass


class MeasuredWindow:
    """First step, warm-up and measured window of one step callable, on one device.

    ``clock`` is the host clock (``perf_counter``; injectable for tests), ``agree`` how the ranks
    of a job agree (None in one process), ``mark(name, t)`` is told when ``warmup_start``,
    ``window_start`` and ``window_end`` happened (the telemetry sampler's ``mark``); ``timer``
    and ``sync`` replace the device's timer and synchronize (tests). The step is passed to each
    phase, so a caller may check the first step's output or read state between phases.
    """

    def __init__(self, device: torch.device | None = None, *,
                 clock: Callable[[], float] = time.perf_counter,
                 agree: Agreement | None = None,
                 mark: Callable[[str, float], None] | None = None,
                 timer: StepTimer | None = None,
                 sync: Callable[[], None] | None = None) -> None:
        device = device if device is not None else torch.device("cpu")
        self._clock = clock
        self._timer = timer if timer is not None else make_timer(device, clock)
        self._sync = sync if sync is not None else (lambda: synchronize(device))
        self._agree = agree
        self._mark = mark or _no_mark
        self.first_step_s: float | None = None
        self.warmup_times_s: tuple[float, ...] = ()
        self.step_times_s: tuple[float, ...] = ()
        self.wall_s = 0.0
        self.stop_reason: str | None = None
        #: Steps the host may queue ahead of the device in the window (set by ``run``).
        self.in_flight: int | None = None
        #: Steps between two agreed stop checks (set by ``run`` with an agreement).
        self.check_every: int | None = None

    def times(self) -> WindowTimes:
        """The raw times once ``run`` has returned."""
        if self.stop_reason is None:
            raise RuntimeError("the window has not run")
        return WindowTimes(self.first_step_s, self.warmup_times_s, self.step_times_s,
                           self.wall_s, self.stop_reason)

    # -- 1. the first step -------------------------------------------------------------------
    def first_step(self, step: Callable[[], Any]) -> Any:
        """Run and time one step alone; returns its output."""
        clock = self._clock
        t = clock()
        out = step()
        self._sync()  # note: a sync point, the first step is timed alone
        self.first_step_s = clock() - t
        return out

    # -- 2. the warm-up ----------------------------------------------------------------------
    def warm_up(self, step: Callable[[], Any], steps: int, seconds: float = 0.0
                ) -> tuple[float, ...]:
        """At least ``steps`` steps and ``seconds`` seconds (rank 0's clock, with ranks);
        returns their times, kept apart from the window's."""
        clock, timer, agree = self._clock, self._timer, self._agree
        timer.start()
        t = clock()
        self._mark("warmup_start", t)
        n = 0
        # The first step bounds the steps queued (it holds compilation: an overestimate, which
        # only makes the bound tighter); the warm-up's last step bounds the window's.
        in_flight = steps_in_flight(self.first_step_s or 0.0)
        if agree is None:
            while n < steps or clock() - t < seconds:
                step()
                timer.lap()
                timer.throttle(in_flight)
                n += 1
        else:
            # Each step holds collectives that every other rank waits on, so all ranks must run
            # the same number of them. A warm-up that each rank ended by its own clock ran one
            # step more on one rank than another now and then (VGG-16 with ps on two GPUs: the
            # ranks do unequal host work per step) and hung until the group's timeout. Past the
            # minimum count, rank 0's clock decides.
            while n < steps or not agree(int(clock() - t >= seconds)):
                step()
                timer.lap()
                timer.throttle(in_flight)
                n += 1
        self.warmup_times_s = tuple(timer.finish())  # note: a sync point, before the window
        return self.warmup_times_s

    # -- 3. the measured window --------------------------------------------------------------
    def run(self, step: Callable[[], Any], stop: StopRule | int) -> Any:
        """The measured window, until ``stop`` says so (a :class:`StopRule`) or for a fixed
        number of steps (an int); returns the last step's output."""
        warmup = self.warmup_times_s
        in_flight = self.in_flight = steps_in_flight(
            warmup[-1] if warmup else (self.first_step_s or 0.0))
        clock, timer, agree = self._clock, self._timer, self._agree
        fixed = isinstance(stop, int)
        if agree is not None and not fixed:
            self.check_every = agree(check_every(warmup))  # rank 0's cadence, on every rank
        timer.start()
        t0 = clock()
        self._mark("window_start", t0)
        if fixed:
            out, reason = self._fixed(step, stop, timer, in_flight), StopReason.STEP_CAP
        elif agree is None:
            out, reason = self._alone(step, stop, timer, in_flight, clock, t0)
        else:
            out, reason = self._ranks(step, stop, timer, in_flight, clock, t0, self.check_every)
        self.step_times_s = tuple(timer.finish())  # note: the one CPU-GPU sync point of the window
        self.wall_s = clock() - t0
        self._mark("window_end", t0 + self.wall_s)
        self.stop_reason = reason
        return out

    @staticmethod
    def _alone(step, stop: StopRule, timer: StepTimer, in_flight: int, clock, t0: float):
        """One process: the rule is asked every ``CHECK_INTERVAL_S`` of host time. The hot loop
        is ``step(); timer.lap()``, a throttle that costs a subtraction until the host is a
        second of work ahead, and a clock read: nothing in it drains the GPU."""
        max_steps = stop.max_steps
        last_check = t0
        issued, reason = 0, None
        while reason is None:
            out = step()
            timer.lap()
            timer.throttle(in_flight)  # waits only when the host is a second of work ahead
            issued += 1
            now = clock()
            if now - last_check >= CHECK_INTERVAL_S or issued >= max_steps:
                reason = decide(timer.ready(), issued, now - t0, stop)
                last_check = now
        return out, reason

    def _ranks(self, step, stop: StopRule, timer: StepTimer, in_flight: int, clock, t0: float,
               every: int):
        """Several ranks: all ranks stop at the same step, so the checks come every ``every``
        steps (agreed), rank 0 decides on its own step times and the others follow. The time cap
        can then be overrun by ``every`` steps more than in one process, plus the queue."""
        agree = self._agree
        leader = agree.leader
        max_steps = stop.max_steps
        issued, reason = 0, None
        while reason is None:
            out = step()
            timer.lap()
            timer.throttle(in_flight)  # waits only when the host is a second of work ahead
            issued += 1
            if issued >= max_steps:  # every rank knows the cap: no message needed
                reason = StopReason.STEP_CAP
            elif issued % every == 0:
                mine = decide(timer.ready(), issued, clock() - t0, stop) if leader else None
                reason = _REASONS[agree(_REASONS.index(mine))]
        return out, reason

    @staticmethod
    def _fixed(step, steps: int, timer: StepTimer, in_flight: int):
        """A fixed number of steps (the same on every rank: nothing to agree on)."""
        out = None
        for _ in range(steps):
            out = step()
            timer.lap()
            timer.throttle(in_flight)  # waits only when the host is a second of work ahead
        return out


def measure_window(step: Callable[[], Any], stop: StopRule | int, warmup_steps: int = 0,
                   warmup_seconds: float = 0.0, device: torch.device | None = None,
                   **kw: Any) -> WindowTimes:
    """First step, warm-up and window of ``step`` with nothing between the phases; ``kw`` as
    :class:`MeasuredWindow` takes them."""
    window = MeasuredWindow(device, **kw)
    window.first_step(step)
    window.warm_up(step, warmup_steps, warmup_seconds)
    window.run(step, stop)
    return window.times()
