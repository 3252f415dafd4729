"""Records to flat rows (CSV, one table per record kind) and to JSON documents. Pure: the
caller writes the text.

Each kind has its own CSV columns (:func:`columns`), so a column that does not apply to a kind
(a collective's bus bandwidth in a throughput table, a model in a collective's) does not exist
in that kind's file rather than standing empty. Every kind's columns come in five groups, in
this order: the identity of the row, the config (what was measured), the result (the figures,
empty on a failed row), the environment, and the error (empty on an ok row). docs/schema.md
documents every column; a test checks that an export of a store holding every kind fills them.

A CSV is opened in spreadsheets, and its strings come from stores (model and host names, error
messages): a string cell that a spreadsheet would evaluate as a formula (one starting with ``=``,
``+``, ``-``, ``@``, a tab or a carriage return) is written with a leading ``'``, as OWASP
recommends against CSV injection (:func:`csv_text`). Numbers are written as they are (-0.5 stays
a number), as is a string that is a plain number; JSON holds every string as stored.
"""

from __future__ import annotations

import csv
import io
import json
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

from dlbench.measure.overlap import summarise, unmeasured_reason
from dlbench.measure.stats import Summary
from dlbench.records import RECORD_TYPES, SCHEMA_VERSION
from dlbench.report.cards import card_uuids
from dlbench.report.flags import short_window, window_cap
from dlbench.report.generate_figures import datasheet_roof, prefill_mfu
from dlbench.telemetry.summary import energy_mismatch

#: Version of the export layouts (CSV columns and the JSON document). It changes when a column
#: is renamed or removed, or a JSON key changes meaning; adding a column does not change it.
EXPORT_VERSION = 2

#: The kinds in the order an export writes them.
KINDS = ("throughput", "scaling", "comm", "peak", "maxbatch", "train", "net", "generate",
         "serve")


@dataclass(frozen=True)
class Column:
    name: str
    group: str                              # identity | config | result | env | error
    get: Callable[[Any, Summary | None], Any]
    doc: str
    #: For a config column that applies to some rows of its kind only (a matmul's shape in the
    #: peak table): which. Elsewhere the cell is empty.
    only: Callable[[Any], bool] | None = None

    def applies(self, r: Any) -> bool:
        return self.only is None or self.only(r)


def _c(group: str, name: str, get: Callable[[Any, Summary | None], Any], doc: str,
       only: Callable[[Any], bool] | None = None) -> Column:
    return Column(name, group, get, doc, only)


def _first_line(text: str | None) -> str:
    return text.splitlines()[0] if text else ""


def _telemetry_total(r: Any) -> dict[str, Any]:
    return ((getattr(r, "telemetry", None) or {}).get("summary") or {}).get("total") or {}


def _throttled(r: Any) -> str | None:
    summ = (getattr(r, "telemetry", None) or {}).get("summary")
    if not summ or not summ.get("gpus"):
        return None  # no GPU telemetry: unknown, not "no"
    return ";".join(summ.get("throttled") or []) or "no"


def step_flags(r: Any, s: Summary | None) -> str | None:
    """Why a step-timed figure deserves care, ``;``-joined: ``noisy`` (the interval missed its
    target), ``time_cap`` / ``step_cap`` (a limit ended the window, whatever its interval),
    ``short`` (fewer measured steps than the window's minimum), ``cv`` (spread >=
    10%), ``throttled``, ``energy_mismatch`` (the energy counter's mean power and the power
    samples' disagree beyond their tolerance), ``one_process`` (no repeat group: run-to-run
    variance unmeasured); ``none`` when there is nothing to flag."""
    if s is None:
        return None
    out = []
    if not r.converged():
        out.append("noisy")
    cap = window_cap(r)
    if cap:                      # flagged whatever the interval: a limit ended the window
        out.append(cap)
    if short_window(r):
        out.append("short")
    if s.noisy:
        out.append("cv")
    throttled = _throttled(r)
    if throttled and throttled != "no":
        out.append("throttled")
    if energy_mismatch(getattr(r, "telemetry", None)):
        out.append("energy_mismatch")
    if not getattr(r, "repeat_group", None):
        out.append("one_process")
    return ";".join(out) or "none"


def _ms(x: float | None) -> float | None:
    return None if x is None else x * 1e3


def _fin(x: float | None) -> float | None:
    return x if x is None or math.isfinite(x) else None


# -- column groups shared by several kinds -----------------------------------------------------
IDENTITY = (
    _c("identity", "kind", lambda r, s: r.kind, "record kind"),
    _c("identity", "id", lambda r, s: r.id, "result id (12 hex digits)"),
    _c("identity", "run_id", lambda r, s: r.run_id, "the run (one command) that stored it"),
    _c("identity", "created_at", lambda r, s: r.created_at, "UTC, ISO 8601"),
    _c("identity", "status", lambda r, s: r.status, "ok or error"),
    _c("identity", "config_key", lambda r, s: r.config.key(),
       "the config's identity: equal keys measured the same thing (compare matches on it)"),
    _c("identity", "schema_version", lambda r, s: r.schema_version, "the record layout version"),
)

ERROR = (
    _c("error", "error_type", lambda r, s: r.error_type or "",
       "oom, nan, unsupported, fatal, crashed, timeout, exception, interrupted, not_converged"),
    _c("error", "error", lambda r, s: _first_line(r.error), "first line of the error message"),
)


def _env(r: Any) -> dict[str, Any]:
    return getattr(r, "env", None) or {}


def _gpus(r: Any) -> list[dict[str, Any]]:
    return _env(r).get("gpus") or []


GPU_ENV = (
    _c("env", "accelerator", lambda r, s: _env(r).get("accelerator"), "cuda or cpu"),
    _c("env", "gpu", lambda r, s: _gpus(r)[0].get("name") if _gpus(r) else None,
       "GPU model (the first visible GPU's)"),
    _c("env", "gpu_uuid", lambda r, s: " ".join(card_uuids(r)) or None,
       "UUID of each card the result ran on (space-separated): which physical card, so two "
       "results of one GPU model can be told apart"),
    _c("env", "gpu_count", lambda r, s: _env(r).get("gpu_count"), "GPUs visible on the host"),
    _c("env", "driver", lambda r, s: _env(r).get("driver"), "NVIDIA driver"),
    _c("env", "cuda", lambda r, s: _env(r).get("cuda_runtime"), "CUDA runtime torch was built with"),
    _c("env", "torch", lambda r, s: (_env(r).get("packages") or {}).get("torch"), "torch version"),
    _c("env", "cpu_model", lambda r, s: _env(r).get("cpu_model"), "host CPU"),
    _c("env", "host", lambda r, s: _env(r).get("hostname"), "host name"),
)

CPU_ENV = tuple(c for c in GPU_ENV if c.name in ("accelerator", "torch", "cpu_model", "host"))


def _base_config(get_base: Callable[[Any], Any]) -> tuple[Column, ...]:
    """The per-device setup (a ThroughputConfig) that scaling, maxbatch and net wrap."""
    b = get_base
    return (
        _c("config", "model", lambda r, s: b(r).model, "model name or source"),
        _c("config", "mode", lambda r, s: b(r).mode, "train or eval"),
        _c("config", "precision", lambda r, s: b(r).precision, "fp32 (no TF32), tf32, fp16, bf16"),
        _c("config", "compile", lambda r, s: b(r).compiled_as,
           "eager, or the torch.compile mode (+loss: the loss compiled with the model); "
           "jit for JAX"),
        _c("config", "channels_last", lambda r, s: b(r).channels_last, "NHWC memory format"),
        _c("config", "optimizer", lambda r, s: b(r).optimizer, "sgd or adamw"),
        _c("config", "input_size", lambda r, s: b(r).input_size or "default",
           "image side or sequence length; default: the model's own"),
    )


def _stop_config(get_base: Callable[[Any], Any]) -> tuple[Column, ...]:
    b = get_base
    return (
        _c("config", "confidence", lambda r, s: b(r).stop.confidence, "interval confidence level"),
        _c("config", "target_ci", lambda r, s: b(r).stop.target_rel_ci,
           "the window ran until the interval's relative half-width reached this"),
        _c("config", "max_time_s", lambda r, s: b(r).stop.max_seconds, "the window's time cap"),
    )


