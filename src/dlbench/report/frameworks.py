"""PyTorch vs JAX: the same model, precision, mode and batch, side by side.

Rows pair records whose configs differ only in ``framework`` (throughput, and data-parallel
``scaling`` records at their GPU count), the newest of each. Per framework: throughput with its
95% interval, the first step (PyTorch: cuDNN autotuning and lazy init, plus compilation where
compiled; JAX: tracing and XLA compilation), peak device memory, energy per sample. A second
table puts the time-to-accuracy runs of both frameworks side by side (the chart: :mod:`dlbench.report.charts.frameworks`).

Peak memory is what each framework's allocator reports (PyTorch ``max_memory_allocated``, JAX
``memory_stats()['peak_bytes_in_use']``), with JAX's preallocation off
(``XLA_PYTHON_CLIENT_PREALLOCATE=false``, which dlbench sets unless told otherwise): by
default JAX takes 75% of the GPU's memory when it starts, and that block would read as the peak.
Reads records only.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Sequence

from dlbench.report.table import GIB, Table, fmt_num

FRAMEWORKS = ("torch", "jax")
PREALLOC_NOTE = ("peak memory: each framework's allocator peak (PyTorch max_memory_allocated, "
                 "JAX memory_stats() peak_bytes_in_use) with JAX's preallocation off "
                 "(XLA_PYTHON_CLIENT_PREALLOCATE=false; by default JAX grabs 75% of the GPU when "
                 "it starts, which would read as its peak)")


def cfg_of(r: Any) -> Any:
    return getattr(r.config, "base", r.config)


#: PyTorch's levers that JAX has no counterpart of (XLA always compiles the whole step and picks
#: layout and kernels itself): a JAX record pairs with PyTorch's records at any of them.
_TORCH_LEVERS = {"channels_last": False, "compile": None, "compile_loss": False,
                 "cuda_graph": False}


def _pair_key(r: Any) -> tuple:
    """What must match for two records to share a row: the config without its framework and
    without PyTorch's layout and compile levers."""
    c = cfg_of(r)
    plain = replace(c, framework="torch", **_TORCH_LEVERS)
    return (plain.key(), getattr(r.config, "gpus", 1))


def torch_setting(r: Any) -> str:
    """How a PyTorch record ran: ``eager NCHW``, ``compiled NHWC``, ``max-autotune+graph ...``."""
    c = cfg_of(r)
    how = "compiled" if c.compile == "default" else (c.compile or "eager")
    how += "+loss" if c.compile_loss else ""
    how += "+graph" if c.cuda_graph else ""
    return how + (" NHWC" if c.channels_last else (" NCHW" if r.unit == "images" else ""))


def pairs(records: Sequence[Any]) -> list[tuple[Any, dict[str, Any]]]:
    """(a representative record, {"torch": record, "jax": record}) for every config measured in
    both frameworks, in the records' order: one pair per PyTorch setting (eager or compiled,
    either layout) measured, each with the newest ok JAX record of the config."""
    torch: dict[tuple, dict[str, Any]] = {}
    jax: dict[tuple, Any] = {}
    first: dict[tuple, Any] = {}
    for r in records:
        if r.kind not in ("throughput", "scaling") or not r.ok or r.summary() is None:
            continue
        k = _pair_key(r)
        first.setdefault(k, r)
        if getattr(cfg_of(r), "framework", "torch") == "torch":
            torch.setdefault(k, {})[torch_setting(r)] = r  # the newest wins (oldest come first)
        else:
            jax[k] = r
    return [(first[k], {"torch": t, "jax": jax[k]}) for k in first if k in jax
            for t in torch.get(k, {}).values()]


def rate(r: Any) -> tuple[float, float, float]:
    s = r.summary()
    k = r.units_per_sample
    high = s.throughput_high if s.throughput_high != float("inf") else s.throughput
    return s.throughput * k, s.throughput_low * k, high * k


def _with_interval(r: Any | None) -> str:
    if r is None:
        return "-"
    v, lo, hi = rate(r)
    return f"{fmt_num(v)} ±{(hi - lo) / 2 / v:.1%}" if v else "-"


def _peak_gib(r: Any | None) -> str:
    if r is None:
        return "-"
    m = r.memory or {}
    peak = m.get("allocated_peak_bytes")
    return "-" if peak is None else f"{peak / GIB:.1f}"


