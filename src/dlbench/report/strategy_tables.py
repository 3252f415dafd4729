"""Language-model training across strategies (ddp, fsdp, tp, fsdp+tp, ...): what a cluster
sizer reads.

One row per ``dlbench scale`` record of a model counted in tokens: tokens/s in all and per GPU,
model TFLOP/s per GPU and MFU against the GPU's datasheet dense peak and the measured matmul
ceiling, rank 0's peak memory, and the factor over the same strategy's record at 1 GPU.
MFU counts the model's FLOPs per token as the record counted them (6N + 12LHT for the
transformers LMs: docs/throughput.md); it is None (``-``) on a CPU, which has no datasheet peak.
Under tensor parallelism a TP group's GPUs train on one batch: the record counts its tokens once
(:meth:`dlbench.records.scaling.ScalingRecord.samples_per_step`), so the per-GPU figures divide
the job's distinct tokens by all its GPUs, never a GPU's share counted once per GPU.
"""

from __future__ import annotations

from typing import Any, Sequence

from dlbench.measure.mfu import datasheet_mfu, device_key
from dlbench.records.base import repeat_groups
from dlbench.records.scaling import scaling_factor
from dlbench.report.cards import own_card_peaks
from dlbench.report.exposed_tables import NOTE as EXPOSED_NOTE
from dlbench.report.exposed_tables import exposed_cell, has_figure
from dlbench.report.flags import flags
from dlbench.report.groups import ONE_PROCESS, group_figure
from dlbench.report.table import Table, fmt_num


def lm_records(records: Sequence[Any]) -> list[Any]:
    """The scaling records of models counted in tokens (language models), failures among them:
    a failed record never learnt its unit, so the registry says what its model counts."""
    return [r for r in records if getattr(r, "kind", "") == "scaling" and _counts_tokens(r)]


def latest_per_config(records: Sequence[Any]) -> list[Any]:
    """One record per config, in the order the configs first appear: its latest ok record, else
    its latest failure (a rerun replaces an earlier figure); a ``--repeat`` group stays whole
    (every job of the group the latest record belongs to), so its row keeps its spread."""
    by: dict[str, list[Any]] = {}
    for r in records:
        by.setdefault(r.config.key(), []).append(r)
    out = []
    for rs in by.values():
        last = ([r for r in rs if r.ok] or rs)[-1]
        group = getattr(last, "repeat_group", None)
        out += [r for r in rs if r.repeat_group == group] if group is not None else [last]
    return out


def _counts_tokens(r: Any) -> bool:
    if r.ok or r.unit == "tokens":
        return r.unit == "tokens"
    from dlbench.models import get_model  # the registry imports torch (--help stays light)
    try:
        return get_model(r.config.model).unit == "tokens"
    except Exception:  # a source that no longer resolves here: not known to be a language model
        return False


#: The strategies that compile each block of the stack on its own under --compile.
BLOCK_COMPILED = ("fsdp", "tp", "fsdp+tp")


def _levers(c: Any) -> str:
    b = c.base
    compiled = "compiled/block" if c.strategy in BLOCK_COMPILED else "compiled"
    parts = [p for p, on in ((b.checkpoint_label, b.checkpointing), (compiled, b.compile),
                             ("offload", c.offload), ("fp8", c.fp8)) if on]
    return ", ".join(parts) or "-"


def _lever_key(c: Any) -> tuple[bool, bool]:
    """The sharded strategies' levers of a config (``--offload``, ``--fp8``): a factor over one
    GPU compares records that agree on them, or says which one it took instead."""
    return (c.offload, c.fp8)


def _one_gpu_name(strategy: str, levers: tuple[bool, bool]) -> str:
    """How the factor names a one-GPU record of other strategy or levers (its strategy and
    :func:`_lever_key`): ``fsdp``, ``fsdp offload``, ``ddp fp8``."""
    return " ".join([strategy] + [n for n, on in zip(("offload", "fp8"), levers) if on])


def strategy_cell(c: Any) -> str:
    """The strategy, with fsdp+tp's TP degree (tp's is its GPU count)."""
    return f"{c.strategy} tp={c.tp}" if c.strategy == "fsdp+tp" else c.strategy


def per_gpu_tflops(r: Any) -> float | None:
    """Model TFLOP/s per GPU: the job's counted FLOPs per second over its GPUs (the FLOPs of
    the distinct samples: a TP group's batch once)."""
    ach = r.achieved_tflops() if r.ok else None
    return None if ach is None else ach / r.config.gpus


