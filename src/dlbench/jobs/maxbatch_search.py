"""Largest-batch searches against the store: reuse a stored answer, resume an interrupted search,
measure the throughput at the batch found, and size ``-b auto`` configs.

:mod:`dlbench.workloads.maxbatch` is the search itself (probes, bisection); this module is what
``dlbench maxbatch`` and ``dlbench throughput -b auto`` run around it. It prints nothing: what
happens is told to a :class:`SearchProgress`.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import AbstractSet, Protocol, Sequence

from dlbench import env as envmod
from dlbench.jobs.plans import auto_setups, device_facts, preflight, unique
from dlbench.jobs.stored_run import StoredRun
from dlbench.models import get_model
from dlbench.records import record_type_for
from dlbench.records.base import ErrorType, new_id
from dlbench.records.maxbatch import MaxBatchConfig, MaxBatchRecord, Probe
from dlbench.records.throughput import ThroughputConfig, ThroughputRecord
from dlbench.store import Store
from dlbench.suites import gpu_batch
from dlbench.workloads import maxbatch as mb

#: A measurement that ran out of memory steps down to a fitted batch at most this share of it.
STEP_DOWN = 0.95

#: The error of a measurement not run again because an earlier run's ran out of memory.
EARLIER_OOM = "out of memory when an earlier run measured it"


class SearchProgress(Protocol):
    """What a caller hears of the searches (a terminal prints it; tests ignore it)."""

    def reused(self, cfg: MaxBatchConfig, record: MaxBatchRecord) -> None:
        """A stored search of this setup and environment answers it: nothing is probed."""

    def searching(self, cfg: MaxBatchConfig, resumed: int) -> None:
        """A search starts; ``resumed`` batches come from an interrupted one (0: none)."""

    def probing(self, batch: int) -> None:
        """A probe starts (in true fp32 one can autotune for minutes)."""

    def probed(self, probe: Probe) -> None:
        """A probe finished: it fitted, or why not."""

    def searched(self, cfg: MaxBatchConfig, record: MaxBatchRecord) -> None:
        """A search ended: its best batch, or its error."""

    def measure_failed(self, batch: int, earlier: bool, lower: int | None) -> None:
        """The measurement at ``batch`` ran out of memory (``earlier``: in an earlier run, so
        it was not run again); ``lower`` is tried next (None: no fitted batch is left)."""

    def fatal(self) -> None:
        """A fatal device error: this process cannot measure any more."""


class NullSearchProgress:
    def reused(self, cfg: MaxBatchConfig, record: MaxBatchRecord) -> None: pass
    def searching(self, cfg: MaxBatchConfig, resumed: int) -> None: pass
    def probing(self, batch: int) -> None: pass
    def probed(self, probe: Probe) -> None: pass
    def searched(self, cfg: MaxBatchConfig, record: MaxBatchRecord) -> None: pass
    def measure_failed(self, batch: int, earlier: bool, lower: int | None) -> None: pass
    def fatal(self) -> None: pass


def default_start(base: ThroughputConfig) -> int:
    """The model's default batch for the device the search runs on: a start near the answer."""
    facts = device_facts()
    if base.device != "cpu" and facts.cuda:
        return gpu_batch(base.model, facts.memory_bytes)
    return get_model(base.model).default_batch


def _searches(store: Store, cfg: MaxBatchConfig, env: dict, status: str) -> list[MaxBatchRecord]:
    """This setup's stored searches in this environment with ``status``, oldest first."""
    key, ekey = cfg.key(), envmod.env_key(env)
    return [r for r in store.results(kind=MaxBatchRecord.kind, status=status, model=cfg.model)
            if r.config.key() == key and envmod.env_key(r.env) == ekey]


def stored(store: Store, cfg: MaxBatchConfig, env: dict) -> MaxBatchRecord | None:
    """The latest successful search for this setup in this environment, if any."""
    hits = _searches(store, cfg, env, "ok")
    return hits[-1] if hits else None


