"""The user's GPU among published GPUs: speed (1/time) against each GPU's datasheet TFLOPS, a
least-squares line through the origin fitted on the published points (as the 2022 per-model
ms-per-batch article did), the user's own results beside them, and a prediction with a 95%
interval for GPUs not measured; and, for the models people compare now (``today.json``:
Llama 3.1 8B tokens/s per GPU, matmul ceilings) and the classic tables' per-second rows, the
user's own records of the same model placed beside the published figures (:func:`place`).
Nothing here prints; no record of the model is left out without a reason the caller can show.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from dlbench import env as envmod
from dlbench import reference as ref
from dlbench.config import ConfigError
from dlbench.measure.regression import fit_through_origin
from dlbench.records.peak import ceilings
from dlbench.reference import today
from dlbench.store import Store

#: The published source the fit uses: the classic per-model ms-per-batch figures (batch 16).
FIT_SOURCE = "ms-per-batch"

#: The names ``gpus --source`` shows -> the reference data's source ids: since the articles
#: were named by what they are (:mod:`dlbench.records.compat`), the same names.
SOURCE_IDS = {name: name for name in ("tf-cnn-benchmarks", "ms-per-batch", "cifar10-frameworks")}


def own_points(db: str, model: str, mode: str, x_precision: str) -> list[ref.FitPoint]:
    """The user's FP32 results of ``model``/``mode`` in ``db`` as fit points (spec TFLOPS,
    batches of 16 per second); none if there is no store."""
    return own_points_and_skipped(db, model, mode, x_precision)[0]


def own_points_and_skipped(db: str, model: str, mode: str, x_precision: str
                           ) -> tuple[list[ref.FitPoint], list[str]]:
    """The fit points of :func:`own_points`, and one line per throughput record of
    ``model``/``mode`` that is not one, saying why (a CPU, another precision, a GPU the spec
    table lacks, a failure): a user's row is never dropped without a word."""
    if not db or not Path(db).exists():
        return [], []
    with Store(db) as store:
        recs = [r for r in store.results(kind="throughput", model=model)
                if r.config.mode == mode]
    pts, skipped = [], []
    for r in recs:
        p = ref.own_point(r, x_precision) if r.ok else None
        if p is not None:
            pts.append(p)
            continue
        skipped.append(f"{envmod.device_label(r.env)} b{r.config.batch_size} "
                       f"{r.config.precision} (record {r.id}): {_why_not_fitted(r, x_precision)}")
    return pts, skipped


def _why_not_fitted(r, x_precision: str) -> str:
    if not r.ok or r.summary() is None:
        return f"failed ({r.error_type or r.status})"
    if r.env.get("accelerator") != "cuda":
        return "a CPU result: the fit is over GPUs' datasheet TFLOPS"
    if r.config.precision != "fp32":
        return f"{r.config.precision}, not fp32: the published points are FP32"
    spec, why = ref.spec_for_env(r.env)
    if spec is None:
        return why or "GPU not in the spec table"
    return f"its GPU has no {x_precision} TFLOPS figure in the spec table"


@dataclass(frozen=True)
class GpuFit:
    """The fit on the published points, the user's points, and predictions per spec:
    (spec, batches/s, low, high). A speed cannot be negative: a lower bound the interval puts
    below zero is clipped to 0, and ``clipped`` names those GPUs' spec ids. ``skipped`` says,
    per record of the model and mode that is not a point, why."""

    published: list
    own: list
    fit: object            # dlbench.measure.regression.OriginFit: slope, r2, n, predict()
    predictions: list
    clipped: tuple[str, ...] = ()
    skipped: tuple[str, ...] = ()


def fit_gpus(model: str, mode: str, x_precision: str = "fp32", db: str | None = None,
             predict: Sequence[str] = ()) -> GpuFit:
    """Fit speed on ``x_precision`` TFLOPS for ``model``/``mode`` and predict the GPUs named in
    ``predict`` (spec ids; default: every GPU with that figure)."""
    pub = ref.reference_points(model, mode, source=FIT_SOURCE, x_precision=x_precision)
    own, skipped = own_points_and_skipped(db, model, mode, x_precision)
    if len(pub) < 2:
        raise ConfigError(f"fewer than two published FP32 points for {model} {mode}; "
                          f"the ms-per-batch figures have {', '.join(fit_models())}")
    fit = fit_through_origin([p.x_tflops for p in pub], [p.y_speed for p in pub])
    specs = [ref.spec_by_id(i) for i in predict] if predict else [
        s for s in ref.gpu_specs() if s.tflops(x_precision)]
    preds, clipped = [], []
    for s in specs:
        y, lo, hi = fit.predict(s.tflops(x_precision))
        if lo < 0:   # a speed is never negative: the interval's lower end says "zero"
            lo = 0.0
            clipped.append(s.id)
        preds.append((s, y, lo, hi))
    return GpuFit(pub, own, fit, preds, tuple(clipped), tuple(skipped))


def fit_models() -> list[str]:
    """The models the ms-per-batch fit can be made for."""
    return sorted({r.model for r in ref.select(source=FIT_SOURCE)})


