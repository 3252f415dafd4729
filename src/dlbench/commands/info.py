"""``dlbench env`` and ``dlbench models``: what a result is stamped with, and what can be measured."""

from __future__ import annotations

import argparse
import json
import sys

from dlbench import env as envmod
from dlbench.commands.common import EXIT_OK, add_command, add_output_flags
from dlbench.report import tables, terminal

ORDER = 90


def register(sub: argparse._SubParsersAction) -> None:
    p = add_command(sub, "env", help="the environment results are stamped with")
    add_output_flags(p, "print the whole environment as one JSON object on stdout (the 'env' "
                        "every record carries)",
                     "print only the fields that decide whether two results compare (device, "
                     "driver, CUDA, cuDNN, torch, CPU), one 'key value' line each, no table")
    p.set_defaults(handler=cmd_env)
    p = add_command(sub, "models", help="list the models, with input, unit and FLOPs")
    add_output_flags(p, "print the models as a JSON array on stdout (name, source, kind, unit, "
                        "input_size, default_batch, eval/train FLOPs per sample, description)",
                     "print only the model names, one per line (no FLOPs are counted: fast)")
    p.add_argument("--all", action="store_true", help="include the tiny test models")
    p.add_argument("--no-flops", action="store_true", help="skip counting FLOPs (faster)")
    p.set_defaults(handler=cmd_models)


def cmd_env(args: argparse.Namespace) -> int:
    env = envmod.capture_environment()
    if args.quiet and not args.json:
        for k, v in envmod.identity(env).items():
            shown = json.dumps(v) if isinstance(v, (dict, list)) else str(v)
            sys.stdout.write(f"{k} {shown}\n")
        return EXIT_OK
    if args.json:
        sys.stdout.write(json.dumps(env, indent=1) + "\n")
        return EXIT_OK
    topo = env.pop("topology", None)
    rows = tuple((k, json.dumps(v) if isinstance(v, (dict, list)) else str(v))
                 for k, v in env.items())
    terminal.print_table(tables.Table(f"Environment: {envmod.device_label(env)}",
                                      ("key", "value"), rows))
    if topo:
        terminal.stdout.print(topo, highlight=False)
    return EXIT_OK


def cmd_models(args: argparse.Namespace) -> int:
    from dlbench.models import list_models  # heavy: torch
    specs = list_models(include_test=args.all)
    if args.quiet and not args.json:
        sys.stdout.write("".join(f"{s.name}\n" for s in specs))
        return EXIT_OK
    rows, docs = [], []
    for s in specs:
        ev = tr = None
        if not args.no_flops:
            from dlbench.measure.flops import count_flops  # heavy: torch
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
        return EXIT_OK
    terminal.print_table(tables.Table(
        "Models (FLOPs counted per sample at the default input; train = forward + loss + backward)",
        ("model", "source", "input", "unit", "GPU batch", "eval GFLOP", "train GFLOP",
         "description"), tuple(rows)))
    from dlbench.models import SOURCES_HELP  # heavy: torch (loaded above already)
    terminal.print_table(tables.Table(
        "Any other model, by its source (wherever -m is taken; built with random weights, "
        "nothing downloaded)", ("-m", "what it builds"), SOURCES_HELP))
    return EXIT_OK
