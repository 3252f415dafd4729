"""dlbench from Python: measure a model or any step callable, read a store, get a DataFrame.

A thin facade over what the command line runs: ``measure_throughput`` builds the config that
``dlbench throughput`` builds, checks it as the command does (``jobs.plans``) and runs it through
the same sweep (``jobs.runs.run_throughput``) into a store; ``measure_step`` runs the user's step
through the same sweep and the one measured window (``jobs.step_runs``). Nothing here measures
or prints. See ``docs/api.md``.
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

from dlbench import env as envmod
from dlbench.config import ConfigError
from dlbench.jobs import generate_runs, plans, runs, serve_runs, step_runs
from dlbench.launch import tempdirs
from dlbench.measure.serving import Slo, parse_slo
from dlbench.measure.stopping import StopRule
from dlbench.models import get_model
from dlbench.models.sources import STEP_PREFIX
from dlbench.records.generate import GENERATE_STOP, GenerateRecord
from dlbench.records.serve import ServeRecord
from dlbench.records.throughput import ThroughputConfig, ThroughputRecord
from dlbench.report import export
from dlbench.store import Store, StoreError

__all__ = ["MeasurementError", "StepResult", "load", "measure_generation", "measure_serving",
           "measure_step", "measure_throughput", "to_dataframe"]


class MeasurementError(RuntimeError):
    """The measurement failed (out of memory, NaN loss, an exception in the step); ``record``
    is the failure as stored, with its error."""

    def __init__(self, record: Any) -> None:
        super().__init__(f"{record.config.label}: {record.error_type}: "
                         f"{(record.error or '').splitlines()[0] if record.error else ''}")
        self.record = record


#: A step's record is a throughput record whose model is ``step:NAME``.
StepResult = ThroughputRecord


def measure_throughput(model: str, batch_size: int | None = None, *, precision: str = "fp32",
                       mode: str = "train", device: str = "auto",
                       input_size: int | None = None, stop: StopRule | None = None,
                       warmup_steps: int = 10, warmup_seconds: float = 1.0,
                       db: str | os.PathLike | None = None, tag: str | None = None,
                       isolate: bool = False, check: bool = True,
                       **config: Any) -> ThroughputRecord:
    """Training (or ``mode="eval"``) throughput of ``model``, as ``dlbench throughput`` measures it.

    Args:
        model: a registry name (``resnet50``), ``timm:NAME``, ``torchvision:NAME``,
            ``hf:NAME_OR_DIR`` or ``path/to/file.py:factory`` (``dlbench models`` says more).
        batch_size: samples per step; None for the model's default on this device.
        precision: ``fp32`` (TF32 off), ``tf32``, ``fp16`` or ``bf16``.
        mode: ``train`` (forward, loss, backward, optimizer step) or ``eval`` (forward).
        device: ``auto``, ``cpu``, ``cuda`` or ``cuda:N``.
        input_size: image side or sequence length; None for the model's.
        stop: when the measured window ends (default: the command's).
        warmup_steps, warmup_seconds: the warm-up before the window.
        db: the store to add the record to (created if new); None keeps it in a temporary
            store that is removed afterwards.
        tag: a tag on the run in the store.
        isolate: measure in a fresh process (survives a fatal CUDA error).
        check: raise :class:`MeasurementError` if the measurement failed; with False the
            failure record is returned.
        config: any other field of :class:`dlbench.records.throughput.ThroughputConfig`
            (``compile="default"``, ``channels_last=True``, ``optimizer="adamw"``, ...).

    Returns:
        The record as stored: ``record.summary()`` has the throughput and its interval.
    """
    spec = get_model(model)
    facts = plans.device_facts()
    gpu = plans.on_gpu(device, facts)
    [cfg] = plans.expand([spec.name], [batch_size], modes=[mode], precisions=[precision],
                         compiles=[config.pop("compile", None)],
                         channels_last=[config.pop("channels_last", False)],
                         cuda_graphs=[config.pop("cuda_graph", False)],
                         default_batch=plans.default_batch(facts, gpu), input_size=input_size,
                         device=device, warmup_steps=warmup_steps,
                         warmup_seconds=warmup_seconds, stop=stop or StopRule(), **config)
    cfg = plans.applicable(cfg)
    plans.preflight([cfg])
    command = f"dlbench.measure_throughput({model!r}, batch_size={cfg.batch_size})"
    with _store(db) as path:
        env = envmod.capture_environment()
        outcome = runs.run_throughput([cfg], path, command, env, isolate=isolate, tag=tag)
    return _one(outcome, check)


def measure_generation(model: str, batch_size: int = 1, *, prompt_len: int = 128,
                       output_len: int = 128, precision: str | None = None,
                       fp8_recipe: str = "dynamic", path: str = "eager", device: str = "auto",
                       stop: StopRule | None = None, warmup_requests: int = 1,
                       db: str | os.PathLike | None = None, tag: str | None = None,
                       isolate: bool = False, check: bool = True,
                       **config: Any) -> GenerateRecord:
    """A decoder LM generating ``output_len`` tokens for ``batch_size`` prompts of
    ``prompt_len`` tokens, as ``dlbench generate`` measures it (docs/generation.md).

    Args:
        model: a shipped architecture (``llama-3.1-8b``...; ``dlbench generate --list-models``),
            ``hf:NAME_OR_DIR`` or ``path/to/file.py:factory``.
        batch_size: prompts generated together.
        prompt_len, output_len: tokens per prompt and tokens generated per prompt.
        precision: ``bf16``, ``fp16``, ``fp32`` or ``fp8`` (the linear layers through torchao;
            an sm_89+ GPU); None for bf16 on a GPU, fp32 on the CPU.
        fp8_recipe: how fp8 quantizes the linear layers (``--fp8-recipe``): ``dynamic`` (fp8
            weights and inputs) or ``weight-only`` (fp8 weights, bf16 inputs and matmuls: the
            batch-1 decode recipe); another than ``dynamic`` needs precision ``fp8``.
        path: ``eager`` (``model.generate()``), ``static``, ``graph`` or ``compile``.
        device: ``auto``, ``cpu``, ``cuda`` or ``cuda:N``.
        stop: when the window of requests ends (default: the command's).
        warmup_requests: untimed requests after the first.
        db, tag, isolate, check: as for :func:`measure_throughput`.
        config: any other field of :class:`dlbench.records.generate.GenerateConfig`.

    Returns:
        The record as stored: ``record.ttft()``, ``record.tpot()``, ``record.summary()``
        (output tokens/s and its interval), ``record.decode_gbs()``...
    """
    gpu = plans.on_gpu(device, plans.device_facts())
    [cfg], _ = generate_runs.plan(
        [model], [batch_size], [prompt_len], [output_len],
        [precision or ("bf16" if gpu else "fp32")], [path], device=device,
        stop=stop or GENERATE_STOP, warmup_requests=warmup_requests, fp8_recipe=fp8_recipe,
        **config)
    command = f"dlbench.measure_generation({model!r}, batch_size={batch_size})"
    with _store(db) as where:
        env = envmod.capture_environment()
        outcome = generate_runs.run_generate([cfg], where, command, env, isolate=isolate,
                                             tag=tag)
    return _one(outcome, check)


def measure_serving(endpoint: str = "http://127.0.0.1:8000", *, model: str | None = None,
                    api: str = "completions", concurrency: int | Sequence[int] = (),
                    rate: float | Sequence[float] = (), prompt_len: int = 128,
                    output_len: int = 128, num_requests: int | None = None,
                    duration_s: float | None = None, slo: str | Slo = "ttft=2000ms,tpot=100ms",
                    launch: str | None = None, stub: bool = False, tokenizer: str | None = None,
                    db: str | os.PathLike | None = None, tag: str | None = None,
                    check: bool = True, **config: Any) -> list[ServeRecord]:
    """A served model under load, as ``dlbench serve`` measures it (docs/serving.md): one
    record per load point, concurrencies first, then rates.

    Args:
        endpoint: the server's base URL (OpenAI-compatible, streaming).
        model: the model name sent in the requests; None: the first of ``/v1/models``.
        api: ``completions`` or ``chat``.
        concurrency, rate: the load points: requests kept in flight, and/or requests per
            second arriving at random (``burstiness=`` shapes them); neither: concurrency 1.
        prompt_len, output_len: tokens per prompt and asked for per request.
        num_requests, duration_s: per point (default: 10 x concurrency or 30 s of arrivals,
            at least 50 requests).
        slo: the goodput limits, ``"ttft=2000ms,tpot=100ms"`` or a :class:`Slo`.
        launch: a server command to start first and stop at the end; ``stub``: dlbench's own
            stub server instead (the client's overhead).
        tokenizer: counts the prompt tokens (on this machine; default the model's).
        db, tag: as for :func:`measure_throughput`.
        check: raise :class:`MeasurementError` if a point failed outright (nothing completed).
        config: any other field of :class:`dlbench.records.serve.ServeConfig` (warm-up, seed,
            timeouts, ``fixed_length``, ``extra_body``...).

    Returns:
        The records: ``r.ttft()``, ``r.tpot()``, ``r.itl()`` (distributions with intervals),
        ``r.output_tokens_per_s()``, ``r.goodput()``, ``r.failure_reasons()``...
    """
    limits = parse_slo(slo) if isinstance(slo, str) else slo
    burst = config.pop("burstiness", 1.0)
    configs = serve_runs.plan(
        model=model or ("stub" if stub else ""), apis=[api],
        concurrencies=[concurrency] if isinstance(concurrency, int) else list(concurrency),
        rates=[rate] if isinstance(rate, (int, float)) else list(rate),
        prompt_lens=[prompt_len], output_lens=[output_len], num_requests=num_requests,
        duration_s=duration_s, burstiness=burst, slo=limits, endpoint=endpoint, **config)
    command = f"dlbench.measure_serving({endpoint!r})"
    with _store(db) as where:
        env = envmod.capture_environment()
        outcome, _ = serve_runs.run_serve(configs, where, command, env, launch=launch,
                                          stub=serve_runs.Stub() if stub else None,
                                          tokenizer=tokenizer, tag=tag)
    if outcome.status == "interrupted":
        raise KeyboardInterrupt
    if check:
        for r in outcome.records:
            if not r.ok:
                raise MeasurementError(r)
    return list(outcome.records)


def measure_step(step: Callable[[], Any], samples_per_step: int, unit: str = "samples", *,
                 name: str | None = None, units_per_sample: int = 1, precision: str = "fp32",
                 mode: str = "train", device: str = "auto", stop: StopRule | None = None,
                 warmup_steps: int = 10, warmup_seconds: float = 1.0,
                 telemetry_interval_s: float | None = 0.1,
                 db: str | os.PathLike | None = None, tag: str | None = None,
                 check: bool = True) -> ThroughputRecord:
    """Throughput of any step callable, timed by dlbench's measured window.

    ``step()`` runs one step of ``samples_per_step`` samples (its return value is ignored). Its
    first call is timed apart (compilation, autotuning), then the warm-up, then a window that
    the stopping rule ends; on a GPU nothing synchronises inside the window, so the step must
    queue its work on the current stream and not synchronise itself (no ``loss.item()``).

    Args:
        step: the callable, called with no arguments.
        samples_per_step: samples one call processes (the batch).
        unit: what a sample is (``images``, ``sequences``, ``tokens``, or any word).
        name: stored as the model ``step:NAME`` (default: the callable's ``__name__``).
        units_per_sample: units in one sample (e.g. the sequence length when ``unit`` is
            ``tokens`` and a sample is a sequence).
        precision, mode: labels of what the step does (the step itself decides it).
        device: where the step runs (``auto``: the GPU if there is one); the timer waits on it.
        stop, warmup_steps, warmup_seconds: as for :func:`measure_throughput`.
        telemetry_interval_s: GPU telemetry sampling interval; None turns it off.
        db, tag, check: as for :func:`measure_throughput`.
    """
    label = name or getattr(step, "__name__", None) or type(step).__name__
    cfg = ThroughputConfig(model=f"{STEP_PREFIX}{label}", batch_size=samples_per_step,
                           mode=mode, precision=precision, device=device,
                           warmup_steps=warmup_steps, warmup_seconds=warmup_seconds,
                           stop=stop or StopRule(), telemetry_interval_s=telemetry_interval_s)
    if units_per_sample < 1:
        raise ConfigError(f"units_per_sample must be >= 1, got {units_per_sample}",
                          "units_per_sample")
    with _store(db) as path:
        env = envmod.capture_environment()
        outcome = step_runs.run_step(step, cfg, path, f"dlbench.measure_step({label!r})", env,
                                     unit=unit, units_per_sample=units_per_sample, tag=tag)
    return _one(outcome, check)


def load(db: str | os.PathLike, *, kind: str | None = None, run: str | None = None,
         tag: str | None = None) -> list[Any]:
    """The records of a store, in the order they were stored: every kind, or ``kind`` alone
    (``throughput``, ``scaling``, ``comm``, ``peak``, ``maxbatch``, ``train``, ``net``,
    ``generate``, ``serve``); one run (an id or its prefix) or the runs with ``tag``."""
    path = Path(db)
    if not path.is_file():
        raise StoreError(f"{path}: no such store")
    with Store(path) as store:
        run_id = store.resolve_run(run) if run is not None else None
        return store.results(run_id=run_id, kind=kind, tag=tag)


def to_dataframe(records: Iterable[Any] | str | os.PathLike, kind: str | None = None) -> Any:
    """Records (or a store's path) as a pandas DataFrame of one kind, with the columns of
    ``dlbench results export --format csv`` (documented in ``docs/schema.md``).

    ``kind`` may be left out when the records hold one kind. Needs pandas: ``pip install
    'dlbench[pandas]'``.
    """
    try:
        import pandas as pd  # heavy: optional, the [pandas] extra
    except ImportError:
        raise ImportError("dlbench.to_dataframe needs pandas: pip install 'dlbench[pandas]'"
                          ) from None
    if isinstance(records, (str, os.PathLike)):
        records = load(records)
    records = list(records)
    kinds = sorted({r.kind for r in records})
    if kind is None:
        if len(kinds) > 1:
            raise ValueError(f"the records hold several kinds ({', '.join(kinds)}); "
                             "pass kind= one of them")
        kind = kinds[0] if kinds else "throughput"
    names = [c.name for c in export.columns(kind)]
    rows = [export.flat_row(r) for r in records if r.kind == kind]
    return pd.DataFrame(rows, columns=names)


# -- helpers ------------------------------------------------------------------------------------
class _store:
    """The store's path: ``db``, or a temporary one removed on exit."""

    def __init__(self, db: str | os.PathLike | None) -> None:
        self.db, self.tmp = db, None

    def __enter__(self) -> str:
        if self.db is not None:
            return str(self.db)
        self.tmp = tempfile.TemporaryDirectory(prefix="dlbench-", dir=tempdirs.root())
        return os.path.join(self.tmp.name, "results.db")

    def __exit__(self, *exc: Any) -> None:
        if self.tmp is not None:
            self.tmp.cleanup()


def _one(outcome: Any, check: bool) -> Any:
    if outcome.status == "interrupted" or not outcome.records:
        raise KeyboardInterrupt
    record = outcome.records[0]
    if check and not record.ok:
        raise MeasurementError(record)
    return record
