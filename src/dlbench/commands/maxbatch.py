"""``dlbench maxbatch``: the largest batch that fits, its peak memory and its throughput.

Also :func:`resolve_auto`, which ``dlbench throughput -b auto`` calls to size each config.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from typing import AbstractSet, Callable, Sequence

from dlbench import env as envmod
from dlbench.commands.common import (EPILOG, EXIT_FAILED_RESULTS, EXIT_OK, add_sweep_flags,
                                     compile_mode, csv_list, device_facts, flatten,
                                     preflight)
from dlbench.records.throughput import ThroughputConfig, expand
from dlbench.measure.stopping import StopRule
from dlbench.models import get_model
from dlbench.report import export, tables, terminal
from dlbench.records.base import ErrorType, new_id
from dlbench.records.throughput import ThroughputRecord
from dlbench.records.maxbatch import MaxBatchConfig, MaxBatchRecord, Probe
from dlbench.store import Store
from dlbench.sweep import env_key
from dlbench.workloads import maxbatch as mb

ORDER = 15


#: A measurement that ran out of memory steps down to a fitted batch at most this share of it.
STEP_DOWN = 0.95


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "maxbatch", help="the largest batch that trains without running out of memory",
        description="For each model and precision, find the largest batch that fits (doubling, "
                    "a guess from the probes' memory, then bisection; each probe is a few steps "
                    "in a fresh process), then measure the throughput there with the normal "
                    "stopping rule. Every probe, out of memory or not, is stored with its peak "
                    "memory.",
        epilog="examples:\n"
               "  dlbench maxbatch -m resnet50,vit_b_16 --precision fp32,bf16\n"
               "  dlbench maxbatch -m gpt2 --precision bf16 --checkpointing --optimizer adamw\n"
               "  dlbench throughput -m resnet50 -b auto --precision bf16   (reuses the result)\n\n"
               "--resume reuses a stored search of the same setup on the same kind of device, "
               "measures its\nthroughput if no run did, and goes on from the probes of a "
               "search that was interrupted.\nIn true fp32 a probe can take minutes: cuDNN "
               "autotunes every convolution on the first step;\n--no-autotune lets its "
               "heuristics pick instead (seconds), and the record says so.\n\n"
               + EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("-m", "--model", action="append", type=csv_list(), required=True,
                   help="model name(s); 'dlbench models' lists them")
    p.add_argument("--precision", action="append", type=csv_list(),
                   help="fp32, tf32, fp16, bf16 (default: fp32)")
    p.add_argument("--mode", action="append", type=csv_list(), help="train (default) and/or eval")
    p.add_argument("--channels-last", action="store_true", help="NHWC memory format (image models)")
    p.add_argument("--compile", nargs="?", const="default", default=None, metavar="MODE",
                   type=compile_mode,
                   help="torch.compile the model (mode 'default' if none is given); every probe "
                        "compiles anew, so the search takes minutes")
    p.add_argument("--optimizer", choices=("sgd", "adamw"), default="sgd",
                   help="sgd (momentum, one buffer per parameter; default) or adamw (two)")
    p.add_argument("--checkpointing", action="store_true",
                   help="activation checkpointing: recompute activations in backward")
    p.add_argument("--no-autotune", dest="autotune", action="store_false",
                   help="let cuDNN's heuristics pick convolution algorithms instead of timing "
                        "them on each probe's first step (torch.backends.cudnn.benchmark "
                        "off): in true fp32 that timing takes minutes per shape at large "
                        "batches; the setup is then labelled no-autotune")
    p.add_argument("--seq-len", "--input-size", dest="input_size", type=int,
                   help="sequence length (text models) or image side in px")
    p.add_argument("--device", default="auto", help="auto (default), cpu, cuda, cuda:N")
    p.add_argument("--start", type=int, help="first batch probed (default: the model's default "
                   "batch for this device)")
    p.add_argument("--max", dest="limit", type=int, help="never probe above this batch")
    p.add_argument("--tolerance", type=float, default=0.05,
                   help="stop bisecting once the bracket [fits, OOM) is under this fraction of "
                        "the batch that fits; 0 = exact (default 0.05)")
    p.add_argument("--no-measure", action="store_true",
                   help="only search; skip the throughput measurement at the batch found")
    p.add_argument("--warmup", type=int, default=10, help="warm-up steps of the measurement")
    p.add_argument("--warmup-time", type=float, default=1.0,
                   help="also warm up for at least this many seconds (default 1; 0 where steps "
                        "at the boundary take tens of seconds)")
    p.add_argument("--min-time", type=float, default=2.0, help="measured seconds at least")
    p.add_argument("--max-time", type=float, default=15.0, help="measured seconds at most")
    p.add_argument("--min-steps", type=int, default=20, help="measured steps at least")
    p.add_argument("--target-ci", type=float, default=0.01, help="interval target (fraction)")
    add_sweep_flags(p)
    p.set_defaults(handler=cmd_maxbatch)


def cmd_maxbatch(args: argparse.Namespace) -> int:
    models = [get_model(m).name for m in flatten(args.model, [])]
    stop = StopRule(min_steps=args.min_steps, min_seconds=args.min_time,
                    max_seconds=args.max_time, target_rel_ci=args.target_ci)
    bases = expand(models, [1], modes=flatten(args.mode, ["train"]),
                   precisions=flatten(args.precision, ["fp32"]), compiles=[args.compile],
                   channels_last=[args.channels_last], optimizer=args.optimizer,
                   checkpointing=args.checkpointing, autotune=args.autotune,
                   input_size=args.input_size,
                   device=args.device, warmup_steps=args.warmup,
                   warmup_seconds=args.warmup_time, stop=stop)
    bases = list({c.key(): c for c in (
        replace(c, channels_last=False) if get_model(c.model).kind != "image" else c
        for c in bases)}.values())
    preflight(bases)
    searches = [MaxBatchConfig(base=b, start=args.start, limit=args.limit,
                               tolerance=args.tolerance) for b in bases]
    env = envmod.capture_environment()
    say = (lambda text: None) if args.quiet else (lambda text: terminal.stderr.print(text))
    from dlbench.launch.inline import InlineLauncher
    from dlbench.launch.subprocess_launcher import SubprocessLauncher
    launcher = SubprocessLauncher() if args.isolate else InlineLauncher()
    with Store(args.db) as store:
        found, measured = run_searches(
            searches, store, env, args.command_line, tag=args.tag, reuse=args.resume,
            measure_with=None if args.no_measure else launcher, say=say)
    if args.json:
        sys.stdout.write(export.to_json([*found, *measured]) + "\n")
    else:
        label = envmod.device_label(env)
        terminal.print_table(tables.maxbatch_table(found, measured, f"Largest batch on {label}"))
    return EXIT_OK if all(r.ok for r in [*found, *measured]) else EXIT_FAILED_RESULTS


def default_start(base: ThroughputConfig) -> int:
    """The model's default batch for the device the search runs on: a start near the answer."""
    facts = device_facts()
    if base.device != "cpu" and facts.cuda:
        from dlbench.suites import gpu_batch
        return gpu_batch(base.model, facts.memory_bytes)
    return get_model(base.model).default_batch


