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

from dlbench.measure.mfu import datasheet_mfu, device_key, measured_peaks
from dlbench.records.scaling import scaling_factor
from dlbench.report.cards import own_host_peaks
from dlbench.report.flags import flags
from dlbench.report.table import Table, fmt_num


def lm_records(records: Sequence[Any]) -> list[Any]:
    """The scaling records of models counted in tokens (language models), failures among them:
    a failed record never learnt its unit, so the registry says what its model counts."""
    return [r for r in records if getattr(r, "kind", "") == "scaling" and _counts_tokens(r)]


def latest_per_config(records: Sequence[Any]) -> list[Any]:
    """One record per config, in the order the configs first appear: its latest ok record, else
    its latest failure (a rerun replaces an earlier figure)."""
    by: dict[str, list[Any]] = {}
    for r in records:
        by.setdefault(r.config.key(), []).append(r)
    return [([r for r in rs if r.ok] or rs)[-1] for rs in by.values()]


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


def _one_gpu_name(c: Any) -> str:
    """How the factor names a one-GPU record of other strategy or levers: ``fsdp``,
    ``fsdp offload``, ``ddp fp8``."""
    return " ".join([c.strategy] + [n for n, on in (("offload", c.offload), ("fp8", c.fp8)) if on])


def strategy_cell(c: Any) -> str:
    """The strategy, with fsdp+tp's TP degree (tp's is its GPU count)."""
    return f"{c.strategy} tp={c.tp}" if c.strategy == "fsdp+tp" else c.strategy


def per_gpu_tflops(r: Any) -> float | None:
    """Model TFLOP/s per GPU: the job's counted FLOPs per second over its GPUs (the FLOPs of
    the distinct samples: a TP group's batch once)."""
    ach = r.achieved_tflops() if r.ok else None
    return None if ach is None else ach / r.config.gpus


def strategy_table(records: Sequence[Any], peak_records: Sequence[Any] = ()) -> Table:
    """The strategy table of the LM scaling records among ``records``."""
    recs = lm_records(records)
    ones = {}
    for r in recs:
        if r.ok and r.config.gpus == 1:
            ones.setdefault((r.config.base.key(), r.config.strategy, _lever_key(r.config)), r)
    rows = []
    for r in recs:
        c, b = r.config, r.config.base
        # A sequence's tokens: what the record counted (the model's default length if unset).
        seq = r.units_per_sample if r.ok else b.input_size
        label = (c.model, str(seq or "-"), b.precision, strategy_cell(c), _levers(c),
                 str(c.gpus), str(b.batch_size))
        s = r.summary()
        if s is None:
            rows.append(label + (r.error_type or "error",) + ("-",) * 6)
            continue
        per_gpu = per_gpu_tflops(r)
        ds = meas = None
        if per_gpu is not None and (r.env or {}).get("accelerator") == "cuda":
            ds = datasheet_mfu(per_gpu, r.env, b.precision)[0]
            # the ceiling of a card this run used where the store has one (a store may merge
            # several hosts' runs), else the latest of its GPU model
            peaks = measured_peaks(own_host_peaks(r, peak_records))
            peak = peaks.get(device_key(r.env), {}).get(b.precision)
            meas = per_gpu / peak if peak else None
        # The same strategy and levers at one GPU; else ddp's or fsdp's with the same fp8
        # (offload is fsdp's alone), then without it.
        levers = _lever_key(c)
        stand_ins = [(c.strategy, levers), ("ddp", (False, c.fp8)), ("fsdp", (False, c.fp8)),
                     (c.strategy, (False, False)), ("ddp", (False, False)),
                     ("fsdp", (False, False))]
        one = next((ones[k] for k in ((b.key(),) + si for si in stand_ins) if k in ones), None)
        factor = (f"{scaling_factor(s.throughput, one.summary().throughput):.2f}"
                  + ("" if (one.config.strategy, _lever_key(one.config)) == (c.strategy, levers)
                     else f" ({_one_gpu_name(one.config)})")
                  if one is not None and c.gpus > 1 else "-")
        mem = (r.memory or {}).get("allocated_peak_bytes")
        tokens = s.throughput * r.units_per_sample
        rows.append(label + (
            fmt_num(tokens), fmt_num(tokens / c.gpus), fmt_num(per_gpu, 3),
            "-" if ds is None else f"{ds:.1%}", "-" if meas is None else f"{meas:.1%}",
            "-" if not mem else f"{mem / 2**30:.1f}", factor + (
                f"; {'; '.join(flags(r))}" if flags(r) else "")))
    cols = ("model", "seq", "prec", "strategy", "levers", "GPUs", "batch/replica", "tok/s",
            "tok/s/GPU", "TFLOP/s/GPU", "MFU (datasheet)", "MFU (measured)", "peak GiB (rank 0)",
            "x 1 GPU; flags")
    return Table("Language-model training by strategy", cols, tuple(rows), (
        "batch/replica = the sequences one data-parallel replica trains on per step: a GPU "
        "under ddp and fsdp, a TP group of GPUs under tp and fsdp+tp; "
        "tok/s = the distinct tokens of all replicas (a TP group's batch once) over the slowest "
        "rank's window; tok/s/GPU = tok/s over all GPUs; TFLOP/s/GPU = the model's "
        "counted FLOPs (6N + 12LHT per token for the transformers LMs) per second per GPU; MFU "
        "against the GPU's datasheet dense peak and the measured matmul ceiling of the latest "
        "'dlbench peak' run on one of the run's cards, else on its GPU model ('-': none, or a "
        "CPU); x 1 GPU = the factor of tok/s "
        "over the same strategy at 1 GPU, else over ddp's or fsdp's (named); compiled/block = each block of the stack compiled on its own" + _lever_notes(recs),))


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