def _window_result(energy: bool = True) -> tuple[Column, ...]:
    """Figures of a window of timed steps (throughput, scaling)."""
    cols = [
        _c("result", "samples_per_s", lambda r, s: s and s.throughput,
           "samples over the window's time (all ranks' samples over the slowest rank's time)"),
        _c("result", "samples_per_s_low", lambda r, s: s and s.throughput_low,
           "lower end of the interval"),
        _c("result", "samples_per_s_high", lambda r, s: s and _fin(s.throughput_high),
           "upper end of the interval (empty: unbounded)"),
        _c("result", "rel_halfwidth", lambda r, s: s and _fin(s.rel_halfwidth),
           "interval half-width over the mean step time"),
        _c("result", "interval_method", lambda r, s: s and getattr(s, "interval_method", None),
           "how the interval was computed (batch-means, ess, none)"),
        _c("result", "unit", lambda r, s: r.unit, "what a unit is: samples, images, tokens"),
        _c("result", "units_per_s", lambda r, s: s and s.throughput * r.units_per_sample,
           "units (e.g. tokens) per second"),
        _c("result", "mean_ms", lambda r, s: s and _ms(s.mean_s), "mean step time"),
        _c("result", "median_ms", lambda r, s: s and _ms(s.median_s), "median step time"),
        _c("result", "p5_ms", lambda r, s: s and _ms(s.p5_s), "5th percentile step time"),
        _c("result", "p95_ms", lambda r, s: s and _ms(s.p95_s), "95th percentile step time"),
        _c("result", "cv", lambda r, s: s and s.cv, "step-time stdev over mean"),
        _c("result", "steps", lambda r, s: s and s.steps, "measured steps"),
        _c("result", "window_s", lambda r, s: s and s.total_s, "measured window (device clock)"),
        _c("result", "stop_reason", lambda r, s: r.stop_reason, "what ended the window"),
        _c("result", "converged", lambda r, s: s and r.converged(),
           "the interval reached its target"),
        _c("result", "flags", step_flags,
           "noisy, time_cap, step_cap, short, cv, throttled, energy_mismatch, one_process (;-joined), "
           "or none"),
        _c("result", "first_step_s", lambda r, s: r.first_step_s,
           "first step (compilation, autotuning), kept out of the figure"),
        _c("result", "build_s", lambda r, s: r.build_s, "model build and move to the device"),
        _c("result", "flops_per_sample", lambda r, s: r.flops_per_sample,
           "counted model FLOPs per sample (empty: not countable)"),
        _c("result", "tflops", lambda r, s: s and r.achieved_tflops(),
           "counted FLOPs x samples/s, TFLOP/s"),
        _c("result", "allocated_peak_bytes", lambda r, s: r.memory.get("allocated_peak_bytes"),
           "peak memory held by tensors"),
        _c("result", "reserved_peak_bytes", lambda r, s: r.memory.get("reserved_peak_bytes"),
           "peak memory reserved by the caching allocator"),
        _c("result", "final_loss", lambda r, s: r.final_loss, "loss of the last step"),
    ]
    if energy:
        cols += [
            _c("result", "energy_j", lambda r, s: _telemetry_total(r).get("energy_j"),
               "GPU energy over the window, all sampled GPUs (empty: telemetry off or no NVML)"),
            _c("result", "mean_power_w", lambda r, s: _telemetry_total(r).get("mean_power_w"),
               "energy over window time"),
            _c("result", "j_per_sample", lambda r, s: _telemetry_total(r).get("j_per_sample"),
               "energy per sample"),
            _c("result", "throttled", lambda r, s: _throttled(r),
               "throttle reasons seen in the window (;-joined), no, or empty: unknown"),
        ]
    return tuple(cols)


# -- the kinds ---------------------------------------------------------------------------------
def _tp(r: Any) -> Any:
    return r.config


def _wrapped(r: Any) -> Any:
    return r.config.base


THROUGHPUT = (
    *_base_config(_tp),
    _c("config", "batch_size", lambda r, s: r.config.batch_size, "samples per step"),
    _c("config", "method", lambda r, s: r.config.method, "standard or fwd-bwd"),
    _c("config", "optimizer_impl", lambda r, s: r.config.optimizer_impl,
       "default, foreach or fused"),
    _c("config", "cuda_graph", lambda r, s: r.config.cuda_graph, "whole step in one CUDA graph"),
    _c("config", "checkpointing", lambda r, s: r.config.checkpointing, "activation checkpointing"),
    _c("config", "checkpoint_policy", lambda r, s: r.config.checkpoint_policy,
       "full or selective (what checkpointed blocks recompute)"),
    _c("config", "attention", lambda r, s: r.config.attention or "auto", "SDPA backend"),
    _c("config", "autotune", lambda r, s: r.config.autotune, "cuDNN autotuning"),
    _c("config", "tuned", lambda r, s: r.config.tuned, "tuned mode's pick"),
    _c("config", "device", lambda r, s: r.config.device, "device asked for"),
    *_stop_config(_tp),
    *_window_result(),
)

def _comm_profiles(r: Any) -> tuple:
    return tuple(getattr(r, "rank_comm_profile", ()) or ()) if r.ok else ()


def _xc(r: Any, name: str) -> Any:
    """A field of a scaling record's exposed-communication summary; None where unmeasured."""
    x = summarise(_comm_profiles(r))
    return None if x is None else getattr(x, name)


def _exposed_comm() -> tuple[Column, ...]:
    """Exposed communication of a scaling record (dlbench.measure.overlap), from the steps each
    rank profiled after its window."""
    return (
        _c("result", "exposed_comm_ms", lambda r, s: _ms(_xc(r, "per_step_s")),
           "per profiled step, the time collectives ran with no compute beside them: mean "
           "over the ranks' steps (empty: not measured, see comm_unmeasured)"),
        _c("result", "exposed_comm_share", lambda r, s: _xc(r, "share"),
           "exposed communication over the profiled steps' wall time, all ranks"),
        _c("result", "exposed_comm_worst_share", lambda r, s: _xc(r, "worst_share"),
           "the largest one rank's exposed share"),
        _c("result", "comm_ms", lambda r, s: _ms(_xc(r, "comm_per_step_s")),
           "per profiled step, the time any collective ran, hidden or not"),
        _c("result", "comm_profiled_ranks", lambda r, s: _xc(r, "ranks"),
           "ranks whose profile the exposed figures hold"),
        _c("result", "comm_profiled_steps", lambda r, s: _xc(r, "steps"),
           "steps each rank profiled (after one warm-up step under the profiler)"),
        _c("result", "comm_profile_source", lambda r, s: _xc(r, "source"),
           "what the profiler timed: cuda kernels (NCCL against compute kernels) or cpu "
           "operators (gloo's collectives against PyTorch's operators)"),
        _c("result", "comm_profile_cost_s",
           lambda r, s: max((p.get("cost_s") or 0.0 for p in _comm_profiles(r)), default=None),
           "the slowest rank's seconds for the profiled steps and the profiler, after the window"),
        _c("result", "comm_unmeasured",
           lambda r, s: (unmeasured_reason(_comm_profiles(r)) or "") if r.ok else "",
           "why a rank has no exposed figure (the first such rank), empty where all have"),
    )


SCALING = (
    *_base_config(_wrapped),
    _c("config", "batch_size", lambda r, s: r.config.base.batch_size, "samples per step per GPU"),
    _c("config", "gpus", lambda r, s: r.config.gpus, "GPUs in all"),
    _c("config", "nodes", lambda r, s: r.config.nnodes, "hosts the GPUs are spread over"),
    _c("config", "strategy", lambda r, s: r.config.strategy, "ddp, dp, ps, fsdp, tp or fsdp+tp"),
    _c("config", "tp", lambda r, s: r.config.tp_degree,
       "ranks per tensor-parallel group (1: data parallel only)"),
    _c("config", "checkpointing", lambda r, s: r.config.base.checkpointing,
       "activation checkpointing"),
    _c("config", "checkpoint_policy", lambda r, s: r.config.base.checkpoint_policy,
       "full or selective (what checkpointed blocks recompute)"),
    _c("config", "offload", lambda r, s: r.config.offload,
       "FSDP2's CPU offload of parameters, gradients and optimizer state (--offload)"),
    _c("config", "fp8", lambda r, s: r.config.fp8, "fp8 linear layers, torchao's (--fp8)"),
    _c("config", "interconnect", lambda r, s: r.config.interconnect, "interconnect profile"),
    _c("config", "bucket_mb", lambda r, s: r.config.bucket_mb, "DDP bucket size, MiB"),
    _c("config", "backend", lambda r, s: r.backend or r.config.backend,
       "collective backend used (nccl, gloo)"),
    _c("config", "global_batch", lambda r, s: r.config.base.batch_size * r.config.replicas,
       "samples per step, all GPUs (a tensor-parallel group's GPUs share one batch)"),
    *_stop_config(_wrapped),
    _c("result", "ranks", lambda r, s: len(r.rank_step_times_s) or None,
       "ranks whose step times the figure holds"),
    *_window_result(),
    *_exposed_comm(),
)

