"""``dlbench run`` and ``dlbench throughput``: flags -> configs -> sweep -> tables."""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence

from dlbench import env as envmod
from dlbench.commands.common import (
    COUNT,
    EPILOG,
    EXIT_FAILED_RESULTS,
    EXIT_FATAL,
    EXIT_INTERRUPTED,
    EXIT_OK,
    FRACTION,
    POSITIVE,
    SECONDS,
    SECONDS_OR_ZERO,
    SEED,
    SearchPrinter,
    add_checkpointing,
    add_command,
    add_sweep_flags,
    batch_size,
    check_store,
    checkpointing_fields,
    compile_mode,
    csv_list,
    device,
    flatten,
    integer,
    metavar,
    on_off,
    one_of,
    say_to_stderr,
    show_tables,
)
from dlbench.config import ATTENTION_BACKENDS, FRAMEWORKS, METHODS, OPTIMIZER_IMPLS, ConfigError
from dlbench.frameworks import jax as jaxpath
from dlbench.jobs.sweep import NullProgress, SweepOutcome
from dlbench.measure.stopping import StopRule
from dlbench.records import compat
from dlbench.report import export, terminal
from dlbench.suites import OLD_NAMES, SUITES, suite_for

ORDER = 10

TUNED_HELP = ("tuned mode: also run each config in the fastest configuration dlbench knows for "
              "this device (a 'dlbench tune' result in --db, a recipe measured on this GPU kind, "
              "else the cheap levers that apply: channels_last, fused optimizer, whole-step CUDA "
              "graph) and print it beside the plain figure, with the factor, the setup "
              "time and the steps it takes to pay that back")


