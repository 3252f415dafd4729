"""Tables built from records: pure functions that return rows of text, no I/O.

Every table is a :class:`~dlbench.report.table.Table` (rendered to the terminal, Markdown or
HTML); two views reproduce the layouts of published tables: classic-cnn, img/s with a factor in
parentheses as the 2020 tf_cnn_benchmarks study on 4x Quadro RTX 8000 printed them, and
ms-per-batch, ms per batch for eval and train per model as the classic per-model scripts
(u39kun/deep-learning-benchmark) print them. This module holds the tables of throughput, scaling,
peaks and searches, and :func:`tables_for`, which lays out records of every kind and so imports
the other table modules (collectives, kernels, network, training, tuned, generation).
``Table`` and the cell formats are re-exported here for the callers that take them from this
module.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Callable, Iterable, Sequence

from dlbench.env import env_key
from dlbench.measure.mfu import mfu
from dlbench.measure.stats import percentile
from dlbench.measure.stats import mean as stats_mean  # `mean` is a column name here
from dlbench.models import UnknownModelError
from dlbench.records.base import repeat_groups
from dlbench.records.peak import ceilings
from dlbench.records.scaling import scaling_efficiency, scaling_factor
from dlbench.records.throughput import ThroughputRecord
from dlbench.report.comm_tables import comm_table, comm_tables  # noqa: F401 (re-exported)
from dlbench.report.exposed_tables import exposed_comm_table, has_figure
from dlbench.report.flags import flags
from dlbench.report.frameworks import framework_tables
from dlbench.report.generate_tables import generate_tables
from dlbench.report.groups import ONE_PROCESS, GroupFigure, group_figure  # noqa: F401 (re-exported)
from dlbench.report.strategy_tables import (
    largest_batch_table,
    lm_records,
    strategy_cell,
    strategy_table,
)
from dlbench.report.kernel_tables import kernel_tables
from dlbench.report.network import loss_table, net_table
from dlbench.report.serve_tables import serve_tables
from dlbench.report.table import GIB, Table, fmt_ms, fmt_num, fmt_pct
from dlbench.report.train_tables import train_tables


def _layout(r: ThroughputRecord) -> str:
    # dlbench's JAX models take NHWC images, XLA's native layout on GPUs.
    nhwc = r.config.channels_last or r.config.framework != "torch"
    return "-" if not _is_image(r) else ("NHWC" if nhwc else "NCHW")


def _is_image(r: ThroughputRecord) -> bool:
    return r.unit == "images"


def _compile(r: ThroughputRecord) -> str:
    c = r.config
    return c.compiled_as + ("+graph" if getattr(c, "cuda_graph", False) else "")


def _short_error(r: ThroughputRecord) -> str:
    first = (r.error or "").splitlines()[0] if r.error else ""
    return f"{r.error_type}: {first[:70]}"


def throughput_table(records: Sequence[ThroughputRecord], title: str = "Throughput") -> Table:
    """One row per result, successes and failures alike; the processes of a ``--repeat`` group
    make one row (:func:`group_row`)."""
    cols = ("model", "mode", "batch", "prec", "layout", "compile", "throughput", "±95%",
            "±95% processes", "ms/step p50 (p5-p95)", "steps", "TFLOP/s", "MFU", "1st s", "GiB",
            "note")
    rows = []
    for group in repeat_groups(records):
        if len(group) > 1 or group[0].repeat_group is not None:
            rows.append(group_row(group))
            continue
        r = group[0]
        c = r.config
        s = r.summary()
        head = _head(r)
        # What the columns miss (fused optimizer kernels, a padded vocabulary), so two rows
        # that differ only there cannot be mistaken for each other.
        setup = c.setup_parts()
        if s is None:
            rows.append(head + ("-",) * 9 + ("; ".join(setup + [_short_error(r)]),))
            continue
        mem = r.memory.get("allocated_peak_bytes")
        rows.append(head + (
            f"{fmt_num(s.throughput * r.units_per_sample)} {_unit(r)}",
            fmt_pct(s.rel_halfwidth),
            ONE_PROCESS,
            f"{fmt_ms(s.median_s)} ({fmt_ms(s.p5_s)}-{fmt_ms(s.p95_s)})",
            str(s.steps),
            fmt_num(r.achieved_tflops(), 3),
            _mfu_cell(r),
            f"{r.first_step_s:.2f}" if r.first_step_s is not None else "-",
            f"{mem / GIB:.1f}" if mem else "-",
            "; ".join(setup + flags(r)),
        ))
    notes = ("throughput = samples over the measured window's time; ±95% is the interval within "
             "one process (batch means over 200+ steps, else from the effective sample size; "
             "a group's is its processes' median); '±95% processes' is the t-interval across "
             "the fresh processes of a --repeat group, whose row shows their mean figure "
             "(steps per process; step times pooled; '1 process': run-to-run variance not "
             "measured); TFLOP/s counts model FLOPs (optimizer excluded); MFU is against the "
             "datasheet dense peak of that precision ('dlbench roofline' adds the measured one)",)
    uncounted = sorted({r.config.model for r in records if r.ok and r.flops_per_sample is None})
    if uncounted:  # measured all the same: a FLOP count is an annotation of the figure
        notes += (f"FLOPs unknown for {', '.join(uncounted)} (a step callable, or a forward the "
                  "FLOP counter could not trace): TFLOP/s and MFU are '-'",)
    return Table(title, cols, tuple(rows), notes)


def _unit(r: ThroughputRecord) -> str:
    return {"images": "img/s", "sequences": "seq/s", "tokens": "tok/s"}.get(r.unit, "/s")


def _head(r: ThroughputRecord) -> tuple:
    c = r.config
    return (c.model, c.mode + ("/" + c.method if c.method != "standard" else ""),
            str(c.batch_size), c.precision, _layout(r), _compile(r))


def group_row(group: Sequence[ThroughputRecord]) -> tuple:
    """A ``--repeat`` group's row: the mean figure, the median within-process interval, the
    across-process interval, pooled step-time percentiles, steps per process."""
    ok = [r for r in group if r.summary() is not None]
    first = (ok or list(group))[0]
    head = _head(first)
    setup = first.config.setup_parts()
    fig = group_figure(group)
    if fig is None:
        errors = sorted({r.error_type or "error" for r in group})
        return head + ("-",) * 9 + ("; ".join(setup + [f"all {len(group)} processes failed: "
                                                       + ", ".join(errors)]),)
    sums = [r.summary() for r in ok]
    pooled = [t for r in ok for t in r.step_times_s]
    tflops = first.achieved_tflops()
    scale = fig.mean / (sums[0].throughput * first.units_per_sample)
    mfu_cell = _mfu_cell(first)
    if mfu_cell != "-":
        mfu_cell = f"{mfu(first).datasheet * scale:.1%}"
    firsts = [r.first_step_s for r in ok if r.first_step_s is not None]
    mems = [r.memory.get("allocated_peak_bytes") or 0 for r in ok]
    notes = list(setup)
    seen = set()
    for r in ok:  # each kind of flag once, as the first process that raised it words it
        for f in flags(r):
            if f.split()[0] not in seen:
                seen.add(f.split()[0])
                notes.append(f)
    failed = [r for r in group if r.summary() is None]
    if failed:
        notes.append(f"{len(failed)} process(es) failed: "
                     + ", ".join(sorted({r.error_type or "error" for r in failed})))
    return head + (
        f"{fmt_num(fig.mean)} {_unit(first)}",
        fmt_pct(percentile([x.rel_halfwidth for x in sums], 50)),
        fig.cell,
        f"{fmt_ms(percentile(pooled, 50))} ({fmt_ms(percentile(pooled, 5))}-"
        f"{fmt_ms(percentile(pooled, 95))})",
        "/".join(str(x.steps) for x in sums),
        fmt_num(tflops * scale if tflops is not None else None, 3),
        mfu_cell,
        f"{percentile(firsts, 50):.2f}" if firsts else "-",
        f"{max(mems) / GIB:.1f}" if any(mems) else "-",
        "; ".join(notes),
    )


def records_table(records: Sequence, title: str = "Results") -> Table:
    """Any record kind, one row each: what it measured, its status and its headline figure."""
    rows = tuple((r.id, r.kind, r.config.label, r.status,
                  fmt_num(r.headline()) if r.headline() is not None else "-",
                  _short_error(r) if r.status != "ok" else "") for r in records)
    return Table(title, ("id", "kind", "config", "status", "figure", "error"), rows)


def _pivot(records: Iterable[ThroughputRecord], row: Callable[[ThroughputRecord], str],
           col: Callable[[ThroughputRecord], str]) -> tuple[list[str], list[str],
                                                            dict[tuple[str, str], ThroughputRecord]]:
    rows, cols, cells = [], [], {}
    for r in records:
        rk, ck = row(r), col(r)
        if rk not in rows:
            rows.append(rk)
        if ck not in cols:
            cols.append(ck)
        cells[(rk, ck)] = r  # a later record of the same cell wins (e.g. a --resume rerun)
    return rows, cols, cells


def classic_cnn_table(records: Sequence[ThroughputRecord]) -> Table:
    """The classic-cnn view on one GPU, in the tf_cnn_benchmarks study's layout: img/s per model,
    compiled with its factor over eager.

    Image models only (the table is in images/s), and one batch and layout per model and
    precision: the latest eager record's (else the latest record's), so that a factor over
    eager never compares two batch sizes or layouts when a store holds several.
    """
    # PyTorch only: JAX's figures are not PyTorch's compiled column, and have their own view.
    recs = [r for r in records if r.config.mode == "train" and _image_model(r.config.model)
            and r.config.framework == "torch"]

    def shape(r: ThroughputRecord) -> tuple[int, bool]:
        return r.config.batch_size, r.config.channels_last

    has_eager = {(r.config.model, r.config.precision) for r in recs if _compile(r) == "eager"}
    pick: dict[tuple[str, str], tuple[int, bool]] = {}
    for r in recs:  # oldest first: the latest eager record's wins, else the latest record's
        k = (r.config.model, r.config.precision)
        if _compile(r) == "eager" or k not in has_eager:
            pick[k] = shape(r)
    recs = [r for r in recs if pick[(r.config.model, r.config.precision)] == shape(r)]
    rows, _, cells = _pivot(recs, lambda r: r.config.model,
                            lambda r: f"{r.config.precision} {_compile(r)}")
    means = group_means(recs)
    precisions = [p for p in ("fp16", "bf16", "fp32", "tf32")
                  if any(r.config.precision == p for r in recs)]
    compiled = sorted({_compile(r) for r in recs} - {"eager"})
    cols = ["model"]
    for p in precisions:
        cols += [f"{p} batch", f"{p} eager"] + [f"{p} {c} (x eager)" for c in compiled]
    out = []
    for m in rows:
        line = [m]
        for p in precisions:
            eager = cells.get((m, f"{p} eager"))
            any_rec = eager or next((cells.get((m, f"{p} {c}")) for c in compiled
                                     if (m, f"{p} {c}") in cells), None)
            line.append(str(any_rec.config.batch_size) if any_rec else "-")
            line.append(_img_s(eager, means))
            for c in compiled:
                rec = cells.get((m, f"{p} {c}"))
                text = _img_s(rec, means)
                if rec and eager and rec.id in means and eager.id in means:
                    text += f" ({means[rec.id][0] / means[eager.id][0]:.2f})"
                line.append(text)
        out.append(tuple(line))
    return Table("Training throughput, images/s, 1 GPU (the layout of the 2020 tf_cnn_benchmarks "
                 "study; factor over eager in parentheses)", tuple(cols), tuple(out))


def _image_model(model: str) -> bool:
    """By the registry, so that failed records (no unit measured) are judged too."""
    from dlbench.models import get_model  # the registry imports torch (--help)
    try:
        return get_model(model).kind == "image"
    except UnknownModelError:  # a model this version does not know: keep its rows
        return True


def ms_per_batch_table(records: Sequence[ThroughputRecord], device: str) -> Table:
    """The ms-per-batch view, as the classic per-model scripts print it: ms per batch (mean step
    time), eval and train, one row per precision."""
    rows, _, cells = _pivot(records, lambda r: r.config.precision,
                            lambda r: f"{r.config.model} {r.config.mode}")
    means = group_means(records)
    models = list(dict.fromkeys(r.config.model for r in records))
    cols = ["device", "setup"] + [f"{m} {mode}" for m in models for mode in ("eval", "train")]
    out = []
    for prec in rows:
        line = [device, prec.upper()]
        for m in models:
            for mode in ("eval", "train"):
                rec = cells.get((prec, f"{m} {mode}"))
                mean_s = means[rec.id][1] if rec is not None and rec.id in means else None
                line.append(fmt_ms(mean_s) if mean_s else (rec.error_type if rec else "-"))
        out.append(tuple(line))
    return Table("ms per batch, batch 16 (as the classic per-model scripts time it: eval = "
                 "forward, train = forward + sum().backward())", tuple(cols), tuple(out))


def _img_s(r: ThroughputRecord | None, means: dict | None = None) -> str:
    if r is None:
        return "-"
    if means is not None:  # a --repeat group's mean (of the latest group, as _pivot keeps)
        return fmt_num(means[r.id][0]) if r.id in means else (r.error_type or "error")
    s = r.summary()
    return fmt_num(s.throughput) if s else (r.error_type or "error")


def group_means(records: Sequence[ThroughputRecord]) -> dict[str, tuple[float, float]]:
    """Per ok record id: samples per second and mean step time, where every process of a
    ``--repeat`` group maps to the means over its group's ok processes (the published layouts
    show one figure per cell: the group's, not its last process's)."""
    out = {}
    for group in repeat_groups(records):
        sums = [r.summary() for r in group if r.summary() is not None]
        if not sums:
            continue
        fig = (stats_mean([x.throughput for x in sums]), stats_mean([x.mean_s for x in sums]))
        for r in group:  # a failed process of a group that has a figure shows the group's
            out[r.id] = fig
    return out


def group_cells(records: Sequence) -> dict[str, str]:
    """Per record of a ``--repeat`` group: its group's across-process cell (``±1.2% (3)``,
    :attr:`GroupFigure.cell`), shown beside the group's mean where a layout has one figure per
    cell; records measured alone have none."""
    out = {}
    for group in repeat_groups(records):
        fig = group_figure(group) if group[0].repeat_group is not None else None
        if fig is not None:
            out.update((r.id, fig.cell) for r in group)
    return out


#: The note of a layout whose cells show --repeat groups.
GROUP_NOTE = ("a --repeat group's cell is the mean of its fresh processes (torchrun jobs) with "
              "the 95% interval across them and their count, e.g. ±1.2% (3)")


def _gib(n: int | None) -> str:
    return "-" if not n else f"{n / GIB:.2f}"


def batch_sweep_table(records: Sequence[ThroughputRecord],
                      title: str = "Memory and throughput against batch size") -> Table:
    """A batch-size sweep: per setup, one row per batch, in batch order, OOM points marked.

    Memory columns: the allocated and reserved peaks, the peak as a share of the device, and
    what it is made of where it can be told apart (parameters, gradients, optimizer state,
    activations = peak minus those and the input batch). ``x b0`` is the throughput over the
    setup's smallest batch that ran: where it stops growing, a larger batch buys nothing.
    """
    def setup(r: ThroughputRecord) -> tuple:
        c = r.config
        # the compile cell also says where cuDNN's heuristics picked (no autotuning)
        compiled = _compile(r) + ("" if getattr(c, "autotune", True) else " no-autotune")
        return (c.model, c.mode, c.precision, _layout(r), compiled, c.optimizer,
                getattr(c, "checkpointing", False))

    groups: dict[tuple, list[ThroughputRecord]] = {}
    for r in records:
        groups.setdefault(setup(r), []).append(r)
    cols = ("model", "mode", "prec", "layout", "compile", "batch", "throughput", "x b0",
            "alloc GiB", "reserved GiB", "% device", "params", "grads", "optim", "activ",
            "status")
    rows = []
    for key, recs in groups.items():
        base = None
        for r in sorted(recs, key=lambda r: r.config.batch_size):
            head = tuple(str(k) for k in key[:5]) + (str(r.config.batch_size),)
            s = r.summary()
            if s is None:
                mark = "OOM" if r.error_type == "oom" else (r.error_type or "error")
                rows.append(head + ("-",) * 9 + (mark,))
                continue
            base = base or s.throughput
            m = r.memory
            alloc, total = m.get("allocated_peak_bytes"), m.get("device_total_bytes")
            unit = {"images": "img/s", "sequences": "seq/s", "tokens": "tok/s"}.get(r.unit, "/s")
            rows.append(head + (
                f"{fmt_num(s.throughput * r.units_per_sample)} {unit}",
                f"{s.throughput / base:.2f}",
                _gib(alloc), _gib(m.get("reserved_peak_bytes")),
                f"{alloc / total:.0%}" if alloc and total else "-",
                _gib(m.get("params_bytes")), _gib(m.get("grads_bytes")),
                _gib(m.get("optimizer_state_bytes")), _gib(m.get("activations_bytes")),
                "ok" + (f" ({'; '.join(flags(r))})" if flags(r) else ""),
            ))
    notes = ("OOM: the batch did not fit (stored as a row); activations = allocated peak minus "
             "parameters, gradients, optimizer state and the input batch",)
    return Table(title, cols, tuple(rows), notes)


def latest_searches(records: Sequence) -> list:
    """One ``maxbatch`` record per setup and device: the latest that found a batch, else the
    latest (a search interrupted and resumed, or corrected after its measurement, leaves
    several)."""
    best: dict[tuple, object] = {}
    for r in records:
        key = (r.config.key(), env_key(r.env))
        if r.ok or key not in best or not best[key].ok:
            best[key] = r
    return list(best.values())


def maxbatch_table(found: Sequence, measured: Sequence[ThroughputRecord] = (),
                   title: str = "Largest batch that fits") -> Table:
    """One row per ``maxbatch`` search: the batch found, the bracket, its memory and throughput.

    ``found`` holds :class:`~dlbench.records.maxbatch.MaxBatchRecord`; ``measured`` throughput
    records (and, for a search under a strategy, scaling records), matched to a search by setup
    and batch. ``vs smaller batch``: the throughput at the largest batch against the fastest
    smaller batch of the same setup in ``measured`` (the largest batch is not always the
    fastest). The probes column lists every probe. A search under a strategy says it in the
    options (``fsdp x2``): its batch is per replica, its peak rank 0's.
    """
    by_key = {r.config.key(): r for r in measured if r.ok}
    # A measurement at the best batch that failed (out of memory where the short probe fitted)
    # and was never corrected: said in the throughput cell, not left blank.
    failed = {r.config.key(): r for r in measured if not r.ok}
    by_setup: dict[str, list[ThroughputRecord]] = {}  # the same setup at any batch
    for r in measured:
        if r.ok:
            by_setup.setdefault(_setup_key(r), []).append(r)
    cols = ("model", "mode", "prec", "options", "largest batch", "first OOM", "peak GiB",
            "% device", "throughput", "±95%", "vs smaller batch", "probes")
    rows = []
    for rec in found:
        c = rec.config.base
        opts = [o for o, on in (("NHWC", c.channels_last), (f"compile={c.compiled_as}", c.compile),
                                (c.optimizer, True), (getattr(c, "checkpoint_label", ""), True),
                                ("no-autotune", not getattr(c, "autotune", True)))
                if on and o]
        par = getattr(rec.config, "parallel", None)
        if par is not None:  # the strategy the batch fits under, on its GPUs, with its levers
            opts.append(" ".join([strategy_cell(par), f"x{par.gpus}"]
                                 + [lever for lever in ("offload", "fp8") if getattr(par, lever)]))
        probes = ", ".join(f"{p.batch} {'ok' if p.fits else p.outcome.upper()}"
                           for p in rec.probes)
        best = rec.best_probe()
        peak = best.allocated_peak_bytes if best else None
        total = best.device_total_bytes if best else None
        at = rec.config.at(rec.best_batch).key() if rec.ok else None
        t = by_key.get(at)
        s = t.summary() if t is not None else None
        lost = failed.get(at) if t is None else None
        unit = {"images": "img/s", "sequences": "seq/s", "tokens": "tok/s"}.get(
            t.unit if t is not None else "", "/s")
        rows.append((
            c.model, c.mode, c.precision, " ".join(opts),
            str(rec.best_batch) if rec.ok else f"{rec.error_type}: {(rec.error or '')[:60]}",
            str(rec.first_oom_batch) if rec.first_oom_batch else "-",
            _gib(peak), f"{peak / total:.0%}" if peak and total else "-",
            f"{fmt_num(s.throughput * t.units_per_sample)} {unit}" if s else
            f"{(lost.error_type or 'error').upper()} when measured" if lost else "-",
            fmt_pct(s.rel_halfwidth) if s else "-",
            _vs_smaller(t, by_setup.get(_setup_key(t), [])) if t is not None else "-",
            probes,
        ))
    notes = ("each probe is three training steps in a fresh process; the largest batch fits and "
             "the first OOM does not, so the boundary lies between them; peak = allocated peak "
             "of the probe at the largest batch",)
    if any(getattr(r.config, "parallel", None) is not None for r in found):
        notes += ("under a strategy (fsdp x2 ...) each probe is a torchrun job of all its GPUs, "
                  "an out-of-memory on any rank does not fit, the batch is per data-parallel "
                  "replica and the peak is rank 0's",)
    return Table(title, cols, tuple(rows), notes)


def _batch_of(r: ThroughputRecord) -> int:
    """A record's batch: per device, or per replica of a scaling job."""
    return getattr(r.config, "base", r.config).batch_size