COMM = (
    _c("config", "op", lambda r, s: r.config.op, "collective"),
    _c("config", "bytes", lambda r, s: r.config.size_bytes, "nccl-tests' size column"),
    _c("config", "count", lambda r, s: r.count, "elements per rank's input buffer"),
    _c("config", "dtype", lambda r, s: r.config.dtype, "element type"),
    _c("config", "inplace", lambda r, s: r.config.inplace, "in-place buffers"),
    _c("config", "ranks", lambda r, s: r.config.ranks, "processes in all"),
    _c("config", "backend", lambda r, s: r.config.backend, "nccl or gloo"),
    _c("config", "interconnect", lambda r, s: r.config.interconnect, "interconnect profile"),
    _c("config", "iters", lambda r, s: r.config.iters,
       "timed samples (one iteration each in eager timing)"),
    _c("config", "warmup", lambda r, s: r.config.warmup, "untimed samples"),
    _c("config", "timing", lambda r, s: r.config.timing,
       "eager (a call and an event per iteration), batched (calls queued back to back) or graph "
       "(a CUDA graph replayed)"),
    _c("config", "iters_per_sample", lambda r, s: r.config.iters_per_sample,
       "iterations in one timed sample (1 in eager timing)"),
    _c("config", "api", lambda r, s: r.config.api,
       "torch (torch.distributed's collectives) or nccl (NCCL's own API, as nccl-tests)"),
    _c("config", "buffers", lambda r, s: r.config.buffers,
       "torch (PyTorch's caching allocator) or nccl (ncclMemAlloc, as nccl-tests)"),
    _c("config", "rotate", lambda r, s: "yes" if r.config.rotate else "no",
       "yes where each call of a sample worked on the next copy of its buffers (as nccl-tests), "
       "no where every call used one set (every record before the field)"),
    _c("env", "buffer_copies", lambda r, s: r.buffer_copies or 1,
       "copies of the buffers the calls cycled through (1: one set)"),
    _c("env", "stream", lambda r, s: r.stream if r.config.backend == "nccl" else "host",
       "the CUDA stream the timed calls went to: side (the job's own) or default (PyTorch's "
       "default stream, every record before the field); host on gloo"),
    _c("env", "called_in_place", lambda r, s: "yes" if r.called_in_place else "no",
       "yes where the collective was called with its output as its input: in-place rows, and "
       "torch.distributed's all_reduce and broadcast on every row"),
    _c("result", "time_us", lambda r, s: _us(r.time_s), "mean iteration time, averaged over ranks"),
    _c("result", "max_time_us", lambda r, s: _us(r.max_time_s), "the slowest rank's mean"),
    _c("result", "p50_us", lambda r, s: _us(r.p50_s),
       "median of the samples' time per iteration, each sample the slowest rank's"),
    _c("result", "p99_us", lambda r, s: _us(r.p99_s), "99th percentile of the same"),
    _c("result", "algbw_gbps", lambda r, s: _gb(r.algbw()), "algorithm bandwidth, GB/s (1e9)"),
    _c("result", "busbw_gbps", lambda r, s: _gb(r.busbw()), "bus bandwidth, GB/s (nccl-tests)"),
    _c("result", "wrong", lambda r, s: r.wrong, "elements that differ from the expected result"),
    _c("result", "algorithm", lambda r, s: r.algorithm,
       "the algorithm NCCL chose for the size (RING, TREE, NVLS...; from its TUNING log), or "
       "unknown"),
    _c("result", "protocol", lambda r, s: r.protocol,
       "the protocol NCCL chose (LL, LL128, SIMPLE), or unknown"),
    _c("result", "busbw_comparable", lambda r, s: _yes_no(r.busbw_comparable),
       "yes for ring, tree and PAT; no where NVLS or CollNet ran (busbw not comparable with a "
       "ring's); unknown"),
    _c("result", "nccl_version", lambda r, s: r.nccl_version or (
        _env(r).get("nccl") if r.config.backend == "nccl" else None),
       "the NCCL the ranks ran (the environment's, for records from before it was recorded); "
       "empty on gloo"),
)


def _yes_no(v: bool | None) -> str:
    return "unknown" if v is None else ("yes" if v else "no")


def _us(t: float | None) -> float | None:
    return None if t is None else t * 1e6


def _gb(b: float | None) -> float | None:
    return None if b is None else b / 1e9


def _matmul(r: Any) -> bool:
    return r.config.verb == "matmul"


PEAK = (
    _c("config", "verb", lambda r, s: r.config.verb, "matmul, copy, read, write, h2d, d2h, p2p"),
    _c("config", "precision", lambda r, s: r.config.precision, "matmul element type (matmul)",
       only=_matmul),
    _c("config", "shape", lambda r, s: "x".join(map(str, r.config.shape)) or None,
       "m x n x k (matmul)", only=_matmul),
    _c("config", "bytes", lambda r, s: r.config.nbytes or None,
       "buffer size (memory and transfer verbs)", only=lambda r: not _matmul(r)),
    _c("config", "pinned", lambda r, s: r.config.pinned, "page-locked host memory (h2d, d2h)",
       only=lambda r: r.config.verb in ("h2d", "d2h")),
    _c("config", "device", lambda r, s: r.config.device + (f"->{r.config.peer}" if r.config.peer
                                                           else ""),
       "device measured (p2p: source->destination)"),
    _c("config", "method", lambda r, s: r.config.method,
       "how the point was timed: sustained (a matmul: fixed iterations after a device warm-up, "
       "whose seconds the JSON export's config holds as warmup_s; its ceiling figure is the "
       "mean) or burst (short windows, no warm-up; its ceiling figure "
       "is the median: memory and transfer points, and every record stored before methods "
       "existed)"),
    _c("result", "unit", lambda r, s: r.unit, "TFLOP/s or GB/s"),
    _c("result", "median", lambda r, s: r.median(), "rate of the median iteration"),
    _c("result", "mean", lambda r, s: r.mean(),
       "rate of the mean iteration time (all timed iterations' work over their total time)"),
    _c("result", "best", lambda r, s: r.best(), "rate of the fastest iteration"),
    _c("result", "iterations", lambda r, s: len(r.times_s) or None, "timed iterations"),
    _c("result", "work", lambda r, s: r.work or None, "FLOPs or bytes per iteration"),
)


def _probe(r: Any, key: str) -> Any:
    p = r.best_probe()
    return None if p is None else getattr(p, key)


MAXBATCH = (
    *_base_config(_wrapped),
    _c("config", "checkpointing", lambda r, s: r.config.base.checkpointing,
       "activation checkpointing"),
    _c("config", "checkpoint_policy", lambda r, s: r.config.base.checkpoint_policy,
       "full or selective (what checkpointed blocks recompute)"),
    _c("config", "autotune", lambda r, s: r.config.base.autotune, "cuDNN autotuning"),
    _c("config", "start", lambda r, s: r.config.start or "default", "first batch probed"),
    _c("config", "limit", lambda r, s: r.config.limit or "none", "largest batch probed"),
    _c("config", "tolerance", lambda r, s: r.config.tolerance, "bisection stopping width"),
    _c("config", "strategy", lambda r, s: r.config.strategy,
       "none (one process on one device), or ddp, fsdp, tp, fsdp+tp: each probe a job of "
       "that strategy, the batch per data-parallel replica (--strategy)"),
    _c("config", "gpus", lambda r, s: r.config.gpus, "GPUs of each probe (1: one process)"),
    _c("config", "tp", lambda r, s: _par(r, "tp_degree", 1),
       "ranks per tensor-parallel group (1: none)"),
    _c("config", "offload", lambda r, s: _par(r, "offload", False),
       "FSDP2's CPU offload in the probes (--offload)"),
    _c("config", "fp8", lambda r, s: _par(r, "fp8", False),
       "fp8 linear layers in the probes (--fp8)"),
    _c("result", "best_batch", lambda r, s: r.best_batch,
       "largest batch that fits (per replica under a strategy)"),
    _c("result", "first_oom_batch", lambda r, s: r.first_oom_batch,
       "smallest batch seen not to fit"),
    _c("result", "probes", lambda r, s: len(r.probes), "batch sizes probed"),
    _c("result", "search_s", lambda r, s: r.search_wall_s, "wall time of the search"),
    _c("result", "allocated_peak_bytes", lambda r, s: _probe(r, "allocated_peak_bytes"),
       "peak tensor memory at the best batch"),
    _c("result", "device_total_bytes", lambda r, s: _probe(r, "device_total_bytes"),
       "device memory"),
)


def _par(r: Any, name: str, default: Any) -> Any:
    """A field of a largest-batch search's strategy, or ``default`` for one process."""
    par = getattr(r.config, "parallel", None)
    return default if par is None else getattr(par, name)