def _group_rate(group: Sequence[Any]) -> float | None:
    """Samples per second of a record, or of a ``--repeat`` group the mean over its ok jobs."""
    rates = [x.throughput for x in (r.summary() for r in group) if x is not None]
    return sum(rates) / len(rates) if rates else None


def strategy_table(records: Sequence[Any], peak_records: Sequence[Any] = ()) -> Table:
    """The strategy table of the LM scaling records among ``records``: one row per record, or
    per ``--repeat`` group (its jobs' mean, with an '±95% jobs' column across them)."""
    recs = lm_records(records)
    groups = repeat_groups(recs)
    repeated = any(g[0].repeat_group is not None for g in groups)
    exposed = has_figure(recs)  # a column where a record measured it (older tables as before)
    ones = {}
    for g in groups:
        r = next((x for x in g if x.ok), None)
        if r is not None and r.config.gpus == 1:
            ones.setdefault((r.config.base.key(), r.config.strategy, _lever_key(r.config)),
                            _group_rate(g))
    rows = []
    for g in groups:
        r = next((x for x in g if x.ok), g[-1])
        c, b = r.config, r.config.base
        # A sequence's tokens: what the record counted (the model's default length if unset).
        seq = r.units_per_sample if r.ok else b.input_size
        label = (c.model, str(seq or "-"), b.precision, strategy_cell(c), _levers(c),
                 str(c.gpus), str(b.batch_size))
        fig = group_figure(g) if g[0].repeat_group is not None else None
        across = (fig.cell if fig is not None else ONE_PROCESS,) if repeated else ()
        s = r.summary()
        if s is None:
            what = r.error_type or "error"
            if len(g) > 1:
                what = f"all {len(g)} jobs failed: " + ", ".join(
                    sorted({x.error_type or "error" for x in g}))
            rows.append(label + (what,) + ("-",) * 6 + across + ("-",) * exposed)
            continue
        rate = _group_rate(g)  # a group's mean; a record's own figure
        scale = rate / s.throughput
        per_gpu = per_gpu_tflops(r)
        per_gpu = None if per_gpu is None else per_gpu * scale
        ds = meas = None
        if per_gpu is not None and (r.env or {}).get("accelerator") == "cuda":
            ds = datasheet_mfu(per_gpu, r.env, b.precision)[0]
            # the ceiling of a card this run used where the store has one (a store may merge
            # several hosts' runs), else the latest of its GPU model
            peaks = own_card_peaks(r, peak_records)
            peak = peaks.get(device_key(r.env), {}).get(b.precision)
            meas = per_gpu / peak if peak else None
        # The same strategy and levers at one GPU; else ddp's or fsdp's with the same fp8
        # (offload is fsdp's alone), then without it.
        levers = _lever_key(c)
        stand_ins = [(c.strategy, levers), ("ddp", (False, c.fp8)), ("fsdp", (False, c.fp8)),
                     (c.strategy, (False, False)), ("ddp", (False, False)),
                     ("fsdp", (False, False))]
        one = next((k for k in ((b.key(),) + si for si in stand_ins) if k in ones), None)
        factor = (f"{scaling_factor(rate, ones[one]):.2f}"
                  + ("" if one[1:] == (c.strategy, levers) else f" ({_one_gpu_name(*one[1:])})")
                  if one is not None and c.gpus > 1 else "-")
        mem = max(((x.memory or {}).get("allocated_peak_bytes") or 0 for x in g if x.ok),
                  default=0)  # a group's: the largest of its jobs'
        tokens = rate * r.units_per_sample
        notes = flags(r)
        failed = sorted({x.error_type or "error" for x in g if not x.ok})
        if failed:  # failures are data: a group's row says which of its jobs it lacks
            notes = notes + [f"{sum(not x.ok for x in g)} of {len(g)} jobs failed: "
                             + ", ".join(failed)]
        rows.append(label + (
            fmt_num(tokens), fmt_num(tokens / c.gpus), fmt_num(per_gpu, 3),
            "-" if ds is None else f"{ds:.1%}", "-" if meas is None else f"{meas:.1%}",
            "-" if not mem else f"{mem / 2**30:.1f}", factor + (
                f"; {'; '.join(notes)}" if notes else "")) + across
            + ((exposed_cell(g),) if exposed else ()))
    cols = ("model", "seq", "prec", "strategy", "levers", "GPUs", "batch/replica", "tok/s",
            "tok/s/GPU", "TFLOP/s/GPU", "MFU (datasheet)", "MFU (measured)", "peak GiB (rank 0)",
            "x 1 GPU; flags") + (("±95% jobs",) if repeated else ()) + (
            ("exposed comm ms (% of step)",) if exposed else ())
    return Table("Language-model training by strategy", cols, tuple(rows), (
        "batch/replica = the sequences one data-parallel replica trains on per step: a GPU "
        "under ddp and fsdp, a TP group of GPUs under tp and fsdp+tp; "
        "tok/s = the distinct tokens of all replicas (a TP group's batch once) over the slowest "
        "rank's window; tok/s/GPU = tok/s over all GPUs; TFLOP/s/GPU = the model's "
        "counted FLOPs (6N + 12LHT per token for the transformers LMs) per second per GPU; MFU "
        "against the GPU's datasheet dense peak and the measured matmul ceiling of the latest "
        "'dlbench peak' run on one of the run's cards, else on its GPU model ('-': none, or a "
        "CPU); x 1 GPU = the factor of tok/s "
        "over the same strategy at 1 GPU, else over ddp's or fsdp's (named); compiled/block = each block of the stack compiled on its own" + _lever_notes(recs),) + ((
        "a --repeat group is one row: its fresh torchrun jobs' mean figure, rank 0's largest "
        "peak, and '±95% jobs' the t-interval across them with their count ('1 process': "
        "measured once, run-to-run variance not in the figure)",) if repeated else ())
        + ((EXPOSED_NOTE,) if exposed else ()))


