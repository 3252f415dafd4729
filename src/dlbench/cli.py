"""The ``dlbench`` command: parsing and dispatch only; the work lives in the modules it calls."""

from __future__ import annotations

import argparse
import shlex
import sys
from typing import Sequence

EXIT_OK = 0
EXIT_USAGE = 2          # bad flags, unknown model, precision the device lacks: nothing ran
EXIT_FAILED_RESULTS = 3  # the sweep finished but some results are failures (stored as rows)
EXIT_FATAL = 4          # a fatal device error stopped the sweep (results so far are kept)
EXIT_INTERRUPTED = 130  # Ctrl-C (results so far are kept)

EPILOG = """\
exit codes: 0 all results ok; 2 usage error (nothing ran); 3 some results are failures (stored
as rows, e.g. out of memory); 4 a fatal device error stopped the sweep; 130 interrupted.
Results measured before a failure or Ctrl-C are always kept; add --resume to go on."""


def _csv(kind: type = str):
    """An argparse type for comma-separated lists: ``-b 64,128`` or repeated flags."""
    def parse(text: str) -> list:
        items = [t.strip() for t in text.split(",") if t.strip()]
        if not items:
            raise argparse.ArgumentTypeError("empty list")
        try:
            return [kind(t) for t in items]
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None
    return parse


def _flatten(lists: list[list] | None, default: list) -> list:
    if not lists:
        return list(default)
    return list(dict.fromkeys(x for xs in lists for x in xs))


def _batch(text: str) -> int | None:
    if text in ("default", "auto"):
        return None
    n = int(text)
    if n < 1:
        raise ValueError(f"batch size must be >= 1, got {n}")
    return n


def _onoff(text: str) -> bool:
    t = text.lower()
    if t in ("on", "true", "yes", "1", "nhwc", "channels_last"):
        return True
    if t in ("off", "false", "no", "0", "nchw"):
        return False
    raise ValueError(f"expected on/off, got {text!r}")


def _compile_mode(text: str) -> str | None:
    t = text.lower()
    if t in ("none", "off", "eager", "no"):
        return None
    return "default" if t in ("on", "yes") else t


def _add_store_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--db", default="dlbench.db", metavar="PATH",
                   help="SQLite result store (default: ./dlbench.db; created if missing)")