def _best_acc(r: Any) -> float | None:
    return max(r.eval_accuracy) if r.eval_accuracy else None


TRAIN = (
    _c("config", "dataset", lambda r, s: r.config.dataset, "dataset"),
    _c("config", "model", lambda r, s: r.config.model, "model"),
    _c("config", "batch_size", lambda r, s: r.config.batch_size, "samples per step per GPU"),
    _c("config", "gpus", lambda r, s: r.config.gpus, "data-parallel processes"),
    _c("config", "global_batch", lambda r, s: r.config.global_batch, "samples per step, all GPUs"),
    _c("config", "precision", lambda r, s: r.config.precision, "fp32, tf32, bf16, fp16"),
    _c("config", "loader", lambda r, s: r.config.loader, "gpu or dataloader"),
    _c("config", "workers", lambda r, s: r.config.workers, "DataLoader workers per GPU"),
    _c("config", "optimizer", lambda r, s: r.config.optimizer, "sgd or adamw"),
    _c("config", "augment", lambda r, s: r.config.augment, "random crop and flip"),
    _c("config", "target", lambda r, s: r.config.target, "accuracy that ends the run"),
    _c("config", "seed", lambda r, s: r.config.seed, "seed"),
    _c("config", "max_epochs", lambda r, s: r.config.max_epochs, "epoch cap"),
    _c("result", "lr", lambda r, s: r.lr, "peak learning rate used"),
    _c("result", "converged", lambda r, s: r.converged, "reached the target"),
    _c("result", "time_to_train_s", lambda r, s: r.time_to_train_s,
       "run start to the end of the evaluation that reached the target"),
    _c("result", "epochs_to_converge", lambda r, s: r.epochs_to_converge, "epochs to the target"),
    _c("result", "epochs", lambda r, s: r.epochs, "epochs trained"),
    _c("result", "run_s", lambda r, s: r.run_s, "run_start to run_stop"),
    _c("result", "init_s", lambda r, s: r.init_s, "init_start to init_stop"),
    _c("result", "first_epoch_s", lambda r, s: r.first_epoch_s, "first epoch's training time"),
    _c("result", "median_epoch_s", lambda r, s: r.median_epoch_s, "median of epochs 2+"),
    _c("result", "final_accuracy", lambda r, s: r.final_accuracy, "last evaluation"),
    _c("result", "best_accuracy", lambda r, s: _best_acc(r), "best evaluation"),
    _c("result", "train_samples_per_s",
       lambda r, s: r.train_samples_per_s() if r.epoch_times_s else None,
       "real-data training throughput, epochs 2+"),
    _c("result", "pipeline_samples_per_s", lambda r, s: r.pipeline_samples_per_s(),
       "the input pipeline alone"),
    _c("result", "synthetic_samples_per_s", lambda r, s: r.synthetic_samples_per_s(),
       "the model on synthetic data"),
    _c("result", "mlperf_log_passes",
       lambda r, s: None if r.compliance is None else r.compliance.get("passed"),
       "the MLPerf compliance checker's verdict on the run's log"),
    _c("result", "device", lambda r, s: r.device, "device used (cuda, cpu)"),
)


def _probe_get(r: Any, key: str) -> Any:
    return (r.probe or {}).get(key)


def _busiest(r: Any, i: int) -> float | None:
    b = r.busiest_bps()
    return None if b is None else b[i]


NET = (
    _c("config", "model", lambda r, s: r.config.base.model, "model"),
    _c("config", "batch_size", lambda r, s: r.config.base.batch_size, "samples per step per host"),
    _c("config", "precision", lambda r, s: r.config.base.precision, "fp32 or bf16"),
    _c("config", "optimizer", lambda r, s: r.config.base.optimizer, "sgd or adamw"),
    _c("config", "hosts", lambda r, s: r.config.hosts, "emulated hosts, one rank each"),
    _c("config", "strategy", lambda r, s: r.config.strategy, "ddp or ps"),
    _c("config", "link", lambda r, s: r.config.link, "the link as named"),
    _c("config", "rate_bps", lambda r, s: r.config.rate_bps or "unshaped", "bits/s per host"),
    _c("config", "delay_s", lambda r, s: r.config.delay_s, "one-way delay"),
    _c("config", "steps", lambda r, s: r.config.steps, "measured steps"),
    _c("config", "bucket_mb", lambda r, s: r.config.bucket_mb, "DDP bucket size, MiB"),
    _c("result", "samples_per_s", lambda r, s: s and s.throughput, "all hosts' samples per second"),
    _c("result", "samples_per_s_low", lambda r, s: s and s.throughput_low, "interval, low"),
    _c("result", "samples_per_s_high", lambda r, s: s and _fin(s.throughput_high),
       "interval, high"),
    _c("result", "interval_method", lambda r, s: s and getattr(s, "interval_method", None),
       "how the interval was computed"),
    _c("result", "step_ms", lambda r, s: _ms(r.step_s), "mean step time, slowest rank"),
    _c("result", "compute_ms", lambda r, s: _ms(r.compute_s), "compute-only step time"),
    _c("result", "busiest_host", lambda r, s: r.busiest_host(), "host that carried the most"),
    _c("result", "busiest_tx_bps", lambda r, s: _busiest(r, 0), "its sent bits/s"),
    _c("result", "busiest_rx_bps", lambda r, s: _busiest(r, 1), "its received bits/s"),
    _c("result", "rtt_s", lambda r, s: _probe_get(r, "rtt_s"), "link round-trip time"),
    _c("result", "goodput_bps", lambda r, s: _probe_get(r, "goodput_bps"), "TCP goodput"),
    _c("result", "param_count", lambda r, s: r.param_count, "model parameters"),
)


def _lat(r: Any, which: str, stat: str) -> float | None:
    """A latency figure of a generate record in ms: ``which`` ttft/tpot/e2e, ``stat`` a field
    of :class:`dlbench.measure.generation.Latency`."""
    lat = getattr(r, which)()
    return None if lat is None else _ms(getattr(lat, stat))


def _roof_gbs(r: Any) -> float | None:
    roof = datasheet_roof(r)
    return None if roof is None else roof.gbs


