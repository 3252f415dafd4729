"""Published per-GPU figures for today's comparisons (``today.json``): training tokens/s per GPU
of the models people compare now (torchtitan's Llama 3.1 8B on H100s) and measured matmul
ceilings (mamf-finder), each row with its source URL and the conditions the source states.
Data only: :mod:`dlbench.workloads.gpu_fit` sets a user's own records beside these rows.

What was looked for and not found (or not comparable without estimating) is listed in the
file's ``left_out`` and by :func:`left_out`; no row is derived from another figure.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from importlib import resources
from typing import Any

#: The kinds of published figure, and the dlbench record each is set beside.
KINDS = {"train_throughput": "throughput or scaling records: tokens/s per GPU",
         "matmul_ceiling": "peak records: the best matmul median over the shapes swept"}


@dataclass(frozen=True)
class PublishedFigure:
    """One published figure (see ``today.json``'s ``about``)."""

    kind: str
    model: str              # the dlbench model name of the same model; "matmul" for ceilings
    device: str
    gpu_id: str | None      # the spec table's id where the source's part is that part
    gpus: int
    precision: str
    metric: str             # tokens_per_s_per_gpu, tflops
    value: float
    conditions: str
    sources: tuple[str, ...]
    says: str


@functools.lru_cache(maxsize=None)
def _document() -> dict[str, Any]:
    text = resources.files("dlbench.reference").joinpath("today.json").read_text("utf-8")
    return json.loads(text)


@functools.lru_cache(maxsize=None)
def published_figures() -> tuple[PublishedFigure, ...]:
    """Every row of ``today.json``."""
    return tuple(PublishedFigure(**{**row, "sources": tuple(row["sources"])})
                 for row in _document()["rows"])


def figures_for(model: str) -> list[PublishedFigure]:
    """The published rows of one model (``matmul`` for the ceilings)."""
    return [f for f in published_figures() if f.model == model]


def models() -> tuple[str, ...]:
    """The models with a published row, in file order."""
    return tuple(dict.fromkeys(f.model for f in published_figures()))


def left_out() -> tuple[str, ...]:
    """The figures that were looked for and are not here, and why."""
    return tuple(_document().get("left_out", ()))
