"""What ``--tuned`` runs: the plain config with the levers that won for its model and device.

Where they come from, first match wins:
1. a ``dlbench tune`` search of the same model and mode stored in ``--db`` on the same device
   (this machine's own measurement), unless a ``MEASURED`` recipe names that search's run in
   ``builds_on``: then it is the later word (levers measured on top of that search);
2. ``MEASURED``: the committed recipes of ``recipes.json``, one per GPU kind, model and mode,
   each naming the records that measured it and the store they are in;
3. the generic recipe: the cheap levers that apply on the device and model (a padded
   vocabulary, channels_last, fused optimizer kernels, whole-step CUDA graph). torch.compile
   costs from half a minute to minutes of setup per model and loses for some, so it enters a recipe only where a
   search measured it winning; batch and 16-bit type likewise.
A change the config or device cannot take (a CUDA graph of fp16 training with unfused optimizer
kernels, compile on the CPU) is dropped with a note, and the fields the user set explicitly are
never changed.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, replace
from importlib import resources
from typing import Any, Iterable, Mapping

from dlbench import env as envmod
from dlbench.config import ConfigError
from dlbench.models.base import ModelSpec
from dlbench.records.throughput import ThroughputConfig
from dlbench.tuning.levers import LEVERS, NO_COMPILE_ON_CPU, NOT_IMAGE, NOT_LANGUAGE
from dlbench.tuning.search import replay, winner

# The config fields a recipe may set.
TUNED_FIELDS = ("pad_vocab", "channels_last", "optimizer_impl", "attention", "compile",
                "compile_loss", "cuda_graph", "precision", "batch_size")
GENERIC_LEVERS = ("pad-vocab", "channels_last", "fused-optimizer", "cuda-graph")


@dataclass(frozen=True)
class Recipe:
    changes: Mapping[str, Any]
    source: str
    run_id: str | None = None        # the dlbench tune run a learned recipe comes from
    builds_on: tuple[str, ...] = ()  # tune runs a measured recipe goes further than
    records: tuple[str, ...] = ()    # result ids that measured a committed recipe
    runs: tuple[str, ...] = ()       # the runs those results belong to
    store: str | None = None         # the store (repository path) those results are in
    note: str = ""


# The committed recipes: data, one entry per (GPU, model, mode), each naming the records that
# measured it and the store they live in (``recipes.json`` beside this module).
RECIPES_FILE = "recipes.json"
_ID = re.compile(r"^[0-9a-f]{12}$")
_REQUIRED = ("model", "mode", "device", "settings", "store", "source_runs", "source_records",
             "note")


class RecipeError(ValueError):
    """A committed recipe that does not validate; the message names it and the field."""


def load_measured(text: str | None = None) -> dict[tuple[str, str, str], Recipe]:
    """The committed recipes, keyed by (device name as ``recipe_device`` gives it, model, mode).

    ``text``: the JSON to read instead of the packaged ``recipes.json`` (tests)."""
    if text is None:
        text = resources.files("dlbench.tuning").joinpath(RECIPES_FILE).read_text("utf-8")
    data = json.loads(text)
    out: dict[tuple[str, str, str], Recipe] = {}
    for i, entry in enumerate(data.get("recipes", [])):
        key, recipe = _validated(entry, f"{RECIPES_FILE} recipe {i}")
        if key in out:
            raise RecipeError(f"{RECIPES_FILE}: two recipes for {key}")
        out[key] = recipe
    return out


def _validated(entry: Mapping[str, Any], where: str) -> tuple[tuple[str, str, str], Recipe]:
    missing = [f for f in _REQUIRED if f not in entry]
    if missing:
        raise RecipeError(f"{where}: missing {', '.join(missing)}")
    where = f"{where} ({entry['device']}, {entry['model']}, {entry['mode']})"
    if entry["mode"] not in ("train", "eval"):
        raise RecipeError(f"{where}: mode must be train or eval, not {entry['mode']!r}")
    settings = dict(entry["settings"])
    unknown = sorted(set(settings) - set(TUNED_FIELDS))
    if not settings or unknown:
        raise RecipeError(f"{where}: settings must be among {', '.join(TUNED_FIELDS)}"
                          + (f"; unknown: {', '.join(unknown)}" if unknown else ""))
    try:  # every value as the config itself would take it
        replace(ThroughputConfig(model=entry["model"], batch_size=1, mode=entry["mode"]),
                **settings)
    except (ConfigError, TypeError, ValueError) as exc:
        raise RecipeError(f"{where}: {exc}") from exc
    ids = {f: tuple(entry.get(f, ())) for f in ("source_runs", "source_records", "builds_on")}
    for field, values in ids.items():
        bad = [v for v in values if not _ID.match(str(v))]
        if bad or (field != "builds_on" and not values):
            raise RecipeError(f"{where}: {field} must be 12-hex-digit ids"
                              + (f", not {', '.join(map(str, bad))}" if bad else ""))
    store = str(entry["store"])
    source = (f"measured on {entry['device']}: records {', '.join(ids['source_records'])} "
              f"in {store}")
    recipe = Recipe(settings, source, builds_on=ids["builds_on"], records=ids["source_records"],
                    runs=ids["source_runs"], store=store, note=str(entry["note"]))
    return (str(entry["device"]), str(entry["model"]), str(entry["mode"])), recipe


MEASURED: dict[tuple[str, str, str], Recipe] = load_measured()


def changes_between(plain: ThroughputConfig, best: ThroughputConfig) -> dict[str, Any]:
    a, b = plain.to_dict(), best.to_dict()
    return {f: b[f] for f in TUNED_FIELDS if a[f] != b[f]}


def generic(cfg: ThroughputConfig, spec: ModelSpec, device: str) -> tuple[Recipe, list[str]]:
    """Every generic lever that applies, pulled in order; the ones that do not, as notes."""
    current, notes = cfg, []
    for lever in LEVERS:
        if lever.name not in GENERIC_LEVERS:
            continue
        nxt, why_not = lever.apply(current, spec, device)
        if nxt is None:
            if not why_not.startswith("already") and why_not not in (NOT_IMAGE, NOT_LANGUAGE):
                notes.append(f"{lever.name}: {why_not}")
            continue
        current = nxt
    return Recipe(changes_between(cfg, current), "generic recipe (not measured for this "
                                                 "model on this GPU)"), notes


def recipe_device(env: Mapping[str, Any]) -> str:
    """The device a recipe is for: the first GPU's name (``NVIDIA H100 80GB HBM3``; a recipe is
    per GPU, whatever the count), else the CPU's label."""
    gpus = env.get("gpus") or []
    if env.get("accelerator") == "cuda" and gpus:
        return str(gpus[0].get("name") or "unknown GPU")
    return envmod.device_label(dict(env))