def interrupted_probes(store: Store, cfg: MaxBatchConfig, env: dict) -> list[Probe]:
    """The probes of this setup's interrupted searches in this environment, oldest first."""
    return [p for r in _searches(store, cfg, env, "error")
            if r.error_type == ErrorType.INTERRUPTED for p in r.probes]


def run_searches(searches: Sequence[MaxBatchConfig], store: Store, env: dict, command: str,
                 tag: str | None = None, reuse: bool = False, measure_with=None,
                 probe_launcher=None, progress: SearchProgress | None = None,
                 ) -> tuple[list[MaxBatchRecord], list[ThroughputRecord]]:
    """Search each setup (or reuse a stored result), then measure at the batches found.

    Every search runs before any measurement: a measurement in this process leaves a CUDA
    context and cached blocks on the device that would shrink the memory later probes see.
    Each record is stored as it comes. A measurement that runs out of memory where the short
    probe did not is stored as the failure it is, the next smaller batch that fitted is measured
    instead, and a corrected search record follows. An interrupted search is stored with the
    probes it finished (error type ``interrupted``); with ``reuse``, the setup's next search
    starts from them. Returns (searches, throughput records).
    """
    progress = progress or NullSearchProgress()
    ekey = envmod.env_key(env)
    priors = [stored(store, cfg, env) if reuse else None for cfg in searches]
    found: list[MaxBatchRecord] = []
    measured: list[ThroughputRecord] = []
    done = store.measured_keys(ekey, error_types=())
    # Measurements that ran out of memory in an earlier run (one cut while it stepped down):
    # with --resume they are not run again, the step-down goes on below them.
    failed = store.measured_keys(ekey, statuses=(), error_types=(ErrorType.OOM,)) if reuse \
        else set()

    def unmeasured(rec: MaxBatchRecord) -> bool:
        """A search whose best batch has no throughput result in this environment yet."""
        return rec.ok and rec.config.at(rec.best_batch).key() not in done

    if all(priors) and (measure_with is None or not any(map(unmeasured, priors))):
        for cfg, prior in zip(searches, priors):  # nothing to search or measure: no run opened
            progress.reused(cfg, prior)
        return list(priors), measured
    with StoredRun(store, command, env, tag=tag) as run:
        for cfg, prior in zip(searches, priors):
            if prior is not None:
                progress.reused(cfg, prior)
                found.append(prior)
                continue
            known = interrupted_probes(store, cfg, env) if reuse else []
            progress.searching(cfg, len({p.batch for p in known}))
            try:
                rec = mb.search(cfg, env, default_start(cfg.base), launcher=probe_launcher,
                                on_probe=progress.probed, known=known,
                                on_start=progress.probing)
            except mb.SearchInterrupted as stop:
                run.add(stop.record)  # the probes that finished are measurements: kept for --resume
                raise
            rec = run.add(rec)
            found.append(rec)
            progress.searched(cfg, rec)
        if measure_with is not None:
            for i, rec in enumerate(found):
                # This run's searches, and stored ones whose throughput a cut run never measured.
                if rec.ok and (rec.run_id == run.run_id or unmeasured(rec)):
                    found[i], tput = measure_best(rec, measure_with, run, progress, failed)
                    measured.extend(tput)
                    if (any(t.error_type == ErrorType.FATAL for t in tput)
                            and not getattr(measure_with, "survives_fatal", False)):
                        progress.fatal()
                        break
    return found, measured


