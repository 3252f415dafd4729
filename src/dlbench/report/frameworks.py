"""PyTorch vs JAX: the same model, precision, mode and batch, side by side.

Rows pair records whose configs differ only in ``framework`` and in PyTorch's layout and
compile levers (throughput, and data-parallel ``scaling`` records at their GPU count): the
newest JAX record or ``--repeat`` group beside the newest of each PyTorch setting. Per
framework: throughput with its 95% interval (across processes for a group), the first step
(PyTorch: cuDNN autotuning and lazy init, plus compilation where compiled; JAX: tracing and XLA
compilation), peak device memory, energy per sample, flags. A second table puts the
time-to-accuracy runs of both frameworks side by side (the chart:
:mod:`dlbench.report.charts.frameworks`).

Peak memory is what each framework's allocator reports (PyTorch ``max_memory_allocated``, JAX
``memory_stats()['peak_bytes_in_use']``), with JAX's preallocation off
(``XLA_PYTHON_CLIENT_PREALLOCATE=false``, which dlbench sets unless told otherwise): by
default JAX takes 75% of the GPU's memory when it starts, and that block would read as the peak.

Dropout is equal by rule (:mod:`dlbench.frameworks.dropout`): both training steps drop at the
PyTorch model's config rates, inference at none; a note says so, a row whose sides dropped
differently (a JAX record written before the rule: GPT-2's attention probabilities undropped)
says what differs, and a note line lists what the rule cannot make equal.
Reads records only.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Sequence

from dlbench.frameworks import dropout
from dlbench.measure.stats import across_processes
from dlbench.records.base import repeat_groups
from dlbench.report.cards import different_cards
from dlbench.report.flags import flags
from dlbench.report.table import GIB, Table, fmt_num, fmt_pct

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


def pairs(records: Sequence[Any]) -> list[tuple[Any, dict[str, list[Any]]]]:
    """(a representative record, {"torch": side, "jax": side}) for every config measured in
    both frameworks, in the records' order: one pair per PyTorch setting (eager or compiled,
    either layout) measured, each with the newest JAX side of the config. A side is the ok
    records of one ``--repeat`` group (its fresh processes), or one record measured alone."""
    torch: dict[tuple, dict[str, list[Any]]] = {}
    jax: dict[tuple, list[Any]] = {}
    first: dict[tuple, Any] = {}
    for group in repeat_groups(records):
        side = [r for r in group if r.kind in ("throughput", "scaling") and r.ok
                and r.summary() is not None]
        if not side:
            continue
        r = side[0]
        k = _pair_key(r)
        first.setdefault(k, r)
        if getattr(cfg_of(r), "framework", "torch") == "torch":
            torch.setdefault(k, {})[torch_setting(r)] = side  # the newest wins (oldest first)
        else:
            jax[k] = side
    return [(first[k], {"torch": t, "jax": jax[k]}) for k in first if k in jax
            for t in torch.get(k, {}).values()]


def rate(side: Sequence[Any]) -> tuple[float, float, float]:
    """Units per second with its 95% interval (low, high): one record's within-process
    interval, or the mean of a group's processes with the interval across them."""
    if len(side) > 1:
        m, h = across_processes([r.summary().throughput * r.units_per_sample for r in side])
        return m, m - h, m + h
    r = side[0]
    s = r.summary()
    k = r.units_per_sample
    high = s.throughput_high if s.throughput_high != float("inf") else s.throughput
    return s.throughput * k, s.throughput_low * k, high * k


def _with_interval(side: Sequence[Any]) -> str:
    v, lo, hi = rate(side)
    if not v:
        return "-"
    if len(side) > 1:
        return f"{fmt_num(v)} ±{(hi - lo) / 2 / v:.1%} ({len(side)})"
    # One process: the throughput table's relative half-width (of the mean step time), which
    # stays honest where the interval reaches zero step time and the upper rate is unbounded.
    return f"{fmt_num(v)} ±{fmt_pct(side[0].summary().rel_halfwidth)}"


def _peak_gib(side: Sequence[Any]) -> str:
    peaks = [p for p in ((r.memory or {}).get("allocated_peak_bytes") for r in side) if p]
    return f"{max(peaks) / GIB:.1f}" if peaks else "-"