def _setup_key(r: ThroughputRecord) -> str:
    """The config's identity with the batch left out (a scaling job's per-replica batch)."""
    c = r.config
    if hasattr(c, "base"):
        return replace(c, base=replace(c.base, batch_size=1)).key()
    return replace(c, batch_size=1).key()


def _vs_smaller(at: ThroughputRecord, same_setup: Sequence[ThroughputRecord]) -> str:
    """``+2.5% vs 1024``: ``at`` against the fastest smaller batch among ``same_setup``
    (successful records of its setup)."""
    smaller = [r for r in same_setup if _batch_of(r) < _batch_of(at)]
    if not smaller:
        return "-"
    best = max(smaller, key=lambda r: r.summary().throughput)
    ratio = at.summary().throughput / best.summary().throughput
    return f"{ratio - 1:+.1%} vs {_batch_of(best)}"


def _gpu_telemetry(record) -> bool:
    """Whether ``record`` sampled a GPU: the energy table's columns are all GPU figures, so a
    CPU run (whose telemetry is the host's load alone) would fill it with dashes."""
    tele = getattr(record, "telemetry", None) or {}
    return bool(tele.get("gpus") or (tele.get("summary") or {}).get("gpus"))


def energy_table(records: Sequence[ThroughputRecord], title: str = "Energy and telemetry") -> Table:
    """Power, energy per sample and what the GPU did during each measured window (from the
    record's telemetry; results without GPU telemetry show "-")."""
    cols = ("model", "mode", "batch", "prec", "mean W", "max W", "idle W", "energy J", "J/sample",
            "samples/J", "SM MHz", "max °C", "util %", "NVML GiB", "throttled", "energy from")
    rows = []
    for r in records:
        c = getattr(r.config, "base", r.config)  # a scaling record's config wraps its base
        tele = getattr(r, "telemetry", None) or {}
        summ = tele.get("summary") or {}
        tot = summ.get("total") or {}
        gpus = summ.get("gpus") or []

        def mean_of(key: str) -> float | None:
            vals = [g[key] for g in gpus if g.get(key) is not None]
            return sum(vals) / len(vals) if vals else None

        mem = [g["max_mem_used_bytes"] for g in gpus if g.get("max_mem_used_bytes") is not None]
        temps = [g["max_temp_c"] for g in gpus if g.get("max_temp_c") is not None]
        count = getattr(r.config, "gpus", None)  # a data-parallel run: its GPUs and strategy
        rows.append((
            c.model + (f" x{count} {r.config.strategy}" if count else ""), c.mode,
            str(c.batch_size), c.precision, fmt_num(tot.get("mean_power_w"), 3),
            fmt_num(tot.get("max_power_w"), 3),
            fmt_num(tot.get("idle_power_w"), 3) + (" *" if summ.get("idle_settled") is False
                                                   else ""),
            fmt_num(tot.get("energy_j"), 4), fmt_num(tot.get("j_per_sample"), 3),
            fmt_num(tot.get("samples_per_j"), 3),
            fmt_num(mean_of("mean_sm_clock_mhz"), 4), fmt_num(max(temps) if temps else None, 3),
            fmt_num(mean_of("mean_util_gpu_pct"), 3),
            f"{sum(mem) / GIB:.1f}" if mem else "-",
            ", ".join(summ.get("throttled") or []) or ("-" if not gpus else "no"),
            "+".join(tot.get("methods") or []) or "-",
        ))
    notes = ("over the measured window, summed over GPUs; energy from the NVML energy counter "
             "('counter') or integrated power ('power'); idle W is the mean power before the "
             "benchmark started, once it had settled (* = it had not within the wait, so it "
             "reads high); NVML GiB is the device's used memory, all processes",)
    return Table(title, cols, tuple(rows), notes)


