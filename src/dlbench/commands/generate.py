"""``dlbench generate``: flags -> generation configs -> sweep -> tables."""

from __future__ import annotations

import argparse
import sys
import time

from rich.markup import escape

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
    add_command,
    add_sweep_flags,
    batch_size,
    check_store,
    csv_list,
    device,
    flatten,
    integer,
    one_of,
    show_tables,
)
from dlbench.config import ConfigError
from dlbench.jobs.sweep import NullProgress, SweepOutcome
from dlbench.measure.stopping import StopRule
from dlbench.records.generate import (
    FP8_LABELS,
    FP8_RECIPES,
    GENERATE_PRECISIONS,
    GENERATE_STOP,
    PATHS,
    TUNED_PATHS,
)
from dlbench.report import export, terminal
from dlbench.report.table import fmt_num, fmt_pct
from dlbench.store import Store

ORDER = 15

AUTO = "auto"

DESCRIPTION = """\
How fast this GPU runs a language model: a batch of prompts is prefilled and a fixed number of
tokens generated for each (greedy, end-of-sequence ignored), request after request, until the
interval of output tokens/s is under --target-ci. Models are built from their architecture
config with random weights on the device (nothing is downloaded); random weights do the same
work as trained ones because every length is fixed.

Each result holds the time to first token (TTFT: the prefill and the first token) and every
decode step's time (TPOT: time per output token, which in a batch is also each sequence's
inter-token latency), from which: output and total tokens/s, TTFT and TPOT mean/median/p90/p99,
prefill TFLOP/s and MFU, the bytes a decode step must read over its time (GB/s) and its fraction
of the memory roofline, energy per output token, peak memory and the KV cache.

paths (--path):
  eager    model.generate() as a user calls it: dynamic KV cache, eager kernels
  static   dlbench's decode loop over a static KV cache, eager kernels
  graph    static, each decode step captured once in a CUDA graph and replayed (GPU)
  compile  static, the decode step compiled by torch.compile, then captured (GPU; about 1 min
           of compilation per batch size for an 8B model, timed apart as the first request)
--fuse computes each layer's q/k/v projections, and its gate/up projections, as one matmul
each on every path but eager (Llama-family layouts; what serving stacks do).
--fold-gqa reads each key/value head of a grouped-query model once per decode step, with its
group's query heads as one block, where transformers' masked SDPA path copies the KV cache once
per query head of the group (4x the cache's traffic for llama-3.1-8b): it matters at large
batches, where the cache outweighs the weights.
--tuned measures eager and compile and prints them side by side with the factor, the setup
time and the tokens it takes to pay it back; --tuned --fuse --fold-gqa is dlbench's fastest
setup.
--precision fp8 builds the model in bf16 and quantizes its linear layers with torchao (fp8 e4m3
weights with per-row scales, inputs quantized per token: its H100 inference recipe), after
--fuse; the LM head, embedding, attention and KV cache stay bf16. It needs a GPU with fp8
tensor cores (compute capability 8.9+: L4, L40S, RTX 4090, H100, H200, B200) and torchao
(pip install torchao, a version matching your torch).
--fp8-recipe weight-only quantizes the same weights the same way but leaves the inputs bf16:
each weight is dequantized into a bf16 matmul (torchao's Float8WeightOnlyConfig, per-row
scales). Memory-bound decode at batch 1 reads a byte per weight either way, without the
dynamic recipe's quantization of every input; its rows read fp8-wo."""

EXAMPLES = """\
examples:
  dlbench generate -m llama-3.2-1b                       # batch 1, 128+128 tokens, eager
  dlbench generate -m llama-3.1-8b -b 1,8,32,64,auto --tuned --fuse --fold-gqa
  dlbench generate -m llama-3.2-1b --prompt-len 128,1024 --output-len 256 --path graph
  dlbench generate -m llama-3.1-8b -b 1,64 --precision bf16,fp8 --path compile --fuse
  dlbench generate -m llama-3.1-8b --precision fp8 --fp8-recipe weight-only --path compile
  dlbench generate -m 'hf:path/to/model_dir' -b 4      # a local config (and its weights)
  dlbench generate --list-models
"""