def register(sub: argparse._SubParsersAction) -> None:
    p = add_command(sub, "run", help="run a named suite (default: the one for this machine)",
                         description="Run a named suite. With no --suite: 'default' on a GPU "
                         "(ResNet-50, VGG-16, ViT-B/16, GPT-2: train, bf16/fp16, and ResNet-50 "
                         "eval, each config in 3 fresh processes so that every figure shows the "
                         "spread across processes: about 5 minutes on an H100; --repeat 1 "
                         "measures each once), 'cpu' on a machine without one (one process per "
                         "config, each to a 5% interval; its windows and warm-ups 71 to 115 s in "
                         "all).", epilog=EPILOG,
                         formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--suite", type=one_of(tuple(SUITES), OLD_NAMES, "suite"),
                   metavar=metavar(SUITES), help="suite name; --list-suites says what each runs")
    p.add_argument("--list-suites", action="store_true", help="list the suites and exit")
    p.add_argument("--tuned", action="store_true", help=TUNED_HELP)
    _add_repeat_flag(p, suite=True)
    add_sweep_flags(p)
    p.set_defaults(handler=cmd_run)

    p = add_command(
        sub, "throughput", help="measure models x batch sizes x precisions x modes (a sweep)",
        description="Measure training or inference throughput with synthetic data on the device. "
                    "Every list flag takes comma-separated values; the sweep is their product.",
        epilog="examples:\n"
               "  dlbench throughput -m resnet50 -b 128,256 --precision bf16 --channels-last on\n"
               "  dlbench throughput -m vgg16,resnet152 -b 16 --precision fp32,fp16 "
               "--mode eval,train --method fwd-bwd\n"
               "  dlbench throughput -m gpt2 --seq-len 1024 -b 8 --precision bf16 --compile default\n\n"
               + EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("-m", "--model", action="append", type=csv_list(), required=True,
                   help="model name(s); 'dlbench models' lists them")
    p.add_argument("-b", "--batch-size", action="append", type=csv_list(_batch_or_auto),
                   help="batch size(s) per device; 'default' = the model's GPU default (default);"
                        " 'auto' = the largest that fits (a stored 'dlbench maxbatch' result, "
                        "or a search now)")
    p.add_argument("--mode", action="append", type=csv_list(), help="train and/or eval (default: train)")
    p.add_argument("--precision", action="append", type=csv_list(),
                   help="fp32 (true fp32, TF32 off), tf32, fp16 (autocast+GradScaler), bf16 "
                        "(autocast) (default: fp32)")
    p.add_argument("--compile", action="append", type=csv_list(compile_mode),
                   help="none (eager, default) and/or a torch.compile mode: default, "
                        "reduce-overhead, max-autotune-no-cudagraphs, max-autotune")
    p.add_argument("--channels-last", action="append", type=csv_list(on_off),
                   help="on/off: NHWC memory format for image models (default: off)")
    p.add_argument("--optimizer", choices=("sgd", "adamw"), default="sgd",
                   help="sgd = SGD with momentum 0.9, as tf_cnn_benchmarks (default)")
    p.add_argument("--method", type=one_of(METHODS, OLD_METHODS, "method"), default="standard",
                   metavar=metavar(METHODS),
                   help="fwd-bwd: train = forward + out.sum().backward(), no loss and no "
                        "optimizer, as classic per-model ms-per-batch scripts time it "
                        "(default: standard, a full training step)")
    p.add_argument("--seq-len", "--input-size", dest="input_size", type=POSITIVE,
                   help="sequence length (text models) or image side in px (default: the model's)")
    p.add_argument("--device", default="auto", type=device,
                   help="auto (default), cpu, cuda, cuda:N")
    p.add_argument("--warmup", type=COUNT, default=10, help="warm-up steps after the first (default 10)")
    p.add_argument("--warmup-time", type=SECONDS_OR_ZERO, default=1.0,
                   help="also warm up for at least this many seconds (default 1)")
    p.add_argument("--min-steps", type=integer(2), default=20, help="measured steps at least, even past --max-time (default 20)")
    p.add_argument("--min-time", type=SECONDS_OR_ZERO, default=2.0, help="measured seconds at least (default 2)")
    p.add_argument("--max-time", type=SECONDS, default=15.0,
                   help="stop a window after this many seconds even if noisy, once --min-steps are "
                        "measured (default 15)")
    p.add_argument("--max-steps", type=integer(2), default=100_000, help="stop after this many steps")
    p.add_argument("--target-ci", type=FRACTION, default=0.01,
                   help="stop once the 95%% interval half-width is below this fraction (default 0.01)")
    p.add_argument("--cuda-graph", action="append", type=csv_list(on_off),
                   help="on/off: capture the whole step (forward, backward, optimizer) in one "
                        "CUDA graph and replay it (fp16 training needs --optimizer-impl fused: "
                        "the fused kernel reads GradScaler's overflow flag on the device, other "
                        "kernels have it read on the host)")
    p.add_argument("--compile-loss", action="append", type=csv_list(on_off),
                   help="on/off, with --compile, train: compile the loss with the model as one "
                        "graph, so a language model's logits are not upcast and "
                        "log-softmaxed by separate kernels each reading and writing them all "
                        "(default: off, the model alone is compiled)")
    p.add_argument("--optimizer-impl", choices=OPTIMIZER_IMPLS, default="default",
                   help="optimizer kernels: default (PyTorch's pick), foreach or fused")
    p.add_argument("--attention", choices=ATTENTION_BACKENDS,
                   help="pin scaled-dot-product attention to one backend (transformer models)")
    p.add_argument("--tuned", action="store_true", help=TUNED_HELP)
    p.add_argument("--pad-vocab", action="store_true",
                   help="language models: pad the vocabulary to a multiple of 64 (gpt2 50,257 "
                        "-> 50,304, as nanoGPT does), so the lm-head GEMMs get tensor-core "
                        "friendly dimensions; the extra rows are never a target and FLOPs/MFU "
                        "count the unpadded model (ignored for image models)")
    add_checkpointing(p, " (train): less memory, more compute")
    p.add_argument("--no-autotune", dest="autotune", action="store_false",
                   help="let cuDNN's heuristics pick convolution algorithms instead of timing "
                        "them on the first step (torch.backends.cudnn.benchmark off): in true "
                        "fp32 that timing takes minutes per shape at large batches; the figure "
                        "is then that of the heuristics' choice, labelled no-autotune")
    p.add_argument("--telemetry-interval", type=SECONDS_OR_ZERO, default=0.1, metavar="S",
                   help="GPU telemetry sampling interval in seconds (default 0.1; 0 = off)")
    p.add_argument("--profile", type=COUNT, default=0, metavar="N",
                   help="after the measured window, run N more steps under torch.profiler and "
                        "show where their time went: GPU time per step by kernel category "
                        "(convolution, GEMM, Inductor's kernels, optimizer, ...), the top "
                        "kernels, and how busy the GPU was; kept in the record, the figures "
                        "are not affected (default 0: off; 10 is plenty)")
    p.add_argument("--seed", type=SEED, default=0, help="seed of weights and synthetic data")
    p.add_argument("--framework", choices=FRAMEWORKS, default="torch",
                   help="torch (default) or jax: the same model built in Flax, its step "
                        "jit-compiled by XLA with Optax's optimizer, timed by the same window "
                        "(needs the jax extra: pip install 'dlbench[jax]'); the PyTorch levers "
                        "(--compile, --cuda-graph, --channels-last...) do not apply to it; "
                        "docs/frameworks.md")
    _add_repeat_flag(p, suite=False)
    add_sweep_flags(p)
    p.set_defaults(handler=cmd_throughput)


REPEAT_HELP = ("run each config in N fresh processes, one after another (each with its own "
               "cuDNN autotuning, allocator and clocks), store every process's record, and show "
               "the mean of their figures with a 95%% interval across processes beside the "
               "one within a process; implies --isolate. With --resume an unfinished group is "
               "completed")


def _add_repeat_flag(p: argparse.ArgumentParser, suite: bool) -> None:
    p.add_argument("--repeat", type=POSITIVE, default=None if suite else 1, metavar="N",
                   help=REPEAT_HELP + (" (default: the suite's: 3 for 'default', 1 for the "
                                       "others)" if suite else " (default 1)"))


# -- run / throughput -------------------------------------------------------------------------
#: ``--method`` names no longer shown, still accepted.
OLD_METHODS = compat.METHODS
AUTO = "auto"


def cmd_run(args: argparse.Namespace) -> int:
    if args.list_suites:
        width = max(map(len, SUITES))
        for s in SUITES.values():
            terminal.stdout.print(f"[bold]{s.name:{width}}[/bold] {s.description}"
                                  + (" [dim](GPU only)[/dim]" if s.gpu_only else ""))
        return EXIT_OK
    from dlbench.jobs import plans  # heavy: torch
    suite, configs = suite_for(args.suite, plans.device_facts())
    if args.repeat is None:
        args.repeat = suite.repeat
    return _sweep(args, configs, suite.name, suite.view, tuned=args.tuned,
                  keep=("precision", "batch_size"))


def cmd_throughput(args: argparse.Namespace) -> int:
    from dlbench.jobs import plans  # heavy: torch
    from dlbench.models import get_model  # heavy: torch

    if args.framework == "jax":
        _check_jax(args)
    models = [get_model(m).name for m in flatten(args.model, [])]
    if args.framework == "jax":  # a model without a JAX twin: one line now, not a failed row
        from dlbench.frameworks.jax.models import get_jax_model  # heavy: jax
        for m in models:
            get_jax_model(m)
    stop = StopRule(min_steps=args.min_steps, min_seconds=args.min_time,
                    max_seconds=args.max_time, max_steps=args.max_steps,
                    target_rel_ci=args.target_ci)
    facts = plans.device_facts()
    gpu = plans.on_gpu(args.device, facts)
    batches = flatten(args.batch_size, [None])
    precisions = flatten(args.precision, []) or [
        plans.tuned_precision(facts, gpu) if args.tuned else "fp32"]
    fixed = [b for b in batches if b != AUTO]
    configs = plans.expand(
        models, fixed or [1],
        modes=flatten(args.mode, ["train"]),
        precisions=precisions,
        compiles=flatten(args.compile, [None]),
        channels_last=flatten(args.channels_last, [False]),
        cuda_graphs=flatten(args.cuda_graph, [False]),
        optimizer_impl=args.optimizer_impl, attention=args.attention, pad_vocab=args.pad_vocab,
        default_batch=plans.default_batch(facts, gpu),
        optimizer=args.optimizer, method=args.method, input_size=args.input_size,
        device=args.device, warmup_steps=args.warmup, warmup_seconds=args.warmup_time,
        stop=stop, seed=args.seed, **checkpointing_fields(args), autotune=args.autotune,
        telemetry_interval_s=args.telemetry_interval or None, profile_steps=args.profile,
        framework=args.framework)
    configs = plans.with_compiled_loss(configs, flatten(args.compile_loss, [False]))
    configs = plans.unique(map(plans.applicable, configs))
    if AUTO in batches:  # size each setup now, before the sweep
        configs = _auto(args, configs, keep=bool(fixed))
    view = "ms-per-batch" if args.method == "fwd-bwd" else "throughput"
    keep = [name for name, given in (("precision", args.precision), ("batch_size", args.batch_size))
            if given]
    return _sweep(args, configs, None, view, tuned=args.tuned, keep=keep)


def _check_jax(args: argparse.Namespace) -> None:
    """--framework jax: the extra installed and no flag that only PyTorch has (one line each)."""
    if not jaxpath.available():
        raise ConfigError(jaxpath.INSTALL_HINT)
    if args.tuned:
        raise ConfigError("--tuned with --framework jax: tuned mode's levers are PyTorch's; "
                          "drop --tuned")
    if AUTO in flatten(args.batch_size, []):
        raise ConfigError("-b auto with --framework jax: the largest-batch search runs PyTorch; "
                          "give the batch")


def _auto(args: argparse.Namespace, configs: list, keep: bool) -> list:
    """``-b auto``: each setup at the largest batch that fits (a stored 'dlbench maxbatch'
    result, or a search now), said on stderr; a setup where nothing fits is left out."""
    from dlbench.jobs.maxbatch_search import with_auto_batches  # heavy: torch
    configs, found = with_auto_batches(configs, args.db, args.command_line, keep=keep,
                                       tag=args.tag,
                                       progress=SearchPrinter(say_to_stderr(args.quiet)))
    for a in found:
        cfg = a.config
        if a.sized is not None:
            # Printed even with --quiet: the batch is part of what the sweep measures.
            terminal.stderr.print(f"-b auto: {cfg.model} {cfg.precision} {cfg.mode} -> batch "
                                  f"{a.search.best_batch}")
        else:
            terminal.error(f"-b auto: {cfg.label.replace(' b1 ', ' ')}: no batch fits "
                           f"({a.search.error}); left out of the sweep")
    return configs


def _batch_or_auto(text: str) -> int | str | None:
    """``-b``: a number, ``default`` (None) or ``auto`` (the largest batch that fits)."""
    return AUTO if text.strip().lower() == AUTO else batch_size(text)


def _sweep(args: argparse.Namespace, configs: list, suite: str | None, view: str,
           tuned: bool = False, keep: Sequence[str] = ()) -> int:
    from dlbench.jobs import plans, runs  # heavy: torch
    repeat = getattr(args, "repeat", None) or 1
    plans.preflight(configs)
    check_store(args.db)  # a foreign or unreadable --db: one line, before the header line
    env = envmod.capture_environment()
    label = envmod.device_label(env)
    if tuned:
        configs, notes = runs.tuned_configs(configs, env, args.db, keep,
                                            quick_compile=suite is not None)
        if not args.quiet:
            terminal.stderr.print("[bold]tuned mode[/bold]: each config is measured plain, then "
                                  "tuned; the recipes:")
            for note in notes:
                terminal.stderr.print(f"  {note}")
    if not args.quiet:
        terminal.stderr.print(
            f"[bold]dlbench[/bold] {len(configs)} benchmark(s)"
            + (f" (suite {suite})" if suite else "")
            + (f", each in {repeat} fresh processes" if repeat > 1 else "")
            + f" on {label}; torch "
            f"{(env.get('packages') or {}).get('torch')}; results -> {args.db}")
    t0 = time.perf_counter()
    outcome = runs.run_throughput(
        configs, args.db, args.command_line, env, isolate=args.isolate, suite=suite,
        repeat=repeat,
        tag=args.tag, resume=args.resume,
        progress=NullProgress() if args.quiet else terminal.RichProgress())
    _print_outcome(args, outcome, view, label, time.perf_counter() - t0)
    if outcome.status == "interrupted":
        return EXIT_INTERRUPTED
    if outcome.status == "fatal":
        return EXIT_FATAL
    return EXIT_FAILED_RESULTS if any(not r.ok for r in outcome.records) else EXIT_OK


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
