"""``dlbench results ls|show|export|check|merge``: what the store holds."""

from __future__ import annotations

import argparse
import json
import os
import stat
import sys
import tempfile
from collections.abc import Iterable
from functools import partial
from pathlib import Path
from typing import Any

from dlbench import env as envmod
from dlbench.commands.common import (
    COUNT,
    EXIT_FAILED_RESULTS,
    EXIT_OK,
    EXIT_USAGE,
    add_command,
    add_output_flags,
    add_store_flags,
    metavar,
    one_of,
    show_table,
    show_tables,
)
from dlbench.report import export, outfile, tables, terminal
from dlbench.report.cards import card_uuids
from dlbench.report.outfile import print_error
from dlbench.report.table import printable
from dlbench.store import (Store, StoreError, check_not_self, check_source_file,
                           is_recovery_file)
from dlbench.suites import OLD_NAMES, VIEWS, canonical, view_of_suite

ORDER = 20


def register(sub: argparse._SubParsersAction) -> None:
    p = add_command(sub, "results", help="list, show and export stored results")
    p.set_defaults(handler=cmd_results)
    rsub = p.add_subparsers(dest="rcmd", required=True, metavar="ACTION")
    q = add_command(rsub, "ls", help="list runs (or, with --results, every result)")
    add_store_flags(q)
    q.add_argument("--results", action="store_true", help="list results, not runs")
    q.add_argument("--run", help="only this run (id prefix or 'latest')")
    q.add_argument("--tag", help="only runs with this tag")
    q.add_argument("--suite", help="only runs of this suite (e.g. classic-cnn, tune, peak)")
    q.add_argument("--limit", type=COUNT, default=50,
                   help="at most this many rows (default 50; 0: all)")
    add_output_flags(q, "print as JSON on stdout: the runs (run_id, command, tag, suite, device, "
                        "started_at, status, results, errors, ...), or with --results the "
                        "records in full, as 'results export --format json'",
                     "print only the ids, one per line (run ids, or with --results result "
                     "ids): for scripts, e.g. 'for r in $(dlbench results ls -q); do ...'")
    q = add_command(rsub, "show", help="a run's tables, or one result in full",
                        description="Show a run (id prefix or 'latest') as tables, or one result "
                                    "(id prefix) with its summary, environment and raw step times.")
    add_store_flags(q)
    q.add_argument("ref", nargs="?", default="latest", help="run id, result id, or 'latest'")
    q.add_argument("--tag", help="instead of one run, every run with this tag (e.g. a resumed sweep)")
    q.add_argument("--view", type=one_of(VIEWS, OLD_NAMES, "view"), metavar=metavar(VIEWS),
                   help="table layout: throughput; classic-cnn (images/s per model and "
                        "precision, eager and compiled, as tf_cnn_benchmarks); ms-per-batch "
                        "(eval and train ms per batch, as the classic per-model scripts) "
                        "(default: the run's suite's)")
    add_output_flags(q, "print the records in full as JSON on stdout, as 'results export "
                        "--format json'",
                     "print only the tables: no run header line, no table titles or notes, "
                     "and for one result its table without the step times and environment")
    q = add_command(
        rsub, "export", help="write results as JSON (full records) or CSV (one table per kind)",
        description="Write the selected results as JSON (every record in full: config, raw "
                    "samples, environment, and its figures) or as CSV, one table per record "
                    "kind with that kind's config, result and environment columns "
                    "(docs/schema.md lists them). A CSV holds one kind: pick it with --kind; "
                    "without --kind, -o FILE.csv writes FILE-KIND.csv for each kind present "
                    "(FILE.csv itself when there is only one).",
        epilog="examples:\n"
               "  dlbench results export --format csv --kind scaling -o scaling.csv\n"
               "  dlbench results export --format csv -o all.csv   # all-throughput.csv, ...\n"
               "  dlbench results export --run latest --format json -o run.json\n\n"
               "exit codes: 0 written; 2 usage error (unknown run, several kinds to stdout, an "
               "output that would overwrite the store).",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    add_store_flags(q)
    q.add_argument("--run", default="all", help="run id prefix, 'latest' or 'all' (default)")
    q.add_argument("--tag", help="only runs with this tag")
    q.add_argument("--kind", choices=export.KINDS, help="only results of this kind")
    q.add_argument("--format", choices=("json", "csv"), default="json")
    q.add_argument("-o", "--output", help="file to write (default: stdout)")
    q = add_command(rsub, "check", help="check the store: integrity, unreadable rows, runs left "
                                      "running",
                        description="Check --db without writing to it: SQLite's integrity "
                                    "check, every result row read back (an unreadable one is "
                                    "named with its reason), and runs still marked 'running' "
                                    "(killed, or still going) with their start time. Exit 0 "
                                    "when clean, 3 when a problem was found.")
    add_store_flags(q)
    q = add_command(rsub, "merge", help="copy the runs and results of other stores into --db",
                        description="Copy every run and result of the given stores that --db "
                                    "lacks (matched by id): the stores of a multi-node job's "
                                    "hosts, or of several runs on one machine, become one. "
                                    "A recovery file (STORE.recovered-ID.json, written when the "
                                    "store stayed locked or could not be written) is taken too. The sources are only "
                                    "read. A source row that cannot be read is named and left "
                                    "out, and the merge then exits 3.")
    add_store_flags(q)
    q.add_argument("sources", nargs="+", metavar="SRC", help="stores or recovery files to copy from")


def cmd_results(args: argparse.Namespace) -> int:
    try:
        return _cmd_results(args)
    except (outfile.OutputError, StoreError) as exc:
        print_error(exc)
        return EXIT_USAGE


def _cmd_results(args: argparse.Namespace) -> int:
    if args.rcmd == "export" and args.output:  # refused before anything is opened or written
        outfile.check_output(args.output, args.db)
    if args.rcmd == "merge":
        for src in args.sources:  # before --db is opened: merged into itself, it waits on itself
            check_source_file(src)  # a FIFO would wait for a writer forever
            check_not_self(src, args.db)
        unreadable = 0
        with Store(args.db) as store:
            for src in args.sources:
                runs, results = (store.merge_recovery(src) if is_recovery_file(src)
                                 else store.merge_from(src))
                dup = 0 if is_recovery_file(src) else store.skipped_duplicates
                bad = 0 if is_recovery_file(src) else store.skipped_unreadable
                unreadable += bad
                terminal.stderr.print(f"{printable(src)}: {runs} run(s), "
                                      f"{results} result(s) added to "
                                      f"{args.db}" + (f"; {dup} result(s) left out: the same "
                                                      "multi-node job, stored by another host"
                                                      if dup else "")
                                      + (f"; {bad} unreadable result(s) left out (named above; "
                                         f"'dlbench results check --db {src}' lists them)"
                                         if bad else ""),
                                      markup=False, highlight=False, soft_wrap=True)
        # 3, as 'results check' on a problem: a script must not take a partial merge as whole
        return EXIT_FAILED_RESULTS if unreadable else EXIT_OK
    if not Path(args.db).exists():
        raise StoreError(f"no result store at {args.db}; run 'dlbench run' first or pass --db PATH")
    if args.rcmd == "check":
        return _results_check(args)
    with Store(args.db, readonly=True) as store:  # reading never writes, nor creates a schema
        return {"ls": _results_ls, "show": _results_show, "export": _results_export}[args.rcmd](
            args, store)


def _results_check(args: argparse.Namespace) -> int:
    with Store(args.db, readonly=True) as store:
        problems = store.check()
        rows = store.runs()
        checked = "integrity, " if hasattr(store, "integrity_check") else ""
    for p in problems:
        terminal.line(p)
    terminal.line(f"{args.db}: {len(rows)} run(s); {checked}rows and run states checked: "
                  + (f"{len(problems)} problem(s)" if problems else "clean"))
    return EXIT_FAILED_RESULTS if problems else EXIT_OK


def _results_ls(args: argparse.Namespace, store: Store) -> int:
    if args.results:
        run_id = store.resolve_run(args.run) if args.run else None
        recs = store.last_results(args.limit, run_id=run_id)  # decodes only the rows shown
        if args.json:
            sys.stdout.write(export.to_json(recs) + "\n")
            return EXIT_OK
        if args.quiet:
            _ids(r.id for r in recs)
            return EXIT_OK
        rows = []
        for r in recs:
            fig = r.units_per_s() if r.kind == "throughput" else r.headline()
            rows.append((r.id, r.run_id or "-", r.created_at, r.kind, r.config.label, r.status,
                         tables.fmt_num(fig) if fig is not None else (r.error_type or "-")))
        terminal.print_table(tables.Table("Results", ("id", "run", "created", "kind", "config",
                                                      "status", "figure"), tuple(rows)))
        return EXIT_OK
    if args.run:  # one run: a prefix that matches none (or several) is an error, not a blank
        run_id = store.resolve_run(args.run)
        runs = [r for r in store.runs(tag=args.tag) if r.run_id == run_id]
    elif args.suite:  # a store written before the suites' renaming holds their old names
        runs = [r for r in store.runs(tag=args.tag)
                if canonical(r.suite) == canonical(args.suite)][:args.limit or None]
    else:
        runs = store.runs(limit=args.limit, tag=args.tag)
    if args.json:
        sys.stdout.write(json.dumps([r.__dict__ for r in runs], indent=1) + "\n")
        return EXIT_OK
    if args.quiet:
        _ids(r.run_id for r in runs)
        return EXIT_OK
    rows = tuple((r.run_id, r.started_at, r.status, canonical(r.suite) or "-", r.tag or "-",
                  r.device or "-",
                  str(r.results), str(r.errors), r.command) for r in runs)
    terminal.print_table(tables.Table(f"Runs in {args.db}", ("run", "started", "status", "suite",
                                                             "tag", "device", "results", "errors",
                                                             "command"), rows))
    return EXIT_OK


def _ids(ids) -> None:
    sys.stdout.write("".join(f"{i}\n" for i in ids))


def _results_show(args: argparse.Namespace, store: Store) -> int:
    if args.tag:
        recs = store.results(tag=args.tag)
        if args.json:
            sys.stdout.write(export.to_json(recs) + "\n")
            return EXIT_OK
        runs = [r for r in store.runs(tag=args.tag)]
        if not runs:
            raise StoreError(f"no run is tagged {args.tag!r} in {args.db}")
        view = args.view or view_of_suite(runs[0].suite)
        if not args.quiet:
            terminal.stdout.print(f"tag {terminal.safe_markup(args.tag)}: {len(runs)} run(s), "
                                  f"{len(recs)} result(s)")
        show_tables(recs, view, runs[0].device or "?", args.quiet, _peaks(store, recs))
        return EXIT_OK
    try:
        run_id = store.resolve_run(args.ref)
    except StoreError:
        record = store.get(args.ref)  # not a run: maybe a result id
        if args.json:
            sys.stdout.write(export.to_json([record]) + "\n")
        else:
            _print_record(record, args.quiet)
        return EXIT_OK
    recs = store.results(run_id=run_id)
    if args.json:
        sys.stdout.write(export.to_json(recs) + "\n")
        return EXIT_OK
    info = next(r for r in store.runs() if r.run_id == run_id)
    fwd_bwd = any(getattr(r.config, "method", None) == "fwd-bwd" for r in recs)
    view = args.view or view_of_suite(info.suite, "ms-per-batch" if fwd_bwd else "throughput")
    if not args.quiet:
        # the stored command is data: never markup, never raw control characters
        terminal.stdout.print(f"run {run_id} ({info.status}) {info.started_at}: "
                              f"{terminal.safe_markup(info.command)}")
    show_tables(recs, view, info.device or "?", args.quiet, _peaks(store, recs))
    return EXIT_OK


def _peaks(store: Store, records) -> list:
    """The store's ``dlbench peak`` records where generation results are shown: their roofline
    and prefill MFU read against the device's measured ceilings, as ``dlbench report`` does."""
    if not any(r.kind == "generate" for r in records):
        return []
    return store.results(kind="peak")


def _print_record(r, quiet: bool = False) -> None:
    out = terminal.stdout
    if r.kind != "throughput":
        show_tables([r], "throughput", envmod.device_label(getattr(r, "env", {}) or {}), quiet)
        if quiet:
            return
        out.print_json(json.dumps({"config": r.config.to_dict()}, default=str))
        if r.error:
            out.print(f"[red]{terminal.safe_markup(r.error_type)}[/red]: "
                      f"{terminal.safe_markup(r.error)}", highlight=False)
        return
    show_table(tables.throughput_table([r], f"Result {r.id} (run {r.run_id})"), quiet)
    if quiet:
        return
    s = r.summary()
    if s is not None:
        out.print(f"window: {s.steps} steps, {s.total_s:.3f} s (host clock "
                  f"{_seconds(r.window_wall_s)}), stopped by {r.stop_reason}; first step "
                  f"{_seconds(r.first_step_s)}; warm-up {len(r.warmup_times_s)} steps")
        out.print(f"interval ({s.confidence:.0%}): {tables.fmt_num(s.throughput_low)} - "
                  f"{tables.fmt_num(s.throughput_high)} samples/s; cv {s.cv:.1%}")
        out.print("step times (ms): " + " ".join(f"{t * 1e3:.2f}" for t in r.step_times_s[:50])
                  + (" ..." if len(r.step_times_s) > 50 else ""))
    if r.error:
        out.print(f"[red]{terminal.safe_markup(r.error_type)}[/red]: "
                  f"{terminal.safe_markup(r.error)}", highlight=False)
    uuids = card_uuids(r)
    if uuids:  # which physical card: two cards of one GPU model differ (docs/reports.md#cards)
        out.print(f"card: {' '.join(uuids)}", highlight=False)
    out.print_json(json.dumps({"config": r.config.to_dict(), "memory": r.memory,
                               "environment": envmod.identity(r.env)}))


def _seconds(t: float | None) -> str:
    return "-" if t is None else f"{t:.3f} s"  # a record that did not time it


def _results_export(args: argparse.Namespace, store: Store) -> int:
    """Records are read, converted and written as they come (:meth:`Store.map_results`, which
    converts a large selection in worker processes, in order): memory stays that of a few
    chunks of records, whatever the store's size; the bytes are those of ``export.to_json`` /
    ``export.to_csv`` over the whole selection."""
    run_id = None if args.run == "all" else store.resolve_run(args.run)
    rows = dict(run_id=run_id, tag=args.tag, kind=args.kind)
    if args.format == "json":
        with _Sink(args, args.output) as sink:
            for chunk in _json_chunks(store.map_results(export.json_element, **rows), sink):
                sink.write(chunk)
        return EXIT_OK
    # the kinds come from the kind column: deciding the files decodes nothing
    present = store.result_kinds(**rows)
    kinds = [args.kind] if args.kind else [k for k in export.KINDS if k in present] or ["throughput"]
    if len(kinds) > 1 and not args.output:
        raise StoreError(f"the selection holds {len(kinds)} kinds ({', '.join(kinds)}) and a CSV "
                         "holds one: add --kind KIND, or -o FILE.csv for FILE-KIND.csv each")
    paths = export.csv_files(args.output, kinds)
    if len(kinds) > 1:
        for p in paths.values():  # every path checked before the first is written
            outfile.check_output(p, args.db)
    sinks: dict[str, _Sink] = {}
    try:
        for k, p in paths.items():
            sinks[k] = _Sink(args, p)
        for k in kinds:
            sinks[k].write(export.to_csv([], k))  # the header
        # one pass, each record to its kind's file
        for row in store.map_results(partial(_csv_item, frozenset(sinks)), **rows):
            if row is not None:
                kind, text = row
                sinks[kind].write(text)
                sinks[kind].count += 1
    except BaseException:
        for sink in sinks.values():
            sink.abandon()
        raise
    for k in kinds:  # all written: each is renamed into place and announced, in kind order
        sinks[k].commit()
    return EXIT_OK


def _csv_item(kinds: frozenset[str], r: Any) -> tuple[str, str] | None:
    """(kind, CSV row) of a record of one of ``kinds``; None for another."""
    return (r.kind, export.csv_row(r)) if r.kind in kinds else None


def _json_chunks(elements: Iterable[str], sink: "_Sink"):
    """``export.to_json(records) + "\n"`` in pieces, from each record's element
    (``export.json_element``): an array of ``json.dumps(..., indent=1)``, so each element is the
    record's own document indented once."""
    first = True
    for element in elements:
        yield "[\n" if first else ",\n"
        yield element
        first = False
        sink.count += 1
    yield "[]\n" if first else "\n]\n"


class _Sink:
    """Where an export goes, written as it comes: stdout, or ``-o FILE`` as
    ``outfile.write_text`` writes it (refused where it would destroy a store; a temporary file
    beside it, flushed to disk and renamed over it once whole, so a failure leaves no partial
    file; a device or pipe written directly). ``count`` records are announced on commit."""

    def __init__(self, args: argparse.Namespace, output: str | None) -> None:
        self.output, self.db = output, args.db
        self.count = 0
        self._f = None
        self._tmp: str | None = None
        if output is None:
            return
        out = outfile.check_output(output, args.db)
        try:
            mode = out.stat().st_mode if out.exists() else None
            if mode is not None and not stat.S_ISREG(mode):
                self._f = open(out, "wb")
                return
            if not out.parent.is_dir():
                raise outfile.OutputError(f"-o/--output {output}: no directory {out.parent}; "
                                          "create it first")
            fd, self._tmp = tempfile.mkstemp(prefix=f".{out.name}.", suffix=".tmp",
                                             dir=out.parent)
            self._f = os.fdopen(fd, "wb")
        except OSError as exc:
            raise outfile.OutputError(f"-o/--output {output}: cannot write "
                                      f"({exc.strerror or exc})") from None

    def __enter__(self) -> "_Sink":
        return self

    def __exit__(self, exc_type, *exc) -> None:
        if exc_type is None:
            self.commit()
        else:
            self.abandon()

    def write(self, text: str) -> None:
        if self._f is None:
            sys.stdout.write(text)
            return
        try:
            self._f.write(text.encode("utf-8"))
        except OSError as exc:
            raise outfile.OutputError(f"-o/--output {self.output}: cannot write "
                                      f"({exc.strerror or exc})") from None

    def commit(self) -> None:
        if self._f is None:
            return
        try:
            self._f.flush()
            if self._tmp is not None:
                os.fsync(self._f.fileno())
            self._f.close()
            if self._tmp is not None:
                mask = os.umask(0)
                os.umask(mask)
                os.chmod(self._tmp, 0o666 & ~mask)
                os.replace(self._tmp, self.output)
                self._tmp = None
        except OSError as exc:
            self.abandon()
            raise outfile.OutputError(f"-o/--output {self.output}: cannot write "
                                      f"({exc.strerror or exc})") from None
        terminal.stderr.print(f"wrote {self.count} result(s) to {self.output}", markup=False,
                              highlight=False)

    def abandon(self) -> None:
        if self._f is not None and not self._f.closed:
            self._f.close()
        if self._tmp is not None:
            try:
                os.unlink(self._tmp)
            except OSError:
                pass
            self._tmp = None
