"""``dlbench report``: one self-contained HTML file (or Markdown tables) from the store."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from dlbench.commands.common import (
    EXIT_OK,
    EXIT_USAGE,
    add_command,
    add_output_flags,
    add_store_flags,
)
from dlbench.records.base import utc_now
from dlbench.report import export, outfile, terminal
from dlbench.report.outfile import print_error
from dlbench.store import Store, StoreError

ORDER = 24


def register(sub: argparse._SubParsersAction) -> None:
    p = add_command(
        sub, "report", help="write an HTML report (tables and charts, one file) or Markdown tables",
        description="Write one self-contained HTML file: the environment, the throughput "
                    "tables and those laid out as the reference articles' (classic-cnn, "
                    "ms-per-batch), and charts where their data exists (throughput per "
                    "configuration and against batch size, memory against batch size with OOM "
                    "points, scaling by GPU count, interconnect A/B, MFU, roofline, your GPU "
                    "among published GPUs, telemetry timelines). No network is needed to view "
                    "it: styles and charts (SVG) are inline, and there is no script.",
        epilog="examples:\n  dlbench report -o report.html\n  dlbench report --tag nightly "
               "--markdown -o nightly.md\n  dlbench report --run latest\n"
               "  dlbench report --tag nightly --json > nightly.json   # the records, no file",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    add_store_flags(p)
    p.add_argument("-o", "--output", help="file to write (default: report.html, or report.md "
                                          "with --markdown)")
    p.add_argument("--tag", help="only runs with this tag")
    p.add_argument("--run", action="append",
                   help="only this run (id prefix or 'latest'); repeat for several")
    p.add_argument("--markdown", action="store_true", help="write the tables as Markdown instead")
    p.add_argument("--title", default="dlbench report", help="the report's title")
    add_output_flags(p, "print the records the report covers as JSON on stdout (the layout of "
                        "'results export --format json', docs/schema.md); the report file is "
                        "then written only when -o names it",
                     "no 'wrote FILE' line on stderr")
    p.set_defaults(handler=cmd_report)


def cmd_report(args: argparse.Namespace) -> int:
    # --json alone is a query: no file unless -o asks for one
    out = (None if args.json and not args.output
           else Path(args.output or ("report.md" if args.markdown else "report.html")))
    try:
        if out is not None:
            outfile.check_output(out, args.db)  # refused before anything is opened or written
        return _report(args, out)
    except (outfile.OutputError, StoreError) as exc:
        print_error(exc)
        return EXIT_USAGE


def _report(args: argparse.Namespace, out: Path | None) -> int:
    if not Path(args.db).exists():
        raise StoreError(f"no result store at {args.db}; run 'dlbench run' first or pass --db PATH")
    with Store(args.db, readonly=True) as store:
        if args.tag and not store.runs(tag=args.tag):  # a typo must not give an empty report
            raise StoreError(f"--tag {args.tag!r}: no run has this tag in {args.db}; "
                             "'dlbench results ls' lists runs and tags")
        run_ids = [store.resolve_run(r) for r in args.run] if args.run else None
        if run_ids:
            records = [r for rid in dict.fromkeys(run_ids) for r in store.results(run_id=rid)]
            if args.tag:
                tagged = {r.run_id for r in store.runs(tag=args.tag)}
                records = [r for r in records if r.run_id in tagged]
        else:
            records = store.results(tag=args.tag)
        used = {r.run_id for r in records}
        run_rows = [r for r in reversed(store.runs(tag=args.tag)) if r.run_id in used]
    if args.json:
        sys.stdout.write(export.to_json(records) + "\n")
    if not records and out is not None:
        terminal.warn("no results match; the report says so")
    if out is None:
        return EXIT_OK
    from dlbench.report import html as report_html  # heavy: matplotlib, torch
    if args.markdown:
        text = report_html.render_markdown(records, run_rows, args.title)
    else:
        text = report_html.render_html(records, run_rows, args.title, source=str(args.db),
                                       generated_at=utc_now())
    # whole or not at all; a missing directory is created, as it always was
    outfile.write_text(out, text, args.db, make_dirs=True)
    if not args.quiet:
        terminal.stderr.print(f"wrote {out} ({len(records)} result(s), {len(run_rows)} run(s))",
                              markup=False, highlight=False)
    return EXIT_OK
