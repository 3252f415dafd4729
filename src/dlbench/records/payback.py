"""How long a tuned setup takes to earn back its compile and capture time: a figure read from
two stored records.

Setup is what happens before the measured steps: building the model plus the first step (which
holds torch.compile's compilation, cuDNN's autotuning and a CUDA graph's capture). The tuned
config pays back once the time it saves per sample has added up to its extra setup time.

Tuned mode's tables compare a tuned config with plain eager, generation's a path with eager
(generate records as they are: samples are output tokens, a step is a request); the report and
tuned mode both read it here.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from dlbench.records.throughput import ThroughputRecord


@dataclass(frozen=True)
class Payback:
    extra_setup_s: float          # tuned setup minus plain setup (may be negative)
    samples: float                # samples after which the tuned run is ahead; inf: never
    steps: float                  # the same in tuned steps
    seconds: float                # the same in seconds of tuned running

    @property
    def never(self) -> bool:
        return math.isinf(self.samples)


def setup_s(record: ThroughputRecord) -> float:
    return (record.build_s or 0.0) + (record.first_step_s or 0.0)


def payback(plain: ThroughputRecord, tuned: ThroughputRecord) -> Payback | None:
    """None when either has no figure; ``never`` when tuned is not faster."""
    sp, st = plain.summary(), tuned.summary()
    if sp is None or st is None:
        return None
    extra = setup_s(tuned) - setup_s(plain)
    saved_per_sample = 1.0 / sp.throughput - 1.0 / st.throughput
    if saved_per_sample <= 0:  # not faster: whatever its setup, it never gets ahead per sample
        return Payback(extra, math.inf, math.inf, math.inf)
    if extra <= 0:
        return Payback(extra, 0.0, 0.0, 0.0)
    samples = extra / saved_per_sample
    return Payback(extra, samples, samples / tuned.samples_per_step, samples / st.throughput)