def tuned_config(cfg: ThroughputConfig, spec: ModelSpec, device: str, device_name: str,
                 learned: Mapping[tuple[str, str], Recipe] | None = None,
                 keep: Iterable[str] = ()) -> tuple[ThroughputConfig, Recipe, list[str]]:
    """The tuned config for ``cfg`` with the recipe it came from and notes on what was left out.

    ``keep``: config fields the user set explicitly (``precision``, ``batch_size``).
    """
    keep = set(keep)
    notes: list[str] = []
    recipe = pick_recipe((learned or {}).get((spec.name, cfg.mode)),
                         MEASURED.get((device_name, spec.name, cfg.mode)))
    if recipe is None:
        recipe, notes = generic(cfg, spec, device)
    tuned = cfg
    for name, value in recipe.changes.items():
        if name in keep:
            if getattr(cfg, name) != value:
                notes.append(f"{name}: kept as asked ({getattr(cfg, name)}; the recipe has "
                             f"{value})")
            continue
        try:
            candidate = replace(tuned, **{name: value})
        except ConfigError as exc:
            notes.append(f"{name}={value} left out: {exc}")
            continue
        blocker = _device_blocker(candidate, spec, device)
        if blocker:
            notes.append(f"{name}={value} left out: {blocker}")
            continue
        tuned = candidate
    return replace(tuned, tuned_from=cfg.key()), recipe, notes


def pick_recipe(learned: Recipe | None, measured: Recipe | None) -> Recipe | None:
    """This machine's own search, unless the committed recipe went further from that very
    search (a store holding the tune run the recipe started from would otherwise hide the
    levers measured after it)."""
    if learned is not None and measured is not None and learned.run_id in measured.builds_on:
        return measured
    return learned or measured


def _device_blocker(cfg: ThroughputConfig, spec: ModelSpec, device: str) -> str | None:
    if device != "cuda" and cfg.cuda_graph:
        return "CUDA graphs need a CUDA GPU"
    if device != "cuda" and cfg.compile:
        return f"compile {NO_COMPILE_ON_CPU}"
    if device != "cuda" and cfg.attention in ("flash", "efficient", "cudnn"):
        return "that attention backend is CUDA's"
    if cfg.channels_last and spec.kind != "image":
        return NOT_IMAGE
    if cfg.pad_vocab and spec.kind != "text":
        return NOT_LANGUAGE
    return None


def learned_recipes(records: Iterable, device_name: str) -> dict[tuple[str, str], Recipe]:
    """Recipes from stored ``dlbench tune`` searches on ``device_name``: the latest per model
    and mode. ``records``: throughput records of tune runs, oldest first, with ``run_id`` set."""
    runs: dict[tuple[str, str, str], list] = {}
    for r in records:
        if recipe_device(r.env) != device_name:
            continue
        runs.setdefault((r.run_id, r.config.model, r.config.mode), []).append(r)
    out: dict[tuple[str, str], Recipe] = {}
    for (run_id, model, mode), recs in runs.items():  # later runs overwrite earlier ones
        best = winner(replay(recs))
        if best is not None:
            out[(model, mode)] = Recipe(changes_between(recs[0].config, best.config),
                                        f"dlbench tune run {run_id} on {device_name}",
                                        run_id=run_id)
    return out
