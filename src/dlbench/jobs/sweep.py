"""A sweep: configs -> launcher -> records -> store, one result at a time.

Each record is stored the moment it exists, so an interrupted sweep keeps everything measured
before the interruption, and ``--resume`` picks up where it stopped.

With ``repeat`` N > 1 (``--repeat``) each config runs in N fresh processes, one after another: a
process's cuDNN autotuning picks, allocator state and clocks differ from the next one's, and
the spread of their figures is the run-to-run variance one process cannot show (pyperf's
lesson). Every process's record is stored as it comes, tagged with its group, index and N; an
interrupted group keeps the processes it finished and ``--resume`` completes it.

Two hooks watch it: a :class:`Progress` displays it, and ``on_record`` hands each record to
code whose next config depends on it (the lever searches of ``jobs.runs.run_tune``).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Callable, Protocol, Sequence

from dlbench import env as envmod
from dlbench.launch import signals, tempdirs
from dlbench.records.base import ErrorType, new_id
from dlbench.records.throughput import ThroughputConfig, ThroughputRecord
from dlbench.store import Store, StoreWriteError


class Launcher(Protocol):
    name: str
    survives_fatal: bool

    def run(self, cfg: ThroughputConfig, env: dict) -> ThroughputRecord: ...


class Progress(Protocol):
    """What a sweep shows as it goes (display only: nothing the sweep measures depends on it)."""

    def begin(self, total: int) -> None: ...
    def start(self, cfg: ThroughputConfig) -> None: ...
    def done(self, record: ThroughputRecord) -> None: ...
    def skipped(self, cfg: ThroughputConfig) -> None: ...
    def end(self) -> None: ...
    # what the config being measured is doing now, where its launcher can tell (a torchrun
    # job's rank 0: dlbench.launch.progress)
    def status(self, text: str) -> None: ...


class NullProgress:
    def begin(self, total: int) -> None: pass
    def start(self, cfg: ThroughputConfig) -> None: pass
    def done(self, record: ThroughputRecord) -> None: pass
    def skipped(self, cfg: ThroughputConfig) -> None: pass
    def end(self) -> None: pass
    def status(self, text: str) -> None: pass


#: Failures that would recur in every process (the batch does not fit, the device cannot run
#: it): the rest of a repeat group is not run after one, and --resume does not retry them.
DETERMINISTIC = (ErrorType.OOM, ErrorType.UNSUPPORTED)


@dataclass
class _Group:
    """A config's repeat group as the store holds it: its id and its processes that ended ok."""

    id: str
    ok: set[int] = field(default_factory=set)


def open_groups(store: Store, key: str, repeat: int) -> tuple[dict[str, _Group], set[str]]:
    """For ``--resume --repeat N``: per config key measured in this environment, the group to
    go on with (the latest group of N processes, with the indices that ended ok), and the keys
    that failed deterministically. A config whose latest group has N ok processes is done; a
    record measured in one process does not count as a group."""
    groups: dict[str, _Group] = {}
    failed: set[str] = set()
    for r in store.iter_results():
        ck = r.config.key()
        if envmod.env_key(r.env) != key:
            continue
        if r.error_type in DETERMINISTIC:
            failed.add(ck)
            continue
        if r.repeat_group is None or r.repeat_count != repeat:
            continue
        g = groups.get(ck)
        if g is None or g.id != r.repeat_group:
            g = groups[ck] = _Group(r.repeat_group)
        if r.ok:
            g.ok.add(r.repeat_index)
    return groups, failed


@dataclass
class SweepOutcome:
    run_id: str
    records: list[ThroughputRecord] = field(default_factory=list)
    skipped: int = 0
    status: str = "running"          # done | interrupted | fatal
    message: str | None = None