def can_fit(model: str, mode: str, x_precision: str = "fp32") -> bool:
    return len(ref.reference_points(model, mode, source=FIT_SOURCE,
                                    x_precision=x_precision)) >= 2


# -- placing a result among published figures ----------------------------------------------------
@dataclass(frozen=True)
class PublishedRow:
    """A published figure as ``dlbench gpus -m MODEL`` shows it: per GPU, with its conditions
    and where it comes from."""

    device: str
    gpus: int
    precision: str
    per_gpu: float
    unit: str
    conditions: str
    source: str


@dataclass(frozen=True)
class OwnRow:
    """One of the user's records of the model: its figure per GPU (None for a failure) and a
    note where it is not comparable with the published rows (a CPU, a failure)."""

    device: str
    config: str
    precision: str
    per_gpu: float | None
    unit: str
    note: str
    record_id: str
    gpus: int = 1


@dataclass(frozen=True)
class Placement:
    model: str
    published: list
    own: list
    notes: list


_UNITS = {"tokens_per_s_per_gpu": "tokens/s", "tflops": "TFLOP/s", "images_per_s": "img/s"}


def published_rows(model: str) -> list[PublishedRow]:
    """``today.json``'s rows of ``model``, then the classic tables' per-second rows of it
    (tf_cnn_benchmarks' img/s: the total over the GPUs, shown per GPU as total / GPUs)."""
    out = [PublishedRow(f.device, f.gpus, f.precision, f.value, _UNITS.get(f.metric, f.metric),
                        f.conditions, f.sources[0]) for f in today.figures_for(model)]
    srcs = ref.sources()
    for r in ref.select(model=model):
        if not r.metric.endswith("_per_s"):
            continue
        cond = ", ".join(x for x in (r.framework, r.mode, f"batch {r.batch_size}"
                                     if r.batch_size else None, r.setup,
                                     "total / GPUs" if r.gpus > 1 else None) if x)
        out.append(PublishedRow(r.device, r.gpus, r.precision or "-", r.value / r.gpus,
                                _UNITS.get(r.metric, r.metric), cond,
                                srcs[r.source]["title"]))
    return out


def _own_note(r) -> str:
    if not r.ok or r.summary() is None:
        return f"failed ({r.error_type or r.status}): no figure"
    if r.env.get("accelerator") != "cuda":
        return "CPU: not comparable with the GPU rows"
    return ""


def _own_model_rows(store: Store, model: str) -> list[OwnRow]:
    rows = []
    for kind in ("throughput", "scaling"):
        for r in store.results(kind=kind, model=model):
            gpus = getattr(r.config, "gpus", 1) if kind == "scaling" else 1
            base = r.config.base if kind == "scaling" else r.config
            units = r.units_per_s() if r.ok else None
            unit = "tokens/s" if r.unit == "tokens" else f"{r.unit}/s"
            rows.append(OwnRow(envmod.device_label(r.env), r.config.label, base.precision,
                               None if units is None else units / gpus, unit, _own_note(r),
                               r.id, gpus))
    return rows


def _own_matmul_rows(store: Store) -> list[OwnRow]:
    """The best matmul median per precision of each ``dlbench peak`` run."""
    by_run: dict[str, list] = {}
    for r in store.results(kind="peak"):
        if r.config.verb == "matmul":
            by_run.setdefault(r.run_id, []).append(r)
    rows = []
    for run_id, recs in by_run.items():
        env = recs[0].env
        note = _own_note(recs[0]) if recs[0].env.get("accelerator") != "cuda" else ""
        for prec, c in ceilings(recs).items():
            rows.append(OwnRow(envmod.device_label(env), f"dlbench peak, {c['label']} "
                               f"(median of {c['iterations']} iterations, {c['points']} shapes)",
                               prec, c["median"], "TFLOP/s", note, run_id))
        failed = [r for r in recs if not r.ok and r.error_type != "unsupported"]
        for r in failed:
            rows.append(OwnRow(envmod.device_label(env), r.config.label, r.config.precision,
                               None, "TFLOP/s", _own_note(r), r.id))
    return rows


def place(model: str, db: str | None) -> Placement:
    """The published figures of ``model`` (``matmul``: the measured ceilings) and the user's
    own records of it in ``db`` beside them, every record with a figure or a note."""
    pub = published_rows(model)
    own: list[OwnRow] = []
    notes: list[str] = []
    if db and Path(db).exists():
        with Store(db) as store:
            own = _own_matmul_rows(store) if model == "matmul" else _own_model_rows(store, model)
    elif db:
        notes.append(f"no result store at {db}: only the published rows")
    if not pub:
        have = sorted(set(today.models()) | {r.model for r in ref.reference_results()
                                              if r.metric.endswith("_per_s")})
        notes.append(f"no published per-GPU figure of {model} is shipped; published rows "
                     f"exist for {', '.join(have)} (the data file's 'left_out' says what was "
                     f"looked for and not found)")
    if model == "matmul" and own:
        notes.append("dlbench peak's figure is the best per-shape median over its grid; "
                     "mamf-finder's is the best per-shape mean after 50 warm-up iterations")
    return Placement(model, pub, own, notes)
