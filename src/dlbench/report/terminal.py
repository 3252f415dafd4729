"""Terminal output: rich tables on stdout, a progress bar with ETA on stderr.

Text that comes from data (titles, cells, notes, config labels, error messages, paths) is
printed as text, never parsed as rich markup: a tag ``[/x]`` or a library's error holding
``[/__w/pytorch/...]`` would otherwise raise rich's MarkupError or be eaten, and a
``[link=...]`` would make a hyperlink. Its control characters are shown, not sent: an ESC in a
tag or a host name would otherwise clear the screen or rewrite rows. Data becomes a rich
:class:`Text` through :func:`safe_text` alone; markup is used only in the literals of this
module, around :func:`safe_markup` values.
"""

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
from rich.text import Text

from dlbench.records.throughput import ThroughputConfig, ThroughputRecord
from dlbench.report.table import Table, fmt_num, fmt_pct, printable

# Piped or redirected output gets a wide page, so tables are not folded into an 80-column file.
stdout = Console(soft_wrap=False, width=None if sys.stdout.isatty() else 200)
stderr = Console(stderr=True, width=None if sys.stderr.isatty() else 200)


def safe_text(value: object, style: str = "") -> Text:
    """A piece of data (a cell, a title, a tag, a message) as rich text, in ``style``: never read
    as markup, its control characters shown as escapes (:func:`dlbench.report.table.printable`:
    ESC as ``\\x1b``); newlines and tabs kept."""
    return Text(printable(str(value)), style=style)


def safe_markup(value: object) -> str:
    """A piece of data to put inside this module's markup literals: control characters shown
    (:func:`printable`), then :func:`escape`-d so that rich prints it as written."""
    return escape(printable(str(value)))


def print_table(table: Table, console: Console | None = None) -> None:
    console = console or stdout
    t = RichTable(title=safe_text(table.title), title_justify="left", header_style="bold")
    for i, c in enumerate(table.columns):
        t.add_column(safe_text(c), justify="left" if i == 0 or not _numeric(table, i) else "right",
                     overflow="fold")
    for row in table.rows:
        t.add_row(*(safe_text(cell) for cell in row))
    console.print(t)
    for n in table.notes:
        console.print(safe_text(n, style="dim"))


def line(msg: str, console: Console | None = None, style: str = "") -> None:
    """One line of text (not markup) on ``console`` (default stdout), in ``style``."""
    (console or stdout).print(safe_text(msg, style=style))


def _numeric(table: Table, i: int) -> bool:
    vals = [r[i] for r in table.rows if r[i] not in ("-", "")]
    return bool(vals) and all(v[:1].isdigit() for v in vals)


class RichProgress:
    """A bar over the configs of a sweep, with ETA, and one line per finished result."""

    def __init__(self, console: Console | None = None) -> None:
        self.console = console or stderr
        self._progress = Progress(
            TextColumn("{task.description}", style="bold", markup=False), BarColumn(), MofNCompleteColumn(),
            TimeElapsedColumn(), TextColumn("eta"), TimeRemainingColumn(),
            console=self.console, transient=False)
        self._task = None
        self._t0 = 0.0
        self._label = ""

    def begin(self, total: int) -> None:
        self._t0 = time.perf_counter()
        self._progress.start()
        self._task = self._progress.add_task("starting", total=total)

    def start(self, cfg: ThroughputConfig) -> None:
        self._label = printable(cfg.label)
        self._progress.update(self._task, description=self._label)

    def status(self, text: str) -> None:
        """The running config's label, then what its job is doing (a torchrun job's rank 0)."""
        self._progress.update(self._task, description=f"{self._label} · {printable(text)}")

    def done(self, record: ThroughputRecord) -> None:
        s = record.summary()
        label = record.config.label
        if getattr(record, "repeat_group", None) is not None:
            label += f" (process {record.repeat_index + 1} of {record.repeat_count})"
        if s is None:
            first = (record.error or "").splitlines()[0][:120] if record.error else ""
            text = "[red]✗[/red] " + safe_markup(f"{label}: {record.error_type}: {first}")
        else:
            unit = {"images": "img/s", "sequences": "seq/s", "tokens": "tok/s"}.get(record.unit, "/s")
            text = (f"[green]✓[/green] {safe_markup(label)}: "
                    f"{fmt_num(s.throughput * record.units_per_sample)} {unit} "
                    f"±{fmt_pct(s.rel_halfwidth)} ({s.steps} steps)")
        self._progress.console.print(text, highlight=False)
        self._progress.update(self._task, description=self._label)  # its job's status is over
        self._progress.advance(self._task)

    def skipped(self, cfg: ThroughputConfig) -> None:
        self._progress.console.print(safe_text(f"- {cfg.label}: already measured (--resume)",
                                               style="dim"))
        self._progress.advance(self._task)

    def end(self) -> None:
        self._progress.stop()

    def elapsed(self) -> float:
        return time.perf_counter() - self._t0


def warn(msg: str) -> None:
    # safe_markup: a message is text, and text such as "pip install 'dlbench[train]'" is not markup
    stderr.print(f"[yellow]warning:[/yellow] {safe_markup(msg)}", soft_wrap=True)


def error(msg: str) -> None:
    # soft_wrap: a message is as many lines as it has, never folded at the console's width
    stderr.print(f"[red]error:[/red] {safe_markup(msg)}", highlight=False, soft_wrap=True)


def is_tty() -> bool:
    return sys.stderr.isatty()
