"""``dlbench telemetry RESULT`` (a stored result's series and energy) and ``dlbench monitor``."""

from __future__ import annotations

import argparse
import csv
import io
import json
import sys
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from dlbench.commands.common import (
    COUNT,
    EXIT_OK,
    SECONDS,
    add_command,
    add_output_flags,
    add_store_flags,
    csv_list,
    show_table,
)
from dlbench.config import ConfigError
from dlbench.report import export, outfile, tables, terminal
from dlbench.store import Store, StoreError
from dlbench.telemetry.monitor import Monitor, format_line
from dlbench.telemetry.summary import rows as series_rows

ORDER = 30


def register(sub: argparse._SubParsersAction) -> None:
    p = add_command(
        sub, "telemetry", help="a result's GPU telemetry: energy summary and the sampled series",
        description="Show what the GPU did during a stored result (power, energy per sample, "
                    "clocks, temperature, throttling), or export the series as CSV (one row per "
                    "GPU per sample, with the phase: idle, setup, warmup, window, after).",
        epilog="examples:\n  dlbench telemetry 3f2a9c --csv resnet50.csv\n"
               "  dlbench telemetry --run latest          # the energy table of a run",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    add_store_flags(p)
    p.add_argument("ref", nargs="?", help="result id (or unique prefix)")
    p.add_argument("--run", help="instead of one result, the energy table of a run (id or 'latest')")
    p.add_argument("--csv", metavar="FILE", help="write the series as CSV ('-' for stdout)")
    add_output_flags(p, "print as JSON: the result's telemetry summary, marks and series (with "
                        "--run: the run's records)",
                     "print only the energy table, without its title and notes, nor the marks "
                     "line and the series table")
    p.set_defaults(handler=cmd_telemetry)

    p = add_command(
        sub, "monitor", help="sample the GPUs on their own until Ctrl-C (a 5 s log as in the "
                             "CIFAR-10 framework comparison: --interval 5)",
        description="Print one line per GPU per interval: utilisation, memory, power, energy "
                    "since start, temperature, SM clock and throttle reasons. Run any workload "
                    "beside it. Without NVML the host's CPU and memory are sampled instead.",
        epilog="examples:\n  dlbench monitor --interval 5\n"
               "  dlbench monitor --json --duration 60 > gpu.jsonl   # one JSON object a line\n"
               "  dlbench monitor -q --csv gpu.csv                   # the file alone",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--interval", type=SECONDS, default=1.0,
                   help="seconds between samples, > 0 (default 1)")
    p.add_argument("--duration", type=SECONDS,
                   help="stop after this many seconds, > 0 (default: Ctrl-C)")
    p.add_argument("--csv", metavar="FILE", help="also write every sample to this CSV file")
    p.add_argument("--gpu", type=csv_list(COUNT),
                   help="comma-separated NVML indices (default: every GPU)")
    add_output_flags(p, "print JSON lines on stdout: one object per GPU per sample (the host's "
                        "row without NVML), as soon as it is read, with the keys of the --csv "
                        "columns (time, t_s, gpu, util_gpu_pct, mem_used_mib, power_w, "
                        "energy_j, temp_c, sm_clock_mhz, throttle, ...); null where NVML gave "
                        "no value",
                     "print no line per sample and no count at the end: the --csv file alone "
                     "(so it needs --csv)")
    p.set_defaults(handler=cmd_monitor)


def cmd_telemetry(args: argparse.Namespace) -> int:
    if args.csv and args.csv != "-":  # refused before anything is read or written
        outfile.check_output(args.csv, args.db, "--csv")
    if not Path(args.db).exists():
        raise StoreError(f"no result store at {args.db}; run 'dlbench run' first or pass --db PATH")
    with Store(args.db) as store:
        if args.run:
            recs = [r for r in store.results(run_id=store.resolve_run(args.run))
                    if hasattr(r, "telemetry")]
            if args.json:
                sys.stdout.write(export.to_json(recs) + "\n")
                return EXIT_OK
            show_table(tables.energy_table(recs, f"Energy and telemetry, run {args.run}"),
                       args.quiet)
            return EXIT_OK
        if not args.ref:
            raise StoreError("name a result id (dlbench results ls --results) or pass --run")
        rec = store.get(args.ref)
    tele = getattr(rec, "telemetry", None)
    if not tele:
        raise StoreError(f"result {rec.id} has no telemetry (measured with telemetry off, or "
                         "by a dlbench older than telemetry)")
    columns, rows = series_rows(tele)
    if args.json:
        sys.stdout.write(json.dumps({
            "id": rec.id, "config": rec.config.label, "summary": tele.get("summary"),
            "marks": tele.get("marks"), "interval_s": tele.get("interval_s"),
            "columns": list(columns), "rows": rows}, indent=1, default=str) + "\n")
        return EXIT_OK
    if args.csv:
        text = _csv(columns, rows)
        if args.csv == "-":
            sys.stdout.write(text)
        else:
            outfile.write_text(args.csv, text, args.db, "--csv")
            terminal.stderr.print(f"wrote {len(rows)} sample rows of {rec.id} to {args.csv}")
        return EXIT_OK
    show_table(tables.energy_table([rec], f"Result {rec.id}: {rec.config.label}"), args.quiet)
    if args.quiet:
        return EXIT_OK
    if tele.get("nvml_error"):
        terminal.stdout.print(f"no GPU telemetry: {tele['nvml_error']}", highlight=False)
    marks = ", ".join(f"{k} {v:.3f} s" for k, v in (tele.get("marks") or {}).items())
    terminal.stdout.print(f"marks: {marks}; every {tele.get('interval_s')} s", highlight=False)
    terminal.print_table(tables.Table(f"Series ({len(rows)} rows)", columns,
                                      tuple(tuple(_cell(r[c]) for c in columns) for r in rows)))
    return EXIT_OK


def cmd_monitor(args: argparse.Namespace) -> int:
    gpus = args.gpu or None
    if args.quiet and not args.csv:
        raise ConfigError("monitor -q prints no sample: add --csv FILE to keep them, or drop -q")
    if args.csv:  # refused before sampling starts: a store, an SQLite file, a directory
        outfile.check_output(args.csv, "dlbench.db", "--csv")
        if not Path(args.csv).resolve().parent.is_dir():
            raise outfile.OutputError(f"--csv {args.csv}: its directory does not exist")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        mon = Monitor(gpus)
    for w in caught:  # said once, as a line of the CLI rather than a Python warning
        terminal.warn(str(w.message))
    fh = open(args.csv, "w", newline="") if args.csv else None
    writer = csv.DictWriter(fh, fieldnames=mon.columns, lineterminator="\n") if fh else None
    if writer:
        writer.writeheader()
    n = 0
    try:
        for rows in mon.ticks(args.interval, args.duration):
            for row in rows:
                if args.json:  # a line per row, flushed: a reader follows it as it comes
                    print(json.dumps(row), flush=True)
                elif not args.quiet:
                    print(format_line(row), flush=True)
                if writer:
                    writer.writerow({k: "" if v is None else v for k, v in row.items()})
            if fh:
                fh.flush()  # a kill keeps every line written so far
            n += 1
    except KeyboardInterrupt:
        pass
    finally:
        mon.close()
        if fh:
            fh.close()
    if not args.quiet:
        terminal.stderr.print(f"{n} sample(s)" + (f" written to {args.csv}" if args.csv else ""))
    return EXIT_OK


def _csv(columns: Sequence[str], rows: list[dict[str, Any]]) -> str:
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=list(columns), lineterminator="\n")
    w.writeheader()
    for r in rows:
        w.writerow({k: "" if r.get(k) is None else r[k] for k in columns})
    return buf.getvalue()


def _cell(v: Any) -> str:
    return "-" if v is None or v == "" else str(v)
