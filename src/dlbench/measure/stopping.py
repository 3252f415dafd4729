"""When to stop measuring: adaptive, like pyperf's "enough runs for the interval", with caps.

Measure until the batch-means interval of the mean step time is narrower than a target (1% by
default) AND a minimum of steps and seconds has passed; stop anyway at a time or step cap. A result
stopped by a cap before reaching the target is flagged noisy, never dropped.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Sequence

from dlbench.config import ConfigError
from dlbench.measure.stats import mean, mean_interval, mean_interval_batch_means


class StopRuleError(ConfigError):
    """A stopping rule that cannot work; the message names the field to change."""


class StopReason:
    CONVERGED = "converged"     # the interval reached the target
    TIME_CAP = "time_cap"       # max_seconds passed first (after min_steps)
    STEP_CAP = "step_cap"       # max_steps reached first


@dataclass(frozen=True)
class StopRule:
    """How long one measured window lasts.

    Attributes:
        min_steps: never stop before this many measured steps, not even at the time cap.
        min_seconds: never stop before this much wall time in the window.
        max_seconds: stop at this wall time even if the interval is still wide (flagged noisy),
            once ``min_steps`` steps are measured.
        max_steps: stop at this many steps even if the interval is still wide.
        target_rel_ci: stop once the interval's half-width over the mean step time is below this.
        confidence: confidence level of the interval.
    """

    min_steps: int = 20
    min_seconds: float = 2.0
    max_seconds: float = 15.0
    max_steps: int = 100_000
    target_rel_ci: float = 0.01
    confidence: float = 0.95

    def __post_init__(self) -> None:
        if self.min_steps < 2:
            raise StopRuleError(f"min_steps must be at least 2 (an interval needs two), got "
                                f"{self.min_steps}", "min_steps")
        if self.max_steps < self.min_steps:
            raise StopRuleError(f"max_steps ({self.max_steps}) must be >= min_steps "
                                f"({self.min_steps})", "max_steps", also=("min_steps",))
        if self.min_seconds < 0:
            raise StopRuleError(f"min_seconds must be >= 0, got {self.min_seconds}", "min_seconds")
        if self.max_seconds <= 0:
            raise StopRuleError(f"max_seconds must be > 0, got {self.max_seconds}", "max_seconds")
        if self.max_seconds < self.min_seconds:
            raise StopRuleError(f"max_seconds ({self.max_seconds}) must be >= min_seconds "
                                f"({self.min_seconds})", "max_seconds", also=("min_seconds",))
        if not 0 < self.target_rel_ci < 1:
            raise StopRuleError(f"target_rel_ci must be a fraction in (0, 1), got "
                                f"{self.target_rel_ci}", "target_rel_ci")
        if not 0.5 <= self.confidence < 1:
            raise StopRuleError(f"confidence must be in [0.5, 1), got {self.confidence}",
                                "confidence")

    def to_dict(self) -> dict:
        return asdict(self)


def decide(step_times: Sequence[float], issued_steps: int, elapsed_s: float,
           rule: StopRule) -> str | None:
    """The reason to stop now, or None to go on.

    ``step_times`` are the steps whose times are known so far (on a GPU they lag the steps issued
    by the CPU); ``issued_steps`` counts the steps launched; ``elapsed_s`` is wall time since the
    window began. Pure: tests drive it with a fake clock.
    """
    if issued_steps >= rule.max_steps:
        return StopReason.STEP_CAP
    # The minimum wins over the time cap (as pytest-benchmark's min_rounds wins over its
    # max_time): a figure from fewer steps than the user asked for is not one, and its interval
    # is too wide to mean anything. A window of slow steps runs past --max-time to reach it.
    if len(step_times) < rule.min_steps:
        return None
    if elapsed_s >= rule.min_seconds:
        m = mean(step_times)
        # The interval that accounts for correlation costs a millisecond or two on long
        # windows, and rank 0 asks about every 0.1 s between steps; the plain batch-means
        # width (20 block means, microseconds) is rarely wider, so while it is still above the
        # target the window goes on without the full estimate. Only the full interval ends it.
        if mean_interval_batch_means(step_times, rule.confidence) / m <= rule.target_rel_ci \
                and mean_interval(step_times, rule.confidence) / m <= rule.target_rel_ci:
            return StopReason.CONVERGED
    if elapsed_s >= rule.max_seconds:
        return StopReason.TIME_CAP
    return None