# -- MFU and device ceilings ---------------------------------------------------------------------
def _mfu_cell(r: ThroughputRecord) -> str:
    """Datasheet MFU as a percentage, or "-" where it would mislead (reasons: mfu_table)."""
    m = mfu(r)
    return "-" if m.datasheet is None else f"{m.datasheet:.1%}"


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{x:.1%}"


def mfu_table(records: Sequence[ThroughputRecord], peaks: dict | None = None,
              roofs: object | None = None, title: str = "MFU", *,
              peak_records: Sequence | None = None) -> Table:
    """Achieved TFLOP/s and MFU against the datasheet and the measured ceiling, with reasons;
    with ``roofs`` (measure.roofline.Roofs) the arithmetic intensity and the bound too. With
    ``peak_records`` (stored ``dlbench peak`` records) each result's measured ceiling is picked
    by :func:`dlbench.measure.mfu.pick_ceiling` (its own card's, sustained first), and the note
    says whose it is where it is not its own card's sustained one; else from ``peaks``."""
    from dlbench.measure.roofline import point_for  # slow: torch's FLOP counter, triton (--help)
    cols = ("model", "mode", "batch", "prec", "TFLOP/s", "datasheet peak", "MFU (datasheet)",
            "measured peak", "MFU (measured)", "FLOP/byte", "bound",
            "note (why no MFU; whose ceiling)")
    rows = []
    for r in records:
        m = mfu(r, peaks, peak_records=peak_records)
        pt = point_for(r, roofs) if m.achieved_tflops is not None else None
        c = r.config
        rows.append((c.model, c.mode, str(c.batch_size), c.precision, fmt_num(m.achieved_tflops, 3),
                     fmt_num(m.datasheet_peak_tflops, 4), _pct(m.datasheet),
                     fmt_num(m.measured_peak_tflops, 4), _pct(m.measured),
                     fmt_num(pt.intensity, 3) if pt else "-", (pt.bound or "-") if pt else "-",
                     "; ".join(m.notes)))
    notes = ("MFU = model TFLOP/s (counted FLOPs, optimizer excluded) / peak; datasheet peaks are "
             "dense (fp32 = non-tensor, tf32/fp16/bf16 = tensor cores); the measured peak is the "
             "matmul ceiling 'dlbench peak' measured on the result's own card (else on a card "
             "of its model, said in the note): its latest sustained run (the best per-shape "
             "mean after a warm-up), else its latest burst run (the best per-shape median, "
             "said in the note)",
             "FLOP/byte uses the byte model of dlbench.measure.roofline (an upper bound of the "
             "intensity); bound = which roof is lower at that intensity")
    return Table(title, cols, tuple(rows), notes)