def _searches(store: Store, cfg: MaxBatchConfig, env: dict, status: str) -> list[MaxBatchRecord]:
    """This setup's stored searches in this environment with ``status``, oldest first."""
    key, ekey = cfg.key(), env_key(env)
    return [r for r in store.results(kind=MaxBatchRecord.kind, status=status, model=cfg.model)
            if r.config.key() == key and env_key(r.env) == ekey]


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
                 probe_launcher=None, say: Callable[[str], None] = lambda text: None,
                 ) -> tuple[list[MaxBatchRecord], list]:
    """Search each setup (or reuse a stored result), then measure at the batches found.

    Every search runs before any measurement: a measurement in this process leaves a CUDA
    context and cached blocks on the device that would shrink the memory later probes see.
    Each record is stored as it comes. A measurement that runs out of memory where the short
    probe did not is stored as the failure it is, the next smaller batch that fitted is measured
    instead, and a corrected search record follows. An interrupted search is stored with the
    probes it finished (error type ``interrupted``); with ``reuse``, the setup's next search
    starts from them. Returns (searches, throughput records).
    """
    run_id = new_id()
    ekey = env_key(env)
    priors = [stored(store, cfg, env) if reuse else None for cfg in searches]
    found: list[MaxBatchRecord] = []
    measured: list = []
    done = store.measured_keys(ekey, error_types=())
    # Measurements that ran out of memory in an earlier run (one cut while it stepped down):
    # with --resume they are not run again, the step-down goes on below them.
    failed = store.measured_keys(ekey, statuses=(), error_types=(ErrorType.OOM,)) if reuse \
        else set()

    def unmeasured(rec: MaxBatchRecord) -> bool:
        """A search whose best batch has no throughput result in this environment yet."""
        return rec.ok and replace(rec.config.base, batch_size=rec.best_batch).key() not in done

    if all(priors) and (measure_with is None or not any(map(unmeasured, priors))):
        for cfg, prior in zip(searches, priors):  # nothing to search or measure: no run opened
            say(f"{cfg.label}: batch {prior.best_batch} (stored result {prior.id})")
        return list(priors), measured
    store.start_run(run_id, command, env, ekey, envmod.device_label(env), None, tag)
    status = "failed"
    try:
        for cfg, prior in zip(searches, priors):
            if prior is not None:
                say(f"{cfg.label}: batch {prior.best_batch} (stored result {prior.id})")
                found.append(prior)
                continue
            known = interrupted_probes(store, cfg, env) if reuse else []
            say(f"{cfg.label}: searching" + (f" (resumed: {len({p.batch for p in known})} "
                                             f"batch(es) probed before)" if known else ""))
            try:
                rec = mb.search(cfg, env, default_start(cfg.base), launcher=probe_launcher,
                                on_probe=lambda p: say(f"  batch {p.batch}: {_probe_text(p)}"),
                                known=known,
                                on_start=lambda b: say(f"  batch {b}: probing ..."))
            except mb.SearchInterrupted as stop:
                # The probes that finished are measurements: keep them for --resume.
                store.add(stop.record.with_run(run_id), ekey)
                raise
            rec = rec.with_run(run_id)
            store.add(rec, ekey)
            found.append(rec)
            say(f"{cfg.label}: " + (f"largest batch {rec.best_batch}" if rec.ok
                                    else f"{rec.error_type}: {rec.error}"))
        if measure_with is not None:
            for i, rec in enumerate(found):
                # This run's searches, and stored ones whose throughput a cut run never measured.
                if rec.ok and (rec.run_id == run_id or unmeasured(rec)):
                    found[i], tput = _measure_best(rec, measure_with, env, run_id, store, ekey,
                                                   say, failed)
                    measured.extend(tput)
                    if (any(t.error_type == ErrorType.FATAL for t in tput)
                            and not getattr(measure_with, "survives_fatal", False)):
                        say("[red]a fatal device error: this process cannot measure any more; "
                            "rerun with --resume --isolate[/red]")
                        break
        status = "done"
    except KeyboardInterrupt:
        status = "interrupted"
        raise
    finally:
        store.finish_run(run_id, status)
    return found, measured