def _add_sweep_flags(p: argparse.ArgumentParser) -> None:
    _add_store_flags(p)
    p.add_argument("--tag", help="label this run, to find and compare it later")
    p.add_argument("--resume", action="store_true",
                   help="skip configs this environment already measured in --db (and known OOMs)")
    p.add_argument("--isolate", action="store_true",
                   help="run each benchmark in a fresh process (survives fatal CUDA errors; "
                        "costs a few seconds of start-up per benchmark, outside the timing)")
    p.add_argument("--json", action="store_true", help="print this run's records as JSON on stdout")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress bar")


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="dlbench",
        description="Deep-learning benchmarks for GPUs and GPU servers: how fast this machine "
                    "trains and runs standard networks, measured with intervals and stored in SQLite.",
        epilog="start with 'dlbench run' (the default suite for this machine), then "
               "'dlbench results ls'. Every subcommand has --help.")
    sub = ap.add_subparsers(dest="cmd", required=True, metavar="COMMAND")

    p = sub.add_parser("run", help="run a named suite (default: the one for this machine)",
                       description="Run a named suite. With no --suite: 'default' on a GPU "
                       "(seed-000 CNNs + ViT, BERT, GPT-2, train, bf16/fp16, under 5 minutes on "
                       "an H100), 'cpu' on a machine without one (about 2 minutes on 2 cores).",
                       epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--suite", help="suite name; --list-suites shows them")
    p.add_argument("--list-suites", action="store_true", help="list the suites and exit")
    _add_sweep_flags(p)

    p = sub.add_parser(
        "throughput", help="measure models x batch sizes x precisions x modes (a sweep)",
        description="Measure training or inference throughput with synthetic data on the device. "
                    "Every list flag takes comma-separated values; the sweep is their product.",
        epilog="examples:\n"
               "  dlbench throughput -m resnet50 -b 128,256 --precision bf16 --channels-last on\n"
               "  dlbench throughput -m vgg16,resnet152 -b 16 --precision fp32,fp16 "
               "--mode eval,train --method seed002\n"
               "  dlbench throughput -m gpt2 --seq-len 1024 -b 8 --precision bf16 --compile default\n\n"
               + EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("-m", "--model", action="append", type=_csv(), required=True,
                   help="model name(s); 'dlbench models' lists them")
    p.add_argument("-b", "--batch-size", action="append", type=_csv(_batch),
                   help="batch size(s) per device; 'default' = the model's GPU default (default)")
    p.add_argument("--mode", action="append", type=_csv(), help="train and/or eval (default: train)")
    p.add_argument("--precision", action="append", type=_csv(),
                   help="fp32 (true fp32, TF32 off), tf32, fp16 (autocast+GradScaler), bf16 "
                        "(autocast) (default: fp32)")
    p.add_argument("--compile", action="append", type=_csv(_compile_mode),
                   help="none (eager, default) and/or a torch.compile mode: default, "
                        "reduce-overhead, max-autotune-no-cudagraphs, max-autotune")
    p.add_argument("--channels-last", action="append", type=_csv(_onoff),
                   help="on/off: NHWC memory format for image models (default: off)")
    p.add_argument("--optimizer", choices=("sgd", "adamw"), default="sgd",
                   help="sgd = SGD with momentum 0.9, as seed 000 (default)")
    p.add_argument("--method", choices=("standard", "seed002"), default="standard",
                   help="seed002: train = forward + out.sum().backward(), no optimizer, as the "
                        "seed-002 article's scripts")
    p.add_argument("--seq-len", "--input-size", dest="input_size", type=int,
                   help="sequence length (text models) or image side in px (default: the model's)")
    p.add_argument("--device", default="auto", help="auto (default), cpu, cuda, cuda:N")
    p.add_argument("--warmup", type=int, default=10, help="warm-up steps after the first (default 10)")
    p.add_argument("--warmup-time", type=float, default=1.0,
                   help="also warm up for at least this many seconds (default 1)")
    p.add_argument("--min-steps", type=int, default=20, help="measured steps at least (default 20)")
    p.add_argument("--min-time", type=float, default=2.0, help="measured seconds at least (default 2)")
    p.add_argument("--max-time", type=float, default=15.0,
                   help="stop a window after this many seconds even if noisy (default 15)")
    p.add_argument("--max-steps", type=int, default=100_000, help="stop after this many steps")
    p.add_argument("--target-ci", type=float, default=0.01,
                   help="stop once the 95%% interval half-width is below this fraction (default 0.01)")
    p.add_argument("--seed", type=int, default=0, help="seed of weights and synthetic data")
    _add_sweep_flags(p)

    p = sub.add_parser("results", help="list, show and export stored results")
    rsub = p.add_subparsers(dest="rcmd", required=True, metavar="ACTION")
    q = rsub.add_parser("ls", help="list runs (or, with --results, every result)")
    _add_store_flags(q)
    q.add_argument("--results", action="store_true", help="list results, not runs")
    q.add_argument("--run", help="only this run (id prefix or 'latest')")
    q.add_argument("--tag", help="only runs with this tag")
    q.add_argument("--limit", type=int, default=50, help="at most this many rows (default 50)")
    q.add_argument("--json", action="store_true")
    q = rsub.add_parser("show", help="a run's tables, or one result in full",
                        description="Show a run (id prefix or 'latest') as tables, or one result "
                                    "(id prefix) with its summary, environment and raw step times.")
    _add_store_flags(q)
    q.add_argument("ref", nargs="?", default="latest", help="run id, result id, or 'latest'")
    q.add_argument("--tag", help="instead of one run, every run with this tag (e.g. a resumed sweep)")
    q.add_argument("--view", choices=("throughput", "seed000", "seed002"), help="table layout")
    q.add_argument("--json", action="store_true")
    q = rsub.add_parser("export", help="write results as JSON (full records) or CSV (one row each)")
    _add_store_flags(q)
    q.add_argument("--run", default="all", help="run id prefix, 'latest' or 'all' (default)")
    q.add_argument("--tag", help="only runs with this tag")
    q.add_argument("--format", choices=("json", "csv"), default="json")
    q.add_argument("-o", "--output", help="file to write (default: stdout)")

    p = sub.add_parser("env", help="the environment results are stamped with")
    p.add_argument("--json", action="store_true")
    p = sub.add_parser("models", help="list the models, with input, unit and FLOPs")
    p.add_argument("--json", action="store_true")
    p.add_argument("--all", action="store_true", help="include the tiny test models")
    p.add_argument("--no-flops", action="store_true", help="skip counting FLOPs (faster)")
    return ap


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from dlbench import commands
    from dlbench.config import ConfigError
    from dlbench.models.base import UnknownModelError
    from dlbench.report.terminal import error
    from dlbench.store import StoreError

    handler = {"run": commands.cmd_run, "throughput": commands.cmd_throughput,
               "results": commands.cmd_results, "env": commands.cmd_env,
               "models": commands.cmd_models}[args.cmd]
    args.command_line = "dlbench " + shlex.join(sys.argv[1:] if argv is None else list(argv))
    try:
        return handler(args)
    except (ConfigError, UnknownModelError, StoreError) as exc:
        error(str(exc))
        return EXIT_USAGE
    except KeyboardInterrupt:
        error("interrupted")
        return EXIT_INTERRUPTED
    except BrokenPipeError:  # `dlbench results export | head`
        return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
