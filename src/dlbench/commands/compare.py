"""``dlbench compare A B``: two runs or tags, config by config, with a test; non-zero on a
regression so CI can gate on it."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from dlbench.commands.common import (
    EXIT_NO_MATCH,
    EXIT_OK,
    EXIT_REGRESSION,
    FRACTION,
    add_command,
    real,
)
from dlbench.report import compare as cmp
from dlbench.report.export import KINDS
from dlbench.report import terminal
from dlbench.store import Store, StoreError

ORDER = 25


def register(sub: argparse._SubParsersAction) -> None:
    p = add_command(
        sub, "compare", help="compare two runs or tags config by config, every kind; exit 5 on "
                             "a regression",
        description="Match the results of A and B by kind and config (throughput, scaling, "
                    "generate, comm, peak, maxbatch, train, net) and print, for each, the ratio "
                    "B/A of the kind's figure, its 95% interval, a test, what judged it and a "
                    "verdict.\n\n"
                    "Which test judges a pair depends on the fresh processes behind each side: "
                    "two processes of identical code differ by more than one window's samples "
                    "show (warm-up, clocks, allocator, placement), so a test on one window's "
                    "samples would call that a change.\n"
                    "  across processes: both sides --repeat groups (2+ processes): Welch's t on "
                    "the process figures.\n"
                    "  one process a side + run-to-run spread: the interval is widened by how "
                    "much one process's figure varies across fresh processes (the spread stored "
                    "for the device and kind, or a group side's own); significant only when the "
                    "widened interval excludes 1.\n"
                    "  inconclusive: one process a side and no run-to-run spread known for the "
                    "device and kind: no verdict; rerun both sides with --repeat 3 (or more).\n"
                    "Training is tested on its seeds' times, the largest batch on the two "
                    "searches' brackets. Figures from two different cards of one GPU model get "
                    "the card-to-card spread measured across cards added to their interval. A "
                    "and B are run ids (a prefix, or 'latest') or 'tag:NAME' (every run with "
                    "that tag).",
        epilog="examples:\n"
               "  dlbench compare tag:baseline tag:candidate --threshold 0.03\n"
               "  dlbench compare 3f2a latest --kind scaling\n"
               "  dlbench compare latest latest --db old.db --db-b new.db\n\n"
               "exit codes: 0 no regression (an inconclusive pair, one process a side with no "
               "run-to-run spread known, is not one: it exits 0 with a warning; --json counts "
               "them as 'inconclusive'); 5 at least one regression (B significantly worse "
               "than A by more than --threshold); 6 no config has a result on both sides "
               "(nothing was compared: a gate must not pass on that); 2 usage error (unknown "
               "run or tag, missing store); 1 internal error; 130 interrupted.",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("a", metavar="A", help="baseline: run id prefix, 'latest' or tag:NAME")
    p.add_argument("b", metavar="B", help="candidate: run id prefix, 'latest' or tag:NAME")
    p.add_argument("--db", default="dlbench.db", metavar="PATH",
                   help="store holding A (and B, unless --db-b; default ./dlbench.db)")
    p.add_argument("--db-b", metavar="PATH", help="store holding B (default: --db)")
    p.add_argument("--threshold", type=real(0, 1, high_open=True), default=cmp.DEFAULT_THRESHOLD,
                   help="a slowdown larger than this fraction that is significant is a "
                        "regression, in [0, 1) (default 0.05)")
    p.add_argument("--alpha", type=FRACTION, default=cmp.DEFAULT_ALPHA,
                   help="significance level of the test, in (0, 1) (default 0.05)")
    p.add_argument("--kind", choices=KINDS, help="only results of this kind (default: all)")
    p.add_argument("--json", action="store_true", help="print the comparison as JSON")
    p.add_argument("-q", "--quiet", action="store_true",
                   help="print only the verdict line (and regressions); the exit code gates")
    p.set_defaults(handler=cmd_compare)


def select(store: Store, ref: str, kind: str | None = None) -> tuple[str, list]:
    """Records for ``tag:NAME`` or a run reference; with a description of what was selected."""
    if ref.startswith("tag:"):
        tag = ref[4:]
        recs = store.results(tag=tag, kind=kind)
        if not store.runs(tag=tag):
            raise StoreError(f"no run is tagged {tag!r} in {store.path}")
        return f"tag {tag}", recs
    run_id = store.resolve_run(ref)
    return f"run {run_id}", store.results(run_id=run_id, kind=kind)


def _open(path: str) -> Store:
    if not Path(path).exists():
        raise StoreError(f"no result store at {path}; pass the right file with --db/--db-b")
    return Store(path)


def cmd_compare(args: argparse.Namespace) -> int:
    with _open(args.db) as sa:
        name_a, recs_a = select(sa, args.a, args.kind)
        if args.db_b and Path(args.db_b).resolve() != Path(args.db).resolve():
            with _open(args.db_b) as sb:
                name_b, recs_b = select(sb, args.b, args.kind)
        else:
            name_b, recs_b = select(sa, args.b, args.kind)
    c = cmp.compare(recs_a, recs_b, threshold=args.threshold, alpha=args.alpha)
    if c.env_differences:
        terminal.warn("THE ENVIRONMENTS DIFFER; the ratios mix hardware or software changes "
                      "with the change under test:\n  " + "\n  ".join(c.env_differences))
    if args.json:
        d = cmp.to_dict(c) | {"a": name_a, "b": name_b}
        sys.stdout.write(json.dumps(d, indent=1) + "\n")
    elif not args.quiet:
        terminal.print_table(cmp.comparison_table(c, f"B ({name_b}) against A ({name_a})"))
        if c.only_a:
            terminal.stdout.print(f"only in A: {terminal.safe_markup(', '.join(c.only_a))}",
                                  highlight=False)
        if c.only_b:
            terminal.stdout.print(f"only in B: {terminal.safe_markup(', '.join(c.only_b))}",
                                  highlight=False)
    if not c.pairs:
        terminal.error(f"nothing to compare: no {args.kind or ''}{' ' if args.kind else ''}"
                       f"config has an ok result in both {name_a} and {name_b}")
        return EXIT_NO_MATCH
    for line in inconclusive_advice(c):
        terminal.warn(line)
    if c.regressions:
        terminal.error(f"{len(c.regressions)} regression(s): "
                       + ", ".join(f"{p.label} ({p.ratio:.3f}x)" for p in c.regressions))
        return EXIT_REGRESSION
    if args.quiet:
        undecided = f"; {len(c.inconclusive)} inconclusive" if c.inconclusive else ""
        terminal.stdout.print(f"{len(c.pairs)} config(s) compared: no regression{undecided}",
                              highlight=False)
    return EXIT_OK


def inconclusive_advice(c: cmp.Comparison) -> list[str]:
    """One warning per kind and device whose pairs had one process a side and no run-to-run
    spread: what that means and what to run instead."""
    groups: dict[tuple[str, str], list[str]] = {}
    for p in c.inconclusive:
        groups.setdefault((p.kind, p.device or "this device"), []).append(p.label)
    out = []
    for (kind, device), labels in groups.items():
        how = ("rerun both sides with --repeat 3 (or more) to test across processes"
               if kind in cmp.REPEATABLE else
               f"{kind} has no --repeat: its one-process figures cannot be gated on this "
               "device")
        out.append(f"{len(labels)} {kind} config(s) inconclusive (one process per side; no "
                   f"run-to-run spread is known for {kind} on {device}, and two processes of "
                   f"identical code differ by more than one window shows): {how}. Not counted "
                   f"as a regression: {', '.join(labels)}")
    return out