#: The error of a measurement not run again because an earlier run's ran out of memory.
EARLIER_OOM = "out of memory when an earlier run measured it"


def _measure_best(rec: MaxBatchRecord, launcher, env: dict, run_id: str, store: Store, ekey: str,
                  say: Callable[[str], None], failed: AbstractSet[str] = frozenset(),
                  ) -> tuple[MaxBatchRecord, list]:
    """The throughput at the best batch, stepping down through smaller batches that fitted.

    A step goes to a fitted batch at least 5% smaller: a measurement needs a little more memory
    than a short probe, and the probes around a guessed boundary lie one bracket apart. A batch
    whose config key is in ``failed`` (stored as out of memory by an earlier run) is not run
    again: the step-down starts below it."""
    out = []
    fitted = sorted({p.batch for p in rec.probes if p.fits}, reverse=True)
    tries = fitted[:1]
    for b in fitted[1:]:
        if b <= STEP_DOWN * tries[-1]:
            tries.append(b)
    for batch in tries[:3]:
        cfg = replace(rec.config.base, batch_size=batch)
        if cfg.key() in failed:
            tput = ThroughputRecord(config=cfg, env=env, status="error", error_type=ErrorType.OOM,
                                    error=EARLIER_OOM)
        else:
            tput = launcher.run(cfg, env).with_run(run_id)
            store.add(tput, ekey)
            out.append(tput)
        if tput.ok:
            if batch != fitted[0]:  # the corrected search, after its measured OOM
                rec = replace(rec, id=new_id()).with_run(run_id)
                store.add(rec, ekey)
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
        say(f"  measuring at batch {batch} ran out of memory"
            f"{' in an earlier run' if tput.error == EARLIER_OOM else ''}; trying {lower}")
        if lower is None:
            rec = replace(rec, id=new_id(), status="error", error_type=ErrorType.OOM,
                          error="every batch that fitted a probe ran out of memory when "
                                "measured").with_run(run_id)
            store.add(rec, ekey)
            return rec, out
    return rec, out


def _probe_text(p: Probe) -> str:
    took = f" ({p.wall_s:.0f} s)" if p.wall_s is not None else ""
    if not p.fits:
        return f"[red]{p.outcome}[/red]{took}"
    peak = p.allocated_peak_bytes
    return "fits" + (f", peak {peak / tables.GIB:.2f} GiB" if peak else "") + took


def resolve_auto(configs: Sequence[ThroughputConfig], db: str, command: str,
                 tag: str | None = None, quiet: bool = False,
                 probe_launcher=None) -> list[ThroughputConfig]:
    """``-b auto``: each config at the largest batch that fits its setup.

    A search stored in ``db`` for the same setup and environment is reused; otherwise one runs
    (probes in fresh processes) and is stored. A setup where nothing fits is dropped with a
    message (its failed search is stored).
    """
    say = (lambda text: None) if quiet else (lambda text: terminal.stderr.print(text))
    env = envmod.capture_environment(include_topology=False)
    searches = [MaxBatchConfig(base=c) for c in configs]
    with Store(db) as store:
        found, _ = run_searches(searches, store, env, command, tag=tag, reuse=True,
                                measure_with=None, probe_launcher=probe_launcher, say=say)
    out = []
    for cfg, rec in zip(configs, found):
        if rec.ok:
            # Printed even with --quiet: the batch is part of what the sweep measures.
            terminal.stderr.print(f"-b auto: {cfg.model} {cfg.precision} {cfg.mode} -> batch "
                                  f"{rec.best_batch}")
            out.append(replace(cfg, batch_size=rec.best_batch))
        else:
            terminal.error(f"-b auto: {cfg.label.replace(' b1 ', ' ')}: no batch fits "
                           f"({rec.error}); left out of the sweep")
    return out