def run_sweep(configs: Sequence[ThroughputConfig], store: Store, launcher: Launcher, env: dict,
              command: str, suite: str | None = None, tag: str | None = None,
              resume: bool = False, progress: Progress | None = None,
              repeat: int = 1,
              on_record: Callable[[ThroughputRecord], None] | None = None) -> SweepOutcome:
    """Measure ``configs`` in order, storing each record as it comes; with ``repeat`` N > 1,
    each config in N processes of ``launcher`` (which must start a fresh one per run).

    ``on_record`` gets each record once it is stored, before the next config is taken from
    ``configs``: an iterable that picks its next config from the last figure reads it there.

    On Ctrl-C the run is marked interrupted, the outcome says so, and nothing stored is lost.
    """
    if repeat < 1:
        raise ValueError(f"repeat must be >= 1, got {repeat}")
    if repeat > 1 and not launcher.survives_fatal:
        raise ValueError("repeat > 1 needs a launcher that starts a fresh process per run")
    progress = progress or NullProgress()
    key = envmod.env_key(env)
    outcome = SweepOutcome(run_id=new_id())
    signals.check()  # a Ctrl-C lost in start-up's imports ends it here, before a run opens
    tempdirs.remove_stale()  # a SIGKILLed dlbench's folder goes with the next run, inline too
    store.start_run(outcome.run_id, command, env, key, envmod.device_label(env), suite, tag)
    if repeat == 1:
        done = store.measured_keys(key) if resume else set()
        groups, failed = {}, set()
    else:
        done = set()
        groups, failed = open_groups(store, key, repeat) if resume else ({}, set())

    def keep(record: ThroughputRecord) -> None:
        store.add(record, key)
        outcome.records.append(record)
        progress.done(record)
        if on_record is not None:
            on_record(record)

    progress.begin(len(configs) * repeat)
    try:
        for cfg in configs:
            signals.check()  # one swallowed by the last config's code: no next config
            if repeat > 1:
                _measure_group(cfg, launcher, env, outcome, progress, repeat, done, groups,
                               failed, keep)
                continue
            if cfg.key() in done:
                outcome.skipped += 1
                progress.skipped(cfg)
                continue
            progress.start(cfg)
            record = launcher.run(cfg, env).with_run(outcome.run_id)
            keep(record)
            done.add(cfg.key())  # a config listed twice is measured once
            if record.error_type == ErrorType.FATAL and not launcher.survives_fatal:
                outcome.status = "fatal"
                outcome.message = ("a fatal device error left this process unable to measure; "
                                   "rerun with --resume --isolate to go on in fresh processes")
                break
        else:
            outcome.status = "done"
    except StoreWriteError:
        # the store refused a record (a full disk, a read-only file): it is in a recovery file
        # the error names, and every later record would meet the same refusal, so the sweep
        # stops here; the CLI says where the record went (exit 2, not an internal error)
        outcome.status = "failed"
        raise
    except KeyboardInterrupt:
        outcome.status = "interrupted"
        outcome.message = (f"interrupted: {len(outcome.records)} result(s) of this run are kept in "
                           f"{store.path}; rerun the same command with --resume to go on"
                           + (" (an unfinished group of processes is completed)"
                              if repeat > 1 else ""))
    finally:
        progress.end()
        store.finish_run(outcome.run_id, outcome.status)
    return outcome


def _measure_group(cfg: ThroughputConfig, launcher: Launcher, env: dict, outcome: SweepOutcome,
                   progress: Progress, repeat: int, done: set[str], groups: dict[str, _Group],
                   failed: set[str], keep: Callable[[ThroughputRecord], None]) -> None:
    """One config in ``repeat`` fresh processes: those of its group still missing, each record
    handed to ``keep`` (which stores it). A process that fails is a record of the group like
    the others (failures are data)."""
    ck = cfg.key()
    group = groups.get(ck)
    if ck in done or ck in failed or (group is not None and len(group.ok) >= repeat):
        for _ in range(repeat):
            outcome.skipped += 1
            progress.skipped(cfg)
        return
    done.add(ck)  # a config listed twice is measured once
    group = group or _Group(new_id())
    # FLOPs per sample are counted once per model and mode (tracing it takes seconds): the
    # group's first process counts them and the rest take its count; they skip the idle-power
    # wait too (launch.subprocess_launcher.SubprocessLauncher.for_later_processes).
    quick = getattr(launcher, "for_later_processes", lambda: launcher)()
    flops = None
    for i in range(repeat):
        if i in group.ok:
            outcome.skipped += 1
            progress.skipped(cfg)
            continue
        progress.start(cfg)
        record = (launcher if flops is None else quick).run(cfg, env)
        if flops is not None and record.ok and getattr(record, "flops_per_sample", 0) is None:
            record = replace(record, flops_per_sample=flops)
        elif record.ok:
            flops = getattr(record, "flops_per_sample", None)
        record = record.in_group(group.id, i, repeat).with_run(outcome.run_id)
        keep(record)
        if record.error_type in DETERMINISTIC:  # every other process would fail the same way
            for _ in range(i + 1, repeat):
                progress.skipped(cfg)
            break