def peak_figures(r) -> str:
    """An ok peak point's figures in a line: the mean beside the median for a sustained point,
    the median alone for a burst one (its ceiling figure)."""
    if r.method == "sustained":
        return f"mean {fmt_num(r.mean())}, median {fmt_num(r.median())} {r.unit}"
    return f"{fmt_num(r.median())} {r.unit}"


def _method_cell(c: dict) -> str:
    return (f"sustained ({c['warmup_s']:g} s warm-up)"
            if c["method"] == "sustained" else c["method"])


def peak_table(records: Sequence, title: str = "Device ceilings") -> Table:
    """``dlbench peak``: one row per precision or verb (and method, where both timed one), the
    ceiling and the point that set it, then every failed point with its reason."""
    rows = []
    for key, c in ceilings(list(records)).items():
        sustained = c["method"] == "sustained"
        set_by = c["ceiling_label"]
        if sustained and c["label"] != set_by:  # the largest median is another shape's
            set_by = f"mean: {set_by}; median: {c['label']}"
        rows.append((key, _method_cell(c),
                     f"{fmt_num(c['mean'])} {c['unit']}" if sustained else "-",
                     f"{fmt_num(c['median'])} {c['unit']}", set_by,
                     f"{fmt_num(c['best'])} {c['unit']}", c.get("best_label") or c["label"],
                     str(c.get("points", 1)), str(c["iterations"])))
    for r in records:
        if not r.ok:
            rows.append((r.config.label, r.method, "-", "-", f"{r.error_type}: "
                         f"{(r.error or '').splitlines()[0][:80]}", "-", "-", "-", "-"))
    return Table(title, ("ceiling", "method", "mean", "median", "set by", "best", "best at",
                         "points", "iters"),
                 tuple(rows),
                 ("sustained: the ceiling is the largest per-point mean (mamf-finder's figure: "
                  "a fixed number of iterations a shape, after a device warm-up), the largest "
                  "median beside it; burst: the ceiling is the largest per-point median of "
                  "short windows with no warm-up (the method before sustained; memory and "
                  "transfer points are timed so under either); best = the fastest single "
                  "iteration of any point; points = shapes or buffers swept; iters = timed "
                  "iterations of the ceiling's point; copy counts read + write bytes; "
                  "transfers count the buffer once",))


