"""The figure of a ``--repeat`` group: the fresh processes (or torchrun jobs) that measured one
config, as one figure with its interval across them. Shared by the tables of every kind that
groups its records so (throughput, scaling, the strategy table)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Sequence

from dlbench.measure.stats import across_processes
from dlbench.report.table import fmt_pct

#: The across-process cell of a figure measured in one process.
ONE_PROCESS = "1 process"


@dataclass(frozen=True)
class GroupFigure:
    """The figure of a ``--repeat`` group: the mean of its ok processes' figures (units per
    second), the half-width of the t-interval across them (``inf`` for fewer than two), and
    how many processes ran and ended ok."""

    mean: float
    halfwidth: float
    ok: int
    ran: int

    @property
    def rel_halfwidth(self) -> float:
        return self.halfwidth / self.mean if self.mean else math.inf

    @property
    def cell(self) -> str:
        """``±1.20% (3)``, ``±1.20% (2 of 3 ok)``, ``1 process (2 of 3 failed)``."""
        if self.ok < 2:
            return ONE_PROCESS + (f" ({self.ran - self.ok} of {self.ran} failed)"
                                  if self.ran > self.ok else "")
        count = str(self.ok) if self.ok == self.ran else f"{self.ok} of {self.ran} ok"
        return f"±{fmt_pct(self.rel_halfwidth)} ({count})"


def group_figure(group: Sequence[Any], confidence: float = 0.95) -> GroupFigure | None:
    """The across-process figure of a group's records (units per second); None when no process
    ended ok."""
    figs = [r.summary().throughput * r.units_per_sample for r in group if r.summary()]
    if not figs:
        return None
    m, h = across_processes(figs, confidence)
    return GroupFigure(m, h, len(figs), len(group))
