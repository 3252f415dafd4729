"""What each subcommand does: builds configs, runs the sweep, prints tables.

The flow is one way: flags -> configs -> pre-flight checks -> sweep (launcher -> records ->
store) -> tables from the records.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Sequence

from dlbench import cli
from dlbench import env as envmod
from dlbench.config import ThroughputConfig, expand
from dlbench.measure.stopping import StopRule
from dlbench.models import get_model, list_models
from dlbench.report import export, tables, terminal
from dlbench.results import ThroughputRecord
from dlbench.store import Store
from dlbench.suites import SUITES, DeviceFacts, gpu_batch, suite_for
from dlbench.sweep import NullProgress, SweepOutcome, run_sweep
from dlbench.workloads.devices import bf16_available, check_supported, resolve_device


def device_facts() -> DeviceFacts:
    import torch
    cuda = torch.cuda.is_available()
    mem = torch.cuda.get_device_properties(0).total_memory if cuda else None
    return DeviceFacts(cuda=cuda, bf16=bf16_available(), memory_bytes=mem)


def preflight(configs: Sequence[ThroughputConfig]) -> None:
    """Every model known, every precision possible on its device: checked before anything runs."""
    for cfg in configs:
        spec = get_model(cfg.model)
        check_supported(cfg, spec, resolve_device(cfg.device))


# -- run / throughput ---------------------------------------------------------------------------
def cmd_run(args: argparse.Namespace) -> int:
    if args.list_suites:
        for s in SUITES.values():
            terminal.stdout.print(f"[bold]{s.name:8}[/bold] {s.description}"
                                  + (" [dim](GPU only)[/dim]" if s.gpu_only else ""))
        return cli.EXIT_OK
    suite, configs = suite_for(args.suite, device_facts())
    return _sweep(args, configs, suite.name, suite.view)


def cmd_throughput(args: argparse.Namespace) -> int:
    models = [get_model(m).name for m in cli._flatten(args.model, [])]
    stop = StopRule(min_steps=args.min_steps, min_seconds=args.min_time,
                    max_seconds=args.max_time, max_steps=args.max_steps,
                    target_rel_ci=args.target_ci)
    facts = device_facts()
    on_gpu = args.device != "cpu" and facts.cuda
    configs = expand(
        models, cli._flatten(args.batch_size, [None]),
        modes=cli._flatten(args.mode, ["train"]),
        precisions=cli._flatten(args.precision, ["fp32"]),
        compiles=cli._flatten(args.compile, [None]),
        channels_last=cli._flatten(args.channels_last, [False]),
        default_batch=lambda m: gpu_batch(m, facts.memory_bytes) if on_gpu else _cpu_batch(m),
        optimizer=args.optimizer, method=args.method, input_size=args.input_size,
        device=args.device, warmup_steps=args.warmup, warmup_seconds=args.warmup_time,
        stop=stop, seed=args.seed)
    # channels_last means nothing for a text model: measure it once, in its own layout.
    configs = list({c.key(): c for c in (
        replace(c, channels_last=False) if get_model(c.model).kind != "image" else c
        for c in configs)}.values())
    view = "seed002" if args.method == "seed002" else "throughput"
    return _sweep(args, configs, None, view)


def _cpu_batch(model: str) -> int:
    """A CPU-sized default batch: a quarter of the GPU default, at most 16."""
    return max(1, min(16, get_model(model).default_batch // 4))


def _sweep(args: argparse.Namespace, configs: list[ThroughputConfig], suite: str | None,
           view: str) -> int:
    preflight(configs)
    env = envmod.capture_environment()
    label = envmod.device_label(env)
    from dlbench.launch.inline import InlineLauncher
    from dlbench.launch.subprocess_launcher import SubprocessLauncher
    launcher = SubprocessLauncher() if args.isolate else InlineLauncher()
    if not args.quiet:
        terminal.stderr.print(
            f"[bold]dlbench[/bold] {len(configs)} benchmark(s)"
            + (f" (suite {suite})" if suite else "") + f" on {label}; torch "
            f"{(env.get('packages') or {}).get('torch')}; results -> {args.db}")
    progress = NullProgress() if args.quiet else terminal.RichProgress()
    t0 = time.perf_counter()
    with Store(args.db) as store:
        outcome = run_sweep(configs, store, launcher, env, command=args.command_line,
                            suite=suite, tag=args.tag, resume=args.resume, progress=progress)
    wall = time.perf_counter() - t0
    _print_outcome(args, outcome, view, label, wall)
    if outcome.status == "interrupted":
        return cli.EXIT_INTERRUPTED
    if outcome.status == "fatal":
        return cli.EXIT_FATAL
    return cli.EXIT_FAILED_RESULTS if any(not r.ok for r in outcome.records) else cli.EXIT_OK


def _print_outcome(args: argparse.Namespace, outcome: SweepOutcome, view: str, label: str,
                   wall: float) -> None:
    if args.json:
        sys.stdout.write(export.to_json(outcome.records) + "\n")
    else:
        show_tables(outcome.records, view, label)
    out = terminal.stderr
    if outcome.message:
        terminal.error(outcome.message)
    out.print(f"wall time {wall:.1f} s; {len(outcome.records)} result(s) stored in {args.db} "
              f"(run {outcome.run_id})" + (f", {outcome.skipped} skipped by --resume"
                                           if outcome.skipped else ""))


def show_tables(records: Sequence[ThroughputRecord], view: str, label: str) -> None:
    if not records:
        terminal.stdout.print("no results")
        return
    terminal.print_table(tables.throughput_table(records, f"Throughput on {label}"))
    if view == "seed000":
        terminal.print_table(tables.seed000_table(records))
    elif view == "seed002":
        terminal.print_table(tables.seed002_table(records, label))


# -- results ------------------------------------------------------------------------------------
def cmd_results(args: argparse.Namespace) -> int:
    if not Path(args.db).exists():
        from dlbench.store import StoreError
        raise StoreError(f"no result store at {args.db}; run 'dlbench run' first or pass --db PATH")
    with Store(args.db) as store:
        return {"ls": _results_ls, "show": _results_show, "export": _results_export}[args.rcmd](
            args, store)


def _results_ls(args: argparse.Namespace, store: Store) -> int:
    if args.results:
        run_id = store.resolve_run(args.run) if args.run else None
        recs = store.results(run_id=run_id)[-args.limit:]
        if args.json:
            sys.stdout.write(export.to_json(recs) + "\n")
            return cli.EXIT_OK
        rows = []
        for r in recs:
            s = r.summary()
            rows.append((r.id, r.run_id or "-", r.created_at, r.config.label, r.status,
                         tables.fmt_num(s.throughput * r.units_per_sample) if s else
                         (r.error_type or "-")))
        terminal.print_table(tables.Table("Results", ("id", "run", "created", "config", "status",
                                                      "per s"), tuple(rows)))
        return cli.EXIT_OK
    runs = store.runs(limit=args.limit, tag=args.tag)
    if args.json:
        sys.stdout.write(json.dumps([r.__dict__ for r in runs], indent=1) + "\n")
        return cli.EXIT_OK
    rows = tuple((r.run_id, r.started_at, r.status, r.suite or "-", r.tag or "-", r.device or "-",
                  str(r.results), str(r.errors), r.command) for r in runs)
    terminal.print_table(tables.Table(f"Runs in {args.db}", ("run", "started", "status", "suite",
                                                             "tag", "device", "results", "errors",
                                                             "command"), rows))
    return cli.EXIT_OK


def _results_show(args: argparse.Namespace, store: Store) -> int:
    from dlbench.store import StoreError
    if args.tag:
        recs = store.results(tag=args.tag)
        if args.json:
            sys.stdout.write(export.to_json(recs) + "\n")
            return cli.EXIT_OK
        runs = [r for r in store.runs(tag=args.tag)]
        if not runs:
            raise StoreError(f"no run is tagged {args.tag!r} in {args.db}")
        view = args.view or (SUITES[runs[0].suite].view if runs[0].suite in SUITES else "throughput")
        terminal.stdout.print(f"tag {args.tag}: {len(runs)} run(s), {len(recs)} result(s)")
        show_tables(recs, view, runs[0].device or "?")
        return cli.EXIT_OK
    try:
        run_id = store.resolve_run(args.ref)
    except StoreError:
        record = store.get(args.ref)  # not a run: maybe a result id
        if args.json:
            sys.stdout.write(export.to_json([record]) + "\n")
        else:
            _print_record(record)
        return cli.EXIT_OK
    recs = store.results(run_id=run_id)
    if args.json:
        sys.stdout.write(export.to_json(recs) + "\n")
        return cli.EXIT_OK
    info = next(r for r in store.runs() if r.run_id == run_id)
    view = args.view or (SUITES[info.suite].view if info.suite in SUITES else
                         ("seed002" if any(r.config.method == "seed002" for r in recs)
                          else "throughput"))
    terminal.stdout.print(f"run {run_id} ({info.status}) {info.started_at}: {info.command}")
    show_tables(recs, view, info.device or "?")
    return cli.EXIT_OK


def _print_record(r: ThroughputRecord) -> None:
    out = terminal.stdout
    terminal.print_table(tables.throughput_table([r], f"Result {r.id} (run {r.run_id})"))
    s = r.summary()
    if s is not None:
        out.print(f"window: {s.steps} steps, {s.total_s:.3f} s (host clock {r.window_wall_s:.3f} s),"
                  f" stopped by {r.stop_reason}; first step {r.first_step_s:.3f} s; "
                  f"warm-up {len(r.warmup_times_s)} steps")
        out.print(f"interval ({s.confidence:.0%}): {tables.fmt_num(s.throughput_low)} - "
                  f"{tables.fmt_num(s.throughput_high)} samples/s; cv {s.cv:.1%}")
        out.print("step times (ms): " + " ".join(f"{t * 1e3:.2f}" for t in r.step_times_s[:50])
                  + (" ..." if len(r.step_times_s) > 50 else ""))
    if r.error:
        out.print(f"[red]{r.error_type}[/red]: {r.error}", highlight=False)
    out.print_json(json.dumps({"config": r.config.to_dict(), "memory": r.memory,
                               "environment": envmod.identity(r.env)}))


def _results_export(args: argparse.Namespace, store: Store) -> int:
    run_id = None if args.run == "all" else store.resolve_run(args.run)
    recs = store.results(run_id=run_id, tag=args.tag)
    text = export.to_csv(recs) if args.format == "csv" else export.to_json(recs) + "\n"
    if args.output:
        Path(args.output).write_text(text)
        terminal.stderr.print(f"wrote {len(recs)} result(s) to {args.output}")
    else:
        sys.stdout.write(text)
    return cli.EXIT_OK


# -- env / models -------------------------------------------------------------------------------
def cmd_env(args: argparse.Namespace) -> int:
    env = envmod.capture_environment()
    if args.json:
        sys.stdout.write(json.dumps(env, indent=1) + "\n")
        return cli.EXIT_OK
    topo = env.pop("topology", None)
    rows = tuple((k, json.dumps(v) if isinstance(v, (dict, list)) else str(v))
                 for k, v in env.items())
    terminal.print_table(tables.Table(f"Environment: {envmod.device_label(env)}",
                                      ("key", "value"), rows))
    if topo:
        terminal.stdout.print(topo, highlight=False)
    return cli.EXIT_OK


def cmd_models(args: argparse.Namespace) -> int:
    specs = list_models(include_test=args.all)
    rows, docs = [], []
    for s in specs:
        ev = tr = None
        if not args.no_flops:
            from dlbench.measure.flops import count_flops
            try:
                ev, tr = count_flops(s, "eval"), count_flops(s, "train")
            except Exception as exc:  # a model the counter cannot trace still gets listed
                terminal.warn(f"FLOPs of {s.name} could not be counted: {exc}")
        size = f"{s.input_size}px" if s.kind == "image" else f"seq {s.input_size}"
        rows.append((s.name, s.source, size, s.unit, str(s.default_batch),
                     tables.fmt_num(ev / 1e9 if ev else None), tables.fmt_num(tr / 1e9 if tr else None),
                     s.description + (f" NOTE: {s.notes}" if s.notes else "")))
        docs.append({"name": s.name, "source": s.source, "kind": s.kind, "unit": s.unit,
                     "input_size": s.input_size, "default_batch": s.default_batch,
                     "eval_flops_per_sample": ev, "train_flops_per_sample": tr,
                     "description": s.description, "notes": s.notes, "test_only": s.test_only})
    if args.json:
        sys.stdout.write(json.dumps(docs, indent=1) + "\n")
        return cli.EXIT_OK
    terminal.print_table(tables.Table(
        "Models (FLOPs counted per sample at the default input; train = forward + loss + backward)",
        ("model", "source", "input", "unit", "GPU batch", "eval GFLOP", "train GFLOP",
         "description"), tuple(rows)))
    return cli.EXIT_OK