# -- scaling and collectives (tf_cnn_benchmarks' multi-GPU and NVLink layouts; nccl-tests') -----
def _scale_row_key(r) -> str:
    c = r.config
    return f"{c.model}|{c.base.precision}|{c.strategy}|{c.base.batch_size}"


def scaling_table(records: Sequence, interconnect: str = "default") -> Table:
    """The tf_cnn_benchmarks study's layout: img/s at each GPU count, the factor over 1 GPU in
    parentheses, and the scaling efficiency (factor / GPUs) at the largest count. One row per
    model, precision and strategy; records of other interconnect profiles are left to
    :func:`interconnect_table`."""
    recs = [r for r in records if getattr(r, "kind", "") == "scaling"
            and r.config.interconnect == interconnect]
    rows, _, cells = _pivot(recs, _scale_row_key, lambda r: str(r.config.gpus))
    means, spread = group_means(recs), group_cells(recs)
    counts = sorted({r.config.gpus for r in recs})
    cols = ["model", "precision", "strategy", "batch/GPU"] + \
        [f"{n} GPU" if n == 1 else f"{n} GPUs" for n in counts] + ["efficiency"]
    out = []
    for key in rows:
        model, prec, strat, batch = key.split("|")
        line = [model, prec, strat, batch]
        base = cells.get((key, "1"))
        base_s = means.get(base.id) if base else None
        eff = "-"
        for n in counts:
            rec = cells.get((key, str(n)))
            text = _img_s(rec, means)
            s = means.get(rec.id) if rec else None
            if s and base_s and n != 1:
                f = scaling_factor(s[0], base_s[0])
                text += f" ({f:.2f})"
                eff = f"{scaling_efficiency(f, n):.1%} at {n}"
            if rec is not None and rec.id in spread:
                text += f" {spread[rec.id]}"
            line.append(text)
        line.append(eff)
        out.append(tuple(line))
    # Image models in images/s as the study printed them; a language model's samples are its
    # sequences (its tokens/s are in the strategy table).
    unit = "images/s" if all(r.unit == "images" for r in recs) else \
        "sequences/s" if all(r.unit == "tokens" for r in recs) else "samples/s"
    return Table(f"Training throughput, {unit}, by GPU count ({interconnect}; factor over 1 GPU "
                 "in parentheses)", tuple(cols), tuple(out),
                 ("throughput = all ranks' samples over the slowest rank's window; batch is per "
                  "GPU (weak scaling); efficiency = factor / GPUs",) + (
                     (GROUP_NOTE,) if spread else ()))


