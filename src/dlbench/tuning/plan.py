"""Tuned mode's sweep: every config followed by its tuned counterpart, with where each recipe
came from. The plain config is always measured too: tuned mode reports its factor over it."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from dlbench.config import ThroughputConfig
from dlbench.models import get_model
from dlbench.tuning.recipes import Recipe, learned_recipes, recipe_device, tuned_config
from dlbench.workloads.devices import resolve_device


def stored_recipes(db_path: str | Path, device_name: str) -> dict[tuple[str, str], Recipe]:
    """What ``dlbench tune`` runs in ``db_path`` found on this device (none if no file)."""
    if not Path(db_path).exists():
        return {}
    from dlbench.store import Store
    with Store(db_path) as store:
        runs = [r for r in reversed(store.runs()) if r.suite == "tune"]  # oldest first
        records = [rec for run in runs
                   for rec in store.results(run_id=run.run_id, kind="throughput")]
    return learned_recipes(records, device_name)


def plan(configs: Sequence[ThroughputConfig], env: Mapping[str, Any], db_path: str | Path,
         keep: Iterable[str] = ()) -> tuple[list[ThroughputConfig], list[str]]:
    """(plain and tuned configs interleaved, one note per config on its recipe)."""
    name = recipe_device(env)
    learned = stored_recipes(db_path, name)
    keep = tuple(keep)
    out: list[ThroughputConfig] = []
    notes: list[str] = []
    for cfg in configs:
        spec = get_model(cfg.model)
        device = resolve_device(cfg.device).type
        tuned, recipe, why = tuned_config(cfg, spec, device, name, learned, keep)
        out += [cfg, tuned]
        notes.append(f"{cfg.label}: {recipe.source}" + (f" ({'; '.join(why)})" if why else ""))
    return out, notes