def register(sub: argparse._SubParsersAction) -> None:
    p = add_command(sub, "generate", help="LLM generation: TTFT, TPOT, tokens/s, memory roofline",
                    description=DESCRIPTION, epilog=EXAMPLES + "\n" + EPILOG,
                    formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("-m", "--model", action="append", type=csv_list(),
                   help="language model(s): a shipped architecture (--list-models), "
                        "hf:NAME_OR_DIR[?FIELD=VALUE&...] or FILE.py:FUNC returning a "
                        "transformers causal LM")
    p.add_argument("--list-models", action="store_true",
                   help="list the shipped architectures, their sizes and sources, and exit")
    p.add_argument("-b", "--batch-size", action="append", type=csv_list(_batch_or_auto),
                   help="prompts generated together (default 1); 'auto' = the largest batch "
                        "whose weights, KV cache and prefill fit the GPU's memory")
    p.add_argument("--prompt-len", action="append", type=csv_list(integer(1)),
                   help="tokens per prompt (default 128)")
    p.add_argument("--output-len", action="append", type=csv_list(integer(2)),
                   help="tokens generated per prompt (default 128)")
    p.add_argument("--precision", action="append", type=csv_list(),
                   help=f"{', '.join(GENERATE_PRECISIONS)}: weights, KV cache and activations "
                        "(default: bf16 on a GPU, fp32 on the CPU); fp8: the linear layers in "
                        "fp8 through torchao, the rest bf16 (an sm_89+ GPU: H100/H200/L4/Ada; "
                        "pip install torchao)")
    p.add_argument("--fp8-recipe", choices=FP8_RECIPES, default=FP8_RECIPES[0],
                   help="how --precision fp8 quantizes the linear layers: dynamic (default: fp8 "
                        "weights and inputs, fp8 matmuls) or weight-only (fp8 weights "
                        "dequantized into bf16 matmuls: the batch-1 decode recipe); labelled "
                        f"{FP8_LABELS['dynamic']} and {FP8_LABELS['weight-only']}")
    p.add_argument("--path", action="append", type=csv_list(one_of(PATHS, None, "path")),
                   help=f"{', '.join(PATHS)} (default eager; see above)")
    p.add_argument("--tuned", action="store_true",
                   help=f"measure {' and '.join(TUNED_PATHS)} and show them side by side")
    p.add_argument("--fuse", action="store_true",
                   help="fuse each layer's q/k/v and gate/up projections into one matmul each "
                        "on the static-cache paths (Llama, Qwen, Mistral layouts)")
    p.add_argument("--fold-gqa", action="store_true",
                   help="grouped-query models: decode attention reads each key/value head once "
                        "(its group's query heads as one block) instead of copying the KV "
                        "cache per query head; static-cache paths")
    p.add_argument("--device", default="auto", type=device,
                   help="auto (default), cpu, cuda, cuda:N")
    p.add_argument("--warmup", type=COUNT, default=1,
                   help="warm-up requests after the first (default 1)")
    p.add_argument("--min-requests", type=integer(2), default=GENERATE_STOP.min_steps,
                   help=f"measured requests at least, even past --max-time "
                        f"(default {GENERATE_STOP.min_steps})")
    p.add_argument("--min-time", type=SECONDS_OR_ZERO, default=GENERATE_STOP.min_seconds,
                   help=f"measured seconds at least (default {GENERATE_STOP.min_seconds:g})")
    p.add_argument("--max-time", type=SECONDS, default=GENERATE_STOP.max_seconds,
                   help="stop the window after this many seconds even if the interval is wide, "
                        f"once --min-requests are measured (flagged noisy; default "
                        f"{GENERATE_STOP.max_seconds:g})")
    p.add_argument("--target-ci", type=FRACTION, default=GENERATE_STOP.target_rel_ci,
                   help="stop once the 95%% interval of the request time is this narrow "
                        f"(default {GENERATE_STOP.target_rel_ci:g})")
    p.add_argument("--seed", type=SEED, default=0, help="seed of the weights and prompts")
    p.add_argument("--telemetry-interval", type=SECONDS_OR_ZERO, default=0.1,
                   help="seconds between GPU power samples (0: off; default 0.1)")
    p.add_argument("--profile", type=COUNT, default=0, metavar="N",
                   help="after the window, profile N more requests kernel by kernel")
    p.add_argument("--repeat", type=POSITIVE, default=1, metavar="N",
                   help="run each config in N fresh processes; the table shows their spread")
    add_sweep_flags(p)
    p.set_defaults(handler=cmd_generate)


def _batch_or_auto(text: str) -> int | str:
    if text.strip().lower() == AUTO:
        return AUTO
    b = batch_size(text)
    if b is None:
        raise argparse.ArgumentTypeError("a batch is a number or 'auto'")
    return b


def cmd_generate(args: argparse.Namespace) -> int:
    if args.list_models:
        return _list_models()
    if not args.model:
        raise ConfigError("-m/--model is required (dlbench generate --list-models lists them)")
    from dlbench.jobs import generate_runs as jobs  # heavy: torch
    from dlbench.jobs import plans  # heavy: torch

    facts = plans.device_facts()
    gpu = plans.on_gpu(args.device, facts)
    paths = flatten(args.path, []) or (list(TUNED_PATHS) if args.tuned else ["eager"])
    if args.tuned:
        paths = list(dict.fromkeys(list(TUNED_PATHS) + paths))
    precisions = flatten(args.precision, []) or ["bf16" if gpu else "fp32"]
    for p in precisions:
        if p not in GENERATE_PRECISIONS:
            raise ConfigError(f"--precision {p}: dlbench generate takes "
                              f"{', '.join(GENERATE_PRECISIONS)}")
    if "fp8" in precisions:  # an sm_89+ GPU and torchao, before any model is built (exit 2)
        jobs.check_fp8(args.device)
    uncompiled = [p for p in paths if p != "compile"]
    if "fp8" in precisions and args.fp8_recipe == "weight-only" and uncompiled:
        # measured on H100s: weight-only decode graph-captured was several times slower than
        # the dynamic recipe's, compiled it was faster (docs/results/2026-11-2x-h100.md)
        terminal.stderr.print(
            f"note: --fp8-recipe weight-only is fast only under --path compile; on "
            f"{', '.join(uncompiled)} its layers run uncompiled, several times slower than the "
            "dynamic recipe on an H100")
    stop = StopRule(min_steps=args.min_requests, min_seconds=args.min_time,
                    max_seconds=args.max_time, target_rel_ci=args.target_ci)
    batches = flatten(args.batch_size, [1])
    configs, chosen = jobs.plan(
        flatten(args.model, []), batches, flatten(args.prompt_len, [128]),
        flatten(args.output_len, [128]), precisions, paths, device=args.device, stop=stop,
        warmup_requests=args.warmup, seed=args.seed,
        telemetry_interval_s=args.telemetry_interval or None, profile_requests=args.profile,
        auto_batch=jobs.device_auto_batch(args.device) if AUTO in batches else None,
        fuse=args.fuse, fold_gqa=args.fold_gqa, fp8_recipe=args.fp8_recipe)
    jobs.preflight(configs)  # a model too large for the device: refused before the store opens
    for a in chosen:  # printed even with --quiet: the batch is part of what is measured
        terminal.stderr.print(f"-b auto: {escape(a.model)} {a.precision} "
                              f"{a.prompt_len}+{a.output_len} -> batch {a.batch}")
    check_store(args.db)
    env = envmod.capture_environment()
    label = envmod.device_label(env)
    if not args.quiet:
        terminal.stderr.print(
            f"[bold]dlbench generate[/bold] {len(configs)} benchmark(s)"
            + (f", each in {args.repeat} fresh processes" if args.repeat > 1 else "")
            + f" on {escape(label)}; torch {(env.get('packages') or {}).get('torch')}; "
            f"results -> {escape(args.db)}")
    t0 = time.perf_counter()
    outcome = jobs.run_generate(configs, args.db, args.command_line, env, isolate=args.isolate,
                                tag=args.tag, resume=args.resume, repeat=args.repeat,
                                progress=NullProgress() if args.quiet else GenerateProgress())
    _print_outcome(args, outcome, label, time.perf_counter() - t0)
    if outcome.status == "interrupted":
        return EXIT_INTERRUPTED
    if outcome.status == "fatal":
        return EXIT_FATAL
    return EXIT_FAILED_RESULTS if any(not r.ok for r in outcome.records) else EXIT_OK


class GenerateProgress(terminal.RichProgress):
    """The sweep's bar, and a line per result in the figures of generation."""

    def done(self, record) -> None:
        label = record.config.label
        if getattr(record, "repeat_group", None) is not None:
            label += f" (process {record.repeat_index + 1} of {record.repeat_count})"
        s = record.summary()
        if s is None:
            first = (record.error or "").splitlines()[0][:160] if record.error else ""
            text = "[red]✗[/red] " + escape(f"{label}: {record.error_type}: {first}")
        else:
            text = (f"[green]✓[/green] {escape(label)}: {fmt_num(s.throughput)} output tok/s "
                    f"±{fmt_pct(s.rel_halfwidth)}, TTFT {record.ttft().mean_s * 1e3:.1f} ms, "
                    f"TPOT {record.tpot().mean_s * 1e3:.2f} ms ({s.steps} requests)")
        self._progress.console.print(text, highlight=False)
        self._progress.advance(self._task)


def _print_outcome(args: argparse.Namespace, outcome: SweepOutcome, label: str,
                   wall: float) -> None:
    if args.json:
        sys.stdout.write(export.to_json(outcome.records) + "\n")
    else:
        # The decode roofline and prefill MFU against this device's measured ceilings, where a
        # 'dlbench peak' run in the store has them (else the datasheet's, as the table says).
        with Store(args.db) as store:
            peaks = store.results(kind="peak")
        show_tables(outcome.records, "generate", label, args.quiet, peaks)
    if outcome.message:
        terminal.error(outcome.message)
    terminal.stderr.print(
        f"wall time {wall:.1f} s; {len(outcome.records)} result(s) stored in {escape(args.db)} "
        f"(run {outcome.run_id})"
        + (f", {outcome.skipped} skipped by --resume" if outcome.skipped else ""))


def _list_models() -> int:
    from dlbench.models.lm import get_lm, lm_names, meta_shape, shipped  # heavy: transformers

    for name in lm_names():
        e = shipped()[name]
        shape = meta_shape(get_lm(name))
        terminal.stdout.print(
            f"[bold]{escape(name):14}[/bold] {escape(e.title)}: {shape.params / 1e9:.2f} B "
            f"parameters, {shape.layers} layers, {shape.kv_heads} KV heads; "
            f"[dim]{escape(e.source)}[/dim]", highlight=False, soft_wrap=True)
    terminal.stdout.print("also: hf:NAME_OR_DIR[?FIELD=VALUE&...] (a transformers config; a "
                          "directory with weights loads them) and FILE.py:FUNC (a function "
                          "returning a transformers causal LM)", highlight=False)
    return EXIT_OK
