"""The user's GPU among published GPUs: speed (1/time) against each GPU's datasheet TFLOPS, a
least-squares line through the origin fitted on the published points (as the 2022 per-model
ms-per-batch article did), the user's own results beside them, and a prediction with a 95%
interval for GPUs not measured. Nothing here prints.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from dlbench import reference as ref
from dlbench.config import ConfigError
from dlbench.measure.regression import fit_through_origin
from dlbench.store import Store

#: The published source the fit uses: the classic per-model ms-per-batch figures (batch 16).
FIT_SOURCE = "seed002"

#: The names ``gpus --source`` shows, and the reference data's own source ids behind them.
SOURCE_IDS = {"tf-cnn-benchmarks": "seed000", "ms-per-batch": "seed002",
              "cifar10-frameworks": "seed003"}


def own_points(db: str, model: str, mode: str, x_precision: str) -> list[ref.FitPoint]:
    """The user's FP32 results of ``model``/``mode`` in ``db`` as fit points (spec TFLOPS,
    batches of 16 per second); none if there is no store."""
    if not Path(db).exists():
        return []
    with Store(db) as store:
        recs = store.results(kind="throughput", model=model, status="ok")
    pts = (ref.own_point(r, x_precision) for r in recs if r.config.mode == mode)
    return [p for p in pts if p is not None]


@dataclass(frozen=True)
class GpuFit:
    """The fit on the published points, the user's points, and predictions per spec:
    (spec, batches/s, low, high)."""

    published: list
    own: list
    fit: object            # dlbench.measure.regression.OriginFit: slope, r2, n, predict()
    predictions: list


def fit_gpus(model: str, mode: str, x_precision: str = "fp32", db: str | None = None,
             predict: Sequence[str] = ()) -> GpuFit:
    """Fit speed on ``x_precision`` TFLOPS for ``model``/``mode`` and predict the GPUs named in
    ``predict`` (spec ids; default: every GPU with that figure)."""
    pub = ref.reference_points(model, mode, source=FIT_SOURCE, x_precision=x_precision)
    own = own_points(db, model, mode, x_precision) if db else []
    if len(pub) < 2:
        names = sorted({r.model for r in ref.select(source=FIT_SOURCE)})
        raise ConfigError(f"fewer than two published FP32 points for {model} {mode}; "
                          f"the ms-per-batch figures have {', '.join(names)}")
    fit = fit_through_origin([p.x_tflops for p in pub], [p.y_speed for p in pub])
    specs = [ref.spec_by_id(i) for i in predict] if predict else [
        s for s in ref.gpu_specs() if s.tflops(x_precision)]
    preds = [(s, *fit.predict(s.tflops(x_precision))) for s in specs]
    return GpuFit(pub, own, fit, preds)