def _j_per_sample(side: Sequence[Any]) -> str:
    js = [j for j in ((((r.telemetry or {}).get("summary") or {}).get("total") or {})
                      .get("j_per_sample") for r in side) if j is not None]
    return fmt_num(sum(js) / len(js), 3) if js else "-"


def _first(side: Sequence[Any]) -> str:
    firsts = sorted(r.first_step_s for r in side if r.first_step_s is not None)
    return f"{firsts[len(firsts) // 2]:.1f}" if firsts else "-"


def _flags(side: Sequence[Any]) -> str:
    """Each flag a side's records carry, once (noisy, throttled, ...)."""
    seen: dict[str, None] = {}
    for r in side:
        for f in flags(r):
            seen.setdefault(f, None)
    return "; ".join(seen)


#: Where each rate of :data:`dlbench.frameworks.dropout.RATES` drops, in a row's words.
_DROPS = {"attention": "attention probabilities", "embedding": "embeddings",
          "residual": "residual branches", "classifier": "classifier activations"}

#: What equal dropout leaves different between the two sides' steps.
STILL_DIFFERS_NOTE = (
    "still differs between the sides: the dropout masks come from different generators "
    "(PyTorch's Philox, drawn inside SDPA's fused kernel for attention; JAX's threefry through "
    "jax.random, drawn by XLA ops of their own), so equal rates are equal work, not equal "
    "numbers; the attention kernel (PyTorch's SDPA picks a fused one; JAX runs XLA's "
    "einsum-softmax-einsum, jax.nn.dot_product_attention's default); the layout (PyTorch as; "
    "JAX NHWC); BatchNorm statistics on more than one GPU (JAX's over the global batch, "
    "PyTorch's per GPU); the initial weights (each framework's own generator, the same "
    "distributions)")


def work_differs(torch_side: Sequence[Any], jax_side: Sequence[Any]) -> str | None:
    """What the two sides of a pair drop differently, where they do (else None): PyTorch's
    step drops at its model's config rates in training; a JAX record says what its step dropped
    (``env.jax.dropout``), and one written before the rule did not drop GPT-2's attention
    probabilities (``jax.nn.dot_product_attention`` has no dropout), a little less work."""
    t, j = dropout.of_torch(torch_side[0]), dropout.of_jax(jax_side[0])
    if t is None or j is None or t == j:
        return None
    parts = []
    for where in sorted(set(t) | set(j)):
        a, b = t.get(where, 0.0), j.get(where, 0.0)
        if a != b:
            what = _DROPS.get(where, where)
            parts.append(f"PT drops {what} ({a:g}), JAX does not" if not b else
                         f"JAX drops {what} ({b:g}), PT does not" if not a else
                         f"{what} dropped at {a:g} by PT, {b:g} by JAX")
    old = any(dropout.predates_rule(r) for r in jax_side)
    return "; ".join(parts) + (" (JAX record predates equal dropout)" if old else "")


def dropout_note(models_modes: Sequence[tuple[str, str]]) -> str:
    """The rule, with the rates of the table's training rows' models."""
    seen: dict[str, str] = {}
    for model, mode in models_modes:
        if mode == "train" and model in dropout.RATES:
            seen.setdefault(model, dropout.describe(dropout.RATES[model]))
    rates = "; ".join(f"{m} {d}" for m, d in seen.items())
    return ("dropout: both sides' training steps drop at the PyTorch model's own config rates, "
            "at the same places" + (f" ({rates})" if rates else "") + "; inference drops "
            "nothing; each JAX record says what its step dropped (env.jax.dropout)")