# A CSV row has no other records beside it, so the peaks here are the datasheet's; the tables
# add the measured ones (a `dlbench peak` run of the same device) where the store has them.
GENERATE = (
    _c("config", "model", lambda r, s: r.config.model, "model name or source"),
    _c("config", "batch_size", lambda r, s: r.config.batch_size, "prompts generated together"),
    _c("config", "prompt_len", lambda r, s: r.config.prompt_len, "tokens of each prompt"),
    _c("config", "output_len", lambda r, s: r.config.output_len,
       "tokens generated for each prompt (end-of-sequence ignored)"),
    _c("config", "precision", lambda r, s: r.config.precision, "fp32, fp16, bf16, fp8"),
    _c("config", "fp8_recipe", lambda r, s: r.config.fp8_recipe,
       "how fp8 quantizes the linear layers (--fp8-recipe): dynamic (fp8 weights and inputs, "
       "fp8 matmuls) or weight-only (fp8 weights, bf16 inputs and matmuls; labelled fp8-wo); "
       "dynamic, the default, on rows of other precisions, where it does not apply"),
    _c("config", "path", lambda r, s: r.config.path,
       "eager (model.generate()), static (static KV cache), graph (+ CUDA graph), compile "
       "(+ torch.compile)"),
    _c("config", "fuse", lambda r, s: r.config.fuse,
       "q/k/v and gate/up projections fused into one matmul each (--fuse)"),
    _c("config", "fold_gqa", lambda r, s: r.config.fold_gqa,
       "grouped-query decode attention folded: each key/value head read once (--fold-gqa)"),
    _c("config", "pair_key", lambda r, s: r.config.pair_key(),
       "the config's identity without the path: rows of one setup generated different ways"),
    _c("config", "device", lambda r, s: r.config.device, "device asked for"),
    _c("config", "warmup_requests", lambda r, s: r.config.warmup_requests,
       "untimed requests after the first"),
    _c("config", "seed", lambda r, s: r.config.seed, "seed of the weights and prompts"),
    *_stop_config(_tp),
    _c("result", "output_tokens_per_s", lambda r, s: s and s.throughput,
       "output tokens of the measured requests over their time (prefill included)"),
    _c("result", "output_tokens_per_s_low", lambda r, s: s and s.throughput_low,
       "lower end of the interval"),
    _c("result", "output_tokens_per_s_high", lambda r, s: s and _fin(s.throughput_high),
       "upper end of the interval (empty: unbounded)"),
    _c("result", "rel_halfwidth", lambda r, s: s and _fin(s.rel_halfwidth),
       "interval half-width over the mean request time"),
    _c("result", "interval_method", lambda r, s: s and getattr(s, "interval_method", None),
       "how the interval was computed (batch-means, ess, none)"),
    _c("result", "total_tokens_per_s", lambda r, s: r.total_tokens_per_s(),
       "prompt and output tokens over the window's time"),
    _c("result", "requests", lambda r, s: s and s.steps, "measured requests"),
    _c("result", "window_s", lambda r, s: s and s.total_s, "measured window (device clock)"),
    _c("result", "stop_reason", lambda r, s: r.stop_reason, "what ended the window"),
    _c("result", "converged", lambda r, s: s and r.converged(),
       "the interval reached its target"),
    _c("result", "flags", step_flags,
       "noisy, time_cap, step_cap, short, cv, throttled, energy_mismatch, one_process (;-joined), "
       "or none"),
    _c("result", "ttft_mean_ms", lambda r, s: _lat(r, "ttft", "mean_s"),
       "time to first token (prefill and the first token), mean over the requests"),
    _c("result", "ttft_median_ms", lambda r, s: _lat(r, "ttft", "median_s"), "its median"),
    _c("result", "ttft_p99_ms", lambda r, s: _lat(r, "ttft", "p99_s"), "its 99th percentile"),
    _c("result", "tpot_mean_ms", lambda r, s: _lat(r, "tpot", "mean_s"),
       "time per output token: a decode step's time, mean over every measured step"),
    _c("result", "tpot_median_ms", lambda r, s: _lat(r, "tpot", "median_s"), "its median"),
    _c("result", "tpot_p90_ms", lambda r, s: _lat(r, "tpot", "p90_s"), "its 90th percentile"),
    _c("result", "tpot_p99_ms", lambda r, s: _lat(r, "tpot", "p99_s"), "its 99th percentile"),
    _c("result", "decode_steps", lambda r, s: r.tpot() and r.tpot().n,
       "measured decode steps (the TPOT sample)"),
    _c("result", "e2e_mean_ms", lambda r, s: _lat(r, "e2e", "mean_s"),
       "a request end to end, mean"),
    _c("result", "e2e_p99_ms", lambda r, s: _lat(r, "e2e", "p99_s"),
       "a request end to end, 99th percentile"),
    _c("result", "decode_tokens_per_s", lambda r, s: r.decode_tokens_per_s(),
       "batch over the mean decode step: the decode phase alone"),
    _c("result", "prefill_tokens_per_s", lambda r, s: r.prefill_tokens_per_s(),
       "prompt tokens over the mean time to first token"),
    _c("result", "prefill_tflops", lambda r, s: r.prefill_tflops(),
       "counted matmul FLOPs of the prefill over the mean time to first token, TFLOP/s"),
    _c("result", "prefill_mfu_datasheet", lambda r, s: prefill_mfu(r).datasheet,
       "prefill_tflops over the datasheet dense peak of the precision, fp8's for fp8, bf16's "
       "for weight-only fp8 (whose matmuls run in bf16) (empty: CPU, or a GPU or precision the "
       "spec table lacks)"),
    _c("result", "decode_bytes_per_step", lambda r, s: r.decode_bytes_per_step(),
       "bytes a decode step must read: every weight once, as held (fp8: a byte each and their "
       "scales), the KV cache it attends to"),
    _c("result", "decode_gbps", lambda r, s: r.decode_gbs(),
       "decode_bytes_per_step over the mean TPOT, GB/s (1e9)"),
    _c("result", "datasheet_bandwidth_gbps", lambda r, s: _roof_gbs(r),
       "the GPU's datasheet memory bandwidth, GB/s (empty: CPU, or a GPU the table lacks)"),
    _c("result", "roofline_fraction_datasheet", lambda r, s: r.roofline_fraction(_roof_gbs(r)),
       "decode_gbps over datasheet_bandwidth_gbps"),
    _c("result", "first_step_s", lambda r, s: r.first_step_s,
       "the first request (compilation, graph capture, autotuning), kept out of the figures"),
    _c("result", "build_s", lambda r, s: r.build_s, "model build on the device (and weights load)"),
    _c("result", "allocated_peak_bytes", lambda r, s: r.memory.get("allocated_peak_bytes"),
       "peak memory held by tensors"),
    _c("result", "reserved_peak_bytes", lambda r, s: r.memory.get("reserved_peak_bytes"),
       "peak memory reserved by the caching allocator"),
    _c("result", "weights_bytes", lambda r, s: r.memory.get("weights_bytes"),
       "the model's parameters on the device, as held (fp8: their fp8 data and scales)"),
    _c("result", "kv_cache_bytes", lambda r, s: r.memory.get("kv_cache_bytes"),
       "the KV cache as allocated"),
    _c("result", "energy_j", lambda r, s: _telemetry_total(r).get("energy_j"),
       "GPU energy over the window (empty: telemetry off or no NVML)"),
    _c("result", "mean_power_w", lambda r, s: _telemetry_total(r).get("mean_power_w"),
       "energy over window time"),
    _c("result", "idle_power_w", lambda r, s: r.idle_power_w(),
       "GPU power before the model was built"),
    _c("result", "j_per_output_token", lambda r, s: r.energy_per_output_token_j(),
       "energy over the window's output tokens"),
    _c("result", "net_j_per_output_token", lambda r, s: r.net_energy_per_output_token_j(),
       "the same above the idle power"),
    _c("result", "throttled", lambda r, s: _throttled(r),
       "throttle reasons seen in the window (;-joined), no, or empty: unknown"),
)


def _dist(r: Any, which: str, stat: str) -> float | None:
    """A latency figure of a serve record in ms: ``which`` ttft/tpot/itl/e2e, ``stat`` a field of
    :class:`dlbench.measure.serving.Distribution`."""
    d = _once(r, which)
    return None if d is None else _ms(getattr(d, stat))


def _once(r: Any, method: str) -> Any:
    """``getattr(r, method)()``, computed once for the record however many columns show a
    part of it (eight columns a latency distribution, three a fraction and its interval): the
    results for the last record asked about are kept."""
    global _LAST_RESULTS
    record, results = _LAST_RESULTS
    if record is not r:
        results = {}
        _LAST_RESULTS = (r, results)
    if method not in results:
        results[method] = getattr(r, method)()
    return results[method]


#: The record :func:`_once` last computed for, and its results by method.
_LAST_RESULTS: tuple[Any, dict[str, Any]] = (None, {})


def _serve_latency(which: str, what: str) -> tuple[Column, ...]:
    cols = [_c("result", f"{which}_mean_ms", lambda r, s: _dist(r, which, "mean_s"),
               f"{what}, mean"),
            _c("result", f"{which}_median_ms", lambda r, s: _dist(r, which, "p50_s"), "its median"),
            _c("result", f"{which}_median_low_ms", lambda r, s: _dist(r, which, "p50_low_s"),
               "lower end of the median's 95% interval (order statistics; empty: unbounded)"),
            _c("result", f"{which}_median_high_ms", lambda r, s: _dist(r, which, "p50_high_s"),
               "upper end of the median's 95% interval (empty: unbounded)"),
            _c("result", f"{which}_p90_ms", lambda r, s: _dist(r, which, "p90_s"),
               "its 90th percentile"),
            _c("result", f"{which}_p99_ms", lambda r, s: _dist(r, which, "p99_s"),
               "its 99th percentile"),
            _c("result", f"{which}_p99_low_ms", lambda r, s: _dist(r, which, "p99_low_s"),
               "lower end of the p99's 95% interval (empty: unbounded)"),
            _c("result", f"{which}_p99_high_ms", lambda r, s: _dist(r, which, "p99_high_s"),
               "upper end of the p99's 95% interval (empty: too few samples to bound it)")]
    return tuple(cols)


def _good_fraction(r: Any, i: int) -> float | None:
    """The share of a serve record's requests within the SLO (0), or an end of its interval."""
    g = _once(r, "good_fraction")
    return g and g[i]


def _serve_flags(r: Any) -> str | None:
    out = []
    if r.failed():
        out.append("failed_requests")
    if r.client_behind():
        out.append("client_behind")
    if r.short_outputs():
        out.append("short_outputs")
    if (r.token_count or {}).get("output") == "events":
        out.append("tokens_as_events")
    if _throttled(r) not in (None, "no"):
        out.append("throttled")
    return ";".join(out) or "none"


def _serve_server(r: Any, key: str) -> Any:
    return (r.server or {}).get(key)


