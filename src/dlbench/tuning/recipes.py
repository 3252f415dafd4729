"""What ``--tuned`` runs: the plain config with the levers that won for its model and device.

Where they come from, first match wins:
1. a ``dlbench tune`` search of the same model and mode stored in ``--db`` on the same device
   (this machine's own measurement), unless a ``MEASURED`` recipe names that search's run in
   ``builds_on``: then it is the later word (levers measured on top of that search);
2. ``MEASURED``: searches dlbench ran on a GPU kind, cited by their results file;
3. the generic recipe: the cheap levers that apply on the device and model (a padded
   vocabulary, channels_last, fused optimizer kernels, whole-step CUDA graph). torch.compile costs a minute or more per model and loses for
   some, so it enters a recipe only where a search measured it winning; batch and 16-bit type
   likewise.
A change the config or device cannot take (a CUDA graph of fp16 training with unfused optimizer
kernels, compile on the CPU) is dropped with a note, and the fields the user set explicitly are
never changed.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Iterable, Mapping

from dlbench.config import ConfigError
from dlbench.records.throughput import ThroughputConfig
from dlbench.models.base import ModelSpec
from dlbench.tuning.levers import LEVERS, NO_COMPILE_ON_CPU, NOT_IMAGE, NOT_LANGUAGE

# The config fields a recipe may set.
TUNED_FIELDS = ("pad_vocab", "channels_last", "optimizer_impl", "attention", "compile",
                "compile_loss", "cuda_graph", "precision", "batch_size")
GENERIC_LEVERS = ("pad-vocab", "channels_last", "fused-optimizer", "cuda-graph")


@dataclass(frozen=True)
class Recipe:
    changes: Mapping[str, Any]
    source: str
    run_id: str | None = None        # the dlbench tune run a learned recipe comes from
    builds_on: tuple[str, ...] = ()  # tune runs a MEASURED recipe goes further than


# (device name as recipe_device gives it, model, mode) -> recipe. Filled from `dlbench tune`
# runs on that GPU; the source names the committed results file.
_H100 = "NVIDIA H100 80GB HBM3"
_H100_TUNE = ("dlbench tune on an H100 80GB HBM3, torch 2.11, run {run} "
              "(results/pt2.11-cu130-h100-80gb-hbm3/tuned/)")
MEASURED: dict[tuple[str, str, str], Recipe] = {
    # From plain bf16 NCHW batch 256: channels_last 1.79x, fp16 1.18x, compile 1.17x,
    # batch 512 1.10x; fused optimizer +0.2% (not kept). 6,037 img/s. Then, on that config:
    # fused SGD 1.033x (no GradScaler sync) and the whole step in a CUDA graph 1.009x,
    # 6,293 img/s (run 69e3f1db7571); the same at batch 1024 1.020x, 6,422 img/s at the card's
    # 700 W limit (run f8b8bedaedca). Then compiled under max-autotune-no-cudagraphs: 6,611
    # img/s against 6,395 compiled by default on the same machine, 1.034x (run dc53418f335c);
    # `throughput --tuned` with it 6,649 (run 746d600ae7f2). cuDNN won all 11 convolution
    # shapes Inductor timed; Triton templates won 6 of 15 GEMMs (1x1 convolutions computed as
    # matrix products, the classifier). By --profile, most of the 6 ms per step it saves is in
    # Inductor's autotuned batch-norm reductions. Its compilation outlasts a 470 s call from a
    # cold cache.
    (_H100, "resnet50", "train"): Recipe(
        {"channels_last": True, "precision": "fp16", "compile": "max-autotune-no-cudagraphs",
         "batch_size": 1024, "optimizer_impl": "fused", "cuda_graph": True},
        _H100_TUNE.format(run="8a823bc3d0ed, then 69e3f1db7571, f8b8bedaedca and "
                              "dc53418f335c"),
        builds_on=("8a823bc3d0ed",)),
    # From plain bf16 batch 16: compile 2.14x, batch 32 1.05x; fused optimizer, flash pinned,
    # fp16 and a CUDA graph on top of compile each within 1% or slower. 299,138 tok/s. Then
    # the vocabulary padded to 50,304: 1.17x, 350,718 tok/s (run 6964694c3af6; a CUDA graph on
    # top +0.7%, not kept). Then the loss compiled with the model: 1.28x, 448,926 tok/s (run
    # 8269422c2a78); at batch 64 1.03x, 461,618 tok/s (run a7e3888fcf94), 40.1% MFU by
    # 6N + 12LHT. max-autotune-no-cudagraphs (+0.3%), fused SGD (+0.1%) and a CUDA graph
    # (+0.4%) on top: within 1%, not kept. A later search with these levers (run 8b9f1a9d0b82,
    # from batch 16) stopped at batch 32, 449,401 tok/s; batch 64 is measured beyond it.
    (_H100, "gpt2", "train"): Recipe(
        {"compile": "default", "batch_size": 64, "pad_vocab": True, "compile_loss": True},
        _H100_TUNE.format(run="b37dbe3b98ba, then 6964694c3af6, 8269422c2a78 and "
                              "a7e3888fcf94"), builds_on=("b37dbe3b98ba", "8b9f1a9d0b82")),
}


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
    from dlbench import env as envmod
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
    from dlbench.tuning.search import replay, winner
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
