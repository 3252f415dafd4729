"""The one timer: CUDA events on a GPU, ``perf_counter`` on the CPU.

On a GPU an event is recorded after every step and read only when the GPU has passed it
(``Event.query`` does not block), so the measured loop never synchronises: a per-step
``torch.cuda.synchronize()`` would drain the launch queue and change the figure being measured.
Step i lasts from boundary event i to boundary event i+1, so the steps tile the window exactly and
their sum is the window's time.
"""

from __future__ import annotations

import time
from typing import Callable, Protocol

import torch


class StepTimer(Protocol):
    def start(self) -> None: ...
    def lap(self) -> None: ...
    def ready(self) -> list[float]: ...
    def throttle(self, max_in_flight: int) -> None: ...
    def finish(self) -> list[float]: ...


class CpuTimer:
    """Host clock around synchronous work; ``clock`` is injectable for tests."""

    def __init__(self, clock: Callable[[], float] = time.perf_counter) -> None:
        self._clock = clock
        self._marks: list[float] = []

    def start(self) -> None:
        self._marks = [self._clock()]

    def lap(self) -> None:
        self._marks.append(self._clock())

    def ready(self) -> list[float]:
        m = self._marks
        return [b - a for a, b in zip(m, m[1:])]

    def throttle(self, max_in_flight: int) -> None:
        """Nothing to wait for: host work is done when ``lap`` returns."""

    def finish(self) -> list[float]:
        return self.ready()


class CudaEventTimer:
    """Boundary events on the current stream, read lazily, never synchronising before ``finish``."""

    def __init__(self, device: torch.device) -> None:
        self._device = device
        self._events: list[torch.cuda.Event] = []
        self._times: list[float] = []

    def _record(self) -> None:
        ev = torch.cuda.Event(enable_timing=True)
        ev.record()
        self._events.append(ev)

    def start(self) -> None:
        self._events, self._times = [], []
        self._record()

    def lap(self) -> None:
        self._record()

    def ready(self) -> list[float]:
        """Times of the steps the GPU has finished; reads each event pair once."""
        ev = self._events
        i = len(self._times)
        while i + 1 < len(ev) and ev[i + 1].query():
            self._times.append(ev[i].elapsed_time(ev[i + 1]) / 1e3)
            i += 1
        return self._times

    def throttle(self, max_in_flight: int) -> None:
        """Let at most ``max_in_flight`` timed steps be unfinished: wait for an older boundary
        event while the newer steps stay queued, so the GPU never runs dry. Without a bound the
        host queues steps as far as the launch queue goes, and with minute-long steps (a model
        at its memory boundary) the window's end then waits many minutes past ``--max-time``."""
        if self._unread() <= max_in_flight:
            return  # nothing queried: the common case costs a subtraction
        self.ready()
        if self._unread() > max_in_flight:
            self._events[-1 - max_in_flight].synchronize()

    def _unread(self) -> int:
        """Steps lapped whose time is not read yet (finished or not)."""
        return len(self._events) - 1 - len(self._times)

    def finish(self) -> list[float]:
        if self._events:
            self._events[-1].synchronize()  # the only wait: once, after the window
        return self.ready()


def make_timer(device: torch.device, clock: Callable[[], float] = time.perf_counter) -> StepTimer:
    """CUDA events on a GPU; on the CPU, ``clock`` (injectable, so tests can drive it)."""
    return CudaEventTimer(device) if device.type == "cuda" else CpuTimer(clock)


def synchronize(device: torch.device) -> None:
    """Wait for queued device work (a no-op on the CPU, where work is synchronous)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


class TokenTimer:
    """Marks inside a request: ``begin()`` before it, ``mark()`` as each token is ready.

    The same one timer, finer: on a GPU a CUDA event per mark, on the CPU the host clock (the
    work is done when the call returns). Nothing is read until :meth:`read`, after the window's
    one synchronize, so marking a token costs an event record and never drains the GPU.
    """

    def __init__(self, device: torch.device, clock: Callable[[], float] = time.perf_counter
                 ) -> None:
        self._cuda = device.type == "cuda"
        self._clock = clock
        self._requests: list[list] = []

    def _now(self):
        if self._cuda:
            ev = torch.cuda.Event(enable_timing=True)
            ev.record()
            return ev
        return self._clock()

    def begin(self) -> None:
        self._requests.append([self._now()])

    def mark(self) -> None:
        self._requests[-1].append(self._now())

    def clear(self) -> None:
        """Forget the requests marked so far (the first request's and the warm-up's)."""
        self._requests = []

    def read(self) -> list[list[float]]:
        """Per request, the seconds between its consecutive marks: ``[first token, second
        token - first, ...]``. Waits for the last mark (the window has already waited)."""
        if self._cuda:
            if self._requests and self._requests[-1]:
                self._requests[-1][-1].synchronize()
            return [[a.elapsed_time(b) / 1e3 for a, b in zip(r, r[1:])] for r in self._requests]
        return [[b - a for a, b in zip(r, r[1:])] for r in self._requests]