SERVE = (
    _c("config", "model", lambda r, s: r.config.model, "model name sent in the requests"),
    _c("config", "api", lambda r, s: r.config.api, "completions or chat"),
    _c("config", "load", lambda r, s: "concurrency" if r.config.concurrency else "rate",
       "concurrency (requests kept in flight) or rate (random arrivals)"),
    _c("config", "concurrency", lambda r, s: r.config.concurrency,
       "requests kept in flight (a concurrency point)",
       only=lambda r: r.config.concurrency is not None),
    _c("config", "rate", lambda r, s: r.config.rate,
       "requests per second offered (a rate point)", only=lambda r: r.config.rate is not None),
    _c("config", "burstiness",
       lambda r, s: r.config.burstiness if r.config.rate is not None else None,
       "shape of the gamma gaps between arrivals (1: Poisson)",
       only=lambda r: r.config.rate is not None),
    _c("config", "prompt_len", lambda r, s: r.config.prompt_len, "prompt tokens asked for"),
    _c("config", "output_len", lambda r, s: r.config.output_len, "output tokens asked for"),
    _c("config", "num_requests", lambda r, s: r.config.num_requests, "measured requests asked for",
       only=lambda r: r.config.num_requests is not None),
    _c("config", "duration_s", lambda r, s: r.config.duration_s, "seconds of requests asked for",
       only=lambda r: r.config.duration_s is not None),
    _c("config", "warmup_requests", lambda r, s: r.config.warmup_requests,
       "requests before the window, not measured"),
    _c("config", "seed", lambda r, s: r.config.seed,
       "seed of the arrival times (prompts are fresh for every point and run)"),
    _c("config", "fixed_length", lambda r, s: r.config.fixed_length,
       "how a fixed output length was asked for (auto, ignore-eos, generation-config, none)"),
    _c("config", "slo_ttft_ms", lambda r, s: _ms(r.config.slo_ttft_s),
       "the TTFT limit goodput counts against (empty: none)",
       only=lambda r: r.config.slo_ttft_s is not None),
    _c("config", "slo_tpot_ms", lambda r, s: _ms(r.config.slo_tpot_s),
       "the TPOT limit goodput counts against (empty: none)",
       only=lambda r: r.config.slo_tpot_s is not None),
    _c("config", "slo_e2e_ms", lambda r, s: _ms(r.config.slo_e2e_s),
       "the end-to-end limit goodput counts against (empty: none)",
       only=lambda r: r.config.slo_e2e_s is not None),
    _c("config", "endpoint", lambda r, s: r.config.endpoint, "the server's base URL"),
    _c("config", "setup_key", lambda r, s: r.config.setup_key(),
       "the config's identity without the load: the points of one curve"),
    _c("result", "requests", lambda r, s: r.requests, "measured requests sent"),
    _c("result", "completed", lambda r, s: r.completed(), "of them, completed"),
    _c("result", "failed", lambda r, s: r.failed(), "of them, failed (errors in the record)"),
    _c("result", "first_failure", lambda r, s: (r.failure_reasons() or [(None, 0)])[0][0],
       "the commonest failure reason"),
    _c("result", "window_s", lambda r, s: r.window_s,
       "the first request's due time to the last one's end"),
    _c("result", "request_throughput", lambda r, s: r.request_throughput(),
       "completed requests per second over the window"),
    _c("result", "output_tokens_per_s", lambda r, s: r.output_tokens_per_s(),
       "output tokens of the completed requests per second over the window"),
    _c("result", "total_tokens_per_s", lambda r, s: r.total_tokens_per_s(),
       "prompt and output tokens per second over the window"),
    _c("result", "offered_rate", lambda r, s: r.offered_rate(),
       "requests per second the schedule asked for (a rate point's realised rate)"),
    _c("result", "goodput", lambda r, s: r.goodput(),
       "completed requests per second within the SLO"),
    _c("result", "good_fraction", lambda r, s: _good_fraction(r, 0),
       "share of the measured requests within the SLO"),
    _c("result", "good_fraction_low", lambda r, s: _good_fraction(r, 1),
       "lower end of its 95% interval (Wilson)"),
    _c("result", "good_fraction_high", lambda r, s: _good_fraction(r, 2),
       "upper end of its 95% interval (Wilson)"),
    _c("result", "slo_at_p99", lambda r, s: r.slo_at_p99(),
       "p99 TTFT and p99 TPOT within their limits and no request failed (MLPerf's judgement)"),
    *_serve_latency("ttft", "time to first token (sent to the first streamed token)"),
    *_serve_latency("tpot", "time per output token of a request, over the completed requests"),
    *_serve_latency("itl", "gap between streamed events with text, over every gap"),
    *_serve_latency("e2e", "a request end to end (sent to the last token)"),
    _c("result", "output_tokens_mean", lambda r, s: r.output_token_total() / r.completed()
       if r.completed() else None, "output tokens per completed request"),
    _c("result", "prompt_tokens_mean", lambda r, s: r.prompt_token_total() / r.completed()
       if r.completed() else None, "prompt tokens per completed request (the server's count)"),
    _c("result", "token_count", lambda r, s: "prompt:{prompt};output:{output}".format(
        **(r.token_count or {})), "how tokens were counted: prompt tokenizer or words; output "
       "usage (the server's), tokenizer or events"),
    _c("result", "short_outputs", lambda r, s: r.short_outputs(),
       "completed requests with fewer output tokens than asked"),
    _c("result", "late_requests", lambda r, s: r.late(),
       "requests sent later than the late threshold after they were due"),
    _c("result", "loop_lag_p99_ms", lambda r, s: _ms((r.client or {}).get("p99_s")),
       "the client's event-loop lag, 99th percentile"),
    _c("result", "flags", lambda r, s: _serve_flags(r),
       "failed_requests, client_behind, short_outputs, tokens_as_events, throttled (;-joined), "
       "or none"),
    _c("result", "fixed_length_used", lambda r, s: _serve_server(r, "fixed_length"),
       "the fixed-length fields the server took"),
    _c("result", "server_launch", lambda r, s: _serve_server(r, "launch"),
       "the command that started the server (--launch, --stub; empty: already running)"),
    _c("result", "energy_j", lambda r, s: _telemetry_total(r).get("energy_j"),
       "energy of this host's GPUs over the window (empty: telemetry off, no NVML or no GPU)"),
    _c("result", "mean_power_w", lambda r, s: _telemetry_total(r).get("mean_power_w"),
       "energy over window time"),
    _c("result", "j_per_output_token", lambda r, s: r.energy_per_output_token_j(),
       "energy over the window's output tokens"),
    _c("result", "net_j_per_output_token", lambda r, s: r.net_energy_per_output_token_j(),
       "the same above the idle power measured before the warm-up"),
)


def _serve_cards(r: Any) -> str | None:
    """The cards of this host whose telemetry a serve record holds (the server's, where it ran
    here): their UUIDs from the environment, space-separated."""
    sampled = {g.get("index") for g in ((r.telemetry or {}).get("gpus") or [])}
    uuids = [str(g.get("uuid")) for i, g in enumerate(_gpus(r))
             if g.get("index", i) in sampled and g.get("uuid")]
    return " ".join(uuids) or None


# A serve record runs on no card itself: its cards are those its telemetry sampled.
SERVE_ENV = tuple(c if c.name != "gpu_uuid" else _c(
    "env", "gpu_uuid", lambda r, s: _serve_cards(r),
    "UUID of each card of this host sampled while it served (empty: no GPU telemetry)")
    for c in GPU_ENV)

_KIND_COLUMNS: dict[str, tuple[Column, ...]] = {
    "throughput": IDENTITY + THROUGHPUT + GPU_ENV + ERROR,
    "scaling": IDENTITY + SCALING + GPU_ENV + ERROR,
    "comm": IDENTITY + COMM + GPU_ENV + ERROR,
    "peak": IDENTITY + PEAK + GPU_ENV + ERROR,
    "maxbatch": IDENTITY + MAXBATCH + GPU_ENV + ERROR,
    "train": IDENTITY + TRAIN + GPU_ENV + ERROR,
    # dlbench net trains on the CPU only: no GPU columns.
    "net": IDENTITY + NET + CPU_ENV + ERROR,
    "generate": IDENTITY + GENERATE + GPU_ENV + ERROR,
    "serve": IDENTITY + SERVE + SERVE_ENV + ERROR,
}
assert set(_KIND_COLUMNS) == set(KINDS) == set(RECORD_TYPES), "a kind without export columns"


def columns(kind: str) -> tuple[Column, ...]:
    """The CSV columns of one kind, in order."""
    if kind not in _KIND_COLUMNS:
        raise ValueError(f"unknown record kind {kind!r}; choose from {', '.join(KINDS)}")
    return _KIND_COLUMNS[kind]


#: The throughput CSV's column names (the kind most exports hold).
CSV_COLUMNS = tuple(c.name for c in columns("throughput"))


def _summary(r: Any) -> Summary | None:
    s = r.summary()
    return s if isinstance(s, Summary) else None