def _j_per_sample(r: Any | None) -> str:
    if r is None:
        return "-"
    tot = (((r.telemetry or {}).get("summary") or {}).get("total") or {})
    return fmt_num(tot.get("j_per_sample"), 3)


def _first(r: Any | None) -> str:
    return "-" if r is None or r.first_step_s is None else f"{r.first_step_s:.1f}"


def throughput_table(records: Sequence[Any]) -> Table | None:
    """PyTorch vs JAX per model, mode, precision, batch and GPU count; None without a pair."""
    rows = []
    for rep, by in pairs(records):
        c = cfg_of(rep)
        t, j = by["torch"], by["jax"]
        ratio = rate(j)[0] / rate(t)[0]
        unit = {"images": "img/s", "tokens": "tok/s", "sequences": "seq/s"}.get(rep.unit,
                                                                               rep.unit)
        rows.append((c.model, c.mode, c.precision, str(c.batch_size),
                     str(getattr(rep.config, "gpus", 1)), unit, torch_setting(t),
                     _with_interval(t),
                     _with_interval(j), f"{ratio:.2f}",
                     _first(t), _first(j), _peak_gib(t), _peak_gib(j), _j_per_sample(t),
                     _j_per_sample(j)))
    if not rows:
        return None
    cols = ("model", "mode", "prec", "batch/GPU", "GPUs", "unit", "PyTorch as", "PyTorch", "JAX",
            "JAX/PyTorch",
            "1st step PT (s)", "1st step JAX (s)", "peak GiB PT", "peak GiB JAX", "J/sample PT",
            "J/sample JAX")
    notes = ("throughput = samples over the measured window (the same window, stopping rule "
             "and timer semantics in both frameworks); ± is the 95% interval's half-width",
             "PyTorch as: how each PyTorch row ran (eager or torch.compile, NCHW or NHWC "
             "images); JAX's step is always jit-compiled by XLA, with NHWC images, so one JAX "
             "record stands beside each PyTorch setting measured",
             "1st step: timed alone, never in the figure; PyTorch's holds cuDNN autotuning and "
             "lazy initialisation, JAX's tracing and XLA compilation",
             PREALLOC_NOTE, "J/sample: GPU energy over the window (NVML), per sample")
    return Table("PyTorch vs JAX, throughput", cols, tuple(rows), notes)


def training_table(records: Sequence[Any]) -> Table | None:
    """Time to accuracy of both frameworks on the same setup (the newest run of each seed)."""
    groups: dict[tuple, dict[str, Any]] = {}
    for r in records:
        if r.kind != "train":
            continue
        c = r.config
        k = (replace(c, framework="torch").setup_key(), c.seed)
        groups.setdefault(k, {})[getattr(c, "framework", "torch")] = r
    rows = []
    for by in groups.values():
        if len(by) < 2:
            continue
        for fw in FRAMEWORKS:
            r = by.get(fw)
            if r is None:
                continue
            c = r.config
            rows.append((f"{c.model}@{c.dataset}", c.precision, str(c.batch_size), str(c.seed),
                         "PyTorch" if fw == "torch" else "JAX", fmt_num(r.first_epoch_s, 3),
                         fmt_num(r.median_epoch_s, 3), fmt_num(r.time_to_train_s, 4),
                         str(r.epochs), fmt_num(r.final_accuracy, 4),
                         fmt_num(r.synthetic_samples_per_s(), 4), r.status))
    if not rows:
        return None
    cols = ("model@dataset", "prec", "batch", "seed", "framework", "1st epoch (s)",
            "median epoch 2+ (s)", "time to train (s)", "epochs", "final accuracy",
            "synthetic samples/s", "status")
    notes = ("the same model, data order, learning-rate schedule, target and MLPerf log; the "
             "weights are drawn by each framework's own generator",
             "1st epoch: JAX compiles its step during init (MLPerf permits warm-up there), as "
             "PyTorch autotunes there; synthetic: the same step on one on-device batch")
    return Table("PyTorch vs JAX, time to accuracy", cols, tuple(rows), notes)


def framework_tables(records: Sequence[Any]) -> list[Table]:
    """The comparison tables whose data exists (none unless both frameworks ran a setup)."""
    return [t for t in (throughput_table(records), training_table(records)) if t is not None]

