"""Terminal output: rich tables on stdout, a progress bar with ETA on stderr."""

from __future__ import annotations

import sys
import time

from rich.console import Console
from rich.markup import escape
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.table import Table as RichTable

from dlbench.records.throughput import ThroughputConfig, ThroughputRecord
from dlbench.report.table import Table, fmt_num, fmt_pct

# Piped or redirected output gets a wide page, so tables are not folded into an 80-column file.
stdout = Console(soft_wrap=False, width=None if sys.stdout.isatty() else 200)
stderr = Console(stderr=True, width=None if sys.stderr.isatty() else 200)


def print_table(table: Table, console: Console | None = None) -> None:
    console = console or stdout
    t = RichTable(title=table.title, title_justify="left", header_style="bold")
    for i, c in enumerate(table.columns):
        t.add_column(c, justify="left" if i == 0 or not _numeric(table, i) else "right",
                     overflow="fold")
    for row in table.rows:
        t.add_row(*row)
    console.print(t)
    for n in table.notes:
        console.print(f"[dim]{n}[/dim]")


def _numeric(table: Table, i: int) -> bool:
    vals = [r[i] for r in table.rows if r[i] not in ("-", "")]
    return bool(vals) and all(v[:1].isdigit() for v in vals)


class RichProgress:
    """A bar over the configs of a sweep, with ETA, and one line per finished result."""

    def __init__(self, console: Console | None = None) -> None:
        self.console = console or stderr
        self._progress = Progress(
            TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
            TimeElapsedColumn(), TextColumn("eta"), TimeRemainingColumn(),
            console=self.console, transient=False)
        self._task = None
        self._t0 = 0.0

    def begin(self, total: int) -> None:
        self._t0 = time.perf_counter()
        self._progress.start()
        self._task = self._progress.add_task("starting", total=total)

    def start(self, cfg: ThroughputConfig) -> None:
        self._progress.update(self._task, description=cfg.label)

    def done(self, record: ThroughputRecord) -> None:
        s = record.summary()
        if s is None:
            line = f"[red]✗[/red] {record.config.label}: {record.error_type}: " \
                   f"{(record.error or '').splitlines()[0][:120]}"
        else:
            unit = {"images": "img/s", "sequences": "seq/s", "tokens": "tok/s"}.get(record.unit, "/s")
            line = (f"[green]✓[/green] {record.config.label}: "
                    f"{fmt_num(s.throughput * record.units_per_sample)} {unit} "
                    f"±{fmt_pct(s.rel_halfwidth)} ({s.steps} steps)")
        self._progress.console.print(line)
        self._progress.advance(self._task)

    def skipped(self, cfg: ThroughputConfig) -> None:
        self._progress.console.print(f"[dim]- {cfg.label}: already measured (--resume)[/dim]")
        self._progress.advance(self._task)

    def end(self) -> None:
        self._progress.stop()

    def elapsed(self) -> float:
        return time.perf_counter() - self._t0


def warn(msg: str) -> None:
    # escape: a message is text, and text such as "pip install 'dlbench[train]'" is not markup
    stderr.print(f"[yellow]warning:[/yellow] {escape(msg)}")


def error(msg: str) -> None:
    stderr.print(f"[red]error:[/red] {escape(msg)}", highlight=False)


def is_tty() -> bool:
    return sys.stderr.isatty()
