"""The benchmarks of ``dlbench train`` and their hyperparameters, defined per global batch.

MLPerf Training fixes, for each benchmark, the target accuracy and the hyperparameters a closed
submission may use, as functions of the global batch; the log states them and the checker holds
the log to them. dlbench does the same: ``rules/benchmarks.json`` (package data, plain JSON, read
by any framework's training loop) holds each benchmark's target, epoch cap and hyperparameters;
:func:`hyperparameters` resolves them for one global batch, and :func:`lr_at` is the schedule.

The recipe (see ``docs/training.md``): SGD with Nesterov momentum, a peak learning rate linear in
the global batch (Goyal et al. 2017, "Accurate, Large Minibatch SGD"), a linear warm-up from zero
over the first epochs (the same paper's gradual warm-up), then a cosine decay to zero over a fixed
number of epochs (Loshchilov and Hutter 2017), longer for larger global batches, which take
fewer steps per epoch. A constant rate let this CNN's accuracy jump by points between epochs, so
whether a seed reached the target within the cap was chance; a decaying one settles.

Pure Python, no torch: the rules checker and any framework's loop use it alike.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any, Mapping

#: The name a benchmark's log declares: ``dlbench_<dataset>_<model>``.
PREFIX = "dlbench_"

#: MLPerf log keys of the hyperparameters, in the order a log states them.
HP_KEYS = ("opt_name", "opt_base_learning_rate", "opt_momentum", "opt_nesterov",
           "opt_weight_decay", "opt_learning_rate_schedule", "opt_learning_rate_warmup_epochs",
           "opt_learning_rate_decay_epochs", "precision")


class RulesError(ValueError):
    """A rules file that cannot be used (a malformed value spec)."""


def rules_file() -> Path:
    return Path(str(resources.files("dlbench.training") / "rules" / "benchmarks.json"))


@lru_cache(maxsize=4)
def load_rules(path: str | None = None) -> dict[str, Any]:
    return json.loads(Path(path or rules_file()).read_text())


def benchmark_name(dataset: str, model: str) -> str:
    return f"{PREFIX}{dataset}_{model}"


@dataclass(frozen=True)
class Benchmark:
    """One benchmark of the rules: what a run must reach, within how many epochs, and how."""

    name: str
    dataset: str
    model: str
    target_accuracy: float
    max_epochs: int
    hyperparameters: Mapping[str, Any]   # log key -> value spec
    source: str = ""


def benchmarks(path: str | None = None) -> dict[str, Benchmark]:
    out = {}
    for name, b in load_rules(path)["benchmarks"].items():
        out[name] = Benchmark(name, b["dataset"], b["model"], float(b["target_accuracy"]),
                              int(b["max_epochs"]), b["hyperparameters"],
                              b.get("recipe_source", ""))
    return out


def find(dataset: str, model: str, path: str | None = None) -> Benchmark | None:
    """The benchmark of a dataset and model, or None where the rules define none."""
    return benchmarks(path).get(benchmark_name(dataset, model))


def resolve(spec: Any, global_batch: int) -> Any:
    """The value a spec gives at a global batch; a ``range`` or ``one_of`` spec gives None
    (any value in it is allowed, nothing is implied)."""
    if not isinstance(spec, dict):
        return spec
    (kind, arg), = spec.items()
    if kind == "linear_in_global_batch":
        return arg["value"] * global_batch / arg["per"]
    if kind == "sqrt_in_global_batch":
        return arg["value"] * math.sqrt(global_batch / arg["per"])
    if kind == "by_global_batch":
        table = sorted((int(b), v) for b, v in arg.items())
        below = [v for b, v in table if b <= global_batch]
        return below[-1] if below else table[0][1]
    if kind in ("range", "one_of"):
        return None
    raise RulesError(f"unknown value spec {kind!r} in the rules file")


def allows(spec: Any, value: Any, global_batch: int, rel: float = 1e-6) -> bool:
    """Whether a logged value meets a spec at a global batch (numbers to a relative 1e-6,
    since a logged float went through a decimal rendering)."""
    if isinstance(spec, dict) and "range" in spec:
        lo, hi = spec["range"]
        return _number(value) and lo <= value <= hi
    if isinstance(spec, dict) and "one_of" in spec:
        return value in spec["one_of"]
    want = resolve(spec, global_batch)
    if isinstance(want, (bool, str)) or isinstance(value, bool):
        return type(value) is type(want) and value == want   # True is not 1
    return _number(value) and math.isclose(value, want, rel_tol=rel, abs_tol=1e-12)


def _number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


@dataclass(frozen=True)
class Hyperparameters:
    """The optimizer and schedule of one run (what its log states).

    ``decay_epochs`` is where the cosine reaches zero, counted from the start (warm-up included);
    0 keeps the peak rate after the warm-up (the schedule of records made before the rules).
    """

    optimizer: str
    peak_lr: float
    momentum: float
    nesterov: bool
    weight_decay: float
    warmup_epochs: float
    decay_epochs: float
    schedule: str = "cosine"

    def log_items(self, precision: str) -> list[tuple[str, Any]]:
        """(MLPerf log key, value) of each hyperparameter, in :data:`HP_KEYS` order."""
        return list(zip(HP_KEYS, (self.optimizer, self.peak_lr, self.momentum, self.nesterov,
                                  self.weight_decay, self.schedule, self.warmup_epochs,
                                  self.decay_epochs, precision)))

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def hyperparameters(dataset: str, model: str, optimizer: str, global_batch: int,
                    max_epochs: int, *, lr: float | None = None,
                    warmup_epochs: float | None = None, decay_epochs: float | None = None,
                    weight_decay: float | None = None, path: str | None = None
                    ) -> Hyperparameters:
    """The hyperparameters of a run: the benchmark's rules at this global batch (the defaults
    where the rules define no such benchmark, or another optimizer), each overridden by the
    argument given. An override makes the log differ from the rules, which then fail it."""
    bench = find(dataset, model, path)
    specs: Mapping[str, Any]
    if bench is not None and bench.hyperparameters.get("opt_name") == optimizer:
        specs = bench.hyperparameters
    else:
        specs = load_rules(path)["defaults"][optimizer]
    at = {k: resolve(s, global_batch) for k, s in specs.items()}
    decay = at.get("opt_learning_rate_decay_epochs")
    hp = Hyperparameters(
        optimizer=optimizer,
        peak_lr=float(lr if lr is not None else at["opt_base_learning_rate"]),
        momentum=float(at["opt_momentum"]), nesterov=bool(at["opt_nesterov"]),
        weight_decay=float(weight_decay if weight_decay is not None
                           else at["opt_weight_decay"]),
        warmup_epochs=float(warmup_epochs if warmup_epochs is not None
                            else at["opt_learning_rate_warmup_epochs"]),
        decay_epochs=float(decay_epochs if decay_epochs is not None
                           else decay if decay is not None else max_epochs),
        schedule=str(at.get("opt_learning_rate_schedule", "cosine")))
    if hp.decay_epochs and hp.decay_epochs <= hp.warmup_epochs:
        raise RulesError(f"the decay ends at epoch {hp.decay_epochs:g}, not after the warm-up "
                         f"({hp.warmup_epochs:g} epochs): raise --decay-epochs or lower "
                         "--warmup-epochs")
    return hp


def lr_at(hp: Hyperparameters, step: int, steps_per_epoch: int) -> float:
    """The learning rate of step ``step`` (0-based): linear warm-up to the peak (the first step
    at peak / warm-up steps), then a cosine to zero at ``decay_epochs`` (zero after it), or the
    peak kept when ``decay_epochs`` is 0."""
    warm = hp.warmup_epochs * steps_per_epoch
    if step < warm:
        return hp.peak_lr * (step + 1) / warm
    if not hp.decay_epochs:
        return hp.peak_lr
    end = hp.decay_epochs * steps_per_epoch
    if step >= end:
        return 0.0
    frac = (step - warm) / (end - warm)
    return hp.peak_lr * 0.5 * (1.0 + math.cos(math.pi * frac))
