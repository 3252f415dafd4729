"""The sampler: NVML and host readings on a thread of their own, timestamped on the host clock.

The measured loop never waits on it. The loop's side is :meth:`Sampler.mark`, which appends a
``(name, time)`` pair to a list (atomic under the GIL: no lock, no wait); every NVML and psutil
call happens on the sampler thread. NVML calls are ctypes calls, which release the GIL, so even
a slow driver only delays the sampler. :meth:`Sampler.start` (NVML initialisation, device
discovery) and :meth:`Sampler.stop` (one last sample, then a join with a time limit) run outside
any measured window.

Samples carry ``time.perf_counter`` times by default, the clock dlbench reads around its
windows, so they line up with the marks ``warmup_start``, ``window_start`` and ``window_end``.
"""

from __future__ import annotations

import math
import threading
import time
import warnings
from typing import Any, Callable, Sequence

from dlbench.telemetry.sources import (
    GPU_FIELDS,
    HOST_FIELDS,
    HostSource,
    NvmlSource,
    SourceUnavailable,
)

DEFAULT_INTERVAL_S = 0.1
SLOW_INTERVAL_S = 1.0
JOIN_TIMEOUT_S = 10.0


class TelemetryWarning(UserWarning):
    """GPU telemetry is unavailable here; results carry host telemetry only."""


_nvml_warned = False


def warn_once(message: str) -> None:
    """Say once per process that NVML is unavailable: a sweep of fifty results needs one line."""
    global _nvml_warned
    if _nvml_warned:
        return
    _nvml_warned = True
    warnings.warn(f"GPU telemetry is off: {message}", TelemetryWarning, stacklevel=3)


