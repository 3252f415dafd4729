"""``dlbench maxbatch``: the largest batch that fits, its peak memory and its throughput.

The searches against the store (reuse, resume, measure, step down) are
:mod:`dlbench.jobs.maxbatch_search`; this module parses and prints.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace

from dlbench import env as envmod
from dlbench.commands.common import (
    COUNT,
    EPILOG,
    EXIT_FAILED_RESULTS,
    EXIT_OK,
    FRACTION,
    POSITIVE,
    SECONDS,
    SECONDS_OR_ZERO,
    SearchPrinter,
    add_checkpointing,
    add_command,
    add_strategy_flags,
    add_sweep_flags,
    checkpointing_fields,
    compile_mode,
    csv_list,
    device,
    flatten,
    integer,
    on_off,
    real,
    say_to_stderr,
)
from dlbench.config import ConfigError
from dlbench.measure.stopping import StopRule
from dlbench.records.maxbatch import MaxBatchConfig
from dlbench.report import export, tables, terminal
from dlbench.store import Store

ORDER = 15


def register(sub: argparse._SubParsersAction) -> None:
    p = add_command(
        sub, "maxbatch", help="the largest batch that trains without running out of memory",
        description="For each model and precision, find the largest batch that fits (doubling, "
                    "a guess from the probes' memory, then bisection; each probe is a few steps "
                    "in a fresh process), then measure the throughput there with the normal "
                    "stopping rule. Every probe, out of memory or not, is stored with its peak "
                    "memory.\n\n"
                    "With --strategy (ddp, fsdp, tp, fsdp+tp) and --gpus N the search is for "
                    "the largest batch per data-parallel replica that trains under that "
                    "strategy on N GPUs (a GPU under ddp and fsdp, a TP group under tp and "
                    "fsdp+tp): each probe is a torchrun job of all N ranks, as 'dlbench scale' "
                    "runs it, and an out-of-memory on any rank means the batch does not fit; "
                    "the batch found is then measured as a scaling job. --checkpointing, "
                    "--offload and --fp8 change what a rank holds, so each is part of the setup "
                    "searched. Without CUDA, --gpus counts gloo processes on the CPU.",
        epilog="examples:\n"
               "  dlbench maxbatch -m resnet50,vit_b_16 --precision fp32,bf16\n"
               "  dlbench maxbatch -m gpt2 --precision bf16 --checkpointing --optimizer adamw\n"
               "  dlbench throughput -m resnet50 -b auto --precision bf16   (reuses the result)\n"
               "  dlbench maxbatch -m llama-3.2-1b --seq-len 2048 --precision bf16 --optimizer "
               "adamw --strategy ddp,fsdp --gpus 8\n"
               "      (the largest batch per GPU under DDP and under FSDP2 on 8 GPUs)\n"
               "  dlbench maxbatch -m llama-3.1-8b --precision bf16 --optimizer adamw "
               "--strategy fsdp --gpus 8 --offload --checkpointing\n"
               "  dlbench maxbatch -m llama-3.2-1b --precision bf16 --optimizer adamw "
               "--strategy fsdp+tp --tp 2 --gpus 4\n\n"
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
    # As in throughput and scale: on/off lists (a bare flag, as this command once took, is "on").
    p.add_argument("--channels-last", action="append", type=csv_list(on_off), nargs="?",
                   const=[True], metavar="on/off",
                   help="NHWC memory format (image models): on, off or on,off (bare: on)")
    p.add_argument("--compile", action="append", type=csv_list(compile_mode), nargs="?",
                   const=["default"], metavar="MODE",
                   help="none (eager, default) and/or a torch.compile mode (bare: default); "
                        "every probe compiles anew, so the search takes minutes")
    p.add_argument("--optimizer", choices=("sgd", "adamw"), default="sgd",
                   help="sgd (momentum, one buffer per parameter; default) or adamw (two)")
    add_checkpointing(p, ": a larger batch fits, each step computes more")
    p.add_argument("--no-autotune", dest="autotune", action="store_false",
                   help="let cuDNN's heuristics pick convolution algorithms instead of timing "
                        "them on each probe's first step (torch.backends.cudnn.benchmark "
                        "off): in true fp32 that timing takes minutes per shape at large "
                        "batches; the setup is then labelled no-autotune")
    add_strategy_flags(p, strategies="search under ddp, fsdp, tp or fsdp+tp on --gpus GPUs "
                                     "(one or a list; each a search of its own; default: one "
                                     "process on one device, or ddp with --gpus)",
                       gpus="GPUs of each probe's job, one or a list (default with --strategy: "
                            "every visible GPU). Without CUDA: gloo processes (default 2)")
    p.add_argument("--seq-len", "--input-size", dest="input_size", type=POSITIVE,
                   help="sequence length (text models) or image side in px")
    p.add_argument("--device", default="auto", type=device,
                   help="auto (default), cpu, cuda, cuda:N")
    p.add_argument("--start", type=POSITIVE, help="first batch probed (default: the model's default "
                   "batch for this device)")
    p.add_argument("--max", dest="limit", type=POSITIVE, help="never probe above this batch")
    p.add_argument("--tolerance", type=real(0, 1, high_open=True), default=0.05,
                   help="stop bisecting once the bracket [fits, OOM) is under this fraction of "
                        "the batch that fits; 0 = exact (default 0.05)")
    p.add_argument("--no-measure", action="store_true",
                   help="only search; skip the throughput measurement at the batch found")
    p.add_argument("--warmup", type=COUNT, default=10, help="warm-up steps of the measurement")
    p.add_argument("--warmup-time", type=SECONDS_OR_ZERO, default=1.0,
                   help="also warm up for at least this many seconds (default 1; 0 where steps "
                        "at the boundary take tens of seconds)")
    p.add_argument("--min-time", type=SECONDS_OR_ZERO, default=2.0, help="measured seconds at least")
    p.add_argument("--max-time", type=SECONDS, default=15.0, help="measured seconds at most")
    p.add_argument("--min-steps", type=integer(2), default=20, help="measured steps at least, even past --max-time")
    p.add_argument("--target-ci", type=FRACTION, default=0.01, help="interval target (fraction)")
    add_sweep_flags(p)
    p.set_defaults(handler=cmd_maxbatch)


def _sharded(args: argparse.Namespace) -> bool:
    """Whether the search is under a strategy; the levers of one refused without it."""
    if args.strategy or args.gpus:
        return True
    for flag, given in (("--tp", args.tp is not None), ("--offload", args.offload),
                        ("--fp8", args.fp8)):
        if given:
            raise ConfigError(f"{flag} applies to a search under a strategy: add --strategy "
                              "fsdp (or ddp, tp, fsdp+tp) and --gpus N")
    return False


def cmd_maxbatch(args: argparse.Namespace) -> int:
    if args.start is not None and args.limit is not None and args.start > args.limit:
        raise ConfigError(f"--start {args.start} is above --max {args.limit}: the search "
                          "would probe nothing")
    sharded = _sharded(args)
    if sharded and set(flatten(args.mode, ["train"])) != {"train"}:
        raise ConfigError("--strategy searches the largest batch that trains: drop --mode eval")
    from dlbench.jobs import plans  # heavy: torch
    from dlbench.jobs.maxbatch_search import run_searches  # heavy: torch
    from dlbench.jobs.runs import launcher_for, torchrun_launcher  # heavy: torch
    from dlbench.models import get_model  # heavy: torch

    counts: list[int] = []
    if sharded:
        import torch  # heavy: the GPUs to count

        gpu = plans.on_gpu(args.device, plans.device_facts())
        visible = torch.cuda.device_count() if gpu else 2
        counts = flatten(args.gpus, [visible])
        plans.check_gpu_counts(counts, gpu, visible)  # more ranks than GPUs: refused now
    models = [get_model(m).name for m in flatten(args.model, [])]
    stop = StopRule(min_steps=args.min_steps, min_seconds=args.min_time,
                    max_seconds=args.max_time, target_rel_ci=args.target_ci)
    bases = plans.expand(models, [1], modes=flatten(args.mode, ["train"]),
                         precisions=flatten(args.precision, ["fp32"]),
                         compiles=flatten(args.compile, [None]),
                         channels_last=flatten(args.channels_last, [False]),
                         optimizer=args.optimizer, **checkpointing_fields(args),
                         autotune=args.autotune, input_size=args.input_size,
                         device=args.device, warmup_steps=args.warmup,
                         warmup_seconds=args.warmup_time, stop=stop)
    bases = plans.unique(map(plans.applicable, bases))
    plans.preflight(bases, fits=not sharded)  # a sharded strategy splits the model
    searches = [MaxBatchConfig(base=b, start=args.start, limit=args.limit,
                               tolerance=args.tolerance) for b in bases]
    if sharded:
        # ScalingConfig and MaxBatchConfig refuse a strategy or lever that does not apply
        jobs = plans.with_levers(
            plans.scaling_configs(bases, counts, flatten(args.strategy, ["ddp"]), ["default"]),
            tp=args.tp, offload=args.offload, fp8=args.fp8)
        searches = [replace(searches[0], base=c.base, parallel=c) for c in jobs]
        # each rank's share of the model fits its device; TP can split the model
        plans.preflight_scaling(jobs)
        if args.fp8:  # torchao importable here, before any job starts (the ranks import it)
            from dlbench.workloads import fp8  # heavy: torch
            fp8.check_installed()
    env = envmod.capture_environment()
    measure = None if args.no_measure else (torchrun_launcher() if sharded
                                            else launcher_for(args.isolate))
    with Store(args.db) as store:
        found, measured = run_searches(
            searches, store, env, args.command_line, tag=args.tag, reuse=args.resume,
            measure_with=measure, progress=SearchPrinter(say_to_stderr(args.quiet)))
    if args.json:
        sys.stdout.write(export.to_json([*found, *measured]) + "\n")
    else:
        label = envmod.device_label(env)
        terminal.print_table(tables.maxbatch_table(found, measured, f"Largest batch on {label}"))
        if sharded:
            terminal.print_table(tables.largest_batch_table(found, measured))
    return EXIT_OK if all(r.ok for r in [*found, *measured]) else EXIT_FAILED_RESULTS