def measure_best(rec: MaxBatchRecord, launcher, run: StoredRun,
                 progress: SearchProgress | None = None, failed: AbstractSet[str] = frozenset(),
                 ) -> tuple[MaxBatchRecord, list[ThroughputRecord]]:
    """The throughput at the best batch, stepping down through smaller batches that fitted
    (under a search's strategy, a scaling record of its job at that batch per replica).

    A step goes to a fitted batch at least 5% smaller: a measurement needs a little more memory
    than a short probe, and the probes around a guessed boundary lie one bracket apart. A batch
    whose config key is in ``failed`` (stored as out of memory by an earlier run) is not run
    again: the step-down starts below it. Every record is stored in ``run``; returns the search
    record (corrected where the best batch did not hold) and the throughput records."""
    progress = progress or NullSearchProgress()
    out: list[ThroughputRecord] = []
    fitted = sorted({p.batch for p in rec.probes if p.fits}, reverse=True)
    tries = fitted[:1]
    for b in fitted[1:]:
        if b <= STEP_DOWN * tries[-1]:
            tries.append(b)
    for batch in tries[:3]:
        cfg = rec.config.at(batch)  # the base setup, or the strategy's job, at this batch
        if cfg.key() in failed:
            tput = record_type_for(cfg)(config=cfg, env=run.env, status="error",
                                        error_type=ErrorType.OOM, error=EARLIER_OOM)
        else:
            tput = run.add(launcher.run(cfg, run.env))
            out.append(tput)
        if tput.ok:
            if batch != fitted[0]:  # the corrected search, after its measured OOM
                rec = run.add(replace(rec, id=new_id()))
            return rec, out
        broken = tput.error_type == ErrorType.FATAL and not getattr(launcher, "survives_fatal",
                                                                        False)
        if tput.error_type not in mb.TOO_BIG or broken:
            return rec, out  # not a memory failure, or this process is broken: the search stands
        mem = tput.memory or {}
        lower = next((b for b in tries if b < batch), None)
        rec = mb.with_probe(rec, Probe(batch=batch, outcome=tput.error_type,
                                       device_total_bytes=mem.get("device_total_bytes"),
                                       error=(tput.error or "").splitlines()[0][:300]), lower)
        progress.measure_failed(batch, tput.error == EARLIER_OOM, lower)
        if lower is None:
            rec = run.add(replace(rec, id=new_id(), status="error", error_type=ErrorType.OOM,
                                  error="every batch that fitted a probe ran out of memory when "
                                        "measured"))
            return rec, out
    return rec, out


@dataclass(frozen=True)
class AutoBatch:
    """``-b auto`` for one config: the search that sized it, and the config at its batch."""

    config: ThroughputConfig
    search: MaxBatchRecord

    @property
    def sized(self) -> ThroughputConfig | None:
        """The config at the largest batch that fits; None where not even batch 1 does."""
        if not self.search.ok:
            return None
        return replace(self.config, batch_size=self.search.best_batch)


def auto_batches(configs: Sequence[ThroughputConfig], db: str, command: str,
                 tag: str | None = None, progress: SearchProgress | None = None,
                 probe_launcher=None) -> list[AutoBatch]:
    """``-b auto``: the largest batch that fits each config's setup.

    A search stored in ``db`` for the same setup and environment is reused; otherwise one runs
    (probes in fresh processes) and is stored, a failed one included.
    """
    env = envmod.capture_environment(include_topology=False)
    searches = [MaxBatchConfig(base=c) for c in configs]
    with Store(db) as store:
        found, _ = run_searches(searches, store, env, command, tag=tag, reuse=True,
                                measure_with=None, probe_launcher=probe_launcher,
                                progress=progress)
    return [AutoBatch(cfg, rec) for cfg, rec in zip(configs, found)]


def with_auto_batches(configs: Sequence[ThroughputConfig], db: str, command: str, *,
                      keep: bool = False, tag: str | None = None,
                      progress: SearchProgress | None = None, probe_launcher=None,
                      ) -> tuple[list[ThroughputConfig], list[AutoBatch]]:
    """``-b auto`` in a sweep: each setup of ``configs`` once more at the largest batch that
    fits it (checked, then sized by :func:`auto_batches`), after ``configs`` themselves where
    ``keep`` (``-b 64,auto``) and instead of them where not (``-b auto``: they stand at batch 1).
    Returns (the sweep's configs, what sizing found per setup: a setup where nothing fits has
    no config in the sweep)."""
    setups = auto_setups(configs)
    preflight(setups)
    found = auto_batches(setups, db, command, tag=tag, progress=progress,
                         probe_launcher=probe_launcher)
    sized = [a.sized for a in found if a.sized is not None]
    return unique((list(configs) if keep else []) + sized), found
