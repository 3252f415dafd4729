"""What ``dlbench generate`` runs: the sweep's configs (with ``-b auto`` sized for the device)
and the sweep into the store. Nothing here prints."""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Callable, Sequence

from dlbench.config import ConfigError
from dlbench.jobs.runs import launcher_for
from dlbench.jobs.sweep import Progress, SweepOutcome, run_sweep
from dlbench.measure.stopping import StopRule
from dlbench.models.lm import get_lm
from dlbench.records.generate import FP8_RECIPES, GENERATE_STOP, GenerateConfig
from dlbench.store import Store

#: ``-b auto``: the largest batch that fits (see :func:`dlbench.measure.generation.largest_batch`).
AUTO = "auto"


@dataclass(frozen=True)
class AutoBatch:
    """What ``-b auto`` chose for one model, precision and length."""

    model: str
    precision: str
    prompt_len: int
    output_len: int
    batch: int


def plan(models: Sequence[str], batches: Sequence[int | str], prompt_lens: Sequence[int],
         output_lens: Sequence[int], precisions: Sequence[str], paths: Sequence[str], *,
         device: str = "auto", stop: StopRule = GENERATE_STOP, warmup_requests: int = 1,
         seed: int = 0, telemetry_interval_s: float | None = 0.1, profile_requests: int = 0,
         auto_batch: Callable[[str, str, int, int], int] | None = None, fuse: bool = False,
         fold_gqa: bool = False, fp8_recipe: str = FP8_RECIPES[0]
         ) -> tuple[list[GenerateConfig], list[AutoBatch]]:
    """The product of the listed values, model outermost and the paths innermost (so each
    batch's eager and tuned figures are measured one after the other), and what ``-b auto``
    chose. Every model name is checked first: an unknown one fails in a second. ``fuse`` fuses
    the projections and ``fold_gqa`` folds grouped-query attention on every path but eager
    (which is ``generate()`` as a user calls it); ``fp8_recipe`` is the fp8 configs' recipe,
    refused (:class:`ConfigError`) where no precision is fp8 and it is not the default."""
    if fp8_recipe != FP8_RECIPES[0] and "fp8" not in precisions:
        raise ConfigError(f"fp8_recipe {fp8_recipe} applies to precision fp8 only; the "
                          f"precisions here are {', '.join(precisions)}", "fp8_recipe",
                          also=("precision",))
    for m in models:
        get_lm(m)
    chosen: list[AutoBatch] = []
    out: list[GenerateConfig] = []
    for model, precision, p, n in itertools.product(models, precisions, prompt_lens,
                                                    output_lens):
        sizes: list[int] = []
        for b in batches:
            if b == AUTO:
                if auto_batch is None:
                    raise ConfigError('batch_size="auto" needs auto_batch, which sizes the '
                                      "batch for a device", "batch_size")
                b = auto_batch(model, precision, p, n)
                chosen.append(AutoBatch(model, precision, p, n, b))
            if b not in sizes:
                sizes.append(int(b))
        for b, path in itertools.product(sizes, paths):
            out.append(GenerateConfig(
                model=model, batch_size=b, prompt_len=p, output_len=n, precision=precision,
                path=path, device=device, stop=stop, warmup_requests=warmup_requests,
                seed=seed, telemetry_interval_s=telemetry_interval_s,
                profile_requests=profile_requests, fuse=fuse and path != "eager",
                fold_gqa=fold_gqa and path != "eager",
                fp8_recipe=fp8_recipe if precision == "fp8" else FP8_RECIPES[0]))
    return out, chosen


def preflight(configs: Sequence[GenerateConfig]) -> None:
    """Every model's weights small enough for its device (the GPU's memory, or the host's
    available memory on the CPU): a model that cannot run at any batch is refused before the
    store is opened (``workloads.generate.check_weights_fit``)."""
    from dlbench.workloads.devices import resolve_device  # heavy: torch
    from dlbench.workloads.generate import check_weights_fit  # heavy: torch, transformers

    seen: set[tuple[str, str, str]] = set()
    for cfg in configs:
        if (cfg.model, cfg.precision, cfg.device) not in seen:
            seen.add((cfg.model, cfg.precision, cfg.device))
            check_weights_fit(cfg, resolve_device(cfg.device))


def check_fp8(device: str) -> None:
    """``--precision fp8`` can run on ``device``: an sm_89+ GPU, then torchao importable; else
    a :class:`~dlbench.config.ConfigError` saying what to do, before any model is built."""
    from dlbench.workloads.devices import resolve_device  # heavy: torch
    from dlbench.workloads.fp8_inference import check_ready  # heavy: torch

    check_ready(resolve_device(device))


def device_auto_batch(device: str) -> Callable[[str, str, int, int], int]:
    """``-b auto`` for ``device``: the largest batch whose weights, KV cache and prefill fit."""
    from dlbench.workloads.devices import resolve_device  # heavy: torch
    from dlbench.workloads.generate import resolve_auto_batch  # heavy: torch, transformers

    dev = resolve_device(device)

    def auto(model: str, precision: str, prompt_len: int, output_len: int) -> int:
        return resolve_auto_batch(model, precision, prompt_len, output_len, dev)
    return auto


def run_generate(configs: Sequence[GenerateConfig], db: str, command: str, env: dict, *,
                 isolate: bool = False, tag: str | None = None, resume: bool = False,
                 progress: Progress | None = None, repeat: int = 1) -> SweepOutcome:
    """A generation sweep into ``db``, in this process or (``isolate``) one process each;
    ``repeat`` N > 1 runs each config in N fresh processes (``--repeat``)."""
    with Store(db) as store:
        return run_sweep(configs, store, launcher_for(isolate or repeat > 1), env,
                         command=command, suite=None, tag=tag, resume=resume,
                         progress=progress, repeat=repeat)
