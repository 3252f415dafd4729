"""Tuned mode's sweep: every config followed by its tuned counterpart, with where each recipe
came from. The plain config is always measured too: tuned mode reports its factor over it."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from dlbench.models import get_model
from dlbench.records.throughput import ThroughputConfig
from dlbench.store import Store
from dlbench.tuning.recipes import Recipe, learned_recipes, recipe_device, tuned_config
from dlbench.workloads.devices import resolve_device


def stored_recipes(db_path: str | Path, device_name: str) -> dict[tuple[str, str], Recipe]:
    """What ``dlbench tune`` runs in ``db_path`` found on this device (none if no file)."""
    if not Path(db_path).exists():
        return {}
    with Store(db_path) as store:
        runs = [r for r in reversed(store.runs()) if r.suite == "tune"]  # oldest first
        records = [rec for run in runs
                   for rec in store.results(run_id=run.run_id, kind="throughput")]
    return learned_recipes(records, device_name)


# Compile modes whose autotuning takes minutes per model (ResNet-50 on an H100: more than 8).
SLOW_COMPILES = ("max-autotune", "max-autotune-no-cudagraphs")


def plan(configs: Sequence[ThroughputConfig], env: Mapping[str, Any], db_path: str | Path,
         keep: Iterable[str] = (), quick_compile: bool = False
         ) -> tuple[list[ThroughputConfig], list[str]]:
    """(plain and tuned configs interleaved, one note per config on its recipe).

    ``quick_compile`` (a suite): a recipe's max-autotune compile becomes the default compile,
    so one model's autotuning does not hold up the whole suite; ``throughput --tuned`` keeps it.
    """
    name = recipe_device(env)
    learned = stored_recipes(db_path, name)
    keep = tuple(keep)
    out: list[ThroughputConfig] = []
    notes: list[str] = []
    for cfg in configs:
        spec = get_model(cfg.model)
        device = resolve_device(cfg.device).type
        tuned, recipe, why = tuned_config(cfg, spec, device, name, learned, keep)
        if quick_compile and tuned.compile in SLOW_COMPILES and cfg.compile not in SLOW_COMPILES:
            why.append(f"compile {tuned.compile} left out in a suite, it compiles for minutes: "
                       f"compile default; 'dlbench throughput -m {cfg.model} --tuned' runs it")
            tuned = replace(tuned, compile="default")
        out += [cfg, tuned]
        notes.append(f"{cfg.label}: {recipe.source}" + (f" ({'; '.join(why)})" if why else ""))
    return out, notes