def flat_row(r: Any) -> dict[str, Any]:
    """One CSV row of the record's kind: column name -> value (None where there is none)."""
    columns(r.kind)  # an unknown kind is refused
    return _values(r, _ROW_PLANS[r.kind])


#: Per kind, (name, getter, blank on a failure) of every column, and of its result columns
#: alone (what the JSON export's figures hold): worked out once, not for every record.
_Plan = tuple[tuple[str, Callable[[Any, Summary | None], Any], bool], ...]


def _plan(cols: Sequence[Column]) -> _Plan:
    return tuple((c.name, c.get, c.group == "result" and c.name not in ("unit",)) for c in cols)


_ROW_PLANS: dict[str, _Plan] = {k: _plan(cols) for k, cols in _KIND_COLUMNS.items()}
_FIGURE_PLANS: dict[str, _Plan] = {
    k: _plan([c for c in cols if c.group == "result"]) for k, cols in _KIND_COLUMNS.items()}


def _values(r: Any, plan: _Plan) -> dict[str, Any]:
    """The values of the columns of ``plan`` for the record ``r``."""
    s = _summary(r)
    failed = not r.ok
    row = {}
    for name, get, figure in plan:
        if figure and failed:
            row[name] = None  # a failure has no figures, whatever its partial samples say
            continue
        try:
            row[name] = get(r, s)
        except (AttributeError, KeyError, TypeError, ValueError, ZeroDivisionError):
            row[name] = None  # a record from an older writer lacking what this needs
    return row


def kinds_of(records: Sequence[Any]) -> list[str]:
    """The kinds present, in export order."""
    present = {r.kind for r in records}
    return [k for k in KINDS if k in present]