def _lever_notes(recs: Sequence[Any]) -> str:
    """What the levers of the sharded strategies mean, where a row has one (a table without
    them reads as before they existed)."""
    notes = [text for lever, text in (
        ("offload", "offload = FSDP2's shards (parameters, gradients, optimizer state) in host "
                    "memory, the optimizer stepping on the CPU"),
        ("fp8", "fp8 = the linear layers' matmuls in fp8 (torchao's float8 training; the LM "
                "head in the run's precision)")) if any(getattr(r.config, lever) for r in recs)]
    if notes:
        notes.append("a factor's one-GPU record has the row's levers, else it is named")
    return "".join(f"; {n}" for n in notes)


#: Per-second units of a figure, by what a record counts.
_UNITS = {"images": "img/s", "sequences": "seq/s", "tokens": "tok/s"}


def largest_batch_table(searches: Sequence[Any], measured: Sequence[Any] = ()) -> Table:
    """Largest batch per strategy: the ``dlbench maxbatch --strategy`` searches among
    ``searches`` (one per setup, as :func:`dlbench.report.tables.latest_searches` picks them),
    each with the figure of the job ``measured`` at its batch (a scaling record of the same
    setup at that batch per replica, where one ran)."""
    found = [r for r in searches if getattr(r.config, "parallel", None) is not None]
    at = {r.config.key(): r for r in measured if getattr(r, "kind", "") == "scaling" and r.ok}
    rows = []
    for rec in found:
        c = rec.config.parallel
        b = c.base
        t = at.get(rec.config.at(rec.best_batch).key()) if rec.ok else None
        s = t.summary() if t is not None else None
        best = rec.best_probe()
        peak = best.allocated_peak_bytes if best else None
        seq = t.units_per_sample if t is not None and t.unit == "tokens" else b.input_size
        unit = _UNITS.get(t.unit, "/s") if t is not None else ""
        rows.append((
            c.model, str(seq or "-"), b.precision, strategy_cell(c), _levers(c), str(c.gpus),
            str(rec.best_batch) if rec.ok else f"{rec.error_type}: {(rec.error or '')[:60]}",
            str(rec.first_oom_batch) if rec.first_oom_batch else "-",
            "-" if not peak else f"{peak / 2**30:.1f}",
            f"{fmt_num(s.throughput * t.units_per_sample)} {unit}" if s else "-",
            f"{fmt_num(s.throughput * t.units_per_sample / c.gpus)} {unit}" if s else "-",
            str(len(rec.probes))))
    cols = ("model", "seq", "prec", "strategy", "levers", "GPUs", "largest batch/replica",
            "first OOM", "peak GiB (rank 0)", "throughput there", "per GPU", "probes")
    return Table("Largest batch per strategy", cols, tuple(rows), (
        "largest batch/replica = the most sequences (samples) one data-parallel replica trains "
        "on per step without running out of memory under that strategy on that many GPUs (a "
        "GPU under ddp and fsdp, a TP group under tp and fsdp+tp); each probe is a torchrun "
        "job of all the GPUs, and an out-of-memory on any rank means the batch does not fit; "
        "first OOM = the smallest batch seen not to fit; throughput there = the job measured "
        "at the largest batch with the normal stopping rule ('-': not measured)",))