class Sampler:
    """Samples the GPUs named by ``gpus`` (``"all"``, a list of ``{"index", "uuid"}`` dicts, or
    None for none) and, with ``host``, this process and machine, every ``interval_s``.

    Use ``start()`` ... ``mark(name)`` ... ``stop()``, or as a context manager; ``stop()``
    returns the raw telemetry dict (:func:`dlbench.telemetry.summary.finish` adds a summary).
    """

    def __init__(self, interval_s: float = DEFAULT_INTERVAL_S,
                 gpus: Sequence[dict[str, Any]] | str | None = "all", host: bool = True,
                 clock: Callable[[], float] = time.perf_counter,
                 slow_interval_s: float = SLOW_INTERVAL_S,
                 join_timeout_s: float = JOIN_TIMEOUT_S) -> None:
        if not interval_s > 0:
            raise ValueError(f"telemetry interval must be > 0 s, got {interval_s}")
        self.interval_s = interval_s
        self.slow_interval_s = slow_interval_s
        self.join_timeout_s = join_timeout_s
        self._want_gpus = gpus
        self._want_host = host
        self._clock = clock
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._marks: list[tuple[str, float]] = []
        self.nvml: NvmlSource | None = None
        self.host: HostSource | None = None
        self.nvml_error: str | None = None
        self.host_error: str | None = None
        self._gpu_rows: list[list[tuple[Any, ...]]] = []
        self._host_rows: list[tuple[Any, ...]] = []
        self._errors = 0
        self._last_error: str | None = None
        self._t0 = 0.0
        self._result: dict[str, Any] | None = None

    # -- the measuring side: cheap ------------------------------------------------------------
    def mark(self, name: str, t: float | None = None) -> None:
        """Note that ``name`` happened at ``t`` (default: now). Never waits."""
        self._marks.append((name, self._clock() if t is None else t))

    @property
    def has_gpus(self) -> bool:
        return self.nvml is not None

    # -- lifecycle ----------------------------------------------------------------------------
    def start(self) -> "Sampler":
        self._t0 = self._clock()
        if self._want_gpus:
            try:
                self.nvml = NvmlSource.open(self._want_gpus)
            except SourceUnavailable as exc:
                self.nvml_error = str(exc)
                warn_once(str(exc))
        if self._want_host:
            try:
                self.host = HostSource()
            except SourceUnavailable as exc:
                self.host_error = str(exc)
        self._gpu_rows = [[] for _ in (self.nvml.gpus if self.nvml else [])]
        self._thread = threading.Thread(target=self._run, name="dlbench-telemetry", daemon=True)
        self._thread.start()
        return self

    def idle(self, seconds: float, settle_max_s: float = 6.0, tolerance: float = 0.05) -> None:
        """Sample an idle baseline of ``seconds`` once the GPUs' power has settled, between the
        marks ``idle_start`` and ``idle_end``. Call it before the work starts; a no-op without
        GPUs to sample.

        Why wait: NVML's power reading on recent GPUs is an average over about a second, and a
        card that has just finished work draws more for a few seconds while its clocks come
        down. A baseline taken at once between two benchmarks read up to 497 W on an H200 whose
        settled baselines read 77-139 W (docs/telemetry.md). So the baseline is the last ``seconds`` of a wait that ends when
        their mean power is within ``tolerance`` of the ``seconds`` before it, or after
        ``settle_max_s`` (then the mark ``idle_unsettled`` says the baseline is still high).
        """
        if self.nvml is None or seconds <= 0:
            return
        t_begin = self._clock()
        self.mark("idle_wait")
        while True:
            time.sleep(seconds)
            now = self._clock()
            if now - t_begin >= 2 * seconds:
                cur = self._power_between(now - seconds, now)
                prev = self._power_between(now - 2 * seconds, now - seconds)
                if cur is not None and prev is not None and abs(cur - prev) <= tolerance * prev:
                    break
            if now - t_begin >= settle_max_s:
                self.mark("idle_unsettled", now)
                break
        self.mark("idle_start", now - seconds)
        self.mark("idle_end", now)

    def _power_between(self, t0: float, t1: float) -> float | None:
        """Summed mean power of the sampled GPUs over [t0, t1] (None if a GPU has no reading)."""
        total = 0.0
        for rows in self._gpu_rows:
            vals = [r[1] for r in list(rows) if t0 <= r[0] <= t1 and r[1] is not None]
            if not vals:
                return None
            total += sum(vals) / len(vals)
        return total if self._gpu_rows else None

    def stop(self) -> dict[str, Any]:
        """Take one last sample, stop the thread, and return the raw telemetry."""
        if self._result is not None:
            return self._result
        clean = True
        if self._thread is not None:
            self._stop.set()
            self._thread.join(self.join_timeout_s)
            clean = not self._thread.is_alive()
        if self.nvml is not None and clean:  # never shut NVML down under a call still running
            self.nvml.close()
        self._result = self._raw(clean)
        return self._result

    def __enter__(self) -> "Sampler":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    # -- the sampler thread -------------------------------------------------------------------
    def _run(self) -> None:
        next_t = self._clock()
        last_slow = -math.inf
        while True:
            stopping = self._stop.wait(max(0.0, next_t - self._clock()))
            now = self._clock()
            slow = now - last_slow >= self.slow_interval_s
            self._sample(slow)
            if slow:
                last_slow = now
            if stopping:
                return  # that was the sample after the last mark
            next_t += self.interval_s
            late = self._clock() - next_t
            if late > 0:  # a slow tick: skip the ticks already missed rather than bunch up
                next_t += math.ceil(late / self.interval_s) * self.interval_s

    def _sample(self, slow: bool) -> None:
        try:
            if self.nvml is not None:
                for rows, gpu in zip(self._gpu_rows, self.nvml.gpus):
                    t = self._clock()
                    rows.append((t, *self.nvml.read(gpu, slow)))
            if self.host is not None:
                t = self._clock()
                self._host_rows.append((t, *self.host.read()))
        except Exception as exc:  # telemetry must never take a measurement down
            self._errors += 1
            self._last_error = f"{type(exc).__name__}: {exc}"

    # -- the result ---------------------------------------------------------------------------
    def _raw(self, clean: bool) -> dict[str, Any]:
        t0 = self._t0

        def columns(rows: list[tuple[Any, ...]], names: Sequence[str]) -> dict[str, list[Any]]:
            rows = list(rows)  # a snapshot: a stuck thread may still append
            out: dict[str, list[Any]] = {"t_s": [round(r[0] - t0, 6) for r in rows]}
            for i, name in enumerate(names, start=1):
                out[name] = [r[i] for r in rows]
            return out

        gpus = []
        if self.nvml is not None:
            for meta, rows, dead in zip(self.nvml.describe(), self._gpu_rows,
                                        self.nvml.unsupported()):
                gpus.append({**meta, "unsupported": dead, "series": columns(rows, GPU_FIELDS)})
        marks: dict[str, float] = {}
        for name, t in list(self._marks):
            marks[name] = round(t - t0, 6)
        return {
            "clock": "perf_counter",
            "t0": t0,
            "interval_s": self.interval_s,
            "marks": marks,
            "gpus": gpus,
            "host": {"series": columns(self._host_rows, HOST_FIELDS)} if self.host else None,
            "nvml_error": self.nvml_error,
            "host_error": self.host_error,
            "sample_errors": self._errors,
            "last_sample_error": self._last_error,
            "stopped_cleanly": clean,
        }


class NullSampler:
    """The sampler when telemetry is switched off: every call is a no-op, ``stop()`` is None."""

    has_gpus = False

    def mark(self, name: str, t: float | None = None) -> None:
        pass

    def idle(self, seconds: float, settle_max_s: float = 6.0, tolerance: float = 0.05) -> None:
        pass

    def stop(self) -> None:
        return None

    def __enter__(self) -> "NullSampler":
        return self

    def __exit__(self, *exc: Any) -> None:
        pass