def throughput_table(records: Sequence[Any]) -> Table | None:
    """PyTorch vs JAX per model, mode, precision, batch and GPU count; None without a pair."""
    rows, models_modes = [], []
    for rep, by in pairs(records):
        c = cfg_of(rep)
        t, j = by["torch"], by["jax"]
        ratio = rate(j)[0] / rate(t)[0]
        unit = {"images": "img/s", "tokens": "tok/s", "sequences": "seq/s"}.get(rep.unit,
                                                                               rep.unit)
        notes = [f"{who}: {fl}" for who, fl in (("PT", _flags(t)), ("JAX", _flags(j))) if fl]
        if any(different_cards(a, b) for a in t for b in j):
            # Cards of one model differ by more than one process's interval (report.cards).
            notes.append("PT and JAX on different cards")
        differs = work_differs(t, j)
        if differs:
            notes.append(differs)
        models_modes.append((c.model, c.mode))
        rows.append((c.model, c.mode, c.precision, str(c.batch_size),
                     str(getattr(rep.config, "gpus", 1)), unit, torch_setting(t[0]),
                     _with_interval(t), _with_interval(j), f"{ratio:.2f}",
                     _first(t), _first(j), _peak_gib(t), _peak_gib(j), _j_per_sample(t),
                     _j_per_sample(j), "; ".join(notes)))
    if not rows:
        return None
    cols = ("model", "mode", "prec", "batch/GPU", "GPUs", "unit", "PyTorch as", "PyTorch", "JAX",
            "JAX/PyTorch", "1st step PT (s)", "1st step JAX (s)", "peak GiB PT", "peak GiB JAX",
            "J/sample PT", "J/sample JAX", "flags")
    notes = ("throughput = samples over the measured window (the same window, stopping rule "
             "and timer semantics in both frameworks); ± is the 95% interval's half-width: "
             "within one process, or across the fresh processes of a --repeat group where a "
             "count follows it, e.g. (3), and the figure is their mean",
             "PyTorch as: how each PyTorch row ran (eager or torch.compile, NCHW or NHWC "
             "images); JAX's step is always jit-compiled by XLA, with NHWC images, so one JAX "
             "record stands beside each PyTorch setting measured",
             "1st step: timed alone, never in the figure; PyTorch's holds cuDNN autotuning and "
             "lazy initialisation (and compilation where compiled), JAX's tracing and XLA "
             "compilation",
             PREALLOC_NOTE, "J/sample: GPU energy over the window (NVML), per sample",
             "flags: as in the throughput table (noisy: the window ended before its interval "
             "target; throttled: the GPU slowed during it); 'different cards': the two sides "
             "ran on different cards of one GPU model, which differ by more than one "
             "process's interval (dlbench gpus --cards); a row whose two sides dropped "
             "differently says what differs (a JAX GPT-2 training record written before "
             "equal dropout: attention probabilities not dropped)",
             dropout_note(models_modes), STILL_DIFFERS_NOTE)
    return Table("PyTorch vs JAX, throughput", cols, tuple(rows), notes)


#: The flags of a training row whose first epoch held what init should have done (TrainRecord's
#: properties): a JAX compile, a PyTorch cuDNN autotuning.
COMPILE_IN_RUN_FLAG = "compile in 1st epoch"
AUTOTUNE_IN_RUN_FLAG = "autotune in 1st epoch"


def _warm_up_flag(r: Any) -> str:
    if r.compile_in_first_epoch:
        return COMPILE_IN_RUN_FLAG
    return AUTOTUNE_IN_RUN_FLAG if r.autotune_in_first_epoch else "-"


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
                         fmt_num(r.synthetic_samples_per_s(), 4), r.status,
                         _warm_up_flag(r)))
    if not rows:
        return None
    cols = ("model@dataset", "prec", "batch", "seed", "framework", "1st epoch (s)",
            "median epoch 2+ (s)", "time to train (s)", "epochs", "final accuracy",
            "synthetic samples/s", "status", "flags")
    notes = ("the same model, data order, learning-rate schedule, target and MLPerf log; the "
             "weights are drawn by each framework's own generator",
             "1st epoch: JAX compiles its step during init (MLPerf permits warm-up there), as "
             "PyTorch autotunes there; synthetic: the same step on one on-device batch",
             f"{COMPILE_IN_RUN_FLAG}: a JAX run stored before 2026-11-27 compiled its step "
             "again in its first epoch (its inputs were placed otherwise than in init), so its "
             "1st epoch and time to train hold that compile; "
             f"{AUTOTUNE_IN_RUN_FLAG}: a PyTorch run on a GPU stored before then warmed up its "
             "full batch only, and cuDNN autotuned the epoch's last, partial one in the run")
    return Table("PyTorch vs JAX, time to accuracy", cols, tuple(rows), notes)


def framework_tables(records: Sequence[Any]) -> list[Table]:
    """The comparison tables whose data exists (none unless both frameworks ran a setup)."""
    return [t for t in (throughput_table(records), training_table(records)) if t is not None]