#: What a spreadsheet reads as the start of a formula (OWASP's list for CSV injection).
FORMULA_START = ("=", "+", "-", "@", "\t", "\r")
_PLAIN_NUMBER = re.compile(r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?")


def csv_text(v: str) -> str:
    """A string cell that no spreadsheet evaluates: one starting with ``=``, ``+``, ``-``, ``@``,
    a tab or a carriage return gets a leading ``'`` (shown as text, not run as a formula), unless
    it is a plain number such as ``-0.5``; any other string is returned as it is."""
    if v.startswith(FORMULA_START) and not _PLAIN_NUMBER.fullmatch(v):
        return "'" + v
    return v


def _cell(v: Any) -> Any:
    t = type(v)
    if t is int or t is bool:  # most cells: no test to make
        return v
    if v is None:
        return ""
    if isinstance(v, float) and not math.isfinite(v):
        return ""
    if isinstance(v, str):
        return csv_text(v)
    return v


def to_csv(records: Sequence[Any], kind: str | None = None) -> str:
    """The CSV of one kind: ``kind``, or the one kind ``records`` hold (others are left out).

    With ``kind`` None and records of several kinds, the throughput records are written (the
    layout this function always had); callers that export everything use :func:`csv_by_kind`.

    A string cell that a spreadsheet would evaluate as a formula (starting with ``=``, ``+``,
    ``-``, ``@``, a tab or a carriage return) is written with a leading ``'``
    (:func:`csv_text`); numbers never are. A cell holding a line break, a carriage return
    included, is quoted: it cannot end the row and start another.
    """
    if kind is None:
        present = kinds_of(records)
        kind = present[0] if len(present) == 1 else "throughput"
    buf = io.StringIO()
    _write_row(buf, [c.name for c in columns(kind)])
    for r in records:
        if r.kind == kind:
            buf.write(csv_row(r))
    return buf.getvalue()


def csv_row(r: Any) -> str:
    """The row of ``r`` in its kind's CSV (:func:`to_csv`), ending in ``\\n``."""
    row = flat_row(r)
    return _row_text([_cell(row[c.name]) for c in columns(r.kind)])


def _write_row(buf: io.StringIO, cells: Sequence[Any]) -> None:
    """One CSV row ending in ``\\n``. The writer's terminator is ``\\r\\n`` so that it quotes a
    cell holding either character (with ``\\n`` alone, a bare ``\\r`` would go unquoted and a
    spreadsheet would start a new row there); the row's own terminator is then ``\\n``."""
    buf.write(_row_text(cells))


def _row_text(cells: Sequence[Any]) -> str:
    """The text :func:`_write_row` writes."""
    one = io.StringIO()
    csv.writer(one, lineterminator="\r\n").writerow(cells)
    return one.getvalue()[:-2] + "\n"


def csv_files(output: str | None, kinds: Sequence[str]) -> dict[str, str | None]:
    """kind -> the file a CSV export to ``output`` writes it to: ``output`` itself for one kind,
    else ``STEM-KIND.csv`` beside it for each (a CSV holds one kind: ``all.csv`` becomes
    ``all-throughput.csv``, ``all-scaling.csv``, ...)."""
    if len(kinds) == 1:
        return {kinds[0]: output}
    out = Path(output or "all.csv")
    return {k: str(out.with_name(f"{out.stem}-{k}{out.suffix or '.csv'}")) for k in kinds}


def csv_by_kind(records: Sequence[Any]) -> dict[str, str]:
    """kind -> its CSV text, for every kind present."""
    return {k: to_csv(records, k) for k in kinds_of(records)}


def to_json(records: Sequence[Any]) -> str:
    """Full records (raw samples, config, environment), each with its figures.

    A JSON array of records; each is the record's own ``to_dict()`` (``kind``, ``schema_version``,
    ``config``, raw samples, ``env``...) plus ``figures``: the result columns of its kind's CSV
    (and ``summary``, for kinds timed in steps, as before).
    """
    return dumps_indent1([_document(r) for r in records])


def json_element(r: Any) -> str:
    """The text of ``r`` as an element of :func:`to_json`'s array: its lines between the
    ``[`` line and the ``]`` line, indented once, with no comma (what a streamed export writes
    between its separators)."""
    return " " + dumps_indent1(_document(r), 1)


def _document(r: Any) -> dict[str, Any]:
    """The JSON document of one record (:func:`to_json`)."""
    d = r.to_dict()
    s = _summary(r)
    if s is not None:  # throughput, scaling, net: figures from raw step times
        per_sample = getattr(r, "units_per_sample", 1)
        tflops = r.achieved_tflops() if hasattr(r, "achieved_tflops") else None
        d["summary"] = {
            "samples_per_s": s.throughput,
            "interval": [s.throughput_low, _finite(s.throughput_high)],
            "rel_halfwidth": _finite(s.rel_halfwidth), "median_s": s.median_s, "p5_s": s.p5_s,
            "p95_s": s.p95_s, "steps": s.steps, "cv": s.cv, "confidence": s.confidence,
            "interval_method": getattr(s, "interval_method", None),
            "units_per_s": s.throughput * per_sample, "tflops": tflops,
            "converged": r.converged() if hasattr(r, "converged") else None,
        }
    elif r.kind == "throughput":
        d["summary"] = None
    columns(r.kind)  # an unknown kind is refused, as everywhere
    row = _values(r, _FIGURE_PLANS[r.kind])  # the figures only: no identity to hash
    d["figures"] = {name: _json_value(v) for name, v in row.items()}
    d["export_version"] = EXPORT_VERSION
    return d


_SCALARS = frozenset({str, int, float, bool, type(None)})
_ESCAPE = json.encoder.encode_basestring_ascii
_FLAT: dict[int, Callable[[Any], str]] = {}


def _floatstr(o: float) -> str:
    if o != o:
        return "NaN"
    if o == math.inf:
        return "Infinity"
    if o == -math.inf:
        return "-Infinity"
    return float.__repr__(o)


#: How ``json.dumps`` writes a value of each scalar type (exact types: a subclass, such as an
#: IntEnum, takes the general path).
_SCALAR: dict[type, Callable[[Any], str]] = {
    str: _ESCAPE, int: int.__repr__, float: _floatstr, bool: lambda o: "true" if o else "false",
    type(None): lambda o: "null"}


def _flat(level: int) -> Callable[[Any], str]:
    """The C encoder of a list or dict holding scalars alone whose items sit at indent
    ``level``: its item separator carries the line break and the indent, so its output is the
    indented one but for the brackets. (No circular check: scalars hold nothing.)"""
    enc = _FLAT.get(level)
    if enc is None:
        sep = ",\n" + " " * level
        c_make = getattr(json.encoder, "c_make_encoder", None)
        if c_make is None:  # a Python without the _json accelerator
            enc = json.JSONEncoder(separators=(sep, ": ")).encode
        else:
            it = c_make(None, json.JSONEncoder().default, _ESCAPE, None, ": ", sep, False,
                        False, True)
            enc = lambda o: "".join(it(o, 0))  # noqa: E731
        _FLAT[level] = enc
    return enc


def dumps_indent1(o: Any, level: int = 0) -> str:
    """``json.dumps(o, indent=1)``, byte for byte, several times quicker.

    With an indent, the standard library encodes in Python, a generator call per value: that
    was most of a JSON export's time. Here each list or dict goes through the C encoder in one
    call, its item separator carrying the line break and the indent of its level; a value that
    is itself a list or dict goes in as ``null`` and its line is then completed with its own
    encoding. The split is safe: the encoder escapes every control character in a string
    (``ensure_ascii``), so each line break it writes is a separator.

    A plain dict (a record's document) takes a quicker path still, :func:`_templated`: its
    scalars in one call of the C encoder, its layout from a template kept per shape."""
    enc = _SCALAR.get(type(o))
    if enc is not None:
        return enc(o)
    if type(o) is dict:
        text = _templated(o, level)
        if text is not None:
            return text
    inner = level + 1
    if isinstance(o, (list, tuple)):
        if not o:
            return "[]"
        if _SCALARS.issuperset(map(type, o)):  # raw samples: no line to complete
            flat, nested = o, None
        else:
            flat = [v if type(v) in _SCALARS else None for v in o]
            nested = [(i, v) for i, v in enumerate(o) if type(v) not in _SCALARS]
        close = "]"
    elif isinstance(o, dict):
        if not o:
            return "{}"
        if _SCALARS.issuperset(map(type, o.values())):
            flat, nested = o, None
        else:
            flat = {k: v if type(v) in _SCALARS else None for k, v in o.items()}
            nested = [(i, v) for i, v in enumerate(o.values()) if type(v) not in _SCALARS]
        close = "}"
    elif isinstance(o, str):
        return _ESCAPE(o)
    elif isinstance(o, int):  # bool is exact above: an int subclass here (an IntEnum)
        return int.__repr__(o)
    elif isinstance(o, float):
        return _floatstr(o)
    else:
        raise TypeError(f"Object of type {type(o).__name__} is not JSON serializable")
    text = _flat(inner)(flat)
    if nested:
        lines = text.split("\n")
        for i, v in nested:  # "...null," (or "...null]" / "...null}" on the last line)
            lines[i] = lines[i][:-5] + dumps_indent1(v, inner) + lines[i][-1]
        text = "\n".join(lines)
    return text[0] + "\n" + " " * inner + text[1:-1] + "\n" + " " * level + close


# -- documents by template -------------------------------------------------------------------
# Encoding a document a container at a time costs a call of the C encoder, and Python around
# it, for each of its 25 to 30 containers: half the time of a JSON export. Records of one kind
# share their layout (keys, nesting) and differ in their scalars and the lengths of their raw
# samples, so a document is encoded as (1) its shape, found in one walk that also collects its
# scalars in the order they are written, (2) those scalars in ONE call of the C encoder, and (3)
# a %-template of the shape (keys, brackets, line breaks and indents, a placeholder per scalar
# or per run of raw samples), made the first time the shape is met, filled with them.

_SEP = "\x00"  # between the scalars' texts: ensure_ascii writes no control character raw
_STR_KEYS = frozenset({str})
_c_make = getattr(json.encoder, "c_make_encoder", None)
_SCALAR_RUN = None if _c_make is None else _c_make(
    None, json.JSONEncoder().default, _ESCAPE, None, ": ", _SEP, False, False, True)

#: (shape, level) -> (template, the separator of each run of raw samples in it). Bounded: a
#: store's records have a few dozen shapes; anything else is met and forgotten.
_TEMPLATES: dict[tuple[Any, int], tuple[str, list[str]]] = {}
_MAX_TEMPLATES = 512


class _NotPlain(Exception):
    """A value the template path leaves to the general one: a subclass of a JSON type (an
    IntEnum, an OrderedDict, a named tuple), a key that is not a string, a non-JSON type."""


def _templated(o: dict, level: int) -> str | None:
    """``dumps_indent1(o, level)`` of a plain dict by its shape's template; None where the
    general path must encode it (see :class:`_NotPlain`, or no scalar at all)."""
    if _SCALAR_RUN is None:
        return None
    scalars: list[Any] = []
    runs: list[tuple[int, int]] = []
    try:
        shape = _shape(o, scalars, runs)
    except _NotPlain:
        return None
    if not scalars:
        return None
    key = (shape, level)
    made = _TEMPLATES.get(key)
    if made is None:
        if len(_TEMPLATES) >= _MAX_TEMPLATES:
            _TEMPLATES.clear()
        seps: list[str] = []
        made = _TEMPLATES[key] = (_template(shape, level, seps), seps)
    template, seps = made
    texts = "".join(_SCALAR_RUN(scalars, 0))[1:-1].split(_SEP)
    if runs:  # each run of raw samples fills one placeholder, its texts joined by its separator
        filled: list[str] = []
        pos = 0
        for (start, n), sep in zip(runs, seps):
            filled += texts[pos:start]
            filled.append(sep.join(texts[start:start + n]))
            pos = start + n
        filled += texts[pos:]
        texts = filled
    return template % tuple(texts)


def _shape(o: Any, scalars: list[Any], runs: list[tuple[int, int]]) -> Any:
    """The shape of the container ``o`` (hashable; equal shapes are written alike but for
    their scalars), its scalars appended to ``scalars`` in the order they are written, and
    (where in ``scalars`` it starts, its length) appended to ``runs`` for each list of
    scalars alone, whose length stays out of the shape. Raises :class:`_NotPlain`."""
    t = type(o)
    if t is dict:
        if not o:
            return "{}"
        keys = tuple(o)
        if not _STR_KEYS.issuperset(map(type, keys)):
            raise _NotPlain
        values = o.values()
        if _SCALARS.issuperset(map(type, values)):
            scalars.extend(values)
            return ("D", keys)
        return ("M", keys, _kids(values, scalars, runs))
    if t is list or t is tuple:
        if not o:
            return "[]"
        if _SCALARS.issuperset(map(type, o)):  # raw samples: one placeholder, whatever their number
            runs.append((len(scalars), len(o)))
            scalars.extend(o)
            return "R"
        return ("L", _kids(o, scalars, runs))
    raise _NotPlain


def _kids(values: Any, scalars: list[Any], runs: list[tuple[int, int]]) -> tuple:
    """The shapes of the values of a container holding containers: None for a scalar."""
    kids = []
    for v in values:
        if type(v) in _SCALARS:
            scalars.append(v)
            kids.append(None)
        else:
            kids.append(_shape(v, scalars, runs))
    return tuple(kids)


def _template(shape: Any, level: int, seps: list[str]) -> str:
    """The %-template of ``shape`` written at indent ``level``, as ``json.dumps(indent=1)``
    lays it out; the separator of each run of raw samples is appended to ``seps``, in order."""
    if shape in ("{}", "[]"):
        return shape
    inner = "\n" + " " * (level + 1)
    close = "\n" + " " * level
    if shape == "R":
        seps.append("," + inner)
        return "[" + inner + "%s" + close + "]"
    if shape[0] == "D":
        items = [_key(k) + "%s" for k in shape[1]]
    elif shape[0] == "M":
        items = [_key(k) + ("%s" if kid is None else _template(kid, level + 1, seps))
                 for k, kid in zip(shape[1], shape[2])]
    else:
        items = ["%s" if kid is None else _template(kid, level + 1, seps) for kid in shape[1]]
    opening, closing = ("[", "]") if shape[0] == "L" else ("{", "}")
    return opening + inner + ("," + inner).join(items) + close + closing


def _key(k: str) -> str:
    """A dict key as a template writes it: ``"key": ``, a ``%`` in it doubled."""
    return _ESCAPE(k).replace("%", "%%") + ": "


def _json_value(v: Any) -> Any:
    return None if isinstance(v, float) and not math.isfinite(v) else v


def _finite(x: float) -> float | None:
    """JSON has no infinity: an unbounded interval end is written as null."""
    return x if math.isfinite(x) else None


def schema_markdown() -> str:
    """The CSV columns of every kind as Markdown tables (docs/schema.md holds this text; a test
    checks that the two agree)."""
    out = []
    for kind in KINDS:
        out.append(f"### `{kind}`\n\n| column | group | meaning |\n|---|---|---|")
        for c in columns(kind):
            out.append(f"| `{c.name}` | {c.group} | {c.doc} |")
        out.append("")
    return "\n".join(out)


__all__ = ["CSV_COLUMNS", "Column", "EXPORT_VERSION", "FORMULA_START", "KINDS",
           "SCHEMA_VERSION", "columns", "csv_by_kind", "csv_files", "csv_row", "csv_text",
           "dumps_indent1", "flat_row", "json_element", "kinds_of", "schema_markdown", "step_flags",
           "to_csv", "to_json"]