def interconnect_table(records: Sequence, baseline: str = "default") -> Table:
    """The tf_cnn_benchmarks study's NVLink layout: each profile's img/s with its factor over
    ``baseline`` in parentheses, per model / precision / strategy and GPU count."""
    recs = [r for r in records if getattr(r, "kind", "") == "scaling"]
    rows, _, cells = _pivot(recs, _scale_row_key,
                            lambda r: f"{r.config.interconnect}|{r.config.gpus}")
    profiles = list(dict.fromkeys(r.config.interconnect for r in recs))
    profiles = [baseline] * (baseline in profiles) + [p for p in profiles if p != baseline]
    # Only the GPU counts and rows that some other profile was measured at: the baseline's
    # other figures are in the scaling table.
    other = [r for r in recs if r.config.interconnect != baseline]
    counts = sorted({r.config.gpus for r in other})
    measured = {_scale_row_key(r) for r in other}
    cols = ["model", "precision", "strategy"] + [f"{p} {n}G" for p in profiles for n in counts]
    means = group_means(recs)  # a --repeat group's cell is the mean of its jobs
    out = []
    for key in (k for k in rows if k in measured):
        model, prec, strat, _ = key.split("|")
        line = [model, prec, strat]
        for p in profiles:
            for n in counts:
                rec = cells.get((key, f"{p}|{n}"))
                ref = cells.get((key, f"{baseline}|{n}"))
                text = _img_s(rec, means)
                s, rs = (means.get(rec.id) if rec else None), (means.get(ref.id) if ref else None)
                if s and rs and p != baseline:
                    text += f" ({s[0] / rs[0]:.3f})"
                line.append(text)
        out.append(tuple(line))
    return Table(f"Interconnect A/B, images/s (factor over {baseline} in parentheses)",
                 tuple(cols), tuple(out),
                 ("no-p2p = NCCL_P2P_DISABLE=1 (no NVLink / PCIe peer-to-peer); no-shm = "
                  "NCCL_SHM_DISABLE=1; no-ib = NCCL_IB_DISABLE=1",))


