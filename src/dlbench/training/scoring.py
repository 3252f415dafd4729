"""MLPerf Training's scoring of a set of runs: the olympic mean and what a failed run counts as.

The olympic mean and its failure rules are statistics over plain numbers
(:mod:`dlbench.measure.olympic`); here they score the ``train`` records of each setup.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from dlbench.measure.olympic import OlympicScore, olympic_mean


@dataclass(frozen=True)
class SetupConvergence:
    """How the seeds of one setup (global batch x GPU count) fared: the question a recipe must
    answer (MLPerf: at most one failed run in five, else the result is invalid)."""

    gpus: int
    batch_size: int                       # per GPU
    runs: int
    converged: int
    epochs: tuple[int | None, ...]        # per seed, None where it failed
    score: OlympicScore

    @property
    def global_batch(self) -> int:
        return self.gpus * self.batch_size


def convergence(records: Sequence) -> list[SetupConvergence]:
    """Per setup of ``train`` records (in their first-seen order): seeds converged, epochs per
    seed and the olympic score."""
    setups: dict[tuple[int, int], list] = {}
    for r in records:
        setups.setdefault((r.config.gpus, r.config.batch_size), []).append(r)
    out = []
    for (gpus, batch), rs in setups.items():
        times = [r.time_to_train_s if r.ok and r.converged else None for r in rs]
        out.append(SetupConvergence(
            gpus, batch, len(rs), sum(t is not None for t in times),
            tuple(r.epochs_to_converge if t is not None else None for r, t in zip(rs, times)),
            olympic_mean(times)))
    return out
