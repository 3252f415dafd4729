"""MLPerf Training's olympic mean: a set of runs' times scored as the mean after dropping the
fastest and the slowest run.

MLPerf Training (rules, "Benchmark results"; ``mlperf_logging.result_summarizer``): a result is
the mean of the runs' times to train after dropping the fastest and the slowest run. A run that
did not reach the target (it diverged or hit its cap) is dropped as if it were the slowest: with
one such run the remaining runs lose only their fastest; with two or more the result is invalid.
Pure functions over plain numbers, so they are tested on made-up runs; training scores its runs
with them and the report's tables read them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

#: Failed runs a result may absorb (the summarizer's ``max_dropped_scores`` for all but unet3d).
MAX_FAILURES = 1
#: Fewest runs for an olympic mean: one to drop at each end and one to keep.
MIN_RUNS = 3


@dataclass(frozen=True)
class OlympicScore:
    """The score of one setup's runs.

    ``mean_s`` is None when there is no valid score; ``reason`` then says why. ``kept`` are the
    times averaged, ``dropped`` the times left out (a failure appears as None).
    """

    mean_s: float | None
    runs: int
    failures: int
    kept: tuple[float, ...]
    dropped: tuple[float | None, ...]
    reason: str | None = None

    @property
    def valid(self) -> bool:
        return self.mean_s is not None


def olympic_mean(times: Sequence[float | None], max_failures: int = MAX_FAILURES) -> OlympicScore:
    """Score runs whose times to train are ``times`` (None for a run that failed).

    >>> olympic_mean([10.0, 12.0, 11.0, 30.0, 9.0]).mean_s   # drop 9 and 30
    11.0
    >>> olympic_mean([10.0, 12.0, 11.0, None, 9.0]).mean_s   # the failure is the slowest
    11.0
    """
    ok = sorted(t for t in times if t is not None)
    failures = len(times) - len(ok)
    if any(not math.isfinite(t) or t < 0 for t in ok):
        raise ValueError(f"times to train must be finite and >= 0, got {ok}")
    dropped_failures: tuple[float | None, ...] = (None,) * failures
    if failures > max_failures:
        return OlympicScore(None, len(times), failures, (), tuple(ok) + dropped_failures,
                            f"{failures} runs failed to reach the target: more than "
                            f"{max_failures}, so the result is invalid (MLPerf)")
    if len(times) < MIN_RUNS:
        return OlympicScore(None, len(times), failures, (), tuple(ok) + dropped_failures,
                            f"an olympic mean needs at least {MIN_RUNS} runs, got {len(times)}")
    # Drop the fastest; drop the slowest unless a failure already took the slowest place.
    kept = ok[1:len(ok) - (1 - failures)]
    dropped = tuple(ok[:1]) + tuple(ok[len(ok) - (1 - failures):]) + dropped_failures
    if not kept:
        return OlympicScore(None, len(times), failures, (), dropped, "no run left after dropping")
    return OlympicScore(math.fsum(kept) / len(kept), len(times), failures, tuple(kept), dropped)