def setup_of(r: ThroughputRecord) -> tuple:
    """Everything of a throughput config but its batch size: one point of a batch sweep."""
    c = r.config
    return (c.model, c.mode, c.precision, c.method, c.channels_last, c.compiled_as,
            c.optimizer, c.input_size)


def has_batch_sweep(records: Sequence[ThroughputRecord]) -> bool:
    sizes: dict[tuple, set[int]] = {}
    for r in records:
        sizes.setdefault(setup_of(r), set()).add(r.config.batch_size)
    return any(len(s) > 1 for s in sizes.values())


def tables_for(records: Sequence, device: str, view: str | None = None,
               peak_records: Sequence = ()) -> list[Table]:
    """The tables for records of any kinds, each kind in its own layout.

    ``view`` None: every layout whose data exists (the HTML report); else the throughput
    table plus that one layout (``classic-cnn``, ``ms-per-batch``), as the terminal shows a suite.
    ``peak_records``: the store's ``dlbench peak`` records, the ceilings generation's roofline
    and prefill MFU are read against (those among ``records`` otherwise).
    """
    by_kind: dict[str, list] = {}
    for r in records:
        by_kind.setdefault(r.kind, []).append(r)
    out: list[Table] = []
    thr = by_kind.pop("throughput", [])
    if thr:
        out.append(throughput_table(thr, f"Throughput on {device}"))
        if any(r.config.tuned for r in thr):
            # function-level: tuning.levers imports torch (dlbench --help)
            from dlbench.report.tuned_tables import tuned_table
            out.append(tuned_table(thr))
        # The published layouts compare like with like: tuned picks stay out of them.
        plain = [r for r in thr if not r.config.tuned]
        ok_train = [r for r in plain if r.config.mode == "train" and r.config.method == "standard"]
        if ok_train and view in (None, "classic-cnn"):
            out.append(classic_cnn_table(ok_train))
        fwd_bwd = [r for r in plain if r.config.method == "fwd-bwd"]
        if fwd_bwd and view in (None, "ms-per-batch"):
            out.append(ms_per_batch_table(fwd_bwd, device))
        if view is None and has_batch_sweep(thr):
            out.append(batch_sweep_table(thr))
        if any(_gpu_telemetry(r) for r in thr):
            out.append(energy_table(thr))
        if any(r.profile for r in thr):
            out += kernel_tables(thr)
    for kind, recs in by_kind.items():
        if kind == "scaling":
            profiles = list(dict.fromkeys(r.config.interconnect for r in recs))
            out += [scaling_table(recs, p) for p in profiles]
            if len(profiles) > 1:
                out.append(interconnect_table(recs))
            if lm_records(recs):
                out.append(strategy_table(recs, list(peak_records) or by_kind.get("peak", [])))
            if has_figure(recs):
                out.append(exposed_comm_table(recs))
            if any(_gpu_telemetry(r) for r in recs):
                out.append(energy_table(recs, "Energy and telemetry, data-parallel runs (the "
                                              "first host's GPUs summed; batch per GPU)"))
        elif kind == "comm":
            out += comm_tables(recs)
        elif kind == "peak":
            out.append(peak_table(recs))
        elif kind == "maxbatch":
            searches = latest_searches(recs)
            # a search under a strategy measured its batch as a scaling job
            measured = list(thr) + by_kind.get("scaling", [])
            out.append(maxbatch_table(searches, measured))
            if any(r.config.parallel is not None for r in searches):
                out.append(largest_batch_table(searches, measured))
        elif kind == "train":
            out += train_tables(recs)
        elif kind == "net":
            out += [net_table(recs), loss_table(recs)]
        elif kind == "generate":
            out += generate_tables(recs, list(peak_records) or by_kind.get("peak", []), device)
        elif kind == "serve":
            out += serve_tables(recs, device)
        else:
            out.append(records_table(recs, f"{kind} results"))
    out += framework_tables(records)  # PyTorch vs JAX, where both ran a setup
    return out
